"""Text-encoding engines: HF ``tokenizers`` (the reference, always loaded because the vocabulary
checks use it) and ``fastokens`` (a Rust encoder of the same ``tokenizer.json``, several times
faster on batches), used only once it is proven to give the same IDs on this vocabulary.

Why prove it per vocabulary: a second implementation of a tokenizer can differ on a pre-tokenizer
regex feature or a normalisation corner that one vocabulary exercises and another does not. The
proof encodes a probe set with both engines, both with and without added-token matching; the
verdict is cached by the vocabulary file's sha256 and the engine's version, so the probe runs once
per vocabulary per machine.
"""

from __future__ import annotations

import json
import unicodedata
import warnings
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tokenizers import Encoding, PreTokenizedString, Tokenizer

from .checkpoint import derived_cache_path, file_sha256

__all__ = [
    "Engine",
    "FastokensEngine",
    "TokenizersEngine",
    "load_fastokens",
    "probe_texts",
    "split_flat",
    "stateful_probes",
]


class Engine(Protocol):
    name: str
    # Whether a batch's chunk whose engine call overlaps the caller's own work (laying out the
    # next chunk) goes as one text: the engine then encodes it on one thread, and leaves the
    # other cores to the caller, instead of spreading it over every core and taking the
    # caller's. True for an engine faster than that work (fastokens: 1.05x end to end on short
    # rows, 2 cores); tokenizers, slower than it, loses 2.4x so.
    joins_chunks: bool

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """IDs of every text, with added tokens matched as the tokenizer does, as one int32
        array and ``len(texts) + 1`` int64 bounds (text ``i`` is ``ids[bounds[i]:bounds[i+1]]``):
        a batch of many short runs costs no Python object per token or per run."""
        ...

    def encode_ordinary(self, text: str) -> np.ndarray:
        """IDs of ``text`` with NO added-token matching (normaliser, pre-tokeniser, BPE only)."""
        ...


class TokenizersEngine:
    name = "tokenizers"
    joins_chunks = False

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    # tokenizers returns a full Encoding per text (tokens as strings, offsets, masks: ~80 bytes a
    # token), so a batch is handed over in groups of about this many characters and turned into
    # ID arrays group by group: peak memory stays bounded, each group still runs in parallel (a
    # group holds four of the encoder's 64K-character pieces of a long run). 1 MiB groups added
    # ~53 MB to every long message's peak (30 MB per MB of a 3 MB one).
    group_chars = 1 << 18

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        out: list[np.ndarray] = []
        group: list[str] = []
        size = 0
        for text in (*texts, None):
            if text is None or (group and size + len(text) > self.group_chars):
                encodings = self.tokenizer.encode_batch(group, add_special_tokens=False)
                out.extend(np.asarray(e.ids, dtype=np.int32) for e in encodings)
                del encodings
                group, size = [], 0
            if text is not None:
                group.append(text)
                size += len(text)
        return _joined(out)

    def encode_ordinary(self, text: str) -> np.ndarray:
        return np.asarray(self.ordinary_encoding(text).ids, dtype=np.int32)

    def ordinary_encoding(self, text: str) -> Encoding:
        """What a copy of the tokenizer without added tokens gives, without keeping that second
        248k-token tokenizer in memory. ``encode_special_tokens=True`` is not enough: it leaves
        non-special added tokens such as ``<think>`` and ``<tool_call>`` matched."""
        tokenizer = self.tokenizer
        pieces = PreTokenizedString(text)
        if tokenizer.normalizer is not None:
            normalizer = tokenizer.normalizer
            pieces.normalize(lambda normalized: normalizer.normalize(normalized))
        if tokenizer.pre_tokenizer is not None:
            tokenizer.pre_tokenizer.pre_tokenize(pieces)
        model = tokenizer.model
        pieces.tokenize(lambda piece: model.tokenize(piece))
        return pieces.to_encoding()


class FastokensTokenizer(Protocol):
    """What this module calls on a ``fastokens.Tokenizer`` (fastokens ships no type hints)."""

    def encode_batch_flat(self, texts: list[str]) -> tuple[Any, Any]: ...

    def encode_ordinary(self, text: str) -> Any: ...


class FastokensEngine:
    name = "fastokens"
    joins_chunks = True

    def __init__(self, tokenizer: FastokensTokenizer):
        self.tokenizer = tokenizer

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        if not texts:
            return np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64)
        flat, offsets = self.tokenizer.encode_batch_flat(list(texts))
        # IDs are below 2**31 (vocabularies of a few 100k), so the uint32 buffer reads as int32
        # without a copy.
        ids = np.frombuffer(flat, dtype=np.int32)
        return ids, np.frombuffer(offsets, dtype=np.uint64).astype(np.int64)

    def encode_ordinary(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode_ordinary(text).ids, dtype=np.int32)


def _joined(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    bounds = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in arrays], out=bounds[1:])
    ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int32)
    return ids.astype(np.int32, copy=False), bounds


def split_flat(ids: np.ndarray, bounds: np.ndarray) -> list[np.ndarray]:
    """``encode_flat``'s result as one array (a view) per text."""
    edges = bounds.tolist()
    return [ids[a:b] for a, b in pairwise(edges)]


def probe_texts(added_tokens: Sequence[str]) -> list[str]:
    """Texts that exercise what differs between tokenizer implementations: every script block,
    combining marks and NFC-changing characters, odd whitespace, digits, code, and the added
    tokens alone, glued to text and split across texts."""
    texts = [
        "Hello, world! It's 3.14159 — naïve café; Straße. ½ x² ①",
        "数据科学 東京タワー こんにちは 안녕하세요 مرحبا بالعالم שלום नमस्ते Привет γειά σου",
        "e\u0301 a\u0308\u0301 \u212a \u2126 \u1fef \u037e \uf900 \u0344 \u0958 ﬁ ＡＢＣ",
        # Combining marks newer than some Unicode tables, before U+0301: NFC reorders them by
        # combining class only where the tables know them (fastokens 0.3.2 differed here).
        "a\u1aeb\u0301 a\u1df6\u0301 a\U0001e4ec\u0301 a\U0001e4ed\u0301 ",
        "👍🏽 👨‍👩‍👧 🇫🇷 🧪\ufe0f ❤️",
        "  \n\n\t\r\n \u00a0\u3000\u2009\u2028\u2029\u0085 x \n  \n",
        "def f(x):\n    return {'a': [1, 2]}  # comment\n\n\tif x>=0: pass\r\n",
        "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",
        "12345678901234567890 0.000001 -7e+21 1,000,000",
        "'s 't 're 've 'm 'll 'd 'S 'LL",
        "",
    ]
    for i, token in enumerate(added_tokens):
        texts += [token, f"x{token}y", f" {token}\n", token[: len(token) // 2], token * (i % 3 + 1)]
    # Every Unicode block's first assigned characters, in runs with spaces and newlines.
    chars = [chr(c) for c in range(0x20, 0x2FFFF, 97) if unicodedata.category(chr(c))[0] != "C"]
    texts += ["".join(chars[i : i + 40]) + " \n" for i in range(0, len(chars), 40)]
    return texts


def stateful_probes() -> list[tuple[str, str]]:
    """(previous, current) pairs to encode in that order, each in its own call: an engine that
    keeps state between calls must not let the previous text change the current one's IDs.
    fastokens 0.3.2 reused the previous input's pre-token matches up to the first differing
    byte for inputs of 4 KiB or more without added tokens (exactly what a text run is), but
    Qwen's ``\\s+(?!\\S)`` ends a whitespace match by looking one byte past it: a run that
    diverged there got a stale split (reported publicly against 0.3.2 on the Qwen 3.8
    tokenizer)."""
    filler = "".join(f"word{i % 97} x{i % 13}() {{'k': {i}}};\n" for i in range(260))[:5000]
    spaces = " " * 700
    previous = f"{filler}{spaces}x{filler[:2000]}"
    return [
        (previous, f"{filler}{spaces}{tail}") for tail in (" ", "\n", "\tx", "y", "  \n\nmore", "Z")
    ]


# Bumped when the probe set grows, so a verdict proven on fewer probes is not trusted.
_PROBE_SET = 2


def _proof_path(vocabulary_sha256: str, version: str) -> Path:
    name = f"{vocabulary_sha256}-fastokens-{version}-probes{_PROBE_SET}"
    return derived_cache_path("engine-proofs", name)


def load_fastokens(
    tokenizer_json: Path,
    reference: TokenizersEngine,
    added_tokens: Sequence[str],
    *,
    warn: Callable[[str], None] | None = None,
) -> FastokensEngine | None:
    """The fastokens engine for this vocabulary, or None (with a warning) when it is not
    installed, fails to load, or does not give the reference's IDs on the probe set."""
    say = warn or (lambda message: warnings.warn(message, RuntimeWarning, stacklevel=3))
    try:
        from importlib import metadata  # ~20 ms: only when fastokens is wanted

        import fastokens

        version = metadata.version("fastokens")
        engine = FastokensEngine(fastokens.Tokenizer.from_file(str(tokenizer_json)))
    except Exception as error:  # ImportError, or any failure of the native loader
        say(f"fastokens unavailable ({error}); encoding with tokenizers")
        return None
    proof = _proof_path(file_sha256(tokenizer_json), version)
    if proof.is_file():
        return engine
    texts = probe_texts(added_tokens)
    mismatch = first_mismatch(engine, reference, texts)
    if mismatch is not None:
        say(
            f"fastokens {version} differs from tokenizers on {tokenizer_json} "
            f"({mismatch}); encoding with tokenizers"
        )
        return None
    try:
        proof.parent.mkdir(parents=True, exist_ok=True)
        proof.write_text(json.dumps({"probes": len(texts), "tokenizer_json": str(tokenizer_json)}))
    except OSError:
        pass  # a read-only cache only means the probe runs again next time
    return engine


def first_mismatch(engine: Engine, reference: Engine, texts: Sequence[str]) -> str | None:
    """A description of the first text the two engines encode differently, or None."""
    for text, ours, theirs in zip(
        texts,
        split_flat(*engine.encode_flat(texts)),
        split_flat(*reference.encode_flat(texts)),
        strict=True,
    ):
        if not np.array_equal(ours, theirs):
            return f"added-token matching, text {text[:40]!r}"
    for text in texts:
        if not np.array_equal(engine.encode_ordinary(text), reference.encode_ordinary(text)):
            return f"ordinary encoding, text {text[:40]!r}"
    for previous, current in stateful_probes():
        engine.encode_flat([previous])
        ours = engine.encode_flat([current])[0]
        if not np.array_equal(ours, reference.encode_flat([current])[0]):
            return f"added-token matching right after another text, text {current[-40:]!r}"
        engine.encode_ordinary(previous)
        if not np.array_equal(engine.encode_ordinary(current), reference.encode_ordinary(current)):
            return f"ordinary encoding right after another text, text {current[-40:]!r}"
    return None
