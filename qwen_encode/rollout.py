"""Sampled turns of a rollout: token IDs an engine sampled, kept verbatim in the conversation.

A sampled turn enters the next prompt as the IDs that were sampled, not as a re-rendering of
their parse: re-rendering gives other IDs in most real turns (Qwen 3.8's primer ends ``<think>``
``\\n`` and an empty reasoning span is sampled as ``\\n`` ``</think>``, which history renders as
one ``\\n\\n`` token; a word sampled in two tokens is re-encoded as one; whitespace is trimmed;
JSON arguments are re-serialised; an atomic ``<tool_call>`` in prose becomes text), and training
on IDs other than the sampled ones is off-policy.

The piece a sampled turn contributes to every later prompt is
``primer IDs + kept sampled IDs + closers + "\\n"``: the primer is the generation prompt the turn
was sampled after (the tail of the prompt sent), the closers are written only for a turn that
stopped without ``<|im_end|>``, and ``"\\n"`` is what the template writes after every
``<|im_end|>``. Turns begin and end on atomic markers, so no BPE merge crosses into the piece and
the next prompt is the previous prompt plus the sampled IDs plus only what the template puts
between turns.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from . import markers as mk
from .errors import ParseError, PromptError, QwenEncodeError, TokenIdError, shown
from .protocol import Prompt, Segment, Special, Text, TurnLayout, render_turn
from .provenance import PROTOCOL, SAMPLED, SYNTHESIZED

if TYPE_CHECKING:
    from .encoder import Encoder, Encoding
    from .parser import Completion

__all__ = [
    "DRIFT_KINDS",
    "FIELD_KINDS",
    "Drift",
    "FieldAttribution",
    "SampledTurn",
    "field_attribution",
]

#: Why a re-rendered parse can differ from the sampled IDs (``Drift.kind``).
DRIFT_KINDS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "primer_merge": "the primer's '\\n' and the sampled text after it are one token in history "
        "(empty reasoning: '\\n' + '\\n' sampled apart, rendered as one '\\n\\n')",
        "bpe_split": "the same text, sampled in other (non-canonical) tokens than BPE gives",
        "marker_identity": "a marker sampled atomically is re-encoded as text, or the reverse",
        "trim": "whitespace the template trims (around reasoning, content or between calls)",
        "json_reserialization": "tool-call arguments sampled in another JSON spelling",
        "dropped_markup": "sampled text the parse does not keep (an unterminated call, stray "
        "closers, text after the calls)",
        "truncation": "the turn stopped without <|im_end|>: the closers were written, not sampled",
        "template_drop": "the template drops this turn's reasoning (preserve_thinking=False and a "
        "later real user query)",
        "unparsed": "the sampled IDs do not parse as a turn: nothing to re-render",
    }
)

# A trailing <|endoftext|> after <|im_end|> (an engine run with ignore_eos, or one stopping on
# either generation_config stop token) is sampled but never part of a conversation: the template
# writes '<|im_end|>\n' between turns. It stays in SampledTurn.ids/logprobs and leaves the prompt.
_DROPPED_STOP = mk.END_OF_TEXT


@dataclass(frozen=True)
class Drift:
    """Whether re-rendering a sampled turn's parse gives its IDs, and if not where and why.

    ``position`` is the first differing token, counted from the turn's ``<|im_start|>``
    (the primer's first token); ``sampled`` and ``rendered`` are a few IDs from there on each
    side; ``kind`` one of ``DRIFT_KINDS``; ``detail`` a sentence for people."""

    index: int
    same: bool
    kind: str | None = None
    position: int | None = None
    sampled: tuple[int, ...] = ()
    rendered: tuple[int, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class SampledTurn:
    """One assistant turn as an engine sampled it.

    ``ids`` are exactly the IDs given to ``append_sampled``; the first ``kept`` of them are in
    the conversation (``ids[kept:]`` is a dropped trailing ``<|endoftext|>``). ``closers`` are
    the IDs written to close a turn that stopped without ``<|im_end|>``. ``stop`` is the stop
    marker that ended it (``"<|im_end|>"``, ``"<|endoftext|>"``) or None. ``completion`` is the
    parse (None with ``parse_error`` when the IDs do not parse): it is what the environment acts
    on, never what the next prompt holds. ``primer`` is the generation prompt the turn was
    sampled after and ``prompt_length`` the length of that whole prompt."""

    index: int
    ids: tuple[int, ...]
    kept: int
    closers: tuple[int, ...]
    primer: tuple[int, ...]
    prompt_length: int
    stop: str | None
    finish_reason: str | None
    logprobs: tuple[float, ...] | None
    completion: Completion | None
    parse_error: QwenEncodeError | None
    thinking: bool
    extras: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def truncated(self) -> bool:
        """The turn stopped without ``<|im_end|>`` (length limit, stop string, EOS alone)."""
        return bool(self.closers)


def check_sampled(encoder: Encoder, ids: Any, logprobs: Any, finish_reason: Any) -> list[int]:
    """The sampled IDs, checked: valid IDs, no turn opened inside, nothing after a stop marker
    but a trailing ``<|endoftext|>``; ``logprobs`` one number per ID."""
    checked = encoder.check_ids(ids)
    marker_ids = encoder.marker_ids
    turn_open, turn_close = marker_ids[mk.TURN_OPEN], marker_ids[mk.TURN_CLOSE]
    eot = marker_ids[mk.END_OF_TEXT]
    for position, token in enumerate(checked):
        if token == turn_open:
            raise TokenIdError(
                "<|im_start|> inside a sampled turn: a turn cannot open another", position=position
            )
        if token in (turn_close, eot) and any(t != eot for t in checked[position + 1 :]):
            raise TokenIdError(
                f"{encoder.decode([token])} is followed by more sampled tokens: the engine did "
                "not stop at it (cut the output at the stop marker)",
                position=position,
            )
    if finish_reason is not None and not isinstance(finish_reason, str):
        raise PromptError(
            f"must be a string or None, got {shown(finish_reason)}", field="finish_reason"
        )
    if logprobs is not None:
        values = (
            None
            if isinstance(logprobs, str | bytes | Mapping) or not isinstance(logprobs, Iterable)
            else list(logprobs)
        )
        if values is None or len(values) != len(checked):
            raise PromptError(
                f"must hold one log-probability per sampled ID ({len(checked)}), got "
                f"{shown(logprobs)}",
                field="logprobs",
            )
        for position, value in enumerate(values):
            if _logprob(value) is None:
                raise PromptError(
                    f"expected a log-probability (a number <= 0), got {shown(value)}",
                    field=f"logprobs[{position}]",
                )
    return checked


def _logprob(value: object) -> float | None:
    """``value`` as a log-probability (a number <= 0), or None when it is not one. An integer
    too large for a float is not one either (float() would raise OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return None if math.isnan(number) or number > 0 else number


def split_stop(ids: list[int], marker_ids: Mapping[str, int]) -> tuple[int, str | None]:
    """How many of ``ids`` stay in the conversation, and the stop marker that ended them."""
    eot, turn_close = marker_ids[mk.END_OF_TEXT], marker_ids[mk.TURN_CLOSE]
    end = len(ids)
    while end and ids[end - 1] == eot:
        end -= 1
    if end and ids[end - 1] == turn_close:
        return end, mk.TURN_CLOSE
    return end, _DROPPED_STOP if end < len(ids) else None


def closing_segments(
    ids: Sequence[int], marker_ids: Mapping[str, int], thinking: bool, decode: Any
) -> tuple[Segment, ...]:
    """The template's own closers for the state a turn without ``<|im_end|>`` ends in: an open
    reasoning span ``\\n</think>\\n\\n`` (template: reasoning + '\\n</think>\\n\\n' + content), an
    open call the rest of its grammar ('\\n</parameter>\\n', '</function>\\n', ``</tool_call>``),
    then ``<|im_end|>``."""
    by_id = {token: marker for marker, token in marker_ids.items()}
    in_reasoning = thinking
    call_start: int | None = None
    for position, token in enumerate(ids):
        marker = by_id.get(token)
        if marker == mk.THINK_OPEN:
            in_reasoning = True
        elif marker == mk.THINK_CLOSE:
            in_reasoning = False
        elif marker == mk.TOOL_CALL_OPEN and not in_reasoning:
            call_start = position
        elif marker == mk.TOOL_CALL_CLOSE and not in_reasoning:
            call_start = None
    segments: list[Segment] = []
    if in_reasoning:
        segments += [Text("\n"), Special(mk.THINK_CLOSE), Text("\n\n")]
    elif call_start is not None:
        text = decode(list(ids[call_start + 1 :]))
        closing = ""
        if text.rfind("<parameter=") > text.rfind("</parameter>"):
            closing += "\n</parameter>\n"
        if text.rfind("<function=") > text.rfind("</function>"):
            closing += "</function>\n"
        if closing:
            segments.append(Text(closing))
        segments.append(Special(mk.TOOL_CALL_CLOSE))
    segments.append(Special(mk.TURN_CLOSE))
    return tuple(segments)


def parse_sampled(
    encoder: Encoder, ids: list[int], tools: Any, thinking: bool
) -> tuple[Completion | None, QwenEncodeError | None]:
    """The parse of the kept IDs without their stop marker (the parser need not know it)."""
    from .parser import parse_completion  # the parser reads turns; the session only feeds it

    turn_close = encoder.marker_ids[mk.TURN_CLOSE]
    body = ids[:-1] if ids and ids[-1] == turn_close else ids
    try:
        return parse_completion(body, tools=tools, thinking=thinking, encoder=encoder), None
    except (ParseError, PromptError) as error:
        return None, error


def sampled_piece(
    encoder: Encoder, turn: SampledTurn, primer: Encoding, index: int
) -> tuple[Encoding, tuple[int, ...]]:
    """The IDs a sampled turn puts in every later prompt (see the module docstring), with the
    closers' IDs."""
    from .encoder import Encoding  # a value type of the layer below the session's caller

    kept = np.asarray(turn.ids[: turn.kept], dtype=np.int32)
    closers = np.asarray(turn.closers, dtype=np.int32)
    newline = encoder.encode(Prompt((Text("\n"),))).input_ids
    parts = [primer.input_ids, kept, closers, newline]
    lengths = [len(p) for p in parts]
    input_ids = np.concatenate(parts).astype(np.int32, copy=False)
    provenance = np.concatenate(
        [
            primer.provenance,
            np.full(lengths[1], SAMPLED, dtype=np.int8),
            np.full(lengths[2], SYNTHESIZED, dtype=np.int8),
            np.full(lengths[3], PROTOCOL, dtype=np.int8),
        ]
    )
    sampled = provenance == SAMPLED
    logprobs = np.full(len(input_ids), np.nan, dtype=np.float32)
    if turn.logprobs is not None:
        logprobs[lengths[0] : lengths[0] + lengths[1]] = turn.logprobs[: turn.kept]
    piece = Encoding(
        input_ids=input_ids,
        assistant_mask=sampled.copy(),
        turn_index=np.full(len(input_ids), index, dtype=np.int32),
        provenance=provenance,
        sampled_mask=sampled,
        logprobs=logprobs,
    )
    return piece, tuple(closers.tolist())


# --------------------------------------------------------------------------------------------
# Drift


def drift_report(
    encoder: Encoder, turn: SampledTurn, piece: Encoding, layout: TurnLayout | None = None
) -> Drift:
    """Compare a sampled turn's piece with what the template renders for its parse."""
    index = turn.index
    if layout is not None and not layout.keep_reasoning:
        return Drift(
            index,
            False,
            "template_drop",
            0,
            detail="the template renders this turn without its "
            "reasoning span now (preserve_thinking=False, a later real user query)",
        )
    if turn.completion is None:
        return Drift(index, False, "unparsed", detail=str(turn.parse_error))
    rendered = encoder.encode(Prompt(render_turn(turn.completion.to_turn(), index, TurnLayout())))
    mine, theirs = piece.input_ids.tolist(), rendered.input_ids.tolist()
    if mine == theirs:
        return Drift(index, True)
    position = next(
        (i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
        min(len(mine), len(theirs)),
    )
    kind, detail = _classify(encoder, turn, mine, theirs, position)
    return Drift(
        index,
        False,
        kind,
        position,
        tuple(mine[position : position + 6]),
        tuple(theirs[position : position + 6]),
        detail,
    )


def _classify(
    encoder: Encoder, turn: SampledTurn, mine: list[int], theirs: list[int], position: int
) -> tuple[str, str]:
    primer_end = len(turn.primer)
    closers_start = primer_end + turn.kept
    if turn.closers and position >= closers_start - 1:
        return "truncation", f"the turn ends in {len(turn.closers)} closer IDs the session wrote"
    if position < primer_end:
        return "primer_merge", "the primer's last token and the first sampled ones merge in history"
    text_a = encoder.decode(mine)
    text_b = encoder.decode(theirs)
    if text_a == text_b:
        specials = set(encoder.vocabulary.added_tokens.values())
        window_a = set(mine[position : position + 8]) & specials
        window_b = set(theirs[position : position + 8]) & specials
        if window_a != window_b:
            return "marker_identity", "a marker sampled atomically is rendered as text, or back"
        return "bpe_split", "the same text in other tokens than BPE gives (a non-canonical split)"
    matcher = difflib.SequenceMatcher(None, text_a, text_b, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        part_a, part_b = text_a[a0:a1], text_b[b0:b1]
        if not part_a.strip() and not part_b.strip():
            call = text_a.rfind("<tool_call>", 0, a0) > text_a.rfind("</tool_call>", 0, a0)
            if call and _json_context(text_a, a0):
                return "json_reserialization", f"arguments respelled: {part_a!r} -> {part_b!r}"
            return "trim", f"whitespace the template trims: {part_a!r} -> {part_b!r}"
        if _json_context(text_a, a0) or _json_context(text_b, b0):
            return "json_reserialization", f"arguments respelled: {part_a!r} -> {part_b!r}"
        return "dropped_markup", f"sampled {part_a[:60]!r}, rendered {part_b[:60]!r}"
    return "bpe_split", "the same text in other tokens than BPE gives"


def _json_context(text: str, at: int) -> bool:
    window = text[max(0, at - 2) : at + 2]
    return any(ch in window for ch in '{}[]:,"')


# --------------------------------------------------------------------------------------------
# Per-field attribution of sampled tokens

#: ``FieldAttribution.kind`` codes: the parser's span kinds (-1: markup between fields, such as
#: a ``<parameter=...>`` tag or the whitespace the template trims).
FIELD_KINDS: Final[tuple[str, ...]] = ("reasoning", "content", "tool_call", "argument", "stop")


@dataclass(frozen=True, eq=False)
class FieldAttribution:
    """For each kept sampled token of a turn: the field of the parse it belongs to (``kind``,
    an index into ``FIELD_KINDS``), the call it is in (``call_index``, -1 outside calls) and the
    parameter it is the value of (``names``, None outside arguments)."""

    kind: np.ndarray
    call_index: np.ndarray
    names: tuple[str | None, ...]


def field_attribution(turn: SampledTurn) -> FieldAttribution | None:
    """Per-token fields of a sampled turn, from the parser's spans (``Completion.spans``:
    kind, token_start, token_end, call_index, name). None when the parse carries no spans (a
    parser without them, or IDs that did not parse). An argument's tokens are also inside
    their call: the innermost span wins."""
    spans = getattr(turn.completion, "spans", None)
    if not spans:
        return None
    size = turn.kept
    kind = np.full(size, -1, dtype=np.int8)
    call_index = np.full(size, -1, dtype=np.int16)
    names: list[str | None] = [None] * size
    # Outer spans first, so an argument overwrites its call.
    order = {"reasoning": 0, "content": 0, "stop": 0, "tool_call": 1, "argument": 2}
    for span in sorted(spans, key=lambda s: order.get(s.kind, 0)):
        if span.kind not in FIELD_KINDS or span.token_start is None or span.token_end is None:
            continue
        where = slice(max(0, span.token_start), min(size, span.token_end))
        kind[where] = FIELD_KINDS.index(span.kind)
        if span.call_index is not None:
            call_index[where] = span.call_index
        if span.kind == "argument":
            names[where] = [span.name] * len(range(size)[where])
    if turn.stop == mk.TURN_CLOSE and size:  # the parser saw the IDs without their stop
        kind[size - 1] = FIELD_KINDS.index("stop")
    return FieldAttribution(kind, call_index, tuple(names))
