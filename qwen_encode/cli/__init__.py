"""The ``qwen-encode`` command: encode, render, validate and parse, line for line.

Every line-oriented command follows one discipline, so a pipeline can trust its output: output
line *i* answers input line *i*; a line that fails is answered in place by
``{"error": {"type", "message", "line"}}`` and every other line is still written; the exit code
is 1 when any line failed (with a summary on stderr), 2 for usage errors (bad options, an input
file or checkpoint that cannot be opened, a closed stdin or stdout), 0 otherwise; 130, 143 and
129 after SIGINT, SIGTERM and SIGHUP, 141 when the reader of stdout goes away. Output files are
written to a temporary file beside the target and renamed into place, so a crash, Ctrl-C, SIGTERM
or SIGHUP never leaves half a file.

One module per subcommand (``encode``, ``render``, ``validate``, ``parse``), each thin over the
library; ``lines`` (JSON Lines in, records out), ``output``, ``progress`` and ``signals`` are the
frame they share; ``main`` builds the parser. Run ``qwen-encode COMMAND --help`` for each
command, or ``python -m qwen_encode.cli``.
"""

from __future__ import annotations

from .main import build_parser, main

__all__ = ["build_parser", "main"]
