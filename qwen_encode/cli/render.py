"""``qwen-encode render``: chat requests -> the prompt text the chat template produces."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .common import (
    PROG,
    UsageError,
    add_io,
    add_model,
    chat_request,
    model_message,
    warn,
)
from .lines import Tally, error_record, line_job
from .output import dump
from .types import CLISubcommand

if TYPE_CHECKING:
    from ..protocol import Prompt

__all__ = ["cmd_init", "cmd_render"]

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
    from ..protocol import Special

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
    with line_job(args, "render") as (chunks, output, progress):
        for chunk in chunks:
            for line in chunk:
                record: dict[str, Any]
                prompt = None
                try:
                    if line.error is not None:
                        raise line.error
                    prompt = chat_request(line.value, tally.ignoring(line.number)).prompt
                    record = {"prompt": prompt.text}
                except Exception as error:
                    record = error_record(error, line.number)
                tally.record(record, line.number)
                if not args.segments:
                    output.write(dump(record))
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
    from ..vocabulary import chat_template_kind

    try:
        kind = chat_template_kind(source)
    except Exception as error:
        raise UsageError(model_message(source, error)) from None
    if kind != "qwen3.8":
        warn(
            f"render: warning: {source} does not carry the Qwen 3.8 chat template "
            f"({kind}); the text below is the Qwen 3.8 prompt, not that template's"
        )


def _add_arguments(render: argparse.ArgumentParser) -> None:
    add_io(render)
    add_model(render, None, "optional: checks that its chat template is the Qwen 3.8 one")
    render.add_argument(
        "--segments", action="store_true", help="show markers distinguishably from text"
    )
    render.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour for --segments (auto: on a terminal, unless NO_COLOR is set)",
    )


def cmd_init() -> list[CLISubcommand]:
    return [
        CLISubcommand(
            "render",
            "chat requests (JSONL) -> prompt text",
            RENDER_HELP,
            RENDER_EXAMPLE,
            add_arguments=_add_arguments,
            cmd=cmd_render,
        )
    ]
