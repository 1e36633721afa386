"""Qwen 3.8 completions -> reasoning, content and tool calls, in one pass, batch or streaming.

The grammar is the one the checkpoint's template writes for an assistant turn::

    <think>\\n{reasoning}\\n</think>\\n\\n{content}<tool_call>\\n<function=NAME>\\n
    <parameter=P>\\n{value}\\n</parameter>\\n</function>\\n</tool_call>

How it is read:

* Two levels. The outer level sees only the protocol's *markers* (``<think>``, ``</think>``,
  ``<tool_call>``, ``</tool_call>``) and text between them. For a string completion every
  spelling of a marker is one; for token IDs only the marker's atomic ID is (a marker spelled out
  in ordinary tokens is prose), so the outer level works on ``(is_marker, text)`` pieces, never on
  one flat string. The inner level parses a closed ``<tool_call>`` span's body, where
  ``<function=``, ``<parameter=`` and their closers are plain text (they are not atomic tokens).
* Reasoning ends at the first ``</think>``; with none at all, at a ``<tool_call>`` that is
  followed by optional whitespace and ``<function=`` (the model skipped closing its thoughts);
  otherwise the whole output is reasoning (truncated). Tool markup inside a reasoning span that is
  later closed stays reasoning and is never dispatched.
* After reasoning, a ``<tool_call>`` followed by optional whitespace and ``<function=`` opens a
  call span; ``</tool_call>`` closes it and its body must hold one or more ``<function=…>``
  blocks, else ``ParseError``. A ``<tool_call>`` not followed by ``<function=`` is text (a bare
  mention), unless a ``</tool_call>`` closes it before the next ``<tool_call>``: then it was a
  span that holds no call, and that is a ``ParseError`` too. A span still open at the end is not
  dispatched: its raw text is ``Completion.unterminated``.
* Content is all text outside reasoning and call spans (before, between and after calls),
  concatenated; reasoning and content are then trimmed like the template trims them
  (``str.strip``), and empty becomes None.
* Inside a closed span: several ``<function=…>`` blocks are several calls; whitespace between
  tags is insignificant. A value is the text between ``<parameter=NAME>`` and the first
  ``</parameter>`` followed (after whitespace) by another tag or the end of the span, less exactly
  one leading and one trailing newline (the template's layout); everything else in it is data.
  Unambiguous omissions are repaired: ``</parameter>`` before a line-start ``<parameter=`` or
  ``</function>``, ``</function>`` before ``</tool_call>`` (or the next ``<function=``), and
  ``</tool_call>`` between a ``</function>`` and the next ``<tool_call>``. Anything else that is
  not a call (empty span, no ``<function=``, a malformed tag, stray text between tags, the same
  parameter twice with different values) raises ``ParseError`` at the offending character.
* Values are typed by the tool's JSON schema where it declares the parameter, else "JSON when it
  parses, else the string" (``typed_parameter_value``); see ``_convert``.

One state machine (``_Machine``) serves both ``parse_completion`` and ``StreamParser``, so both
give the same result by construction. It never rescans: every piece of input is looked at once,
plus a bounded look-ahead after ``<tool_call>`` (whitespace and the 10 characters of
``<function=``), a held-back partial marker (at most 11 characters) and, for token IDs, at most
a few tokens of an incomplete UTF-8 character. The one unbounded hold is forced by the rules
themselves: after a ``<function=`` call inside a reasoning span that has not closed, whether that
call is reasoning or a call depends on whether a ``</think>`` comes later, so the streamer keeps
that text back until the ``</think>`` arrives or the input ends (each piece is still handled at
most twice).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Protocol, TypeAlias

from . import markers as mk
from .conversation import ToolCall, Turn
from .errors import ParseError

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
    text. ``decode`` must be concatenative at character boundaries (``decode(a + b) ==
    decode(a) + decode(b)`` whenever ``a`` ends on a whole character), as byte-level BPE decoders
    are, and must mark an incomplete trailing UTF-8 sequence with U+FFFD.
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


def _strict_json(text: str) -> Any:
    """``json.loads`` restricted to real JSON; ``_NO_FIT`` when the text is not JSON."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        return _NO_FIT


def typed_parameter_value(text: str) -> Any:
    """The schema-free reading of a parameter value: JSON when it parses, else the string.

    Strict JSON: ``NaN``/``Infinity`` and numbers that overflow to infinity stay strings, and
    integers keep every digit.
    """
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


def _schema_types(schema: Any) -> _Types:
    """The JSON types a parameter schema allows; None when it says nothing about type."""
    if not isinstance(schema, Mapping):
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
                sub = _schema_types(branch)
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
    if _JSON_INT.fullmatch(text):
        try:
            return int(text)  # exact, however many digits (up to Python's digit limit)
        except ValueError:
            return _NO_FIT
    if _JSON_NUMBER.fullmatch(text):
        # JSON Schema's integer is a mathematical integer: 5.0 and 1e3 are integers too.
        try:
            number = Decimal(text)
            if number == number.to_integral_value() and number.adjusted() < 4000:
                return int(number)
        except (InvalidOperation, ValueError):
            pass
    return _NO_FIT


def _as_number(text: str) -> Any:
    if _JSON_INT.fullmatch(text):
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
        if token in ("true", "True"):
            return True
        if token in ("false", "False"):
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


_Schemas: TypeAlias = Mapping[str, Mapping[str, _Types]]


def _schema_lookup(tools: Any) -> _Schemas:
    """Per function name, per parameter name, the allowed types; built once per parser.

    ``tools`` is the OpenAI tools list (``{"type": "function", "function": {...}}``), the bare
    ``{"name", "parameters"}`` form, or the JSON text of either list.
    """
    if tools is None:
        return {}
    if isinstance(tools, str):
        tools = json.loads(tools)
    if isinstance(tools, Mapping) or not isinstance(tools, Iterable):
        raise TypeError(f"tools must be a list of tool objects, got {type(tools).__name__}")
    lookup: dict[str, dict[str, _Types]] = {}
    for i, tool in enumerate(tools):
        if isinstance(tool, str):
            tool = json.loads(tool)
        if not isinstance(tool, Mapping):
            raise TypeError(f"tools[{i}] must be an object, got {type(tool).__name__}")
        function = tool.get("function", tool)
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ValueError(f"tools[{i}] has no function name")
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
        if not isinstance(properties, Mapping):
            properties = {}
        # First definition wins, as the model reads the tools list top-down.
        lookup.setdefault(
            function["name"], {str(p): _schema_types(s) for p, s in properties.items()}
        )
    return lookup


# --------------------------------------------------------------------------------------------
# Inner level: the body of one closed <tool_call> span


class _Ahead:
    """Next occurrence of a fixed string at or after a position that only moves forward, so a
    span with many parameters is still scanned once (no quadratic re-finds)."""

    __slots__ = ("at", "needle", "text")

    def __init__(self, text: str, needle: str) -> None:
        self.text, self.needle, self.at = text, needle, -1

    def find(self, pos: int) -> int:
        if self.at < pos:
            found = self.text.find(self.needle, pos)
            self.at = len(self.text) if found < 0 else found
        return self.at


def _tag(body: str, pos: int, prefix: str, base: int) -> tuple[str, int]:
    """Parse ``<function=NAME>`` / ``<parameter=NAME>`` at ``pos``; the name and the end."""
    match = _TAG_NAME.match(body, pos + len(prefix))
    name = match.group(1).strip() if match else ""
    if not name:
        kind = prefix[1:-1]
        raise ParseError(f"malformed {prefix}…> tag: expected <{kind}=NAME>", offset=base + pos)
    assert match is not None
    return name, match.end()


def _value(body: str, pos: int, line_param: _Ahead, line_function_end: _Ahead) -> tuple[str, int]:
    """A parameter's raw value starting at ``pos``: its text, and where parsing continues.

    The value ends at the first ``</parameter>`` that is followed (after whitespace) by another
    tag or the end of the span; an earlier ``</parameter>`` is data. Repairs: a line-start
    ``<parameter=`` or ``</function>`` ends it (missing ``</parameter>``), and so does the end of
    the span. Exactly one leading and one trailing newline (the template's layout) are removed.
    """
    end = len(body)
    limit = min(line_param.find(pos) + 1, line_function_end.find(pos) + 1, end)
    resume = limit
    search = pos
    while True:
        close = body.find(_PARAMETER_END, search, limit)
        if close < 0:
            break
        after = _WS.match(body, close + len(_PARAMETER_END)).end()
        if after == end or body.startswith(_AFTER_PARAMETER, after):
            limit, resume = close, close + len(_PARAMETER_END)
            break
        search = close + 1
    value = body[pos:limit]
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value, resume


def _parse_span(body: str, base: int, schemas: _Schemas) -> list[ToolCall]:
    """The calls in a closed span's body; ``base`` is the body's offset in the completion."""
    end = len(body)
    pos = _WS.match(body).end()
    if pos == end:
        raise ParseError("empty <tool_call> span: expected <function=NAME>", offset=base + pos)
    if not body.startswith(_FUNCTION, pos):
        raise ParseError("<tool_call> span holds no <function=NAME> block", offset=base + pos)
    line_param = _Ahead(body, "\n" + _PARAMETER)
    line_function_end = _Ahead(body, "\n" + _FUNCTION_END)
    calls: list[ToolCall] = []
    while pos < end:
        name, pos = _tag(body, pos, _FUNCTION, base)
        declared = schemas.get(name, {})
        arguments: dict[str, Any] = {}
        raw: dict[str, str] = {}
        while True:
            pos = _WS.match(body, pos).end()
            if pos == end or body.startswith(_FUNCTION, pos):
                break  # repair: </function> missing before </tool_call> or the next <function=
            if body.startswith(_FUNCTION_END, pos):
                pos += len(_FUNCTION_END)
                break
            if not body.startswith(_PARAMETER, pos):
                raise ParseError(
                    "unexpected text in a <function=…> block: expected <parameter=NAME> or "
                    "</function>",
                    offset=base + pos,
                )
            tag_at = pos
            parameter, pos = _tag(body, pos, _PARAMETER, base)
            value, pos = _value(body, pos, line_param, line_function_end)
            if parameter in raw:
                if raw[parameter] != value:
                    raise ParseError(
                        f"parameter {parameter!r} given twice with different values",
                        offset=base + tag_at,
                    )
                continue
            raw[parameter] = value
            arguments[parameter] = _convert(value, declared.get(parameter))
        calls.append(ToolCall(name=name, arguments=arguments))
        pos = _WS.match(body, pos).end()
        if pos < end and not body.startswith(_FUNCTION, pos):
            raise ParseError(
                "unexpected text after </function> inside <tool_call>", offset=base + pos
            )
    return calls


# --------------------------------------------------------------------------------------------
# Outer level: markers and text, one piece at a time

_START, _REASONING, _HOLD, _CONTENT, _CALL = range(5)
_FUNCTION_LEN: Final = len(_FUNCTION)

_Item: TypeAlias = tuple[bool, str, int]  # (is_marker, text, offset)


class _FirstCall(Exception):
    """Internal: ``parse_tool_call`` has what it wants."""


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
        self.body: list[str] = []
        self.body_start = 0
        self.stop_at_first_call = False

    def push(self, is_marker: bool, text: str) -> None:
        if text:
            start = self.offset
            self.offset = start + len(text)
            self._handle(is_marker, text, start)

    def _reason(self, text: str) -> None:
        self.reasoning.append(text)
        self.events.append(ReasoningDelta(text))

    def _say(self, text: str) -> None:
        self.content.append(text)
        self.events.append(ContentDelta(text))

    def _handle(self, is_marker: bool, text: str, start: int) -> None:
        if self.ahead is not None:
            self._look(is_marker, text, start)
            return
        state = self.state
        if state == _CONTENT:
            if is_marker:
                if text == mk.TOOL_CALL_OPEN:
                    self.ahead = _Lookahead(_CONTENT, (True, text, start))
                    self.bare = None
                    return
                if text == mk.TOOL_CALL_CLOSE and self.bare is not None:
                    raise ParseError(
                        "<tool_call> span holds no <function=NAME> block", offset=self.bare
                    )
            self._say(text)
        elif state == _REASONING:
            if is_marker:
                if text == mk.THINK_CLOSE:
                    self.state = _CONTENT
                    return
                if text == mk.TOOL_CALL_OPEN:
                    self.ahead = _Lookahead(_REASONING, (True, text, start))
                    return
            self._reason(text)
        elif state == _CALL:
            if is_marker:
                if text == mk.TOOL_CALL_CLOSE:
                    self._close_call()
                    self.state = _CONTENT
                    return
                if text == mk.TOOL_CALL_OPEN:
                    self.ahead = _Lookahead(_CALL, (True, text, start))
                    return
            # Other markers inside a span are data (a </think> in a value is just text).
            self.body.append(text)
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
            if ahead.origin == _CALL:
                if not self._function_closed():
                    # Only "</function> <tool_call>" is an unambiguous missing </tool_call>;
                    # anywhere else (inside a value) the <tool_call> is data of the open span.
                    is_call = False
                else:
                    self._close_call()  # repair: </tool_call> missing before the next one
        if is_call:
            self.state = _CALL
            self.body_start = items[0][2] + len(mk.TOOL_CALL_OPEN)
            self.body = [t for _, t, _ in items[1:]]
            self.bare = None
            return
        # Not a call: the <tool_call> is text where it stands.
        if ahead.origin == _CONTENT:
            self._say(mk.TOOL_CALL_OPEN)
            self.bare = first
        elif ahead.origin == _REASONING:
            self._reason(mk.TOOL_CALL_OPEN)
        else:
            self.body.append(mk.TOOL_CALL_OPEN)
        for item in items[1:]:
            self._handle(*item)

    def _function_closed(self) -> bool:
        """Whether the open span's body so far ends with ``</function>`` (and whitespace)."""
        tail = ""
        for part in reversed(self.body):
            tail = part + tail
            if len(tail.rstrip()) >= len(_FUNCTION_END):
                break
        return tail.rstrip().endswith(_FUNCTION_END)

    def _close_call(self) -> None:
        body, self.body = "".join(self.body), []
        for call in _parse_span(body, self.body_start, self.schemas):
            self.events.append(ToolCallEvent(len(self.calls), call))
            self.calls.append(call)
            if self.stop_at_first_call:
                raise _FirstCall

    def end(self) -> None:
        """End of input: settle everything held back."""
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
        elif self.state == _CALL:
            self.unterminated = mk.TOOL_CALL_OPEN + "".join(self.body)
            self.body = []
            self.state = _CONTENT

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
    """Splits token IDs at marker IDs and decodes runs of ordinary IDs, holding back the tokens
    of a UTF-8 character that is not complete yet."""

    # A UTF-8 character has at most 4 bytes, so its incomplete tail spans at most 3 tokens.
    _MAX_PARTIAL = 3

    def __init__(self, encoder: MarkerEncoder) -> None:
        self.decode = encoder.decode
        self.markers: dict[int, tuple[bool, str]] = {
            int(i): (marker in _STRUCTURAL, marker)
            for marker, i in encoder.marker_ids.items()
            if i is not None  # a vocabulary without that marker (token_to_id gave None)
        }
        self.pending: list[int] = []

    def feed(self, ids: Iterable[int]) -> list[tuple[bool, str]]:
        pieces: list[tuple[bool, str]] = []
        markers = self.markers
        pending = self.pending
        for token in ids:
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
        text = self.decode(self.pending)
        if not text.endswith(_REPLACEMENT):
            pieces.append((False, text))
            self.pending.clear()
            return
        # The last character may still be arriving: emit up to a clean split and keep the rest.
        # A prefix that decodes without a trailing U+FFFD ends on a whole character, so splitting
        # there decodes exactly as the whole run would.
        count = len(self.pending)
        for keep in range(1, min(self._MAX_PARTIAL, count - 1) + 1):
            prefix = self.decode(self.pending[:-keep])
            if not prefix.endswith(_REPLACEMENT):
                pieces.append((False, prefix))
                del self.pending[:-keep]
                return
        if count > 2 * (self._MAX_PARTIAL + 1):
            # Not an incomplete character but invalid bytes: let them through rather than hold
            # ever more tokens (and re-decode them) forever.
            pieces.append((False, text))
            self.pending.clear()


def _splitter(output: Any, encoder: MarkerEncoder | None) -> _TextSplitter | _IdSplitter:
    if isinstance(output, str):
        return _TextSplitter()
    if isinstance(output, bytes | bytearray):
        raise TypeError("pass the completion as str or as a sequence of token IDs, not bytes")
    if encoder is None:
        raise TypeError("token IDs need an encoder (an object with marker_ids and decode)")
    return _IdSplitter(encoder)


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
    machine = _Machine(_schema_lookup(tools), thinking)
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
        self._machine = _Machine(_schema_lookup(tools), thinking)
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
            raise TypeError("feed either text deltas or token IDs, not both")
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
            raise ValueError("the stream is finished")

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
