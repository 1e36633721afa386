"""The grammar machine: markers and text, one piece at a time, batch and streaming alike.

The grammar is the one the checkpoint's template writes for an assistant turn::

    <think>\\n{reasoning}\\n</think>\\n\\n{content}<tool_call>\\n<function=NAME>\\n
    <parameter=P>\\n{value}\\n</parameter>\\n</function>\\n</tool_call>

How it is read:

* Two levels. The outer level (here) sees only the protocol's *markers* (``<think>``,
  ``</think>``, ``<tool_call>``, ``</tool_call>``) and text between them. For a string
  completion every spelling of a marker is one; for token IDs only the marker's atomic ID is (a
  marker spelled out in ordinary tokens is prose), so the outer level works on
  ``(is_marker, text)`` pieces, never on one flat string. The inner level (``tail``, ``calls``)
  reads the calls, where ``<function=``, ``<parameter=`` and their closers are plain text.
* Reasoning ends at the first ``</think>``; with none at all, at a ``<tool_call>`` that is
  followed by optional whitespace and ``<function=`` and is not quoted in a Markdown fence or an
  inline code span (``quoting``); otherwise the whole output is reasoning (truncated). Tool
  markup inside a reasoning span that is later closed stays reasoning and is never dispatched.
* After reasoning, a ``<tool_call>`` followed by optional whitespace and ``<function=``, outside
  a fenced block, opens the first call. A ``<tool_call>`` not followed by ``<function=`` is text
  (a bare mention), unless a ``</tool_call>`` closes it before the next ``<tool_call>``: then it
  was a span that holds no call, a ``ParseError``. A ``</think>`` after reasoning ended is
  content, kept verbatim: the template renders content as it is (it never splits it at
  ``</think>``), so dropping it would lose the model's words and a sampled token.
* A call without the wrapper (vLLM and llama.cpp dispatch it): a line-start
  ``<function=NAME>`` of a declared tool in content, outside a fence, whose block completes
  (``</function>``, and its ``</tool_call>`` if that follows) and parses. Content is held back
  only while it may still be such a block's start (``_Opening``); from there on it is part of
  the tail, and a block that never completes is content.
* Everything from the first call on (the *tail*) is read when the output ends, because a value
  is data until the rest of the output confirms where it ends. A call the output never closed
  is not dispatched: its raw text is ``Completion.unterminated``.
* Content is all text outside reasoning and call spans (before, between and after calls),
  concatenated; reasoning and content are then trimmed like the template trims them
  (``str.strip``), and empty becomes None.

Before the first call the machine never rescans: every piece of input is looked at once, plus a
bounded look-ahead after ``<tool_call>`` (whitespace and the 10 characters of ``<function=``),
with a tools list the start of a possible unwrapped call (a tag of a declared name, whitespace
appended in O(1), 11 characters after it). Two holds are forced by the rules themselves: a
``<function=`` call inside a reasoning span that has not closed is reasoning or a call
depending on whether a ``</think>`` comes later; and the tail is read once the output ends. Both
are appended to in O(1) per piece and read once, in linear time.
"""

from __future__ import annotations

from typing import Final, TypeAlias

from .. import markers as mk
from ..conversation import ToolCall
from ..errors import ParseError
from .calls import _FUNCTION, _FUNCTION_END, _PARAMETER
from .events import (
    Completion,
    ContentDelta,
    ReasoningDelta,
    Span,
    StreamEvent,
    ToolCallEvent,
)
from .inputs import _Splitter
from .quoting import _Quotes
from .tail import _Calls, _read_tail, _Text, _Unterminated, _unwrapped_names
from .values import _Schemas

_FUNCTION_LEN: Final = len(_FUNCTION)

_Item: TypeAlias = tuple[bool, str, int]  # (is_marker, text, offset)


def _extend(spans: list[list[int]], start: int, end: int) -> None:
    """Add ``start:end`` to a list of spans, merged with the last one when they touch."""
    if end <= start:
        return
    if spans and spans[-1][1] == start:
        spans[-1][1] = end
    else:
        spans.append([start, end])


class _FirstCall(Exception):
    """Internal: ``parse_tool_call`` has what it wants: ``call``, once the caller sets it."""

    def __init__(self, call: ToolCall | None = None) -> None:
        super().__init__(call)
        self.call = call


class _Opening:
    """Content held while it may open a call without the wrapper: from a line-start ``<``,
    first a prefix of ``<function=NAME>`` (in ``ahead``), then the whole tag and whitespace
    (``pieces``, appended in O(1)) and the first characters after them (``ahead``)."""

    __slots__ = ("ahead", "pieces", "start", "tag")

    def __init__(self, start: int) -> None:
        self.start = start
        self.tag = ""
        self.pieces: list[str] = []
        self.ahead = ""


# The states. Each owns what it holds back; the machine's own fields are what it has said.


class _Start:
    """Nothing but whitespace yet: a leading ``<think>`` may still open reasoning (the
    whitespace before it is not part of any span)."""

    __slots__ = ("leading",)

    def __init__(self) -> None:
        self.leading: list[_Item] = []


class _Reasoning:
    """Inside the reasoning span: text is said as reasoning as it comes."""

    __slots__ = ()


class _Hold:
    """A call inside a reasoning span that has not closed: it is reasoning if a ``</think>``
    comes later, else the first call. Holds everything from its ``<tool_call>`` on."""

    __slots__ = ("items",)

    def __init__(self, items: list[_Item]) -> None:
        self.items = items


class _Content:
    """After reasoning, before the first call. Holds the start of a possible call without the
    wrapper (``opening``) and remembers a bare ``<tool_call>`` (``bare``: its offset) that a
    ``</tool_call>`` would turn into a span holding no call."""

    __slots__ = ("bare", "opening")

    def __init__(self) -> None:
        self.opening: _Opening | None = None
        self.bare: int | None = None


class _Lookahead:
    """What follows a ``<tool_call>``: held until it is known whether ``<function=`` comes;
    then the machine goes back to ``origin`` (a mention) or on to a call."""

    __slots__ = ("first", "head", "items", "origin")

    def __init__(self, origin: _Reasoning | _Content, marker: _Item) -> None:
        self.origin = origin
        self.items: list[_Item] = [marker]
        self.head = ""  # the first up-to-10 non-whitespace characters
        self.first: int | None = None  # offset of the first non-whitespace character


class _Tail:
    """Everything from the first call on, read once the output ended."""

    __slots__ = ("items",)

    def __init__(self, items: list[_Item]) -> None:
        self.items = items


_State: TypeAlias = _Start | _Reasoning | _Hold | _Content | _Lookahead | _Tail


class _Machine:
    """The outer-level state machine shared by batch and streaming parsing."""

    def __init__(self, schemas: _Schemas, thinking: bool) -> None:
        self.schemas = schemas
        self.thinking = thinking
        self.state: _State = _Start()
        self.offset = 0
        self.events: list[StreamEvent] = []
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.calls: list[ToolCall] = []
        self.unterminated: str | None = None
        self.reasoning_spans: list[list[int]] = []
        self.content_spans: list[list[int]] = []
        self.call_spans: list[Span] = []
        self.stop_at_first_call = False
        self.reasoning_quotes = _Quotes(spans=True)
        self.content_quotes = _Quotes(spans=False)
        # A call without the <tool_call> wrapper starts with a line-start <function=NAME> of a
        # declared tool: content is held back only while it is a prefix of one of these tags.
        self.openers = frozenset(f"{_FUNCTION}{name}>" for name in _unwrapped_names(schemas))
        self.opener_prefixes = frozenset(o[:n] for o in self.openers for n in range(1, len(o)))
        self.openers_tuple = tuple(self.openers)
        self.longest_opener = max(map(len, self.openers), default=0)
        self.line_start = True  # content so far ends a line (or there is none yet)

    def push(self, is_marker: bool, text: str) -> None:
        if text:
            start = self.offset
            self.offset = start + len(text)
            self._handle(is_marker, text, start)

    def _reason(self, text: str, start: int, is_marker: bool = False) -> None:
        if is_marker:
            self.reasoning_quotes.marker()
        else:
            self.reasoning_quotes.feed(text)
        self.reasoning.append(text)
        _extend(self.reasoning_spans, start, start + len(text))
        self.events.append(ReasoningDelta(text))

    def _say(self, text: str, start: int, is_marker: bool = False) -> None:
        if is_marker:
            self.content_quotes.marker()
            self.line_start = False
        elif text:
            self.content_quotes.feed(text)
            self.line_start = text.endswith("\n")
        self.content.append(text)
        _extend(self.content_spans, start, start + len(text))
        self.events.append(ContentDelta(text))

    # ---- the states' handlers

    def _handle(self, is_marker: bool, text: str, start: int) -> None:
        state = self.state
        # The states most pieces arrive in come first.
        if isinstance(state, _Content):
            self._in_content(state, is_marker, text, start)
        elif isinstance(state, _Reasoning):
            self._in_reasoning(is_marker, text, start)
        elif isinstance(state, _Tail):
            state.items.append((is_marker, text, start))
        elif isinstance(state, _Lookahead):
            self._look(state, is_marker, text, start)
        elif isinstance(state, _Hold):
            self._in_hold(state, is_marker, text, start)
        else:
            self._at_start(state, is_marker, text, start)

    def _at_start(self, state: _Start, is_marker: bool, text: str, start: int) -> None:
        if is_marker and text == mk.THINK_OPEN:
            # A completion that begins with <think> opens a reasoning span, whatever
            # `thinking` says (and with thinking=True it is the span already open).
            self.state = _Reasoning()
            return
        if not is_marker and text.isspace():
            state.leading.append((False, text, start))
            return
        self._leave_start(state)
        self._handle(is_marker, text, start)

    def _leave_start(self, state: _Start) -> None:
        self.state = _Reasoning() if self.thinking else _Content()
        for item in state.leading:
            self._handle(*item)

    def _in_reasoning(self, is_marker: bool, text: str, start: int) -> None:
        if is_marker:
            if text == mk.THINK_CLOSE:
                self.state = _Content()
                return
            if text == mk.TOOL_CALL_OPEN and not self.reasoning_quotes.quoted():
                self.state = _Lookahead(_Reasoning(), (True, text, start))
                return
        self._reason(text, start, is_marker)

    def _in_hold(self, state: _Hold, is_marker: bool, text: str, start: int) -> None:
        if is_marker and text == mk.THINK_CLOSE:
            # A </think> after all: the held call markup was reasoning, never dispatched.
            self._reason("".join(t for _, t, _ in state.items), state.items[0][2])
            self.state = _Content()
            return
        state.items.append((is_marker, text, start))

    def _in_content(self, state: _Content, is_marker: bool, text: str, start: int) -> None:
        if not is_marker:
            self._content_text(state, text, start)
            return
        self._flush_opening(state)
        if text == mk.TOOL_CALL_OPEN and not self.content_quotes.quoted():
            state.bare = None
            self.state = _Lookahead(state, (True, text, start))
            return
        if text == mk.TOOL_CALL_CLOSE and state.bare is not None:
            raise ParseError("<tool_call> span holds no <function=NAME> block", offset=state.bare)
        # A </think> after reasoning ended is content: the template renders content verbatim
        # (it never splits it at </think>), so dropping it would lose the model's words.
        self._say(text, start, is_marker)

    def _look(self, ahead: _Lookahead, is_marker: bool, text: str, start: int) -> None:
        ahead.items.append((is_marker, text, start))
        if is_marker:
            if (
                ahead.first is None
                and text == mk.TOOL_CALL_CLOSE
                and isinstance(ahead.origin, _Content)
            ):
                raise ParseError("empty <tool_call> span: expected <function=NAME>", offset=start)
            self._decide(ahead, False, start if ahead.first is None else ahead.first)
            return
        if ahead.first is None:
            rest = text.lstrip()
            if not rest:
                return
            ahead.first = start + len(text) - len(rest)
            head = rest[:_FUNCTION_LEN]
        else:
            head = ahead.head + text[: _FUNCTION_LEN - len(ahead.head)]
        ahead.head = head
        if len(head) == _FUNCTION_LEN:
            self._decide(ahead, head == _FUNCTION, ahead.first)
        elif not _FUNCTION.startswith(head):
            self._decide(ahead, False, ahead.first)

    def _decide(self, ahead: _Lookahead, is_call: bool, first: int | None) -> None:
        items = ahead.items
        origin = ahead.origin
        if is_call:
            if isinstance(origin, _Reasoning):
                # No </think> yet: this call ends reasoning only if none ever comes.
                self.state = _Hold(items)
                return
            # A call: what follows is read at the end, when the whole output confirms where
            # each value ends (a later </parameter></function></tool_call> may still turn an
            # earlier one into data).
            self.state = _Tail(items)
            return
        # Not a call: the <tool_call> is text where it stands.
        self.state = origin
        if isinstance(origin, _Content):
            self._say(mk.TOOL_CALL_OPEN, items[0][2], True)
            origin.bare = first
        else:
            self._reason(mk.TOOL_CALL_OPEN, items[0][2], True)
        for item in items[1:]:
            self._handle(*item)

    # ---- content that may open a call without the wrapper

    def _content_text(self, state: _Content, text: str, start: int) -> None:
        """Content text, watched for a call without the wrapper: a line-start
        ``<function=NAME>`` of a declared tool, then whitespace and ``<parameter=`` or
        ``</function>``. Only what may still become that is held (``_Opening``); the rest is
        said at once."""
        if not self.openers:
            self._say(text, start)
            return
        while text:
            if state.opening is None:
                text, start = self._scan_content(state, text, start)
                continue
            text, start = self._grow_opening(state, text, start)
            if state.opening is not None or self.state is not state:
                return

    def _scan_content(self, state: _Content, text: str, start: int) -> tuple[str, int]:
        """Say ``text`` up to a line-start ``<`` that may open a call; hold that (as
        ``opening``) and return what follows it, or ("", 0) when all of it is said or held."""
        said = 0
        at = 0 if self.line_start and text.startswith("<") else self._next_line_tag(text, 0)
        while at >= 0:
            if at > said:
                # The fence state at `at` needs the text before it.
                self._say(text[said:at], start + said)
                said = at
            if not self.content_quotes.quoted():
                head = text[at : at + self.longest_opener]
                if head in self.opener_prefixes or head.startswith(self.openers_tuple):
                    state.opening = _Opening(start + at)
                    return text[at:], start + at
            at = self._next_line_tag(text, at + 1)
        if said < len(text):
            self._say(text[said:], start + said)
        return "", 0

    def _grow_opening(self, state: _Content, text: str, start: int) -> tuple[str, int]:
        """Add ``text`` to the held opening: it becomes the tail (a call may have begun), stays
        held, or is said (then the rest of ``text`` is returned to be scanned again)."""
        opening = state.opening
        assert opening is not None
        if not opening.tag:
            head = opening.ahead + text[: self.longest_opener]
            gt = head.find(">")
            if gt >= 0 and head[: gt + 1] in self.openers:
                used = gt + 1 - len(opening.ahead)
                opening.tag, opening.ahead = head[: gt + 1], ""
                opening.pieces.append(opening.tag)
                text, start = text[used:], start + used
                if not text:
                    return "", 0
            elif gt < 0 and head in self.opener_prefixes:
                opening.ahead = head  # all of text is in head: it is shorter than the tag
                return "", 0
            else:
                return self._release_opening(state, text, start)
        if not opening.ahead:
            rest = text.lstrip()
            if len(rest) < len(text):
                opening.pieces.append(text[: len(text) - len(rest)])
                start += len(text) - len(rest)
                text = rest
            if not text:
                return "", 0
        need = len(_FUNCTION_END) - len(opening.ahead)
        ahead = opening.ahead + text[:need]
        if ahead.startswith((_PARAMETER, _FUNCTION_END)):
            # A block in the format's shape: from here on it is read with the calls.
            state.opening = None
            self.state = _Tail(
                [(False, "".join(opening.pieces) + opening.ahead + text, opening.start)]
            )
            return "", 0
        if _PARAMETER.startswith(ahead) or _FUNCTION_END.startswith(ahead):
            opening.ahead = ahead
            return "", 0
        return self._release_opening(state, text, start)

    def _release_opening(self, state: _Content, text: str, start: int) -> tuple[str, int]:
        """What was held as a possible call without the wrapper is content: the tag and the
        whitespace after it are said; what followed them (``ahead``, then ``text``) is returned
        to be scanned again, since a line-start tag may begin in it."""
        opening = state.opening
        if opening is None:
            return text, start
        state.opening = None
        if opening.pieces:
            self._say("".join(opening.pieces), opening.start)
        if opening.tag:
            held = len("".join(opening.pieces))
            return opening.ahead + text, opening.start + held
        # Only a prefix of a tag was held: it cannot start another one (no line break in it).
        if opening.ahead:
            self._say(opening.ahead, opening.start)
        return text, start

    def _flush_opening(self, state: _Content) -> None:
        """A marker or the end of output: what was held cannot open a call any more."""
        opening = state.opening
        if opening is not None:
            state.opening = None
            held = "".join(opening.pieces) + opening.ahead
            if held:
                self._say(held, opening.start)

    @staticmethod
    def _next_line_tag(text: str, pos: int) -> int:
        at = text.find("\n<", pos - 1 if pos else 0)
        return -1 if at < 0 else at + 1

    # ---- the end

    def _read_tail(self, items: list[_Item]) -> None:
        for part in _read_tail(items, self.schemas):
            if isinstance(part, _Text):
                self._say(part.text, part.start)
            elif isinstance(part, _Unterminated):
                self.unterminated = part.text
            elif isinstance(part, _Calls):
                self._calls(part)

    def _calls(self, part: _Calls) -> None:
        """Dispatch the calls of one span; each call's span runs from the span's start (its
        ``<tool_call>``) or its block's start, to its block's end or the span's end."""
        blocks = part.blocks
        for k, block in enumerate(blocks):
            index = len(self.calls)
            start = part.start if k == 0 else block.start
            end = part.end if k == len(blocks) - 1 else block.end
            self.call_spans.append(Span("tool_call", start, end, call_index=index))
            for argument in block.arguments:
                self.call_spans.append(
                    Span("argument", argument.start, argument.end, None, None, index, argument.name)
                )
            self.events.append(ToolCallEvent(index, block.call))
            self.calls.append(block.call)
            if self.stop_at_first_call:
                raise _FirstCall

    def end(self) -> None:
        """End of input: settle everything held back."""
        while True:
            state = self.state
            if isinstance(state, _Content):
                # A tag cut off before its block's shape is known opens no call.
                self._flush_opening(state)
            if isinstance(state, _Lookahead):
                # Only whitespace or a prefix of <function= followed the <tool_call>: the output
                # was cut while opening a call, which is an (unterminated) call.
                self._decide(state, True, state.first)
            elif isinstance(state, _Hold):
                # No </think> ever came: reasoning ended at the held <tool_call>.
                self.state = _Content()
                for item in state.items:
                    self._handle(*item)
            else:
                break
        if isinstance(state, _Start):
            self._leave_start(state)
        elif isinstance(state, _Tail):
            self.state = _Content()
            self._read_tail(state.items)

    def completion(self, splitter: _Splitter | None = None) -> Completion:
        stop: tuple[str, ...] = () if splitter is None else splitter.stop
        return Completion(
            reasoning="".join(self.reasoning).strip() or None,
            content="".join(self.content).strip() or None,
            tool_calls=tuple(self.calls),
            unterminated=self.unterminated,
            stop=stop[0] if stop else None,
            stop_extra=stop[1:],
            spans=self._spans(splitter),
        )

    def _spans(self, splitter: _Splitter | None) -> tuple[Span, ...]:
        spans = [Span("reasoning", a, b) for a, b in self.reasoning_spans]
        spans += [Span("content", a, b) for a, b in self.content_spans]
        spans += self.call_spans
        if splitter is not None and splitter.stop:
            end = splitter.stop_start + sum(map(len, splitter.stop))
            spans.append(Span("stop", splitter.stop_start, end))
        spans.sort(key=lambda s: (s.start, s.kind != "tool_call", s.end))
        if splitter is None:
            return tuple(spans)
        placed = []
        for span in spans:
            first, last = (
                splitter.stop_tokens
                if span.kind == "stop" and splitter.stop_tokens is not None
                else splitter.token_span(span.start, span.end)
            )
            if first is None:
                placed.append(span)
            else:
                placed.append(
                    Span(span.kind, span.start, span.end, first, last, span.call_index, span.name)
                )
        return tuple(placed)
