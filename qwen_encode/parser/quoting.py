"""Markdown quoting: whether the text so far leaves a fenced code block (or, in reasoning, an
inline code span) open, so that markup quoted there is text, never a call (vLLM issue 57541).

The rules are CommonMark's (spec 0.31, sections 4.5 and 6.1), read one piece at a time:

* A fence opens on a line whose first characters, after at most three spaces, are a run of at
  least three backticks or tildes (a backtick fence's info string holds no backtick). It is
  closed only by a line of at most three spaces, a run of the *same* character at least as long
  as the opening run, and nothing after it but spaces and tabs: ```` ``` ```` does not close a
  fence opened by ```` ```` ````, nor does ```` ``` trailing ````. Whether a line closes the
  fence is known at its end, so markup on such a line is still quoted.
* A code span opens at a run of backticks and closes at the next run of the same length. A
  backslash escapes the backtick after it (``\\```` is a literal backtick, outside a span). A
  span not closed by the end of its line is given up there (a stream cannot wait for the rest of
  a paragraph; CommonMark would let it run on over a line break).
"""

from __future__ import annotations

import re
from typing import Final

_BACKTICK_RUN: Final = re.compile(r"(\\*)(`+)")

# Phases of the current line while it may still be a fence line.
_INDENT, _RUN, _REST, _PROSE = range(4)


class _Quotes:
    """Quoting state over text fed piece by piece; ``quoted()`` says whether a marker or tag that
    comes next (no backtick, no line break) is quoted. ``spans``: code spans count too."""

    __slots__ = (
        "closing",
        "code",
        "escape",
        "fence",
        "fence_len",
        "indent",
        "opened",
        "phase",
        "run_char",
        "run_len",
        "spans",
        "tick",
    )

    def __init__(self, spans: bool) -> None:
        self.spans = spans
        self.fence: str | None = None  # the open fence's character
        self.fence_len = 0
        self.code = 0  # length of the backtick run of an open code span
        self.tick = 0  # a backtick run at the end of the text so far (may continue)
        self.escape = False  # the text so far ends with an unescaped backslash
        self._new_line()

    def _new_line(self) -> None:
        self.phase = _INDENT
        self.indent = 0
        self.run_char = ""
        self.run_len = 0
        self.closing = False  # the line so far may close the open fence
        self.opened = False  # this line opened the fence
        self.code = 0
        self.tick = 0
        self.escape = False

    def quoted(self) -> bool:
        """Whether what comes next, a marker or a tag, is quoted."""
        self.marker()
        return self.fence is not None or self.code > 0

    def feed(self, text: str) -> None:
        lines = text.split("\n")
        for index, line in enumerate(lines):
            if index:
                self._end_line()
            if line:
                self._line(line)

    def _end_line(self) -> None:
        if self.tick:
            self._run(self.tick)
        if self.phase == _RUN:
            self._run_ended()
        if self.fence is not None and self.closing and not self.opened:
            self.fence = None
        self._new_line()

    def _line(self, line: str) -> None:
        pos = 0
        if self.phase == _INDENT:
            while pos < len(line) and line[pos] == " " and self.indent < 4:
                self.indent += 1
                pos += 1
            if pos == len(line):
                if self.indent > 3:
                    self.phase = _PROSE
                return
            if self.indent > 3 or line[pos] not in "`~":
                self.phase = _PROSE
            else:
                self.phase, self.run_char = _RUN, line[pos]
        if self.phase == _RUN:
            run_end = pos
            while run_end < len(line) and line[run_end] == self.run_char:
                run_end += 1
            self.run_len += run_end - pos
            if run_end == len(line):
                return  # the run may go on in the next piece
            self._run_ended()
            pos = run_end
        rest = line[pos:]
        if self.phase == _REST:
            if self.closing and rest.strip(" \t"):
                self.closing = False
            if self.opened and self.run_char == "`" and "`" in rest:
                # A backtick fence's info string holds no backtick: the line was inline code.
                self.fence, self.opened = None, False
                self.phase = _PROSE
                self._spans(rest)
            return
        self._spans(rest)

    def _run_ended(self) -> None:
        """The line's leading run of backticks or tildes is complete."""
        self.phase = _PROSE
        if self.run_len < 3:
            if self.run_char == "`" and self.fence is None:
                self._spans("`" * self.run_len)
            return
        if self.fence is None:
            self.fence, self.fence_len, self.opened = self.run_char, self.run_len, True
            self.phase = _REST
        elif self.run_char == self.fence and self.run_len >= self.fence_len:
            self.closing = True
            self.phase = _REST

    def _spans(self, scan: str) -> None:
        if not self.spans or self.fence is not None or not scan:
            return
        for run in _BACKTICK_RUN.finditer(scan):
            slashes = len(run.group(1))
            width = len(run.group(2))
            start = run.start(2)
            if self.tick and start == 0:
                width += self.tick  # the run began in an earlier piece
            elif self.tick:
                self._run(self.tick)
            self.tick = 0
            escaped = (slashes % 2 == 1) or (start == 0 and slashes == 0 and self.escape)
            if escaped and self.code == 0:
                width -= 1  # "\`" is a literal backtick (inside a span a backslash is literal)
            if run.end() == len(scan):
                self.tick = width
                break
            if width:
                self._run(width)
        else:
            if self.tick:
                self._run(self.tick)
                self.tick = 0
        trailing = len(scan) - len(scan.rstrip("\\"))
        self.escape = (
            trailing % 2 == 1 if trailing < len(scan) else (self.escape != (trailing % 2 == 1))
        )

    def _run(self, width: int) -> None:
        if self.code == 0:
            self.code = width
        elif self.code == width:
            self.code = 0

    def marker(self) -> None:
        """A marker token sits on the line: it is no fence line, and it ends a backtick run."""
        if self.phase == _RUN:
            self._run_ended()
        if self.phase in (_INDENT, _RUN):
            self.phase = _PROSE
        self.closing = False
        if self.tick:
            self._run(self.tick)
            self.tick = 0
        self.escape = False
