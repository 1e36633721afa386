"""What the subcommands share: names and exit codes, usage errors, the options every line
command takes, the checkpoint loader, and a request line -> its prompt."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..batch import RecordError
from ..chat_request import request_options
from ..errors import CheckpointError, PromptError, VocabularyError, shown

if TYPE_CHECKING:  # the heavy modules (numpy, tokenizers) load only for commands that need them
    from ..encoder import Encoder, MarkersInText
    from ..protocol import Prompt

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


class UsageError(Exception):
    """Bad options, or an input, output or checkpoint that cannot be used: exit 2."""


def warn(message: str) -> None:
    print(f"{PROG} {message}", file=sys.stderr)


# --------------------------------------------------------------------------------------------
# Arguments


class Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30)


def add_model(parser: argparse.ArgumentParser, default: str | None, note: str) -> None:
    parser.add_argument(
        "--model",
        metavar="SRC",
        default=default,
        help=f"checkpoint: local folder, tokenizer.json path, GGUF file or hub repo id ({note})",
    )


def add_io(parser: argparse.ArgumentParser) -> None:
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


# --------------------------------------------------------------------------------------------
# Checkpoints


def load_encoder(source: str, markers_in_text: MarkersInText = "literal") -> Encoder:
    from ..encoder import Encoder

    try:
        return Encoder.from_pretrained(source, markers_in_text=markers_in_text)
    except (CheckpointError, VocabularyError) as error:
        raise UsageError(model_message(source, error)) from None
    except Exception as error:  # a library failure while loading: still a message, no traceback
        raise UsageError(model_message(source, f"{type(error).__name__}: {error}")) from None


def model_message(source: str, error: Exception | str) -> str:
    hint = (
        f"pass --model {TINY_FIXTURE} (the bundled demo vocabulary; its IDs differ from the "
        f"real model's), --model {DEFAULT_MODEL} once its tokenizer files are in the hub cache, "
        "or --model with a local checkpoint folder"
    )
    return f"cannot use --model {source}: {error}\nhint: {hint}"


# --------------------------------------------------------------------------------------------
# Requests -> prompts


@dataclass(frozen=True)
class Request:
    prompt: Prompt
    token_strs: bool


def chat_request(value: Any, ignored: Callable[[str], None] | None) -> Request:
    """A vLLM tokenize chat request (one JSON object) -> its prompt. Raises RecordError for a
    request of the wrong shape, PromptError for a conversation the protocol cannot render;
    ``ignored`` is told each request field that cannot change the prompt."""
    from ..protocol import format_prompt

    try:
        options = request_options(value, ignored)
    except PromptError as error:
        raise RecordError("RequestError", error.reason) from None
    token_strs = value.get("return_token_strs")
    if token_strs is not None and not isinstance(token_strs, bool):
        raise RecordError(
            "RequestError", f"return_token_strs must be a bool, got {shown(token_strs)}"
        )
    return Request(format_prompt(**options), bool(token_strs))
