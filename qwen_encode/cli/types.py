"""The shape of a subcommand, as vLLM's CLI (``vllm.entrypoints.cli.types``) gives its own."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["CLISubcommand"]


class CLISubcommand:
    """One subcommand: ``subparser_init`` adds its parser (arguments and help texts) to the
    main parser's subcommands, ``cmd`` runs it and returns the exit code."""

    name: str

    def subparser_init(self, subparsers: Any) -> argparse.ArgumentParser:
        raise NotImplementedError

    def cmd(self, args: argparse.Namespace) -> int:
        raise NotImplementedError
