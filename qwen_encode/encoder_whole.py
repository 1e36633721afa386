"""Encoding whole prompts: every prompt's text, markers included, in one engine call for the
batch, each token's owner (turn, trained) read from where the markers' IDs fall among the IDs.

The engine splits a text at the added tokens it spells and encodes each piece between them on
its own, exactly as the run-by-run path encodes each run (the pieces are the runs). So the IDs
are the same whenever the markers the protocol wrote are the only added tokens the text spells:
no caller run spells one (checked per prompt, as the run-by-run path checks each run), and no
added token can be spelled across a marker's edge (checked once per vocabulary,
``_separable``). Then the k-th added-token ID of a prompt's IDs is its k-th marker, and the IDs
between two markers are the text run between them: ownership needs no per-run Python object,
no per-run array and no engine call per run, which were most of a short row's cost.

Prompts this does not cover (``markers_in_text="atomic"``, a run spelling a marker, a hand-made
prompt not starting on a marker, a text too long to encode whole, ...) take the run-by-run path
(``encoder_layout``), which also raises every refusal; so does a batch in which some prompt's IDs
fail the check that its added tokens are exactly its markers (never seen; a guard, not a path).
"""

from __future__ import annotations

import os
import unicodedata
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from functools import cached_property
from itertools import accumulate, compress
from operator import itemgetter, not_
from typing import Any, TypeAlias

import numpy as np

from ._accelerator import runs_compiled
from .encoder_assembly import _Assembly
from .encoder_layout import _keepable
from .encoder_owners import _owners
from .encoder_pieces import _cut_length
from .encoding import Encoding, _encoded
from .markers import TURN_OPEN
from .prompt import _RUN_BAD, _RUN_MARKER, _RUN_TEXT, Prompt

_KIND = itemgetter(0)
# A prompt encoded alone goes whole up to this many characters (after its kept system turn).
_ALONE_CHARS = 4096
# The engines encode a batch's texts in parallel, a text per thread: a request, one text, keeps
# one thread busy and the others idle. So when a batch has fewer texts than the machine has
# cores, each long text is handed over in up to that many pieces of at least _THREAD_PIECE
# characters (a thread's start costs about what a few kB of text do). On the benchmark corpus
# (14 kB conversations, 2 cores) fastokens took 148 us for a conversation in two pieces against
# 171 us whole: its per-call work does not all spread over threads.
_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
_THREAD_PIECE = 4096
# A batch of more text than this is laid out and encoded in chunks of about this much, each
# chunk's engine call on the encoder's worker thread while the next chunk is laid out and the one
# before assembled (the engine releases the GIL): encode_batch 9-13% faster on 3,000 short rows
# and on the benchmark corpus (chunks of 128K-256K characters gained 4-15%, noisier).
_CHUNK_CHARS = 1 << 19
# A chunk overlapped by the caller's work goes to fastokens as one text, on one thread, when
# its texts average at most this many characters (``Engine.joins_chunks``): there the caller's
# work per row (laying out, assembling) is about the engine's, and the engine spread over every
# core took the caller's. Past it the engine is the longer task and wants every core. Measured
# end to end on 2 cores, joined against spread, by characters a row (its kept system turn's
# included): 1,440: 1.13x; 2,076: 1.03x; 2,726: 0.98x; 4,005: 0.99x; the benchmark corpus
# (~14,000): 0.82x.
_JOIN_CHARS = 2048
# A kept system turn's token counts as the ~4 characters of text it stands for: a chunk bounds
# the arrays it fills as well as the engine's text. Counted by text alone, a chunk of an agent
# set with a 10,000-token shared block made ~40 MB arrays, fresh memory the kernel zeroes on
# first touch (a quarter of encode_batch's time in clear_page under perf), 54-72 against 45 µs
# a row with the heads counted.
_HEAD_CHARS = 4
# The batch's arrays in one pass over its IDs when encoder_owners is compiled (setup.py); in
# Python that is a loop over tokens, and the numpy passes are faster.
_ONE_PASS = runs_compiled("encoder_owners")
# Compiled: CPython's C API, declared in _capi.pxd (a cimport, resolved at build time).
_COMPILED = runs_compiled("encoder_whole")
if _COMPILED:
    from cython.cimports.qwen_encode._capi import PyObject_GC_UnTrack


class _Rows:
    """The prompts of a batch encoded whole: each one's text, and per run of all of them (one
    list for the batch) its owner; per marker its run and expected ID."""

    __slots__ = (
        "crossing",
        "expected",
        "firsts",
        "head_runs",
        "heads",
        "held",
        "known",
        "marker_runs",
        "new_heads",
        "out",
        "positions",
        "runs",
        "seen",
        "sources",
        "texts",
        "trained",
        "turn",
    )

    def __init__(self) -> None:
        self.positions: list[int] = []  # each row's prompt position in the batch
        self.texts: list[str] = []  # each row's text after its kept head (the engine's input)
        self.sources: list[tuple[Any, Any]] = []  # each row's provenance source (_encoded)
        # Per row: None (no head left out), the head's IDs, or the key of a head whose IDs the
        # row that first met it in this batch yields (it is encoded whole: see new_heads).
        self.heads: list[Any] = []
        self.head_runs: list[int] = []  # the run standing for each head left out
        self.known: dict[tuple[Any, ...], np.ndarray] = {}  # heads found kept, this batch
        # The same, by the head's identity: the render cache hands every row of a data set the
        # same head, and hashing it (a tuple of runs) for each row cost more than the lookup.
        # The head is held with its IDs, so its id names no other object while the batch lives.
        self.held: dict[int, tuple[tuple[Any, ...], np.ndarray]] = {}
        # Heads first met in this batch: the row that encodes each whole, and its markers.
        self.new_heads: dict[tuple[Any, ...], tuple[int, int]] = {}
        self.firsts: list[int] = []  # each row's first marker, counted over the batch
        self.expected: list[int] = []  # every marker's ID, in order
        self.marker_runs: list[int] = []  # every marker's run, counted over the batch
        self.turn: list[int] = []  # every run's owner
        self.trained: list[bool] = []
        # Runs whose owner changes inside them: (run, row, UTF-8 length, where the parts after
        # the first start, in bytes, and their (turn, trained)).
        self.crossing: list[_Crossing] = []
        self.runs = 0
        self.seen: str | None = None  # a long request's first text run, to keep (_first_time)
        # The lists each prompt's columns are added to (``_columns``), in place: one tuple for
        # the batch, not one per prompt.
        self.out: _Out = (self.expected, self.marker_runs, self.turn, self.trained)
        if _COMPILED:
            # Left out of the garbage collector's passes: they grow to thousands of items a
            # chunk, and every young collection while they were young walked each item (most
            # of the collector's time in a batch). Only this object refers to them, and none
            # of their items (ints, strings, tuples of the prompts' own) can lead back to them,
            # so they are in no cycle for the collector to find.
            for column in (
                self.positions,
                self.texts,
                self.sources,
                self.head_runs,
                self.firsts,
                self.expected,
                self.marker_runs,
                self.turn,
                self.trained,
                self.crossing,
            ):
                PyObject_GC_UnTrack(column)

    def drop(self, markers: int, owners: int) -> None:
        """Forget the markers and run owners added past these counts (a prompt not taken)."""
        del self.expected[markers:], self.marker_runs[markers:]
        del self.turn[owners:], self.trained[owners:]


_Crossing: TypeAlias = tuple[int, int, int, tuple[int, ...], tuple[tuple[int, bool], ...]]


class _Whole(_Assembly):
    """The encoder's whole-prompt path (``Encoder`` inherits it)."""

    @cached_property
    def _whole_ready(self) -> bool:
        """Whether this vocabulary lets a prompt be encoded whole (see the module's doc)."""
        decoder = self._tokenizer.get_added_tokens_decoder().values()
        if any(t.lstrip or t.rstrip or t.single_word or t.normalized for t in decoder):
            return False  # the engine would strip or match differently at a marker's edge
        return _separable(list(self._added_ids))

    @cached_property
    def _added_floor(self) -> int | None:
        """The lowest added token's ID when every token at or above it is an added token (Qwen
        numbers its added tokens after the base vocabulary): then one comparison finds them
        among IDs, ten times cheaper than looking each up. None otherwise. Even if this were
        wrong, a base token taken for an added one would fail the markers' check and send
        its prompt run by run: never wrong IDs."""
        floor = min(self._added_ids.values(), default=None)
        model = self._tokenizer.model
        base = self._tokenizer.get_vocab_size(with_added_tokens=False)
        if floor is None or base > floor:
            return None
        if base and (model.id_to_token(base - 1) is None or model.id_to_token(base) is not None):
            return None  # the base vocabulary is not numbered 0..n-1
        return floor

    def _added_at(self, ids: np.ndarray) -> np.ndarray:
        """Where the added tokens are among ``ids``."""
        floor = self._added_floor
        found: np.ndarray = (ids >= floor) if floor is not None else self._added_mask[ids]
        return found.nonzero()[0]

    @cached_property
    def _added_mask(self) -> np.ndarray:
        """True at every added token's ID."""
        size = max(
            self._tokenizer.get_vocab_size(with_added_tokens=True),
            1 + max(self._added_ids.values(), default=0),
        )
        mask = np.zeros(size, dtype=bool)
        mask[list(self._added_ids.values())] = True
        return mask

    def _whole_chunks(self, prompts: Sequence[Any]) -> Iterator[tuple[_Rows, list[int], bool]]:
        """The prompts this path takes, laid out in chunks of about ``_CHUNK_CHARS`` of text,
        each with the positions of the others among its prompts, and whether more follow."""
        # A prompt encoded alone is a request. Past a few thousand characters it may be a
        # conversation a server sees again and again, one exchange longer each time: the first
        # time it goes whole and its first text run is kept in the run cache; met again (that
        # run cached), it goes run by run, and from then on only each new exchange is encoded.
        longest = _ALONE_CHARS if len(prompts) == 1 and self._cache_limit else None
        rows, others, chars = _Rows(), [], 0
        last = len(prompts) - 1
        for position, prompt in enumerate(prompts):
            if not self._lay_out_whole(prompt, position, rows, longest):
                others.append(position)
                continue
            chars += len(rows.texts[-1])
            head = rows.heads[-1]
            if head is not None and type(head) is not tuple:
                chars += _HEAD_CHARS * len(head)
            if chars >= _CHUNK_CHARS and position < last:
                yield rows, others, True
                rows, others, chars = _Rows(), [], 0
        yield rows, others, False

    def _whole_engine(self, rows: _Rows, overlapped: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The IDs of the rows' texts (``encode_flat``). ``overlapped``: the caller lays out
        the next chunk meanwhile (see ``Engine.joins_chunks``)."""
        chars = sum(map(len, rows.texts))
        self._count_work(chars)
        joined = None
        if (
            overlapped
            and self._engine.joins_chunks
            and len(rows.texts) > 1
            and chars <= _JOIN_CHARS * len(rows.texts)
        ):
            joined = self._joined_engine(rows)
        if joined is not None:
            ids, bounds = joined
        else:
            texts, firsts = _for_threads(rows.texts)
            ids, bounds = self._engine.encode_flat(texts)
            if firsts is not None:
                bounds = bounds[firsts]
        if not ids.flags.writeable and self._one_pass_floor() is None:
            # fastokens' IDs are a view of its bytes: the arrays handed out are the caller's to
            # change in place (a collator masking IDs), as the run-by-run path's always were.
            # The one pass copies them into arrays of its own (with the kept heads) anyway.
            ids = ids.copy()
        return ids, bounds

    def _joined_engine(self, rows: _Rows) -> tuple[np.ndarray, np.ndarray] | None:
        """The IDs of the rows' texts encoded as one text, and each row's bounds: where its
        first marker is. The IDs are the texts' own, in order, for the reason a long text may
        be cut before a marker (``_for_threads``): each text starts on a marker, and the engine
        encodes each piece between two added tokens on its own. None when the added tokens
        found are not as many as the markers (a guard, never seen: then each text on its own,
        and the markers' check sends the row at fault run by run)."""
        ids, _ = self._engine.encode_flat(["".join(rows.texts)])
        where = self._added_at(ids)
        if len(where) != len(rows.expected):
            return None
        bounds = np.empty(len(rows.texts) + 1, dtype=np.int64)
        bounds[:-1] = where[rows.firsts]
        bounds[-1] = len(ids)
        return ids, bounds

    def _one_pass_floor(self) -> int | None:
        """The added tokens' floor when a batch's arrays are made in one compiled pass over its
        IDs (``_owners``); None when the numpy passes make them."""
        return self._added_floor if _ONE_PASS else None

    def _whole_encode(
        self, rows: _Rows, encoded: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[dict[int, Encoding], list[int]]:
        """The rows' encodings by position (of their IDs, ``encoded``, or encoded now), and the
        positions of rows to encode run by run after all (see ``_whole_arrays``)."""
        ids, bounds = self._whole_engine(rows) if encoded is None else encoded
        floor = self._one_pass_floor()
        if floor is not None:
            return self._whole_owned(rows, ids, bounds, floor)
        if len(rows.texts) == 1:
            return self._whole_one(rows, ids, bounds)
        return self._whole_arrays(rows, ids, bounds)

    def _whole_owned(
        self, rows: _Rows, ids: np.ndarray, bounds: np.ndarray, floor: int
    ) -> tuple[dict[int, Encoding], list[int]]:
        """``_whole_arrays`` with the per-token work in one compiled pass (``_owners``)."""
        heads = rows.heads
        first_met = rows.new_heads or rows.seen is not None  # a system turn or a long request
        # A batch finds its added tokens first (_markers_match, _whole_heads): a head it keeps
        # may be another row's. A request's only row keeps nothing another needs, so what it
        # keeps is read after the one pass, from its runs' token counts (_keep_counted):
        # those numpy passes over its IDs were a tenth of encoding a long conversation.
        counted = first_met and len(rows.texts) == 1
        if first_met and not counted:
            where = self._added_at(ids)
            if not _markers_match(rows, ids, bounds, where):
                return {}, rows.positions
            heads = self._whole_heads(rows, ids, bounds, where)
            self._keep_first_run(rows, ids, where)
        columns = ([*rows.firsts, len(rows.expected)], rows.expected, rows.marker_runs)
        owned = _owners(
            np.ascontiguousarray(ids, dtype=np.int32),  # as the compiled loops read it (a view)
            bounds.tolist(),
            floor,
            (*columns, rows.turn, rows.trained),
            heads,
            rows.head_runs,
            rows.runs,
        )
        if owned is None:
            return {}, rows.positions
        ids, edges, turn, trained, counts = owned
        if counted:
            self._keep_counted(rows, ids, counts)
        return self._by_row(rows, ids, edges.tolist(), counts, turn, trained)

    def _keep_counted(self, rows: _Rows, ids: np.ndarray, counts: np.ndarray) -> None:
        """What a request met first keeps (its system turn, its first text run), from its
        arrays (markers checked, its kept head put back) and each run's token count."""
        ends = list(accumulate(counts.tolist(), initial=0))  # where each run starts, then ends
        for key in rows.new_heads:  # it encoded its system turn: its first runs' tokens
            with self._lock:
                self._remember_head(key, np.array(ids[: ends[len(key)]]))
        if rows.seen is not None and self._cache_limit:
            first = rows.marker_runs[0] + 1  # the first text run follows the first marker
            with self._lock:
                self._remember(rows.seen, np.array(ids[ends[first] : ends[first + 1]]))

    def _by_row(
        self,
        rows: _Rows,
        ids: np.ndarray,
        edges: list[int],
        counts: list[int] | np.ndarray,
        turn: np.ndarray,
        trained: np.ndarray,
    ) -> tuple[dict[int, Encoding], list[int]]:
        """Each row's ``Encoding`` (views of the batch's arrays) once the runs whose owner
        changes inside them are split, and the positions of rows to encode run by run."""
        if len(rows.texts) == 1:  # a request: its one or two crossing runs in Python
            if isinstance(counts, np.ndarray):
                counts = counts.tolist()  # summed in Python: numpy's scalars cost 50x an int's
            if rows.crossing and not self._split_one(rows, ids, counts, turn, trained):
                return {}, rows.positions
            return {rows.positions[0]: _encoded(ids, trained, turn, rows.sources[0], self)}, []
        bad = self._split_crossing(rows, ids, counts, turn, trained) if rows.crossing else set()
        done: dict[int, Encoding] = {}
        failed: list[int] = []
        sources = rows.sources
        for row, (position, a, b) in enumerate(zip(rows.positions, edges, edges[1:], strict=False)):
            if row in bad:
                failed.append(position)
            else:
                done[position] = _encoded(ids[a:b], trained[a:b], turn[a:b], sources[row], self)
        return done, failed

    def _keep_first_run(self, rows: _Rows, ids: np.ndarray, where: np.ndarray) -> None:
        """A long request met the first time: its first text run's IDs into the run cache
        (``_first_time``)."""
        if rows.seen is None or not self._cache_limit:
            return
        at = where.tolist()
        with self._lock:  # the first text run follows the first marker
            end = at[1] if len(at) > 1 else len(ids)
            self._remember(rows.seen, np.array(ids[at[0] + 1 : end]))

    def _whole_one(
        self, rows: _Rows, ids: np.ndarray, bounds: np.ndarray
    ) -> tuple[dict[int, Encoding], list[int]]:
        """``_whole_arrays`` for one prompt (a request), with the few markers' arithmetic in
        Python: each numpy call costs a microsecond or two, as much as a marker's in Python."""
        where = self._added_at(ids)
        at = where.tolist()
        if len(at) != len(rows.expected) or ids[where].tolist() != rows.expected:
            return {}, rows.positions
        head = self._whole_heads(rows, ids, bounds, where)[0]
        self._keep_first_run(rows, ids, where)
        counts = [0] * rows.runs
        for run, start, end in zip(rows.marker_runs, at, [*at[1:], len(ids)], strict=True):
            counts[run] = 1
            if end > start + 1:
                counts[run + 1] = end - start - 1
        if head is not None:
            counts[0] = len(head)
            ids = np.concatenate((head, ids))
        turn = np.repeat(np.array(rows.turn, dtype=np.int32), counts)
        trained = np.repeat(np.array(rows.trained, dtype=bool), counts)
        return self._by_row(rows, ids, [0, len(ids)], counts, turn, trained)

    def _split_one(
        self,
        rows: _Rows,
        ids: np.ndarray,
        counts: list[int] | np.ndarray,
        turn: np.ndarray,
        trained: np.ndarray,
    ) -> bool:
        """``_split_crossing`` for one prompt's few crossing runs, in Python (a request has one
        or two: the numpy version's fixed cost, ~25 calls, was most of a chat turn's). False
        when a run's tokens do not spell its bytes exactly."""
        token_bytes = self._token_bytes
        assert token_bytes is not None  # _whole_crossing took no crossing run otherwise
        for run, _, size, starts, owners in rows.crossing:
            first = sum(counts[:run])
            ends = list(accumulate(token_bytes[ids[first : first + counts[run]]].tolist()))
            if (ends[-1] if ends else 0) != size:
                return False
            for start, (owner_turn, owner_trained) in zip(starts, owners, strict=True):
                at = first + _first_at(ends, start)
                turn[at : first + counts[run]] = owner_turn
                trained[at : first + counts[run]] = owner_trained
        return True

    def _lay_out_whole(
        self, prompt: Any, position: int, rows: _Rows, longest: int | None = None
    ) -> bool:
        """Add ``prompt`` to ``rows``; False (nothing added) when this path does not take it
        (or its text is longer than ``longest``)."""
        if type(prompt) is not Prompt:
            return False
        runs = prompt._layout()
        head, start, new = (
            (None, 0, None) if prompt._head is None else self._whole_head(prompt._head, rows)
        )
        rest = runs[start:] if start else runs
        if not rest:
            return False
        markers, owners = len(rows.expected), len(rows.turn)
        if head is not None:  # one run of its own before the row's (its tokens: its kept IDs)
            rows.turn.append(runs[0][2])
            rows.trained.append(False)
        base = rows.runs + (head is not None)
        text = self._whole_text(rest, base, rows, longest)
        if text is None:
            rows.drop(markers, owners)
            return False
        if new is not None:
            rows.new_heads[new] = (len(rows.texts), list(map(_KIND, new)).count(_RUN_MARKER))
        if head is not None:
            rows.head_runs.append(rows.runs)
        rows.positions.append(position)
        rows.texts.append(text)
        rows.sources.append((prompt._segments, prompt._segs))
        rows.heads.append(head)
        rows.firsts.append(markers)
        rows.runs = base + len(rest)
        return True

    def _whole_text(
        self, rest: Sequence[Any], base: int, rows: _Rows, longest: int | None
    ) -> str | None:
        """The engine's text of a prompt's runs ``rest`` (counted from ``base``), their columns
        added to ``rows``; None when this path does not take them (the caller drops what was
        added)."""
        found = _columns(rest, base, self._added_ids, self._marker_initial, rows.out)
        if found is None:
            return None  # its tokens would not start on a marker, or it holds a refusal
        text, crossing, suspect = found
        if self._cuttable and _cut_length(len(text)):
            return None  # long: encoded in pieces, to bound the engine's memory
        if self._spells_marker(suspect):
            return None  # a text run spells an added token: encoded literally or refused
        if longest and len(text) > longest and not self._first_time(rest, rows):
            return None  # a long request met before (see _whole_rows)
        if crossing and not self._whole_crossing(rest, base, len(rows.texts), rows.crossing):
            return None
        return text

    def _first_time(self, rest: Sequence[Any], rows: _Rows) -> bool:
        """Whether a long request's first text run is new to the run cache (and, if so, that
        run is to be kept once encoded: ``rows.seen``)."""
        if len(rest) < 2 or rest[1][0] != _RUN_TEXT:
            return False
        first = rest[1][1]
        with self._lock:
            if first in self._cache:
                return False
        rows.seen = first
        return True

    def _whole_head(
        self, head: tuple[Any, ...] | None, rows: _Rows
    ) -> tuple[Any, int, tuple[Any, ...] | None]:
        """A shared system turn left out of the text: its IDs (or its key, when a row of this
        batch encodes it) and how many runs it covers; or (None, 0) to encode it with the row,
        and the head to keep from that row (one all one message's, untrained, as
        ``_lay_out_head`` keeps)."""
        if head is None:
            return None, 0, None
        held = rows.held.get(id(head))
        if held is not None and held[0] is head:
            return held[1], len(head), None
        ids = rows.known.get(head)
        if ids is None:
            ids = self._kept_head(head)
            if ids is not None:
                rows.known[head] = ids
        if ids is not None:
            rows.held[id(head)] = (head, ids)
            return ids, len(head), None
        if head in rows.new_heads:
            return head, len(head), None
        if self._cache_limit and _keepable(head):
            return None, 0, head
        return None, 0, None

    def _spells_marker(self, suspect: str | None) -> bool:
        """Whether a text run spells an added token, given the runs that may (``_Columns``)."""
        return suspect is not None and self._added_pattern.search(suspect) is not None

    def _whole_crossing(
        self, rest: Sequence[Any], base: int, row: int, out: list[_Crossing]
    ) -> bool:
        """The runs whose owner changes inside them, with where each part starts in bytes: a
        byte-level token spells its bytes in order, so its offset in the run is the sum of the
        byte lengths of the tokens before it. False (and nothing added) when that does not hold:
        not byte-level, or the normaliser would change the run's text."""
        if self._token_bytes is None:
            return False
        nfc = self._tokenizer.normalizer is not None
        found: list[_Crossing] = []
        for at, (_, text, _, _, run_parts) in enumerate(rest):
            if run_parts is None:
                continue
            if nfc and not unicodedata.is_normalized("NFC", text):
                return False
            starts = tuple(
                offset if text[:offset].isascii() else len(text[:offset].encode())
                for offset, _, _ in run_parts[1:]
            )
            size = len(text) if text.isascii() else len(text.encode())
            owners = tuple((turn, trained) for _, turn, trained in run_parts[1:])
            found.append((base + at, row, size, starts, owners))
        out += found
        return True

    def _whole_arrays(
        self, rows: _Rows, ids: np.ndarray, bounds: np.ndarray
    ) -> tuple[dict[int, Encoding], list[int]]:
        """Each row's arrays from the batch's IDs; if some row's added tokens are not exactly
        its markers (never seen: a guard, not a path), every position, for the run-by-run
        path."""
        where = self._added_at(ids)
        if not _markers_match(rows, ids, bounds, where):
            return {}, rows.positions
        heads = self._whole_heads(rows, ids, bounds, where)
        # Each run's token count: 1 for a marker; the tokens up to the next marker for the text
        # run after it (adjacent markers have none between them); a head's, its IDs'.
        counts = np.zeros(rows.runs + 1, dtype=np.int64)
        marker_runs = np.asarray(rows.marker_runs, dtype=np.int64)
        counts[marker_runs] = 1
        gaps = np.diff(where, append=len(ids))
        gaps -= 1
        counts[marker_runs + 1] += gaps
        if rows.head_runs:
            kept = [head for head in heads if head is not None]
            counts[rows.head_runs] = [len(head) for head in kept]
            ids, bounds = _with_heads(ids, bounds, heads, kept)
        counts = counts[:-1]
        turn = np.repeat(np.asarray(rows.turn, dtype=np.int32), counts)
        trained = np.repeat(np.asarray(rows.trained, dtype=bool), counts)
        return self._by_row(rows, ids, bounds.tolist(), counts, turn, trained)

    def _split_crossing(
        self,
        rows: _Rows,
        ids: np.ndarray,
        counts: list[int] | np.ndarray,
        turn: np.ndarray,
        trained: np.ndarray,
    ) -> set[int]:
        """Give each token of a crossing run the owner of the part its first byte is in; the
        rows where a run's tokens do not spell its bytes exactly are returned as bad."""
        counts = np.asarray(counts)
        crossing = rows.crossing
        runs = np.asarray([c[0] for c in crossing], dtype=np.int64)
        sizes_of = counts[runs]
        firsts = (np.cumsum(counts) - counts)[runs]
        # The crossing runs' tokens, run after run: their positions and byte offsets in the run.
        before = np.cumsum(sizes_of) - sizes_of
        tokens = np.arange(int(sizes_of.sum()), dtype=np.int64)
        tokens += np.repeat(firsts - before, sizes_of)
        which = np.repeat(np.arange(len(crossing)), sizes_of)
        token_bytes = self._token_bytes
        assert token_bytes is not None  # _whole_crossing took no crossing run otherwise
        sizes = token_bytes[ids[tokens]]
        ends = np.cumsum(sizes)
        # Where each run's bytes end: 0 before the first token, so that a run of no tokens
        # (empty parts) ends where the one before it did, even first or alone.
        run_end = np.concatenate(([0], ends))[np.cumsum(sizes_of)]
        run_bytes = np.diff(run_end, prepend=0)
        begins = ends - sizes
        begins -= np.repeat(run_end - run_bytes, sizes_of)
        expected = np.asarray([c[2] for c in crossing], dtype=np.int64)
        bad = {crossing[c][1] for c in np.flatnonzero(run_bytes != expected).tolist()}
        width = max(len(c[3]) for c in crossing)
        starts = np.full((len(crossing), width), np.iinfo(np.int64).max, dtype=np.int64)
        part_turn = np.empty((len(crossing), width + 1), dtype=np.int32)
        part_trained = np.zeros((len(crossing), width + 1), dtype=bool)
        for c, (run, _, _, run_starts, owners) in enumerate(crossing):
            starts[c, : len(run_starts)] = run_starts
            part_turn[c, 0] = rows.turn[run]
            part_trained[c, 0] = rows.trained[run]
            for p, (owner_turn, owner_trained) in enumerate(owners, 1):
                part_turn[c, p] = owner_turn
                part_trained[c, p] = owner_trained
        part = np.zeros(len(which), dtype=np.int64)
        for p in range(width):
            part += begins >= starts[which, p]
        turn[tokens] = part_turn[which, part]
        trained[tokens] = part_trained[which, part]
        return bad

    def _whole_heads(
        self, rows: _Rows, ids: np.ndarray, bounds: np.ndarray, where: np.ndarray
    ) -> list[Any]:
        """Each row's head IDs (None: none left out); a head first met in this batch comes from
        the row that encoded it whole (every row kept has its markers where they belong, so
        the tokens before the first marker after the head are the head's), and is kept for
        later batches."""
        if not rows.new_heads:
            return rows.heads
        found: dict[tuple[Any, ...], np.ndarray] = {}
        for key, (row, markers) in rows.new_heads.items():
            end = int(where[rows.firsts[row] + markers])
            block = np.array(ids[int(bounds[row]) : end])
            found[key] = block
            with self._lock:
                self._remember_head(key, block)
        return [found[h] if type(h) is tuple else h for h in rows.heads]


# One prompt's runs as ``_lay_out_whole`` lays them out: its markers' IDs and runs (counted from
# ``base``) and each run's owner added to the batch's columns (``_Out``: expected, marker_runs,
# turn, trained), and returned: its text, whether some run changes owner inside it, and what
# ``_added_pattern`` must search (its text runs that may spell an added token, joined by NUL,
# which no Qwen added token holds; None: none can). None when the prompt does not start on a
# marker, holds a refusal (a hand-made segment of no known type), or a marker the vocabulary
# lacks; what was added is then the caller's to drop (``_Rows.drop``). Added in place, not
# returned as lists: four lists made, joined to the batch's and freed per row were a sixth of
# laying out a short row.
_Out: TypeAlias = tuple[list[int], list[int], list[int], list[bool]]
_Columns: TypeAlias = tuple[str, bool, str | None]


def _columns_builtin(
    rest: Sequence[Any], base: int, added_ids: dict[str, int], initial: str | None, out: _Out
) -> _Columns | None:
    """``_Columns`` in a few passes of builtins over the runs: pure Python's fastest."""
    kinds, texts, turns, trained, parts = zip(*rest, strict=True)
    if kinds[0] != _RUN_MARKER or _RUN_BAD in kinds:
        return None
    is_marker = list(map(not_, kinds))
    markers = list(compress(texts, is_marker))
    expected: list[Any] = list(map(added_ids.get, markers))
    if None in expected:
        return None
    text = "".join(texts)
    # Every added token starts with ``initial``: when the text holds it only in the markers,
    # no text run can spell one (most prompts).
    suspect = None
    if initial is None or text.count(initial) != "".join(markers).count(initial):
        suspect = "\x00".join(compress(texts, kinds))
    out[0].extend(expected)
    out[1].extend(compress(range(base, base + len(rest)), is_marker))
    out[2].extend(turns)
    out[3].extend(trained)
    return text, parts.count(None) != len(parts), suspect


def _columns_loop(
    rest: Sequence[Any], base: int, added_ids: dict[str, int], initial: str | None, out: _Out
) -> _Columns | None:
    """``_Columns`` in one pass over the runs: what the compiled module runs (typed by
    encoder_whole.pxd, a third of the builtins' time; as Python, twice it)."""
    expected, marker_runs, turns, trained = out
    texts: list[str] = []
    suspect: list[str] = []
    crossing = False
    for k in range(len(rest)):
        run = rest[k]
        kind = run[0]
        text = run[1]
        if kind == _RUN_MARKER:
            found = added_ids.get(text)
            if found is None:
                return None
            expected.append(found)
            marker_runs.append(base + k)
        elif kind != _RUN_TEXT or not k:
            return None
        elif initial is None or initial in text:
            suspect.append(text)
        texts.append(text)
        turns.append(run[2])
        trained.append(run[3])
        if run[4] is not None:
            crossing = True
    joined = "\x00".join(suspect) if suspect else None
    return "".join(texts), crossing, joined


_columns = _columns_loop if runs_compiled("encoder_whole") else _columns_builtin


def _for_threads(texts: list[str]) -> tuple[list[str], list[int] | None]:
    """The engine's input for ``texts`` (see ``_THREADS``): each long text of a batch smaller than
    the machine's cores cut into pieces, each but the first starting on a turn's marker, and
    where each text's pieces start among them (and their count last); None when nothing is cut.

    A cut right before a marker keeps the IDs: the engine splits a text at the added tokens it
    spells and encodes each piece between two of them on its own, so the pieces' IDs, in order,
    are the text's. Every ``<|im_start|>`` of a text taken here is one of its markers (no text
    run spells an added token, and none can be spelled across a marker's edge)."""
    threads = _THREADS or 1
    if len(texts) >= threads or all(len(text) < 2 * _THREAD_PIECE for text in texts):
        return texts, None
    pieces: list[str] = []
    firsts: list[int] = []
    for text in texts:
        firsts.append(len(pieces))
        count = min(threads, len(text) // _THREAD_PIECE)
        start = 0
        for k in range(1, count):
            cut = text.find(TURN_OPEN, max(start + 1, len(text) * k // count))
            if cut < 0:
                break
            pieces.append(text[start:cut])
            start = cut
        pieces.append(text[start:])
    firsts.append(len(pieces))
    return pieces, firsts


def _with_heads(
    ids: np.ndarray, bounds: np.ndarray, heads: list[Any], kept: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The batch's IDs with each row's kept head before its own, and the new bounds."""
    edges = bounds.tolist()
    pieces: list[np.ndarray] = []
    for row, head in enumerate(heads):
        if head is not None:
            pieces.append(head)
        pieces.append(ids[edges[row] : edges[row + 1]])
    lengths = np.zeros(len(heads) + 1, dtype=np.int64)
    lengths[1:][[h is not None for h in heads]] = [len(head) for head in kept]
    return np.concatenate(pieces), bounds + np.cumsum(lengths)


def _first_at(ends: list[int], start: int) -> int:
    """The first token whose first byte is at or past byte ``start`` of its run, given where
    each token ends (token i starts where token i - 1 ends, the first at 0): the part starting
    there owns it and the tokens after it, as ``_split_crossing`` assigns them."""
    if start <= 0:
        return 0
    return 1 + bisect_left(ends, start, 0, len(ends) - 1)


def _markers_match(rows: _Rows, ids: np.ndarray, bounds: np.ndarray, where: np.ndarray) -> bool:
    """Whether every row's added-token IDs are exactly its markers, in order."""
    counts = np.searchsorted(where, bounds)
    firsts = np.asarray([*rows.firsts, len(rows.expected)], dtype=np.int64)
    expected = np.asarray(rows.expected, dtype=np.int32)
    return np.array_equal(counts, firsts) and np.array_equal(ids[where], expected)


def _separable(contents: list[str]) -> bool:
    """Whether no added token can be spelled across another's edge or inside it: none holds
    another, and no proper suffix of one is a proper prefix of one (itself included: a token
    that overlaps itself). Then in marker + text + marker ..., with no text spelling one, the
    only added tokens spelled anywhere are the markers, whatever a matcher does."""
    tokens = set(contents)
    if any(a != t and a in t for a in tokens for t in tokens):
        return False
    prefixes = {t[:k] for t in tokens for k in range(1, len(t))}
    return not any(t[k:] in prefixes for t in tokens for k in range(1, len(t)))
