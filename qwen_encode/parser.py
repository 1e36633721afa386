"""Qwen 3.8 completions -> reasoning, content and tool calls, in one pass, batch or streaming.

The grammar is the one the checkpoint's template writes for an assistant turn::

    <think>\\n{reasoning}\\n</think>\\n\\n{content}<tool_call>\\n<function=NAME>\\n
    <parameter=P>\\n{value}\\n</parameter>\\n</function>\\n</tool_call>

How it is read:

* Two levels. The outer level sees only the protocol's *markers* (``<think>``, ``</think>``,
  ``<tool_call>``, ``</tool_call>``) and text between them. For a string completion every
  spelling of a marker is one; for token IDs only the marker's atomic ID is (a marker spelled out
  in ordinary tokens is prose), so the outer level works on ``(is_marker, text)`` pieces, never on
  one flat string. The inner level reads the calls, where ``<function=``, ``<parameter=`` and
  their closers are plain text (they are not atomic tokens).
* Reasoning ends at the first ``</think>``; with none at all, at a ``<tool_call>`` that is
  followed by optional whitespace and ``<function=`` and is not quoted in a Markdown fence or an
  inline code span (``_Quotes``); otherwise the whole output is reasoning (truncated). Tool
  markup inside a reasoning span that is later closed stays reasoning and is never dispatched.
* After reasoning, a ``<tool_call>`` followed by optional whitespace and ``<function=``, outside
  a fenced block, opens the first call. A ``<tool_call>`` not followed by ``<function=`` is text
  (a bare mention), unless a ``</tool_call>`` closes it before the next ``<tool_call>``: then it
  was a span that holds no call, a ``ParseError``. A stray ``</think>`` in content is dropped.
* A call without the wrapper (vLLM and llama.cpp dispatch it): a line-start
  ``<function=NAME>`` of a declared tool in content, outside a fence, whose block completes
  (``</function>``, and its ``</tool_call>`` if that follows) and parses. Content is held back
  only while it may still be such a block's start: a prefix of the tag, then whitespace and a
  prefix of ``<parameter=`` or ``</function>`` (``_Machine._content_text``); from there on it is
  part of the tail, and a block that never completes is content.
* Everything from the first call on (the *tail*) is read when the output ends, because a value
  is data until the rest of the output confirms where it ends (issue 10; the rules are at
  ``_span_ends`` and ``_parse_span``). A call the output never closed is not dispatched: its raw
  text is ``Completion.unterminated``.
* Content is all text outside reasoning and call spans (before, between and after calls),
  concatenated; reasoning and content are then trimmed like the template trims them
  (``str.strip``), and empty becomes None.
* Values are typed by the tool's JSON schema where it declares the parameter, else "JSON when it
  parses, else the string" (``typed_parameter_value``); see ``_convert``.

One state machine (``_Machine``) serves both ``parse_completion`` and ``StreamParser``, so both
give the same result by construction. Before the first call it never rescans: every piece of
input is looked at once, plus a bounded look-ahead after ``<tool_call>`` (whitespace and the 10
characters of ``<function=``), a held-back partial marker (at most 11 characters), with a tools
list the start of a possible unwrapped call (a tag of a declared name, whitespace appended in
O(1), 11 characters after it) and, for token IDs, at most six tokens of an incomplete or invalid
UTF-8 sequence. Two holds are forced by the
rules themselves: a ``<function=`` call inside a reasoning span that has not closed is reasoning
or a call depending on whether a ``</think>`` comes later; and the tail is read once the output
ends. Both are appended to in O(1) per piece and read once, in linear time.
"""

from __future__ import annotations

import bisect
import json
import math
import operator
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeAlias

from . import markers as mk
from .conversation import ToolCall, Turn
from .errors import ParseError, PromptError, TokenIdError, shown

__all__ = [
    "Completion",
    "ContentDelta",
    "MarkerEncoder",
    "ReasoningDelta",
    "StreamEvent",
    "StreamParser",
    "ToolCallEvent",
    "parse_completion",
    "parse_tool_call",
    "typed_parameter_value",
]

# The markers the outer level acts on. Every other added token is text to the parser.
_STRUCTURAL: Final = (mk.THINK_OPEN, mk.THINK_CLOSE, mk.TOOL_CALL_OPEN, mk.TOOL_CALL_CLOSE)
_MARKER_RE: Final = re.compile("|".join(re.escape(m) for m in _STRUCTURAL))
_LONGEST_MARKER: Final = max(len(m) for m in _STRUCTURAL)

# The tags inside a call span. They are ordinary text, not vocabulary markers, so they live here
# (markers.py holds only the atomic tokens).
_FUNCTION: Final = "<function="
_FUNCTION_END: Final = "</function>"
_PARAMETER: Final = "<parameter="
_PARAMETER_END: Final = "</parameter>"
# What may follow a real </parameter> (after whitespace); any other </parameter> is data.
_AFTER_PARAMETER: Final = (_PARAMETER, _FUNCTION_END, _FUNCTION)

_WS: Final = re.compile(r"\s*")
# A tag's name runs to '>' and may not cross a line or another tag.
_TAG_NAME: Final = re.compile(r"([^<>\n]*)>")
_JSON_INT: Final = re.compile(r"-?(?:0|[1-9][0-9]*)")
# With a schema saying integer, "007" is 7 (every peer reads it so; JSON alone would not).
_LOOSE_INT: Final = re.compile(r"-?[0-9]+")
#: How deep a tool schema (anyOf/oneOf branches) or a JSON value may nest before the parser stops
#: following it: a deeper schema branch constrains nothing (the schema-free rule applies), a
#: deeper JSON value stays the string it is. It bounds the stack, whatever the input.
MAX_DEPTH: Final = 64
_JSON_SCAN: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_JSON_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_REPLACEMENT: Final = "\ufffd"


# --------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True, slots=True)
class Completion:
    """A parsed completion.

    ``reasoning`` and ``content`` are trimmed (``str.strip``, as the template trims them), None
    when empty. ``tool_calls`` are the dispatched calls in order; their ``id`` is None (the
    protocol carries no ids and the parser invents none: assign your own). ``unterminated`` is the
    raw text, from its ``<tool_call>`` on, of a trailing call span the model never closed (output
    cut off): it is not dispatched and not part of ``content``.
    """

    reasoning: str | None = None
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    unterminated: str | None = None

    def to_turn(self) -> Turn:
        """The assistant turn to append to the conversation history. An ``unterminated`` span is
        left out: it was never a call, and rendered back as content it would be prose."""
        return Turn(
            role="assistant",
            content=self.content,
            reasoning=self.reasoning,
            tool_calls=self.tool_calls,
        )

    def to_message(self) -> dict[str, Any]:
        """OpenAI-style message dict (``to_turn().to_message()``)."""
        return self.to_turn().to_message()


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """New reasoning text, untrimmed."""

    text: str


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """New content text, untrimmed."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """A call whose span closed and parsed; ``index`` is its position in ``tool_calls``."""

    index: int
    call: ToolCall


StreamEvent: TypeAlias = ReasoningDelta | ContentDelta | ToolCallEvent


class MarkerEncoder(Protocol):
    """What the parser needs of an encoder to read token IDs.

    ``marker_ids`` maps each marker string to its atomic ID; ``decode`` turns ordinary IDs into
    text. ``decode`` must decode the tokens' concatenated bytes as UTF-8, replacing each maximal
    invalid subsequence (and an incomplete trailing one) with one U+FFFD, as byte-level BPE
    decoders do (tokenizers' ``from_utf8_lossy``, Python's ``errors="replace"``): the streaming
    splitter relies on it to cut runs only where the decoding provably restarts.

    Optionally, ``vocab_size`` (an int) bounds the IDs: an ID outside ``0..vocab_size-1`` is a
    ``PromptError`` naming its position. The library's ``Encoder`` is bounded by its vocabulary
    report without it.
    """

    @property
    def marker_ids(self) -> Mapping[str, int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


# --------------------------------------------------------------------------------------------
# Parameter values


class _NoFit:
    """Sentinel: the text has no reading of the requested type."""


_NO_FIT: Final = _NoFit()


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        # 1e400 would become inf, which JSON cannot carry (json.dumps writes a bare Infinity).
        raise ValueError("not a finite number")
    return value


def _reject_constant(name: str) -> Any:
    # json.loads accepts NaN, Infinity and -Infinity by default; they are not JSON.
    raise ValueError(f"{name} is not JSON")


def _too_deep(text: str) -> bool:
    """Whether JSON text nests arrays/objects deeper than ``MAX_DEPTH`` (strings skipped)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth = 0
    for match in _JSON_SCAN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif token in "]}":
            depth -= 1
    return False


def _strict_json(text: str) -> Any:
    """``json.loads`` restricted to real JSON; ``_NO_FIT`` when the text is not JSON (or nests
    deeper than ``MAX_DEPTH``, or holds an integer past Python's digit limit)."""
    if _too_deep(text):
        return _NO_FIT
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        return _NO_FIT


def typed_parameter_value(text: str) -> Any:
    """The schema-free reading of a parameter value: JSON when it parses, else the string.

    Strict JSON: ``NaN``/``Infinity`` and numbers that overflow to infinity stay strings, and
    integers keep every digit.
    """
    if not isinstance(text, str):
        raise PromptError(
            f"expected the value's text (str), got {type(text).__name__}", field="text"
        )
    value = _strict_json(text)
    return text if value is _NO_FIT else value


# Common non-JSON-Schema type names models and hand-written schemas use.
_TYPE_NAMES: Final[Mapping[str, str]] = {
    "string": "string",
    "str": "string",
    "integer": "integer",
    "int": "integer",
    "number": "number",
    "float": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "object": "object",
    "dict": "object",
    "array": "array",
    "list": "array",
    "null": "null",
}

_Types: TypeAlias = frozenset[str] | None  # None: the schema does not constrain the type


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return "string"


def _schema_types(schema: Any, depth: int = 0) -> _Types:
    """The JSON types a parameter schema allows; None when it says nothing about type (or nests
    deeper than ``MAX_DEPTH``: a self-referencing schema is cut there)."""
    if not isinstance(schema, Mapping) or depth >= MAX_DEPTH:
        return None
    types: set[str] = set()
    declared = False
    kind = schema.get("type")
    if isinstance(kind, str):
        kind = [kind]
    if isinstance(kind, list | tuple):
        for name in kind:
            if isinstance(name, str):
                declared = True
                # An unknown name ("datetime", "text", "enum") is a kind of string to whoever
                # wrote it; the raw text is the safe reading (mlx-lm PR 1310: never crash on it).
                types.add(_TYPE_NAMES.get(name.strip().lower(), "string"))
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list | tuple):
            for branch in branches:
                sub = _schema_types(branch, depth + 1)
                if sub is None:
                    # An unconstrained branch ({} or a $ref): any JSON value may be meant.
                    return None
                declared = True
                types |= sub
    if not declared:
        if "enum" in schema and isinstance(schema["enum"], list | tuple):
            types = {_json_type(v) for v in schema["enum"]}
            declared = bool(types)
        elif "const" in schema:
            types, declared = {_json_type(schema["const"])}, True
        elif "properties" in schema:
            types, declared = {"object"}, True
        elif "items" in schema:
            types, declared = {"array"}, True
    if not declared:
        return None
    if schema.get("nullable") is True:  # OpenAPI 3.0 spelling of "or null"
        types.add("null")
    return frozenset(types)


def _as_integer(text: str) -> Any:
    # Only digits: "5.0" and "1e3" are how a float is written, and a value that is not written
    # as the schema's type stays the text (issue 10: floats stay floats; vLLM's int("5.0")
    # fails and keeps the string too). Leading zeros are fine: "007" is 7.
    if _LOOSE_INT.fullmatch(text):
        try:
            return int(text)  # exact, however many digits (up to Python's digit limit)
        except ValueError:
            return _NO_FIT
    return _NO_FIT


def _as_number(text: str) -> Any:
    if _LOOSE_INT.fullmatch(text):
        return _as_integer(text)  # big integers stay exact instead of going through float
    if _JSON_NUMBER.fullmatch(text):
        try:
            return _finite_float(text)
        except ValueError:
            return _NO_FIT
    return _NO_FIT


def _convert(text: str, types: _Types) -> Any:
    """A parameter's value under its schema's types.

    Non-string readings are tried first, so in a string|integer union "5" is 5; the raw text is
    the answer when the schema allows strings or when nothing else fits (a value that does not
    fit stays a string: never a silent ``false``, never ``None`` unless the schema allows null).
    """
    if types is None:
        return typed_parameter_value(text)
    token = text.strip()
    if "null" in types and token == "null":
        return None
    if "boolean" in types:
        lowered = token.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
    if "integer" in types:
        value = _as_integer(token)
        if value is not _NO_FIT:
            return value
    if "number" in types:
        value = _as_number(token)
        if value is not _NO_FIT:
            return value
    if "object" in types or "array" in types:
        value = _strict_json(token)
        if (isinstance(value, dict) and "object" in types) or (
            isinstance(value, list) and "array" in types
        ):
            return value
    return text


def _schema_lookup(tools: Any) -> _Schemas:
    """Per function name, its parameters' allowed types and order; built once per parser.

    ``tools`` is the OpenAI tools list (``{"type": "function", "function": {...}}``), the bare
    ``{"name", "parameters"}`` form, or the JSON text of either list. A malformed list is the
    caller's error: ``PromptError`` naming ``tools`` or ``tools[i]``.
    """
    if tools is None:
        return {}
    if isinstance(tools, str):
        tools = _tools_json(tools, "tools")
    if isinstance(tools, Mapping | str | bytes | bytearray) or not isinstance(tools, Iterable):
        raise PromptError(
            f"expected a list of tool objects, got {type(tools).__name__}", field="tools"
        )
    lookup: dict[str, _Tool] = {}
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if isinstance(tool, str):
            tool = _tools_json(tool, where)
        if not isinstance(tool, Mapping):
            raise PromptError(f"expected a tool object, got {type(tool).__name__}", field=where)
        function = tool.get("function", tool)
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise PromptError("the tool has no function name (a string)", field=where)
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
        if not isinstance(properties, Mapping):
            properties = {}
        names = [str(p) for p in properties]
        # First definition wins, as the model reads the tools list top-down.
        lookup.setdefault(
            function["name"],
            _Tool(
                types={str(p): _schema_types(s) for p, s in properties.items()},
                order={name: index for index, name in enumerate(names)},
                declared=bool(names),
            ),
        )
    return lookup


def _tools_json(text: str, where: str) -> Any:
    if _too_deep(text):
        raise PromptError(f"the JSON nests deeper than {MAX_DEPTH} levels", field=where)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise PromptError(f"not valid JSON ({error})", field=where) from None


# --------------------------------------------------------------------------------------------
# Inner level: the calls after the first <tool_call> + <function=, read once the output ended
#
# A value is spliced raw by the template, so every closer may be data. The reading is chosen in
# two steps, each linear in the tail's length:
#
# 1. Span ends (``_span_ends``): which ``</tool_call>`` closes each call. A reading puts every
#    closer (``</parameter>``, ``</function>``, ``</tool_call>``) either inside a call or in the
#    content after it, where it is an orphan. Readings are ranked: a trailing call left open
#    loses to one that closes; then fewer orphans win; then fewer calls to undeclared tools;
#    then fewer *unbalanced* spans (whose ``</tool_call>`` is not the one matching their
#    ``<tool_call>``, nesting counted: a value quoting whole example calls keeps them inside);
#    then fewer ends that need a repair (a ``</tool_call>`` not preceded by ``</parameter>``/
#    ``<function=…>`` + ``</function>``); then the earlier end (more calls: structure wins over
#    data). An unwrapped block (a line-start ``<function=NAME>`` of a declared tool in content)
#    ends at a ``</function>`` ranked the same way, or is content when none ends it. The forward
#    pass feeds the content it walks through a fence tracker, so a call start quoted in a fenced
#    block after an earlier call is text.
# 2. Parameters (``_parse_span``): inside one closed span, ``</parameter>`` + ``<parameter=Q>``
#    is a junction when the tool can take Q (declared when the tool has a schema, not the first
#    parameter, a name the format can carry). Each name is given once: a name with one junction
#    takes it; a name with several takes the one that keeps the schema's parameter order; then
#    the one whose reading leaves the fewest unbalanced tags in the values (``_Balance``: a value
#    holding a complete example call keeps it whole). When that does not single one out either,
#    both readings render to the same text: ParseError naming both offsets.

_LAST_PARAMETER_END_RE: Final = re.compile(r"</parameter[A-Za-z0-9_-]{0,16}>$")
_CLOSER_RE: Final = re.compile(r"</parameter[A-Za-z0-9_-]{0,16}>|</function>")
# Drifted closers (SGLang): "</parameter1>", or "</parameter" whose ">" never came before the
# line break and the next <parameter=.
_JUNCTION_RE: Final = re.compile(
    r"</parameter(?:[A-Za-z0-9_-]{0,16}>|(?=\s))\s*<parameter=([^<>\n]*)>"
)
_LINE_JUNCTION_RE: Final = re.compile(r"\n<parameter=([^<>\n]*)>")
# One span may hold several function blocks; "</tool_call>" missing between two is repaired.
_NEXT_FUNCTION_RE: Final = re.compile(
    r"</parameter[A-Za-z0-9_-]{0,16}>\s*</function>"
    r"(?P<gap>\s*(?:" + re.escape(mk.TOOL_CALL_OPEN) + r"\s*)?)(?=<function=)"
)
_EMPTY_BLOCK_RE: Final = re.compile(
    r"<function=[^<>\n]*>\s*</function>(?P<gap>\s*(?:" + re.escape(mk.TOOL_CALL_OPEN) + r"\s*)?)"
)
# Before "</function>" (after whitespace), what makes a "</tool_call>" a confirmed end: the last
# value's "</parameter>". A call without parameters is confirmed only as a whole (_EMPTY_CALL_RE
# right after its own "<tool_call>"): "<function=demo></function>" quoted in a value is not.
_STRONG_END_RE: Final = re.compile(r"</parameter[A-Za-z0-9_-]{0,16}>\s*$")
_EMPTY_CALL_RE: Final = re.compile(r"\s*<function=[^<>\n]*>\s*</function>\s*")


def _skip_ws_back(text: str, end: int, start: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _skip_ws(text: str, pos: int, end: int) -> int:
    while pos < end and text[pos].isspace():
        pos += 1
    return pos


@dataclass(frozen=True, slots=True)
class _Tool:
    types: Mapping[str, _Types]
    order: Mapping[str, int]  # the schema's parameter order
    declared: bool  # the schema lists properties: only those are parameters


_NO_TOOL: Final = _Tool({}, {}, False)
_Schemas: TypeAlias = Mapping[str, _Tool]


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


def _layout(value: str) -> str:
    """Less exactly one leading and one trailing newline: the template's layout."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _junctions(
    flat: str, start: int, end: int, first: str, tool: _Tool, base: int, repair: bool
) -> list[tuple[int, int, str]]:
    """The structural ``</parameter>`` + ``<parameter=Q>`` junctions between ``start`` and
    ``end``, as (start, end of the tag, Q); ``repair``: the block has no ``</parameter>``."""
    pattern = _JUNCTION_RE
    if repair:
        # No </parameter> at all: the model dropped them, a line-start <parameter= is the repair.
        pattern = _LINE_JUNCTION_RE
    by_name: dict[str, list[tuple[int, int, str]]] = {}
    for match in pattern.finditer(flat, start, end):
        name = match.group(1).strip()
        if name == first or mk.call_name_problem(name) is not None:
            continue
        if tool.declared and name not in tool.types:
            continue
        by_name.setdefault(name, []).append((match.start(), match.end(), name))
    chosen = [places[0] for places in by_name.values() if len(places) == 1]
    balance: _Balance | None = None
    for name, places in by_name.items():
        if len(places) == 1:
            continue
        fits = places
        if name in tool.order:
            rank = tool.order[name]
            before = [p for p, _, n in chosen if tool.order.get(n, rank) < rank]
            after = [p for p, _, n in chosen if tool.order.get(n, rank) > rank]
            low, high = max(before, default=-1), min(after, default=end)
            if tool.order.get(first, -1) < rank:
                fits = [place for place in places if low < place[0] < high]
        if len(fits) > 1:
            balance = balance or _Balance(flat, start, end)
            fits = balance.best(fits, chosen)
        if len(fits) != 1:
            a, b = (fits or places)[:2]
            raise ParseError(
                f"ambiguous call: parameter {name!r} may start at offset {base + a[0]} or at "
                f"offset {base + b[0]}; the template writes both readings as this same text "
                f"(one has {name!r} = {_short(_layout(flat[a[1] : b[0]]))}, the other keeps "
                "that text inside the parameter before it)",
                offset=base + a[0],
            )
        chosen.append(fits[0])
    chosen.sort()
    return chosen


# The call format's tags, for telling a quoted example from the real structure: an example
# quoted in a value holds its tags balanced (each closer after its opener).
_MARKUP_RE: Final = re.compile(
    r"(<tool_call>|<function=|<parameter=)|</tool_call>|</function>|</parameter[A-Za-z0-9_-]{0,16}>"
)


class _Balance:
    """Tells a quoted example from the real structure: an example quoted in a value holds its
    tags balanced (each closer after its opener, every opener closed). Of several junctions that
    may start one parameter, ``best`` keeps those whose reading leaves the fewest unbalanced tags
    in the values, so a value holding a complete example call keeps it whole.

    Linear: the block's tags are found once; each candidate's value is scanned once from each
    side. The scans of one block are capped at a few times its tag count; past that the
    candidates are left as they are (then ``_junctions`` raises the ambiguity, never guesses).
    """

    def __init__(self, flat: str, start: int, end: int) -> None:
        self.tags = [
            (m.start(), m.group(1) is not None) for m in _MARKUP_RE.finditer(flat, start, end)
        ]
        self.positions = [pos for pos, _ in self.tags]
        self.start, self.end = start, end
        self.budget = 4 * len(self.tags) + 64

    def best(
        self, fits: list[tuple[int, int, str]], chosen: list[tuple[int, int, str]]
    ) -> list[tuple[int, int, str]]:
        bounds = sorted(chosen)
        starts = [a for a, _, _ in bounds]
        groups: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
        for candidate in fits:
            # The value that holds the candidate when the candidate is data.
            k = bisect.bisect_left(starts, candidate[0])
            low = bounds[k - 1][1] if k else self.start
            high = bounds[k][0] if k < len(bounds) else self.end
            groups.setdefault((low, high), []).append(candidate)
        delta: dict[int, int] = {}
        for (low, high), members in groups.items():
            first = bisect.bisect_left(self.positions, low)
            last = bisect.bisect_left(self.positions, high)
            self.budget -= 2 * (last - first)
            if self.budget < 0:
                return fits
            tags = self.tags[first:last]
            members.sort()
            whole = _running_imbalance(tags, [high], forward=True)[0]
            left = _running_imbalance(tags, [c[0] for c in members], forward=True)
            right = _running_imbalance(tags, [c[1] for c in members], forward=False)
            for candidate, a, b in zip(members, left, right, strict=True):
                delta[candidate[0]] = a + b - whole
        least = min(delta.values())
        return [c for c in fits if delta[c[0]] == least]


def _running_imbalance(tags: list[tuple[int, bool]], cuts: list[int], forward: bool) -> list[int]:
    """For each cut (ascending), how unbalanced the tags before it (``forward``) or from it on
    are: closers without their opener plus openers never closed. One pass; matching one kind of
    bracket counts the same read from either side."""
    out = [0] * len(cuts)
    depth = orphans = 0
    order = range(len(cuts)) if forward else range(len(cuts) - 1, -1, -1)
    stream = iter(tags if forward else reversed(tags))
    pending = next(stream, None)
    for k in order:
        while pending is not None and (pending[0] < cuts[k] if forward else pending[0] >= cuts[k]):
            if pending[1] == forward:
                depth += 1
            elif depth:
                depth -= 1
            else:
                orphans += 1
            pending = next(stream, None)
        out[k] = orphans + depth
    return out


def _parse_block(flat: str, pos: int, end: int, schemas: _Schemas, base: int) -> ToolCall:
    """One ``<function=NAME>…</function>`` block: ``flat[pos:end]``."""
    name, pos = _tag(flat, pos, _FUNCTION, base)
    tool = schemas.get(name, _NO_TOOL)
    last = _skip_ws_back(flat, end, pos)
    close = last - len(_FUNCTION_END)
    if close >= pos and flat.startswith(_FUNCTION_END, close):
        last = close
    else:
        close = -1  # repair: </function> missing
    pos = _skip_ws(flat, pos, last)
    arguments: dict[str, Any] = {}
    if pos == last:
        if close >= 0:
            after = _skip_ws(flat, close + len(_FUNCTION_END), end)
            if after < end:
                raise ParseError(
                    "unexpected text after </function> inside <tool_call>", offset=base + after
                )
        return ToolCall(name=name, arguments=arguments)
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
    if match is not None:
        value_end = match.start()
    names, starts, ends = [first], [pos], []
    repair = match is None and flat.find("</parameter", pos, value_end) < 0
    for j_start, j_end, q in _junctions(flat, pos, value_end, first, tool, base, repair):
        ends.append(j_start)
        names.append(q)
        starts.append(j_end)
    ends.append(value_end)
    for parameter, a, b in zip(names, starts, ends, strict=True):
        arguments[parameter] = _convert(_layout(flat[a:b]), tool.types.get(parameter))
    return ToolCall(name=name, arguments=arguments)


def _parse_span(flat: str, start: int, end: int, schemas: _Schemas, base: int) -> list[ToolCall]:
    """The calls in a closed span's body ``flat[start:end]``; ``base`` maps to output offsets."""
    pos = _skip_ws(flat, start, end)
    if pos == end:
        raise ParseError("empty <tool_call> span: expected <function=NAME>", offset=base + pos)
    if not flat.startswith(_FUNCTION, pos):
        raise ParseError("<tool_call> span holds no <function=NAME> block", offset=base + pos)
    calls: list[ToolCall] = []
    while True:
        # A block without parameters ends at its own </function>; one with parameters at the
        # first "</parameter></function>" that another <function= follows.
        empty = _EMPTY_BLOCK_RE.match(flat, pos, end)
        after = -1 if empty is None else empty.end()
        if empty is not None and (after == end or flat.startswith(_FUNCTION, after)):
            calls.append(_parse_block(flat, pos, empty.start("gap"), schemas, base))
        else:
            match = _NEXT_FUNCTION_RE.search(flat, pos, end)
            if match is None:
                calls.append(_parse_block(flat, pos, end, schemas, base))
                return calls
            calls.append(_parse_block(flat, pos, match.start("gap"), schemas, base))
            after = match.end()
        if after >= end:
            return calls
        pos = after


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


def _best_reading(
    flat: str,
    events: list[tuple[int, int]],
    strong: list[bool],
    empty: list[int],
    consumes: list[int],
    unknown: list[bool],
) -> _Reading:
    count = len(events)
    big = count + 1
    # Costs, most important first: the last call left open, orphan closers, calls to undeclared
    # tools, calls without the wrapper, unbalanced spans, repairs. A span is balanced when its
    # </tool_call> is the one that matches its <tool_call> (nesting counted): a value quoting
    # whole calls keeps them inside. An unwrapped block is a repair of the model's output, so
    # it never wins over a reading that keeps the same text inside a wrapped call's value.
    unbalanced = big
    block_cost = big**2
    unknown_cost = big**3
    orphan = big**4
    open_call = big**5
    never = big**6  # an unwrapped block that never completes is no block
    matching = [-1] * count  # for a call start, the index of the </tool_call> that matches it
    starts: list[int] = []
    for i, (_, kind) in enumerate(events):
        if kind == _START_CALL:
            starts.append(i)
        elif kind == _TOOL_CALL_END and starts:
            matching[starts.pop()] = i
    in_call = [0] * (count + 1)
    in_block = [0] * (count + 1)
    in_content = [0] * (count + 1)
    in_call[count] = open_call  # the output ended inside a call: not dispatched
    in_block[count] = never
    end_cost = [0] * count
    start_cost = [0] * count
    for i in range(count - 1, -1, -1):
        kind = events[i][1]
        in_call[i], in_block[i] = in_call[i + 1], in_block[i + 1]
        if kind == _START_CALL:
            start = in_call[i + 1]
            if matching[i] >= 0:
                start = min(start, end_cost[matching[i]])
            if empty[i] >= 0:
                start = min(start, in_content[empty[i] + 1])
            start_cost[i] = start
            in_content[i] = start + (unknown_cost if unknown[i] else 0)
        elif kind == _BLOCK:
            in_content[i] = min(in_block[i + 1] + block_cost, in_content[i + 1])
            # A block running over another block's start costs as much as that block would:
            # two blocks in a row are not read as one holding the other.
            in_block[i] = in_block[i + 1] + block_cost
        else:
            in_content[i] = in_content[i + 1] + orphan
            end_cost[i] = in_content[consumes[i]] + (0 if strong[i] else 1)
            if kind == _TOOL_CALL_END:
                in_call[i] = min(end_cost[i] + unbalanced, in_call[i + 1])
            elif kind == _FUNCTION_CLOSER:
                in_block[i] = min(end_cost[i], in_block[i + 1])

    def closes(i: int) -> int:
        """How the call starting at event ``i`` ends: the index of its </tool_call> when that
        is known now (its whole empty block, or its matching closer), else -1."""
        if empty[i] >= 0 and in_content[empty[i] + 1] == start_cost[i]:
            return empty[i]
        if matching[i] >= 0 and end_cost[matching[i]] == start_cost[i]:
            return matching[i]
        return -1

    parts: list[_Part] = []
    quotes = _Quotes(spans=False)  # content after a call: a fenced <tool_call> is text
    seen = 0  # content fed to ``quotes`` so far
    state, opened, i = _CONTENT, 0, 0
    while i < count:
        pos, kind = events[i]
        if state == _CALL:
            if kind == _TOOL_CALL_END and end_cost[i] + unbalanced <= in_call[i + 1]:
                seen = pos + len(mk.TOOL_CALL_CLOSE)
                parts.append(_Part(opened, seen, seen, True))
                state = _CONTENT
                quotes.marker()
        elif state == _IN_BLOCK:
            if kind == _FUNCTION_CLOSER and end_cost[i] <= in_block[i + 1]:
                end = pos + len(_FUNCTION_END)
                seen = end
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
            elif kind == _START_CALL:
                end = closes(i)
                if end >= 0:
                    i = end
                    seen = events[i][0] + len(mk.TOOL_CALL_CLOSE)
                    parts.append(_Part(pos, seen, seen, True))
                    quotes.marker()
                else:
                    state, opened = _CALL, pos
            elif in_block[i + 1] + block_cost <= in_content[i + 1]:
                state, opened = _IN_BLOCK, pos
        i += 1
    return _Reading(tuple(parts), opened if state == _CALL else None)


_CALL, _IN_BLOCK = -1, -2  # forward-pass states beside _CONTENT


def _read_tail(items: list[_Item], schemas: _Schemas) -> Iterator[tuple[str, Any]]:
    """The tail from the first call on: ("content", text), ("calls", [ToolCall…]) and last
    ("unterminated", raw text or None), in order; a span is parsed only when its part is taken
    (``parse_tool_call`` stops at the first call)."""
    flat = "".join(text for _, text, _ in items)
    base = items[0][2]
    events: list[tuple[int, int]] = []
    drop: list[tuple[int, int]] = []  # stray </think> markers: never content
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
        elif text == mk.THINK_CLOSE:
            drop.append((pos, pos + len(text)))
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
    drops = iter(drop)
    pending_drop = next(drops, None)

    def content(a: int, b: int) -> str:
        nonlocal pending_drop
        pieces = []
        while pending_drop is not None and pending_drop[0] < b:
            if pending_drop[0] >= a:
                pieces.append(flat[a : pending_drop[0]])
                a = pending_drop[1]
            pending_drop = next(drops, None)
        pieces.append(flat[a:b])
        return "".join(pieces)

    resume = 0
    for part in reading.parts:
        text = content(resume, part.start)
        if text:
            yield ("content", text)
        if part.wrapped:
            body = part.start + len(mk.TOOL_CALL_OPEN)
            close = part.end - len(mk.TOOL_CALL_CLOSE)
            yield ("calls", _parse_span(flat, body, close, schemas, base))
        else:
            try:
                call = _parse_block(flat, part.start, part.end, schemas, base)
            except ParseError:
                # Without the wrapper nothing says it is a call: a block that does not parse
                # is the text it is, never an error and never a guess.
                text = content(part.start, part.resume)
                if text:
                    yield ("content", text)
                resume = part.resume
                continue
            yield ("calls", [call])
        resume = part.resume
    end = len(flat) if reading.unterminated is None else reading.unterminated
    text = content(resume, end)
    if text:
        yield ("content", text)
    unterminated = None if reading.unterminated is None else flat[reading.unterminated :]
    yield ("unterminated", unterminated)


def _unwrapped_names(schemas: _Schemas) -> frozenset[str]:
    """The declared tools a call without the ``<tool_call>`` wrapper may name: those whose
    ``<function=NAME>`` the format can carry."""
    return frozenset(name for name in schemas if mk.call_name_problem(name) is None)


# --------------------------------------------------------------------------------------------
# Outer level: markers and text, one piece at a time

_START, _REASONING, _HOLD, _CONTENT, _TAIL = range(5)
_FUNCTION_LEN: Final = len(_FUNCTION)

_Item: TypeAlias = tuple[bool, str, int]  # (is_marker, text, offset)
_FENCE_LINE: Final = re.compile(r" {0,3}(```|~~~)")
_FENCE_PREFIX: Final = re.compile(r" {0,3}(?:`{0,2}|~{0,2})")
_BACKTICKS: Final = re.compile(r"`+")


class _FirstCall(Exception):
    """Internal: ``parse_tool_call`` has what it wants."""


class _Quotes:
    """Whether the text so far leaves a Markdown fence (or, with ``spans``, an inline code span)
    open: markup quoted there is text, never a call (vLLM issue 57541).

    A fence is a line whose first characters, after at most three spaces, are ``````` or
    ``~~~``; it is closed by the next such line with the same character. An inline code span is
    a run of backticks closed by the next run of the same length on the same line.
    """

    __slots__ = ("code", "fence", "fence_line", "head", "spans", "tick")

    def __init__(self, spans: bool) -> None:
        self.spans = spans
        self.fence: str | None = None
        self.code = 0  # length of the backtick run of an open code span
        self.head: str | None = ""  # the current line so far, while it may be a fence line
        # A backtick run at the end of the text so far: how long it is depends on the next
        # piece (a stream may cut "```" into "``" and "`"), so it counts once something else
        # follows.
        self.tick = 0
        # The current line is a fence line: the rest of it (the info string) quotes nothing, in
        # whatever pieces it comes.
        self.fence_line = False

    def quoted(self) -> bool:
        """Whether what comes next, a marker or a tag (no backtick, no line break), is quoted."""
        self.marker()
        return self.fence is not None or self.code > 0

    def feed(self, text: str) -> None:
        lines = text.split("\n")
        last = len(lines) - 1
        for index, line in enumerate(lines):
            if index:
                self.head, self.code, self.tick, self.fence_line = "", 0, 0, False
            if self.fence_line:
                continue
            scan = line
            if self.head is not None:
                candidate = self.head + line
                fence = _FENCE_LINE.match(candidate)
                if fence:
                    mark = fence.group(1)[0]
                    if self.fence is None:
                        self.fence = mark
                    elif self.fence == mark:
                        self.fence = None
                    self.head, self.fence_line = None, True
                    continue
                if index == last and _FENCE_PREFIX.fullmatch(candidate):
                    self.head = candidate
                    continue
                self.head, scan = None, candidate
            self._spans(scan)

    def _spans(self, scan: str) -> None:
        if not self.spans or self.fence is not None or not scan:
            return
        for run in _BACKTICKS.finditer(scan):
            width = run.end() - run.start()
            if self.tick and run.start() == 0:
                width += self.tick  # the run began in an earlier piece
            elif self.tick:
                self._run(self.tick)
            self.tick = 0
            if run.end() == len(scan):
                self.tick = width
                return
            self._run(width)
        if self.tick:
            self._run(self.tick)
            self.tick = 0

    def _run(self, width: int) -> None:
        if self.code == 0:
            self.code = width
        elif self.code == width:
            self.code = 0

    def marker(self) -> None:
        """A marker token sits on the line: it is no fence line, and it ends a backtick run."""
        if self.head:
            self._spans(self.head)
        self.head = None
        if self.tick:
            self._run(self.tick)
            self.tick = 0


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


class _Lookahead:
    """What follows a ``<tool_call>``: held until it is known whether ``<function=`` comes."""

    __slots__ = ("first", "head", "items", "origin")

    def __init__(self, origin: int, marker: _Item) -> None:
        self.origin = origin
        self.items: list[_Item] = [marker]
        self.head = ""  # the first up-to-10 non-whitespace characters
        self.first: int | None = None  # offset of the first non-whitespace character


class _Machine:
    """The outer-level state machine shared by batch and streaming parsing."""

    def __init__(self, schemas: _Schemas, thinking: bool) -> None:
        self.schemas = schemas
        self.thinking = thinking
        self.state = _START
        self.offset = 0
        self.events: list[StreamEvent] = []
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.calls: list[ToolCall] = []
        self.unterminated: str | None = None
        self.leading: list[_Item] = []  # whitespace before a possible leading <think>
        self.held: list[_Item] = []  # reasoning that may turn out to be a call (see module doc)
        self.ahead: _Lookahead | None = None
        self.bare: int | None = None  # a bare <tool_call> that a </tool_call> would make a span
        self.tail: list[_Item] = []  # everything from the first call on (read at the end)
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
        self.opening: _Opening | None = None  # held content that may open an unwrapped call

    def push(self, is_marker: bool, text: str) -> None:
        if text:
            start = self.offset
            self.offset = start + len(text)
            self._handle(is_marker, text, start)

    def _reason(self, text: str, is_marker: bool = False) -> None:
        if is_marker:
            self.reasoning_quotes.marker()
        else:
            self.reasoning_quotes.feed(text)
        self.reasoning.append(text)
        self.events.append(ReasoningDelta(text))

    def _say(self, text: str, is_marker: bool = False) -> None:
        if is_marker:
            self.content_quotes.marker()
            self.line_start = False
        elif text:
            self.content_quotes.feed(text)
            self.line_start = text.endswith("\n")
        self.content.append(text)
        self.events.append(ContentDelta(text))

    def _content_text(self, text: str, start: int) -> None:
        """Content text, watched for a call without the wrapper (issue 10): a line-start
        ``<function=NAME>`` of a declared tool, then whitespace and ``<parameter=`` or
        ``</function>``. Only what may still become that is held (``_Opening``); the rest is
        said at once."""
        if not self.openers:
            self._say(text)
            return
        while text:
            if self.opening is None:
                text, start = self._scan_content(text, start)
                continue
            text, start = self._grow_opening(text, start)
            if self.opening is not None or self.state != _CONTENT:
                return

    def _scan_content(self, text: str, start: int) -> tuple[str, int]:
        """Say ``text`` up to a line-start ``<`` that may open a call; hold that (as
        ``opening``) and return what follows it, or ("", 0) when all of it is said or held."""
        said = 0
        at = 0 if self.line_start and text.startswith("<") else self._next_line_tag(text, 0)
        while at >= 0:
            if at > said:
                self._say(text[said:at])  # the fence state at `at` needs the text before it
                said = at
            if not self.content_quotes.quoted():
                head = text[at : at + self.longest_opener]
                if head in self.opener_prefixes or head.startswith(self.openers_tuple):
                    self.opening = _Opening(start + at)
                    return text[at:], start + at
            at = self._next_line_tag(text, at + 1)
        if said < len(text):
            self._say(text[said:])
        return "", 0

    def _grow_opening(self, text: str, start: int) -> tuple[str, int]:
        """Add ``text`` to the held opening: it becomes the tail (a call may have begun), stays
        held, or is said (then the rest of ``text`` is returned to be scanned again)."""
        opening = self.opening
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
                return self._release_opening(text, start)
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
            self.state = _TAIL
            self.tail = [(False, "".join(opening.pieces) + opening.ahead + text, opening.start)]
            self.opening = None
            return "", 0
        if _PARAMETER.startswith(ahead) or _FUNCTION_END.startswith(ahead):
            opening.ahead = ahead
            return "", 0
        return self._release_opening(text, start)

    def _release_opening(self, text: str = "", start: int = 0) -> tuple[str, int]:
        """What was held as a possible call without the wrapper is content: the tag and the
        whitespace after it are said; what followed them (``ahead``, then ``text``) is returned
        to be scanned again, since a line-start tag may begin in it."""
        opening = self.opening
        if opening is None:
            return text, start
        self.opening = None
        if opening.pieces:
            self._say("".join(opening.pieces))
        if opening.tag:
            held = len("".join(opening.pieces))
            return opening.ahead + text, opening.start + held
        # Only a prefix of a tag was held: it cannot start another one (no line break in it).
        if opening.ahead:
            self._say(opening.ahead)
        return text, start

    def _flush_opening(self) -> None:
        """A marker or the end of output: what was held cannot open a call any more."""
        opening = self.opening
        if opening is not None:
            self.opening = None
            held = "".join(opening.pieces) + opening.ahead
            if held:
                self._say(held)

    @staticmethod
    def _next_line_tag(text: str, pos: int) -> int:
        at = text.find("\n<", pos - 1 if pos else 0)
        return -1 if at < 0 else at + 1

    def _handle(self, is_marker: bool, text: str, start: int) -> None:
        if self.ahead is not None:
            self._look(is_marker, text, start)
            return
        state = self.state
        if state == _TAIL:
            self.tail.append((is_marker, text, start))
        elif state == _CONTENT:
            if not is_marker:
                self._content_text(text, start)
                return
            self._flush_opening()
            if is_marker:
                if text == mk.TOOL_CALL_OPEN and not self.content_quotes.quoted():
                    self.ahead = _Lookahead(_CONTENT, (True, text, start))
                    self.bare = None
                    return
                if text == mk.TOOL_CALL_CLOSE and self.bare is not None:
                    raise ParseError(
                        "<tool_call> span holds no <function=NAME> block", offset=self.bare
                    )
                if text == mk.THINK_CLOSE:
                    # A stray </think> after reasoning ended: kept in content, the template would
                    # split the turn there when it goes back into history.
                    return
            self._say(text, is_marker)
        elif state == _REASONING:
            if is_marker:
                if text == mk.THINK_CLOSE:
                    self.state = _CONTENT
                    return
                if text == mk.TOOL_CALL_OPEN and not self.reasoning_quotes.quoted():
                    self.ahead = _Lookahead(_REASONING, (True, text, start))
                    return
            self._reason(text, is_marker)
        elif state == _HOLD:
            if is_marker and text == mk.THINK_CLOSE:
                # A </think> after all: the held call markup was reasoning, never dispatched.
                held, self.held = self.held, []
                self._reason("".join(t for _, t, _ in held))
                self.state = _CONTENT
                return
            self.held.append((is_marker, text, start))
        else:  # _START
            if is_marker and text == mk.THINK_OPEN:
                # A completion that begins with <think> opens a reasoning span, whatever
                # `thinking` says (and with thinking=True it is the span already open).
                self.leading = []
                self.state = _REASONING
                return
            if not is_marker and text.isspace():
                self.leading.append((False, text, start))
                return
            self._leave_start()
            self._handle(is_marker, text, start)

    def _leave_start(self) -> None:
        self.state = _REASONING if self.thinking else _CONTENT
        leading, self.leading = self.leading, []
        for item in leading:
            self._handle(*item)

    def _look(self, is_marker: bool, text: str, start: int) -> None:
        ahead = self.ahead
        assert ahead is not None
        ahead.items.append((is_marker, text, start))
        if is_marker:
            if ahead.first is None and text == mk.TOOL_CALL_CLOSE and ahead.origin == _CONTENT:
                raise ParseError("empty <tool_call> span: expected <function=NAME>", offset=start)
            self._decide(False, start if ahead.first is None else ahead.first)
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
            self._decide(head == _FUNCTION, ahead.first)
        elif not _FUNCTION.startswith(head):
            self._decide(False, ahead.first)

    def _decide(self, is_call: bool, first: int | None) -> None:
        ahead = self.ahead
        assert ahead is not None
        self.ahead = None
        items = ahead.items
        if is_call:
            if ahead.origin == _REASONING:
                # No </think> yet: this call ends reasoning only if none ever comes.
                self.state = _HOLD
                self.held = items
                return
            # A call: what follows is read at the end, when the whole output confirms where
            # each value ends (a later </parameter></function></tool_call> may still turn an
            # earlier one into data).
            self.state = _TAIL
            self.tail = items
            return
        # Not a call: the <tool_call> is text where it stands.
        if ahead.origin == _CONTENT:
            self._say(mk.TOOL_CALL_OPEN, True)
            self.bare = first
        else:
            self._reason(mk.TOOL_CALL_OPEN, True)
        for item in items[1:]:
            self._handle(*item)

    def _read_tail(self) -> None:
        tail, self.tail = self.tail, []
        for kind, value in _read_tail(tail, self.schemas):
            if kind == "content":
                self._say(value)
                continue
            if kind == "unterminated":
                self.unterminated = value
                continue
            for call in value:
                self.events.append(ToolCallEvent(len(self.calls), call))
                self.calls.append(call)
                if self.stop_at_first_call:
                    raise _FirstCall

    def end(self) -> None:
        """End of input: settle everything held back."""
        self._flush_opening()  # a tag cut off before its block's shape is known opens no call
        while True:
            if self.ahead is not None:
                # Only whitespace or a prefix of <function= followed the <tool_call>: the output
                # was cut while opening a call, which is an (unterminated) call.
                self._decide(True, self.ahead.first)
                continue
            if self.state == _HOLD:
                # No </think> ever came: reasoning ended at the held <tool_call>.
                held, self.held = self.held, []
                self.state = _CONTENT
                for item in held:
                    self._handle(*item)
                continue
            break
        if self.state == _START:
            self._leave_start()
        elif self.state == _TAIL:
            self.state = _CONTENT
            self._read_tail()

    def completion(self) -> Completion:
        return Completion(
            reasoning="".join(self.reasoning).strip() or None,
            content="".join(self.content).strip() or None,
            tool_calls=tuple(self.calls),
            unterminated=self.unterminated,
        )


# --------------------------------------------------------------------------------------------
# Input splitting: text or token IDs -> marker and text pieces


class _TextSplitter:
    """Finds markers in string deltas; holds back a trailing partial marker."""

    def __init__(self) -> None:
        self.tail = ""

    def feed(self, text: str) -> list[tuple[bool, str]]:
        buffer = self.tail + text
        pieces: list[tuple[bool, str]] = []
        pos = 0
        for match in _MARKER_RE.finditer(buffer):
            if match.start() > pos:
                pieces.append((False, buffer[pos : match.start()]))
            pieces.append((True, match.group()))
            pos = match.end()
        cut = len(buffer)
        # Only the last '<' can start a marker that is still incomplete (markers hold one '<').
        lt = buffer.rfind("<", max(pos, cut - _LONGEST_MARKER + 1))
        if lt >= 0:
            partial = buffer[lt:]
            if any(m.startswith(partial) for m in _STRUCTURAL):
                cut = lt
        if cut > pos:
            pieces.append((False, buffer[pos:cut]))
        self.tail = buffer[cut:]
        return pieces

    def end(self) -> list[tuple[bool, str]]:
        tail, self.tail = self.tail, ""
        return [(False, tail)] if tail else []


class _IdSplitter:
    """Splits token IDs at marker IDs and decodes runs of ordinary IDs, emitting only a prefix
    whose text is provably the prefix of the whole run's text (issue 9, item 8).

    A run of ordinary tokens is cut after token ``k`` only when ``decode(run[:k])`` does not
    end in U+FFFD (it ends on a whole character), or when ``decode(run[:k]) +
    decode(run[k:]) == decode(run)`` with at least three characters after the cut. In a UTF-8
    decoder that replaces each maximal invalid subsequence with one U+FFFD, a cut inside a
    character or inside such a subsequence changes the count of U+FFFD or characters within the
    next three bytes, and three characters need at least three bytes, so the second test can
    only pass where the decoder restarts: every later byte decodes as it would unsplit.
    """

    def __init__(self, encoder: MarkerEncoder) -> None:
        self.decode = encoder.decode
        self.markers: dict[int, tuple[bool, str]] = {
            int(i): (marker in _STRUCTURAL, marker)
            for marker, i in encoder.marker_ids.items()
            if i is not None  # a vocabulary without that marker (token_to_id gave None)
        }
        self.limit = _id_limit(encoder)
        self.position = 0
        self.pending: list[int] = []

    def _check(self, token: Any) -> int:
        position = self.position
        self.position = position + 1
        if isinstance(token, bool):
            raise TokenIdError(f"token ID {shown(token)} is a bool", position=position)
        try:
            value = operator.index(token)
        except TypeError:
            raise TokenIdError(
                f"token ID {shown(token)} is not an integer ({type(token).__name__})",
                position=position,
            ) from None
        if value < 0 or (self.limit is not None and value >= self.limit):
            bound = "" if self.limit is None else f" (the vocabulary has {self.limit:,} IDs)"
            raise TokenIdError(
                f"token ID {shown(value)} is not in the vocabulary{bound}", position=position
            )
        return value

    def feed(self, ids: Iterable[int]) -> list[tuple[bool, str]]:
        if isinstance(ids, str | bytes | bytearray | Mapping) or not isinstance(ids, Iterable):
            raise PromptError(
                f"expected a sequence of token IDs, got {type(ids).__name__}", field="output"
            )
        pieces: list[tuple[bool, str]] = []
        markers = self.markers
        pending = self.pending
        for token in ids:
            token = self._check(token)
            marker = markers.get(token)
            if marker is None:
                pending.append(token)
                continue
            self._flush(pieces)
            # A non-protocol marker (<|im_end|>, <|box_start|>, …) is text to the parser.
            pieces.append(marker)
        if self.pending:
            self._flush_complete(pieces)
        return pieces

    def end(self) -> list[tuple[bool, str]]:
        pieces: list[tuple[bool, str]] = []
        self._flush(pieces)
        return pieces

    def _flush(self, pieces: list[tuple[bool, str]]) -> None:
        if self.pending:
            pieces.append((False, self.decode(self.pending)))
            self.pending.clear()  # in place: feed() holds a reference to the list

    def _flush_complete(self, pieces: list[tuple[bool, str]]) -> None:
        pending = self.pending
        text = self.decode(pending)
        if not text.endswith(_REPLACEMENT):
            pieces.append((False, text))
            pending.clear()
            return
        count = len(pending)
        # A cut where the prefix ends on a whole character: at most 3 tokens of a character.
        for keep in range(1, min(3, count - 1) + 1):
            prefix = self.decode(pending[:-keep])
            if not prefix.endswith(_REPLACEMENT):
                pieces.append((False, prefix))
                del pending[:-keep]
                return
        # Invalid bytes: a cut the decoder provably restarts at (see the class doc). The tail
        # kept is at most 6 tokens, so a run of invalid bytes flows through.
        for keep in range(3, min(6, count - 1) + 1):
            prefix = self.decode(pending[:-keep])
            rest = self.decode(pending[-keep:])
            if len(rest) >= 3 and prefix + rest == text:
                pieces.append((False, prefix))
                del pending[:-keep]
                return


def _id_limit(encoder: Any) -> int | None:
    """How many IDs the encoder's vocabulary has: its ``vocab_size`` when it has one (optional
    in ``MarkerEncoder``), else the library ``Encoder``'s vocabulary report; None: unknown."""
    size = getattr(encoder, "vocab_size", None)
    if size is None:
        report = getattr(getattr(encoder, "vocabulary", None), "report", None)
        largest = getattr(report, "max_token_id", None)
        size = largest + 1 if isinstance(largest, int) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _splitter(output: Any, encoder: MarkerEncoder | None) -> _TextSplitter | _IdSplitter:
    if isinstance(output, str):
        return _TextSplitter()
    if isinstance(output, bytes | bytearray):
        raise PromptError(
            "pass the completion as str or as a sequence of token IDs, not bytes", field="output"
        )
    if isinstance(output, Mapping) or not isinstance(output, Iterable):
        raise PromptError(
            f"expected the completion as str or a sequence of token IDs, got "
            f"{type(output).__name__}",
            field="output",
        )
    if encoder is None:
        raise PromptError(
            "token IDs need an encoder (an object with marker_ids and decode)", field="encoder"
        )
    if not hasattr(encoder, "marker_ids") or not callable(getattr(encoder, "decode", None)):
        raise PromptError(
            f"expected an encoder with marker_ids and decode, got {type(encoder).__name__}",
            field="encoder",
        )
    return _IdSplitter(encoder)


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PromptError(f"expected True or False, got {shown(value)}", field=name)
    return value


# --------------------------------------------------------------------------------------------
# Public API


def parse_completion(
    output: str | Sequence[int],
    tools: Any = None,
    thinking: bool = True,
    encoder: MarkerEncoder | None = None,
) -> Completion:
    """Parse a whole completion (text, or token IDs decoded with ``encoder``).

    ``thinking=True`` means the prompt's primer left the reasoning span open. ``tools`` (OpenAI
    tools list) types the parameter values by schema. Raises ``ParseError`` when a closed call
    span does not hold a well-formed call.
    """
    return _run(output, tools, thinking, encoder).completion()


def parse_tool_call(
    response: str | Sequence[int],
    *,
    tools: Any = None,
    thinking: bool = False,
    encoder: MarkerEncoder | None = None,
) -> ToolCall | None:
    """The first complete call in ``response``, or None (no call, or only an unterminated one).

    ``response`` is read as ``parse_completion`` reads it, by default as an answer
    (``thinking=False``: only a leading ``<think>`` opens reasoning, whose markup is never a
    call). Spans after the first call are not looked at; a malformed span before it raises
    ``ParseError``.
    """
    try:
        completion = _run(response, tools, thinking, encoder, stop_at_first_call=True).completion()
    except _FirstCall as first:
        return first.args[0]
    return completion.tool_calls[0] if completion.tool_calls else None


def _run(
    output: Any,
    tools: Any,
    thinking: bool,
    encoder: MarkerEncoder | None,
    stop_at_first_call: bool = False,
) -> _Machine:
    machine = _Machine(_schema_lookup(tools), _check_flag("thinking", thinking))
    machine.stop_at_first_call = stop_at_first_call
    splitter = _splitter(output, encoder)
    try:
        for piece in splitter.feed(output):
            machine.push(*piece)
        for piece in splitter.end():
            machine.push(*piece)
        machine.end()
    except _FirstCall:
        raise _FirstCall(machine.calls[0]) from None
    return machine


class StreamParser:
    """Incremental ``parse_completion``: feed text deltas or token IDs, get events.

    Any chunking gives the same final ``Completion`` as ``parse_completion`` on the whole output,
    and the same events: joined, the ``ReasoningDelta`` texts and the ``ContentDelta`` texts,
    each trimmed with ``str.strip`` (empty -> None), equal ``reasoning`` and ``content``; the
    ``ToolCallEvent`` calls are ``tool_calls``. Text is held back only while it may still be part
    of a marker, of a ``<tool_call>`` opener, of a UTF-8 character, or (see the module doc) of a
    call inside a reasoning span that never closed. ``flush()`` releases it at the end of input;
    ``finish()`` flushes (if you did not) and returns the ``Completion``. A ``ParseError`` is
    raised by the ``feed``/``flush`` that completes the bad span, with the batch offset; the
    parser is unusable after it.
    """

    def __init__(
        self, tools: Any = None, thinking: bool = True, encoder: MarkerEncoder | None = None
    ) -> None:
        self._machine = _Machine(_schema_lookup(tools), _check_flag("thinking", thinking))
        self._encoder = encoder
        self._splitter: _TextSplitter | _IdSplitter | None = None
        self._error: ParseError | None = None
        self._ended = False

    def feed(self, delta: str | Sequence[int]) -> list[StreamEvent]:
        """Add a text delta or a list of token IDs; return the events it completes."""
        self._check_open()
        if self._splitter is None:
            self._splitter = _splitter(delta, self._encoder)
        elif isinstance(delta, str) != isinstance(self._splitter, _TextSplitter):
            raise PromptError("feed either text deltas or token IDs, not both", field="delta")
        return self._advance(self._splitter.feed(delta))  # type: ignore[arg-type]

    def flush(self) -> list[StreamEvent]:
        """End of input: the events for everything still held back."""
        if self._ended:
            return []
        self._check_open()
        pieces = self._splitter.end() if self._splitter is not None else []
        events = self._advance(pieces, end=True)
        self._ended = True
        return events

    def finish(self) -> Completion:
        """End of input; the same ``Completion`` as ``parse_completion``. It flushes if you did
        not, but then the flushed events are only in the result: call ``flush()`` first when
        you forward events."""
        self.flush()
        return self._machine.completion()

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self._ended:
            raise PromptError("the stream is finished: feed after flush()", field="delta")

    def _advance(self, pieces: list[tuple[bool, str]], end: bool = False) -> list[StreamEvent]:
        machine = self._machine
        try:
            for is_marker, text in pieces:
                machine.push(is_marker, text)
            if end:
                machine.end()
        except ParseError as error:
            self._error = error
            raise
        events, machine.events = machine.events, []
        return events
