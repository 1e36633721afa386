"""The checkpoint-level rules: the chat template, the stop tokens, the embedding size and the
stop/special-token fields of the side files, each check making ``Problem`` values with the rule
it follows and why. ``vocabulary`` runs them when it loads a checkpoint (the load report carries
them; only the marker checks refuse a vocabulary)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

import tokenizers
from tokenizers.normalizers import Normalizer
from tokenizers.pre_tokenizers import PreTokenizer

from ..checkpoint import CheckpointFiles
from ..checkpoint_json import read_bytes, read_json
from ..conversation import surrogate_problem
from ..markers import END_OF_TEXT, TURN_CLOSE, TURN_OPEN
from ..problems import Problem

#: sha256 of the official Qwen 3.8 chat template: ``chat_template.jinja`` of Qwen/Qwen3.8-27B at
#: revision 1d4bf0f2ff6012fd82039f2fa52739d0dd7c60c0 (the same text is the ``chat_template`` field
#: of that revision's ``tokenizer_config.json``). Any other template renders another protocol.
QWEN38_TEMPLATE_SHA256: Final = "c3cf9e34abf4f9e36c2d72165aa9c132d3e2a725b6c2586aaa3a8af9d7a81041"

TemplateKind: TypeAlias = Literal["qwen3.8", "other", "absent"]

#: Codes of the template problems (``Problem.code``), which the reports act on.
TEMPLATE_ABSENT: Final = "template.absent"
TEMPLATE_NOT_OFFICIAL: Final = "template.not_official"
TEMPLATE_CONFIG_DIFFERS: Final = "template.config_differs"


@dataclass(frozen=True)
class SpecialTokenEntry:
    """One stop/special-token field of the side files: where it is, what it holds (as the file
    has it, and as tokens), the rule it must follow and why, and the verdict: "ok", "problem"
    (listed in ``problems``), "warning" (listed in ``warnings``) or "absent"."""

    field: str
    value: Any
    tokens: str
    rule: str
    verdict: Literal["ok", "problem", "warning", "absent"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "value": self.value,
            "tokens": self.tokens,
            "rule": self.rule,
            "verdict": self.verdict,
        }


def template_text(config: Mapping[str, Any] | None) -> str | None:
    template = (config or {}).get("chat_template")
    if isinstance(template, list):
        # The multi-template form [{"name": ..., "template": ...}]: "default" is the protocol.
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def check_template(
    files: CheckpointFiles, config: Mapping[str, Any] | None
) -> tuple[TemplateKind, str | None, list[Problem]]:
    in_config = template_text(config)
    # A JSON string may hold a lone surrogate ("\ud800"), which UTF-8 cannot encode: hashed as
    # the code points it holds, it is simply not the official template.
    config_sha = (
        None if in_config is None else sha256_of(in_config.encode("utf-8", "surrogatepass"))
    )
    if files.chat_template is not None:
        # transformers prefers chat_template.jinja over tokenizer_config.json's field.
        sha, where = sha256_of(read_bytes(files.chat_template)), "chat_template.jinja"
    elif config_sha is not None:
        sha, where = config_sha, "tokenizer_config.json chat_template"
    else:
        problem = Problem(
            TEMPLATE_ABSENT,
            "chat template",
            "expected chat_template.jinja or a chat_template in tokenizer_config.json, found "
            "neither",
        )
        return "absent", None, [problem]
    kind: TemplateKind = "qwen3.8" if sha == QWEN38_TEMPLATE_SHA256 else "other"
    problems = []
    if kind == "other":
        problems.append(
            Problem(
                TEMPLATE_NOT_OFFICIAL,
                where,
                f"expected the official Qwen 3.8 template (sha256 {QWEN38_TEMPLATE_SHA256}), "
                f"found sha256 {sha}: another protocol, or a modified template",
            )
        )
    if config_sha is not None and config_sha != sha:
        # Tools that read only tokenizer_config.json (older transformers, converters) would
        # render another prompt than the one this checkpoint is judged by.
        problems.append(
            Problem(
                TEMPLATE_CONFIG_DIFFERS,
                _CONFIG_TEMPLATE,
                f"expected the template of chat_template.jinja (sha256 {sha}), found another "
                f"one (sha256 {config_sha})",
            )
        )
    return kind, sha, problems


_CONFIG_TEMPLATE: Final = "tokenizer_config.json chat_template"
_GENERATION_EOS: Final = "generation_config.json eos_token_id"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_token(tokenizer: tokenizers.Tokenizer, token_id: int) -> bool:
    # tokenizers takes IDs as u32: a negative or larger ID raises OverflowError instead of
    # answering that it is no token.
    return 0 <= token_id < 2**32 and tokenizer.id_to_token(token_id) is not None


def _shown(value: object, limit: int = 200) -> str:
    """A JSON value as a problem quotes it: JSON text, cut short (a file may hold anything)."""
    try:
        text = json.dumps(value)
    except (ValueError, RecursionError):  # only from a value json.load built: not expected
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_stop_tokens(
    files: CheckpointFiles, im_end: int | None, tokenizer: tokenizers.Tokenizer
) -> tuple[tuple[int, ...] | None, list[Problem]]:
    expected = f"{im_end} ({TURN_CLOSE!r})" if im_end is not None else f"the ID of {TURN_CLOSE!r}"
    if files.generation_config is None:
        return None, [
            Problem(
                "stop.no_file",
                "generation_config.json",
                f"expected stop tokens (eos_token_id) including {expected}, found no file",
            )
        ]
    raw = read_json(files.generation_config).get("eos_token_id")
    values = raw if isinstance(raw, list) else [raw]
    if not values or not all(_is_id(v) for v in values):
        return None, [
            Problem(
                "stop.invalid",
                _GENERATION_EOS,
                f"expected a token ID or a list of IDs including {expected}, found {_shown(raw)}",
            )
        ]
    stop = tuple(values)
    problems = []
    if im_end is None or im_end not in stop:
        problems.append(
            Problem(
                "stop.no_im_end",
                _GENERATION_EOS,
                f"expected to include {expected}, found {_shown(list(stop))}",
            )
        )
    problems.extend(
        Problem(
            "stop.not_a_token",
            _GENERATION_EOS,
            f"expected IDs of the vocabulary, found {_shown(token_id)}, which is no token",
        )
        for token_id in stop
        if not _is_token(tokenizer, token_id)
    )
    return stop, problems


def check_embedding(files: CheckpointFiles, max_id: int) -> tuple[int | None, list[Problem]]:
    if files.config is None:
        return None, [
            Problem(
                "embedding.no_file",
                "config.json",
                f"expected vocab_size (the embedding size) of at least {max_id + 1}, found no file",
            )
        ]
    config = read_json(files.config)
    text_config = config.get("text_config")
    # Multimodal configs (Qwen 3.5+) hold the language model's size under text_config.
    candidates = {
        "text_config.vocab_size": text_config.get("vocab_size")
        if isinstance(text_config, dict)
        else None,
        "vocab_size": config.get("vocab_size"),
    }
    present = {where: value for where, value in candidates.items() if value is not None}
    if not present:
        return None, [
            Problem(
                "embedding.absent",
                "config.json",
                f"expected vocab_size (top level or under text_config) of at least "
                f"{max_id + 1}, found neither",
            )
        ]
    problems = []
    for where, size in present.items():
        if not _is_id(size):
            problems.append(
                Problem(
                    "embedding.invalid",
                    f"config.json {where}",
                    f"expected an integer of at least {max_id + 1}, found {_shown(size)}",
                )
            )
        elif size <= max_id:
            # A vocabulary larger than the embedding fails at inference time (index error, or
            # silently reading another row), so every ID up to the largest must have a row.
            rows = f": token IDs {size}..{max_id} have no embedding row" if size >= 0 else ""
            problems.append(
                Problem(
                    "embedding.too_small",
                    f"config.json {where}",
                    f"expected at least {max_id + 1} (the largest token ID is {max_id}), found "
                    f"{size}{rows}",
                )
            )
    sizes = [size for size in present.values() if _is_id(size)]
    return (sizes[0] if sizes else None), problems


def bos_policy(tokenizer: tokenizers.Tokenizer, config: Mapping[str, Any] | None) -> str:
    """What is prepended to an encoding. Observed, not guessed from flags: the post-processor is
    what adds tokens (transformers ignores add_bos_token when tokenizer.json exists)."""
    with_special = tokenizer.encode("a").ids
    without = tokenizer.encode("a", add_special_tokens=False).ids
    if with_special != without:
        return (
            f"post-processor adds tokens with add_special_tokens=True ({with_special} for 'a' "
            f"instead of {without}); chat prompts must be encoded without them"
        )
    bos = (config or {}).get("bos_token")
    if isinstance(bos, dict):
        bos = bos.get("content")
    if (config or {}).get("add_bos_token") is True and bos:
        return (
            f"none added by tokenizer.json (tokenizer_config.json asks for {bos!r} with "
            f"add_bos_token, which transformers ignores); chat prompts start with {TURN_OPEN}"
        )
    return f"none: chat prompts start with {TURN_OPEN}"


def summary(component: Normalizer | PreTokenizer | None) -> str:
    """A short description such as "NFC" or "Split(regex) + ByteLevel", from the component's own
    small JSON state (the normalizer/pre-tokenizer only, never the model)."""
    if component is None:
        return "none"
    try:
        state = json.loads(component.__getstate__())
    except Exception:
        return type(component).__name__
    return _describe(state)


def _describe(node: Any) -> str:
    if not isinstance(node, dict):
        return "none"
    kind = str(node.get("type"))
    if kind == "Sequence":
        parts = node.get("normalizers") or node.get("pretokenizers") or []
        return " + ".join(_describe(part) for part in parts) or "none"
    if kind == "Split":
        pattern = node.get("pattern") or {}
        return "Split(regex)" if "Regex" in pattern else f"Split({pattern.get('String')!r})"
    return kind


# --- stop and special tokens -------------------------------------------------------------------

_GENERATION_EOS_RULE: Final = (
    f"must include {TURN_CLOSE}: every assistant turn ends with it, and generate() and servers "
    f"stop only on these IDs (generation never ends otherwise); officially {END_OF_TEXT} too, "
    "which ends a document written outside the chat format (raw-text completions)"
)
_EOS_TOKEN_RULE: Final = (
    f"must be {TURN_CLOSE}: tokenizer.eos_token is what trainers append to each example (TRL) and "
    "what servers stop on when generation_config.json names no eos_token_id"
)
_PAD_TOKEN_RULE: Final = (
    f"must be a token other than {TURN_CLOSE} (officially {END_OF_TEXT}): collators mask pad "
    f"positions out of the loss, so a pad equal to {TURN_CLOSE} masks every turn's real end too "
    "and the model never learns to stop"
)
_CONFIG_EOS_RULE: Final = (
    f"token ID(s) of the vocabulary (officially {END_OF_TEXT}, the pre-training end of document): "
    "generate() falls back to it only when generation_config.json has no eos_token_id"
)
_CONFIG_BOS_RULE: Final = (
    f"a token ID of the vocabulary, or null: never prepended (the tokenizer adds no BOS; chat "
    f"prompts start with {TURN_OPEN})"
)


def _tokens_shown(tokenizer: tokenizers.Tokenizer, ids: list[Any]) -> str:
    shown_ids = []
    for token_id in ids:
        if _is_id(token_id) and _is_token(tokenizer, token_id):
            shown_ids.append(f"{token_id} {tokenizer.id_to_token(token_id)}")
        else:
            shown_ids.append(f"{_shown(token_id)} (no token)")
    return ", ".join(shown_ids) or "none"


_Verdict: TypeAlias = Literal["ok", "problem", "warning", "absent"]


def _generation_eos_entry(
    files: CheckpointFiles,
    tokenizer: tokenizers.Tokenizer,
    stop: tuple[int, ...] | None,
    stop_problems: list[Problem],
    warnings: list[Problem],
) -> SpecialTokenEntry:
    """generation_config.json's stop list, shown with its rule (``check_stop_tokens`` judges it;
    a list without <|endoftext|> adds a warning)."""
    if files.generation_config is None or stop is None:
        return SpecialTokenEntry(
            "generation_config.json eos_token_id", None, "none", _GENERATION_EOS_RULE, "problem"
        )
    stop_verdict: _Verdict = "problem" if stop_problems else "ok"
    end_of_text = tokenizer.token_to_id(END_OF_TEXT)
    if stop_verdict == "ok" and end_of_text is not None and end_of_text not in stop:
        # The chat protocol only needs <|im_end|>, so this is no problem; but the official
        # list has both, and without it output that ends a document does not stop there.
        warnings.append(
            Problem(
                "stop.no_end_of_text",
                _GENERATION_EOS,
                f"no {END_OF_TEXT!r} ({end_of_text}), which the official list "
                f"[{TURN_CLOSE}, {END_OF_TEXT}] has: output that ends a document with it "
                "(raw-text completions, no chat template) does not stop there",
                "warning",
            )
        )
        stop_verdict = "warning"
    return SpecialTokenEntry(
        "generation_config.json eos_token_id",
        list(stop),
        _tokens_shown(tokenizer, list(stop)),
        _GENERATION_EOS_RULE,
        stop_verdict,
    )


def _missing_token_entry(
    name: str, rule: str, where: str, problems: list[Problem], warnings: list[Problem]
) -> SpecialTokenEntry:
    """tokenizer_config.json without ``name``: no pad token is a warning, no eos a problem."""
    if name == "pad_token":
        warnings.append(
            Problem(
                "special.no_pad",
                where,
                "no pad token; trainers commonly fall back to eos_token "
                f"({TURN_CLOSE}), and then {rule[rule.index('collators') :]}",
                "warning",
            )
        )
        return SpecialTokenEntry(where, None, "none", rule, "warning")
    problems.append(Problem("special.eos", where, f"expected {TURN_CLOSE!r}, found none"))
    return SpecialTokenEntry(where, None, "none", rule, "problem")


def _token_verdict(
    name: str, rule: str, where: str, value: str, token_id: int | None
) -> tuple[_Verdict, Problem | None]:
    """The verdict on tokenizer_config.json's ``name`` naming the token ``value``."""
    if token_id is None:
        reason = f"expected a token of the vocabulary, found {value!r}, which is none"
        return "problem", Problem("special.not_a_token", where, reason)
    if name == "eos_token" and value != TURN_CLOSE:
        return "problem", Problem("special.eos", where, f"expected {TURN_CLOSE!r}, found {value!r}")
    if name == "pad_token" and value == TURN_CLOSE:
        reason = f"{TURN_CLOSE!r}; {rule[rule.index('collators') :]} (use {END_OF_TEXT!r})"
        return "warning", Problem("special.pad_is_im_end", where, reason, "warning")
    return "ok", None


def _tokenizer_config_entries(
    config: Mapping[str, Any],
    tokenizer: tokenizers.Tokenizer,
    problems: list[Problem],
    warnings: list[Problem],
) -> list[SpecialTokenEntry]:
    """tokenizer_config.json's eos_token and pad_token, each against its rule."""
    entries = []
    for name, rule in (("eos_token", _EOS_TOKEN_RULE), ("pad_token", _PAD_TOKEN_RULE)):
        where = f"tokenizer_config.json {name}"
        raw = config.get(name)
        value = raw.get("content") if isinstance(raw, dict) else raw
        if value is None:
            entries.append(_missing_token_entry(name, rule, where, problems, warnings))
            continue
        reason = _not_a_token_string(raw, value)
        if reason is not None:
            problems.append(Problem("special.invalid", where, reason))
            entries.append(SpecialTokenEntry(where, raw, "none", rule, "problem"))
            continue
        token_id = tokenizer.token_to_id(value)
        tokens = "no token" if token_id is None else f"{token_id} {value}"
        verdict, problem = _token_verdict(name, rule, where, value, token_id)
        if problem is not None:
            (warnings if verdict == "warning" else problems).append(problem)
        entries.append(SpecialTokenEntry(where, raw, tokens, rule, verdict))
    return entries


def _not_a_token_string(raw: Any, value: Any) -> str | None:
    """Why a side file's token entry (``raw``, its string ``value``) names no token, or None. A
    JSON string may hold a lone surrogate (``"\\ud800"``): no token can spell it, and tokenizers
    refuses it with UnicodeEncodeError instead of answering."""
    if not isinstance(value, str):
        return f"expected a token string, found {_shown(raw)}"
    problem = surrogate_problem(value)
    if problem is None:
        return None
    return f"expected a token string, found {_shown(raw)}: it {problem}"


def _config_id_entries(
    scope: Mapping[str, Any], prefix: str, tokenizer: tokenizers.Tokenizer, problems: list[Problem]
) -> list[SpecialTokenEntry]:
    """One scope of config.json (the top level, or text_config): eos_token_id, bos_token_id."""
    entries = []
    for name, rule, listable in (
        ("eos_token_id", _CONFIG_EOS_RULE, True),
        ("bos_token_id", _CONFIG_BOS_RULE, False),
    ):
        if name not in scope:
            continue
        where = f"config.json {prefix}{name}"
        raw = scope[name]
        if raw is None and not listable:
            entries.append(SpecialTokenEntry(where, None, "none", rule, "ok"))
            continue
        ids = raw if isinstance(raw, list) and listable else [raw]
        bad = [v for v in ids if not (_is_id(v) and _is_token(tokenizer, v))]
        if bad or not ids:
            expected = "token IDs" if listable else "a token ID or null"
            reason = f"expected {expected} of the vocabulary, found {_shown(raw)}"
            problems.append(Problem("special.config_id", where, reason))
        verdict: _Verdict = "problem" if bad or not ids else "ok"
        entries.append(SpecialTokenEntry(where, raw, _tokens_shown(tokenizer, ids), rule, verdict))
    return entries


def _model_config_entries(
    files: CheckpointFiles, tokenizer: tokenizers.Tokenizer, problems: list[Problem]
) -> tuple[list[SpecialTokenEntry], bool | None]:
    """config.json's token IDs (text_config first, as multimodal checkpoints nest them), and
    whether the embeddings are tied."""
    if files.config is None:
        return [], None
    model_config = read_json(files.config)
    text_config = model_config.get("text_config")
    scopes = [("", model_config)]
    if isinstance(text_config, dict):
        scopes.insert(0, ("text_config.", text_config))
    entries: list[SpecialTokenEntry] = []
    tied: bool | None = None
    for prefix, scope in scopes:
        if tied is None and isinstance(scope.get("tie_word_embeddings"), bool):
            tied = scope["tie_word_embeddings"]
        entries += _config_id_entries(scope, prefix, tokenizer, problems)
    return entries, tied


def check_special_tokens(
    files: CheckpointFiles,
    config: Mapping[str, Any] | None,
    tokenizer: tokenizers.Tokenizer,
    stop: tuple[int, ...] | None,
    stop_problems: list[Problem],
) -> tuple[list[SpecialTokenEntry], list[Problem], list[Problem], bool | None]:
    """Each stop/special-token field against the rule in the constants above. The
    generation_config.json stop list is judged by ``check_stop_tokens`` (its problems are
    already listed); it is only shown here, with the rule."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    entries = [_generation_eos_entry(files, tokenizer, stop, stop_problems, warnings)]
    if config is not None:
        entries += _tokenizer_config_entries(config, tokenizer, problems, warnings)
    config_entries, tied = _model_config_entries(files, tokenizer, problems)
    return entries + config_entries, problems, warnings, tied
