"""mkdocs hook: the command-line reference, generated from the parser at build time.

``docs/reference/cli.md`` holds the placeholder ``<!-- cli-reference -->``; this hook replaces it
with ``qwen-encode --help`` and each ``qwen-encode COMMAND --help``, as ``build_parser()`` formats
them. The help text exists once, in the code: the page can never drift from the command.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from typing import Any

PLACEHOLDER = "<!-- cli-reference -->"
# argparse wraps help to the terminal's width (COLUMNS first): a fixed width makes the page the
# same on every machine.
WIDTH = "100"


def help_texts() -> list[tuple[str, str]]:
    """``(command line, help text)`` for ``qwen-encode --help`` and every subcommand's."""
    from qwen_encode.cli import build_parser, main

    parser = build_parser()
    # argparse has no public accessor for its subcommands: the subparsers action is found the way
    # sphinx-argparse finds it.
    names = [
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    ]
    texts = []
    for argv in [["--help"], *([name, "--help"] for name in names)]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main(argv)
        texts.append((" ".join(["qwen-encode", *argv]), out.getvalue().rstrip()))
    return texts


def render() -> str:
    old = {key: os.environ.get(key) for key in ("COLUMNS", "NO_COLOR", "PYTHON_COLORS")}
    os.environ.update(COLUMNS=WIDTH, NO_COLOR="1", PYTHON_COLORS="0")
    try:
        texts = help_texts()
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    parts = []
    for command, text in texts:
        title = command.removesuffix(" --help")
        parts.append(f"## `{title}`\n\n```text\n$ {command}\n{text}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if PLACEHOLDER not in markdown:
        return markdown
    return markdown.replace(PLACEHOLDER, render())
