"""Each token's owner in a batch encoded whole, in one pass over the IDs: what the compiled
module runs (typed by encoder_owners.pxd, with the IDs as C arrays) in place of the numpy
passes of ``encoder_whole`` (find the added tokens, check them against the markers, count each
run's tokens, put the kept system turns back, spread each run's owner over its tokens), which
cost a short row more than the engine did. Uncompiled, ``encoder_whole`` keeps its numpy
passes (a Python loop over tokens would be far slower); ``tests/test_encoder_whole.py`` holds
the two to the same arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# The batch's arrays with each kept system turn put back before its row: the IDs, each row's
# bounds among them, each token's owner (turn, trained), and each run's token count.
_Owned = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _owners(
    ids: np.ndarray,
    bounds: list[int],
    floor: int,
    columns: tuple[list[int], list[int], list[int], list[int], list[bool]],
    heads: list[Any],
    head_runs: list[int],
    runs: int,
) -> _Owned | None:
    """The arrays of rows whose IDs (int32) are ``ids[bounds[r]:bounds[r + 1]]``, every ID at
    or above ``floor`` an added token. ``columns``: each row's first marker (and the count of
    markers last), every marker's expected ID and its run, and every run's turn and trained.
    ``heads``: each row's kept system turn (int32 IDs, its owner the run in ``head_runs``, in
    row order) or None. None when a row's added tokens are not exactly its markers, in order,
    or it does not start on one: the batch then goes run by run."""
    firsts, expected, marker_runs, turn, trained = columns
    rows = len(bounds) - 1
    size = len(ids)
    for head in heads:
        if head is not None:
            size += len(head)
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
        start = bounds[r]
        end = bounds[r + 1]
        last = firsts[r + 1]
        if start == end or ids[start] < floor:
            return None  # a row starts on its first marker
        text_run = 0  # set by the row's first token, a marker
        text_turn = 0
        text_trained = 0
        for t in range(start, end):
            value = ids[t]
            out_ids[pos] = value
            if value >= floor:
                if k == last or value != expected[k]:
                    return None
                run = marker_runs[k]
                k += 1
                counts[run] = 1
                out_turn[pos] = turn[run]
                out_trained[pos] = trained[run]
                text_run = -1 - run  # the text run after this marker, owner not yet read
            else:
                if text_run < 0:
                    text_run = -text_run
                    text_turn = turn[text_run]
                    text_trained = trained[text_run]
                counts[text_run] += 1
                out_turn[pos] = text_turn
                out_trained[pos] = text_trained
            pos += 1
        if k != last:
            return None
    out_bounds[rows] = pos
    return ids_array, bounds_array, turn_array, trained_array.view(np.bool_), counts_array


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
