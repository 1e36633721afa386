"""Where a command's results go: stdout, or a file that appears whole or not at all."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any

from ..conversation import surrogate_problem
from ..files import AtomicFile
from .common import UsageError

__all__ = ["AtomicOutput", "dump", "json_text"]


class AtomicOutput:
    """Where results go: stdout, or a file written under a temporary name beside its target and
    renamed over it only once complete (``commit``). Leaving the ``with`` block without a commit
    (an exception, Ctrl-C) deletes the temporary file and leaves any old target untouched."""

    def __init__(self, path: str | None) -> None:
        self.path = None if path in (None, "-") else Path(path)
        self._file: AtomicFile | None = None
        self.stream: IO[bytes]
        if self.path is None:
            self.stream = sys.stdout.buffer
            return
        folder = self.path.parent
        if self.path.is_dir():
            raise UsageError(f"cannot write {self.path}: it is a folder")
        if not folder.is_dir():
            raise UsageError(f"cannot write {self.path}: no such folder {folder}")
        try:
            self._file = AtomicFile(self.path)
        except OSError as error:
            raise UsageError(f"cannot write in {folder}: {error.strerror or error}") from None
        self.stream = self._file.stream

    def __enter__(self) -> AtomicOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            # Not committed: an error or an interrupt. Remove the partial file.
            self._file.discard()
            self._file = None

    def write(self, data: bytes) -> None:
        self.stream.write(data)

    def flush(self) -> None:
        self.stream.flush()

    def commit(self) -> None:
        if self._file is None:
            self.stream.flush()
            return
        try:
            self._file.commit()
        except OSError as error:
            raise UsageError(f"cannot write {self.path}: {error.strerror or error}") from None
        self._file = None


def dump(value: Any) -> bytes:
    """One JSON Lines record."""
    return (json_text(value) + "\n").encode("utf-8")


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON that UTF-8 can carry. ensure_ascii=False: text in any script stays
    readable. But a lone surrogate in it (a library message quoting caller text, a side file's
    ``"\\ud800"`` quoted by a report) has no UTF-8 form: then the value is written with ASCII
    escapes, ``\\udxxx`` for it, still valid JSON and saying what the input held."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    if text.isascii() or surrogate_problem(text) is None:
        return text
    return json.dumps(value, indent=indent)
