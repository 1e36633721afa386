"""What the vLLM and SGLang plugins share: the engine version check, the split of an output
into reasoning and the answer after it, and the answer side (content and calls) as deltas.

Both engines hand a request's output to two objects in turn: a reasoning parser until the
reasoning span ends, then a tool parser for the rest. So the plugins split the output where
``StreamParser`` ends reasoning (the first ``</think>``) and give the rest to a second
``StreamParser`` reading it as an answer (``thinking=False``). Everything after the first
``</think>`` is read by the same rules either way, except one case: a ``<think>`` marker at the
very start of the answer opens a reasoning span there (``parse_completion`` with
``thinking=True`` would keep it as content text). A model does not write ``</think><think>``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, cast

from .. import markers as mk
from ..conversation import ToolCall
from ..encoder import MarkersInText
from ..errors import ParseError
from ..parser import (
    Completion,
    ContentDelta,
    ReasoningDelta,
    StreamParser,
    ToolCallEvent,
    parse_completion,
)

logger = logging.getLogger("qwen_encode.integrations")

# The turn ends at these: an engine may pass the stop token's ID along with the output.
_END_OF_OUTPUT = (mk.TURN_CLOSE, mk.END_OF_TEXT)


def require_engine(distribution: str, minimum: tuple[int, ...]) -> None:
    """ImportError naming the needed version when ``distribution`` is absent or older."""
    wanted = ".".join(map(str, minimum))
    try:
        installed = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise ImportError(
            f"qwen_encode.integrations needs {distribution}>={wanted}, which is not installed: "
            f'pip install "qwen-encode[{distribution}]"'
        ) from None
    numbers: list[int] = []
    for part in installed.split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    if tuple(numbers) < minimum:
        raise ImportError(
            f"qwen_encode.integrations needs {distribution}>={wanted}, found {installed}: "
            f'pip install -U "qwen-encode[{distribution}]"'
        )


#: The server-level switch of the renderers for caller text that spells a control token.
MARKERS_ENV = "QWEN_ENCODE_MARKERS_IN_TEXT"


def markers_in_text_mode() -> MarkersInText:
    """The renderers' ``markers_in_text``: "literal" (the safety model) unless the server's
    environment chooses "reject" or "atomic"; anything else stops the server naming the
    variable."""
    mode = os.environ.get(MARKERS_ENV, "literal")
    if mode not in ("literal", "reject", "atomic"):
        raise ValueError(f"{MARKERS_ENV}={mode!r}: must be literal, reject or atomic")
    return cast(MarkersInText, mode)


def tool_dicts(tools: Any) -> list[dict[str, Any]] | None:
    """The engine's tool objects (pydantic models) as the OpenAI dicts the parser types by."""
    if not tools:
        return None
    out = []
    for tool in tools:
        if hasattr(tool, "model_dump"):
            tool = tool.model_dump(exclude_none=True)
        if isinstance(tool, Mapping):
            out.append(dict(tool))
    return out or None


def chat_thinking(chat_template_kwargs: Any) -> bool:
    """Whether the prompt's primer left ``<think>`` open: the Qwen 3.8 template writes the
    empty closed span only for ``enable_thinking`` false (chat_template.jinja, the primer)."""
    if isinstance(chat_template_kwargs, Mapping):
        return chat_template_kwargs.get("enable_thinking") is not False
    return True


def arguments_json(call: ToolCall) -> str:
    """The arguments as the engines stream them: one JSON object, non-ASCII kept."""
    return json.dumps(dict(call.arguments), ensure_ascii=False)


class TokenizerMarkers:
    """A ``MarkerEncoder`` over an engine's (Hugging Face style) tokenizer: the markers are the
    vocabulary's added tokens at their atomic IDs; ordinary IDs decode with the tokenizer's
    lossy UTF-8 decoding."""

    def __init__(self, tokenizer: Any) -> None:
        vocab = tokenizer.get_vocab()
        self._tokenizer = tokenizer
        self.marker_ids: dict[str, int] = {
            marker: vocab[marker] for marker in mk.ALL_ADDED_TOKENS if marker in vocab
        }
        self.think_open = self.marker_ids.get(mk.THINK_OPEN)
        self.think_close = self.marker_ids.get(mk.THINK_CLOSE)
        self.tool_call_open = self.marker_ids.get(mk.TOOL_CALL_OPEN)
        self.end_ids = frozenset(self.marker_ids[m] for m in _END_OF_OUTPUT if m in vocab)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=False))


class Trimmed:
    """``str.strip`` as a stream: the deltas it returns concatenate to the stripped whole."""

    __slots__ = ("_pending", "_started")

    def __init__(self) -> None:
        self._started = False
        self._pending = ""

    def feed(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._pending += text
            return ""
        out = self._pending + body
        self._pending = text[len(body) :]
        return out


def hold_split(raw: str, reasoning: str | None) -> int | None:
    """Where the answer starts in ``raw`` (reasoning with no ``</think>``) when a call ended the
    reasoning: the ``<tool_call>`` before which the text is exactly ``reasoning``."""
    want = reasoning or ""
    pos = raw.find(mk.TOOL_CALL_OPEN)
    while pos != -1:
        before = raw[:pos].strip()
        before = before.removeprefix(mk.THINK_OPEN).strip()
        if before == want:
            return pos
        pos = raw.find(mk.TOOL_CALL_OPEN, pos + 1)
    return None


def split_reasoning_text(text: str, thinking: bool) -> tuple[str | None, str]:
    """Non-streaming: (reasoning, the raw answer after it) of a text output, as
    ``parse_completion(text, thinking=thinking)`` splits it."""
    if not thinking:
        rest = text.lstrip()
        if not rest.startswith(mk.THINK_OPEN):
            return None, text
    close = text.find(mk.THINK_CLOSE)
    if close != -1:
        end = close + len(mk.THINK_CLOSE)
        return _reasoning_of(text[:end], thinking), text[end:]
    # No </think>: all reasoning (cut off), unless a call ended it (the parser's HOLD rule);
    # the parser's spans say where the answer began.
    try:
        parsed = parse_completion(text, thinking=thinking)
    except ParseError:
        reasoning = _reasoning_of(text, thinking)
        start = hold_split(text, reasoning)
    else:
        reasoning, start = parsed.reasoning, answer_start(parsed)
    if start is None:
        return reasoning, ""
    return reasoning, text[start:]


def answer_start(completion: Completion) -> int | None:
    """Where the answer begins in the text a completion was read from (its first content or
    call span), from the parser's own spans; None when it is all reasoning."""
    starts = [span.start for span in completion.spans if span.kind in ("content", "tool_call")]
    return min(starts) if starts else None


def _reasoning_of(text: str, thinking: bool) -> str | None:
    """The trimmed reasoning of a prefix that holds no answer (it ends at the first
    ``</think>``, or has none): the parser's own reading, so every reasoning rule applies."""
    parser = StreamParser(thinking=thinking)
    try:
        events = parser.feed(text) + parser.flush()
    except ParseError:
        # Only a call span raises, and a call ends reasoning (no </think> came): the reasoning
        # is what stands before its <tool_call>.
        before = text[: max(text.find(mk.TOOL_CALL_OPEN), 0)].strip()
        return before.removeprefix(mk.THINK_OPEN).strip() or None
    return "".join(e.text for e in events if isinstance(e, ReasoningDelta)).strip() or None


@dataclass
class Delta:
    """What one step of the answer side produced."""

    content: str = ""
    reasoning: str = ""
    calls: list[tuple[int, ToolCall]] = field(default_factory=list)


class AnswerStream:
    """The answer after reasoning (content and tool calls), read by one ``StreamParser`` with
    ``thinking=False``, as trimmed deltas: batch is feed-everything-then-``finish``, so batch and
    streaming agree by construction.

    Not lost: an unterminated call at the end (``Completion.unterminated``) is content, with one
    warning; after a ``ParseError`` (a closed span that holds no well-formed call) the whole
    answer's raw text is the content, with one warning.
    """

    def __init__(self, tools: Any = None, encoder: TokenizerMarkers | None = None) -> None:
        self._parser = StreamParser(tools=tools, thinking=False, encoder=encoder)
        self._encoder = encoder
        self._content = Trimmed()
        self._reasoning = Trimmed()
        self._raw: list[Any] = []  # what was fed, kept for the ParseError fallback
        self._said = ""  # the content returned so far
        self._failed = False
        self._ended = False
        self.calls: list[ToolCall] = []

    def feed(self, delta: str | Sequence[int]) -> Delta:
        out = Delta()
        if self._ended:
            return out
        if not isinstance(delta, str):
            delta, ended = self._until_end(delta)
            if not delta and not ended:
                return out
        else:
            ended = False
        if self._failed:
            self._say(self._text(delta), out)
        else:
            self._remember(delta)
            try:
                self._take(self._parser.feed(delta), out)
            except ParseError as error:
                self._fail(error, out)
        if ended:
            self._finish(out)
        return out

    def finish(self) -> Delta:
        out = Delta()
        if not self._ended:
            self._finish(out)
        return out

    def _finish(self, out: Delta) -> None:
        self._ended = True
        if self._failed:
            return
        try:
            self._take(self._parser.flush(), out)
        except ParseError as error:
            self._fail(error, out)
            return
        unterminated = self._parser.finish().unterminated
        if unterminated is not None:
            logger.warning(
                "the output ended inside a tool call (%d characters from <tool_call>); it was "
                "not dispatched and is returned as content",
                len(unterminated),
            )
            self._say(unterminated, out)

    def _until_end(self, ids: Iterable[int]) -> tuple[list[int], bool]:
        assert self._encoder is not None
        ids = list(ids)
        for i, token in enumerate(ids):
            if token in self._encoder.end_ids:
                return ids[:i], True
        return ids, False

    def _text(self, delta: str | Sequence[int]) -> str:
        if isinstance(delta, str):
            return delta
        assert self._encoder is not None
        return self._encoder.decode(delta)

    def _remember(self, delta: str | Sequence[int]) -> None:
        if isinstance(delta, str):
            self._raw.append(delta)
        else:
            self._raw.extend(delta)

    def _take(self, events: list[Any], out: Delta) -> None:
        for event in events:
            if isinstance(event, ContentDelta):
                self._say(event.text, out)
            elif isinstance(event, ReasoningDelta):
                out.reasoning += self._reasoning.feed(event.text)
            elif isinstance(event, ToolCallEvent):
                self.calls.append(event.call)
                out.calls.append((event.index, event.call))

    def _say(self, text: str, out: Delta) -> None:
        said = self._content.feed(text)
        self._said += said
        out.content += said

    def _fail(self, error: ParseError, out: Delta) -> None:
        # From here on the answer is its raw text, trimmed: what was already streamed is a
        # prefix of it unless the parser had dropped something (a stray </think>).
        self._failed = True
        if self._raw and isinstance(self._raw[0], str):
            raw = "".join(self._raw)
        else:
            raw = self._text(self._raw)
        self._raw = []
        logger.warning("tool call markup did not parse (%s); it is returned as content", error)
        lead = raw.lstrip()
        body = lead.rstrip()
        rest = body[len(self._said) :] if body.startswith(self._said) else body
        self._content = Trimmed()
        self._content.feed(body)  # the state of a Trimmed that saw the raw text from the start
        self._content.feed(lead[len(body) :])
        self._said += rest
        out.content += rest


def answer_of(text: str, tools: Any) -> tuple[str | None, list[ToolCall]]:
    """Non-streaming answer side: (content, calls) of the text after reasoning."""
    stream = AnswerStream(tools=tools)
    first = stream.feed(text)
    last = stream.finish()
    return (first.content + last.content) or None, stream.calls


class ReasoningText:
    """Streaming split of a text output (SGLang hands its parsers text): reasoning deltas until
    the first ``</think>`` (held back while a delta may end inside it), then the raw answer,
    trimmed, for the tool detector."""

    def __init__(self, thinking: bool) -> None:
        self._parser = StreamParser(thinking=thinking)
        self._phase = "reasoning" if thinking else "start"
        self._held = ""  # a possible start of </think> (or of a leading <think>)
        self._raw: list[str] = []  # the reasoning text fed, for the no-</think> case at the end
        self._said: list[str] = []  # the reasoning events, untrimmed
        self._reasoning = Trimmed()
        self._answer = Trimmed()

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning delta, answer delta) for the next piece of text."""
        text = self._held + text
        self._held = ""
        if self._phase == "start":
            head = text.lstrip()
            if len(head) < len(mk.THINK_OPEN) and mk.THINK_OPEN.startswith(head):
                self._held = text
                return "", ""
            if not head.startswith(mk.THINK_OPEN):
                self._phase = "answer"
                return "", self._answer.feed(text)
            self._phase = "reasoning"
        if self._phase == "answer":
            return "", self._answer.feed(text)
        close = text.find(mk.THINK_CLOSE)
        if close == -1:
            keep = _partial_suffix(text, mk.THINK_CLOSE)
            self._held = text[len(text) - keep :] if keep else ""
            return self._reason(text[: len(text) - keep]), ""
        end = close + len(mk.THINK_CLOSE)
        reasoning = self._reason(text[:end])
        self._phase = "answer"
        return reasoning, self._answer.feed(text[end:])

    def finish(self) -> tuple[str, str]:
        held, self._held = self._held, ""
        if self._phase != "reasoning":
            return "", self._answer.feed(held) if held else ""
        self._phase = "answer"
        self._raw.append(held)
        raw = "".join(self._raw)
        try:
            events = self._parser.feed(held) + self._parser.flush()
        except ParseError:
            # A call span that does not parse ended reasoning: no spans, so find its start.
            reasoning = self._take([])
            start = hold_split(raw, "".join(self._said).strip() or None)
        else:
            reasoning = self._take(events)
            start = answer_start(self._parser.finish())
        answer = self._answer.feed(raw[start:]) if start is not None else ""
        return reasoning, answer

    def _reason(self, text: str) -> str:
        if not text:
            return ""
        self._raw.append(text)
        try:
            events = self._parser.feed(text)
        except ParseError:  # pragma: no cover - the parser raises only on a closed call span
            events = []
        return self._take(events)

    def _take(self, events: list[Any]) -> str:
        said = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        self._said.append(said)
        return self._reasoning.feed(said)


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that is a proper start of ``marker``."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
