"""The ``qwen-encode`` command: encode, render, validate and parse, line for line.

Every line-oriented command follows one discipline, so a pipeline can trust its output: output
line *i* answers input line *i*; a line that fails is answered in place by
``{"error": {"type", "message", "line"}}`` and every other line is still written; the exit code
is 1 when any line failed (with a summary on stderr), 2 for usage errors (bad options, an input
file or checkpoint that cannot be opened, a closed stdin or stdout), 0 otherwise; 130, 143 and
129 after SIGINT, SIGTERM and SIGHUP, 141 when the reader of stdout goes away. Output files are
written to a temporary file beside the target and renamed into place, so a crash, Ctrl-C, SIGTERM
or SIGHUP never leaves half a file.

Run ``qwen-encode COMMAND --help`` for each command, or ``python -m qwen_encode.cli``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import re
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .data import TEMPLATE_KWARGS, json_type, request_options
from .errors import CheckpointError, PromptError, QwenEncodeError, VocabularyError, shown

if TYPE_CHECKING:  # the heavy modules (numpy, tokenizers) load only for commands that need them
    from .encoder import Encoder, Encoding
    from .protocol import Prompt

__all__ = ["main"]

PROG = "qwen-encode"
DEFAULT_MODEL = "Qwen/Qwen3.8-27B"
TINY_FIXTURE = "fixtures/qwen3.8-tiny"
DEFAULT_BATCH = 1024

EXIT_OK = 0
EXIT_LINES_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what `tool | head` gives for other Unix tools
# SIGTERM and SIGHUP exit with 128 + their number too (143, 129), after the same cleanup as Ctrl-C.

# The signals that end a run and after which no temporary output may remain. SIGINT already
# raises KeyboardInterrupt; the others are given a handler that raises Terminated (POSIX only).
_TERMINATING = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


# --------------------------------------------------------------------------------------------
# Errors


class UsageError(Exception):
    """Bad options, or an input, output or checkpoint that cannot be used: exit 2."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived. A BaseException, like KeyboardInterrupt, so that no per-line
    ``except Exception`` takes it for a bad line, and every ``with`` block unwinds: the temporary
    output file is removed and an old output stays as it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    # Once the run is ending, a second signal must not interrupt the cleanup that removes the
    # temporary file; it stays pending and dies with the process.
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, set(_TERMINATING))
    raise Terminated(signum)


@contextlib.contextmanager
def _termination_handled() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Terminated while a command runs (and the previous handlers come
    back after, for a caller running main() in its own process)."""
    previous: dict[int, Any] = {}
    for signum in _TERMINATING:
        # A signal the caller ignores stays ignored (nohup sets SIGHUP to SIG_IGN).
        if signum != signal.SIGINT and signal.getsignal(signum) is signal.SIG_DFL:
            try:
                previous[signum] = signal.signal(signum, _raise_terminated)
            except ValueError:  # main() called outside the main thread: signals are not ours
                break
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class LineError(Exception):
    """One input line that cannot be answered; reported in place, the run goes on."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


def _error_record(error: BaseException, line: int) -> dict[str, Any]:
    if isinstance(error, LineError):
        kind, message = error.kind, error.message
    elif isinstance(error, QwenEncodeError):
        kind, message = type(error).__name__, str(error)
    else:
        # Not an error raised on purpose: a bug met on this line. It is answered in place like
        # any bad line (the others are still answered), but named for what it is.
        kind = type(error).__name__
        message = f"{error} (unexpected {kind} inside qwen-encode: please report it)"
    return {"error": {"type": kind, "message": message, "line": line}}


# --------------------------------------------------------------------------------------------
# Input


@dataclass
class Line:
    """One input line: its 1-based number and either its parsed JSON value or why it has none."""

    number: int
    value: Any = None
    error: LineError | None = None


def _open_input(path: str) -> tuple[IO[bytes], int | None]:
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


def _lone_surrogate(value: Any) -> str | None:
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


def _read_lines(stream: IO[bytes], progress: Progress) -> Iterator[Line]:
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
            yield Line(number, error=LineError("UnicodeDecodeError", f"not UTF-8: {error}"))
            continue
        if not text.strip():
            # Not skipped: dropping it would shift every later answer off its line.
            yield Line(number, error=LineError("EmptyLine", "empty line (expected one JSON value)"))
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            yield Line(number, error=LineError("JSONDecodeError", str(error)))
            continue
        except RecursionError:
            yield Line(number, error=LineError("JSONDecodeError", "nested too deeply"))
            continue
        except ValueError as error:  # an integer past Python's 4300-digit conversion limit
            yield Line(number, error=LineError("JSONDecodeError", str(error)))
            continue
        surrogate = _lone_surrogate(value) if _SURROGATE_ESCAPE.search(text) else None
        if surrogate is not None:
            yield Line(number, error=LineError("InvalidUnicode", surrogate))
            continue
        yield Line(number, value=value)


def _chunks(lines: Iterable[Line], size: int) -> Iterator[list[Line]]:
    chunk: list[Line] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@contextlib.contextmanager
def _line_job(
    args: argparse.Namespace, label: str, chunk_size: int = DEFAULT_BATCH
) -> Iterator[tuple[Iterator[list[Line]], AtomicOutput, Progress]]:
    """The shared frame of the line-oriented commands: input chunks, atomic output, progress.
    The input is opened first, so an unreadable input never creates an output file."""
    with contextlib.ExitStack() as stack:
        stream, size = _open_input(args.input)
        if args.input != "-":
            stack.callback(stream.close)
        progress = Progress(label, size, not args.no_progress and sys.stderr.isatty())
        stack.callback(progress.close)
        with _interrupts_deferred():
            output = stack.enter_context(AtomicOutput(args.output))
        yield _chunks(_read_lines(stream, progress), chunk_size), output, progress


# --------------------------------------------------------------------------------------------
# Output


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP back while the temporary output file is created and its
    cleanup registered: a signal between the two would leave the file behind (seen under load in
    the Ctrl-C test). The held signal is delivered (KeyboardInterrupt, Terminated) right after."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no way to defer; the window is tiny
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(_TERMINATING))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class AtomicOutput:
    """Where results go: stdout, or a file written under a temporary name beside its target and
    renamed over it only once complete (``commit``). Leaving the ``with`` block without a commit
    (an exception, Ctrl-C) deletes the temporary file and leaves any old target untouched."""

    def __init__(self, path: str | None) -> None:
        self.path = None if path in (None, "-") else Path(path)
        self._tmp: Path | None = None
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
            handle, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=folder)
        except OSError as error:
            raise UsageError(f"cannot write in {folder}: {error.strerror or error}") from None
        self._tmp = Path(name)
        self.stream = os.fdopen(handle, "wb")

    def __enter__(self) -> AtomicOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            # Not committed: an error or an interrupt. Remove the partial file.
            with contextlib.suppress(OSError):
                self.stream.close()
            with contextlib.suppress(OSError):
                self._tmp.unlink()
            self._tmp = None

    def write(self, data: bytes) -> None:
        self.stream.write(data)

    def flush(self) -> None:
        self.stream.flush()

    def commit(self) -> None:
        if self._tmp is None:
            self.stream.flush()
            return
        assert self.path is not None
        try:
            self.stream.flush()
            os.fsync(self.stream.fileno())  # on disk before the rename makes it visible
            self.stream.close()
            # mkstemp creates the file 0600; give the result the mode a plain open() would.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self._tmp, 0o666 & ~umask)
            os.replace(self._tmp, self.path)
        except OSError as error:
            raise UsageError(f"cannot write {self.path}: {error.strerror or error}") from None
        self._tmp = None


def _dump(value: Any) -> bytes:
    # ensure_ascii=False: prompts in any script stay readable; the bytes are always UTF-8.
    try:
        return (json.dumps(value, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate got into a record (a library message quoting caller text): escaped
        # as \udxxx, the line stays valid JSON and valid UTF-8, and says what the input held.
        return (json.dumps(value) + "\n").encode("ascii")


# --------------------------------------------------------------------------------------------
# Progress and reporting


class Progress:
    """Progress on stderr, drawn by tqdm: only on a terminal, and only once a run has lasted
    half a second (a short run prints nothing). The bar counts input bytes when the size is
    known (``advance``); rows/s and tokens/s stand beside it (``lines_done``)."""

    def __init__(self, label: str, total: int | None, enabled: bool, unit: str = "B") -> None:
        from tqdm import tqdm

        self.rows = 0
        self.tokens = 0
        self.unit = unit
        self.bar = tqdm(
            total=total or None,
            desc=label,
            unit=unit,
            unit_scale=unit == "B",
            disable=not enabled,
            delay=0.5,
            leave=False,
            file=sys.stderr,
            dynamic_ncols=True,
        )

    def advance(self, size: int) -> None:
        self.bar.update(size)

    def lines_done(self, count: int, tokens: int = 0) -> None:
        self.rows += count
        self.tokens += tokens
        elapsed = max(self.bar.format_dict.get("elapsed", 0.0), 1e-9)
        rates = f"{self.rows:,} rows, {self.rows / elapsed:,.0f} rows/s"
        if self.tokens:
            rates += f", {self.tokens / elapsed:,.0f} tokens/s"
        self.bar.set_postfix_str(rates, refresh=False)
        if self.unit == "rows":  # counting rows: the rows are the bar
            self.bar.update(count)

    def close(self) -> None:
        self.bar.close()


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

    def report(self) -> int:
        for name, lines in sorted(self.ignored.items()):
            _warn(
                f"{self.command}: warning: ignored request field {name!r} on {lines} "
                "(not a field of a tokenize request; it cannot change the prompt)"
            )
        if not self.failed.count:
            return EXIT_OK
        _warn(
            f"{self.command}: {self.failed.count} of {self.total} lines failed "
            f"({self.failed}); their errors are reported in place"
        )
        return EXIT_LINES_FAILED


def _warn(message: str) -> None:
    print(f"{PROG} {message}", file=sys.stderr)


# --------------------------------------------------------------------------------------------
# Requests -> prompts


@dataclass(frozen=True)
class Request:
    prompt: Prompt
    token_strs: bool


def _request(value: Any, line: int, tally: Tally | None) -> Request:
    """A vLLM tokenize chat request (one JSON object) -> its prompt. Raises LineError for a
    request of the wrong shape, PromptError for a conversation the protocol cannot render."""
    from .protocol import format_prompt

    try:
        options = request_options(
            value, None if tally is None else (lambda name: tally.ignore(name, line))
        )
    except PromptError as error:
        raise LineError("RequestError", error.reason) from None
    token_strs = value.get("return_token_strs")
    if token_strs is not None and not isinstance(token_strs, bool):
        raise LineError(
            "RequestError", f"return_token_strs must be a bool, got {shown(token_strs)}"
        )

    prompt = format_prompt(**options)
    return Request(prompt, bool(token_strs))


# --------------------------------------------------------------------------------------------
# Checkpoints


def _load_encoder(source: str, markers_in_text: str = "literal") -> Encoder:
    from .encoder import Encoder

    try:
        return Encoder.from_pretrained(source, markers_in_text=markers_in_text)  # type: ignore[arg-type]
    except (CheckpointError, VocabularyError) as error:
        raise UsageError(_model_message(source, error)) from None
    except Exception as error:  # a library failure while loading: still a message, no traceback
        raise UsageError(_model_message(source, f"{type(error).__name__}: {error}")) from None


def _model_message(source: str, error: Exception | str) -> str:
    hint = (
        f"pass --model {TINY_FIXTURE} (the bundled demo vocabulary; its IDs differ from the "
        f"real model's), --model {DEFAULT_MODEL} once its tokenizer files are in the hub cache, "
        "or --model with a local checkpoint folder"
    )
    return f"cannot use --model {source}: {error}\nhint: {hint}"


# --------------------------------------------------------------------------------------------
# encode


def _encode_all(encoder: Encoder, prompts: Sequence[Prompt]) -> list[Encoding | Exception]:
    """One parallel batch call; a prompt refused by markers_in_text="reject" comes back as its
    error, in place, and the others are still encoded."""
    return list(encoder.encode_batch(prompts, errors="return")) if prompts else []


def _encode_one(encoder: Encoder, prompt: Prompt) -> Encoding | Exception:
    try:
        return _encode_all(encoder, [prompt])[0]
    except Exception as error:
        return error


def _encode_chunk(
    encoder: Encoder, chunk: list[Line], tally: Tally
) -> list[tuple[int, dict[str, Any] | None, Encoding | None, bool]]:
    """(line, error record or None, encoding or None, token_strs) for each line of a chunk."""
    requests: list[Request | None] = []
    errors: list[dict[str, Any] | None] = []
    for line in chunk:
        if line.error is not None:
            requests.append(None)
            errors.append(_error_record(line.error, line.number))
            continue
        try:
            requests.append(_request(line.value, line.number, tally))
            errors.append(None)
        except Exception as error:  # any bad input is reported in place, never a traceback
            requests.append(None)
            errors.append(_error_record(error, line.number))
    good = [r for r in requests if r is not None]
    try:
        outcomes = _encode_all(encoder, [r.prompt for r in good])
    except Exception:
        # errors="return" answers refused prompts in place; anything else the batch raises is a
        # bug met on some line. Encode one by one, so only the lines that meet it fail (each
        # with the error's type) and every other line of the chunk is still answered.
        outcomes = [_encode_one(encoder, r.prompt) for r in good]
    encoded = iter(outcomes)
    results = []
    for line, request, error in zip(chunk, requests, errors, strict=True):
        if request is None:
            results.append((line.number, error, None, False))
            continue
        outcome = next(encoded)
        if isinstance(outcome, Exception):
            results.append((line.number, _error_record(outcome, line.number), None, False))
        else:
            results.append((line.number, None, outcome, request.token_strs))
    return results


def _is_parquet(path: str) -> bool:
    return path != "-" and (path.endswith(".parquet") or Path(path).is_dir())


def cmd_encode(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    if args.num_proc is not None and args.num_proc < 1:
        raise UsageError("--num-proc must be at least 1")
    parquet_in = _is_parquet(args.input)
    if args.format == "parquet" or parquet_in:
        return _encode_parquet(args, parquet_in)
    for option, given in (
        ("--num-proc", args.num_proc),
        ("--ray", args.ray),
        ("--resume", args.resume or None),
        ("--drop-errors", args.drop_errors or None),
    ):
        if given is not None:
            raise UsageError(f"{option} applies to --format parquet")
    if args.format == "npz" and args.output in (None, "-") and sys.stdout.isatty():
        raise UsageError("--format npz writes binary data: pass -o FILE.npz (or redirect stdout)")
    encoder = _load_encoder(args.model, args.markers_in_text)
    tally = Tally("encode")
    rows: list[Encoding] = []
    row_lines: list[int] = []
    with _line_job(args, "encode", args.batch_size) as (chunks, output, progress):
        for chunk in chunks:
            for number, error, encoding, token_strs in _encode_chunk(encoder, chunk, tally):
                if error is not None:
                    record = error
                else:
                    assert encoding is not None
                    record = _encoding_record(encoder, encoding, args.assistant_mask, token_strs)
                tally.record(record, number)
                if args.format == "jsonl":
                    output.write(_dump(record))
                elif error is not None:
                    # An npz has no row for a failed line: say which, here, line by line.
                    e = error["error"]
                    _warn(f"encode: line {number}: {e['type']}: {e['message']}")
                else:
                    assert encoding is not None
                    rows.append(encoding)
                    row_lines.append(number)
            progress.lines_done(len(chunk))
            if args.format == "jsonl":
                output.flush()
        if args.format == "npz":
            _write_npz(output, encoder, rows, row_lines)
        output.commit()
    return tally.report()


def _encode_parquet(args: argparse.Namespace, parquet_in: bool) -> int:
    """Parquet out (from Parquet or JSON Lines in): the work is qwen_encode.data's; this parses
    options, shows progress and prints the summary."""
    import importlib.util

    from . import data

    if importlib.util.find_spec("pyarrow") is None:
        raise UsageError("--format parquet needs pyarrow: pip install 'qwen-encode[data]'")
    if args.format != "parquet":
        raise UsageError("Parquet input is written as Parquet: pass --format parquet")
    if args.output in (None, "-"):
        raise UsageError("--format parquet writes files: pass -o FILE.parquet (or -o FOLDER)")
    if not parquet_in and (args.num_proc is not None or args.ray is not None or args.resume):
        raise UsageError("--num-proc, --ray and --resume read Parquet input (a file or a folder)")
    if args.ray is not None and args.resume:
        # Ray's write_parquet names its files by task, not by input shard, so no output file
        # stands for a finished input shard; the folder is staged and appears whole instead.
        raise UsageError(
            "--resume does not apply to --ray: a Ray run writes its output folder whole (staged, "
            "renamed at the end), so there are no finished shards to skip; rerun without "
            "--resume, or use --num-proc N, which writes and resumes shard by shard"
        )
    encoder = _load_encoder(args.model, args.markers_in_text)
    started = time.monotonic()
    enabled = not args.no_progress and sys.stderr.isatty()
    try:
        if not parquet_in:
            summary = _jsonl_to_parquet(args, encoder)
        elif args.ray is not None:
            summary = data.encode_ray(
                encoder,
                args.input,
                args.output,
                columns=args.columns,
                drop_errors=args.drop_errors,
                batch_size=args.batch_size,
                address=None if args.ray == "local" else args.ray,
            )
        else:
            if args.num_proc is not None and args.num_proc > 1:
                import datasets

                datasets.disable_progress_bars()  # ours counts rows and tokens over all shards
            progress = Progress("encode", data.count_rows(args.input), enabled, unit="rows")
            try:
                summary = data.encode_parquet(
                    encoder,
                    args.input,
                    args.output,
                    num_proc=args.num_proc,
                    columns=args.columns,
                    drop_errors=args.drop_errors,
                    resume=args.resume,
                    batch_size=args.batch_size,
                    progress=lambda part: progress.lines_done(part.rows, part.tokens),
                )
            finally:
                progress.close()
    except PromptError as error:  # an input or output path that cannot be used
        raise UsageError(str(error)) from None
    _report_summary(summary, time.monotonic() - started)
    return EXIT_LINES_FAILED if summary.error_rows else EXIT_OK


def _jsonl_to_parquet(args: argparse.Namespace, encoder: Encoder) -> Any:
    import pyarrow.parquet as pq

    from . import data

    total = data.Summary()
    with _line_job(args, "encode", args.batch_size) as (chunks, output, progress):
        writer = None
        for chunk in chunks:
            requests = [line.value if line.error is None else line.error for line in chunk]
            table = data.encode_requests(encoder, requests, args.columns)
            part = data.summarize(table)
            if writer is None:
                writer = pq.ParquetWriter(output.stream, table.schema)
            writer.write_table(data.kept_rows(table, args.drop_errors))
            total += part
            progress.lines_done(part.rows, part.tokens)
        if writer is None:
            writer = pq.ParquetWriter(
                output.stream, data.encode_requests(encoder, [], args.columns).schema
            )
        writer.close()
        output.commit()
    if args.drop_errors:
        total = dataclasses.replace(total, dropped=total.error_rows)
    return dataclasses.replace(total, shards_written=1)


def _report_summary(summary: Any, seconds: float) -> None:
    kinds = ", ".join(f"{kind} {count:,}" for kind, count in sorted(summary.errors.items()))
    errors = f"{summary.error_rows:,} error rows" + (f" ({kinds})" if kinds else "")
    if summary.dropped:
        errors += f", {summary.dropped:,} dropped (--drop-errors)"
    shards = f"{summary.shards_written:,} shards written"
    if summary.shards_skipped:
        shards += f", {summary.shards_skipped:,} skipped (--resume)"
    rate = summary.tokens / seconds if seconds > 0 else 0.0
    _warn(
        f"encode: {summary.rows:,} rows, {summary.tokens:,} tokens, {errors}; {shards}; "
        f"{seconds:.1f} s ({rate:,.0f} tokens/s)"
    )


def _encoding_record(
    encoder: Encoder, encoding: Encoding, assistant_mask: bool, token_strs: bool
) -> dict[str, Any]:
    ids = encoding.input_ids.tolist()
    record: dict[str, Any] = {"input_ids": ids, "num_tokens": len(ids)}
    if assistant_mask:
        record["assistant_mask"] = encoding.assistant_mask.astype("int8").tolist()
    if token_strs:
        to_token = encoder.vocabulary.tokenizer.id_to_token
        record["token_strs"] = [to_token(i) for i in ids]
    return record


def _write_npz(
    output: AtomicOutput, encoder: Encoder, rows: list[Encoding], row_lines: list[int]
) -> None:
    import numpy as np

    padded = encoder.pad(rows, side="right")
    buffer = io.BytesIO()  # zip needs a seekable file; stdout may be a pipe
    np.savez_compressed(
        buffer,
        input_ids=padded["input_ids"],
        attention_mask=padded["attention_mask"],
        assistant_mask=padded["assistant_mask"].astype(np.int8),
        line=np.asarray(row_lines, dtype=np.int64),
    )
    output.write(buffer.getvalue())


# --------------------------------------------------------------------------------------------
# render


@dataclass(frozen=True)
class Style:
    """How ``render --segments`` marks markers: terminal colours, or brackets in plain text."""

    color: bool

    OPEN = "⟦"
    CLOSE = "⟧"

    def marker(self, text: str) -> str:
        if self.color:
            return f"\x1b[1;7;36m{text}\x1b[0m"  # bold, inverse, cyan: unlike any typed text
        return f"{self.OPEN}{text}{self.CLOSE}"

    def text(self, text: str) -> str:
        if self.color:
            # A control character in caller text could forge colours; show it escaped.
            return "".join(
                ch if ch in "\n\t" or not (ord(ch) < 32 or ord(ch) == 127) else f"\\x{ord(ch):02x}"
                for ch in text
            )
        # The bracket is doubled in text, so "⟦<|im_end|>⟧" typed by a user reads
        # "⟦⟦<|im_end|>⟧" and can never pass for a marker.
        return text.replace(self.OPEN, self.OPEN * 2)

    def header(self, text: str) -> str:
        return f"\x1b[2m{text}\x1b[0m" if self.color else text


def _segments_view(prompt: Prompt, style: Style) -> str:
    from .protocol import Special

    return "".join(
        style.marker(s.marker) if isinstance(s, Special) else style.text(s.text)
        for s in prompt.segments
    )


def cmd_render(args: argparse.Namespace) -> int:
    if args.model is not None:
        _check_template(args.model)
    color = args.color == "always" or (
        args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    )
    style = Style(color)
    tally = Tally("render")
    with _line_job(args, "render") as (chunks, output, progress):
        for chunk in chunks:
            for line in chunk:
                record: dict[str, Any]
                prompt = None
                try:
                    if line.error is not None:
                        raise line.error
                    prompt = _request(line.value, line.number, tally).prompt
                    record = {"prompt": prompt.text}
                except Exception as error:
                    record = _error_record(error, line.number)
                tally.record(record, line.number)
                if not args.segments:
                    output.write(_dump(record))
                elif prompt is not None:
                    view = _segments_view(prompt, style)
                    head = style.header(f"── line {line.number} ──")
                    output.write(f"{head}\n{view}\n".encode("utf-8", "backslashreplace"))
                else:
                    e = record["error"]
                    head = style.header(f"── line {line.number}: {e['type']} ──")
                    output.write(f"{head}\n{e['message']}\n".encode("utf-8", "backslashreplace"))
            progress.lines_done(len(chunk))
            output.flush()
        output.commit()
    return tally.report()


def _check_template(source: str) -> None:
    """render needs no vocabulary; given --model, it checks that the checkpoint's template is the
    one rendered here, since otherwise the text is not what that checkpoint expects."""
    from .vocabulary import chat_template_kind

    try:
        kind = chat_template_kind(source)
    except Exception as error:
        raise UsageError(_model_message(source, error)) from None
    if kind != "qwen3.8":
        _warn(
            f"render: warning: {source} does not carry the Qwen 3.8 chat template "
            f"({kind}); the text below is the Qwen 3.8 prompt, not that template's"
        )


# --------------------------------------------------------------------------------------------
# validate


def cmd_validate(args: argparse.Namespace) -> int:
    from .validation.report import checkpoint_report

    try:
        if _is_gguf(args.source):
            return _validate_gguf(args)
        report = checkpoint_report(args.source, against=args.against)
    except Exception as error:
        # Nothing to report on: the files cannot be found or read. The checkpoint does not carry
        # the protocol as far as anyone can tell, so this is a failed check (1), not a usage error.
        if args.json:
            sys.stdout.write(
                json.dumps({"source": args.source, "ok": False, "error": str(error)}, indent=2)
                + "\n"
            )
        _warn(f"validate: {error}")
        return EXIT_LINES_FAILED
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(_report_table(report))
    return EXIT_OK if report.ok else EXIT_LINES_FAILED


def _is_gguf(source: str) -> bool:
    from .gguf_reader import is_gguf_path

    return source.lower().endswith(".gguf") or is_gguf_path(Path(source))


def _validate_gguf(args: argparse.Namespace) -> int:
    from .validation.gguf import render_text, validate_gguf

    report = validate_gguf(args.source, against=args.against)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render_text(report))
    return EXIT_OK if report.ok else EXIT_LINES_FAILED


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def _columns(rows: Sequence[tuple[str, ...]], indent: str = "  ") -> list[str]:
    """Rows as left-aligned columns (the last one unpadded)."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        (
            indent
            + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[-1]
        ).rstrip()
        for row in rows
    ]


def _report_table(full: Any) -> str:
    report = full.validation
    out = [f"checkpoint  {report.source}", ""]
    width = max(len(entry.marker) for entry in report.markers) if report.markers else 6
    out.append(f"  {'marker':<{width}}  {'id':>8}  special  atomic")
    names: dict[int, str] = {}
    for entry in report.markers:
        shown = "missing" if entry.id is None else str(entry.id)
        special = "-" if entry.special is None else ("yes" if entry.special else "no")
        out.append(f"  {entry.marker:<{width}}  {shown:>8}  {special:<7}  {_yes_no(entry.atomic)}")
        if entry.id is not None:
            names[entry.id] = entry.marker
    out.append("")
    if report.stop_token_ids is None:
        stops = "unknown"
    else:
        stops = ", ".join(
            f"{i} {names[i]}" if i in names else str(i) for i in report.stop_token_ids
        )
    if report.embedding_size is None:
        embedding = "unknown"
    else:
        covers = report.embedding_size > report.max_token_id
        embedding = f"{report.embedding_size:,} rows ({'covers' if covers else 'does NOT cover'}"
        embedding += f" the largest ID {report.max_token_id:,})"
    tied = {None: "unknown", True: "yes", False: "no"}[report.tie_word_embeddings]
    template = full.template_name if report.template != "absent" else "MISSING"
    if report.template_sha256:
        template += f" (sha256 {report.template_sha256[:12]}…)"
    if full.template_equivalent:
        template += ": modified, behaviour identical to the official one on all probes"
    rows = [
        ("vocabulary", f"{report.vocab_size:,} tokens (largest ID {report.max_token_id:,})"),
        ("normalizer", report.normalizer),
        ("pre-tokenizer", report.pre_tokenizer),
        ("BOS", report.bos),
        ("stop tokens", stops),
        ("embedding", embedding),
        ("tied embeddings", tied),
        ("chat template", template),
    ]
    label = max(len(name) for name, _ in rows)
    out.extend(f"{name:<{label}}  {value}" for name, value in rows)

    out += ["", "stop and special tokens"]
    out += _columns(
        [("field", "tokens", "verdict")]
        + [(e.field, e.tokens, e.verdict) for e in report.special_tokens]
    )
    out += [f"  {e.field}: {e.rule}" for e in report.special_tokens if e.verdict != "ok"]

    behaviour = full.behaviour
    if behaviour is not None:
        out += ["", f"template behaviour (compared with {behaviour.reference})"]
        if not behaviour.available:
            out.append(f"  not checked: {behaviour.note}")
        else:
            out += _template_rows(behaviour)

    if full.prefix:
        out += ["", "prefix stability (is the rendering after each message a prefix of the next?)"]
        rows = [("preserve_thinking", "thinking", "result")]
        for result in full.prefix:
            options = result.options
            if result.error:
                verdict = f"template raises: {result.error}"
            elif not result.breaks:
                verdict = f"stable ({result.steps} steps)"
            else:
                verdict = "; ".join(
                    f"breaks adding message {b.length} ({b.role})"
                    + (" after the primer" if b.primer else "")
                    + f" at char {b.offset}: {b.before[:24]!r} -> {b.after[:24]!r}"
                    for b in result.breaks
                )
            rows.append(
                (
                    "on" if options["preserve_thinking"] else "off",
                    "on" if options["enable_thinking"] else "off",
                    verdict,
                )
            )
        out += _columns(rows)

    dead = full.dead
    out += ["", f"dead tokens (of {dead.checked:,} checked; --json lists them all)"]
    from .validation.dead import _DEAD_MEANING, DEAD_KINDS

    for kind in DEAD_KINDS:
        tokens = dead.of(kind)
        examples = ", ".join(
            f"{t.id} {t.text!r}" if t.text is not None else f"{t.id} {t.raw!r}" for t in tokens[:3]
        )
        out.append(
            f"  {len(tokens):>7,}  {_DEAD_MEANING[kind]}" + (f": {examples}, …" if tokens else "")
        )

    comparison = full.comparison
    if comparison is not None:
        verdict = "tokenizer-compatible" if comparison.compatible else "NOT tokenizer-compatible"
        out += ["", f"compared with {comparison.base}: {verdict}"]
        if not comparison.differences:
            out.append("  no difference")
        out += [
            f"  - [{d.kind}{', breaking' if d.breaking else ''}] {d.message}"
            for d in comparison.differences
        ]
        if comparison.template is not None and comparison.template.available:
            out += ["  template behaviour compared with the base's template:"]
            out += ["  " + line for line in _template_rows(comparison.template)]

    out.append("")
    if full.warnings:
        out.append(f"{len(full.warnings)} warning(s):")
        out.extend(f"  - {warning}" for warning in full.warnings)
    if full.ok:
        out.append("OK: this checkpoint carries the Qwen 3.8 protocol.")
    else:
        problems = list(full.problems)
        if comparison is not None and not comparison.compatible:
            problems.append(f"not tokenizer-compatible with {comparison.base} (see above)")
        out.append(f"NOT OK: {len(problems)} problem(s):")
        out.extend(f"  - {problem}" for problem in problems)
    return "\n".join(out) + "\n"


def _template_rows(behaviour: Any) -> list[str]:
    rows = [("feature", "result", "probe")]
    details = []
    for result in behaviour.features:
        probe = "" if result.probe is None else result.probe.name
        rows.append((result.feature, result.status, probe))
        if result.status == "differs" and result.line_number is None:
            details.append(
                f"  {result.feature} ({probe}): template {result.template_line}, expected "
                f"{result.reference_line}"
            )
        elif result.status == "differs":
            details.append(
                f"  {result.feature} ({probe}), line {result.line_number}: template "
                f"{result.template_line!r}, expected {result.reference_line!r}"
            )
        elif result.status == "raises":
            details.append(f"  {result.feature} ({probe}): the template raises {result.error}")
    return _columns(rows) + details


# --------------------------------------------------------------------------------------------
# parse


def _load_tools(path: str | None) -> Any:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            tools = json.load(handle)
    except OSError as error:
        raise UsageError(f"--tools: cannot read {path}: {error.strerror or error}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"--tools: {path} is not JSON: {error}") from None
    except RecursionError:
        raise UsageError(f"--tools: {path}: JSON nested too deeply to read") from None
    except ValueError as error:  # an integer past Python's 4300-digit limit
        raise UsageError(f"--tools: {path}: JSON that cannot be read: {error}") from None
    if isinstance(tools, dict) and isinstance(tools.get("tools"), list):
        tools = tools["tools"]  # a request body holding the tools list
    from .parser import parse_completion

    try:
        parse_completion("", tools=tools)  # builds the schema lookup: rejects a malformed list
    except (TypeError, ValueError) as error:
        raise UsageError(f"--tools: {path}: {error}") from None
    except RecursionError:
        raise UsageError(f"--tools: {path}: schemas nested too deeply to use") from None
    return tools


class _Parser:
    """Parses completion lines; loads the vocabulary only when a line carries token IDs."""

    def __init__(self, args: argparse.Namespace, tools: Any) -> None:
        self.model = args.model
        self.tools = tools
        self.thinking = not args.no_thinking
        self._encoder: Encoder | None = None

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = _load_encoder(self.model or DEFAULT_MODEL)
        return self._encoder

    def record(self, value: Any, line: int) -> dict[str, Any]:
        from .parser import parse_completion

        if isinstance(value, str):
            # A trailing <|im_end|> (engines report it with skip_special_tokens=False; a render
            # of a closed turn has it) ends the turn: the parser records it as the stop.
            completion = parse_completion(value, tools=self.tools, thinking=self.thinking)
        elif isinstance(value, dict):
            has_text, has_ids = "text" in value, "output_ids" in value
            if has_text == has_ids:
                raise LineError(
                    "RequestError", 'expected an object with either "text" or "output_ids"'
                )
            if has_text:
                text = value["text"]
                if not isinstance(text, str):
                    raise LineError(
                        "RequestError", f'"text" must be a string, got {json_type(text)}'
                    )
                completion = parse_completion(text, tools=self.tools, thinking=self.thinking)
            else:
                ids = value["output_ids"]
                if not isinstance(ids, list) or not all(
                    isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
                ):
                    raise LineError(
                        "RequestError", '"output_ids" must be a list of non-negative integers'
                    )
                encoder = self.encoder
                size = encoder.vocabulary.tokenizer.get_vocab_size(with_added_tokens=True)
                to_token = encoder.vocabulary.tokenizer.id_to_token
                # id_to_token takes a u32: a larger ID would raise OverflowError, not answer None.
                unknown = [i for i in ids if i >= 2**32 or to_token(i) is None]
                if unknown:
                    raise LineError(
                        "RequestError",
                        f"output_ids {unknown[:5]} are not tokens of this vocabulary "
                        f"({size:,} tokens): is --model the model that generated them?",
                    )
                # vLLM's output token_ids end with the stop token that ended generation.
                completion = parse_completion(
                    ids,
                    tools=self.tools,
                    thinking=self.thinking,
                    encoder=encoder,
                )
        else:
            raise LineError(
                "RequestError",
                'expected a JSON string (completion text) or an object with "text" or '
                f'"output_ids", got a JSON {json_type(value)}',
            )
        message = completion.to_message()
        if "tool_calls" in message:
            # The protocol carries no call IDs; deterministic ones let tool results refer back.
            message["tool_calls"] = [
                {"id": f"call_{line}_{j}", **call} for j, call in enumerate(message["tool_calls"])
            ]
        record: dict[str, Any] = {"message": message}
        if completion.unterminated is not None:
            record["unterminated"] = completion.unterminated
        return record


def cmd_parse(args: argparse.Namespace) -> int:
    tools = _load_tools(args.tools)
    parser = _Parser(args, tools)
    if args.model is not None:
        parser.encoder  # noqa: B018 - an explicit --model is checked before any output
    tally = Tally("parse")
    with _line_job(args, "parse") as (chunks, output, progress):
        for chunk in chunks:
            for line in chunk:
                try:
                    if line.error is not None:
                        raise line.error
                    record = parser.record(line.value, line.number)
                except UsageError:
                    raise  # the vocabulary for output_ids cannot be loaded: nothing to do
                except Exception as error:
                    record = _error_record(error, line.number)
                tally.record(record, line.number)
                output.write(_dump(record))
            progress.lines_done(len(chunk))
            output.flush()
        output.commit()
    return tally.report()


# --------------------------------------------------------------------------------------------
# Arguments


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30)


ENCODE_HELP = f"""\
Encode chat requests to token IDs, exactly as the checkpoint's chat template + tokenizer would.

INPUT is JSON Lines (default: stdin), one request per line in the shape of vLLM's /tokenize chat
request: "messages", "tools", "add_generation_prompt" (default true), "continue_final_message",
"chat_template_kwargs" ({", ".join(TEMPLATE_KWARGS[:2])},
{", ".join(TEMPLATE_KWARGS[2:])}) and a top-level "reasoning_effort" as OpenAI clients send it.
"return_token_strs": true adds "token_strs" (vLLM's token strings) to the answer.
"model", "add_special_tokens" and "mm_processor_kwargs" are accepted and do not change the IDs;
other unknown fields are ignored with a warning; unknown chat_template_kwargs are an error.

Output line i answers input line i:
  {{"input_ids": [...], "num_tokens": n}}            (+ "assistant_mask": [0/1...] if asked)
  {{"error": {{"type": ..., "message": ..., "line": i}}}}   (a bad line, in place)
A blank line is an error line too (dropping it would shift every later answer).
Exit 1 when any line failed (summary on stderr), 2 for usage errors, 0 otherwise
(130, 143, 129 after SIGINT, SIGTERM, SIGHUP: no partial output file is left).

--format npz writes padded arrays input_ids, attention_mask, assistant_mask (one row per
successful line, right-padded with <|endoftext|>) and "line": the 1-based input line of each
row, since failed lines have no row (their errors go to stderr).

--format parquet writes training rows (README "Training data"): input_ids list<int32>, and by
--columns assistant_masks list<int8> (TRL), attention_mask and labels (-100 outside the mask,
axolotl), plus num_tokens and error (null, or "Type: message"). Row i answers request i; an
error row keeps its place with empty lists unless --drop-errors. INPUT may then also be a
.parquet file or a folder of shards (one output shard of the same name each, in the -o folder,
each written atomically); --num-proc N uses datasets, --ray [ADDRESS] Ray Data. A summary
(rows, tokens, error rows by type, time) goes to stderr; exit 1 when any row failed.
"""

ENCODE_EXAMPLE = f"""\
examples:
  {PROG} encode --model {TINY_FIXTURE} examples/chat.jsonl
  {PROG} encode --model {DEFAULT_MODEL} requests.jsonl -o ids.jsonl --assistant-mask
  {PROG} encode --model ./my-checkpoint train.jsonl --format npz -o train.npz
  echo '{{"messages": [{{"role": "user", "content": "Hi"}}]}}' | {PROG} encode --model ./ckpt
  {PROG} encode --model ./ckpt chats/ --format parquet -o rows/ --num-proc 8 --resume
  {PROG} encode --model ./ckpt s3://bucket/chats/ --format parquet -o rows/ --ray auto
"""

RENDER_HELP = """\
Render chat requests (same input as `encode`) to the prompt text the chat template produces.

Output line i answers input line i: {"prompt": "<text>"} or {"error": {...}} (exit codes as for
`encode`). With --segments the prompts are shown for people: protocol markers are highlighted
(inverse colour on a terminal, ⟦<|im_end|>⟧ otherwise; a ⟦ in text is doubled), so a marker typed
by a user shows as plain text, the way `encode` treats it.

No vocabulary is needed. --model, when given, checks that the checkpoint carries the Qwen 3.8
template (a warning on stderr if not).
"""

RENDER_EXAMPLE = f"""\
examples:
  {PROG} render examples/chat.jsonl
  {PROG} render --segments examples/chat.jsonl | less -R
"""

VALIDATE_HELP = """\
Check that a checkpoint's vocabulary carries the Qwen 3.8 protocol: every marker an atomic added
token with the right flags, tokenizer_config.json in agreement, the official chat template,
stop tokens including <|im_end|>, an embedding covering every token ID.

Then: stop and special tokens field by field, with the rule each must follow; for a template
that is not the official one, its behaviour feature by feature against the native renderer
(needs jinja2); prefix stability across turns; dead tokens (entries their own text never
encodes to); with --against BASE, every difference from the base.

SRC is a local folder, a tokenizer.json path, a hub repo id (only tokenizer files are fetched) or a
GGUF file (llama.cpp): its vocabulary, token types, merges, special IDs, end-of-generation set
and template are judged against what llama.cpp's converter writes from the official checkpoint;
with --against, probe IDs are compared under the HF rules and as llama.cpp's text path will.
Exit 0 when the checkpoint carries the protocol (and, with --against, is tokenizer-compatible
with BASE), 1 when it does not or cannot be read, 2 for bad arguments. A template that is not
byte-identical to the official one but renders identically on every probe passes, with a
warning. Warnings do not change the exit code.
"""

VALIDATE_EXAMPLE = f"""\
examples:
  {PROG} validate {TINY_FIXTURE}
  {PROG} validate {DEFAULT_MODEL} --json
  {PROG} validate ./my-finetune --against {DEFAULT_MODEL}
  {PROG} validate model.gguf --against ./checkpoint-folder --json
"""

PARSE_HELP = """\
Parse model completions into assistant messages in OpenAI shape.

INPUT is JSON Lines (default: stdin): a JSON string (the completion text), {"text": "..."}, or
{"output_ids": [...]} (token IDs as the engine returned them; decoded with --model). A trailing
<|im_end|> / <|endoftext|> (or stop token ID) is dropped. The prompt is assumed to end with the
generation primer, which leaves <think> open: pass --no-thinking when it was rendered with
enable_thinking false.

Output line i answers input line i:
  {"message": {"role": "assistant", "content": ..., "reasoning_content": ...,
               "tool_calls": [{"id": "call_<line>_<k>", "type": "function",
                               "function": {"name": ..., "arguments": "<JSON text>"}}]}}
  (+ "unterminated": "<tool_call>..." when the output was cut inside a call)
  {"error": {"type": ..., "message": ..., "line": i}}
Exit codes as for `encode`. --tools FILE (a JSON list of tools) types parameter values by
their schema; without it a value is JSON when it parses, else a string.
"""

PARSE_EXAMPLE = f"""\
examples:
  {PROG} parse examples/completions.jsonl --tools examples/tools.json
  {PROG} parse --model {TINY_FIXTURE} outputs.jsonl -o messages.jsonl
"""

MAIN_HELP = f"""\
Exact, injection-safe Qwen 3.8 prompt encoding and completion parsing.

--model defaults to {DEFAULT_MODEL} (resolved through the Hugging Face hub cache; only
tokenizer files are fetched). {TINY_FIXTURE} is a small bundled vocabulary with the same
layout whose token IDs differ from the real ones: every command runs on it offline.
"""


def _add_model(parser: argparse.ArgumentParser, default: str | None, note: str) -> None:
    parser.add_argument(
        "--model",
        metavar="SRC",
        default=default,
        help=f"checkpoint: local folder, tokenizer.json path, GGUF file or hub repo id ({note})",
    )


def _add_io(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "input", nargs="?", default="-", metavar="INPUT", help="JSON Lines file (default: stdin)"
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="OUTPUT",
        help="output file, written atomically (default: stdout)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (shown only on a terminal)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=MAIN_HELP, formatter_class=_Formatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    def command(name: str, summary: str, description: str, example: str) -> Any:
        return commands.add_parser(
            name,
            help=summary,
            description=description,
            epilog=example,
            formatter_class=_Formatter,
        )

    encode = command("encode", "chat requests (JSONL) -> token IDs", ENCODE_HELP, ENCODE_EXAMPLE)
    _add_io(encode)
    _add_model(encode, DEFAULT_MODEL, f"default {DEFAULT_MODEL}")
    encode.add_argument(
        "--markers-in-text",
        choices=("literal", "reject", "atomic"),
        default="literal",
        help="caller text spelling a control token: encode it as text (default), fail the line, "
        "or make it the control token as transformers does",
    )
    encode.add_argument(
        "--assistant-mask",
        action="store_true",
        help="add assistant_mask (1 on the tokens a fine-tuning run trains on)",
    )
    encode.add_argument(
        "--format",
        choices=("jsonl", "npz", "parquet"),
        default="jsonl",
        help="JSON Lines (default), padded NumPy arrays, or Parquet training rows (see above)",
    )
    encode.add_argument(
        "--columns",
        choices=("trl", "axolotl", "all"),
        default="trl",
        help="Parquet columns: trl (input_ids, assistant_masks), axolotl (input_ids, "
        "attention_mask, labels), all; num_tokens and error always",
    )
    encode.add_argument(
        "--num-proc",
        type=int,
        metavar="N",
        help="Parquet input: encode with Hugging Face datasets in N processes",
    )
    encode.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="Parquet input: encode with Ray Data on the cluster at ADDRESS (local Ray if none)",
    )
    encode.add_argument(
        "--resume",
        action="store_true",
        help="Parquet folder input: skip shards whose output already exists (they are whole)",
    )
    encode.add_argument(
        "--drop-errors",
        action="store_true",
        help="Parquet output: leave error rows out (they are counted in the summary)",
    )
    encode.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"lines per parallel encoding batch (default {DEFAULT_BATCH})",
    )
    encode.set_defaults(run=cmd_encode)

    render = command("render", "chat requests (JSONL) -> prompt text", RENDER_HELP, RENDER_EXAMPLE)
    _add_io(render)
    _add_model(render, None, "optional: checks that its chat template is the Qwen 3.8 one")
    render.add_argument(
        "--segments", action="store_true", help="show markers distinguishably from text"
    )
    render.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour for --segments (auto: on a terminal, unless NO_COLOR is set)",
    )
    render.set_defaults(run=cmd_render)

    validate = command(
        "validate", "check a checkpoint's vocabulary", VALIDATE_HELP, VALIDATE_EXAMPLE
    )
    validate.add_argument(
        "source", metavar="SRC", help="checkpoint folder, hub repo id or GGUF file"
    )
    validate.add_argument("--json", action="store_true", help="print the report as JSON")
    validate.add_argument(
        "--against",
        metavar="BASE",
        help="compare with a base checkpoint: exit 1 unless tokenizer-compatible with it",
    )
    validate.set_defaults(run=cmd_validate)

    parse = command("parse", "completions -> assistant messages", PARSE_HELP, PARSE_EXAMPLE)
    _add_io(parse)
    _add_model(parse, None, f"for output_ids lines; default {DEFAULT_MODEL}")
    parse.add_argument(
        "--tools", metavar="FILE", help="JSON list of tools: types parameter values by schema"
    )
    parse.add_argument(
        "--no-thinking",
        action="store_true",
        help="the prompt was rendered with enable_thinking false (no open <think>)",
    )
    parse.set_defaults(run=cmd_parse)
    return parser


def _fill_closed_standard_streams() -> None:
    """Give a closed stdin, stdout or stderr (``<&-``, ``>&-``, ``2>&-``) /dev/null as its
    descriptor. Otherwise the next file opened takes that number: the output file would become
    descriptor 2, and any warning written there by a library (tokenizers logs from Rust) would
    land in the output. Python already set the closed stream's sys.stdin/stdout/stderr to None;
    stdin and stdout stay None, so a command that needs one says so (_check_standard_streams);
    messages for a closed stderr are dropped."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                devnull = os.open(os.devnull, os.O_RDWR)
                if devnull != fd:
                    os.dup2(devnull, fd)
                    os.close(devnull)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as we do


def _check_standard_streams(args: argparse.Namespace) -> None:
    if getattr(args, "input", None) == "-" and sys.stdin is None:
        raise UsageError("stdin is closed: pass INPUT (a JSON Lines file) or redirect stdin")
    writes_stdout = args.command == "validate" or getattr(args, "output", None) in (None, "-")
    if writes_stdout and sys.stdout is None:
        fix = "redirect stdout" if args.command == "validate" else "pass -o OUTPUT or redirect it"
        raise UsageError(f"stdout is closed: there is nowhere to write; {fix}")


def main(argv: Sequence[str] | None = None) -> int:
    _fill_closed_standard_streams()
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        with _termination_handled():
            _check_standard_streams(args)
            return run(args)
    except Terminated as stop:
        name = signal.Signals(stop.signum).name
        print(f"\n{PROG}: terminated by {name}; no partial output was left", file=sys.stderr)
        return 128 + stop.signum
    except UsageError as error:
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): not an error of ours. Point stdout at /dev/null so the
        # interpreter's final flush does not raise again.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
        return EXIT_BROKEN_PIPE
    except OSError as error:  # writing the output failed (disk full, stdout closed, ...)
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except QwenEncodeError as error:  # anything not tied to one line, reported without traceback
        print(f"{PROG} {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
