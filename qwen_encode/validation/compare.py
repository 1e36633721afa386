"""A checkpoint against its base: a fine-tune is only interchangeable with its base when it
tokenizes identically (normalizer, pre-tokenizer, merges, tokens, probe IDs, stop tokens,
embedding, template)."""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tokenizers

from ..checkpoint import resolve_checkpoint
from ..markers import ALL_ADDED_TOKENS, END_OF_TEXT, TURN_CLOSE
from ..vocabulary import (
    ValidationReport,
    chat_template_text,
    inspect_checkpoint,
)
from .templates import BehaviourReport, template_behaviour, template_name

# --------------------------------------------------------------------------------------------
# Compare with a base


@dataclass(frozen=True)
class Difference:
    """One difference from the base. ``breaking``: the checkpoint does not tokenize as its base
    does (or cannot run as it does), so it is not tokenizer-compatible."""

    kind: str
    message: str  # readable: long lists are cut to their first entries
    breaking: bool
    # Every entry a cut list stood for (tokens, merges, probe texts), so --json carries them all.
    items: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "breaking": self.breaking,
            "items": list(self.items),
        }


@dataclass(frozen=True)
class Comparison:
    source: str
    base: str
    differences: tuple[Difference, ...]
    template: BehaviourReport | None = None

    @property
    def compatible(self) -> bool:
        return not any(d.breaking for d in self.differences)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "base": self.base,
            "compatible": self.compatible,
            "differences": [d.to_dict() for d in self.differences],
            "template": None if self.template is None else self.template.to_dict(),
        }


def probe_corpus() -> tuple[str, ...]:
    """Text whose IDs must agree: a sample of every Unicode block (three characters from its
    start, middle and end, as one text), code, and the markers in and out of context."""
    import re

    samples = []
    # Blocks as (first, last) code point ranges of 128, enough to cover every assigned block.
    for start in range(0, 0x31350, 0x80):
        chars = [
            chr(code)
            for code in (start, start + 0x3F, start + 0x7F)
            if unicodedata.category(chr(code)) not in ("Cn", "Cs", "Co")
        ]
        if chars:
            samples.append(" ".join(chars) + " " + "".join(chars))
    samples += [
        "def f(x: int) -> int:\n    return x ** 2  # square\n",
        "for (int i = 0; i < n; ++i) { a[i] = b[i] * 2; }\n",
        '{"key": [1, 2.5, true, null], "ü": "\\u00fc"}',
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\t\r\n",
        "   leading and trailing spaces   \n\n\n",
        "Ünïcödé ﬁ ligatures, e\u0301 combining, 한국어, العربية, हिन्दी, 日本語のテキスト",
        *ALL_ADDED_TOKENS,
        "Text " + " and ".join(ALL_ADDED_TOKENS) + " end",
    ]
    return tuple(re.sub("\x00", "", s) for s in samples)


def _model_state(tokenizer: tokenizers.Tokenizer) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(tokenizer.to_str())
    return state


def _component(state: Mapping[str, Any], name: str) -> str:
    return json.dumps(state.get(name), sort_keys=True)


def compare_checkpoints(
    source: str | os.PathLike[str],
    base: str | os.PathLike[str],
) -> Comparison:
    """Every difference between ``source`` (a fine-tune) and ``base``: normalizer, pre-tokenizer,
    decoder, merges, tokens (same string at the same ID; added, removed, renumbered, flags),
    IDs on a probe corpus, embedding sizes, stop tokens and the chat template (identical, or a
    behaviour report between the two). ``compatible`` when nothing breaking differs."""
    files, base_files = resolve_checkpoint(source), resolve_checkpoint(base)
    tokenizer, report = inspect_checkpoint(files)
    base_tokenizer, base_report = inspect_checkpoint(base_files)
    return compare_loaded(
        str(source),
        str(base),
        tokenizer,
        report,
        base_tokenizer,
        base_report,
        chat_template_text(files),
        chat_template_text(base_files),
    )


def _listed(items: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def _listing(
    kind: str, header: str, entries: list[str], breaking: bool, note: str = ""
) -> Difference:
    """A difference that is a list: the message shows its first entries, ``items`` keeps all
    (one source for both, so --json can never carry less than the text says)."""
    return Difference(kind, f"{header}: {_listed(entries)}{note}", breaking, tuple(entries))


def _stop_difference(
    tokenizer: tokenizers.Tokenizer,
    stop: tuple[int, ...] | None,
    base_stop: tuple[int, ...] | None,
) -> Difference | None:
    """generation_config.json ``eos_token_id`` against the base's. Generation ends exactly at
    these IDs (generate() and servers read them; their order means nothing). The official list
    is [<|im_end|>, <|endoftext|>]: <|im_end|> ends every assistant turn, <|endoftext|> ends a
    document, which is what the model writes outside the chat format (raw-text completions).
    Breaking, because the fine-tune then does not stop where its base stops:

    * a stop ID of the base missing, or no list at all: it generates on past a point where the
      base ends (a dropped <|endoftext|> runs raw completions on past the end of the document);
    * <|im_end|> missing: chat turns never end;
    * an added ID that is neither end marker: output is cut where the base goes on.

    Listed but not breaking: the same IDs in another order, an end marker added."""
    if stop == base_stop:
        return None
    ours, theirs = set(stop or ()), set(base_stop or ())
    ends = {tokenizer.token_to_id(TURN_CLOSE), tokenizer.token_to_id(END_OF_TEXT)}

    def named(ids: set[int]) -> str:
        # tokenizers takes IDs as u32: a file may hold -1 or 2**64, which are no token.
        return ", ".join(
            f"{i} {(0 <= i < 2**32 and tokenizer.id_to_token(i)) or '(no token)'}"
            for i in sorted(ids)
        )

    breaks = []
    if stop is None:
        breaks.append("no stop tokens")
    elif tokenizer.token_to_id(TURN_CLOSE) not in ours:
        breaks.append(f"no {TURN_CLOSE}: chat turns never end")
    if stop is not None and theirs - ours:
        breaks.append(f"no longer stops at {named(theirs - ours)}, where the base stops")
    if ours - theirs - ends:
        breaks.append(f"stops at {named(ours - theirs - ends)}, where the base goes on")
    why = breaks or ["the same IDs in another order" if ours == theirs else "an end marker added"]
    return Difference(
        "stop tokens",
        f"generation_config.json eos_token_id {None if stop is None else list(stop)} (base "
        f"{None if base_stop is None else list(base_stop)}): {'; '.join(why)}",
        bool(breaks),
    )


def compare_loaded(
    source: str,
    base: str,
    tokenizer: tokenizers.Tokenizer,
    report: ValidationReport,
    base_tokenizer: tokenizers.Tokenizer,
    base_report: ValidationReport,
    template: str | None,
    base_template: str | None,
) -> Comparison:
    diffs: list[Difference] = []
    state, base_state = _model_state(tokenizer), _model_state(base_tokenizer)
    for name in ("normalizer", "pre_tokenizer", "decoder", "post_processor"):
        if _component(state, name) != _component(base_state, name):
            diffs.append(
                Difference(
                    name,
                    f"{name}: {_component(state, name)[:200]} (base: "
                    f"{_component(base_state, name)[:200]})",
                    True,
                )
            )
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"].get("merges", [])]
    base_merges = [
        m if isinstance(m, str) else " ".join(m) for m in base_state["model"].get("merges", [])
    ]
    if merges != base_merges:
        ours, theirs = set(merges), set(base_merges)
        added = [m for m in merges if m not in theirs]
        removed = [m for m in base_merges if m not in ours]
        moved = "" if added or removed else " (the same merges in another order: other ranks)"
        diffs.append(
            Difference(
                "merges",
                f"merges: {len(merges):,} (base {len(base_merges):,}); added {len(added)} "
                f"[{_listed([repr(m) for m in added])}], removed {len(removed)} "
                f"[{_listed([repr(m) for m in removed])}]{moved}",
                True,
                tuple(f"+{m}" for m in added) + tuple(f"-{m}" for m in removed),
            )
        )
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    base_vocab = base_tokenizer.get_vocab(with_added_tokens=True)
    renumbered = sorted(
        (t for t in vocab.keys() & base_vocab.keys() if vocab[t] != base_vocab[t]),
        key=lambda t: base_vocab[t],
    )
    if renumbered:
        diffs.append(
            _listing(
                "renumbered",
                f"{len(renumbered)} token(s) at another ID than in the base",
                [f"{t!r} {base_vocab[t]} -> {vocab[t]}" for t in renumbered],
                True,
            )
        )
    removed_tokens = sorted(base_vocab.keys() - vocab.keys(), key=lambda t: base_vocab[t])
    if removed_tokens:
        diffs.append(
            _listing(
                "removed",
                f"{len(removed_tokens)} token(s) of the base are gone",
                [f"{t!r} (ID {base_vocab[t]})" for t in removed_tokens],
                True,
            )
        )
    new_tokens = sorted(vocab.keys() - base_vocab.keys(), key=lambda t: vocab[t])
    if new_tokens:
        taken = set(base_vocab.values())
        clash = [t for t in new_tokens if vocab[t] in taken]
        diffs.append(
            _listing(
                "added",
                f"{len(new_tokens)} token(s) not in the base",
                [f"{t!r} (ID {vocab[t]})" for t in new_tokens],
                bool(clash),
                f"; {len(clash)} of them take an ID the base gives another token" if clash else "",
            )
        )
    flags = ("special", "normalized", "lstrip", "rstrip", "single_word")
    base_added = {t.content: t for t in base_tokenizer.get_added_tokens_decoder().values()}
    for token in tokenizer.get_added_tokens_decoder().values():
        other = base_added.get(token.content)
        if other is None:
            continue
        changed = [
            f"{flag} {json.dumps(getattr(other, flag))} -> {json.dumps(getattr(token, flag))}"
            for flag in flags
            if getattr(token, flag) != getattr(other, flag)
        ]
        if changed:
            diffs.append(
                Difference("flags", f"{token.content!r}: flags changed: {', '.join(changed)}", True)
            )
    corpus = probe_corpus()
    ours_ids = tokenizer.encode_batch(list(corpus), add_special_tokens=False)
    base_ids = base_tokenizer.encode_batch(list(corpus), add_special_tokens=False)
    differing = [
        text for text, a, b in zip(corpus, ours_ids, base_ids, strict=True) if a.ids != b.ids
    ]
    if differing:
        diffs.append(
            Difference(
                "probe IDs",
                f"{len(differing)} of {len(corpus)} probe texts encode to other IDs: "
                + _listed([repr(t[:40]) for t in differing], 5),
                True,
                tuple(differing),
            )
        )
    if report.embedding_size != base_report.embedding_size:
        diffs.append(
            Difference(
                "embedding",
                f"embedding size {report.embedding_size} (base {base_report.embedding_size})",
                report.embedding_size is None or report.embedding_size <= report.max_token_id,
            )
        )
    stop = _stop_difference(tokenizer, report.stop_token_ids, base_report.stop_token_ids)
    if stop is not None:
        diffs.append(stop)
    behaviour = None
    if report.template_sha256 != base_report.template_sha256:
        diffs.append(
            Difference(
                "template",
                f"chat template: {template_name(report.template_sha256)} (sha256 "
                f"{str(report.template_sha256)[:12]}…); base: "
                f"{template_name(base_report.template_sha256)} (sha256 "
                f"{str(base_report.template_sha256)[:12]}…)",
                False,
            )
        )
        if template is not None and base_template is not None:
            behaviour = template_behaviour(template, base_template)
    return Comparison(source, base, tuple(diffs), behaviour)
