"""``resolve_checkpoint``: local folders and files, and hub ids resolved offline from a cache built
in a temp dir (tests never touch the network: HF_HUB_OFFLINE=1 or local_files_only=True
throughout)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Imported before any test sets HF_* variables, so the tests prove they are read at call time,
# not frozen into huggingface_hub.constants at import.
import huggingface_hub
import pytest
from huggingface_hub import errors as hf_errors

import qwen_encode.checkpoint as checkpoint
from qwen_encode.checkpoint import TOKENIZER_FILES, CheckpointFiles, resolve_checkpoint
from qwen_encode.errors import CheckpointError

COMMIT = "1d4bf0f2ff6012fd82039f2fa52739d0dd7c60c0"
OTHER_COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "Qwen/Qwen3.8-27B"
HF_VARS = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No HF variable from the outer environment; the default cache points at an empty temp dir so
    a resolution that ignored our cache could never find files elsewhere."""
    for name in HF_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "default-cache"))
    return monkeypatch


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly if a local source were ever sent to the hub."""

    def refuse(*args: object, **kwargs: object) -> str:
        raise AssertionError(f"snapshot_download called with {args} {kwargs}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)


def build_cache(
    hub: Path,
    repo: str,
    snapshots: dict[str, Path],
    refs: dict[str, str],
    *,
    symlinks: bool = True,
) -> Path:
    """The hub cache layout: models--Org--Name/{refs/<ref>, blobs/<x>, snapshots/<commit>/<file>}.

    With ``symlinks`` each snapshot file links to a blob which links to the shared file (nothing
    big is copied); otherwise snapshot files are plain copies, as on systems without symlinks.
    """
    storage = hub / ("models--" + repo.replace("/", "--"))
    (storage / "refs").mkdir(parents=True)
    (storage / "blobs").mkdir()
    for ref, commit in refs.items():
        (storage / "refs" / ref).write_text(commit)
    for commit, folder in snapshots.items():
        snapshot = storage / "snapshots" / commit
        snapshot.mkdir(parents=True)
        for source in sorted(folder.iterdir()):
            if symlinks:
                blob = storage / "blobs" / hashlib.sha256(str(source).encode()).hexdigest()
                if not blob.exists():
                    blob.symlink_to(source)
                (snapshot / source.name).symlink_to(Path("..", "..", "blobs", blob.name))
            else:
                shutil.copyfile(source, snapshot / source.name)
    return storage


def assert_files_of(files: CheckpointFiles, folder: Path) -> None:
    assert files.tokenizer_json.name == "tokenizer.json"
    for attribute, name in [
        ("tokenizer_json", "tokenizer.json"),
        ("tokenizer_config", "tokenizer_config.json"),
        ("chat_template", "chat_template.jinja"),
        ("config", "config.json"),
        ("generation_config", "generation_config.json"),
    ]:
        path = getattr(files, attribute)
        if (folder / name).exists():
            assert path is not None, attribute
            assert path.read_bytes() == (folder / name).read_bytes()
        else:
            assert path is None, attribute


# --- local sources --------------------------------------------------------------------------------


def test_local_folder_has_all_five_files(qwen38_dir: Path, no_hub: None) -> None:
    files = resolve_checkpoint(str(qwen38_dir))
    assert files.source == str(qwen38_dir)
    assert files.tokenizer_json == qwen38_dir / "tokenizer.json"
    assert files.tokenizer_config == qwen38_dir / "tokenizer_config.json"
    assert files.chat_template == qwen38_dir / "chat_template.jinja"
    assert files.config == qwen38_dir / "config.json"
    assert files.generation_config == qwen38_dir / "generation_config.json"


def test_local_folder_with_optional_files_absent(qwen3_dir: Path, no_hub: None) -> None:
    files = resolve_checkpoint(qwen3_dir)  # a PathLike works as well as a str
    assert files.tokenizer_json == qwen3_dir / "tokenizer.json"
    assert files.tokenizer_config == qwen3_dir / "tokenizer_config.json"
    assert (files.chat_template, files.config, files.generation_config) == (None, None, None)


def test_tokenizer_json_path_uses_its_siblings(qwen38_dir: Path, no_hub: None) -> None:
    files = resolve_checkpoint(str(qwen38_dir / "tokenizer.json"))
    assert files.tokenizer_json == qwen38_dir / "tokenizer.json"
    assert_files_of(files, qwen38_dir)


def test_relative_folder(
    qwen38_dir: Path, no_hub: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "ckpt").symlink_to(qwen38_dir)
    monkeypatch.chdir(tmp_path)
    files = resolve_checkpoint("./ckpt")
    assert_files_of(files, qwen38_dir)


@pytest.mark.parametrize("kind", ["relative", "absolute", "home-relative"])
def test_missing_path_is_an_error_naming_it(
    kind: str, tmp_path: Path, no_hub: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    source = {
        "relative": "./missing",
        "absolute": str(tmp_path / "missing"),
        "home-relative": "~/missing/../x/y",
    }[kind]
    with pytest.raises(CheckpointError, match="no such file or folder") as raised:
        resolve_checkpoint(source)
    assert str(Path(source).expanduser()) in str(raised.value)
    assert isinstance(raised.value, OSError)


def test_folder_without_tokenizer_json(tmp_path: Path, no_hub: None) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError) as raised:
        resolve_checkpoint(tmp_path)
    message = str(raised.value)
    assert f"{tmp_path / 'tokenizer.json'}: missing" in message
    assert "found: config.json" in message


def test_revision_with_a_local_path_is_refused(qwen38_dir: Path, no_hub: None) -> None:
    with pytest.raises(CheckpointError, match="revision='v1' applies to hub repo ids"):
        resolve_checkpoint(qwen38_dir, revision="v1")


# --- sources that are not a usable path --------------------------------------------------------


@pytest.mark.parametrize("source", ["", "   "], ids=["empty", "blank"])
def test_empty_source_is_an_error_not_the_current_directory(
    source: str, tmp_path: Path, no_hub: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The working directory holds a loadable checkpoint: "" must not resolve to it.
    (tmp_path / "tokenizer.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match="found the empty string"):
        resolve_checkpoint(source)


def test_empty_source_through_the_encoder(no_hub: None) -> None:
    from qwen_encode.encoder import Encoder

    with pytest.raises(CheckpointError, match="found the empty string"):
        Encoder.from_pretrained("")


@pytest.mark.parametrize("source", [None, 5, 1.5, ["a/b"], object()])
def test_source_of_the_wrong_type_is_a_typed_error(source: object, no_hub: None) -> None:
    with pytest.raises(CheckpointError) as raised:
        resolve_checkpoint(source)  # type: ignore[arg-type]
    assert f"found {type(source).__name__}" in str(raised.value)


@pytest.mark.parametrize("source", ["a\0b", "\ud800", "x" * 5000], ids=["nul", "surrogate", "long"])
def test_source_that_no_file_system_accepts(source: str, no_hub: None) -> None:
    with pytest.raises(CheckpointError):
        resolve_checkpoint(source)


def _tiny_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    shutil.copytree(Path(__file__).resolve().parent.parent / "fixtures" / "qwen3.8-tiny", folder)
    return folder


def _replace_with(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(path.parent / "nowhere")


_KINDS = {
    "folder": "a folder",
    "fifo": "a FIFO (named pipe)",
    "broken-link": "a broken symbolic link",
}


@pytest.fixture
def unblocker() -> Iterator[Callable[[Path], None]]:
    """A FIFO opened for reading blocks until a writer comes. Should resolution ever open one, this
    writer (after 10 s) turns the hang into a wrong answer the test reports."""
    stop = threading.Event()
    fifos: list[Path] = []

    def watch() -> None:
        if stop.wait(10):
            return
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    yield fifos.append
    stop.set()
    thread.join()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize("kind", list(_KINDS))
def test_tokenizer_json_that_is_not_a_file(
    kind: str, tmp_path: Path, no_hub: None, unblocker: Callable[[Path], None]
) -> None:
    folder = _tiny_folder(tmp_path)
    target = folder / "tokenizer.json"
    _replace_with(target, kind)
    unblocker(target)
    # A folder named tokenizer.json, given itself, is a checkpoint folder (missing its file).
    for source in (folder,) if kind == "folder" else (folder, target):
        with pytest.raises(CheckpointError) as raised:
            resolve_checkpoint(source)
        assert str(raised.value).startswith(f"{target}: {_KINDS[kind]}, ")
        assert "found:" not in str(raised.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize("kind", list(_KINDS))
@pytest.mark.parametrize("name", ["tokenizer_config.json", "chat_template.jinja", "config.json"])
def test_side_file_that_is_not_a_file_is_not_taken_for_absent(
    name: str, kind: str, tmp_path: Path, no_hub: None, unblocker: Callable[[Path], None]
) -> None:
    folder = _tiny_folder(tmp_path)
    _replace_with(folder / name, kind)
    unblocker(folder / name)
    with pytest.raises(CheckpointError) as raised:
        resolve_checkpoint(folder)
    assert str(raised.value).startswith(f"{folder / name}: {_KINDS[kind]}, not a file")


def _deny(monkeypatch: pytest.MonkeyPatch, below: Path) -> None:
    """Simulate a folder with mode 000 for a root test run (root passes every permission check):
    stat of anything inside it fails as it would for another user."""
    real_stat = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if Path(os.fspath(path)).parent == below:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)


def test_unsearchable_folder_simulated(
    tmp_path: Path, no_hub: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _tiny_folder(tmp_path)
    _deny(monkeypatch, folder)
    with pytest.raises(CheckpointError) as raised:
        resolve_checkpoint(folder)
    assert str(raised.value).startswith(f"{folder / 'tokenizer.json'}: cannot be read (permission")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads mode 000")
def test_unsearchable_folder(tmp_path: Path, no_hub: None) -> None:
    folder = _tiny_folder(tmp_path)
    folder.chmod(0)
    try:
        with pytest.raises(CheckpointError, match="permission denied"):
            resolve_checkpoint(folder)
    finally:
        folder.chmod(0o755)


# --- hub ids, offline, from a cache ---------------------------------------------------------------


@pytest.mark.parametrize("symlinks", [True, False], ids=["blob-symlinks", "plain-files"])
def test_hub_id_offline_from_hf_home(
    symlinks: bool, qwen38_dir: Path, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = tmp_path / "hf-home"
    build_cache(home / "hub", REPO, {COMMIT: qwen38_dir}, {"main": COMMIT}, symlinks=symlinks)
    clean_env.setenv("HF_HUB_OFFLINE", "1")
    clean_env.setenv("HF_HOME", str(home))
    files = resolve_checkpoint(REPO)
    assert files.source == REPO
    assert files.tokenizer_json.parent.name == COMMIT
    assert files.tokenizer_json.is_relative_to(home)
    assert_files_of(files, qwen38_dir)


def test_hub_id_offline_from_hf_hub_cache(
    qwen38_dir: Path, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    build_cache(tmp_path / "cache", REPO, {COMMIT: qwen38_dir}, {"main": COMMIT})
    clean_env.setenv("HF_HUB_OFFLINE", "true")
    clean_env.setenv("HF_HOME", str(tmp_path / "elsewhere"))  # HF_HUB_CACHE takes precedence
    clean_env.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    files = resolve_checkpoint(REPO)
    assert files.tokenizer_json.is_relative_to(tmp_path / "cache")
    assert_files_of(files, qwen38_dir)


def test_cache_dir_argument_and_local_files_only(
    qwen38_dir: Path, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    build_cache(tmp_path / "mine", REPO, {COMMIT: qwen38_dir}, {"main": COMMIT})
    clean_env.setenv("HF_HOME", str(tmp_path / "elsewhere"))  # cache_dir takes precedence
    files = resolve_checkpoint(REPO, cache_dir=tmp_path / "mine", local_files_only=True)
    assert files.tokenizer_json.is_relative_to(tmp_path / "mine")
    assert_files_of(files, qwen38_dir)


def test_revision_selects_the_snapshot(
    qwen38_dir: Path, qwen3_dir: Path, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    build_cache(
        tmp_path / "hub",
        REPO,
        {COMMIT: qwen38_dir, OTHER_COMMIT: qwen3_dir},
        {"main": COMMIT, "v1": OTHER_COMMIT},
    )
    clean_env.setenv("HF_HUB_OFFLINE", "1")
    clean_env.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert_files_of(resolve_checkpoint(REPO), qwen38_dir)
    assert_files_of(resolve_checkpoint(REPO, revision="v1"), qwen3_dir)  # a tag, through refs/
    assert_files_of(resolve_checkpoint(REPO, revision=OTHER_COMMIT), qwen3_dir)  # a commit hash


def test_snapshot_download_asks_for_the_tokenizer_files_only(
    qwen38_dir: Path, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    build_cache(tmp_path / "hub", REPO, {COMMIT: qwen38_dir}, {"main": COMMIT})
    clean_env.setenv("HF_HUB_OFFLINE", "1")
    clean_env.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    calls: list[dict[str, object]] = []
    real = huggingface_hub.snapshot_download

    def spy(repo_id: str, **kwargs: object) -> str:
        calls.append({"repo_id": repo_id, **kwargs})
        return real(repo_id, **kwargs)  # type: ignore[arg-type]

    clean_env.setattr(huggingface_hub, "snapshot_download", spy)
    resolve_checkpoint(REPO, revision="main")
    assert calls == [
        {
            "repo_id": REPO,
            "revision": "main",
            "cache_dir": tmp_path / "hub",
            "local_files_only": True,
            "allow_patterns": list(TOKENIZER_FILES),
        }
    ]
    assert sorted(TOKENIZER_FILES) == sorted(
        [
            "tokenizer.json",
            "tokenizer_config.json",
            "chat_template.jinja",
            "config.json",
            "generation_config.json",
        ]
    )


def test_offline_and_not_cached(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("HF_HUB_OFFLINE", "1")
    clean_env.setenv("HF_HOME", str(tmp_path / "home"))
    with pytest.raises(CheckpointError) as raised:
        resolve_checkpoint("Org/Absent")
    message = str(raised.value)
    assert message.startswith("Org/Absent (revision main): HF_HUB_OFFLINE is set")
    assert f"not in the cache at {tmp_path / 'home' / 'hub'}" in message
    assert "hf download Org/Absent tokenizer.json" in message


def test_local_files_only_and_not_cached(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as raised:
        resolve_checkpoint("Org/Absent", cache_dir=tmp_path / "c", local_files_only=True)
    message = str(raised.value)
    assert message.startswith("Org/Absent (revision main): local_files_only=True and")
    assert f"not in the cache at {tmp_path / 'c'}" in message


def test_offline_unknown_revision(
    qwen38_dir: Path, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    build_cache(tmp_path / "hub", REPO, {COMMIT: qwen38_dir}, {"main": COMMIT})
    clean_env.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError) as raised:
        resolve_checkpoint(REPO, revision="v9", cache_dir=tmp_path / "hub")
    message = str(raised.value)
    assert message.startswith(f"{REPO} (revision v9): HF_HUB_OFFLINE is set")
    assert str(tmp_path / "hub") in message


@pytest.mark.parametrize("symlinks", [True, False], ids=["blob-symlinks", "plain-files"])
def test_cached_snapshot_without_tokenizer_json(
    symlinks: bool, qwen38_dir: Path, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    storage = build_cache(
        tmp_path / "hub", REPO, {COMMIT: qwen38_dir}, {"main": COMMIT}, symlinks=symlinks
    )
    (storage / "snapshots" / COMMIT / "tokenizer.json").unlink()
    clean_env.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError) as raised:
        resolve_checkpoint(REPO, cache_dir=tmp_path / "hub")
    assert str(storage / "snapshots" / COMMIT / "tokenizer.json") in str(raised.value)
    assert "missing from the snapshot" in str(raised.value)


def _http_error(cls: type[Exception], message: str) -> Exception:
    response = types.SimpleNamespace(headers={}, request=None)
    return cls(message, response=response)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            lambda: _http_error(hf_errors.RepositoryNotFoundError, "404"),
            "Org/Name (revision main): repository not found on the hub",
        ),
        (
            lambda: _http_error(hf_errors.GatedRepoError, "403"),
            "Org/Name (revision main): gated repository",
        ),
        (
            lambda: _http_error(hf_errors.RevisionNotFoundError, "404"),
            "Org/Name (revision main): no such revision on the hub",
        ),
        (
            lambda: hf_errors.LocalEntryNotFoundError("connection refused"),
            "Org/Name (revision main): the hub could not be reached",
        ),
        (
            lambda: hf_errors.HFValidationError("bad id"),
            "'Org/Name': no such local path, and not a valid hub repo id",
        ),
        (
            lambda: _http_error(hf_errors.HfHubHTTPError, "500 Server Error"),
            "Org/Name (revision main): could not fetch the tokenizer files",
        ),
    ],
    ids=["repo-not-found", "gated", "revision-not-found", "unreachable", "invalid-id", "http"],
)
def test_hub_errors_become_checkpoint_errors(
    error: object, expected: str, clean_env: pytest.MonkeyPatch
) -> None:
    def fail(*args: object, **kwargs: object) -> str:
        raise error()  # type: ignore[operator]

    clean_env.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(CheckpointError) as raised:
        resolve_checkpoint("Org/Name")
    assert str(raised.value).startswith(expected)
    assert raised.value.__cause__ is not None


def test_repo_id_shape() -> None:
    shaped = checkpoint._REPO_ID.fullmatch
    assert shaped("Qwen/Qwen3.8-27B")
    assert shaped("org_1/name.v2")
    for text in ("./x/y", "/abs/x", "~/x", ".hidden/x", "a/b/c", "single", "a/", "/b"):
        assert not shaped(text), text


def test_hub_resolution_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """In this test process huggingface_hub.constants is already imported, which hid a bug:
    huggingface_hub 2.x's lazy top-level module does not expose ``constants`` by itself."""
    import os
    import subprocess
    import sys

    code = (
        "from qwen_encode.checkpoint import resolve_checkpoint\n"
        "from qwen_encode.errors import CheckpointError\n"
        "try:\n"
        f"    resolve_checkpoint('Org/Absent', cache_dir={str(tmp_path)!r},\n"
        "                       local_files_only=True)\n"
        "except CheckpointError as error:\n"
        "    print('CheckpointError', error)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("CheckpointError Org/Absent (revision main)")
