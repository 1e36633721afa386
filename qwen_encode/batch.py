"""What every batch job shares: each input is answered in its place, a bad one with its error.

The command line (a line of JSON Lines) and the training-data functions (a table row) both answer
input *i* with output *i*; a bad input gets its error in place and every other input is still
answered. This module holds the pieces of that rule they share: the error of an input of the
wrong shape (``RecordError``), how any error is named in a record (``error_parts``), and the
batch-then-one-by-one encoding (``encode_each``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .errors import QwenEncodeError

if TYPE_CHECKING:
    from .encoder import Encoder, Encoding
    from .protocol import Prompt

__all__ = ["RecordError", "encode_each", "error_parts"]


class RecordError(Exception):
    """One input (a line, a row) that cannot be answered: ``kind`` names what is wrong with it
    (``RequestError``, ``JSONDecodeError``, ``EmptyLine``...), ``message`` says where. Reported in
    place; the job goes on."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def error_parts(error: BaseException) -> tuple[str, str]:
    """(type, message) of the error that answers one input."""
    if isinstance(error, RecordError):
        return error.kind, error.message
    if isinstance(error, QwenEncodeError):
        return type(error).__name__, str(error)
    # Not an error raised on purpose: a bug met on this input. It is answered in place like any
    # bad input (the others are still answered), but named for what it is.
    kind = type(error).__name__
    return kind, f"{error} (unexpected {kind} inside qwen-encode: please report it)"


def _encode_one(encoder: Encoder, prompt: Prompt) -> Encoding | Exception:
    try:
        return encoder.encode_batch([prompt], errors="return")[0]
    except Exception as error:
        return error


def encode_each(encoder: Encoder, prompts: Sequence[Prompt]) -> list[Encoding | Exception]:
    """One encoding or one exception per prompt, in order. One parallel batch call; a prompt the
    encoder refuses (``markers_in_text="reject"``) comes back as its error, in place. Anything
    else the batch call raises is a bug met on some prompt: the prompts are then encoded one by
    one, so only those that meet it fail and every other one is still answered."""
    if not prompts:
        return []
    try:
        return list(encoder.encode_batch(prompts, errors="return"))
    except Exception:
        return [_encode_one(encoder, prompt) for prompt in prompts]
