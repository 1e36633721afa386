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

import hashlib
import json
import mmap
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

import tokenizers
from tokenizers.models import BPE

from .checkpoint import FILE, CheckpointFiles, path_kind, resolve_checkpoint
from .errors import CheckpointError, VocabularyError
from .markers import END_OF_TEXT, PROTOCOL_MARKERS, TURN_CLOSE, TURN_OPEN
from .problems import Problem

#: sha256 of the official Qwen 3.8 chat template: ``chat_template.jinja`` of Qwen/Qwen3.8-27B at
#: revision 1d4bf0f2ff6012fd82039f2fa52739d0dd7c60c0 (the same text is the ``chat_template`` field
#: of that revision's ``tokenizer_config.json``). Any other template renders another protocol.
QWEN38_TEMPLATE_SHA256: Final = "c3cf9e34abf4f9e36c2d72165aa9c132d3e2a725b6c2586aaa3a8af9d7a81041"

TemplateKind: TypeAlias = Literal["qwen3.8", "other", "absent"]

#: Codes of the template problems (``Problem.code``), which the reports act on.
TEMPLATE_ABSENT: Final = "template.absent"
TEMPLATE_NOT_OFFICIAL: Final = "template.not_official"
TEMPLATE_CONFIG_DIFFERS: Final = "template.config_differs"

# The added-token flags that change how a marker is matched in text; each must be false, or the
# marker would match inside normalised text or swallow neighbouring spaces/words.
_MATCH_FLAGS: Final = ("normalized", "lstrip", "rstrip", "single_word")
_ALL_FLAGS: Final = ("special", *_MATCH_FLAGS)

#: The largest ``tokenizer.json`` read: 256 MiB, 23 times the Qwen 3.8 one (11 MB for 248k tokens)
#: and several times the largest vocabularies published (a few tens of MB). tokenizers reads the
#: whole file before it can fail, and a broken file's diagnosis parses it once more: a 2 GB file
#: cost 17.7 s and 10.5 GB of memory before this bound.
MAX_TOKENIZER_JSON_BYTES: Final = 256 << 20
#: The largest side file read (tokenizer_config.json, configs, the chat template): 16 MiB, about
#: 900 times the largest real one (tokenizer_config.json, 18 KB).
MAX_SIDE_FILE_BYTES: Final = 16 << 20
# How much of the end of tokenizer.json is read at a time to find its last non-blank byte.
_TAIL_READ: Final = 1 << 16
_JSON_BLANKS: Final = b" \t\n\r"

# Patterns over tokenizer.json's bytes that find its top-level "added_tokens" whatever the key
# order, stepping over every other value without building it: the ``model`` value (megabytes of
# vocabulary and merges) is never parsed a second time. Each is written so that every byte can
# match in one way only (the "unrolled loop"), which keeps a failed attempt linear, never
# exponential. _FLAT steps over scalars, strings and innermost arrays/objects (those holding no
# bracket outside strings, such as a vocab object or a merge pair), stopping at any other bracket.
_BLANKS = re.compile(rb"[ \t\n\r]*")
_STRING_RE: Final = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRING = re.compile(_STRING_RE, re.S)
_SCALAR = re.compile(rb"[^,\]}\s]+")
_PLAIN: Final = rb'[^"\[\]{}]*'
_LEAF: Final = rb"[\[{]" + _PLAIN + rb"(?:" + _STRING_RE + _PLAIN + rb")*[\]}]"
_FLAT = re.compile(_PLAIN + rb"(?:(?:" + _STRING_RE + rb"|" + _LEAF + rb")" + _PLAIN + rb")*", re.S)


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
    #: What each stop/special-token field of the side files holds and must hold (issue 14).
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
    tokenizer, report = _inspect(files)
    if not report.vocabulary_ok:
        raise VocabularyError(str(files.tokenizer_json), report.vocabulary_problems)
    added = {token.content: tokenizer.token_to_id(token.content) for token in _added(tokenizer)}
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
    config = _read_json(files.tokenizer_config) if files.tokenizer_config else None
    return _check_template(files, config)[0]


# --- reading files ------------------------------------------------------------------------------


def _checked_size(path: Path, limit: int) -> int:
    """The size of ``path``, after checking it is a regular file (never open a FIFO: it blocks)
    no larger than ``limit``; ``CheckpointError`` naming the path otherwise."""
    kind = path_kind(path)
    if kind != FILE:
        raise CheckpointError(f"{path}: {kind or 'missing'}, not a file")
    try:
        size = path.stat().st_size
    except OSError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror or error})") from error
    if size > limit:
        raise CheckpointError(
            f"{path}: {size:,} bytes, more than the {limit:,} (= {limit >> 20} MiB) read from a "
            "checkpoint file of this kind: not a vocabulary's file, or padded with garbage"
        )
    return size


def _check_ends_as_an_object(path: Path, size: int) -> None:
    """Refuse, from the file's last bytes alone, a tokenizer.json that cannot be one JSON object:
    truncated, or followed by other data (NUL padding from a failed copy). tokenizers would read
    and parse all of it before failing."""
    tail, end = b"", size
    try:
        with path.open("rb") as handle:
            while end > 0 and not tail:
                start = max(0, end - _TAIL_READ)
                handle.seek(start)
                tail = handle.read(end - start).rstrip(_JSON_BLANKS)
                end = start + len(tail)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror or error})") from error
    if not tail:
        raise CheckpointError(f"{path}: empty, or only blanks: not a tokenizer.json")
    if not tail.endswith(b"}"):
        raise CheckpointError(
            f"{path}: invalid JSON (it must end with the }} closing its object; found "
            f"{tail[-12:]!r} ending at byte {end - 1:,}: a truncated file, or data after the "
            "JSON such as NUL padding)"
        )


def _load_tokenizer(path: Path) -> tokenizers.Tokenizer:
    if path_kind(path) is None:
        raise CheckpointError(f"{path}: missing; a checkpoint needs tokenizer.json")
    _check_ends_as_an_object(path, _checked_size(path, MAX_TOKENIZER_JSON_BYTES))
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
            json.load(handle)
    except OSError as os_error:
        return f"{path}: cannot be read ({os_error.strerror or os_error})"
    except UnicodeDecodeError as decode_error:
        return f"{path}: not UTF-8 text, so not a tokenizer.json ({decode_error})"
    except json.JSONDecodeError as json_error:
        return f"{path}: invalid JSON ({json_error})"
    return f"{path}: valid JSON but not a tokenizer.json that tokenizers can load ({error})"


def _read_json(path: Path) -> dict[str, Any]:
    _checked_size(path, MAX_SIDE_FILE_BYTES)
    try:
        with path.open(encoding="utf-8") as handle:
            value = json.load(handle)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror or error})") from error
    except UnicodeDecodeError as error:
        raise CheckpointError(f"{path}: not UTF-8 text ({error})") from error
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path}: invalid JSON ({error})") from error
    except RecursionError as error:
        raise CheckpointError(f"{path}: JSON nested too deeply to read") from error
    except ValueError as error:  # an integer past Python's digit limit (4300 digits)
        raise CheckpointError(f"{path}: JSON that cannot be read ({error})") from error
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def _read_bytes(path: Path) -> bytes:
    _checked_size(path, MAX_SIDE_FILE_BYTES)
    try:
        return path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror or error})") from error


def _declared_added_tokens(path: Path) -> list[Any] | None:
    """``added_tokens`` exactly as ``tokenizer.json`` declares them, or None if it has none.

    Needed because tokenizers renumbers silently: it numbers added tokens in file order after the
    base vocabulary whatever IDs the file declares (only a Rust log warning says so), so one
    removed or repeated entry shifts every later ID. The file is mapped, not read, and only the
    ``added_tokens`` value is parsed: in the order tokenizers writes keys it comes before
    ``model``, and the scan stops a few hundred bytes in; in any other order ``model`` is
    stepped over (about 0.6 s for the 11 MB Qwen 3.8 file, no memory beyond the mapping).
    Called after tokenizers loaded the file, so it is one JSON object.
    """
    with path.open("rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return None
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _top_level_added_tokens(data)


def _top_level_added_tokens(data: bytes | mmap.mmap) -> list[Any] | None:
    """The value of the top-level key "added_tokens" of the JSON object in ``data`` (a list), or
    None when there is no such key or the text is not a well-formed object."""
    i = _BLANKS.match(data, 0).end()
    if data[i : i + 1] != b"{":
        return None
    i += 1
    while True:
        key = _STRING.match(data, _BLANKS.match(data, i).end())
        if key is None:
            return None  # the closing }, or not JSON
        i = _BLANKS.match(data, key.end()).end()
        if data[i : i + 1] != b":":
            return None
        start = _BLANKS.match(data, i + 1).end()
        end = _skip_value(data, start)
        if end is None:
            return None
        # Decoded as JSON, as serde matches keys: "added\u005ftokens" is the same key.
        if json.loads(key.group()) == "added_tokens":
            try:
                value = json.loads(data[start:end])
            except (ValueError, RecursionError):
                return None
            return value if isinstance(value, list) else None
        i = _BLANKS.match(data, end).end()
        if data[i : i + 1] != b",":
            return None
        i += 1


def _skip_value(data: bytes | mmap.mmap, i: int) -> int | None:
    """Where the JSON value starting at ``i`` ends, found without building it; None if it does
    not end (truncated or malformed text)."""
    first = data[i : i + 1]
    if first not in (b"[", b"{"):
        scalar = (_STRING if first == b'"' else _SCALAR).match(data, i)
        return None if scalar is None else scalar.end()
    depth = 0
    while True:
        bracket = data[i : i + 1]
        if bracket in (b"[", b"{"):
            depth += 1
        elif bracket in (b"]", b"}"):
            depth -= 1
        else:
            return None  # the end of the data, or a quote that opens no complete string
        i += 1
        if depth == 0:
            return i
        i = _FLAT.match(data, i).end()


# --- checks -------------------------------------------------------------------------------------


def _added(tokenizer: tokenizers.Tokenizer) -> list[tokenizers.AddedToken]:
    return list(tokenizer.get_added_tokens_decoder().values())


def _flag(value: object) -> str:
    return json.dumps(value)


def _inspect(files: CheckpointFiles) -> tuple[tokenizers.Tokenizer, ValidationReport]:
    path = files.tokenizer_json
    tokenizer = _load_tokenizer(path)
    declared = _declared_added_tokens(path)
    config = _read_json(files.tokenizer_config) if files.tokenizer_config else None
    loaded = tokenizer.get_added_tokens_decoder()

    markers, vocabulary_problems = _check_markers(tokenizer, declared, loaded)
    if config is not None:
        vocabulary_problems += _check_config_agrees(config, declared, loaded)
    vocabulary_problems += _check_declared_ids(declared, tokenizer)

    max_id = _max_token_id(tokenizer, loaded)
    im_end = tokenizer.token_to_id(TURN_CLOSE)
    template, sha, template_problems = _check_template(files, config)
    stop, stop_problems = _check_stop_tokens(files, im_end, tokenizer)
    embedding, embedding_problems = _check_embedding(files, max_id)
    special, special_problems, warnings, tied = _check_special_tokens(
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
        normalizer=_summary(tokenizer.normalizer),
        pre_tokenizer=_summary(tokenizer.pre_tokenizer),
        stop_token_ids=stop,
        bos=_bos_policy(tokenizer, config),
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
            return _read_bytes(files.chat_template).decode("utf-8")
        except UnicodeDecodeError as error:
            raise CheckpointError(f"{files.chat_template}: not UTF-8 text ({error})") from error
    config = _read_json(files.tokenizer_config) if files.tokenizer_config else None
    return _template_text(config)


def tokenizer_config_template(files: CheckpointFiles) -> str | None:
    """The ``chat_template`` of tokenizer_config.json (its "default" entry in the list form), or
    None; what tools that ignore chat_template.jinja render with."""
    config = _read_json(files.tokenizer_config) if files.tokenizer_config else None
    return _template_text(config)


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


def _template_text(config: Mapping[str, Any] | None) -> str | None:
    template = (config or {}).get("chat_template")
    if isinstance(template, list):
        # The multi-template form [{"name": ..., "template": ...}]: "default" is the protocol.
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _check_template(
    files: CheckpointFiles, config: Mapping[str, Any] | None
) -> tuple[TemplateKind, str | None, list[Problem]]:
    in_config = _template_text(config)
    config_sha = None if in_config is None else _sha256(in_config.encode("utf-8"))
    if files.chat_template is not None:
        # transformers prefers chat_template.jinja over tokenizer_config.json's field.
        sha, where = _sha256(_read_bytes(files.chat_template)), "chat_template.jinja"
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


def _sha256(data: bytes) -> str:
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


def _check_stop_tokens(
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
    raw = _read_json(files.generation_config).get("eos_token_id")
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


def _check_embedding(files: CheckpointFiles, max_id: int) -> tuple[int | None, list[Problem]]:
    if files.config is None:
        return None, [
            Problem(
                "embedding.no_file",
                "config.json",
                f"expected vocab_size (the embedding size) of at least {max_id + 1}, found no file",
            )
        ]
    config = _read_json(files.config)
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


def _bos_policy(tokenizer: tokenizers.Tokenizer, config: Mapping[str, Any] | None) -> str:
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


def _summary(component: object) -> str:
    """A short description such as "NFC" or "Split(regex) + ByteLevel", from the component's own
    small JSON state (the normalizer/pre-tokenizer only, never the model)."""
    if component is None:
        return "none"
    try:
        state = json.loads(component.__getstate__())  # type: ignore[attr-defined]
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


# --- stop and special tokens (issue 14) ---------------------------------------------------------

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


def _check_special_tokens(
    files: CheckpointFiles,
    config: Mapping[str, Any] | None,
    tokenizer: tokenizers.Tokenizer,
    stop: tuple[int, ...] | None,
    stop_problems: list[Problem],
) -> tuple[list[SpecialTokenEntry], list[Problem], list[Problem], bool | None]:
    """Each stop/special-token field against the rule in the constants above. The
    generation_config.json stop list is judged by ``_check_stop_tokens`` (its problems are
    already listed); it is only shown here, with the rule."""
    entries: list[SpecialTokenEntry] = []
    problems: list[Problem] = []
    warnings: list[Problem] = []
    if files.generation_config is None or stop is None:
        entries.append(
            SpecialTokenEntry(
                "generation_config.json eos_token_id",
                None,
                "none",
                _GENERATION_EOS_RULE,
                "problem",
            )
        )
    else:
        stop_verdict: Literal["ok", "problem", "warning", "absent"] = (
            "problem" if stop_problems else "ok"
        )
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
        entries.append(
            SpecialTokenEntry(
                "generation_config.json eos_token_id",
                list(stop),
                _tokens_shown(tokenizer, list(stop)),
                _GENERATION_EOS_RULE,
                stop_verdict,
            )
        )

    if config is not None:
        for name, rule in (("eos_token", _EOS_TOKEN_RULE), ("pad_token", _PAD_TOKEN_RULE)):
            where = f"tokenizer_config.json {name}"
            raw = config.get(name)
            value = raw.get("content") if isinstance(raw, dict) else raw
            if value is None:
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
                    entries.append(SpecialTokenEntry(where, None, "none", rule, "warning"))
                else:
                    problems.append(
                        Problem("special.eos", where, f"expected {TURN_CLOSE!r}, found none")
                    )
                    entries.append(SpecialTokenEntry(where, None, "none", rule, "problem"))
                continue
            if not isinstance(value, str):
                problems.append(
                    Problem(
                        "special.invalid", where, f"expected a token string, found {_shown(raw)}"
                    )
                )
                entries.append(SpecialTokenEntry(where, raw, "none", rule, "problem"))
                continue
            token_id = tokenizer.token_to_id(value)
            tokens = "no token" if token_id is None else f"{token_id} {value}"
            verdict: Literal["ok", "problem", "warning", "absent"] = "ok"
            if token_id is None:
                problems.append(
                    Problem(
                        "special.not_a_token",
                        where,
                        f"expected a token of the vocabulary, found {value!r}, which is none",
                    )
                )
                verdict = "problem"
            elif name == "eos_token" and value != TURN_CLOSE:
                problems.append(
                    Problem("special.eos", where, f"expected {TURN_CLOSE!r}, found {value!r}")
                )
                verdict = "problem"
            elif name == "pad_token" and value == TURN_CLOSE:
                warnings.append(
                    Problem(
                        "special.pad_is_im_end",
                        where,
                        f"{TURN_CLOSE!r}; {rule[rule.index('collators') :]} (use {END_OF_TEXT!r})",
                        "warning",
                    )
                )
                verdict = "warning"
            entries.append(SpecialTokenEntry(where, raw, tokens, rule, verdict))

    tied: bool | None = None
    if files.config is not None:
        model_config = _read_json(files.config)
        text_config = model_config.get("text_config")
        scopes = [("", model_config)]
        if isinstance(text_config, dict):
            scopes.insert(0, ("text_config.", text_config))
        for prefix, scope in scopes:
            if tied is None and isinstance(scope.get("tie_word_embeddings"), bool):
                tied = scope["tie_word_embeddings"]
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
                    problems.append(
                        Problem(
                            "special.config_id",
                            where,
                            f"expected {expected} of the vocabulary, found {_shown(raw)}",
                        )
                    )
                entries.append(
                    SpecialTokenEntry(
                        where,
                        raw,
                        _tokens_shown(tokenizer, ids),
                        rule,
                        "problem" if bad or not ids else "ok",
                    )
                )
    return entries, problems, warnings, tied
