"""Files written whole or not at all: the one atomic-write helper of the package.

Every file qwen-encode writes (command output, Parquet shards, cached tokenizer files, the dead
token cache) goes through ``AtomicFile``: written under a temporary name beside its target and
renamed over it only once complete, so a reader (``--resume``, a second process sharing a cache)
sees either the old file or the whole new one, and a crash, Ctrl-C or killed worker leaves no
half file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["AtomicFile", "atomic_path", "write_atomic"]


def _plain_mode() -> int:
    """The mode ``open()`` would give a new file under the current umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


class AtomicFile:
    """A binary file written under a temporary name beside ``target``, renamed over it by
    ``commit``. Leaving the ``with`` block (or calling ``discard``) without a commit deletes the
    temporary file and leaves any old target untouched. Raises ``OSError`` when the temporary
    file cannot be created (a missing or read-only folder) or the commit fails."""

    def __init__(self, target: str | os.PathLike[str]) -> None:
        self.target = Path(target)
        # mkstemp, not a fixed name: two writers of the same target never share a temporary file.
        handle, name = tempfile.mkstemp(
            prefix=f".{self.target.name}.", suffix=".tmp", dir=self.target.parent
        )
        self.tmp = Path(name)
        self.stream: IO[bytes] = os.fdopen(handle, "wb")
        self._open = True

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def commit(self) -> None:
        """Make the file durable, then visible: fsync before the rename, so a crash right after
        cannot leave an empty file under the target's name."""
        if not self._open:
            raise ValueError(f"{self.target}: already committed or discarded")
        if not self.stream.closed:
            self.stream.flush()
            os.fsync(self.stream.fileno())
            self.stream.close()
        else:  # written by path (atomic_path): reopen to reach the data on disk
            with open(self.tmp, "rb+") as written:
                os.fsync(written.fileno())
        # mkstemp creates the file 0600; give the result the mode a plain open() would.
        os.chmod(self.tmp, _plain_mode())
        os.replace(self.tmp, self.target)
        self._open = False

    def discard(self) -> None:
        """Remove the temporary file (nothing happens after a commit)."""
        if not self._open:
            return
        self._open = False
        with contextlib.suppress(OSError):
            self.stream.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink()


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``target`` for writers that take a path (``pyarrow``), renamed
    over ``target`` when the block completes and deleted when it raises."""
    with AtomicFile(target) as file:
        file.stream.close()
        yield file.tmp
        file.commit()


def write_atomic(target: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``target`` atomically."""
    with AtomicFile(target) as file:
        file.stream.write(data)
        file.commit()
