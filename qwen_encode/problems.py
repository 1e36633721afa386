"""Problems as values: a code, where, a message, rendered by the text and JSON reports.

Other code reads a problem's ``code`` and ``where``, never its message: a message can be reworded
without breaking anything that acts on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeAlias

Severity: TypeAlias = Literal["problem", "warning", "note"]


@dataclass(frozen=True)
class Problem:
    """One finding. ``code``: a stable dotted name ("gguf.pre", "gguf.marker_type"...);
    ``where``: the file key, marker or field it is about; ``message``: what was expected, what
    was found and what it does; ``severity``: a "problem" fails validation, a "warning" is a known
    source of trouble that does not, a "note" is what a user must know (no fault); ``rule``: where
    the expectation comes from."""

    code: str
    where: str
    message: str
    severity: Severity = "problem"
    rule: str = ""

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Findings(list[Problem]):
    """The problems a validation collects, in the order found."""

    def add(
        self, code: str, where: str, message: str, severity: Severity = "problem", rule: str = ""
    ) -> None:
        self.append(Problem(code, where, message, severity, rule))


def listed(items: Sequence[str], limit: int = 8) -> str:
    """``items`` shown with repr, cut after ``limit`` with the count of the rest."""
    shown = ", ".join(repr(item) for item in items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")
