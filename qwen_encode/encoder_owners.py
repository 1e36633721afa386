# cython: boundscheck=False, wraparound=False
# (Compiled, the loops index without checks: _fits has checked every index they compute.)
"""Each token's owner in a batch encoded whole, in one pass over the IDs: what the compiled
module runs (typed by encoder_owners.pxd, with the IDs as C arrays) in place of the numpy
passes of ``encoder_whole`` (find the added tokens, check them against the markers, count each
run's tokens, put the kept system turns back, spread each run's owner over its tokens), which
cost a short row more than the engine did. Uncompiled, ``encoder_whole`` keeps its numpy
passes (a Python loop over tokens would be far slower); ``tests/test_encoder_whole.py`` holds
the two to the same arrays.

Compiled, the loops index without bounds checks (encoder_owners.pxd): ``_fits`` first checks
that the columns fit together, so that every index the loops compute is in range.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# The batch's arrays with each kept system turn put back before its row: the IDs, each row's
# bounds among them, each token's owner (turn, trained), and each run's token count.
_Owned = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# Each row's first marker (the markers' count last), every marker's expected ID and its run,
# every run's turn and trained.
_Columns = tuple[list[int], list[int], list[int], list[int], list[bool]]


def _owners(
    ids: np.ndarray,
    bounds: list[int],
    floor: int,
    columns: _Columns,
    heads: list[Any],
    head_runs: list[int],
    runs: int,
) -> _Owned | None:
    """The arrays of rows whose IDs (int32, contiguous) are ``ids[bounds[r]:bounds[r + 1]]``,
    every ID at or above ``floor`` an added token. ``heads``: each row's kept system turn (int32
    IDs, its owner the run in ``head_runs``, in row order) or None. None when a row's added
    tokens are not exactly its markers, in order, or it does not start on one (the batch then
    goes run by run), or when the columns do not fit together."""
    size = _fits(len(ids), bounds, columns, heads, head_runs, runs)
    if size < 0:
        return None
    rows = len(bounds) - 1
    firsts, turn = columns[0], columns[3]
    ids_array = np.empty(size, dtype=np.int32)
    bounds_array = np.empty(rows + 1, dtype=np.intp)
    turn_array = np.empty(size, dtype=np.int32)
    trained_array = np.zeros(size, dtype=np.uint8)
    counts_array = np.zeros(runs, dtype=np.intp)
    # The same arrays, as C arrays when compiled (encoder_owners.pxd types these names).
    out_ids, out_bounds, out_turn = ids_array, bounds_array, turn_array
    out_trained, counts = trained_array, counts_array
    pos = 0
    k = 0
    h = 0
    for r in range(rows):
        out_bounds[r] = pos
        head = heads[r]
        if head is not None:
            run = head_runs[h]
            h += 1
            pos = _put_head(out_ids, out_turn, pos, head, turn[run])
            counts[run] = len(head)
        start, end, last = bounds[r], bounds[r + 1], firsts[r + 1]
        k = _owned_row(
            ids, start, end, floor, columns, k, last, out_ids, out_turn, out_trained, counts, pos
        )
        if k < 0:
            return None
        pos += end - start
    out_bounds[rows] = pos
    return ids_array, bounds_array, turn_array, trained_array.view(np.bool_), counts_array


def _fits(
    count: int,
    bounds: list[int],
    columns: _Columns,
    heads: list[Any],
    head_runs: list[int],
    runs: int,
) -> int:
    """The batch's size with its heads put back, or -1 when the columns do not fit together:
    the bounds cover the IDs in order, the rows' first markers are in order and end at the
    markers' count, every marker's run and every head's run is a run, a head run per head."""
    firsts, expected, marker_runs, turn, trained = columns
    rows = len(bounds) - 1
    if rows < 0 or bounds[0] != 0 or bounds[rows] != count or len(firsts) != rows + 1:
        return -1
    if len(heads) != rows or len(turn) != runs or len(trained) != runs:
        return -1
    if firsts[0] != 0 or firsts[rows] != len(expected) or len(marker_runs) != len(expected):
        return -1
    for r in range(rows):
        if bounds[r] > bounds[r + 1] or firsts[r] > firsts[r + 1]:
            return -1
    for run in marker_runs:
        if not 0 <= run < runs:
            return -1
    size = count
    kept = 0
    for head in heads:
        if head is not None:
            size += len(head)
            kept += 1
    if kept != len(head_runs):
        return -1
    for run in head_runs:
        if not 0 <= run < runs:
            return -1
    return size


def _owned_row(
    ids: np.ndarray,
    start: int,
    end: int,
    floor: int,
    columns: _Columns,
    k: int,
    last: int,
    out_ids: np.ndarray,
    out_turn: np.ndarray,
    out_trained: np.ndarray,
    counts: np.ndarray,
    pos: int,
) -> int:
    """A row's IDs (``ids[start:end]``) copied to ``out_ids[pos:]`` with their owners, its runs'
    token counts; its added tokens checked to be exactly its markers ``k`` to ``last``, in
    order, the first ID one. ``last``, or -1."""
    _, expected, marker_runs, turn, trained = columns
    if start == end or ids[start] < floor:
        return -1  # a row starts on its first marker
    after = 0  # the run after the last marker: the text run its next tokens belong to
    text = -1  # the text run being read (its owner read at its first token), or -1
    text_start = 0
    text_turn = 0
    text_trained = 0
    for t in range(start, end):
        value = ids[t]
        out_ids[pos] = value
        if value >= floor:
            if text >= 0:
                counts[text] = pos - text_start
                text = -1
            if k == last:
                return -1
            want = expected[k]
            if value != want:
                return -1
            run = marker_runs[k]
            k += 1
            counts[run] = 1
            out_turn[pos] = turn[run]
            out_trained[pos] = trained[run]
            after = run + 1
        else:
            if text < 0:
                if after >= len(turn):
                    return -1  # tokens after the last run
                text = after
                text_start = pos
                text_turn = turn[text]
                text_trained = trained[text]
            out_turn[pos] = text_turn
            out_trained[pos] = text_trained
        pos += 1
    if text >= 0:
        counts[text] = pos - text_start
    return k if k == last else -1


def _put_head(
    out_ids: np.ndarray,
    out_turn: np.ndarray,
    pos: int,
    head: np.ndarray,
    owner: int,
) -> int:
    """A kept system turn's IDs at ``pos``, owned by message ``owner`` and untrained (as
    ``_lay_out_head`` keeps only those); where the row's own IDs start."""
    values = head  # a C array when compiled
    for j in range(len(head)):
        out_ids[pos + j] = values[j]
        out_turn[pos + j] = owner
    return pos + len(head)
