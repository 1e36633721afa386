"""Every error the library raises on bad input, in one place so each layer can raise and catch them
without importing a layer above it.

All are ``ValueError`` subclasses except ``CheckpointError`` (an ``OSError``: a file is missing or
unreadable), so callers that already catch ``ValueError`` around transformers keep working.
"""

from __future__ import annotations

import operator
import reprlib
from collections.abc import Sequence
from typing import Any


def printable(text: str) -> str:
    """``text`` with lone UTF-16 surrogates written as ``\\udXXX`` escapes.

    A surrogate is valid in a Python string and in JSON (``"\\ud800"``) but has no UTF-8
    encoding: an error message quoting one crashed whoever printed or logged it. Everything else
    is left as it is."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Shown(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int past 4,300 digits raises ValueError (Python's digit limit).
        if x.bit_length() > 256:
            return f"<{x.bit_length()}-bit integer>"
        return repr(x)


_SHOWN = _Shown()
_SHOWN.maxlevel = 3  # nested deeper is "...": repr() of a deep value raises RecursionError
_SHOWN.maxstring = _SHOWN.maxother = 60
_SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxtuple = 6


def shown(value: Any) -> str:
    """A short, printable description of a caller's value for an error message. ``repr`` itself
    cannot be trusted with hostile input: it raises for huge integers and deep nesting, and
    keeps lone surrogates."""
    try:
        text = _SHOWN.repr(value)
    except Exception:  # a caller object whose own __repr__ fails
        text = f"<{type(value).__name__}>"
    return printable(text)


class QwenEncodeError(Exception):
    """Base class of every error qwen-encode raises on purpose."""


class PromptError(QwenEncodeError, ValueError):
    """A conversation the Qwen 3.8 protocol cannot render, or an argument of a public function
    that is not what it must be (a flag that is not a bool, a list that is not a list).

    ``reason`` is the bare explanation; where the checkpoint's template raises for the same input it
    is the template's own message, word for word ("No user query found in messages.").
    ``message_index`` and ``field`` say where the problem is, when it is in one message.
    """

    def __init__(self, reason: str, *, message_index: int | None = None, field: str | None = None):
        self.reason = printable(reason)
        self.message_index = message_index
        self.field = None if field is None else printable(field)
        super().__init__(self._describe())

    def _describe(self) -> str:
        if self.message_index is None:
            where = self.field or ""
        else:
            where = f"messages[{self.message_index}]"
            if self.field:
                where += f".{self.field}"
        return f"{where}: {self.reason}" if where else self.reason


class MarkerInTextError(PromptError):
    """Caller text spells a control token while ``markers_in_text="reject"``."""

    def __init__(self, marker: str, *, message_index: int | None, field: str):
        self.marker = marker
        turn = "the tools list" if message_index is None else f"turn {message_index}"
        super().__init__(
            f"{marker!r} appears in caller text ({turn}, field {field!r}); "
            'markers_in_text="reject" forbids control-token strings in text',
            message_index=message_index,
            field=field,
        )


class VocabularyError(QwenEncodeError, ValueError):
    """A checkpoint's vocabulary does not carry the protocol's markers as it must.

    ``problems`` lists every problem found, not just the first.
    """

    def __init__(self, source: str, problems: Sequence[str]):
        self.source = source
        self.problems = tuple(printable(p) for p in problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: the vocabulary does not carry the Qwen 3.8 protocol:\n{lines}")


class CheckpointError(QwenEncodeError, OSError):
    """A checkpoint's files could not be found or read (the message names the path)."""

    def __init__(self, message: object = "", *args: object) -> None:
        # A path that is not UTF-8 on disk arrives with surrogate escapes (os.fsdecode).
        super().__init__(printable(message) if isinstance(message, str) else message, *args)


class ParseError(QwenEncodeError, ValueError):
    """A completion broke the protocol's grammar; ``offset`` is where, in characters."""

    def __init__(self, reason: str, *, offset: int):
        self.reason = printable(reason)
        self.offset = offset
        super().__init__(f"at offset {offset}: {self.reason}")


class TokenIdError(QwenEncodeError, ValueError):
    """A token ID that is not one of the vocabulary's: not an integer, negative, or past the
    vocabulary. ``position`` is its index in the sequence given."""

    def __init__(self, reason: str, *, position: int):
        self.reason = reason
        self.position = position
        super().__init__(f"token IDs[{position}]: {reason}")


def outside_vocabulary(token: int, size: int | None) -> str:
    """Why ``token`` (an integer) is no ID of a vocabulary of ``size`` IDs."""
    bound = "" if size is None else f" of {size:,} IDs (0 to {size - 1:,})"
    return f"ID {shown(token)} is outside the vocabulary{bound}"


def check_token_id(token: Any, position: int, size: int | None) -> int:
    """``token`` as a Python int when it is an ID of a vocabulary of ``size`` IDs (``None``:
    any non-negative ID); else ``TokenIdError`` naming ``position``. The one check of a single
    token ID: not a bool (numpy would read ``True`` as 1), not a float (``3.0`` would be
    truncated silently), from 0 to ``size - 1`` (tokenizers returns '' past the vocabulary and
    raises ``OverflowError`` for a negative ID)."""
    if type(token) is int:  # the common case, checked first: the parser calls this per token
        value: int | None = token
    elif isinstance(token, bool) or type(token).__name__ in ("bool", "bool_"):  # numpy's too
        value = None
    else:
        try:
            value = operator.index(token)
        except TypeError:
            value = None
    if value is None:
        raise TokenIdError(
            f"expected an integer ID, got {type(token).__name__} {shown(token)}",
            position=position,
        )
    if value < 0 or (size is not None and value >= size):
        raise TokenIdError(outside_vocabulary(value, size), position=position)
    return value


class TemplateDivergence(QwenEncodeError, ValueError):
    """The chat template would render a turn of a rollout differently from the prompt it was
    sampled in (with ``preserve_thinking=False`` a new real user query drops the reasoning of the
    assistant turns before it), while the session's ``on_template_change="raise"``.

    ``message_index`` is the earliest turn whose IDs would change; ``cause`` the index of the
    message that changes it."""

    def __init__(self, reason: str, *, message_index: int, cause: int):
        self.reason = printable(reason)
        self.message_index = message_index
        self.cause = cause
        super().__init__(f"messages[{message_index}]: {self.reason}")
