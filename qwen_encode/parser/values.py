"""Parameter values: the text of a ``<parameter=P>`` value -> a JSON value, typed by the tool's
schema where it declares ``P``, else "JSON when it parses, else the string"."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from ..errors import PromptError
from ..json_text import MAX_JSON_DEPTH, JSONTextError, loads

_JSON_INT: Final = re.compile(r"-?(?:0|[1-9][0-9]*)")
# With a schema saying integer, "007" is 7 (every peer reads it so; JSON alone would not).
_LOOSE_INT: Final = re.compile(r"-?[0-9]+")
#: How deep a tool schema (anyOf/oneOf branches) or a JSON value may nest before the parser stops
#: following it: a deeper schema branch constrains nothing (the schema-free rule applies), a
#: deeper JSON value stays the string it is. It bounds the stack, whatever the input; the same
#: limit as every other JSON qwen-encode reads (``qwen_encode.json_text``).
MAX_DEPTH: Final = MAX_JSON_DEPTH
_JSON_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


class _NoFit:
    """Sentinel: the text has no reading of the requested type."""


_NO_FIT: Final = _NoFit()


def _strict_json(text: str) -> Any:
    """Strict JSON (no ``NaN``/``Infinity``, no float overflowing to infinity); ``_NO_FIT`` when
    the text is not JSON, nests deeper than ``MAX_DEPTH`` or holds an integer past Python's
    digit limit."""
    try:
        return loads(text, strict=True)
    except JSONTextError:
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


def _named_types(schema: Mapping[str, Any]) -> set[str] | None:
    """The types ``"type"`` names (a name or a list of them); None when it names none."""
    kind = schema.get("type")
    if isinstance(kind, str):
        kind = [kind]
    if not isinstance(kind, list | tuple):
        return None
    # An unknown name ("datetime", "text", "enum") is a kind of string to whoever wrote it; the
    # raw text is the safe reading (mlx-lm PR 1310: never crash on it).
    names = {_TYPE_NAMES.get(n.strip().lower(), "string") for n in kind if isinstance(n, str)}
    return names or None


def _implied_types(schema: Mapping[str, Any]) -> set[str] | None:
    """Without a type: what ``enum``, ``const``, ``properties`` or ``items`` imply."""
    if "enum" in schema and isinstance(schema["enum"], list | tuple):
        return {_json_type(v) for v in schema["enum"]} or None
    if "const" in schema:
        return {_json_type(schema["const"])}
    if "properties" in schema:
        return {"object"}
    if "items" in schema:
        return {"array"}
    return None


def _schema_types(schema: Any, depth: int = 0) -> _Types:
    """The JSON types a parameter schema allows; None when it says nothing about type (or nests
    deeper than ``MAX_DEPTH``: a self-referencing schema is cut there)."""
    if not isinstance(schema, Mapping) or depth >= MAX_DEPTH:
        return None
    named = _named_types(schema)
    types: set[str] = named or set()
    declared = named is not None
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
        implied = _implied_types(schema)
        if implied is None:
            return None
        types = implied
    if schema.get("nullable") is True:  # OpenAPI 3.0 spelling of "or null"
        types.add("null")
    return frozenset(types)


def _as_integer(text: str) -> Any:
    # Only digits: "5.0" and "1e3" are how a float is written, and a value that is not written
    # as the schema's type stays the text (a float stays a float rather than losing its
    # fraction; vLLM's int("5.0") fails and keeps the string too). Leading zeros are fine:
    # "007" is 7.
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
        value = float(text)
        # 1e400 would become inf, which JSON cannot carry (json.dumps writes a bare Infinity).
        return value if math.isfinite(value) else _NO_FIT
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


@dataclass(frozen=True, slots=True)
class _Tool:
    types: Mapping[str, _Types]
    order: Mapping[str, int]  # the schema's parameter order
    declared: bool  # the tool has a "properties" object: only those are its parameters


_NO_TOOL: Final = _Tool({}, {}, False)
_Schemas: TypeAlias = Mapping[str, _Tool]


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
        declared = isinstance(properties, Mapping)
        if not isinstance(properties, Mapping):
            properties = {}
        names = [str(p) for p in properties]
        # First definition wins, as the model reads the tools list top-down.
        lookup.setdefault(
            function["name"],
            _Tool(
                types={str(p): _schema_types(s) for p, s in properties.items()},
                order={name: index for index, name in enumerate(names)},
                declared=declared,
            ),
        )
    return lookup


def _tools_json(text: str, where: str) -> Any:
    try:
        return loads(text)
    except JSONTextError as error:
        raise PromptError(error.reason, field=where) from None
