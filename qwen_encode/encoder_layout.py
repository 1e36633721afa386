"""Laying out a batch of prompts: each prompt's markers and text runs as items of one ``_Batch``
(a marker's ID, or a slot for each distinct run text), applying ``markers_in_text``, and shared
system turns as one item. ``encoder_runs`` encodes the slots, ``encoder_assembly`` builds the
arrays.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from .conversation import surrogate_problem
from .engines import Engine, TokenizersEngine
from .errors import MarkerInTextError, PromptError, shown
from .prompt import _RUN_MARKER, _RUN_TEXT, Prompt, Text

# Source codes of kept system turns in a _Batch: below every marker's (-1 - its ID).
_BLOCK = -(1 << 40)
_TURN, _TRAINED, _PARTS = itemgetter(2), itemgetter(3), itemgetter(4)


class _Batch:
    """The prompts of one ``encode_batch`` call, laid out as one list of items: a marker (one
    known ID) or a text run (IDs from the engine or the run cache), each with the turn and
    trained flag of its tokens. Plain lists of ints here, then a few numpy operations over the
    whole batch, instead of Python objects and array joins per run and per prompt: with a fast
    engine the per-run bookkeeping, not BPE, was two thirds of the time when encoding went run by
    run."""

    __slots__ = (
        "blocks",
        "crossing",
        "deferred",
        "ends",
        "heads",
        "literal",
        "slots",
        "source",
        "trained",
        "turn",
    )

    def __init__(self) -> None:
        self.source: list[int] = []  # >= 0: a text run's slot; < 0: -1 - the marker's ID
        self.turn: list[int] = []
        self.trained: list[bool] = []
        self.ends: list[int] = []  # each prompt's end in the items
        # Each distinct run text once (encoded once), and whether it is encoded literally.
        self.slots: dict[str, int] = {}
        self.literal: list[bool] = []
        # Runs whose segments belong to more than one (turn, trained): first item, slot and the
        # character where each part starts (one item per part, its length known once encoded).
        self.crossing: list[tuple[int, int, tuple[int, ...]]] = []
        # Shared system turns, one item each (code _BLOCK - k in source): the code of each head
        # met, its IDs when the encoder knew them (blocks), or else where its runs were first
        # laid out in this batch, to be joined once encoded (deferred: key, code, first item).
        self.heads: dict[tuple[Any, ...], int] = {}
        self.blocks: dict[int, np.ndarray] = {}
        self.deferred: list[tuple[tuple[Any, ...], int, int]] = []

    def mark(self) -> tuple[int, int, int, int]:
        return len(self.source), len(self.slots), len(self.crossing), len(self.deferred)

    def rollback(self, mark: tuple[int, int, int, int]) -> None:
        """Forget what a refused prompt added, so none of its text is encoded."""
        items, slots, crossing, deferred = mark
        del self.source[items:], self.turn[items:], self.trained[items:]
        del self.crossing[crossing:], self.literal[slots:]
        for head, _, _ in self.deferred[deferred:]:
            del self.heads[head]  # laid out by the refused prompt: no later one refers to it
        del self.deferred[deferred:]
        while len(self.slots) > slots:
            self.slots.popitem()  # the last added first: O(what the prompt added)


class _Layout:
    """The encoder's lay-out of prompts into a ``_Batch`` (``Encoder`` inherits it)."""

    # The encoder's state, set by ``Encoder.__init__`` (see there); declared here, in the first
    # of the classes the encoder's internals are split into, for those methods' types.
    markers_in_text: str
    _added_ids: dict[str, int]
    _marker_ids: dict[int, np.ndarray]
    _marker_codes: dict[str, int]
    _added_pattern: re.Pattern[str]
    _normalized_match: bool
    _marker_initial: str | None
    _tokenizer: Tokenizer
    _reference: TokenizersEngine
    _engine: Engine
    _engine_wanted: str
    _tokenizer_json: Path | None
    _cuttable: bool
    _work: int
    _lock: threading.Lock
    _cache: OrderedDict[str, np.ndarray]
    _cache_bytes: int
    _cache_limit: int
    _heads: OrderedDict[tuple[Any, ...], np.ndarray]
    _head_bytes: int
    _head_hits: int

    def _spelled_marker(self, text: str) -> str | None:
        """The first added-token string ``text`` spells, if any (as tokenizers would match it)."""
        if self._marker_initial is not None and self._marker_initial not in text:
            return None  # no marker can start anywhere in it: one C scan, no regex
        found = self._added_pattern.search(text)
        if found is None and self._normalized_match:
            found = self._added_pattern.search(unicodedata.normalize("NFC", text))
        return found.group() if found else None

    def _lay_out(self, prompt: Prompt, batch: _Batch, check_text: bool) -> None:
        """Add ``prompt``'s markers and text runs to ``batch``, applying ``markers_in_text``.
        The runs come made with the prompt (``format_prompt`` joins them as it renders; a
        hand-made prompt's are made once, on first use): this runs for every run of every
        prompt, so the common case is a few C-level calls."""
        if not isinstance(prompt, Prompt):
            raise PromptError(
                f"expected a Prompt (from format_prompt), got {type(prompt).__name__}; "
                "encode_messages takes message dicts",
                field="prompt",
            )
        runs = prompt._layout()
        start = 0 if prompt._head is None else self._lay_out_head(prompt._head, batch)
        if check_text or not self._lay_out_plain(
            prompt, runs[start:] if start else runs, start, batch
        ):
            self._lay_out_runs(prompt, runs, start, batch, check_text)

    def _lay_out_plain(
        self, prompt: Prompt, runs: Sequence[Any], start: int, batch: _Batch
    ) -> bool:
        """``_lay_out_runs`` for runs that each give one item (none crosses parts, the common
        case), in a few C-level passes: lookups of every run, then the new texts and anything
        refused, in order. False (nothing done) when some run has parts."""
        if list(map(_PARTS, runs)).count(None) != len(runs):
            return False
        slot_of, marker_code = batch.slots.get, self._marker_codes.get
        codes: list[Any] = [
            slot_of(text)
            if kind == _RUN_TEXT
            else (marker_code(text) if kind == _RUN_MARKER else None)
            for kind, text, _, _, _ in runs
        ]
        at = _next_none(codes, 0)
        while at >= 0:
            kind, text, turn, _, _ = runs[at]
            if kind != _RUN_TEXT:
                self._refuse_run(kind, text, turn)
            slot = batch.slots.get(text)  # the same text earlier in this prompt
            codes[at] = self._new_slot(prompt, start + at, text, batch) if slot is None else slot
            at = _next_none(codes, at + 1)
        batch.source += codes
        batch.turn.extend(map(_TURN, runs))
        batch.trained.extend(map(_TRAINED, runs))
        return True

    @staticmethod
    def _refuse_run(kind: int, text: str, turn: int) -> None:
        if kind == _RUN_MARKER:
            raise PromptError(
                f"{shown(text)} is not a token of this vocabulary",
                message_index=turn if turn >= 0 else None,
                field="marker",
            )
        # A _RUN_BAD run: its text is the reason, its turn the segment's position (prompt._bad_seg).
        raise PromptError(text, field=f"prompt.segments[{turn}]")

    def _lay_out_runs(
        self, prompt: Prompt, runs: Sequence[Any], start: int, batch: _Batch, check_text: bool
    ) -> None:
        """The runs from ``start`` on, one at a time (see ``_lay_out``)."""
        added = self._added_ids
        slots = batch.slots
        source, turns, trains = batch.source, batch.turn, batch.trained
        # Bound once: three appends per run, ~30 runs per short row.
        add_source, add_turn, add_trained = source.append, turns.append, trains.append
        for position, (kind, text, turn, trained, parts) in enumerate(
            runs[start:] if start else runs, start
        ):
            if kind == _RUN_TEXT:
                if check_text and not text.isascii():
                    self._check_run(prompt, position)
                slot = slots.get(text)
                if slot is None:
                    slot = self._new_slot(prompt, position, text, batch)
                if parts is None:
                    add_source(slot)
                    add_turn(turn)
                    add_trained(trained)
                    continue
                # Parts: where the run's (turn, trained) changes, e.g. the "assistant\n" header
                # (not trained) joined to the content after it (trained) when no reasoning span
                # separates them. One item per part, its length known once encoded.
                for _, part_turn, part_trained in parts:
                    source.append(slot)
                    turns.append(part_turn)
                    trains.append(part_trained)
                starts = tuple(offset for offset, _, _ in parts)
                batch.crossing.append((len(source) - len(parts), slot, starts))
            elif kind == _RUN_MARKER and (token := added.get(text)) is not None:
                add_source(-1 - token)
                add_turn(turn)
                add_trained(trained)
            else:
                self._refuse_run(kind, text, turn)

    def _kept_head(self, head: tuple[Any, ...]) -> np.ndarray | None:
        """A shared system turn's kept IDs, if kept (a hit: counted once per batch)."""
        with self._lock:
            ids = self._heads.get(head)
            if ids is not None:
                self._heads.move_to_end(head)
                self._head_hits += 1
        return ids

    def _lay_out_head(self, head: tuple[Any, ...], batch: _Batch) -> int:
        """A shared system turn (the render cache's runs, the same in every row of an agent data
        set) as one item when its IDs are known: how many of the prompt's runs that covers (0:
        lay them out one by one, and keep their IDs as one block once encoded). Only a head
        laid out without refusal is ever kept, and the encoder's mode never changes, so a kept
        head would pass again."""
        code = batch.heads.get(head)
        if code is None:
            ids = self._kept_head(head)
            code = _BLOCK - len(batch.heads)
            if ids is None:
                if _keepable(head):
                    batch.heads[head] = code
                    batch.deferred.append((head, code, len(batch.source)))
                return 0
            batch.heads[head] = code
            batch.blocks[code] = ids
        batch.source.append(code)
        batch.turn.append(head[0][2])
        batch.trained.append(False)
        return len(head)

    @staticmethod
    def _check_run(prompt: Prompt, position: int) -> None:
        """Refuse a run holding a lone surrogate, naming the segment's turn and field."""
        for text, turn, _, field in prompt._run_segs()[position]:
            if problem := surrogate_problem(text):
                raise PromptError(
                    problem, message_index=turn if turn >= 0 else None, field=field or "text"
                )

    def _new_slot(self, prompt: Prompt, position: int, text: str, batch: _Batch) -> int:
        """A slot for a run text new to the batch (each distinct text is encoded once)."""
        literal = False
        # The whole run is checked, not each segment: a tool name "<think" followed by the
        # protocol's ">\n" spells "<think>" across the join, and tokenizers would match it.
        if self.markers_in_text != "atomic" and (marker := self._spelled_marker(text)):
            if self.markers_in_text == "reject":
                segments = [Text(*seg) for seg in prompt._run_segs()[position]]
                raise self._rejection(segments, marker)
            literal = True
        slot = batch.slots[text] = len(batch.literal)
        batch.literal.append(literal)
        return slot

    @staticmethod
    def _rejection(segments: list[Text], marker: str) -> MarkerInTextError:
        # Protocol text never spells a marker (the protocol emits those as Special), so the
        # caller field to blame is one holding the marker, or else the first one in the run.
        # A hand-made prompt may mark no text as the caller's: then its segments are blamed.
        callers = [s for s in segments if s.field is not None] or segments
        blamed = next((s for s in callers if marker in s.text), callers[0])
        turn = blamed.turn if blamed.turn >= 0 else None
        return MarkerInTextError(marker, message_index=turn, field=blamed.field or "text")


def _keepable(head: tuple[Any, ...]) -> bool:
    """Whether a system turn's IDs can be kept as one block: all its runs one message's,
    untrained, none crossing owners (its tokens then need no owner of their own)."""
    turn = head[0][2]
    return all(run[2] == turn and run[3] is False and run[4] is None for run in head)


def _next_none(codes: list[Any], start: int) -> int:
    """Where the next run without a code is (a new text, or one to refuse), or -1."""
    try:
        return codes.index(None, start)
    except ValueError:
        return -1
