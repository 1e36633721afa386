"""Assembling a batch's arrays: every item's IDs joined once, the assistant mask and turn index
repeated from the items, and the runs that cross two owners (an untrained header joined to
trained content) split where their tokens change owner.
"""

from __future__ import annotations

import unicodedata
from functools import cached_property
from itertools import pairwise

import numpy as np

from .encoder_layout import _Batch
from .encoder_pieces import _pieces
from .encoder_runs import _Runs
from .encoding import Encoding

# Byte-level BPE spells each byte as one character (GPT-2's table: printable Latin-1 bytes as
# themselves, the others shifted past U+0100), so a model token's length is its length in bytes.
_BYTE_ALPHABET = frozenset(
    [chr(b) for b in range(0x21, 0x7F)]
    + [chr(b) for b in range(0xA1, 0xAD)]
    + [chr(b) for b in range(0xAE, 0x100)]
    + [chr(0x100 + n) for n in range(68)]
)


class _Assembly(_Runs):
    """The encoder's assembly of encoded runs into ``Encoding`` arrays (``Encoder`` inherits
    it)."""

    def _assemble(self, batch: _Batch, runs: list[np.ndarray]) -> list[Encoding]:
        """Every prompt's arrays, built for the whole batch at once (one join of every item's
        IDs, one repeat per per-token array) and handed out as slices."""
        marker_ids = self._marker_ids
        if batch.heads:
            marker_ids = {**marker_ids, **batch.blocks}
            for head, code, item in batch.deferred:
                ids = np.concatenate(
                    [
                        runs[s] if s >= 0 else marker_ids[s]
                        for s in batch.source[item : item + len(head)]
                    ]
                )
                marker_ids[code] = ids
                if self._cache_limit:
                    with self._lock:
                        self._remember_head(head, ids)
        pieces = [runs[s] if s >= 0 else marker_ids[s] for s in batch.source]
        if batch.crossing:
            texts = list(batch.slots)
            for item, slot, part_starts in batch.crossing:
                ids = runs[slot]
                counts = self._part_lengths(
                    ids, texts[slot], part_starts, literal=batch.literal[slot]
                )
                at = 0
                for part, count in enumerate(counts):
                    pieces[item + part] = ids[at : at + count]
                    at += count
        if len(batch.ends) == 1 and pieces:
            # One prompt (a request): no offsets to slice at, a few numpy calls fewer.
            counts = [len(piece) for piece in pieces]
            return [
                Encoding(
                    np.concatenate(pieces),
                    np.repeat(np.asarray(batch.trained, dtype=bool), counts),
                    np.repeat(np.asarray(batch.turn, dtype=np.int32), counts),
                )
            ]
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        input_ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
        assistant_mask = np.repeat(np.asarray(batch.trained, dtype=bool), lengths)
        turn_index = np.repeat(np.asarray(batch.turn, dtype=np.int32), lengths)
        ends = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=ends[1:])
        bounds = ends[np.asarray([0, *batch.ends])].tolist()
        return [
            Encoding(input_ids[a:b], assistant_mask[a:b], turn_index[a:b])
            for a, b in pairwise(bounds)
        ]

    def _part_lengths(
        self, ids: np.ndarray, text: str, part_starts: tuple[int, ...], *, literal: bool
    ) -> list[int]:
        """How many of a crossing run's tokens belong to each part: each token goes to the part
        its first character is in. The template's joins fall on pre-token boundaries there (a
        '\n' then trimmed content), so no token straddles two parts.

        Byte-level BPE tokens spell the UTF-8 bytes of the normalised text in order, so where the
        normaliser leaves the text as it is, each token's start is the sum of the byte lengths
        of the tokens before it: no offsets needed, so the run is encoded with the others by
        whichever engine runs (fastokens has no offsets). Otherwise (NFC changes the text), the
        reference tokenizer's character offsets decide."""
        token_bytes = self._token_bytes
        if token_bytes is not None and (
            self._tokenizer.normalizer is None or unicodedata.is_normalized("NFC", text)
        ):
            sizes = token_bytes[ids]
            edges = [*part_starts, len(text)]
            part_bytes = np.cumsum([0, *(len(text[a:b].encode()) for a, b in pairwise(edges))])
            if int(sizes.sum()) == int(part_bytes[-1]):
                begins = np.cumsum(sizes) - sizes
                owner = np.searchsorted(part_bytes[:-1], begins, side="right") - 1
                return list(np.bincount(owner, minlength=len(part_starts)).tolist())
        counts = [0] * len(part_starts)
        base = 0
        for piece in _pieces(text) if self._cuttable else [text]:
            if literal:
                encoding = self._reference.ordinary_encoding(piece)
            else:
                encoding = self._tokenizer.encode(piece, add_special_tokens=False)
            begins = np.asarray([b for b, _ in encoding.offsets], dtype=np.int64) + base
            owner = np.searchsorted(np.asarray(part_starts), begins, side="right") - 1
            for part, count in enumerate(np.bincount(owner, minlength=len(part_starts))):
                counts[part] += int(count)
            base += len(piece)
        return counts

    @cached_property
    def _token_bytes(self) -> np.ndarray | None:
        """Each ID's length in bytes, or None when the vocabulary is not byte-level (a token
        outside the byte alphabet). Built on first use: only runs that cross parts need it."""
        sizes = np.zeros(self._tokenizer.get_vocab_size(with_added_tokens=True), dtype=np.int64)
        for token, token_id in self._tokenizer.get_vocab(with_added_tokens=True).items():
            if token in self._added_ids:
                sizes[token_id] = len(token.encode())
            elif not _BYTE_ALPHABET.issuperset(token):
                return None
            else:
                sizes[token_id] = len(token)
        return sizes
