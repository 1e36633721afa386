"""The tail: everything from the first call on, read once the output ended.

Which ``</tool_call>`` (or, for a call without the wrapper, which ``</function>``) ends each
call is chosen in one backward and one forward pass over the tail's closers, linear in its
length. A reading puts every closer (``</parameter>``, ``</function>``, ``</tool_call>``) either
inside a call or in the content after it, where it is an orphan. Readings are ranked: a trailing
call left open loses to one that closes; then fewer orphans win; then fewer calls to undeclared
tools; then fewer *unbalanced* spans (whose ``</tool_call>`` is not the one matching their
``<tool_call>``, nesting counted: a value quoting whole example calls keeps them inside); then
fewer ends that need a repair (a ``</tool_call>`` not preceded by ``</parameter>``/
``<function=…>`` + ``</function>``); then the earlier end (more calls: structure wins over data).
An unwrapped block (a line-start ``<function=NAME>`` of a declared tool in content) ends at a
``</function>`` ranked the same way, or is content when none ends it. The forward pass feeds the
content it walks through a fence tracker, so a call start quoted in a fenced block after an
earlier call is text. Inside each call, ``calls`` reads the values.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, TypeAlias

from .. import markers as mk
from ..errors import ParseError
from .calls import (
    _FUNCTION,
    _FUNCTION_END,
    _PARAMETER,
    _TAG_NAME,
    _Block,
    _parse_block,
    _parse_span,
    _skip_ws,
    _skip_ws_back,
)
from .quoting import _Quotes
from .values import _Schemas

_Item: TypeAlias = tuple[bool, str, int]  # (is_marker, text, offset)
_CLOSER_RE: Final = re.compile(r"</parameter[A-Za-z0-9_-]{0,16}>|</function>")
# Before "</function>" (after whitespace), what makes a "</tool_call>" a confirmed end: the last
# value's "</parameter>". A call without parameters is confirmed only as a whole (_EMPTY_CALL_RE
# right after its own "<tool_call>"): "<function=demo></function>" quoted in a value is not.
_STRONG_END_RE: Final = re.compile(r"</parameter[A-Za-z0-9_-]{0,16}>\s*$")
_EMPTY_CALL_RE: Final = re.compile(r"\s*<function=[^<>\n]*>\s*</function>\s*")

# Events of the tail, in order of position. _START_CALL: a <tool_call> + <function= (or one cut
# off while it opened); _BLOCK: a line-start <function=NAME> of a declared tool, a call without
# the wrapper if its block completes; _TOOL_CALL_END: the </tool_call> marker; closers as text.
_START_CALL, _TOOL_CALL_END, _PARAMETER_CLOSER, _FUNCTION_CLOSER, _BLOCK = range(5)
_UNWRAPPED_RE: Final = re.compile(r"^<function=([^<>\n]*)>", re.MULTILINE)
# Before a </function> (after whitespace), what makes an unwrapped block's end confirmed: the
# last value's </parameter>, or the block's own <function=NAME> (a call without parameters).
_STRONG_BLOCK_END_RE: Final = re.compile(
    r"(?:</parameter[A-Za-z0-9_-]{0,16}>|<function=[^<>\n]*>)\s*$"
)


@dataclass(frozen=True, slots=True)
class _Part:
    """A call in the tail: ``flat[start:end]`` is the span (from ``<tool_call>``, through its
    ``</tool_call>``) or the unwrapped block (from ``<function=``, through ``</function>``);
    content resumes at ``resume``. ``wrapped``: a ``<tool_call>`` span."""

    start: int
    end: int
    resume: int
    wrapped: bool


@dataclass(frozen=True, slots=True)
class _Reading:
    parts: tuple[_Part, ...]
    unterminated: int | None  # where the trailing call the output never closed starts


def _span_ends(flat: str, events: list[tuple[int, int]], unknown: list[bool]) -> _Reading:
    """Step 1 (see above): which closer ends each call of the tail.

    ``events`` are (position, kind) in order, the first a call start (wrapped or not);
    ``unknown[i]`` says that call start ``i`` names a tool the tools list does not declare. The
    reading is found by one backward pass (the best cost of every suffix, in a call, in an
    unwrapped block or in content) and one forward. The reading that ignores ``unknown`` is
    found too: when the two differ, the output reads as a call to an undeclared tool or as that
    call quoted inside a value, and which one the model meant cannot be known (ParseError naming
    both).
    """
    count = len(events)
    strong = [False] * count
    consumes = list(range(1, count + 1))  # after a block's </function>: the next event index
    for i, (pos, kind) in enumerate(events):
        if kind == _TOOL_CALL_END:
            before = _skip_ws_back(flat, pos, 0)
            strong[i] = flat.endswith(_FUNCTION_END, 0, before) and bool(
                _STRONG_END_RE.search(
                    flat,
                    max(0, before - len(_FUNCTION_END) - 120),
                    _skip_ws_back(flat, before - len(_FUNCTION_END), 0),
                )
            )
        elif kind == _FUNCTION_CLOSER:
            before = _skip_ws_back(flat, pos, 0)
            strong[i] = bool(_STRONG_BLOCK_END_RE.search(flat, max(0, before - 200), before))
            # vLLM's missing-opening-tag case: the unwrapped block's own </tool_call> follows.
            after = pos + len(_FUNCTION_END)
            if (
                i + 1 < count
                and events[i + 1][1] == _TOOL_CALL_END
                and _skip_ws(flat, after, events[i + 1][0]) == events[i + 1][0]
            ):
                consumes[i] = i + 2
    # A call start followed by nothing but an empty function block and its </tool_call>.
    empty = [-1] * count
    for i, (pos, kind) in enumerate(events):
        if kind == _START_CALL and i + 2 < count and events[i + 2][1] == _TOOL_CALL_END:
            block = _EMPTY_CALL_RE.match(flat, pos + len(mk.TOOL_CALL_OPEN))
            if block is not None and block.end() == events[i + 2][0]:
                empty[i] = i + 2
    best = _best_reading(flat, events, strong, empty, consumes, unknown)
    if any(unknown):
        plain = _best_reading(flat, events, strong, empty, consumes, [False] * count)
        if plain != best:
            ends = [p.end for p in best.parts] + [len(flat) + 1]
            other = [p.end for p in plain.parts] + [len(flat) + 1]
            at = next((a for a, b in zip(ends, other, strict=False) if a != b), min(ends + other))
            raise ParseError(
                "ambiguous call: read as written, a call to a tool the tools list does not "
                "declare starts after the </tool_call> at offset {offset}; read otherwise, "
                "that call is text quoted inside a value of the call before it",
                offset=min(at, len(flat)) - len(mk.TOOL_CALL_CLOSE),
            )
    return best


@dataclass(slots=True)
class _Costs:
    """The backward pass: the best cost of every suffix of the events, read from event ``i``
    on while in a call (``in_call``), in an unwrapped block (``in_block``) or in content
    (``in_content``); what ending a call at closer ``i`` costs (``end_cost``) and starting one
    at ``i`` (``start_cost``); for a call start, its matching ``</tool_call>`` (``matching``)."""

    in_call: list[int]
    in_block: list[int]
    in_content: list[int]
    end_cost: list[int]
    start_cost: list[int]
    matching: list[int]
    unbalanced: int
    block_cost: int


def _costs(
    events: list[tuple[int, int]],
    strong: list[bool],
    empty: list[int],
    consumes: list[int],
    unknown: list[bool],
) -> _Costs:
    count = len(events)
    big = count + 1
    # Costs, most important first: the last call left open, orphan closers, calls to undeclared
    # tools, calls without the wrapper, unbalanced spans, repairs. A span is balanced when its
    # </tool_call> is the one that matches its <tool_call> (nesting counted): a value quoting
    # whole calls keeps them inside. An unwrapped block is a repair of the model's output, so
    # it never wins over a reading that keeps the same text inside a wrapped call's value.
    unbalanced, block_cost, unknown_cost, orphan = big, big**2, big**3, big**4
    matching = [-1] * count
    starts: list[int] = []
    for i, (_, kind) in enumerate(events):
        if kind == _START_CALL:
            starts.append(i)
        elif kind == _TOOL_CALL_END and starts:
            matching[starts.pop()] = i
    c = _Costs(
        [0] * count + [big**5],  # the output ended inside a call: not dispatched
        [0] * count + [big**6],  # an unwrapped block that never completes is no block
        [0] * (count + 1),
        [0] * count,
        [0] * count,
        matching,
        unbalanced,
        block_cost,
    )
    for i in range(count - 1, -1, -1):
        kind = events[i][1]
        c.in_call[i], c.in_block[i] = c.in_call[i + 1], c.in_block[i + 1]
        if kind == _START_CALL:
            start = c.in_call[i + 1]
            if matching[i] >= 0:
                start = min(start, c.end_cost[matching[i]])
            if empty[i] >= 0:
                start = min(start, c.in_content[empty[i] + 1])
            c.start_cost[i] = start
            c.in_content[i] = start + (unknown_cost if unknown[i] else 0)
        elif kind == _BLOCK:
            c.in_content[i] = min(c.in_block[i + 1] + block_cost, c.in_content[i + 1])
            # A block running over another block's start costs as much as that block would:
            # two blocks in a row are not read as one holding the other.
            c.in_block[i] = c.in_block[i + 1] + block_cost
        else:
            c.in_content[i] = c.in_content[i + 1] + orphan
            c.end_cost[i] = c.in_content[consumes[i]] + (0 if strong[i] else 1)
            if kind == _TOOL_CALL_END:
                c.in_call[i] = min(c.end_cost[i] + unbalanced, c.in_call[i + 1])
            elif kind == _FUNCTION_CLOSER:
                c.in_block[i] = min(c.end_cost[i], c.in_block[i + 1])
    return c


def _closes(c: _Costs, empty: list[int], i: int) -> int:
    """How the call starting at event ``i`` ends: the index of its </tool_call> when that is
    known now (its whole empty block, or its matching closer), else -1."""
    if empty[i] >= 0 and c.in_content[empty[i] + 1] == c.start_cost[i]:
        return empty[i]
    if c.matching[i] >= 0 and c.end_cost[c.matching[i]] == c.start_cost[i]:
        return c.matching[i]
    return -1


def _best_reading(
    flat: str,
    events: list[tuple[int, int]],
    strong: list[bool],
    empty: list[int],
    consumes: list[int],
    unknown: list[bool],
) -> _Reading:
    """The forward pass over the costs: which closer ends each call."""
    c = _costs(events, strong, empty, consumes, unknown)
    count = len(events)
    parts: list[_Part] = []
    quotes = _Quotes(spans=False)  # content after a call: a fenced <tool_call> is text
    seen = 0  # content fed to ``quotes`` so far
    state, opened, i = _CONTENT, 0, 0
    while i < count:
        pos, kind = events[i]
        if state == _CALL:
            if kind == _TOOL_CALL_END and c.end_cost[i] + c.unbalanced <= c.in_call[i + 1]:
                seen = pos + len(mk.TOOL_CALL_CLOSE)
                parts.append(_Part(opened, seen, seen, True))
                state = _CONTENT
                quotes.marker()
        elif state == _IN_BLOCK:
            if kind == _FUNCTION_CLOSER and c.end_cost[i] <= c.in_block[i + 1]:
                end = seen = pos + len(_FUNCTION_END)
                if consumes[i] != i + 1:
                    i = consumes[i] - 1
                    seen = events[i][0] + len(mk.TOOL_CALL_CLOSE)
                parts.append(_Part(opened, end, seen, False))
                state = _CONTENT
                quotes.marker()
        elif kind in (_START_CALL, _BLOCK):
            quotes.feed(flat[seen:pos])
            seen = pos
            # The tail's first call start was checked by the outer level (never quoted).
            if quotes.quoted() and i > 0:
                pass
            elif kind == _BLOCK:
                if c.in_block[i + 1] + c.block_cost <= c.in_content[i + 1]:
                    state, opened = _IN_BLOCK, pos
            elif (end := _closes(c, empty, i)) >= 0:
                i = end
                seen = events[i][0] + len(mk.TOOL_CALL_CLOSE)
                parts.append(_Part(pos, seen, seen, True))
                quotes.marker()
            else:
                state, opened = _CALL, pos
        i += 1
    return _Reading(tuple(parts), opened if state == _CALL else None)


# Forward-pass states.
_CONTENT, _CALL, _IN_BLOCK = 0, -1, -2


@dataclass(frozen=True, slots=True)
class _Text:
    """Content found in the tail, starting at output offset ``start``."""

    text: str
    start: int


@dataclass(frozen=True, slots=True)
class _Calls:
    """The calls of one span (or one unwrapped block), which stood at ``start:end``."""

    blocks: list[_Block]
    start: int
    end: int


_TailPart: TypeAlias = _Text | _Calls


@dataclass(frozen=True, slots=True)
class _Unterminated:
    """A trailing call the output never closed: its raw text, from output offset ``start``."""

    text: str
    start: int


def _tail_events(flat: str, items: list[_Item], schemas: _Schemas) -> list[tuple[int, int]]:
    """The tail's events (see ``_START_CALL``), in order of position."""
    base = items[0][2]
    events: list[tuple[int, int]] = []
    for index, (is_marker, text, start) in enumerate(items):
        if not is_marker:
            continue
        pos = start - base
        if index == 0:
            events.append((pos, _START_CALL))  # the call that opened the tail (perhaps cut short)
        elif text == mk.TOOL_CALL_OPEN:
            after = _skip_ws(flat, pos + len(text), len(flat))
            if flat.startswith(_FUNCTION, after) or _FUNCTION.startswith(flat[after:]):
                events.append((pos, _START_CALL))  # a call, or one cut off while it opened
        elif text == mk.TOOL_CALL_CLOSE:
            events.append((pos, _TOOL_CALL_END))
    events += [
        (m.start(), _FUNCTION_CLOSER if m.group() == _FUNCTION_END else _PARAMETER_CLOSER)
        for m in _CLOSER_RE.finditer(flat)
    ]
    declared = _unwrapped_names(schemas)
    for m in _UNWRAPPED_RE.finditer(flat):
        # The <function=NAME> of a wrapped call is that call's, not a call of its own; and a
        # block is one only in the format's shape (a parameter or its </function> next).
        body = _skip_ws(flat, m.end(), len(flat))
        if (
            m.group(1) in declared
            and flat.startswith((_PARAMETER, _FUNCTION_END), body)
            and not flat.endswith(mk.TOOL_CALL_OPEN, 0, _skip_ws_back(flat, m.start(), 0))
        ):
            events.append((m.start(), _BLOCK))
    events.sort()
    return events


def _read_tail(items: list[_Item], schemas: _Schemas) -> Iterator[_TailPart | _Unterminated | None]:
    """The tail from the first call on, in order: content (``_Text``) and calls (``_Calls``),
    and last the ``_Unterminated`` call or None. A span is parsed only when its part is taken
    (``parse_tool_call`` stops at the first call). A ``</think>`` here is content: the template
    renders content verbatim, so dropping it would lose the model's words."""
    flat = "".join(text for _, text, _ in items)
    base = items[0][2]
    events = _tail_events(flat, items, schemas)
    unknown = [False] * len(events)
    if schemas:
        for i, (pos, kind) in enumerate(events):
            after = _skip_ws(flat, pos + len(mk.TOOL_CALL_OPEN), len(flat))
            if kind == _START_CALL and flat.startswith(_FUNCTION, after):
                name = _TAG_NAME.match(flat, after + len(_FUNCTION))
                unknown[i] = name is not None and name.group(1).strip() not in schemas
    try:
        reading = _span_ends(flat, events, unknown)
    except ParseError as error:
        raise ParseError(
            error.reason.replace("{offset}", str(base + error.offset)), offset=base + error.offset
        ) from None
    resume = 0
    for part in reading.parts:
        if part.start > resume:
            yield _Text(flat[resume : part.start], base + resume)
        if part.wrapped:
            body = part.start + len(mk.TOOL_CALL_OPEN)
            close = part.end - len(mk.TOOL_CALL_CLOSE)
            blocks = _parse_span(flat, body, close, schemas, base)
            yield _Calls(blocks, base + part.start, base + part.end)
        else:
            try:
                block = _parse_block(flat, part.start, part.end, schemas, base)
            except ParseError:
                # Without the wrapper nothing says it is a call: a block that does not parse
                # is the text it is, never an error and never a guess.
                if part.resume > part.start:
                    yield _Text(flat[part.start : part.resume], base + part.start)
                resume = part.resume
                continue
            # Through its own </tool_call> when one follows (vLLM's missing-opening-tag case).
            yield _Calls([block], base + part.start, base + part.resume)
        resume = part.resume
    end = len(flat) if reading.unterminated is None else reading.unterminated
    if end > resume:
        yield _Text(flat[resume:end], base + resume)
    if reading.unterminated is None:
        yield None
    else:
        yield _Unterminated(flat[reading.unterminated :], base + reading.unterminated)


def _unwrapped_names(schemas: _Schemas) -> frozenset[str]:
    """The declared tools a call without the ``<tool_call>`` wrapper may name: those whose
    ``<function=NAME>`` the format can carry."""
    return frozenset(name for name in schemas if mk.call_name_problem(name) is None)
