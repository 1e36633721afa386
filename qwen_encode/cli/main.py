"""The ``qwen-encode`` entry point: the main parser (one subparser per command module, as vLLM's
``vllm.entrypoints.cli.main`` builds its own), the standard streams, and what each way a run can
end exits with."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence

from ..errors import QwenEncodeError
from . import encode, parse, render, validate
from .common import (
    DEFAULT_MODEL,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    PROG,
    TINY_FIXTURE,
    Formatter,
    UsageError,
)
from .signals import Terminated, termination_handled

__all__ = ["build_parser", "main"]

# The subcommands, in the order --help lists them.
CMD_MODULES = (encode, render, validate, parse)

MAIN_HELP = f"""\
Exact, injection-safe Qwen 3.8 prompt encoding and completion parsing.

--model defaults to {DEFAULT_MODEL} (resolved through the Hugging Face hub cache; only
tokenizer files are fetched). {TINY_FIXTURE} is a small bundled vocabulary with the same
layout whose token IDs differ from the real ones: every command runs on it offline.
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``qwen-encode`` argument parser, every subcommand with its help text."""
    parser = argparse.ArgumentParser(prog=PROG, description=MAIN_HELP, formatter_class=Formatter)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module in CMD_MODULES:
        for command in module.cmd_init():
            command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
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
    """Run ``qwen-encode`` with ``argv`` (default: the process's arguments); the exit code."""
    _fill_closed_standard_streams()
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.dispatch_function
    try:
        with termination_handled():
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
