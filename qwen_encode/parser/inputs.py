"""Input: text deltas or token IDs -> (is_marker, text) pieces for the grammar machine, the stop
marker that ended the turn, and the map from character offsets back to token positions.

A trailing ``<|im_end|>`` (the turn's end; vLLM's ``token_ids`` end with it) and an
``<|endoftext|>`` after it, or an ``<|endoftext|>`` alone, end the turn and are not content: by
their IDs at the end of the IDs, or spelled at the very end of the text (whitespace after them
aside). Anywhere else they are text, as every non-protocol marker is to the parser. Only that
suffix is held back while streaming: at most the two markers and whitespace.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .. import markers as mk
from ..errors import PromptError, check_token_id, shown
from .events import MarkerEncoder

# The markers the outer level acts on. Every other added token is text to the parser.
_STRUCTURAL: Final = (mk.THINK_OPEN, mk.THINK_CLOSE, mk.TOOL_CALL_OPEN, mk.TOOL_CALL_CLOSE)
_MARKER_RE: Final = re.compile("|".join(re.escape(m) for m in _STRUCTURAL))
_LONGEST_MARKER: Final = max(len(m) for m in _STRUCTURAL)
_MARKER_PREFIXES: Final = frozenset(m[:k] for m in _STRUCTURAL for k in range(1, len(m)))
_REPLACEMENT: Final = "\ufffd"

# What may end an output as its stop, longest first.
_STOP_FORMS: Final = (
    (mk.TURN_CLOSE, mk.END_OF_TEXT),
    (mk.TURN_CLOSE,),
    (mk.END_OF_TEXT,),
)
_STOP_TEXTS: Final = tuple("".join(form) for form in _STOP_FORMS)
_LONGEST_STOP: Final = max(map(len, _STOP_TEXTS))
_STOP_PREFIXES: Final = frozenset(f[:k] for f in _STOP_TEXTS for k in range(1, len(f) + 1))

Piece = tuple[bool, str]


def _stop_suffix(text: str) -> int:
    """Where the suffix of ``text`` that may still be (or is) the output's stop begins:
    a whole stop form and whitespace, or a prefix of a form; ``len(text)`` when none.
    Called on every text delta, so the common case (no ``<`` near the end, no whole form) is
    one ``find``."""
    size = len(text)
    if not size:
        return 0
    last = text[-1]
    if last == ">" or last.isspace():
        end = len(text.rstrip())
        for form in _STOP_TEXTS:
            if text.endswith(form, 0, end):
                return end - len(form)
        if end < size:
            return size
    # The longest such suffix: "<|im_end|><|endof" may still become both markers.
    lt = text.find("<", max(0, size - _LONGEST_STOP))
    while lt >= 0:
        if text[lt:] in _STOP_PREFIXES:
            return lt
        lt = text.find("<", lt + 1)
    return size


def _stop_form(text: str) -> tuple[str, ...] | None:
    """The stop markers ``text`` is (whitespace after them aside), or None."""
    stripped = text.rstrip()
    for form, spelled in zip(_STOP_FORMS, _STOP_TEXTS, strict=True):
        if stripped == spelled:
            return form
    return None


class _Splitter:
    """What both inputs share: the stop found at the end, and where it stood."""

    def __init__(self) -> None:
        self.stop: tuple[str, ...] = ()
        self.stop_start = 0  # character offset of the stop
        self.stop_tokens: tuple[int, int] | None = None
        self.chars = 0  # characters handed out so far

    def _out(self, pieces: list[Piece], is_marker: bool, text: str) -> None:
        pieces.append((is_marker, text))
        self.chars += len(text)

    def token_span(self, start: int, end: int) -> tuple[int | None, int | None]:
        return None, None


class _TextSplitter(_Splitter):
    """Finds markers in string deltas; holds back a trailing partial marker or stop."""

    def __init__(self) -> None:
        super().__init__()
        self.tail = ""

    def feed(self, text: str) -> list[Piece]:
        buffer = self.tail + text
        pieces: list[Piece] = []
        pos = 0
        for match in _MARKER_RE.finditer(buffer):
            if match.start() > pos:
                pieces.append((False, buffer[pos : match.start()]))
            pieces.append((True, match.group()))
            pos = match.end()
        cut = len(buffer)
        # Only the last '<' can start a marker that is still incomplete (markers hold one '<').
        lt = buffer.rfind("<", max(pos, cut - _LONGEST_MARKER + 1))
        if lt >= 0 and buffer[lt:] in _MARKER_PREFIXES:
            cut = lt
        # A held partial marker may also be the start of "<|endoftext|>" after "<|im_end|>".
        cut = min(cut, pos + _stop_suffix(buffer[pos:]))
        if cut > pos:
            pieces.append((False, buffer[pos:cut]))
        self.chars += cut
        self.tail = buffer[cut:]
        return pieces

    def end(self) -> list[Piece]:
        tail, self.tail = self.tail, ""
        form = _stop_form(tail)
        if form is not None:
            self.stop, self.stop_start = form, self.chars
            return []
        pieces: list[Piece] = []
        if tail:
            self._out(pieces, False, tail)
        return pieces


class _Run:
    """Where pieces handed out stood in the IDs: one marker, or consecutive decoded runs of
    ordinary tokens merged (``ids``, ``texts``), whose per-token character ends are found only
    when a span boundary falls inside."""

    __slots__ = ("bounds", "char_start", "chars", "ids", "texts", "token_start")

    def __init__(self, char_start: int, token_start: int, ids: list[int] | None, text: str):
        self.char_start = char_start
        self.token_start = token_start
        self.ids = ids
        self.texts = [text]
        self.chars = len(text)
        self.bounds: tuple[list[int], list[int]] | None = None  # (starts, ends), once needed


class _IdSplitter(_Splitter):
    """Splits token IDs at marker IDs and decodes runs of ordinary IDs, emitting only a prefix
    whose text is provably the prefix of the whole run's text (a streamed delta is never
    taken back, so a byte-level token split mid-character must wait for its rest).

    A run of ordinary tokens is cut after token ``k`` only when ``decode(run[:k])`` does not
    end in U+FFFD (it ends on a whole character), or when ``decode(run[:k]) +
    decode(run[k:]) == decode(run)`` with at least three characters after the cut. In a UTF-8
    decoder that replaces each maximal invalid subsequence with one U+FFFD, a cut inside a
    character or inside such a subsequence changes the count of U+FFFD or characters within the
    next three bytes, and three characters need at least three bytes, so the second test can
    only pass where the decoder restarts: every later byte decodes as it would unsplit.
    """

    def __init__(self, encoder: MarkerEncoder) -> None:
        super().__init__()
        self.decode = encoder.decode
        self.markers: dict[int, tuple[bool, str]] = {
            int(i): (marker in _STRUCTURAL, marker)
            for marker, i in encoder.marker_ids.items()
            if i is not None  # a vocabulary without that marker (token_to_id gave None)
        }
        ids = encoder.marker_ids
        self.turn_close = ids.get(mk.TURN_CLOSE)
        self.end_of_text = ids.get(mk.END_OF_TEXT)
        self.limit = _id_limit(encoder)
        self.position = 0
        self.pending: list[int] = []
        self.pending_start = 0  # token position of pending[0]
        # A stop marker seen at the end so far (token, position), and ordinary tokens after it
        # that decode to whitespace: released as text if anything else follows.
        self.held: list[tuple[int, int]] = []
        self.trail: list[int] = []
        self.runs: list[_Run] = []
        self.run_starts: list[int] = []

    def _check(self, token: Any) -> int:
        position = self.position
        self.position = position + 1
        return check_token_id(token, position, self.limit)

    def _emit(
        self, pieces: list[Piece], piece: Piece, token_start: int, ids: list[int] | None
    ) -> None:
        last = self.runs[-1] if self.runs else None
        if (
            ids is not None
            and last is not None
            and last.ids is not None
            and last.token_start + len(last.ids) == token_start
            and last.char_start + last.chars == self.chars
        ):
            # The same run of ordinary tokens, streamed: one record, appended in O(1).
            last.ids.extend(ids)
            last.texts.append(piece[1])
            last.chars += len(piece[1])
        else:
            self.runs.append(_Run(self.chars, token_start, ids, piece[1]))
            self.run_starts.append(self.chars)
        self._out(pieces, *piece)

    def feed(self, ids: Iterable[int]) -> list[Piece]:
        if isinstance(ids, str | bytes | bytearray | Mapping) or not isinstance(ids, Iterable):
            raise PromptError(
                f"expected a sequence of token IDs, got {type(ids).__name__}", field="output"
            )
        pieces: list[Piece] = []
        markers = self.markers
        for token in ids:
            token = self._check(token)
            if self.held and self._holds(token, pieces):
                continue
            marker = markers.get(token)
            if marker is None:
                if not self.pending:
                    self.pending_start = self.position - 1
                self.pending.append(token)
                continue
            self._flush(pieces)
            if token in (self.turn_close, self.end_of_text):
                self.held.append((token, self.position - 1))
                continue
            # A non-protocol marker (<|box_start|>, …) is text to the parser.
            self._emit(pieces, marker, self.position - 1, None)
        if self.pending:
            self._flush_complete(pieces)
        if self.trail and self._trail_is_text(final=False):
            self._release(pieces)
        return pieces

    def _trail_is_text(self, final: bool) -> bool:
        """Whether the tokens after a held stop decode to more than whitespace. Until the output
        ends, a character the stream cut (its last bytes still to come, at most 3 tokens) is
        not judged yet: "\x85" arrives as two byte tokens and is whitespace once whole."""
        text = self.decode(self.trail)
        if not final and text.endswith(_REPLACEMENT):
            for keep in range(1, min(3, len(self.trail)) + 1):
                prefix = self.decode(self.trail[:-keep])
                if not prefix.endswith(_REPLACEMENT):
                    return bool(prefix.strip())
            return False
        return bool(text.strip())

    def _holds(self, token: int, pieces: list[Piece]) -> bool:
        """A token after a held stop: whether it is held too (the stop may still end the
        output): an <|endoftext|> right after <|im_end|>, or ordinary tokens (whitespace is
        checked once the feed's tokens are in). Any other marker releases the stop as text."""
        held = self.held
        if (
            token == self.end_of_text
            and not self.trail
            and len(held) == 1
            and held[0][0] == self.turn_close
        ):
            held.append((token, self.position - 1))
            return True
        if token not in self.markers:
            self.trail.append(token)
            return True
        self._release(pieces)
        return False

    def _release(self, pieces: list[Piece]) -> None:
        """The held stop was not the end: it is text, and so is what followed it."""
        held, self.held = self.held, []
        trail, self.trail = self.trail, []
        for token, position in held:
            self._emit(pieces, self.markers[token], position, None)
        if trail:
            self.pending_start = held[-1][1] + 1
            self.pending.extend(trail)

    def end(self) -> list[Piece]:
        pieces: list[Piece] = []
        if self.trail and self._trail_is_text(final=True):
            self._release(pieces)
        self._flush(pieces)
        if self.held:
            self.stop = tuple(self.markers[token][1] for token, _ in self.held)
            self.stop_start = self.chars
            self.stop_tokens = (self.held[0][1], self.position)
        return pieces

    def _flush(self, pieces: list[Piece], text: str | None = None) -> None:
        """Hand out the pending run (``text``: its decoding, when the caller has it)."""
        if self.pending:
            run = list(self.pending)
            decoded = self.decode(run) if text is None else text
            self._emit(pieces, (False, decoded), self.pending_start, run)
            self.pending.clear()  # in place: feed() holds a reference to the list

    def _cut(self, pieces: list[Piece], keep: int, prefix: str) -> None:
        run = self.pending[:-keep]
        self._emit(pieces, (False, prefix), self.pending_start, run)
        self.pending_start += len(run)
        del self.pending[:-keep]

    def _flush_complete(self, pieces: list[Piece]) -> None:
        pending = self.pending
        text = self.decode(pending)
        if not text.endswith(_REPLACEMENT):
            self._flush(pieces, text)
            return
        count = len(pending)
        # A cut where the prefix ends on a whole character: at most 3 tokens of a character.
        for keep in range(1, min(3, count - 1) + 1):
            prefix = self.decode(pending[:-keep])
            if not prefix.endswith(_REPLACEMENT):
                self._cut(pieces, keep, prefix)
                return
        # Invalid bytes: a cut the decoder provably restarts at (see the class doc). The tail
        # kept is at most 6 tokens, so a run of invalid bytes flows through.
        for keep in range(3, min(6, count - 1) + 1):
            prefix = self.decode(pending[:-keep])
            rest = self.decode(pending[-keep:])
            if len(rest) >= 3 and prefix + rest == text:
                self._cut(pieces, keep, prefix)
                return

    def token_span(self, start: int, end: int) -> tuple[int | None, int | None]:
        """The tokens that hold characters ``start:end`` (half-open both): from the token
        holding ``start`` to the last token that begins before ``end``."""
        first = self._token(start, last=False)
        return first, first if end <= start else self._token(end, last=True)

    def _token(self, char: int, last: bool) -> int:
        """``last=False``: the token holding ``char``; True: how many tokens begin before it."""
        k = bisect.bisect_right(self.run_starts, char - 1 if last else char) - 1
        if k < 0:
            return 0
        run = self.runs[k]
        offset = char - run.char_start
        if run.ids is None:
            return run.token_start + (1 if last else 0)
        if offset >= run.chars:
            return run.token_start + len(run.ids)
        if run.bounds is None:
            run.bounds = self._char_bounds(run)
        starts, ends = run.bounds
        if last:
            return run.token_start + bisect.bisect_left(starts, offset)
        return run.token_start + bisect.bisect_right(ends, offset)

    def _char_bounds(self, run: _Run) -> tuple[list[int], list[int]]:
        """Per token of the run, the characters of its text it holds: ``starts[k]:ends[k]``.
        Tokens are decoded in the smallest groups that end on a whole character (the tokens of
        one character all hold it), which gives the run's text in linear time; else (a decoder
        that does not decode so) by the longest prefix that decodes to a prefix of the text."""
        assert run.ids is not None
        text = "".join(run.texts)
        starts: list[int] = []
        ends: list[int] = []
        total, group, pieces = 0, 0, []
        for k in range(len(run.ids)):
            group += 1
            piece = self.decode(run.ids[k + 1 - group : k + 1])
            if piece.endswith(_REPLACEMENT) and group < 4 and k + 1 < len(run.ids):
                continue  # part of a character: it is held by the tokens that complete it
            pieces.append(piece)
            starts += [total] * group
            total += len(piece)
            ends += [total] * group
            group = 0
        if "".join(pieces) == text:
            return starts, ends
        starts, ends, previous = [], [], 0
        for k in range(1, len(run.ids) + 1):
            prefix = self.decode(run.ids[:k])
            while prefix.endswith(_REPLACEMENT) and not text.startswith(prefix):
                prefix = prefix[:-1]
            starts.append(previous)
            ends.append(len(prefix))
            previous = len(prefix)
        return starts, ends


def _id_limit(encoder: Any) -> int | None:
    """How many IDs the encoder's vocabulary has: its ``vocab_size`` when it has one (optional
    in ``MarkerEncoder``), else the library ``Encoder``'s vocabulary report; None: unknown."""
    size = getattr(encoder, "vocab_size", None)
    if size is None:
        report = getattr(getattr(encoder, "vocabulary", None), "report", None)
        largest = getattr(report, "max_token_id", None)
        size = largest + 1 if isinstance(largest, int) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _splitter(output: Any, encoder: MarkerEncoder | None) -> _TextSplitter | _IdSplitter:
    if isinstance(output, str):
        return _TextSplitter()
    if isinstance(output, bytes | bytearray):
        raise PromptError(
            "pass the completion as str or as a sequence of token IDs, not bytes", field="output"
        )
    if isinstance(output, Mapping) or not isinstance(output, Iterable):
        raise PromptError(
            f"expected the completion as str or a sequence of token IDs, got "
            f"{type(output).__name__}",
            field="output",
        )
    if encoder is None:
        raise PromptError(
            "token IDs need an encoder (an object with marker_ids and decode)", field="encoder"
        )
    if not hasattr(encoder, "marker_ids") or not callable(getattr(encoder, "decode", None)):
        raise PromptError(
            f"expected an encoder with marker_ids and decode, got {type(encoder).__name__}",
            field="encoder",
        )
    return _IdSplitter(encoder)


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PromptError(f"expected True or False, got {shown(value)}", field=name)
    return value
