"""Loading a checkpoint's vocabulary and checking that it carries the Qwen 3.8 protocol.

``load_vocabulary`` parses ``tokenizer.json`` once, with ``tokenizers``, and refuses a vocabulary
whose protocol markers are not each one atomic added token (``VocabularyError``, listing every
problem). ``validate_checkpoint`` runs the same checks plus the checkpoint-level ones (chat
template, stop tokens, embedding size) and returns a ``ValidationReport`` instead of raising.

What the report's two verdicts mean:

* ``vocabulary_ok``: every added token loads at the ID ``tokenizer.json`` declares, and every marker
  of ``PROTOCOL_MARKERS`` is an added token with exactly one ID, ``normalized``/``lstrip``/
  ``rstrip``/``single_word`` all false, encodes atomically to that ID, and ``tokenizer_config.json``
  (when present) agrees on it. This is what loading requires; the Qwen3 vocabulary passes it.
* ``ok``: no problem at all, i.e. ``vocabulary_ok`` and the chat template is the official Qwen 3.8
  one and ``generation_config.json`` stops on ``<|im_end|>`` and ``config.json``'s embedding covers
  every token ID, and the stop/special-token fields follow their rules (``special_tokens``: each
  field with the rule it must follow and why; a pad token equal to ``<|im_end|>`` is one of the
  ``warnings``, which do not affect ``ok``). A check that cannot be made because its file is
  absent is a problem too: ``ok`` certifies a checkpoint, and a folder holding only
  ``tokenizer.json`` cannot be certified.

Files that cannot be read at all (missing ``tokenizer.json``, invalid JSON in any file, a vocabulary
``tokenizers`` cannot load or that is not BPE, a file over ``MAX_TOKENIZER_JSON_BYTES`` /
``MAX_SIDE_FILE_BYTES``, anything but a regular file) raise ``CheckpointError`` naming the path,
from ``validate_checkpoint`` as from loading: there is no vocabulary to report on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import tokenizers
from tokenizers.models import BPE

from .checkpoint import CheckpointFiles, path_kind, resolve_checkpoint

# Also this module's names for callers of earlier versions (redundant aliases re-export them).
from .checkpoint_json import MAX_SIDE_FILE_BYTES as MAX_SIDE_FILE_BYTES
from .checkpoint_json import MAX_TOKENIZER_JSON_BYTES as MAX_TOKENIZER_JSON_BYTES
from .checkpoint_json import (
    check_ends_as_an_object,
    checked_size,
    declared_added_tokens,
    read_bytes,
    read_json,
)
from .errors import CheckpointError, PromptError, VocabularyError
from .json_text import JSONTextError, loads
from .markers import PROTOCOL_MARKERS, TURN_CLOSE
from .problems import Problem
from .validation.rules import QWEN38_TEMPLATE_SHA256 as QWEN38_TEMPLATE_SHA256
from .validation.rules import (
    TEMPLATE_CONFIG_DIFFERS,
    TEMPLATE_NOT_OFFICIAL,
    bos_policy,
    check_embedding,
    check_special_tokens,
    check_stop_tokens,
    check_template,
    summary,
    template_text,
)
from .validation.rules import SpecialTokenEntry as SpecialTokenEntry
from .validation.rules import TemplateKind as TemplateKind

# The added-token flags that change how a marker is matched in text; each must be false, or the
# marker would match inside normalised text or swallow neighbouring spaces/words.
_MATCH_FLAGS: Final = ("normalized", "lstrip", "rstrip", "single_word")
_ALL_FLAGS: Final = ("special", *_MATCH_FLAGS)


@dataclass(frozen=True)
class MarkerEntry:
    """One row of the marker table: the ID the loaded vocabulary gives ``marker`` (None if it is
    not a token), its ``special`` flag (None if it is not an added token), and whether the marker's
    text encodes to exactly that one ID."""

    marker: str
    id: int | None
    special: bool | None
    atomic: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "marker": self.marker,
            "id": self.id,
            "special": self.special,
            "atomic": self.atomic,
        }


@dataclass(frozen=True)
class ValidationReport:
    """What ``validate_checkpoint`` found; see the module docstring for ``ok``/``vocabulary_ok``.

    Every entry of ``problems`` names the marker or file, what was expected and what was found;
    ``vocabulary_problems`` is the part of them about the vocabulary's added tokens.
    """

    source: str
    problems: tuple[str, ...]
    vocabulary_problems: tuple[str, ...]
    markers: tuple[MarkerEntry, ...]
    vocab_size: int
    max_token_id: int
    normalizer: str
    pre_tokenizer: str
    stop_token_ids: tuple[int, ...] | None
    bos: str
    embedding_size: int | None
    template: TemplateKind
    template_sha256: str | None
    #: What each stop/special-token field of the side files holds and must hold.
    special_tokens: tuple[SpecialTokenEntry, ...] = ()
    #: Not wrong for the protocol, but a known source of trouble (a pad token equal to
    #: <|im_end|>); ``ok`` does not depend on them.
    warnings: tuple[str, ...] = ()
    #: config.json ``tie_word_embeddings`` (top level or under text_config); None when absent.
    tie_word_embeddings: bool | None = None
    #: The entry of ``problems`` saying the template is not the official one (None when it is, or
    #: when there is none), and the one saying tokenizer_config.json holds another template than
    #: chat_template.jinja: ``qwen_encode.report`` lifts them to warnings when the templates
    #: concerned render what the official one renders on every probe.
    template_problem: str | None = None
    config_template_problem: str | None = None
    #: Every problem and warning above as a value (code, where, message, severity): what code
    #: acts on; ``problems`` and ``warnings`` are their rendered text.
    findings: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def vocabulary_ok(self) -> bool:
        return not self.vocabulary_problems

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (lists for tuples), for ``qwen-encode validate --json``."""
        return {
            "source": self.source,
            "ok": self.ok,
            "vocabulary_ok": self.vocabulary_ok,
            "problems": list(self.problems),
            "vocabulary_problems": list(self.vocabulary_problems),
            "markers": [entry.to_dict() for entry in self.markers],
            "vocab_size": self.vocab_size,
            "max_token_id": self.max_token_id,
            "normalizer": self.normalizer,
            "pre_tokenizer": self.pre_tokenizer,
            "stop_token_ids": None if self.stop_token_ids is None else list(self.stop_token_ids),
            "bos": self.bos,
            "embedding_size": self.embedding_size,
            "template": self.template,
            "template_sha256": self.template_sha256,
            "special_tokens": [entry.to_dict() for entry in self.special_tokens],
            "warnings": list(self.warnings),
            "tie_word_embeddings": self.tie_word_embeddings,
            "findings": [finding.to_dict() for finding in self.findings],
        }


# eq=False: comparing two Tokenizer objects field by field means nothing; identity does.
@dataclass(frozen=True, eq=False)
class Vocabulary:
    """A loaded vocabulary that passed the marker checks.

    ``marker_ids`` maps every ``PROTOCOL_MARKERS`` entry to its ID; ``added_tokens`` maps every
    added token of this vocabulary (not only the protocol's) to its ID, for ``markers_in_text``.
    """

    tokenizer: tokenizers.Tokenizer
    marker_ids: Mapping[str, int]
    added_tokens: Mapping[str, int]
    report: ValidationReport

    def __reduce__(self) -> tuple[Any, ...]:
        # A MappingProxyType cannot be pickled ("cannot pickle 'mappingproxy'"), which kept every
        # Encoder out of datasets' and Ray's worker processes; the dicts behind them can.
        state = (self.tokenizer, dict(self.marker_ids), dict(self.added_tokens), self.report)
        return (_vocabulary_from_state, state)


def _vocabulary_from_state(
    tokenizer: tokenizers.Tokenizer,
    marker_ids: dict[str, int],
    added_tokens: dict[str, int],
    report: ValidationReport,
) -> Vocabulary:
    marker_view, added_view = MappingProxyType(marker_ids), MappingProxyType(added_tokens)
    return Vocabulary(tokenizer, marker_view, added_view, report)


def load_vocabulary(files: CheckpointFiles) -> Vocabulary:
    """Load ``files.tokenizer_json`` once and check its markers.

    Raises ``VocabularyError`` (every marker problem) when ``report.vocabulary_ok`` is false, and
    ``CheckpointError`` naming the path when a file cannot be read, is not JSON, or is not a BPE
    vocabulary. Template, stop-token and embedding problems do not prevent loading; they are in
    ``report.problems``.
    """
    if not isinstance(files, CheckpointFiles):
        raise PromptError(
            f"expected CheckpointFiles (from resolve_checkpoint), got {type(files).__name__}",
            field="files",
        )
    tokenizer, report = _inspect(files)
    if not report.vocabulary_ok:
        raise VocabularyError(str(files.tokenizer_json), report.vocabulary_problems)
    added: dict[str, int] = {}
    for token in _added(tokenizer):
        token_id = tokenizer.token_to_id(token.content)
        if token_id is not None:  # never None: an added token's content is in the vocabulary
            added[token.content] = token_id
    marker_ids = {marker: added[marker] for marker in PROTOCOL_MARKERS}
    return Vocabulary(
        tokenizer=tokenizer,
        marker_ids=MappingProxyType(marker_ids),
        added_tokens=MappingProxyType(added),
        report=report,
    )


def validate_checkpoint(
    source: str | os.PathLike[str],
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    local_files_only: bool | None = None,
) -> ValidationReport:
    """Check ``source`` (as ``resolve_checkpoint`` takes it) without raising for what is wrong
    with it: vocabulary, template, stop-token and embedding problems all land in the report.
    ``CheckpointError`` still propagates when the files cannot be found or read at all."""
    files = resolve_checkpoint(
        source, revision=revision, cache_dir=cache_dir, local_files_only=local_files_only
    )
    return _inspect(files)[1]


def chat_template_kind(
    source: str | os.PathLike[str],
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    local_files_only: bool | None = None,
) -> TemplateKind:
    """Whether ``source`` carries the official Qwen 3.8 chat template, without loading its
    vocabulary (for callers that render text and never need the tokenizer)."""
    files = resolve_checkpoint(
        source, revision=revision, cache_dir=cache_dir, local_files_only=local_files_only
    )
    config = read_json(files.tokenizer_config) if files.tokenizer_config else None
    return check_template(files, config)[0]


# --- reading files ------------------------------------------------------------------------------


def _load_tokenizer(path: Path) -> tokenizers.Tokenizer:
    if path_kind(path) is None:
        raise CheckpointError(f"{path}: missing; a checkpoint needs tokenizer.json")
    check_ends_as_an_object(path, checked_size(path, MAX_TOKENIZER_JSON_BYTES))
    try:
        if _utf8_path(path):
            tokenizer = tokenizers.Tokenizer.from_file(str(path))
        else:
            # tokenizers takes the path as a Rust string, which cannot hold a file name that is
            # not UTF-8 (Python carries its bytes as lone surrogates): hand it the bytes instead.
            tokenizer = tokenizers.Tokenizer.from_buffer(path.read_bytes())
    except Exception as error:  # tokenizers raises a bare Exception for every kind of failure
        raise CheckpointError(_why_unloadable(path, error)) from error
    model = tokenizer.model
    if not isinstance(model, BPE):
        raise CheckpointError(
            f"{path}: expected a byte-level BPE vocabulary (every Qwen tokenizer.json is one), "
            f"found a {type(model).__name__} model"
        )
    return tokenizer


def _utf8_path(path: Path) -> bool:
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _why_unloadable(path: Path, error: Exception) -> str:
    """Explain a tokenizers load failure. Runs only after it failed, so parsing here costs nothing
    on the normal path and tells "not JSON" apart from "JSON, but not a tokenizer"."""
    try:
        with path.open(encoding="utf-8") as handle:
            loads(handle.read())
    except OSError as os_error:
        return f"{path}: cannot be read ({os_error.strerror or os_error})"
    except UnicodeDecodeError as decode_error:
        return f"{path}: not UTF-8 text, so not a tokenizer.json ({decode_error})"
    except JSONTextError as json_error:
        if json_error.kind == "syntax":
            return f"{path}: invalid JSON ({json_error.detail})"
        return f"{path}: JSON that cannot be read: {json_error.reason}"
    return f"{path}: valid JSON but not a tokenizer.json that tokenizers can load ({error})"


# --- checks -------------------------------------------------------------------------------------


def _added(tokenizer: tokenizers.Tokenizer) -> list[tokenizers.AddedToken]:
    return list(tokenizer.get_added_tokens_decoder().values())


def _flag(value: object) -> str:
    return json.dumps(value)


def _inspect(files: CheckpointFiles) -> tuple[tokenizers.Tokenizer, ValidationReport]:
    path = files.tokenizer_json
    tokenizer = _load_tokenizer(path)
    declared = declared_added_tokens(path)
    config = read_json(files.tokenizer_config) if files.tokenizer_config else None
    loaded = tokenizer.get_added_tokens_decoder()

    markers, vocabulary_problems = _check_markers(tokenizer, declared, loaded)
    if config is not None:
        vocabulary_problems += _check_config_agrees(config, declared, loaded)
    vocabulary_problems += _check_declared_ids(declared, tokenizer)

    max_id = _max_token_id(tokenizer, loaded)
    im_end = tokenizer.token_to_id(TURN_CLOSE)
    template, sha, template_problems = check_template(files, config)
    stop, stop_problems = check_stop_tokens(files, im_end, tokenizer)
    embedding, embedding_problems = check_embedding(files, max_id)
    special, special_problems, warnings, tied = check_special_tokens(
        files, config, tokenizer, stop, stop_problems
    )

    problems = (
        *vocabulary_problems,
        *template_problems,
        *stop_problems,
        *embedding_problems,
        *special_problems,
    )
    by_code = {problem.code: str(problem) for problem in template_problems}
    report = ValidationReport(
        source=files.source,
        problems=tuple(map(str, problems)),
        vocabulary_problems=tuple(map(str, vocabulary_problems)),
        markers=tuple(markers),
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        max_token_id=max_id,
        normalizer=summary(tokenizer.normalizer),
        pre_tokenizer=summary(tokenizer.pre_tokenizer),
        stop_token_ids=stop,
        bos=bos_policy(tokenizer, config),
        embedding_size=embedding,
        template=template,
        template_sha256=sha,
        special_tokens=tuple(special),
        warnings=tuple(map(str, warnings)),
        tie_word_embeddings=tied,
        template_problem=by_code.get(TEMPLATE_NOT_OFFICIAL),
        config_template_problem=by_code.get(TEMPLATE_CONFIG_DIFFERS),
        findings=(*problems, *warnings),
    )
    return tokenizer, report


def inspect_checkpoint(files: CheckpointFiles) -> tuple[tokenizers.Tokenizer, ValidationReport]:
    """``validate_checkpoint`` for located files, handing back the tokenizer it loaded as well
    (for the reports of ``qwen_encode.report``, which need the vocabulary: loading it twice
    would cost a second)."""
    return _inspect(files)


def chat_template_text(files: CheckpointFiles) -> str | None:
    """The chat template ``files`` carry, as transformers picks it (chat_template.jinja first,
    else tokenizer_config.json's ``chat_template``), or None. ``CheckpointError`` when the file
    cannot be read or is not UTF-8."""
    if files.chat_template is not None:
        try:
            return read_bytes(files.chat_template).decode("utf-8")
        except UnicodeDecodeError as error:
            raise CheckpointError(f"{files.chat_template}: not UTF-8 text ({error})") from error
    config = read_json(files.tokenizer_config) if files.tokenizer_config else None
    return template_text(config)


def tokenizer_config_template(files: CheckpointFiles) -> str | None:
    """The ``chat_template`` of tokenizer_config.json (its "default" entry in the list form), or
    None; what tools that ignore chat_template.jinja render with."""
    config = read_json(files.tokenizer_config) if files.tokenizer_config else None
    return template_text(config)


def _declared_entries(declared: list[Any] | None) -> dict[str, list[dict[str, Any]]]:
    by_content: dict[str, list[dict[str, Any]]] = {}
    for entry in declared or ():
        if isinstance(entry, dict) and isinstance(entry.get("content"), str):
            by_content.setdefault(entry["content"], []).append(entry)
    return by_content


def _check_declared_ids(
    declared: list[Any] | None, tokenizer: tokenizers.Tokenizer
) -> list[Problem]:
    """Every added token (marker or not) must load at the one ID tokenizer.json declares: the
    model's embedding rows follow the declared IDs, tokenizers' renumbering would not."""
    problems = []
    for content, entries in _declared_entries(declared).items():
        ids = [entry.get("id") for entry in entries]
        if len(entries) > 1:
            problems.append(
                Problem(
                    "added_token.ids",
                    repr(content),
                    f"expected exactly one ID in tokenizer.json added_tokens, found IDs {ids}",
                )
            )
            continue
        loaded_id = tokenizer.token_to_id(content)
        if loaded_id != ids[0]:
            problems.append(
                Problem(
                    "added_token.renumbered",
                    repr(content),
                    f"expected ID {ids[0]} as declared in tokenizer.json, found ID "
                    f"{loaded_id} once loaded (tokenizers ignores declared IDs: it numbers added "
                    "tokens in file order after the base vocabulary)",
                )
            )
    return problems


def _check_markers(
    tokenizer: tokenizers.Tokenizer,
    declared: list[Any] | None,
    loaded: Mapping[int, tokenizers.AddedToken],
) -> tuple[list[MarkerEntry], list[Problem]]:
    declared_by_content = _declared_entries(declared)
    loaded_by_content: dict[str, tuple[int, tokenizers.AddedToken]] = {
        token.content: (token_id, token) for token_id, token in loaded.items()
    }
    entries: list[MarkerEntry] = []
    problems: list[Problem] = []
    for marker in PROTOCOL_MARKERS:
        ids = tokenizer.encode(marker, add_special_tokens=False).ids
        token_id = tokenizer.token_to_id(marker)
        if marker not in loaded_by_content:
            # Either absent, or only a base-vocabulary entry: BPE never merges across the
            # pre-tokenizer's splits of "<|...|>", so the marker text breaks into pieces.
            base = tokenizer.model.token_to_id(marker)
            found = "none" if base is None else f"only a base-vocabulary entry, ID {base}"
            problems.append(
                Problem(
                    "marker.not_added",
                    repr(marker),
                    f"expected an added token in tokenizer.json, found {found} "
                    f"(the text encodes as {len(ids)} tokens {ids})",
                )
            )
            entries.append(MarkerEntry(marker, token_id, None, atomic=ids == [token_id]))
            continue
        loaded_id, token = loaded_by_content[marker]
        base = tokenizer.model.token_to_id(marker)
        if base is not None and base != loaded_id:
            problems.append(
                Problem(
                    "marker.two_ids",
                    repr(marker),
                    f"expected exactly one ID, found added-token ID {loaded_id} and "
                    f"base-vocabulary ID {base}",
                )
            )
        # Flags as written in the file when it could be read (tokenizers keeps them as given).
        flags = declared_by_content.get(marker, [{}])[0]
        for flag in _MATCH_FLAGS:
            value = flags.get(flag, getattr(token, flag))
            if value is not False:
                problems.append(
                    Problem(
                        "marker.flag",
                        repr(marker),
                        f"expected {flag}=false in tokenizer.json, found {flag}={_flag(value)}",
                    )
                )
        atomic = ids == [loaded_id]
        if not atomic:
            problems.append(
                Problem(
                    "marker.not_atomic",
                    repr(marker),
                    f"expected to encode as the single token [{loaded_id}], found {ids}",
                )
            )
        entries.append(MarkerEntry(marker, loaded_id, token.special, atomic))
    return entries, problems


def _check_config_agrees(
    config: Mapping[str, Any],
    declared: list[Any] | None,
    loaded: Mapping[int, tokenizers.AddedToken],
) -> list[Problem]:
    """tokenizer_config.json's added_tokens_decoder must describe each marker as tokenizer.json
    does: transformers builds its special-token handling from it, so a disagreement splits the
    truth."""
    decoder = config.get("added_tokens_decoder")
    if decoder is None:
        return []  # older configs carry no decoder: nothing to disagree with
    where = "tokenizer_config.json added_tokens_decoder"
    if not isinstance(decoder, dict):
        found = type(decoder).__name__
        return [
            Problem("config.decoder", where, f"expected an object of ID -> token, found {found}")
        ]
    config_by_content: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for key, entry in decoder.items():
        if isinstance(entry, dict) and isinstance(entry.get("content"), str):
            config_by_content.setdefault(entry["content"], []).append((key, entry))
    # The reference is what the file declares, else what tokenizers loaded (same when healthy).
    reference: dict[str, tuple[int, dict[str, Any]]] = {
        token.content: (token_id, {flag: getattr(token, flag) for flag in _ALL_FLAGS})
        for token_id, token in loaded.items()
    }
    for content, entries in _declared_entries(declared).items():
        if len(entries) == 1 and isinstance(entries[0].get("id"), int):
            reference[content] = (entries[0]["id"], entries[0])

    problems: list[Problem] = []
    for marker in PROTOCOL_MARKERS:
        listed = config_by_content.get(marker, [])
        if marker not in reference:
            if listed:
                problems.append(
                    Problem(
                        "config.marker_extra",
                        repr(marker),
                        f"expected {where} to agree with tokenizer.json (no such added "
                        f"token), found it at ID {', '.join(key for key, _ in listed)}",
                    )
                )
            continue
        ref_id, ref_flags = reference[marker]
        if not listed:
            there = decoder.get(str(ref_id))
            other = f" (ID {ref_id} there is {there.get('content')!r})" if there else ""
            problems.append(
                Problem(
                    "config.marker_missing",
                    repr(marker),
                    f"expected {where} to list it at ID {ref_id} as tokenizer.json does, "
                    f"found no entry{other}",
                )
            )
            continue
        if len(listed) > 1:
            problems.append(
                Problem(
                    "config.marker_ids",
                    repr(marker),
                    f"expected exactly one ID in {where}, found IDs "
                    f"[{', '.join(key for key, _ in listed)}]",
                )
            )
            continue
        key, entry = listed[0]
        if key != str(ref_id):
            problems.append(
                Problem(
                    "config.marker_id",
                    repr(marker),
                    f"expected ID {ref_id} in {where} as in tokenizer.json, found ID {key}",
                )
            )
        for flag in _ALL_FLAGS:
            if flag in entry and flag in ref_flags and entry[flag] != ref_flags[flag]:
                problems.append(
                    Problem(
                        "config.marker_flag",
                        repr(marker),
                        f"expected {flag}={_flag(ref_flags[flag])} in {where} as in "
                        f"tokenizer.json, found {flag}={_flag(entry[flag])}",
                    )
                )
    return problems


def _max_token_id(
    tokenizer: tokenizers.Tokenizer, loaded: Mapping[int, tokenizers.AddedToken]
) -> int:
    """The largest token ID. tokenizers numbers a BPE base vocabulary 0..n-1 when it wrote the file;
    when the ends do not line up that way, fall back to scanning the vocabulary (slow, rare)."""
    model = tokenizer.model
    base = tokenizer.get_vocab_size(with_added_tokens=False)
    contiguous = base == 0 or (
        model.id_to_token(base - 1) is not None and model.id_to_token(base) is None
    )
    base_max = (
        base - 1 if contiguous else max(tokenizer.get_vocab(with_added_tokens=False).values())
    )
    return max([base_max, *loaded])
