"""``qwen-encode validate``: does a checkpoint (folder, hub id or GGUF file) carry the Qwen 3.8
protocol? The judging is ``qwen_encode.validation``'s; this prints its report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import (
    DEFAULT_MODEL,
    EXIT_LINES_FAILED,
    EXIT_OK,
    PROG,
    TINY_FIXTURE,
    warn,
)
from .output import json_text
from .types import CLISubcommand

__all__ = ["cmd_init", "cmd_validate"]

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


def cmd_validate(args: argparse.Namespace) -> int:
    from ..validation.report import checkpoint_report
    from ..validation.report_text import render_text

    try:
        if _is_gguf(args.source):
            return _validate_gguf(args)
        report = checkpoint_report(args.source, against=args.against)
    except Exception as error:
        # Nothing to report on: the files cannot be found or read. The checkpoint does not carry
        # the protocol as far as anyone can tell, so this is a failed check (1), not a usage error.
        if args.json:
            sys.stdout.write(
                json_text({"source": args.source, "ok": False, "error": str(error)}, indent=2)
                + "\n"
            )
        warn(f"validate: {error}")
        return EXIT_LINES_FAILED
    if args.json:
        sys.stdout.write(json_text(report.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report))
    return EXIT_OK if report.ok else EXIT_LINES_FAILED


def _is_gguf(source: str) -> bool:
    from ..gguf_reader import is_gguf_path

    return source.lower().endswith(".gguf") or is_gguf_path(Path(source))


def _validate_gguf(args: argparse.Namespace) -> int:
    from ..validation.gguf import render_text, validate_gguf

    report = validate_gguf(args.source, against=args.against)
    if args.json:
        sys.stdout.write(json_text(report.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report))
    return EXIT_OK if report.ok else EXIT_LINES_FAILED


def _add_arguments(validate: argparse.ArgumentParser) -> None:
    validate.add_argument(
        "source", metavar="SRC", help="checkpoint folder, hub repo id or GGUF file"
    )
    validate.add_argument("--json", action="store_true", help="print the report as JSON")
    validate.add_argument(
        "--against",
        metavar="BASE",
        help="compare with a base checkpoint: exit 1 unless tokenizer-compatible with it",
    )


def cmd_init() -> list[CLISubcommand]:
    return [
        CLISubcommand(
            "validate",
            "check a checkpoint's vocabulary",
            VALIDATE_HELP,
            VALIDATE_EXAMPLE,
            add_arguments=_add_arguments,
            cmd=cmd_validate,
        )
    ]
