"""The prompt value: typed segments (``Special`` markers, ``Text`` with the caller field it came
from), ``Prompt``, and the compact form prompts are built in (tuples, and the text runs the
encoder lays out, joined where they are rendered). ``protocol`` renders conversations into it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import FrozenInstanceError, dataclass
from typing import Any, Final, TypeAlias

from . import markers as mk
from ._accelerator import runs_compiled, slot_members
from .conversation import surrogate_problem
from .errors import PromptError, shown

__all__ = ["Prompt", "Segment", "Special", "Text"]

# Compiled: a C helper declared in _capi.pxd (a cimport, resolved at build time).
_COMPILED: Final = runs_compiled("prompt")
if _COMPILED:
    from cython.cimports.qwen_encode._capi import qe_set_slots


# --------------------------------------------------------------------------------------------
# Segments


@dataclass(frozen=True, slots=True)
class Special:
    """A protocol marker, to be encoded as its single vocabulary ID.

    ``turn`` is the index of the message this belongs to (-1: protocol text of no message, i.e. a
    system turn synthesised for the reasoning instruction, or the generation primer). ``trained``
    marks what a fine-tuning run trains on: an assistant turn's body and its closing marker.
    """

    marker: str
    turn: int = -1
    trained: bool = False


@dataclass(frozen=True, slots=True)
class Text:
    """Plain text. ``field`` names the caller's field it came from (``content``,
    ``tool_calls[0].arguments.city``, ``tools[2]``, …); None for text the protocol wrote."""

    text: str
    turn: int = -1
    trained: bool = False
    field: str | None = None


Segment: TypeAlias = Special | Text


# The compact form a prompt is built in: one tuple per segment, ``(text, turn, trained, field)``,
# with ``field`` the caller's field (str), None for protocol text, or ``_MARKER`` for a marker
# (``text`` is then the marker). A tuple costs 0.04 µs to make, a frozen dataclass 0.8 µs: a short
# row has ~60 segments, and building them as dataclasses was a quarter of rendering.
#
# The two sentinels are strings made at run time (never interned, so no field name is the same
# object; they are compared by identity) because a str is not tracked by the garbage collector:
# a tuple holding only strings, ints, bools and None is untracked at its first collection, while
# one holding an instance of a class stays tracked for life. A data job keeps thousands of
# prompts alive, and full collections traversing ~20 marker tuples per prompt took more time
# than rendering them.
_MARKER: Any = "".join(["\x00", "marker"])
# ``field`` of an object in a hand-made prompt that is no segment, or a segment with wrong-typed
# fields (``text`` says what is wrong, ``turn`` is its position in the prompt's segments).
_BAD: Any = "".join(["\x00", "bad"])
_Seg: TypeAlias = tuple[str, int, bool, Any]
# What the encoder lays out, made where the segments are made: one tuple per marker or text run
# (the text between two markers, joined), ``(kind, text, turn, trained, parts)``. kind:
# _RUN_MARKER, _RUN_TEXT, or _RUN_BAD (a hand-made segment that is neither Special nor Text; its
# text names the type). ``parts``: None when every segment of a run has the run's (turn,
# trained), else ``((offset, turn, trained), ...)`` where the owner changes. Runs hold no
# segment positions, so the runs of fragments (a cached system turn, each turn) concatenate as
# they are; the checks that need a run's segments (a refused marker, a lone surrogate) regroup
# them (``Prompt._run_segs``).
_RUN_MARKER, _RUN_TEXT, _RUN_BAD = 0, 1, 2
_Run: TypeAlias = tuple[int, str, int, bool, Any]


# A prompt rendered by the fused renderer of plain rows (``protocol_rows``) keeps no segments
# until asked for them (``segments``, an encoding's provenance, an error's place): in their place
# ``(_LATER, runs, head segments, head runs, tail segments, tail runs, pieces)``, the prompt's
# runs, the segments and run count of the render cache's system turn and primer around its
# turns, and each tool call's pieces (its name, its argument count, then each key and value as
# written). ``_later_segs`` makes the segments of that, as the general path writes them.
_LATER: Any = "".join(["\x00", "later"])
_Later: TypeAlias = tuple[Any, ...]


def _made(segs: Sequence[_Seg] | _Later) -> Sequence[_Seg]:
    """``segs``, made if they were left for later."""
    return _later_segs(segs) if segs and segs[0] is _LATER else segs


def _runs_of(segs: Sequence[_Seg]) -> list[_Run]:
    """The markers and text runs of ``segs`` (see ``_Run``)."""
    runs: list[_Run] = []
    i, n = 0, len(segs)
    while i < n:
        text, turn, trained, field = segs[i]
        if field is _MARKER or field is _BAD:
            runs.append((_RUN_MARKER if field is _MARKER else _RUN_BAD, text, turn, trained, None))
            i += 1
            continue
        j = i + 1
        while j < n and (field := segs[j][3]) is not _MARKER and field is not _BAD:
            j += 1
        if j == i + 1:
            runs.append((_RUN_TEXT, text, turn, trained, None))
            i = j
            continue
        parts: list[tuple[int, int, bool]] = []
        texts = []
        at = 0
        owner = None
        for k in range(i, j):
            piece, piece_turn, piece_trained, _ = segs[k]
            if (piece_turn, piece_trained) != owner:
                owner = (piece_turn, piece_trained)
                parts.append((at, piece_turn, piece_trained))
            texts.append(piece)
            at += len(piece)
        runs.append(
            (_RUN_TEXT, "".join(texts), turn, trained, tuple(parts) if len(parts) > 1 else None)
        )
        i = j
    return runs


def _seg_of(segment: Any) -> _Seg | None:
    """A public segment as a compact tuple; None for anything else, and for a segment whose
    fields have the wrong types (a hand-made ``Text([1])`` would reach the engine)."""
    kind = type(segment)
    if kind is Text:
        text, turn, trained, field = segment.text, segment.turn, segment.trained, segment.field
        if (
            isinstance(text, str)
            and type(turn) is int
            and type(trained) is bool
            and (field is None or isinstance(field, str))
        ):
            return (text, turn, trained, field)
        return None
    if kind is Special:
        marker, turn, trained = segment.marker, segment.turn, segment.trained
        if isinstance(marker, str) and type(turn) is int and type(trained) is bool:
            return (marker, turn, trained, _MARKER)
    return None


def _bad_seg(position: int, segment: Any) -> _Seg:
    """What stands for a hand-made segment ``_seg_of`` refused: a ``_BAD`` tuple whose text is
    the reason and whose turn is the segment's position (the encoder names both)."""
    kind = type(segment)
    if kind is not Text and kind is not Special:
        return (f"expected Text or Special segments, got {kind.__name__}", position, False, _BAD)
    first = "marker" if kind is Special else "text"
    value = {name: getattr(segment, name, None) for name in (first, "turn", "trained", "field")}
    checks = (
        (first, "a str", isinstance(value[first], str)),
        ("turn", "an int", type(value["turn"]) is int),
        ("trained", "a bool", type(value["trained"]) is bool),
        ("field", "a str or None", value["field"] is None or isinstance(value["field"], str)),
    )
    name, what = next((name, what) for name, what, good in checks if not good)
    reason = f"{kind.__name__}.{name} must be {what}, got {shown(value[name])}"
    return (reason, position, False, _BAD)


def _segment_of(seg: _Seg) -> Segment:
    text, turn, trained, field = seg
    return Special(text, turn, trained) if field is _MARKER else Text(text, turn, trained, field)


class Prompt:
    """A rendered prompt: typed segments, and their concatenation as ``text``.

    ``Prompt(segments)`` wraps segments made by hand. ``format_prompt`` builds a prompt in a
    compact form (tuples, and its text runs already joined for the encoder); ``segments`` is
    then built from it on first access. Immutable; equal when the segments are."""

    __slots__ = ("_head", "_runs", "_segments", "_segs", "_text")
    _head: tuple[_Run, ...] | None
    _runs: Sequence[_Run] | None
    _segments: tuple[Segment, ...] | None
    _segs: Sequence[_Seg] | _Later | None
    _text: str | None

    def __init__(self, segments: tuple[Segment, ...]) -> None:
        if type(segments) is not tuple:
            if isinstance(segments, str | bytes | Mapping) or not isinstance(segments, Iterable):
                raise PromptError(
                    f"expected a tuple of Text and Special segments, got {shown(segments)}",
                    field="segments",
                )
            segments = tuple(segments)
        object.__setattr__(self, "_segments", segments)
        object.__setattr__(self, "_segs", None)
        object.__setattr__(self, "_runs", None)
        object.__setattr__(self, "_text", None)
        object.__setattr__(self, "_head", None)

    @classmethod
    def _compact(
        cls,
        segs: Sequence[_Seg] | _Later,
        runs: Sequence[_Run] | None = None,
        head: tuple[_Run, ...] | None = None,
    ) -> Prompt:
        """``head``: the leading runs, when they are a rendered system turn that other prompts
        share (the encoder keeps their IDs as one block, keyed by these runs)."""
        prompt = cls.__new__(cls)
        if _COMPILED:
            # Its fields set directly (a row's five generic setattrs were a tenth of its
            # rendering, format_prompt's last step).
            qe_set_slots(prompt, _FIELDS, (None, segs, runs, None, head))
            return prompt
        object.__setattr__(prompt, "_segments", None)
        object.__setattr__(prompt, "_segs", segs)
        object.__setattr__(prompt, "_runs", runs)
        object.__setattr__(prompt, "_text", None)
        object.__setattr__(prompt, "_head", head)
        return prompt

    @property
    def segments(self) -> tuple[Segment, ...]:
        segments = self._segments
        if segments is None:
            segments = tuple(map(_segment_of, self._compact_segs()))
            object.__setattr__(self, "_segments", segments)
        return segments

    @property
    def text(self) -> str:
        text = self._text
        if text is None:
            text = "".join([run[1] for run in self._layout() if run[0] != _RUN_BAD])
            object.__setattr__(self, "_text", text)
        return text

    def _compact_segs(self) -> Sequence[_Seg]:
        segs = self._segs
        if segs is None:
            assert self._segments is not None  # one of the two forms is always there
            segs = [
                _seg_of(s) or _bad_seg(position, s) for position, s in enumerate(self._segments)
            ]
            object.__setattr__(self, "_segs", segs)
        else:
            made = _made(segs)
            if made is not segs:
                object.__setattr__(self, "_segs", made)
            segs = made
        return segs

    def _layout(self) -> Sequence[_Run]:
        """The markers and text runs, in order (made once; see ``_Run``)."""
        runs = self._runs
        if runs is None:
            # Made by hand, an object that is no segment is laid out in its place (_RUN_BAD), so
            # the encoder refuses it in order, after any earlier problem of the prompt.
            runs = _runs_of(self._compact_segs())
            object.__setattr__(self, "_runs", runs)
        return runs

    def _run_segs(self) -> list[list[_Seg]]:
        """Each run's segments, grouped as ``_runs_of`` groups them (for error paths)."""
        groups: list[list[_Seg]] = []
        boundary = True
        for seg in self._compact_segs():
            edge = seg[3] is _MARKER or seg[3] is _BAD
            if edge or boundary:
                groups.append([seg])
            else:
                groups[-1].append(seg)
            boundary = edge
        return groups

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Prompt):
            return NotImplemented
        return self.segments == other.segments

    def __hash__(self) -> int:
        return hash(self.segments)

    def __repr__(self) -> str:
        return f"Prompt(segments={self.segments!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Prompt, (self.segments,))

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


def _later_segs(later: Sequence[Any]) -> tuple[_Seg, ...]:
    """The segments of a prompt left for later (``_LATER``).

    The runs say everything but where a call's name, keys and values start in its run: a text
    run's segments follow from the marker before it (the protocol's text around the caller's
    is fixed there) and from whether a call follows it."""
    _, runs, head_segs, head_runs, tail_segs, tail_runs, pieces = later
    segs = list(head_segs)
    _turn_segs(segs, runs, head_runs, len(runs) - tail_runs, pieces)
    segs += tail_segs
    return tuple(segs)


# What a call's run holds around its caller text (as the builder joins consecutive protocol
# texts): before a parameter, and the function's end, after the name (0), after a value (1),
# after an empty value (2).
_BEFORE = (">\n", "\n</parameter>\n", ">\n\n</parameter>\n")


def _turn_segs(
    segs: list[_Seg], runs: Sequence[_Run], start: int, end: int, pieces: tuple[Any, ...]
) -> None:
    """The segments of the turns' runs ``runs[start:end]``, laid out as ``protocol_rows`` writes
    them, made as the general path writes them (``protocol_plain``; the differential tests in
    test_protocol_rows compare the two)."""
    after = ""  # the marker before the run
    at = 0  # the next call's pieces
    call = 0  # the next call's index in its message
    for k in range(start, end):
        kind, text, i, trained, parts = runs[k]
        if kind == _RUN_MARKER:
            segs.append((text, i, trained, _MARKER))
            if text == mk.TURN_OPEN:
                call = 0
            after = text
        elif after == mk.TURN_OPEN:  # the role's line, and an answer with no reasoning span
            if text.startswith("user\n"):
                segs.append(("user\n", i, False, None))
                if len(text) > len("user\n"):
                    segs.append((text[len("user\n") :], i, False, "content"))
            else:
                segs.append(("assistant\n", i, False, None))
                if parts is not None:  # the answer in the header's run (header_parts)
                    _answer(segs, text[len("assistant\n") :], i, _before_call(runs, k))
        elif after == mk.THINK_CLOSE:  # '\n\n' + the answer
            segs.append(("\n\n", i, True, None))
            if len(text) > 2:
                _answer(segs, text[2:], i, _before_call(runs, k))
        elif after == mk.THINK_OPEN or after == mk.TOOL_RESPONSE_OPEN:  # '\n' + text + '\n'
            if len(text) > 2:
                field = "reasoning_content" if trained else "content"
                segs += (("\n", i, trained, None), (text[1:-1], i, trained, field))
                segs.append(("\n", i, trained, None))
            elif trained:  # an empty reasoning span
                segs.append(("\n\n", i, True, None))
            else:  # an empty tool result: its two lines
                segs += (("\n", i, False, None), ("\n", i, False, None))
        elif after == mk.TOOL_CALL_OPEN:
            at = _call_segs(segs, pieces, at, i, f"tool_calls[{call}]")
            call += 1
        else:  # '\n' after a turn, between two calls or two tool results
            segs.append((text, i, trained, None))


def _before_call(runs: Sequence[_Run], k: int) -> bool:
    """Whether a call follows run ``k`` (a turn's runs end on its closing marker)."""
    return runs[k + 1][1] == mk.TOOL_CALL_OPEN


def _answer(segs: list[_Seg], text: str, i: int, before_call: bool) -> None:
    """An assistant's trimmed content, and the blank line its run ends with before a call."""
    if before_call:
        segs += ((text[:-2], i, True, "content"), ("\n\n", i, True, None))
    else:
        segs.append((text, i, True, "content"))


def _call_segs(segs: list[_Seg], pieces: tuple[Any, ...], at: int, i: int, where: str) -> int:
    """A call's segments, from its pieces at ``at``; where the next call's pieces start."""
    name, count = pieces[at], int(pieces[at + 1])
    segs += (("\n<function=", i, True, None), (name, i, True, where + ".name"))
    state = 0
    end = at + 2 + 2 * count
    for k in range(at + 2, end, 2):
        key, value = pieces[k], pieces[k + 1]
        field = f"{where}.arguments.{key}"
        segs += ((_BEFORE[state] + "<parameter=", i, True, None), (key, i, True, field))
        if value:
            segs += ((">\n", i, True, None), (value, i, True, field))
            state = 1
        else:
            state = 2
    segs.append((_BEFORE[state] + "</function>\n", i, True, None))
    return end


class _Builder:
    """Collects segments as compact tuples; ``turn`` and ``trained`` apply to the segments added
    next.

    Consecutive protocol-authored texts are joined into one ``Text`` (the encoder joins text
    runs anyway; fewer, longer segments make rendering several times cheaper)."""

    __slots__ = ("_pending", "_segs", "_trained", "_turn")

    def __init__(self) -> None:
        self._segs: list[_Seg] = []
        self._pending: list[str] = []
        self._turn = -1
        self._trained = False

    def _flush(self) -> None:
        pending = self._pending
        self._segs.append(
            (pending[0] if len(pending) == 1 else "".join(pending), self._turn, self._trained, None)
        )
        pending.clear()

    @property
    def segs(self) -> list[_Seg]:
        if self._pending:
            self._flush()
        return self._segs

    def begin(self, turn: int, trained: bool) -> None:
        """What the segments added from now on belong to."""
        if self._pending:
            self._flush()
        self._turn, self._trained = turn, trained

    def special(self, marker: str) -> None:
        # `if self._pending` before each call: a builder gets ~100 of these per conversation, and
        # the call itself was a tenth of rendering time.
        if self._pending:
            self._flush()
        self._segs.append((marker, self._turn, self._trained, _MARKER))

    def text(self, text: str, field: str | None = None) -> None:
        if not text:
            return
        if field is None:
            self._pending.append(text)
            return
        if not text.isascii() and (problem := surrogate_problem(text)):
            raise self.error(problem, field)
        if self._pending:
            self._flush()
        self._segs.append((text, self._turn, self._trained, field))

    def error(self, reason: str, field: str) -> PromptError:
        """A ``PromptError`` about ``field`` of the message being rendered."""
        return PromptError(
            reason, message_index=self._turn if self._turn >= 0 else None, field=field
        )

    def protocol(self, parts: tuple[str, ...]) -> None:
        """Protocol-authored text, split at the markers it spells (``_protocol_parts``)."""
        for i, part in enumerate(parts):
            if i % 2:
                self.special(part)
            else:
                self.text(part)

    def rstrip(self) -> None:
        """Drop trailing whitespace across trailing ``Text`` segments."""
        segs = self.segs
        while segs and (last := segs[-1])[3] is not _MARKER:
            stripped = last[0].rstrip()
            if stripped:
                segs[-1] = (stripped, *last[1:])
                return
            segs.pop()

    def prompt(self) -> Prompt:
        return Prompt._compact(self.segs)


# The fields ``Prompt._compact`` sets directly when compiled, in the order it gives their values
# (what ``qe_set_slots`` takes: __slots__ members of the class).
_FIELDS = slot_members(Prompt, ("_segments", "_segs", "_runs", "_text", "_head"))

_MARKER_SPLIT = re.compile("(" + "|".join(re.escape(m) for m in mk.ALL_ADDED_TOKENS) + ")")
