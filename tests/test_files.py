"""qwen_encode.files: a file written through it is, on disk, the old one or the whole new one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qwen_encode.files import AtomicFile, atomic_path, write_atomic


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_commit_replaces_the_target_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")
    with AtomicFile(target) as file:
        file.stream.write(b"new 1\n")
        file.stream.flush()
        assert target.read_bytes() == b"old\n"  # nothing visible before the commit
        file.stream.write(b"new 2\n")
        file.commit()
    assert target.read_bytes() == b"new 1\nnew 2\n"
    assert _leftovers(tmp_path) == []


def test_leaving_without_commit_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")
    with pytest.raises(KeyboardInterrupt), AtomicFile(target) as file:
        file.stream.write(b"half")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old\n"
    assert _leftovers(tmp_path) == []


def test_the_file_gets_the_mode_open_would_give(tmp_path: Path) -> None:
    # mkstemp creates 0600; a result only its writer can read would surprise every other user.
    previous = os.umask(0o027)
    try:
        write_atomic(tmp_path / "a.json", b"{}")
        (tmp_path / "b.json").write_bytes(b"{}")
    finally:
        os.umask(previous)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == (
        tmp_path / "b.json"
    ).stat().st_mode & 0o777
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o640


def test_a_path_writer_commits_on_success_only(tmp_path: Path) -> None:
    target = tmp_path / "shard.parquet"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp != target
        tmp.write_bytes(b"rows")
    assert target.read_bytes() == b"rows"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("the writer failed")
    assert target.read_bytes() == b"rows"
    assert _leftovers(tmp_path) == []


def test_a_commit_happens_once(tmp_path: Path) -> None:
    with AtomicFile(tmp_path / "x") as file:
        file.commit()
        with pytest.raises(ValueError, match="already committed"):
            file.commit()


def test_a_missing_folder_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        AtomicFile(tmp_path / "missing" / "out.jsonl")
