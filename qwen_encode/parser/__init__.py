"""Qwen 3.8 completions -> reasoning, content, tool calls and where each came from, in one pass,
batch or streaming, from text or token IDs.

The package is cut along its concerns: ``events`` (what comes back: ``Completion``, ``Span``,
the stream events), ``values`` (typing a parameter value), ``quoting`` (Markdown fences and code
spans), ``machine`` (the outer grammar), ``tail`` and ``calls`` (the calls, read once the output
ended), ``inputs`` (text or token IDs in, the stop out). The rules are in each module's doc.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..conversation import ToolCall
from ..errors import ParseError, PromptError
from .events import (
    Completion,
    ContentDelta,
    MarkerEncoder,
    ReasoningDelta,
    Span,
    StreamEvent,
    ToolCallEvent,
)
from .inputs import _check_flag, _IdSplitter, _Splitter, _splitter, _TextSplitter
from .machine import _FirstCall, _Machine
from .values import MAX_DEPTH, _schema_lookup, typed_parameter_value

__all__ = [
    "MAX_DEPTH",
    "Completion",
    "ContentDelta",
    "MarkerEncoder",
    "ReasoningDelta",
    "Span",
    "StreamEvent",
    "StreamParser",
    "ToolCallEvent",
    "parse_completion",
    "parse_tool_call",
    "typed_parameter_value",
]


def parse_completion(
    output: str | Sequence[int],
    tools: Any = None,
    thinking: bool = True,
    encoder: MarkerEncoder | None = None,
) -> Completion:
    """Parse a whole completion (text, or token IDs decoded with ``encoder``).

    ``thinking=True`` means the prompt's primer left the reasoning span open. ``tools`` (OpenAI
    tools list) types the parameter values by schema. Raises ``ParseError`` when a closed call
    span does not hold a well-formed call.
    """
    machine, splitter = _run(output, tools, thinking, encoder)
    return machine.completion(splitter)


def parse_tool_call(
    response: str | Sequence[int],
    *,
    tools: Any = None,
    thinking: bool = False,
    encoder: MarkerEncoder | None = None,
) -> ToolCall | None:
    """The first complete call in ``response``, or None (no call, or only an unterminated one).

    ``response`` is read as ``parse_completion`` reads it, by default as an answer
    (``thinking=False``: only a leading ``<think>`` opens reasoning, whose markup is never a
    call). Spans after the first call are not looked at; a malformed span before it raises
    ``ParseError``.
    """
    try:
        machine, _ = _run(response, tools, thinking, encoder, stop_at_first_call=True)
    except _FirstCall as first:
        return first.call
    return machine.calls[0] if machine.calls else None


def _run(
    output: Any,
    tools: Any,
    thinking: bool,
    encoder: MarkerEncoder | None,
    stop_at_first_call: bool = False,
) -> tuple[_Machine, _Splitter]:
    machine = _Machine(_schema_lookup(tools), _check_flag("thinking", thinking))
    machine.stop_at_first_call = stop_at_first_call
    splitter = _splitter(output, encoder)
    try:
        for piece in splitter.feed(output):
            machine.push(*piece)
        for piece in splitter.end():
            machine.push(*piece)
        machine.end()
    except _FirstCall:
        raise _FirstCall(machine.calls[0]) from None
    return machine, splitter


class StreamParser:
    """Incremental ``parse_completion``: feed text deltas or token IDs, get events.

    Any chunking gives the same final ``Completion`` as ``parse_completion`` on the whole output,
    and the same events: joined, the ``ReasoningDelta`` texts and the ``ContentDelta`` texts,
    each trimmed with ``str.strip`` (empty -> None), equal ``reasoning`` and ``content``; the
    ``ToolCallEvent`` calls are ``tool_calls``. Text is held back only while it may still be part
    of a marker, of a ``<tool_call>`` opener, of a UTF-8 character, or (see the module doc) of a
    call inside a reasoning span that never closed. ``flush()`` releases it at the end of input;
    ``finish()`` flushes (if you did not) and returns the ``Completion``. A ``ParseError`` is
    raised by the ``feed``/``flush`` that completes the bad span, with the batch offset; the
    parser is unusable after it.
    """

    def __init__(
        self, tools: Any = None, thinking: bool = True, encoder: MarkerEncoder | None = None
    ) -> None:
        self._machine = _Machine(_schema_lookup(tools), _check_flag("thinking", thinking))
        self._encoder = encoder
        self._splitter: _TextSplitter | _IdSplitter | None = None
        self._error: ParseError | None = None
        self._ended = False

    def feed(self, delta: str | Sequence[int]) -> list[StreamEvent]:
        """Add a text delta or a list of token IDs; return the events it completes."""
        self._check_open()
        if self._splitter is None:
            self._splitter = _splitter(delta, self._encoder)
        splitter = self._splitter
        if isinstance(splitter, _TextSplitter):
            pieces = splitter.feed(delta) if isinstance(delta, str) else None
        else:
            pieces = None if isinstance(delta, str) else splitter.feed(delta)
        if pieces is None:
            raise PromptError("feed either text deltas or token IDs, not both", field="delta")
        return self._advance(pieces)

    def flush(self) -> list[StreamEvent]:
        """End of input: the events for everything still held back."""
        if self._ended:
            return []
        self._check_open()
        pieces = self._splitter.end() if self._splitter is not None else []
        events = self._advance(pieces, end=True)
        self._ended = True
        return events

    def finish(self) -> Completion:
        """End of input; the same ``Completion`` as ``parse_completion``. It flushes if you did
        not, but then the flushed events are only in the result: call ``flush()`` first when
        you forward events."""
        self.flush()
        return self._machine.completion(self._splitter)

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self._ended:
            raise PromptError("the stream is finished: feed after flush()", field="delta")

    def _advance(self, pieces: list[tuple[bool, str]], end: bool = False) -> list[StreamEvent]:
        machine = self._machine
        try:
            for is_marker, text in pieces:
                machine.push(is_marker, text)
            if end:
                machine.end()
        except ParseError as error:
            self._error = error
            raise
        events, machine.events = machine.events, []
        return events
