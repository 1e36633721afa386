"""What the parser gives back: the ``Completion``, its ``Span`` map, and the streaming events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from ..conversation import ToolCall, Turn

SpanKind: TypeAlias = Literal["reasoning", "content", "tool_call", "argument", "stop"]


@dataclass(frozen=True, slots=True)
class Span:
    """Where one part of a completion came from.

    ``start``/``end`` are character offsets into the completion text (half-open); for token IDs
    the text is the IDs decoded with every marker spelled out, as ``decode`` with
    ``skip_special_tokens=False`` gives it. ``token_start``/``token_end`` are positions in the
    IDs (half-open; a token that straddles a boundary belongs to the part it starts in and to
    the one it ends in), None when the completion was text. ``call_index`` is the call's index in
    ``tool_calls`` for "tool_call" and "argument"; ``name`` is the parameter for "argument".

    Spans are raw: a "reasoning" span runs from after ``<think>`` (or the start) to its
    ``</think>``, a "content" span is text as it stood between the other parts (untrimmed:
    ``"".join(text[s.start:s.end] for the content spans).strip()`` is ``content``), a
    "tool_call" span holds its ``<tool_call>`` and ``</tool_call>`` markers, an "argument" span
    is the value less the template's one leading and one trailing newline.
    """

    kind: SpanKind
    start: int
    end: int
    token_start: int | None = None
    token_end: int | None = None
    call_index: int | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """A parsed completion.

    ``reasoning`` and ``content`` are trimmed (``str.strip``, as the template trims them), None
    when empty. ``tool_calls`` are the dispatched calls in order; their ``id`` is None (the
    protocol carries no ids and the parser invents none: assign your own). ``unterminated`` is the
    raw text, from its ``<tool_call>`` on, of a trailing call span the model never closed (output
    cut off): it is not dispatched and not part of ``content``.

    ``stop`` is the marker that ended the turn (``"<|im_end|>"``, or ``"<|endoftext|>"`` when
    that alone ends the output), None when the output ended without one (cut off, or the engine
    stripped it); ``stop_extra`` holds an ``"<|endoftext|>"`` that followed ``<|im_end|>``.
    Neither is content. ``spans`` says where each part came from (``Span``); it is left out of
    equality, so two parses of the same turn from text and from IDs compare equal.
    """

    reasoning: str | None = None
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    unterminated: str | None = None
    stop: str | None = None
    stop_extra: tuple[str, ...] = ()
    spans: tuple[Span, ...] = field(default=(), compare=False, repr=False)

    def to_turn(self) -> Turn:
        """The assistant turn to append to the conversation history. An ``unterminated`` span is
        left out: it was never a call, and rendered back as content it would be prose."""
        return Turn(
            role="assistant",
            content=self.content,
            reasoning=self.reasoning,
            tool_calls=self.tool_calls,
        )

    def to_message(self) -> dict[str, Any]:
        """OpenAI-style message dict (``to_turn().to_message()``)."""
        return self.to_turn().to_message()


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """New reasoning text, untrimmed."""

    text: str


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """New content text, untrimmed."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """A call whose span closed and parsed; ``index`` is its position in ``tool_calls``."""

    index: int
    call: ToolCall


StreamEvent: TypeAlias = ReasoningDelta | ContentDelta | ToolCallEvent


class MarkerEncoder(Protocol):
    """What the parser needs of an encoder to read token IDs.

    ``marker_ids`` maps each marker string to its atomic ID; ``decode`` turns ordinary IDs into
    text. ``decode`` must decode the tokens' concatenated bytes as UTF-8, replacing each maximal
    invalid subsequence (and an incomplete trailing one) with one U+FFFD, as byte-level BPE
    decoders do (tokenizers' ``from_utf8_lossy``, Python's ``errors="replace"``): the streaming
    splitter relies on it to cut runs only where the decoding provably restarts.

    Optionally, ``vocab_size`` (an int) bounds the IDs: an ID outside ``0..vocab_size-1`` is a
    ``PromptError`` naming its position. The library's ``Encoder`` is bounded by its vocabulary
    report without it.
    """

    @property
    def marker_ids(self) -> Mapping[str, int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...
