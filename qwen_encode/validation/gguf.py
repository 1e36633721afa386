"""Judging a GGUF against what llama.cpp's converter writes from the official Qwen 3.8 checkpoint.

Each rule names where its expectation comes from. "The converter" is ``convert_hf_to_gguf.py``
at llama.cpp commit 0024aa7417efd50a7c2a79e049dfbbbceb0beaaf with gguf-py's ``SpecialVocab``;
"llama.cpp" is ``src/llama-vocab.cpp`` (``llama_vocab::impl::load``) of the same era:

* architecture ``qwen35`` / ``qwen35moe``: the converter registers
  ``Qwen3_5ForConditionalGeneration`` (and the MoE one) under those architectures;
* ``tokenizer.ggml.pre`` = ``qwen35``: the converter's ``get_vocab_base_pre`` answer for the
  Qwen 3.5+ tokenizer; anything else makes llama.cpp split text with another regex;
* tokens at their IDs, then ``[PADn]`` fillers typed UNUSED up to ``vocab_size`` of config.json
  (the embedding size): ``get_vocab_base``;
* token types: an added token is CONTROL when ``special`` or when it looks special
  (``<|...|>``), else USER_DEFINED (``get_vocab_base``): so ``<think>``, ``<tool_call>``,
  ``<tool_response>`` and their closers are USER_DEFINED, which llama.cpp matches in caller text
  even with ``parse_special=false`` (atomic even in text: send token IDs), and the FIM tokens
  are CONTROL;
* merges: the checkpoint's list, whole (``SpecialVocab(load_merges=True)``);
* eos = ``<|im_end|>`` (tokenizer_config.json ``eos_token``), bos = ``<|endoftext|>`` (config.json
  ``bos_token_id``), ``add_bos_token`` = false (tokenizer_config.json), via ``SpecialVocab``;
* the end-of-generation set llama.cpp derives: eos, plus every token whose *text* is one of its
  end texts (``<|im_end|>``, ``<|endoftext|>``...), plus the FIM pad / repo / file-separator
  tokens found by their text (``<|fim_pad|>``, ``<|repo_name|>``, ``<|file_sep|>``);
* the chat template: ``tokenizer.chat_template``, which ``SpecialVocab`` takes from
  tokenizer_config.json *before* chat_template.jinja (a fine-tune that updated only the
  ``.jinja`` ships a stale template).

Without a base, the vocabulary and merges are compared with fingerprints of the official Qwen
3.8 ones (``OFFICIAL_*``: sha256 of the token list, of the sorted token list and of the merges,
of the GGUF ``scripts/make_gguf.py`` writes from ``../shared/checkpoints/qwen3.8-27b``, whose
vocabulary and merges are byte-identical to the official files). With ``against``, every token,
type and merge is compared with the base checkpoint, and probe texts are encoded both ways.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

import tokenizers

from ..gguf_reader import GGUFMetadata, read_gguf
from ..gguf_tokenizer import (
    CONTROL,
    PRE,
    TOKEN_TYPE_NAMES,
    TYPES,
    UNUSED,
    USER_DEFINED,
    GGUFVocabulary,
    checkpoint_files_of,
    gguf_vocabulary,
    pre_problem,
)
from ..markers import PROTOCOL_MARKERS, TURN_CLOSE
from .gguf_base import (
    ProbeComparison,
    check_probes,
    compare_probe_ids,
    compare_tokens,
    load_base,
    probe_texts,
)
from .gguf_rules import (
    ARCHITECTURES,
    CONVERTER,
    EOG_FIM_TEXTS,
    EOG_TEXTS,
    LLAMA_CPP_COMMIT,
    LOADER,
    OFFICIAL_MERGE_COUNT,
    OFFICIAL_MERGES_SHA256,
    OFFICIAL_SORTED_TOKENS_SHA256,
    OFFICIAL_TOKENS_SHA256,
    TEMPLATE_KEY,
    TYPE_MEANING,
    expected_marker_type,
)
from .problems import Findings, Problem, listed

_SPECIAL_KEYS: Final = ("bos", "eos", "eot", "eom", "unk", "sep", "pad")


@dataclass(frozen=True)
class MarkerType:
    """One protocol marker in the GGUF: its ID(s), its type, the converter's type, and what the
    type means for llama.cpp."""

    marker: str
    ids: tuple[int, ...]
    type: str | None
    expected: str
    meaning: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "marker": self.marker,
            "ids": list(self.ids),
            "type": self.type,
            "expected": self.expected,
            "meaning": self.meaning,
        }


@dataclass(frozen=True)
class SpecialId:
    """A ``tokenizer.ggml.*`` special-token field: its value, as a token, and the verdict."""

    key: str
    value: Any
    token: str | None
    verdict: str  # "ok", "problem", "warning", "absent"
    rule: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GGUFReport:
    """Everything ``validate`` finds in a GGUF; ``ok`` when no finding is a problem."""

    source: str
    architecture: str | None
    pre: str | None
    token_count: int
    real_token_count: int
    merge_count: int
    embedding_rows: int | None
    markers: tuple[MarkerType, ...]
    special: tuple[SpecialId, ...]
    eog: tuple[tuple[int, str, str], ...]  # (ID, token, why llama.cpp stops on it)
    template_sha256: str | None
    template_name: str
    template_variants: tuple[str, ...]
    findings: tuple[Problem, ...]
    against: str | None = None
    probes: ProbeComparison | None = None
    behaviour: Any = None  # qwen_encode.report.BehaviourReport, when the template is not official
    dead: Any = None  # qwen_encode.report.DeadTokens of the rebuilt vocabulary, when it loads

    def of(self, severity: str) -> tuple[Problem, ...]:
        return tuple(p for p in self.findings if p.severity == severity)

    @property
    def problems(self) -> tuple[Problem, ...]:
        return self.of("problem")

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return self.of("warning")

    @property
    def notes(self) -> tuple[Problem, ...]:
        return self.of("note")

    @property
    def ok(self) -> bool:
        return not self.problems

    def codes(self) -> set[str]:
        """The codes of the problems (not warnings or notes)."""
        return {p.code for p in self.problems}

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "kind": "gguf",
            "ok": self.ok,
            "architecture": self.architecture,
            "pre": self.pre,
            "token_count": self.token_count,
            "real_token_count": self.real_token_count,
            "merge_count": self.merge_count,
            "embedding_rows": self.embedding_rows,
            "markers": [m.to_dict() for m in self.markers],
            "special_tokens": [s.to_dict() for s in self.special],
            "end_of_generation": [{"id": i, "token": t, "why": w} for i, t, w in self.eog],
            "template_sha256": self.template_sha256,
            "template_name": self.template_name,
            "template_variants": list(self.template_variants),
            "template_behaviour": None if self.behaviour is None else self.behaviour.to_dict(),
            "problems": [p.to_dict() for p in self.problems],
            "warnings": [p.to_dict() for p in self.warnings],
            "notes": [p.to_dict() for p in self.notes],
            "against": self.against,
            "probes": None if self.probes is None else self.probes.to_dict(),
            "dead_tokens": None if self.dead is None else self.dead.to_dict(),
            "llama_cpp_commit": LLAMA_CPP_COMMIT,
        }


# --------------------------------------------------------------------------------------------
# The checks, each adding Problems to a list


def _sha(items: Iterable[str], sep: str) -> str:
    return hashlib.sha256(sep.join(items).encode("utf-8")).hexdigest()


def _real_count(vocabulary: GGUFVocabulary) -> int:
    """The number of tokens before the trailing fillers."""
    count = len(vocabulary.tokens)
    while count and (count - 1) in vocabulary.fillers:
        count -= 1
    return count


def _repeated(tokens: Sequence[str]) -> list[str]:
    """Token texts at more than one ID (a set first: the common case has none, found in C)."""
    if len(set(tokens)) == len(tokens):
        return []
    return [token for token, count in Counter(tokens).items() if count > 1]


def _ids_of(tokens: Sequence[str], token: str) -> tuple[int, ...]:
    ids: list[int] = []
    start = 0
    while True:
        try:
            start = tokens.index(token, start)
        except ValueError:
            return tuple(ids)
        ids.append(start)
        start += 1


def _check_header(meta: GGUFMetadata, out: Findings) -> None:
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        out.add(
            "gguf.architecture",
            meta.where("general.architecture"),
            f"{arch!r}, expected one of {', '.join(ARCHITECTURES)}: llama.cpp builds the "
            "model graph the architecture names, and a Qwen 3.5+/3.8 checkpoint converts to qwen35",
            rule=CONVERTER,
        )
    problem = pre_problem(meta.get(PRE))
    if problem is not None:
        out.add("gguf.pre", meta.where(PRE), problem, rule=CONVERTER)


def _check_tokens(meta: GGUFMetadata, vocabulary: GGUFVocabulary, out: Findings) -> int:
    tokens, types = vocabulary.tokens, vocabulary.types
    real = _real_count(vocabulary)
    if meta.embedding_rows is not None and meta.embedding_rows != len(tokens):
        out.add(
            "gguf.embedding",
            meta.where("tokenizer.ggml.tokens"),
            f"{len(tokens):,} tokens but token_embd.weight has {meta.embedding_rows:,} rows: the "
            "converter writes one token per embedding row ([PADn] fillers after the last one)",
            rule=CONVERTER,
        )
    misplaced = [i for i in vocabulary.fillers if i < real]
    if misplaced:
        out.add(
            "gguf.filler",
            meta.where("tokenizer.ggml.tokens"),
            f"{len(misplaced)} [PADn] fillers among the real tokens (first at ID {misplaced[0]}): "
            "the converter puts them only after the last token",
            rule=CONVERTER,
        )
    typed = [i for i in range(real, len(tokens)) if types[i] != UNUSED]
    if typed:
        kinds = sorted({TOKEN_TYPE_NAMES.get(types[i], str(types[i])) for i in typed})
        out.add(
            "gguf.filler_type",
            meta.where(TYPES),
            f"{len(typed)} [PADn] fillers typed {'/'.join(kinds)}, not UNUSED"
            + (
                f": llama.cpp matches a USER_DEFINED filler such as '[PAD{typed[0]}]' in "
                "caller text"
                if USER_DEFINED in {types[i] for i in typed}
                else ""
            ),
            severity="warning",
            rule=CONVERTER,
        )
    repeated = _repeated(tokens[:real])
    if repeated:
        out.add(
            "gguf.duplicate_tokens",
            meta.where("tokenizer.ggml.tokens"),
            f"{len(repeated)} token texts at more than one ID ({listed(repeated)}): llama.cpp "
            "keeps one ID per text, so the others can never be produced from text",
            rule=LOADER,
        )
    return real


def _check_fingerprints(
    meta: GGUFMetadata, vocabulary: GGUFVocabulary, real: int, out: Findings
) -> bool:
    """Compare with the official Qwen 3.8 vocabulary; True when the tokens are the official
    ones at the official IDs."""
    tokens = vocabulary.tokens[:real]
    official = _sha(tokens, "\x00") == OFFICIAL_TOKENS_SHA256
    merges_official = _sha(vocabulary.merges, "\n") == OFFICIAL_MERGES_SHA256
    if official and not merges_official:
        out.add(
            "gguf.merges",
            meta.where("tokenizer.ggml.merges"),
            f"{len(vocabulary.merges):,} merges that are not the official list "
            f"({OFFICIAL_MERGE_COUNT:,}) for the official Qwen 3.8 tokens: text encodes to other "
            "IDs (dropped merges split words the model saw whole); pass --against the "
            "checkpoint to list the differences",
            rule=CONVERTER,
        )
    elif not official and _sha(sorted(tokens), "\x00") == OFFICIAL_SORTED_TOKENS_SHA256:
        out.add(
            "gguf.tokens_moved",
            meta.where("tokenizer.ggml.tokens"),
            "the official Qwen 3.8 tokens, but not at their official IDs (swapped or shifted): "
            "every ID the model sees or writes means another token; pass --against the "
            "checkpoint to list them",
            rule=CONVERTER,
        )
    elif not official:
        out.add(
            "gguf.vocabulary",
            meta.where("tokenizer.ggml.tokens"),
            "not the official Qwen 3.8 vocabulary (a fine-tune, a fixture or another model): "
            "tokens and merges are checked for shape only; pass --against its checkpoint to "
            "compare them one by one",
            severity="note",
        )
    return official


def _marker_rows(
    meta: GGUFMetadata,
    vocabulary: GGUFVocabulary,
    out: Findings,
    special_flags: Mapping[str, bool] | None,
) -> tuple[MarkerType, ...]:
    rows = []
    for marker in PROTOCOL_MARKERS:
        ids = _ids_of(vocabulary.tokens, marker)
        flag = None if special_flags is None else special_flags.get(marker)
        expected = expected_marker_type(marker, flag)
        kind = vocabulary.types[ids[0]] if ids else None
        name = None if kind is None else TOKEN_TYPE_NAMES.get(kind, str(kind))
        rows.append(
            MarkerType(
                marker,
                ids,
                name,
                TOKEN_TYPE_NAMES[expected],
                TYPE_MEANING.get(kind or 0, "not one token: llama.cpp encodes its text as BPE"),
            )
        )
        _judge_marker(meta, marker, ids, kind, expected, out)
    return tuple(rows)


def _judge_marker(
    meta: GGUFMetadata,
    marker: str,
    ids: tuple[int, ...],
    kind: int | None,
    expected: int,
    out: Findings,
) -> None:
    where = f"{marker} ({meta.where(TYPES)})"
    if not ids:
        out.add("gguf.marker_missing", marker, "not a token of this GGUF", rule=CONVERTER)
        return
    if len(ids) > 1:
        out.add("gguf.marker_repeated", marker, f"at IDs {list(ids)}; expected one", rule=LOADER)
    if kind == expected:
        return
    found = TOKEN_TYPE_NAMES.get(kind or 0, str(kind))
    if kind not in (CONTROL, USER_DEFINED):
        why = (
            "llama.cpp treats it as ordinary BPE text: caller text spelling it encodes to the same "
            "pieces, and it is not matched as one token"
        )
        if marker in EOG_TEXTS:
            why += " (llama.cpp warns and forces CONTROL for end-of-generation texts)"
    elif kind == CONTROL:
        why = (
            "llama.cpp leaves CONTROL tokens out of the text it returns (llama-server's content, "
            "token_to_piece with special=false): the marker never reaches a text parser, so "
            "reasoning and tool calls come back without their tags; parse token IDs, or fix the "
            "type"
        )
    else:
        why = (
            "llama.cpp matches USER_DEFINED tokens in caller text even with parse_special=false: "
            "a message spelling it forges the marker"
        )
    out.add(
        "gguf.marker_type",
        where,
        f"typed {found}, the converter writes {TOKEN_TYPE_NAMES[expected]}: {why}",
        rule=CONVERTER,
    )


def _token(vocabulary: GGUFVocabulary, value: Any) -> str | None:
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and 0 <= value < len(vocabulary.tokens)
    ):
        return vocabulary.tokens[value]
    return None


def _special_ids(
    meta: GGUFMetadata, vocabulary: GGUFVocabulary, out: Findings
) -> tuple[SpecialId, ...]:
    rows: list[SpecialId] = []
    for kind in _SPECIAL_KEYS:
        key = f"tokenizer.ggml.{kind}_token_id"
        value = meta.get(key)
        token = _token(vocabulary, value)
        verdict, rule = "ok" if value is not None else "absent", ""
        if kind == "eos":
            rule = f"must be {TURN_CLOSE} (tokenizer_config.json eos_token, via SpecialVocab)"
            if token != TURN_CLOSE:
                verdict = "problem"
                out.add(
                    "gguf.eos",
                    meta.where(key),
                    f"{value!r} ({token!r}), expected the ID of {TURN_CLOSE}: llama.cpp stops on "
                    "eos, and puts it in its end-of-generation set"
                    + ("" if token is None else f", so generation ends at {token!r}"),
                    rule=CONVERTER,
                )
        elif value is not None and token is None:
            verdict = "problem"
            out.add("gguf.special_id", meta.where(key), f"{value!r} is not a token ID", rule=LOADER)
        rows.append(SpecialId(key, value, token, verdict, rule))
    rows += _add_flags(meta, out)
    return tuple(rows)


def _add_flags(meta: GGUFMetadata, out: Findings) -> list[SpecialId]:
    rows = []
    for kind in ("bos", "eos"):
        key = f"tokenizer.ggml.add_{kind}_token"
        value = meta.get(key)
        rule = "must be false: the template writes every token of the prompt itself"
        verdict = "ok" if value is False else "problem"
        if value is True:
            out.add(
                f"gguf.add_{kind}",
                meta.where(key),
                f"true: llama.cpp {'prepends' if kind == 'bos' else 'appends'} the {kind} token "
                "to every prompt it tokenizes (<|endoftext|> where the template writes none); "
                "the checkpoint's tokenizer_config.json says false",
                rule=CONVERTER,
            )
        elif value is None and kind == "bos":
            out.add(
                "gguf.add_bos",
                key,
                "absent: llama.cpp then applies its own default for the vocabulary type instead "
                "of the checkpoint's false (the converter writes add_bos_token=false)",
                rule=CONVERTER,
            )
        elif value is None:
            verdict = "absent"
        rows.append(SpecialId(key, value, None, verdict, rule))
    return rows


def _end_of_generation(
    meta: GGUFMetadata, vocabulary: GGUFVocabulary, out: Findings
) -> tuple[tuple[int, str, str], ...]:
    """The set llama.cpp derives, with the reason for each member."""
    found: dict[int, str] = {}
    for token_id, token in enumerate(vocabulary.tokens):
        if token in EOG_TEXTS:
            found.setdefault(token_id, "its text is an end text")
        elif token in EOG_FIM_TEXTS:
            found.setdefault(token_id, "a FIM token llama.cpp stops on (found by its text)")
    for kind in ("eos", "eot", "eom"):
        value = meta.get(f"tokenizer.ggml.{kind}_token_id")
        if _token(vocabulary, value) is not None:
            found.setdefault(value, f"tokenizer.ggml.{kind}_token_id")
    rows = tuple((i, vocabulary.tokens[i], why) for i, why in sorted(found.items()))
    texts = {token for _, token, _ in rows}
    if TURN_CLOSE not in texts:
        out.add(
            "gguf.eog",
            "end of generation",
            f"{TURN_CLOSE} is not in llama.cpp's end-of-generation set: generation runs past "
            "the end of the turn",
            rule=LOADER,
        )
    stray = sorted(texts & (set(PROTOCOL_MARKERS) - {TURN_CLOSE, "<|endoftext|>"}))
    if stray:
        out.add(
            "gguf.eog",
            "end of generation",
            f"llama.cpp would stop on {listed(stray)}: turns end in the middle",
            rule=LOADER,
        )
    fim = [t for _, t, why in rows if t in EOG_FIM_TEXTS]
    if fim:
        out.add(
            "gguf.eog_fim",
            "end of generation",
            f"llama.cpp also stops on {listed(fim)} (FIM tokens it finds by text); the model "
            "does not write them in a chat turn, so this is harmless for chat",
            severity="note",
            rule=LOADER,
        )
    return rows


# Where llama.cpp's own Jinja engine renders the official template otherwise than transformers
# (measured with llama.cpp built from source on 22 probes: 2 differ). Shown when the template
# uses the construct.
_JINJA_NOTES: Final = (
    (
        re.compile(r"\btojson\b"),
        "llama.cpp's Jinja engine writes a float 1.0 as 1 and wraps a 20-digit integer to a "
        "negative number in tojson (tool-call arguments, tool schemas); render with qwen-encode "
        "and send token IDs where exact arguments matter",
    ),
    (
        re.compile(r"\|\s*trim\b|\.strip\("),
        "llama.cpp's Jinja engine trims ASCII whitespace only (transformers also trims Unicode "
        "spaces such as U+3000 and NBSP)",
    ),
)


def _check_template(
    meta: GGUFMetadata,
    out: Findings,
    base_templates: tuple[str | None, str | None] | None,
) -> tuple[str | None, str, tuple[str, ...], Any]:
    from .rules import QWEN38_TEMPLATE_SHA256
    from .templates import template_behaviour, template_name

    template = meta.get(TEMPLATE_KEY)
    variants = tuple(
        f"{key} ({template_name(hashlib.sha256(str(meta.get(key)).encode()).hexdigest())})"
        for key in meta.values
        if key.startswith(TEMPLATE_KEY + ".")
    )
    if not isinstance(template, str):
        out.add(
            "gguf.template_missing",
            TEMPLATE_KEY,
            "absent: llama.cpp guesses a built-in template (chatml), which is not the Qwen 3.8 "
            "protocol (no reasoning, no XML tool calls)",
            rule=CONVERTER,
        )
        return None, template_name(None), variants, None
    sha = hashlib.sha256(template.encode("utf-8")).hexdigest()
    name = template_name(sha)
    behaviour = None
    if base_templates is not None:
        _check_stale(template, base_templates, out)
    if sha != QWEN38_TEMPLATE_SHA256:
        behaviour = template_behaviour(template)
        identical = behaviour.available and behaviour.identical
        differing = [f.feature for f in behaviour.features if f.status != "identical"]
        out.add(
            "gguf.template",
            meta.where(TEMPLATE_KEY),
            f"{name} (sha256 {sha[:16]}…), not the official Qwen 3.8 template; "
            + (
                "it renders what the official one renders on every probe"
                if identical
                else f"it renders otherwise: {', '.join(differing) or behaviour.note}"
            ),
            severity="warning" if identical else "problem",
            rule="the official chat_template.jinja (Qwen/Qwen3.8-27B)",
        )
    for pattern, note in _JINJA_NOTES:
        if pattern.search(template):
            out.add(
                "gguf.jinja", TEMPLATE_KEY, note, severity="note", rule="llama.cpp's Jinja engine"
            )
    return sha, name, variants, behaviour


def _check_stale(
    template: str, base_templates: tuple[str | None, str | None], out: Findings
) -> None:
    used, in_config = base_templates  # what transformers renders; tokenizer_config.json's
    if used is not None and template != used and in_config is not None and template == in_config:
        out.add(
            "gguf.stale_template",
            TEMPLATE_KEY,
            "the base's tokenizer_config.json chat_template, not its chat_template.jinja (which "
            "transformers uses): the converter prefers tokenizer_config.json's, so a checkpoint "
            "that updated only the .jinja ships a stale template; update both, or reconvert "
            "after removing the chat_template of tokenizer_config.json",
            rule="gguf-py SpecialVocab._try_load_from_tokenizer_json",
        )


def validate_gguf(
    source: str | os.PathLike[str], *, against: str | os.PathLike[str] | None = None
) -> GGUFReport:
    """Judge the GGUF at ``source`` (shard 1 of a split one) by the rules of this module, and
    with ``against`` (a checkpoint folder, hub id or GGUF) compare it with that base. Raises
    ``CheckpointError`` when the file cannot be read as a GGUF vocabulary at all."""
    meta = read_gguf(source)
    vocabulary = gguf_vocabulary(meta)
    out = Findings()
    _check_header(meta, out)
    real = _check_tokens(meta, vocabulary, out)
    base = None if against is None else load_base(against)
    if base is None:
        _check_fingerprints(meta, vocabulary, real, out)
    markers = _marker_rows(meta, vocabulary, out, None if base is None else base.special)
    special = _special_ids(meta, vocabulary, out)
    eog = _end_of_generation(meta, vocabulary, out)
    sha, name, variants, behaviour = _check_template(
        meta, out, None if base is None else base.templates
    )
    probes, dead, tokenizer = None, None, None
    if meta.get(PRE) == "qwen35":  # another pre is refused at load, and reported above
        tokenizer, dead = _load_as_encoder_does(meta, out)
    if base is not None:
        compare_tokens(meta, vocabulary, real, base, out)
        if tokenizer is not None:
            probes = compare_probe_ids(tokenizer, base.tokenizer, probe_texts(base.tokenizer))
            check_probes(probes, base.source, out)
    _note_user_defined(markers, out)
    return GGUFReport(
        source=str(source),
        architecture=meta.get("general.architecture"),
        pre=meta.get(PRE),
        token_count=len(vocabulary.tokens),
        real_token_count=real,
        merge_count=len(vocabulary.merges),
        embedding_rows=meta.embedding_rows,
        markers=markers,
        special=special,
        eog=eog,
        template_sha256=sha,
        template_name=name,
        template_variants=variants,
        findings=tuple(out),
        against=None if against is None else str(against),
        probes=probes,
        behaviour=behaviour,
        dead=dead,
    )


def _load_as_encoder_does(meta: GGUFMetadata, out: Findings) -> tuple[tokenizers.Tokenizer, Any]:
    """Rebuild the tokenizer as ``Encoder.from_pretrained`` does and run its load checks (each
    marker one atomic added token); the dead tokens of the rebuilt vocabulary."""
    from ..vocabulary import inspect_checkpoint
    from .dead import cached_dead_tokens

    files = checkpoint_files_of(str(meta.path), meta)
    tokenizer, loaded = inspect_checkpoint(files)
    rebuilt = str(files.tokenizer_json)
    for message in loaded.vocabulary_problems:
        out.add(
            "gguf.load",
            "tokens",
            message.replace(rebuilt, "the GGUF's tokens")
            + "; Encoder.from_pretrained refuses this GGUF",
            rule="qwen_encode.vocabulary.load_vocabulary",
        )
    return tokenizer, cached_dead_tokens(tokenizer, files.tokenizer_json)


def _note_user_defined(markers: Sequence[MarkerType], out: Findings) -> None:
    user = [m.marker for m in markers if m.type == "USER_DEFINED"]
    if user:
        out.add(
            "gguf.user_defined",
            "markers in text",
            f"{', '.join(user)} are USER_DEFINED: llama.cpp turns them into marker tokens even "
            "in caller text (parse_special=false does not stop it), so a message spelling "
            "<tool_call> forges a tool call; send qwen-encode's token IDs instead of text",
            severity="note",
            rule=LOADER,
        )


def render_text(report: GGUFReport) -> str:
    """The report as ``qwen-encode validate`` prints it."""
    lines = [
        f"gguf        {report.source}",
        f"verdict     {'OK' if report.ok else 'NOT OK'}: "
        + (
            "carries the Qwen 3.8 protocol as llama.cpp's converter writes it"
            if report.ok
            else f"{len(report.problems)} problem(s)"
        ),
        f"arch / pre  {report.architecture} / {report.pre}",
        f"tokens      {report.token_count:,} ({report.real_token_count:,} real, "
        f"{report.token_count - report.real_token_count:,} [PADn] fillers), "
        f"{report.merge_count:,} merges"
        + ("" if report.embedding_rows is None else f", embedding {report.embedding_rows:,} rows"),
        f"template    {report.template_name}"
        + ("" if report.template_sha256 is None else f" (sha256 {report.template_sha256[:16]}…)"),
    ]
    lines += [f"            variant {v}" for v in report.template_variants]
    lines += ["", "markers"]
    width = max(len(m.marker) for m in report.markers)
    for m in report.markers:
        ids = ",".join(map(str, m.ids)) or "-"
        mark = "" if m.type == m.expected else f"  (converter: {m.expected})"
        lines.append(f"  {m.marker.ljust(width)}  {ids:>8}  {m.type or 'missing':<12}{mark}")
    lines += ["", "special tokens"]
    for s in report.special:
        token = "" if s.token is None else f" {s.token!r}"
        lines.append(f"  {s.key:<34} {s.value!s:<8}{token}  [{s.verdict}]")
    lines += ["", "end of generation (as llama.cpp derives it)"]
    lines += [f"  {i:>8} {t!r}: {why}" for i, t, why in report.eog]
    if report.dead is not None:
        from .dead import DEAD_KINDS

        counts = ", ".join(f"{len(report.dead.of(k))} {k}" for k in DEAD_KINDS)
        lines += ["", f"dead tokens  {counts} (of {report.dead.checked:,} checked)"]
    if report.probes is not None:
        p = report.probes
        lines += [
            "",
            f"probe IDs against {report.against} ({p.texts:,} texts)",
            f"  HF rules (tokenizer.json, NFC):       {p.differ_hf_rules} differ",
            f"  llama.cpp text path (no NFC):         {p.differ_llama_text} differ"
            + ("; normalize first or send token IDs" if p.differ_llama_text else ""),
        ]
    for title, items in (
        ("problems", report.problems),
        ("warnings", report.warnings),
        ("notes", report.notes),
    ):
        if items:
            lines += ["", title]
            lines += [f"  [{p.code}] {p}" for p in items]
    return "\n".join(lines) + "\n"
