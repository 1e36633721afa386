"""Encoding a batch's run texts: the cache of encoded runs and of shared system turns' IDs, the
engine calls (one parallel batch call, or run by run for a short request; long runs in pieces),
and bringing fastokens up for ``engine="auto"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .encoder_layout import _Batch, _Layout
from .encoder_pieces import _cut_length, _pieces
from .engines import load_fastokens, split_flat

# "auto" keeps one-shot use fast: fastokens loads ~3x slower than tokenizers (2.8 s vs 0.8 s) but
# then encodes ~8x faster, saving ~1 s per million tokens. It is brought up once the encoder has
# met this much new text (about 2M tokens, in one batch or over many), where the saving starts to
# repay the one-time load; a single request or a small job never pays it.
_AUTO_FASTOKENS_CHARS = 8_000_000
# Text runs recur across requests (the tools block, a shared system prompt, every earlier turn of
# a growing chat): their IDs are kept, up to this many bytes of text plus IDs.
_RUN_CACHE_BYTES = 64 << 20
# A batch whose new text is at most this many runs and characters (one short request) is encoded
# run by run on the calling thread instead of by the engine's parallel batch call (see _run_ids).
_SMALL_RUNS = 32
_SMALL_CHARS = 16_384


class _Runs(_Layout):
    """The encoder's run cache and engine calls (``Encoder`` inherits it)."""

    def _bring_up_fastokens(self) -> None:
        self._engine_wanted = "tokenizers"  # one attempt: a failure is not retried per batch
        assert self._tokenizer_json is not None
        fast = load_fastokens(self._tokenizer_json, self._reference, list(self._added_ids))
        if fast is not None:
            self._engine = fast

    def _count_work(self, chars: int) -> None:
        """Count ``chars`` of new text toward bringing fastokens up (``engine="auto"``)."""
        with self._lock:
            self._work += chars
            if self._engine_wanted == "auto" and self._work >= _AUTO_FASTOKENS_CHARS:
                self._bring_up_fastokens()

    def _run_ids(self, batch: _Batch) -> list[np.ndarray]:
        """Each slot's IDs: from the run cache, or encoded now (all new text of the batch in one
        call of the engine's parallel batch API)."""
        texts = list(batch.slots)
        runs: list[np.ndarray | None] = [None] * len(texts)
        todo: list[int] = []
        # The lock guards only the cache and the work counter: `runs` keeps this call's IDs, so
        # another thread evicting an entry meanwhile cannot take one away.
        with self._lock:
            for slot, text in enumerate(texts):
                cached = self._cache.get(text)
                if cached is None:
                    todo.append(slot)
                else:
                    runs[slot] = cached
                    self._cache.move_to_end(text)
        self._count_work(sum(len(texts[slot]) for slot in todo))
        literal = [slot for slot in todo if batch.literal[slot]]
        matched = [slot for slot in todo if not batch.literal[slot]] if literal else todo
        if self._engine is not self._reference and self._small(texts, matched):
            # A request's few short runs: one ordinary call each on this thread. fastokens' batch
            # call wakes its thread pool, ~50 µs a call on a busy machine against ~1 µs a run.
            # Text that spells no added token encodes the same with or without added-token
            # matching (there is nothing to split off), and that ordinary encoding is the one
            # proven for literal runs. (In literal and reject modes, a matched run spells none.)
            plain = [
                slot
                for slot in matched
                if self.markers_in_text != "atomic" or self._spelled_marker(texts[slot]) is None
            ]
            literal += plain
            matched = (
                [slot for slot in matched if slot not in plain] if len(plain) < len(matched) else []
            )
        if matched:
            ids_of = self._encode_texts([texts[s] for s in matched])
            for slot, ids in zip(matched, ids_of, strict=True):
                runs[slot] = ids
        for slot in literal:
            runs[slot] = self._encode_ordinary(texts[slot])
        if self._cache_limit:
            with self._lock:
                for slot in todo:
                    # A view of the engine's batch buffer is copied: the cache would otherwise
                    # keep the whole buffer alive while counting only this run's bytes. A run
                    # encoded on its own owns its array already.
                    encoded = runs[slot]
                    assert encoded is not None
                    self._remember(
                        texts[slot], encoded if encoded.base is None else np.array(encoded)
                    )
        return runs  # type: ignore[return-value]  # every slot was filled above

    @staticmethod
    def _small(texts: list[str], slots: list[int]) -> bool:
        """Whether these runs are few and short enough to encode one by one (see _run_ids)."""
        return len(slots) <= _SMALL_RUNS and sum(len(texts[s]) for s in slots) <= _SMALL_CHARS

    def _remember_head(self, key: tuple[Any, ...], ids: np.ndarray) -> None:
        if key in self._heads:
            self._heads.move_to_end(key)
            return
        cost = _head_cost(key, ids)
        limit = self._cache_limit // 4
        if cost > limit:
            return
        self._heads[key] = ids
        self._head_bytes += cost
        while self._head_bytes > limit:
            old_key, old_ids = self._heads.popitem(last=False)
            self._head_bytes -= _head_cost(old_key, old_ids)

    def _remember(self, text: str, ids: np.ndarray) -> None:
        if text in self._cache:
            # Two threads missed the same text and both encoded it: the entry is already counted
            # (storing it again would count its bytes twice and evict it once, and the cache
            # would believe it is full while it holds nothing).
            self._cache.move_to_end(text)
            return
        cost = len(text) + ids.nbytes + 100  # ~100 bytes of dict and array overhead per entry
        if cost > self._cache_limit:
            return
        self._cache[text] = ids
        self._cache_bytes += cost
        while self._cache_bytes > self._cache_limit:
            old_text, old_ids = self._cache.popitem(last=False)
            self._cache_bytes -= len(old_text) + old_ids.nbytes + 100

    def _encode_texts(self, texts: list[str]) -> list[np.ndarray]:
        """The engine's batch encoding, long texts cut into pieces (``_pieces``) and joined."""
        if not self._cuttable or not _cut_length(max(map(len, texts), default=0)):
            return split_flat(*self._engine.encode_flat(texts))
        cut = [_pieces(text) for text in texts]
        ids, bounds = self._engine.encode_flat([piece for pieces in cut for piece in pieces])
        # A text's pieces are consecutive in the flat result: keep the bounds between texts.
        firsts = np.cumsum([0, *map(len, cut)])
        return split_flat(ids, bounds[firsts])

    def _encode_ordinary(self, text: str) -> np.ndarray:
        if not self._cuttable or not _cut_length(len(text)):
            return self._engine.encode_ordinary(text)
        return np.concatenate([self._engine.encode_ordinary(piece) for piece in _pieces(text)])


def _head_cost(key: tuple[Any, ...], ids: np.ndarray) -> int:
    """Bytes of a kept system turn, roughly: its text, its IDs, ~100 per run of overhead."""
    return sum(len(run[1]) + 100 for run in key) + ids.nbytes
