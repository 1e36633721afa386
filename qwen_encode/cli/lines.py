"""JSON Lines in, one record out per line: the frame of the line-oriented commands.

Output line *i* answers input line *i*; a line that fails is answered in place by
``{"error": {"type", "message", "line"}}`` and every other line is still written (``Tally``
counts them for the summary on stderr and the exit code).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..batch import RecordError, error_parts
from ..json_text import JSONTextError, loads
from .common import DEFAULT_BATCH, EXIT_LINES_FAILED, EXIT_OK, PROG, UsageError, warn
from .output import AtomicOutput
from .progress import Progress
from .signals import interrupts_deferred

__all__ = ["Line", "Lines", "Tally", "error_record", "line_job", "lone_surrogate", "open_input"]


def error_record(error: BaseException, line: int) -> dict[str, Any]:
    """The record answering a line that failed."""
    kind, message = error_parts(error)
    return {"error": {"type": kind, "message": message, "line": line}}


@dataclass
class Line:
    """One input line: its 1-based number and either its parsed JSON value or why it has none."""

    number: int
    value: Any = None
    error: RecordError | None = None


def open_input(path: str) -> tuple[IO[bytes], int | None]:
    """The input as bytes, and its size when it is a regular file (for the progress bar)."""
    if path == "-":
        stream = sys.stdin.buffer
        if sys.stdin.isatty():
            print(f"{PROG}: reading JSON Lines from the terminal; end with Ctrl-D", file=sys.stderr)
        try:
            info = os.fstat(stream.fileno())
        except (OSError, ValueError):  # no descriptor: a replaced sys.stdin
            return stream, None
        return stream, info.st_size if stat.S_ISREG(info.st_mode) else None
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the caller's ExitStack
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    return stream, os.fstat(stream.fileno()).st_size


# A JSON escape of a UTF-16 surrogate (\ud800-\udfff). UTF-8 input cannot carry a surrogate
# otherwise (the decoder refuses one), so only lines matching this need the walk below.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def lone_surrogate(value: Any) -> str | None:
    """Where a lone UTF-16 surrogate is in a JSON value (``messages[1].content``), or None.

    json.loads joins an escaped pair into one character, so what is left is text that is not
    Unicode: no UTF-8 output can carry it and no tokenizer can encode it. Iterative: the value
    may be nested as deeply as json.loads allows."""
    pending: list[tuple[str, Any]] = [("", value)]
    while pending:
        path, node = pending.pop()
        if isinstance(node, str):
            found = _SURROGATE.search(node)
            if found:
                where = path or "the line's string"
                return (
                    f"{where}: a lone UTF-16 surrogate {found.group()!r} at character "
                    f"{found.start()} is not Unicode text (no UTF-8 can carry it)"
                )
        elif isinstance(node, dict):
            bad_key = next((key for key in node if _SURROGATE.search(key)), None)
            if bad_key is not None:
                where = path or "the line's object"
                return f"{where}: the key {json.dumps(bad_key)} holds a lone UTF-16 surrogate"
            for key, item in reversed(node.items()):
                step = f".{key}" if _NAME.fullmatch(key) else f"[{json.dumps(key)}]"
                pending.append((f"{path}{step}".lstrip("."), item))
        elif isinstance(node, list):
            pending.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(node))))
    return None


def read_lines(stream: IO[bytes], progress: Progress) -> Iterator[Line]:
    """Lines as JSON values. Bytes are split on b"\\n" only (a U+2028 inside a JSON string is not a
    line break) and decoded as UTF-8 whatever the locale says."""
    for number, raw in enumerate(stream, 1):
        progress.advance(len(raw))
        body = raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw
        if number == 1 and body.startswith(b"\xef\xbb\xbf"):
            body = body[3:]  # a UTF-8 byte order mark, as some editors write
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as error:
            yield Line(number, error=RecordError("UnicodeDecodeError", f"not UTF-8: {error}"))
            continue
        if not text.strip():
            # Not skipped: dropping it would shift every later answer off its line.
            yield Line(
                number, error=RecordError("EmptyLine", "empty line (expected one JSON value)")
            )
            continue
        try:
            value = loads(text)
        except JSONTextError as error:
            detail = "nested too deeply" if error.kind == "depth" else error.detail
            yield Line(number, error=RecordError("JSONDecodeError", detail))
            continue
        surrogate = lone_surrogate(value) if _SURROGATE_ESCAPE.search(text) else None
        if surrogate is not None:
            yield Line(number, error=RecordError("InvalidUnicode", surrogate))
            continue
        yield Line(number, value=value)


def chunks(lines: Iterable[Line], size: int) -> Iterator[list[Line]]:
    chunk: list[Line] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@contextlib.contextmanager
def line_job(
    args: argparse.Namespace, label: str, chunk_size: int = DEFAULT_BATCH
) -> Iterator[tuple[Iterator[list[Line]], AtomicOutput, Progress]]:
    """The shared frame of the line-oriented commands: input chunks, atomic output, progress.
    The input is opened first, so an unreadable input never creates an output file."""
    with contextlib.ExitStack() as stack:
        stream, size = open_input(args.input)
        if args.input != "-":
            stack.callback(stream.close)
        progress = Progress(label, size, not args.no_progress and sys.stderr.isatty())
        stack.callback(progress.close)
        with interrupts_deferred():
            output = stack.enter_context(AtomicOutput(args.output))
        yield chunks(read_lines(stream, progress), chunk_size), output, progress


@dataclass
class Lines:
    """How many lines, and the first few of them by number (a summary stays short however many
    millions of lines a run has)."""

    count: int = 0
    first: list[int] = field(default_factory=list)

    SHOWN = 10

    def add(self, line: int) -> None:
        self.count += 1
        if len(self.first) < self.SHOWN:
            self.first.append(line)

    def __str__(self) -> str:
        shown = ", ".join(map(str, self.first))
        more = f" and {self.count - len(self.first)} more" if self.count > len(self.first) else ""
        return f"line{'s' if self.count > 1 else ''} {shown}{more}"


@dataclass
class Tally:
    """Failed lines and ignored request fields, for the summary on stderr."""

    command: str
    total: int = 0
    failed: Lines = field(default_factory=Lines)
    ignored: dict[str, Lines] = field(default_factory=dict)

    def record(self, record: dict[str, Any], line: int) -> None:
        self.total += 1
        if "error" in record:
            self.failed.add(line)

    def ignore(self, name: str, line: int) -> None:
        self.ignored.setdefault(name, Lines()).add(line)

    def ignoring(self, line: int) -> Callable[[str], None]:
        """What ``request_options`` tells each ignored field of ``line``."""
        return lambda name: self.ignore(name, line)

    def report(self) -> int:
        for name, lines in sorted(self.ignored.items()):
            warn(
                f"{self.command}: warning: ignored request field {name!r} on {lines} "
                "(not a field of a tokenize request; it cannot change the prompt)"
            )
        if not self.failed.count:
            return EXIT_OK
        warn(
            f"{self.command}: {self.failed.count} of {self.total} lines failed "
            f"({self.failed}); their errors are reported in place"
        )
        return EXIT_LINES_FAILED
