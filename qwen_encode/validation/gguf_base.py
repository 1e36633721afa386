"""A GGUF against its base (an HF checkpoint or another GGUF): every token at its ID, every type
as the converter types the base's tokens, the merges, the embedding size, and probe IDs encoded
two ways: under the HF rules (the rebuilt tokenizer.json: 0 differences expected) and as
llama.cpp's text path will (no NFC normalization)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tokenizers

from ..checkpoint import resolve_checkpoint
from ..gguf_reader import GGUFMetadata, read_gguf
from ..gguf_tokenizer import (
    CONTROL,
    NORMAL,
    TOKEN_TYPE_NAMES,
    TYPES,
    USER_DEFINED,
    GGUFVocabulary,
    gguf_vocabulary,
)
from .gguf_rules import CONVERTER, LOADER, TEMPLATE_KEY, expected_marker_type
from .problems import Findings, listed


@dataclass(frozen=True)
class ProbeComparison:
    """Probe texts encoded by the GGUF's vocabulary and by the base's: under the HF rules (the
    rebuilt tokenizer.json, NFC included) and as llama.cpp's text path will (no NFC)."""

    texts: int
    differ_hf_rules: int
    differ_llama_text: int
    examples_hf_rules: tuple[str, ...] = ()
    examples_llama_text: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "texts": self.texts,
            "differ_hf_rules": self.differ_hf_rules,
            "differ_llama_text": self.differ_llama_text,
            "examples_hf_rules": list(self.examples_hf_rules),
            "examples_llama_text": list(self.examples_llama_text),
        }


@dataclass(frozen=True)
class Base:
    """What a GGUF is compared with: the base's tokenizer, its added tokens' ``special`` flags
    (the converter's CONTROL/USER_DEFINED rule), embedding size, merges, and its templates (the
    one transformers renders, tokenizer_config.json's)."""

    source: str
    tokenizer: tokenizers.Tokenizer
    special: Mapping[str, bool]  # added token -> special flag
    embedding: int | None
    merges: tuple[str, ...]
    templates: tuple[str | None, str | None]


def load_base(against: str | os.PathLike[str]) -> Base:
    from ..vocabulary import chat_template_text, inspect_checkpoint, tokenizer_config_template

    files = resolve_checkpoint(against)
    tokenizer, report = inspect_checkpoint(files)
    special = {t.content: bool(t.special) for t in tokenizer.get_added_tokens_decoder().values()}
    state_merges = merges_of(tokenizer)
    if files.gguf is not None:
        meta = read_gguf(files.gguf)
        template = meta.get(TEMPLATE_KEY)
        vocabulary = gguf_vocabulary(meta)
        # A GGUF base says CONTROL, not "special"; its types are the flags to expect.
        special = {
            vocabulary.tokens[i]: t == CONTROL
            for i, t in enumerate(vocabulary.types)
            if t in (CONTROL, USER_DEFINED) and i not in vocabulary.fillers
        }
        templates: tuple[str | None, str | None] = (
            template if isinstance(template, str) else None,
            None,
        )
        return Base(
            str(against), tokenizer, special, len(vocabulary.tokens), state_merges, templates
        )
    templates = (chat_template_text(files), tokenizer_config_template(files))
    return Base(str(against), tokenizer, special, report.embedding_size, state_merges, templates)


def merges_of(tokenizer: tokenizers.Tokenizer) -> tuple[str, ...]:

    merges = json.loads(tokenizer.to_str())["model"].get("merges", [])
    return tuple(m if isinstance(m, str) else " ".join(m) for m in merges)


def compare_tokens(
    meta: GGUFMetadata, vocabulary: GGUFVocabulary, real: int, base: Base, out: Findings
) -> None:
    tokenizer = base.tokenizer
    size = max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1
    moved = []
    wrong_type = []
    for token_id in range(max(size, real)):
        mine = vocabulary.tokens[token_id] if token_id < len(vocabulary.tokens) else None
        theirs = tokenizer.id_to_token(token_id)
        if mine != theirs and not (theirs is None and token_id in vocabulary.fillers):
            moved.append(f"{token_id}: {mine!r} (base {theirs!r})")
            continue
        if mine is None or token_id in vocabulary.fillers:
            continue
        expected = (
            expected_marker_type(mine, base.special[mine]) if mine in base.special else NORMAL
        )
        if vocabulary.types[token_id] != expected:
            found = TOKEN_TYPE_NAMES.get(vocabulary.types[token_id], "?")
            wrong_type.append(
                f"{token_id} {mine!r}: {found} (converter: {TOKEN_TYPE_NAMES[expected]})"
            )
    if moved:
        out.add(
            "gguf.tokens_differ",
            meta.where("tokenizer.ggml.tokens"),
            f"{len(moved)} IDs hold another token than in {base.source}: {'; '.join(moved[:8])}"
            + (f"; … ({len(moved) - 8} more)" if len(moved) > 8 else ""),
            rule=CONVERTER,
        )
    if wrong_type:
        out.add(
            "gguf.token_types_differ",
            meta.where(TYPES),
            f"{len(wrong_type)} tokens typed otherwise than the converter types {base.source}'s: "
            + "; ".join(wrong_type[:8]),
            rule=CONVERTER,
        )
    if base.embedding is not None and base.embedding != len(vocabulary.tokens):
        out.add(
            "gguf.embedding",
            meta.where("tokenizer.ggml.tokens"),
            f"{len(vocabulary.tokens):,} tokens, but {base.source} has an embedding of "
            f"{base.embedding:,} rows: the converter fills with [PADn] up to config.json "
            "vocab_size",
            rule=CONVERTER,
        )
    _compare_merges(meta, vocabulary, base, out)


def _compare_merges(
    meta: GGUFMetadata, vocabulary: GGUFVocabulary, base: Base, out: Findings
) -> None:
    if vocabulary.merges == base.merges:
        return
    mine, theirs = set(vocabulary.merges), set(base.merges)
    dropped = [m for m in base.merges if m not in mine]
    added = [m for m in vocabulary.merges if m not in theirs]
    order = "" if dropped or added else "the same merges in another order (other priorities); "
    out.add(
        "gguf.merges",
        meta.where("tokenizer.ggml.merges"),
        f"{len(vocabulary.merges):,} merges against {len(base.merges):,} in {base.source}: {order}"
        f"{len(dropped)} dropped ({listed(dropped, 5)}), {len(added)} not in the base"
        + (f" ({listed(added, 5)})" if added else ""),
        rule=CONVERTER,
    )


def probe_texts(base: tokenizers.Tokenizer) -> list[str]:
    """The probe corpus (a sample of every Unicode block, code, markers) and the text of every
    base-vocabulary token (the dead-token probes)."""
    from .compare import probe_corpus

    texts = list(probe_corpus())
    size = base.get_vocab_size(with_added_tokens=False)
    texts += [base.decode([i]) for i in range(size)]
    return texts


def compare_probe_ids(
    tokenizer: tokenizers.Tokenizer, base: tokenizers.Tokenizer, texts: Sequence[str]
) -> ProbeComparison:
    """``texts`` encoded by ``tokenizer`` with its own rules and without its normalizer (llama.cpp
    applies none), each against ``base``."""
    expected = [e.ids for e in base.encode_batch(list(texts), add_special_tokens=False)]
    hf = [e.ids for e in tokenizer.encode_batch(list(texts), add_special_tokens=False)]
    raw = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    raw.normalizer = None  # llama.cpp's text path: no NFC
    llama = [e.ids for e in raw.encode_batch(list(texts), add_special_tokens=False)]
    differ_hf = [t for t, a, b in zip(texts, hf, expected, strict=False) if a != b]
    differ_llama = [t for t, a, b in zip(texts, llama, expected, strict=False) if a != b]
    return ProbeComparison(
        len(texts),
        len(differ_hf),
        len(differ_llama),
        tuple(differ_hf[:10]),
        tuple(differ_llama[:10]),
    )


def check_probes(probes: ProbeComparison, base: str, out: Findings) -> None:
    if probes.differ_hf_rules:
        out.add(
            "gguf.ids_differ",
            "probe IDs (HF rules)",
            f"{probes.differ_hf_rules} of {probes.texts:,} probe texts encode to other IDs than "
            f"{base} does, with the GGUF's vocabulary under the HF rules (first: "
            f"{listed(probes.examples_hf_rules, 3)})",
        )
    if probes.differ_llama_text:
        out.add(
            "gguf.llama_text_path",
            "probe IDs (llama.cpp text path)",
            f"{probes.differ_llama_text} of {probes.texts:,} texts differ as llama.cpp will "
            "tokenize them (it applies no NFC normalization); normalize first (NFC) or send "
            "token IDs",
            severity="note",
            rule=LOADER,
        )
