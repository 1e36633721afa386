"""The byte-level stand-in for a real encoder, shared by the parser tests and scripts/fuzz.py:
one token per UTF-8 byte (ID = byte + 1000), the added tokens' IDs below 1000. Like byte-level
BPE, a run cut inside a character decodes to U+FFFD."""

from __future__ import annotations

import re
from collections.abc import Sequence

from qwen_encode import markers as mk

_PROTOCOL_MARKER = re.compile("|".join(re.escape(m) for m in mk.PROTOCOL_MARKERS))


class ByteEncoder:
    """``marker_ids`` and ``decode`` as ``MarkerEncoder`` asks, plus ``encode`` for tests."""

    vocab_size = 1256  # the IDs of every byte; a larger ID is out of the vocabulary

    def __init__(self) -> None:
        self.marker_ids = {marker: i for i, marker in enumerate(mk.ALL_ADDED_TOKENS)}
        self._markers = {i: marker for marker, i in self.marker_ids.items()}

    def text(self, text: str) -> list[int]:
        """Ordinary tokens for ``text``: a marker spelled in it stays ordinary bytes (a lone
        surrogate too, as its raw bytes, which decode to U+FFFD)."""
        return [b + 1000 for b in text.encode("utf-8", "surrogatepass")]

    def marker(self, marker: str) -> list[int]:
        return [self.marker_ids[marker]]

    def encode(self, text: str) -> list[int]:
        """Like a tokenizer on model output: every protocol marker spelling becomes its atomic
        ID."""
        ids: list[int] = []
        pos = 0
        for match in _PROTOCOL_MARKER.finditer(text):
            ids += self.text(text[pos : match.start()]) + self.marker(match.group())
            pos = match.end()
        return ids + self.text(text[pos:])

    def decode(self, ids: Sequence[int]) -> str:
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if i >= 1000:
                run.append(i - 1000)
                continue
            out.append(bytes(run).decode("utf-8", "replace"))
            run = []
            out.append(self._markers[i])
        out.append(bytes(run).decode("utf-8", "replace"))
        return "".join(out)
