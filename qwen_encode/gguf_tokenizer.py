"""A GGUF's vocabulary as the ``tokenizer.json`` it was converted from.

llama.cpp's converter writes a Qwen 3.5+ vocabulary as: every token at its ID
(``tokenizer.ggml.tokens``), a type per token (``token_type``: NORMAL for BPE tokens, CONTROL or
USER_DEFINED for added tokens, UNUSED for the ``[PADn]`` fillers up to the embedding size), the
BPE merges, and ``tokenizer.ggml.pre`` naming the pre-tokenizer llama.cpp implements in C++. The
pre-tokenizer and normalizer are not in the file: ``pre = "qwen35"`` stands for the Qwen 3.5+
split regex with byte-level mapping, and ``tokenizer.json`` adds NFC normalization (which
llama.cpp does not apply). Rebuilding the ``tokenizer.json`` these stand for gives an encoder
with the HF rules: the same IDs as the checkpoint's own ``tokenizer.json``.

Any other ``pre`` is refused, never mapped to a guess: llama.cpp itself encodes with whatever
regex ``pre`` names, so a GGUF carrying ``qwen2`` (or none: llama.cpp then uses the GPT-2
regex) tokenizes text differently from the checkpoint it came from.

The rebuilt file is written once per GGUF metadata hash under the qwen-encode cache, so the
fastokens engine and worker processes read it like any ``tokenizer.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .checkpoint import TOKENIZER_JSON, CheckpointFiles, derived_cache_path
from .errors import CheckpointError
from .files import write_atomic
from .gguf_reader import GGUFMetadata, read_gguf

# GGUF token types (llama.h enum llama_token_type / gguf.TokenType).
NORMAL: Final = 1
UNKNOWN: Final = 2
CONTROL: Final = 3
USER_DEFINED: Final = 4
UNUSED: Final = 5
BYTE: Final = 6
TOKEN_TYPE_NAMES: Final = {
    0: "UNDEFINED",
    NORMAL: "NORMAL",
    UNKNOWN: "UNKNOWN",
    CONTROL: "CONTROL",
    USER_DEFINED: "USER_DEFINED",
    UNUSED: "UNUSED",
    BYTE: "BYTE",
}

TOKENS: Final = "tokenizer.ggml.tokens"
TYPES: Final = "tokenizer.ggml.token_type"
MERGES: Final = "tokenizer.ggml.merges"
PRE: Final = "tokenizer.ggml.pre"
MODEL: Final = "tokenizer.ggml.model"

#: The Qwen 3.5+ pre-tokenizer regex: llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN35 (src/llama-vocab.cpp)
#: and the ``Split`` pattern of the Qwen 3.5/3.6/3.8 ``tokenizer.json`` (``\p{M}`` joins letters;
#: Qwen2's regex has ``\p{L}+`` alone).
QWEN35_REGEX: Final = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_BYTE_LEVEL: Final = {
    "type": "ByteLevel",
    "add_prefix_space": False,
    "trim_offsets": False,
    "use_regex": False,
}
#: What ``pre = "qwen35"`` stands for, in tokenizer.json terms (the Qwen 3.8 file's own parts).
QWEN35_PIPELINE: Final[dict[str, Any]] = {
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {
        "type": "Sequence",
        "pretokenizers": [
            {
                "type": "Split",
                "pattern": {"Regex": QWEN35_REGEX},
                "behavior": "Isolated",
                "invert": False,
            },
            _BYTE_LEVEL,
        ],
    },
    "post_processor": _BYTE_LEVEL,
    "decoder": _BYTE_LEVEL,
}

# Why a pre other than qwen35 is refused: what llama.cpp would do with it instead.
_OTHER_PRE: Final = {
    None: "the key is missing: llama.cpp warns and falls back to the 'default' (GPT-2) regex",
    "default": "llama.cpp's 'default' pre-tokenizer is the GPT-2 regex",
    "qwen2": "llama.cpp's 'qwen2' regex has no \\p{M} (combining marks split off letters): "
    "texts with accents or Indic scripts tokenize differently from Qwen 3.5+'s tokenizer.json",
}

_CACHE_VERSION: Final = 1


def pre_problem(pre: object) -> str | None:
    """Why ``tokenizer.ggml.pre`` = ``pre`` does not stand for the Qwen 3.5+ tokenizer (None if
    it does)."""
    if pre == "qwen35":
        return None
    key = pre if pre in _OTHER_PRE else "other"
    reason = _OTHER_PRE.get(key) or (
        "not the Qwen 3.5+ pre-tokenizer; llama.cpp splits text with the regex that name selects"
    )
    return f"{pre!r}, expected 'qwen35' (as llama.cpp's converter writes): {reason}"


@dataclass(frozen=True)
class GGUFVocabulary:
    """The parts of a GGUF the tokenizer is rebuilt from, checked for shape."""

    tokens: tuple[str, ...]
    types: tuple[int, ...]
    merges: tuple[str, ...]
    #: IDs of the ``[PADn]`` fillers (``[PAD{id}]`` at its own ID), left out of the tokenizer.
    fillers: frozenset[int]


def gguf_vocabulary(meta: GGUFMetadata) -> GGUFVocabulary:
    """The token list, types and merges of ``meta``; ``CheckpointError`` naming the key when one
    is missing, of the wrong type, or the lists disagree in length."""
    model = meta.get(MODEL)
    if model != "gpt2":
        raise CheckpointError(
            f"{meta.path}: {meta.where(MODEL)} is {model!r}, expected 'gpt2' (byte-level BPE, "
            "what the converter writes for every Qwen vocabulary)"
        )
    tokens, types, merges = meta.get(TOKENS), meta.get(TYPES), meta.get(MERGES)
    for key, value, kind in ((TOKENS, tokens, str), (TYPES, types, int), (MERGES, merges, str)):
        if not isinstance(value, tuple) or not value or not isinstance(value[0], kind):
            found = "missing" if value is None else f"a {meta.types.get(key)}"
            raise CheckpointError(
                f"{meta.path}: {meta.where(key)}: expected a non-empty array of "
                f"{kind.__name__}, found {found}"
            )
    if len(types) != len(tokens):
        raise CheckpointError(
            f"{meta.path}: {meta.where(TYPES)} has {len(types):,} entries for "
            f"{len(tokens):,} tokens"
        )
    fillers = frozenset(i for i, token in enumerate(tokens) if token == f"[PAD{i}]")
    return GGUFVocabulary(tuple(tokens), tuple(types), tuple(merges), fillers)


def tokenizer_json_text(vocabulary: GGUFVocabulary) -> str:
    """The ``tokenizer.json`` (HF rules: NFC, the Qwen 3.5+ split, byte-level BPE) that holds
    ``vocabulary``'s tokens at their IDs. CONTROL and USER_DEFINED tokens become added tokens
    (``special`` for CONTROL), NORMAL ones the BPE vocabulary; fillers are left out."""
    vocab: dict[str, int] = {}
    added: list[dict[str, Any]] = []
    pairs = zip(vocabulary.tokens, vocabulary.types, strict=True)  # lengths checked on reading
    for token_id, (token, kind) in enumerate(pairs):
        if token_id in vocabulary.fillers or kind == UNUSED:
            continue
        if kind in (CONTROL, USER_DEFINED):
            added.append(_added_token(token_id, token, special=kind == CONTROL))
        else:
            vocab[token] = token_id
    # tokenizers numbers an added token absent from the model's vocabulary after it, in file
    # order: when the added tokens do not follow the vocabulary that way, they go into the
    # vocabulary too, which keeps each at its GGUF ID.
    expected = range(len(vocab), len(vocab) + len(added))
    if [entry["id"] for entry in added] != list(expected) or len(vocab) != 1 + max(
        vocab.values(), default=-1
    ):
        for entry in added:
            vocab.setdefault(entry["content"], entry["id"])
    model = {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": "",
        "end_of_word_suffix": "",
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": vocab,
        "merges": [_merge_pair(merge) for merge in vocabulary.merges],
    }
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        **QWEN35_PIPELINE,
        "model": model,
    }
    return json.dumps(document, ensure_ascii=False)


def _added_token(token_id: int, content: str, *, special: bool) -> dict[str, Any]:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def _merge_pair(merge: str) -> list[str]:
    # A GGUF merge is "left right"; a space inside a part is written U+0120 by byte-level BPE, so
    # the one ASCII space is the separator (gguf-py's SpecialVocab writes it that way).
    left, _, right = merge.partition(" ")
    return [left, right]


def gguf_checkpoint_files(source: str, path: Path) -> CheckpointFiles:
    """``CheckpointFiles`` for the GGUF at ``path``: its rebuilt ``tokenizer.json`` (written
    under the cache once per metadata hash), no side files. ``CheckpointError`` when the GGUF is
    unreadable, is not a byte-level BPE vocabulary, or its ``pre`` is not qwen35."""
    return checkpoint_files_of(source, read_gguf(path))


def checkpoint_files_of(source: str, meta: GGUFMetadata) -> CheckpointFiles:
    """``gguf_checkpoint_files`` for metadata already read."""
    problem = pre_problem(meta.get(PRE))
    if problem is not None:
        raise CheckpointError(
            f"{meta.path}: {meta.where(PRE)} is {problem}; refused rather than encoded another way"
        )
    target = rebuilt_tokenizer_json(meta)
    return CheckpointFiles(
        source=source,
        tokenizer_json=target,
        tokenizer_config=None,
        chat_template=None,
        config=None,
        generation_config=None,
        gguf=meta.path,
    )


def rebuilt_tokenizer_json(meta: GGUFMetadata) -> Path:
    """The path of ``meta``'s rebuilt ``tokenizer.json``, written (atomically) if not cached."""
    target = (
        derived_cache_path("gguf", f"{meta.metadata_sha256}-v{_CACHE_VERSION}") / TOKENIZER_JSON
    )
    if target.is_file():
        return target
    text = tokenizer_json_text(gguf_vocabulary(meta))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, text.encode("utf-8"))  # whole or absent: never half a file
    except OSError as error:
        raise CheckpointError(
            f"{meta.path}: cannot write its rebuilt tokenizer.json under {target.parent} "
            f"({error.strerror or error}); set XDG_CACHE_HOME to a writable folder"
        ) from error
    return target


def token_types_named(types: Sequence[int], ids: Sequence[int]) -> list[str]:
    return [TOKEN_TYPE_NAMES.get(types[i], str(types[i])) for i in ids]
