"""Finding a checkpoint's tokenizer files: a local folder, a ``tokenizer.json`` path or a hub id.

This layer only locates files; reading and validating them is ``vocabulary``'s job. It never falls
back to another source: a path that does not exist is an error naming that path, not a hub lookup,
and a hub id that cannot be resolved is an error naming the repo, the revision and the cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .errors import CheckpointError, PromptError, shown

TOKENIZER_JSON: Final = "tokenizer.json"
TOKENIZER_CONFIG: Final = "tokenizer_config.json"
CHAT_TEMPLATE: Final = "chat_template.jinja"
MODEL_CONFIG: Final = "config.json"
GENERATION_CONFIG: Final = "generation_config.json"

#: The only files fetched from the hub: all the encoder and its validation read, never weights.
TOKENIZER_FILES: Final[tuple[str, ...]] = (
    TOKENIZER_JSON,
    TOKENIZER_CONFIG,
    CHAT_TEMPLATE,
    MODEL_CONFIG,
    GENERATION_CONFIG,
)

#: What ``path_kind`` says of a regular file and of a folder (other kinds are described in words).
FILE: Final = "a regular file"
FOLDER: Final = "a folder"

# "org/name" as the hub spells repo ids. Anything else that does not exist on disk is a missing
# path: guessing that "./x" or "/abs/x" meant a hub repo would hide a typo behind a network lookup.
_REPO_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*")

# huggingface_hub's own truthy spellings (constants.ENV_VARS_TRUE_VALUES).
_TRUE = frozenset({"1", "ON", "YES", "TRUE"})


@dataclass(frozen=True)
class CheckpointFiles:
    """Where one checkpoint's tokenizer files are. Only ``tokenizer_json`` is required to exist."""

    source: str
    tokenizer_json: Path
    tokenizer_config: Path | None
    chat_template: Path | None
    config: Path | None
    generation_config: Path | None
    # A hub checkpoint travels to another machine as its id and revision (a pickled Encoder),
    # a local one as its files: the folder may not exist there.
    from_hub: bool = False
    revision: str | None = None
    #: The GGUF file this checkpoint was read from (its ``tokenizer_json`` is then the one rebuilt
    #: from the GGUF's vocabulary, under the cache); None for a tokenizer.json checkpoint.
    gguf: Path | None = None

    @classmethod
    def in_folder(cls, source: str, folder: Path, tokenizer_json: Path) -> CheckpointFiles:
        """The files beside ``tokenizer_json`` in ``folder``; optional ones are None if absent."""

        def optional(name: str) -> Path | None:
            path = folder / name
            kind = path_kind(path)
            if kind is None:
                return None
            if kind != FILE:
                # Treating it as absent would silently judge the checkpoint without it (a folder
                # named tokenizer_config.json hid every marker check against that file).
                raise CheckpointError(
                    f"{path}: {kind}, not a file; remove or replace it (it is read when present)"
                )
            return path

        return cls(
            source=source,
            tokenizer_json=tokenizer_json,
            tokenizer_config=optional(TOKENIZER_CONFIG),
            chat_template=optional(CHAT_TEMPLATE),
            config=optional(MODEL_CONFIG),
            generation_config=optional(GENERATION_CONFIG),
        )

    def present(self) -> dict[str, Path]:
        """The files that exist, by the name they have in a checkpoint folder (what a pickled
        Encoder packs, and what ``in_folder`` finds again on the other side)."""
        named = {
            TOKENIZER_JSON: self.tokenizer_json,
            TOKENIZER_CONFIG: self.tokenizer_config,
            CHAT_TEMPLATE: self.chat_template,
            MODEL_CONFIG: self.config,
            GENERATION_CONFIG: self.generation_config,
        }
        return {name: path for name, path in named.items() if path is not None}


def path_kind(path: Path) -> str | None:
    """What is at ``path``: None when nothing is, ``FILE`` for a regular file (symbolic links
    followed), ``FOLDER``, or what else it is ("a FIFO (named pipe)", "a broken symbolic link").

    Only a regular file is ever opened: opening a FIFO blocks until some writer appears, and a
    device or socket is no checkpoint file. Raises ``CheckpointError`` naming the path when it
    cannot even be looked at (a folder on the way without search permission, mode 000)."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "a broken symbolic link" if os.path.islink(path) else None
    except PermissionError as error:
        raise CheckpointError(
            f"{path}: cannot be read (permission denied: {error.strerror or error}); "
            "check the permissions of the path and the folders above it"
        ) from error
    except (OSError, ValueError) as error:  # a symlink loop, a name too long, a NUL byte
        raise CheckpointError(f"{path}: cannot be used ({error})") from error
    mode = info.st_mode
    if stat.S_ISREG(mode):
        return FILE
    if stat.S_ISDIR(mode):
        return FOLDER
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _check_hub_options(revision: object, cache_dir: object, local_files_only: object) -> None:
    """The hub arguments' types, checked before anything is looked up (a number as cache_dir
    raised TypeError inside huggingface_hub, a name no file system can hold UnicodeEncodeError)."""
    if revision is not None and not isinstance(revision, str):
        raise PromptError(f"must be a str or None, got {shown(revision)}", field="revision")
    if local_files_only is not None and not isinstance(local_files_only, bool):
        raise PromptError(
            f"must be a bool or None, got {shown(local_files_only)}", field="local_files_only"
        )
    if cache_dir is None:
        return
    if not isinstance(cache_dir, str | os.PathLike):
        raise PromptError(
            f"must be a path (a str or os.PathLike) or None, got {shown(cache_dir)}",
            field="cache_dir",
        )
    try:
        os.fsencode(cache_dir)
    except (UnicodeEncodeError, TypeError):  # a lone surrogate; a __fspath__ giving no path
        raise PromptError(
            f"{shown(cache_dir)} cannot be a file name on this system", field="cache_dir"
        ) from None


def _source_text(source: object) -> str:
    """``source`` as a path string, or ``CheckpointError`` saying what was expected."""
    text: str | bytes | None = None
    if isinstance(source, str | bytes | os.PathLike):  # PathLike: any object with __fspath__
        try:
            text = os.fspath(source)
        except TypeError:  # a __fspath__ that returns neither str nor bytes
            text = None
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not isinstance(text, str):
        raise CheckpointError(
            "checkpoint source: expected a local folder, a tokenizer.json path or a hub repo id "
            f"(a str or os.PathLike), found {type(source).__name__}"
        )
    if not text.strip():
        # Path("") is the current directory: an empty --model (an unset variable, a blank config
        # entry) would quietly load whatever checkpoint the working directory happens to hold.
        raise CheckpointError(
            f"checkpoint source: expected a local folder, a tokenizer.json path or a hub repo id, "
            f"found the empty string {text!r}"
        )
    return text


def resolve_checkpoint(
    source: str | os.PathLike[str],
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    local_files_only: bool | None = None,
) -> CheckpointFiles:
    """Locate the tokenizer files of ``source``.

    ``source`` is a local folder holding ``tokenizer.json``, a path to a ``tokenizer.json`` (its
    sibling files are used), a GGUF file (llama.cpp; shard 1 of a split one is read, and its
    vocabulary is rebuilt as the ``tokenizer.json`` it stands for: ``qwen_encode.gguf_tokenizer``),
    or a hub repo id (``org/name``) resolved with
    ``huggingface_hub.snapshot_download`` restricted to ``TOKENIZER_FILES``. ``revision``,
    ``cache_dir`` and ``local_files_only`` apply to hub ids only. ``HF_HUB_OFFLINE``,
    ``HF_HUB_CACHE`` and ``HF_HOME`` are read when this is called, not when huggingface_hub was
    imported; ``HF_HUB_OFFLINE`` wins over ``local_files_only=False``, and offline the files come
    from the cache only (``refs/<revision>`` -> ``snapshots/<commit>/``). Raises
    ``CheckpointError`` naming the path or repo when nothing usable is found.
    """
    _check_hub_options(revision, cache_dir, local_files_only)
    text = _source_text(source)
    path = Path(text)
    with contextlib.suppress(RuntimeError):  # "~nobody/x": no such user; reported as missing
        path = path.expanduser()
    kind = path_kind(path)
    if kind is not None:
        if revision is not None:
            # A local folder has no revisions; ignoring the argument would hand back other files
            # than the ones asked for.
            raise CheckpointError(
                f"{path}: revision={shown(revision)} applies to hub repo ids, "
                "but this is a local path"
            )
        return _resolve_local(text, path, kind)
    if isinstance(source, str) and _REPO_ID.fullmatch(source):
        return _resolve_hub(
            source, revision=revision, cache_dir=cache_dir, local_files_only=local_files_only
        )
    raise CheckpointError(
        f"{path}: no such file or folder (and not a hub repo id of the form 'org/name')"
    )


def _resolve_local(source: str, path: Path, kind: str) -> CheckpointFiles:
    if kind == FOLDER:
        tokenizer_json = path / TOKENIZER_JSON
        found = path_kind(tokenizer_json)
        if found is None:
            try:
                present = ", ".join(sorted(p.name for p in path.iterdir())[:10]) or "nothing"
            except OSError as error:
                present = f"nothing listed: {error.strerror or error}"
            raise CheckpointError(
                f"{tokenizer_json}: missing; a checkpoint folder must hold {TOKENIZER_JSON} "
                f"(found: {present})"
            )
        if found != FILE:
            raise CheckpointError(
                f"{tokenizer_json}: {found}, not a file; a checkpoint folder must hold "
                f"{TOKENIZER_JSON} as a regular file"
            )
        return CheckpointFiles.in_folder(source, path, tokenizer_json)
    if kind == FILE:
        if path.suffix.lower() == ".gguf" or _starts_with(path, b"GGUF"):
            # Imported here: the GGUF modules sit on top of this one.
            from .gguf_tokenizer import gguf_checkpoint_files

            return gguf_checkpoint_files(source, path)
        return CheckpointFiles.in_folder(source, path.parent, path)
    raise CheckpointError(f"{path}: {kind}, neither a folder nor a {TOKENIZER_JSON} file")


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(magic)) == magic
    except OSError:
        return False  # reported by whoever reads the file next, with its path


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").upper() in _TRUE


def _env_hub_cache() -> Path | None:
    """The hub cache the environment names now, or None to let huggingface_hub use its default.

    huggingface_hub reads HF_HUB_CACHE / HF_HOME once, at import (``constants``), so a variable set
    afterwards (by a test's monkeypatch, or a notebook cell) would be ignored unless passed
    explicitly as ``cache_dir``. Same precedence as the library.
    """
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        value = os.environ.get(name)
        if value:
            return Path(os.path.expandvars(value)).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(os.path.expandvars(home)).expanduser() / "hub"
    return None


def _resolve_hub(
    repo_id: str,
    *,
    revision: str | None,
    cache_dir: str | os.PathLike[str] | None,
    local_files_only: bool | None,
) -> CheckpointFiles:
    # Imported here: it costs ~0.3 s and local checkpoints never need it.
    import huggingface_hub
    import huggingface_hub.constants  # the lazy top-level module does not expose it (2.x)
    from huggingface_hub.errors import (  # their public home since 0.25; utils only re-imports them
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    # Like HF_HUB_CACHE, HF_HUB_OFFLINE is frozen into huggingface_hub.constants at import; read the
    # environment too so that offline mode set later is honoured instead of going to the network.
    offline_env = (
        _env_true("HF_HUB_OFFLINE")
        or _env_true("TRANSFORMERS_OFFLINE")
        or bool(huggingface_hub.constants.HF_HUB_OFFLINE)
    )
    offline = offline_env or bool(local_files_only)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else _env_hub_cache()
    shown_cache = cache if cache is not None else Path(huggingface_hub.constants.HF_HUB_CACHE)
    where = f"{repo_id} (revision {revision or 'main'})"
    try:
        folder = huggingface_hub.snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=cache,
            local_files_only=offline,
            allow_patterns=list(TOKENIZER_FILES),
        )
    except LocalEntryNotFoundError as error:
        if offline:
            why = "HF_HUB_OFFLINE is set" if offline_env else "local_files_only=True"
            raise CheckpointError(
                f"{where}: {why} and the tokenizer files are not in the cache at {shown_cache}; "
                f"download them once with network access (hf download {repo_id} "
                f"{' '.join(TOKENIZER_FILES)}), or pass a local folder ({error})"
            ) from error
        raise CheckpointError(
            f"{where}: the hub could not be reached and the tokenizer files are not in the cache "
            f"at {shown_cache}; check the network, or pass a local folder ({error})"
        ) from error
    except RevisionNotFoundError as error:
        raise CheckpointError(
            f"{where}: no such revision on the hub; pass an existing branch, tag or commit hash"
        ) from error
    except GatedRepoError as error:
        raise CheckpointError(
            f"{where}: gated repository; accept its terms on huggingface.co and log in "
            "(hf auth login, or set HF_TOKEN)"
        ) from error
    except RepositoryNotFoundError as error:
        raise CheckpointError(
            f"{where}: repository not found on the hub (or private: log in with hf auth login, "
            "or set HF_TOKEN)"
        ) from error
    except HFValidationError as error:
        raise CheckpointError(
            f"{repo_id!r}: no such local path, and not a valid hub repo id ({error})"
        ) from error
    except (HfHubHTTPError, OSError) as error:
        raise CheckpointError(
            f"{where}: could not fetch the tokenizer files into {shown_cache}: {error}"
        ) from error

    snapshot = Path(folder)
    tokenizer_json = snapshot / TOKENIZER_JSON
    # Offline, snapshot_download returns the cached snapshot folder without checking its content,
    # and a dangling blob symlink exists() as False: check the one file we cannot do without.
    if path_kind(tokenizer_json) != FILE:
        raise CheckpointError(
            f"{where}: {tokenizer_json} is missing from the snapshot; the repo has no "
            f"{TOKENIZER_JSON}, or the cache at {shown_cache} is incomplete"
        )
    return dataclasses.replace(
        CheckpointFiles.in_folder(repo_id, snapshot, tokenizer_json),
        from_hub=True,
        revision=revision,
    )


def file_sha256(path: Path) -> str:
    """The sha256 of a checkpoint file, read in 1 MiB blocks; ``OSError`` when it cannot be."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def derived_cache_path(kind: str, name: str) -> Path:
    """Where a result derived from checkpoint files is kept between runs (``kind``: the engine
    proofs, the dead-token check), under ``$XDG_CACHE_HOME/qwen-encode`` (``~/.cache`` when
    unset). ``name`` carries whatever the result depends on (file hashes, library versions)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qwen-encode" / kind / name
