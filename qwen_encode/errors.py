"""Every error the library raises on bad input, in one place so each layer can raise and catch them
without importing a layer above it.

All are ``ValueError`` subclasses except ``CheckpointError`` (an ``OSError``: a file is missing or
unreadable), so callers that already catch ``ValueError`` around transformers keep working.
"""

from __future__ import annotations

from collections.abc import Sequence


class QwenEncodeError(Exception):
    """Base class of every error qwen-encode raises on purpose."""


class PromptError(QwenEncodeError, ValueError):
    """A conversation the Qwen 3.8 protocol cannot render.

    ``reason`` is the bare explanation; where the checkpoint's template raises for the same input it
    is the template's own message, word for word ("No user query found in messages.").
    ``message_index`` and ``field`` say where the problem is, when it is in one message.
    """

    def __init__(self, reason: str, *, message_index: int | None = None, field: str | None = None):
        self.reason = reason
        self.message_index = message_index
        self.field = field
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
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: the vocabulary does not carry the Qwen 3.8 protocol:\n{lines}")


class CheckpointError(QwenEncodeError, OSError):
    """A checkpoint's files could not be found or read (the message names the path)."""


class ParseError(QwenEncodeError, ValueError):
    """A completion broke the protocol's grammar; ``offset`` is where, in characters."""

    def __init__(self, reason: str, *, offset: int):
        self.reason = reason
        self.offset = offset
        super().__init__(f"at offset {offset}: {reason}")
