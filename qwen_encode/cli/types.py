"""The shape of a subcommand, as vLLM's CLI (``vllm.entrypoints.cli.types``) gives its own."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .common import Formatter

__all__ = ["CLISubcommand"]


@dataclass(frozen=True)
class CLISubcommand:
    """One subcommand: its name, the one-line ``summary`` the main --help lists, its own --help
    (``description`` above the options, ``example`` below), the options it adds, and ``cmd``,
    which runs it and returns the exit code."""

    name: str
    summary: str
    description: str
    example: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    cmd: Callable[[argparse.Namespace], int]

    def subparser_init(self, subparsers: Any) -> argparse.ArgumentParser:
        """Add this subcommand's parser to the main parser's ``subparsers``."""
        parser: argparse.ArgumentParser = subparsers.add_parser(
            self.name,
            help=self.summary,
            description=self.description,
            epilog=self.example,
            formatter_class=Formatter,
        )
        self.add_arguments(parser)
        return parser
