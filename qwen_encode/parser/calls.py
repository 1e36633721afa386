"""Inside a closed call span: ``<function=NAME>`` blocks and their ``<parameter=P>`` values.

A value is spliced raw by the template (``<parameter=P>\\n{value}\\n</parameter>\\n``), so any
tag may be data. The structural reading comes first:

* A ``</parameter>`` followed, after whitespace, by ``<parameter=Q>`` ends the value, whatever Q
  is (declared or not, given before or not), when the closer or the next tag starts a line (the
  template's layout). In a block written without line breaks (its last ``</parameter>`` does
  not start a line) any such junction counts.
* A line-start ``<parameter=Q>`` with no ``</parameter>`` before it in the value also ends the
  value: the model dropped the closer, and every peer repairs it so (vLLM's
  ``test_extract_tool_calls_missing_closing_parameter_tag``).
* The last value ends at the block's last ``</parameter>``, or at ``</function>`` when that
  closer is missing.

A value holds boundary markup only where the structural reading is impossible: a complete
``<function=…>…</function>`` block quoted inside a value would leave its ``</function>`` (and
what follows it) orphaned if read as structure, so its tags are data. A parameter given twice is
one key when both values are the same text, and a ``ParseError`` naming both offsets and both
values when they differ: a host must never run either silently, nor both merged.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any, Final

from .. import markers as mk
from ..conversation import ToolCall
from ..errors import ParseError
from .values import _NO_TOOL, _convert, _Schemas, _Tool

# The tags inside a call span. They are ordinary text, not vocabulary markers, so they live here
# (markers.py holds only the atomic tokens).
_FUNCTION: Final = "<function="
_FUNCTION_END: Final = "</function>"
_PARAMETER: Final = "<parameter="
_PARAMETER_END: Final = "</parameter>"

# A tag's name runs to '>' and may not cross a line or another tag.
_TAG_NAME: Final = re.compile(r"([^<>\n]*)>")
_LAST_PARAMETER_END_RE: Final = re.compile(r"</parameter[A-Za-z0-9_-]{0,16}>$")
# Drifted closers (SGLang): "</parameter1>", or "</parameter" whose ">" never came before the
# line break and the next <parameter=.
_JUNCTION_RE: Final = re.compile(
    r"</parameter(?:[A-Za-z0-9_-]{0,16}>|(?=\s))(\s*)<parameter=([^<>\n]*)>"
)
_LINE_PARAMETER_RE: Final = re.compile(r"\n<parameter=([^<>\n]*)>")
_CLOSER_START_RE: Final = re.compile(r"</parameter")
_FUNCTION_TAG_RE: Final = re.compile(r"<function=[^<>\n]*>|</function>")
_EARLY_CLOSE_RE: Final = re.compile(r"</parameter[A-Za-z0-9_-]{0,16}>\s*</function>")
# One span may hold several function blocks; "</tool_call>" missing between two is repaired.
_NEXT_FUNCTION_RE: Final = re.compile(
    r"</parameter[A-Za-z0-9_-]{0,16}>\s*</function>"
    r"(?P<gap>\s*(?:" + re.escape(mk.TOOL_CALL_OPEN) + r"\s*)?)(?=<function=)"
)
_EMPTY_BLOCK_RE: Final = re.compile(
    r"<function=[^<>\n]*>\s*</function>(?P<gap>\s*(?:" + re.escape(mk.TOOL_CALL_OPEN) + r"\s*)?)"
)


@dataclass(frozen=True, slots=True)
class _Argument:
    """Where a value stood: ``name`` = the value ``flat[start:end]`` (after the layout)."""

    name: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Block:
    """A parsed block: the call, where it stood (``flat[start:end]``) and its values."""

    call: ToolCall
    start: int
    end: int
    arguments: tuple[_Argument, ...]


def _skip_ws_back(text: str, end: int, start: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _skip_ws(text: str, pos: int, end: int) -> int:
    while pos < end and text[pos].isspace():
        pos += 1
    return pos


def _tag(body: str, pos: int, prefix: str, base: int) -> tuple[str, int]:
    """Parse ``<function=NAME>`` / ``<parameter=NAME>`` at ``pos``; the name and the end."""
    match = _TAG_NAME.match(body, pos + len(prefix))
    name = match.group(1).strip() if match else ""
    kind = prefix[1:-1]
    if match is None or not name:
        raise ParseError(f"malformed {prefix}…> tag: expected <{kind}=NAME>", offset=base + pos)
    problem = mk.call_name_problem(name)
    if problem is not None:
        raise ParseError(f"{kind} name {name!r} {problem}", offset=base + pos)
    return name, match.end()


def _layout(start: int, end: int, flat: str) -> tuple[int, int]:
    """The value less exactly one leading and one trailing newline: the template's layout."""
    if start < end and flat[start] == "\n":
        start += 1
    if start < end and flat[end - 1] == "\n":
        end -= 1
    return start, end


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _quoted_blocks(flat: str, start: int, end: int) -> list[tuple[int, int]]:
    """The complete ``<function=…>…</function>`` blocks quoted inside values, outermost only,
    that hold a ``</parameter>`` + ``</function>``: read as structure, that would close the call
    early and orphan the rest, so the structural reading is impossible there. (A
    ``<function=…>`` in one value and a ``</function>`` in a later one, with no such close
    between them, quote nothing.)"""
    regions: list[tuple[int, int]] = []
    opened: list[int] = []
    for match in _FUNCTION_TAG_RE.finditer(flat, start, end):
        if match.group() != _FUNCTION_END:
            opened.append(match.start())
        elif opened:
            at = opened.pop()
            if not opened and _EARLY_CLOSE_RE.search(flat, at, match.end()):
                regions.append((at, match.end()))
    return regions


def _boundaries(flat: str, start: int, end: int, compact: bool) -> list[tuple[int, int, str]]:
    """Where the values between ``start`` and ``end`` are cut: (cut, start of the next value,
    its name), in order (see the module doc)."""
    regions = _quoted_blocks(flat, start, end)
    region_starts = [a for a, _ in regions]

    def quoted(pos: int) -> bool:
        k = bisect.bisect_right(region_starts, pos) - 1
        return k >= 0 and pos < regions[k][1]

    candidates: list[tuple[int, int, str, bool]] = []
    for match in _JUNCTION_RE.finditer(flat, start, end):
        line_start = flat[match.start() - 1] == "\n" or "\n" in match.group(1)
        if compact or line_start:
            candidates.append((match.start(), match.end(), match.group(2).strip(), True))
    for match in _LINE_PARAMETER_RE.finditer(flat, start - 1, end):
        candidates.append((match.start() + 1, match.end(), match.group(1).strip(), False))
    candidates.sort()
    closers = [m.start() for m in _CLOSER_START_RE.finditer(flat, start, end)]
    cuts: list[tuple[int, int, str]] = []
    value_start = start
    for cut, after, name, closed in candidates:
        if cut < value_start or quoted(cut) or mk.call_name_problem(name) is not None:
            continue
        if not closed:
            # A repair only where the value holds no </parameter> at all before the tag.
            k = bisect.bisect_left(closers, value_start)
            if k < len(closers) and closers[k] < cut:
                continue
        cuts.append((cut, after, name))
        value_start = after
    return cuts


def _parse_block(flat: str, pos: int, end: int, schemas: _Schemas, base: int) -> _Block:
    """One ``<function=NAME>…</function>`` block: ``flat[pos:end]``."""
    block_start = pos
    name, pos = _tag(flat, pos, _FUNCTION, base)
    tool = schemas.get(name, _NO_TOOL)
    last = _skip_ws_back(flat, end, pos)
    close = last - len(_FUNCTION_END)
    if close >= pos and flat.startswith(_FUNCTION_END, close):
        last = close
    else:
        close = -1  # repair: </function> missing
    pos = _skip_ws(flat, pos, last)
    if pos == last:
        if close >= 0:
            after = _skip_ws(flat, close + len(_FUNCTION_END), end)
            if after < end:
                raise ParseError(
                    "unexpected text after </function> inside <tool_call>", offset=base + after
                )
        return _Block(ToolCall(name=name), base + block_start, base + end, ())
    if not flat.startswith(_PARAMETER, pos):
        if flat.startswith(_FUNCTION_END, pos):
            after = _skip_ws(flat, pos + len(_FUNCTION_END), end)
            raise ParseError(
                "unexpected text after </function> inside <tool_call>", offset=base + after
            )
        raise ParseError(
            "unexpected text in a <function=…> block: expected <parameter=NAME> or </function>",
            offset=base + pos,
        )
    first, pos = _tag(flat, pos, _PARAMETER, base)
    value_end = last
    tail_end = _skip_ws_back(flat, last, pos)
    match = _LAST_PARAMETER_END_RE.search(flat, max(pos, tail_end - 40), tail_end)
    compact = False
    if match is not None:
        value_end = match.start()
        compact = value_end > pos and flat[value_end - 1] != "\n"
    names, starts, ends = [first], [pos], []
    for cut, after, parameter in _boundaries(flat, pos, value_end, compact):
        ends.append(cut)
        names.append(parameter)
        starts.append(after)
    ends.append(value_end)
    values = [_layout(a, b, flat) for a, b in zip(starts, ends, strict=True)]
    return _arguments(name, tool, names, values, flat, base, block_start, end)


def _arguments(
    name: str,
    tool: _Tool,
    names: list[str],
    values: list[tuple[int, int]],
    flat: str,
    base: int,
    block_start: int,
    block_end: int,
) -> _Block:
    arguments: dict[str, Any] = {}
    given: dict[str, tuple[int, int]] = {}
    places: list[_Argument] = []
    for parameter, (a, b) in zip(names, values, strict=True):
        if parameter in given:
            a0, b0 = given[parameter]
            if flat[a0:b0] == flat[a:b]:
                continue  # the same value twice: one key
            raise ParseError(
                f"parameter {parameter!r} of {name!r} is given twice with different values: "
                f"{_short(flat[a0:b0])} at offset {base + a0} and {_short(flat[a:b])} at "
                f"offset {base + a}; refusing to pick one",
                offset=base + a,
            )
        given[parameter] = (a, b)
        arguments[parameter] = _convert(flat[a:b], tool.types.get(parameter))
        places.append(_Argument(parameter, base + a, base + b))
    undeclared = tuple(p for p in arguments if tool.declared and p not in tool.types)
    call = ToolCall(name=name, arguments=arguments, undeclared=undeclared)
    return _Block(call, base + block_start, base + block_end, tuple(places))


def _parse_span(flat: str, start: int, end: int, schemas: _Schemas, base: int) -> list[_Block]:
    """The calls in a closed span's body ``flat[start:end]``; ``base`` maps to output offsets."""
    pos = _skip_ws(flat, start, end)
    if pos == end:
        raise ParseError("empty <tool_call> span: expected <function=NAME>", offset=base + pos)
    if not flat.startswith(_FUNCTION, pos):
        raise ParseError("<tool_call> span holds no <function=NAME> block", offset=base + pos)
    blocks: list[_Block] = []
    while True:
        # A block without parameters ends at its own </function>; one with parameters at the
        # first "</parameter></function>" that another <function= follows.
        empty = _EMPTY_BLOCK_RE.match(flat, pos, end)
        after = -1 if empty is None else empty.end()
        if empty is not None and (after == end or flat.startswith(_FUNCTION, after)):
            blocks.append(_parse_block(flat, pos, empty.start("gap"), schemas, base))
        else:
            match = _NEXT_FUNCTION_RE.search(flat, pos, end)
            if match is None:
                blocks.append(_parse_block(flat, pos, end, schemas, base))
                return blocks
            blocks.append(_parse_block(flat, pos, match.start("gap"), schemas, base))
            after = match.end()
        if after >= end:
            return blocks
        pos = after
