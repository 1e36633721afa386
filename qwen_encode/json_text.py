"""Reading JSON text from callers and files: the one loader of the package, with one depth limit.

Every JSON text qwen-encode reads from outside (a request line, a tool schema, tool-call
arguments, a JSON column of a Parquet row, a ``--tools`` file, a checkpoint's side file) goes
through ``loads``, so the same text is refused the same way everywhere, with a reason that says
which of the three ways it failed (``JSONTextError.kind``). Each caller wraps the failure in its
own typed error naming where (a field, a line, a file).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

__all__ = ["MAX_JSON_DEPTH", "JSONTextError", "json_depth_problem", "loads"]

#: How deeply a JSON value may nest (objects and arrays counted; ``{"a": [1]}`` is 2 deep). Real
#: schemas, arguments and requests stay far below it. Past it, Python's own limits take over in
#: whatever touches the value next (``json.dumps`` and ``==`` recurse in C, at a depth that depends
#: on the caller's stack): a deeper value is refused up front instead, with the field that holds
#: it, so a hostile request cannot raise ``RecursionError`` in a server.
MAX_JSON_DEPTH: Final = 100

# A JSON string (skipped whole, escapes included) or a bracket: what the nesting scan counts.
_SCAN: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')

JSONFailure = Literal["syntax", "number", "depth"]


class JSONTextError(ValueError):
    """JSON text that cannot be read. ``kind``: ``"syntax"`` (not JSON; with ``strict``, also
    NaN, Infinity and numbers past a float's range), ``"number"`` (an integer past Python's
    4,300-digit conversion limit), ``"depth"`` (nesting past ``MAX_JSON_DEPTH``). ``detail``:
    the decoder's own words (for ``"depth"``, the limit); ``reason``: a sentence for a message."""

    def __init__(self, kind: JSONFailure, detail: str) -> None:
        self.kind: JSONFailure = kind
        self.detail = detail
        if kind == "syntax":
            self.reason = f"not valid JSON: {detail}"
        elif kind == "number":
            self.reason = f"holds an integer too long to read ({detail})"
        else:
            self.reason = detail
        super().__init__(self.reason)


def _depth_error() -> JSONTextError:
    return JSONTextError("depth", f"nests more than {MAX_JSON_DEPTH} objects or arrays deep")


def _text_too_deep(text: str) -> bool:
    """Whether JSON text nests objects/arrays past ``MAX_JSON_DEPTH`` (brackets in strings are
    skipped). Checked before decoding, so no decoder ever recurses that deep."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False  # the common case: too few brackets to be too deep, no scan
    depth = 0
    for match in _SCAN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        elif token in "]}":
            depth -= 1
    return False


class _NotStrictJSON(ValueError):
    """Raised by the ``strict`` hooks: valid for Python's decoder, not JSON."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        # 1e400 would become inf, which JSON cannot carry (json.dumps writes a bare Infinity).
        raise _NotStrictJSON(f"{text} is not a finite number")
    return value


def _reject_constant(name: str) -> Any:
    # json.loads accepts NaN, Infinity and -Infinity by default; they are not JSON.
    raise _NotStrictJSON(f"{name} is not JSON")


def loads(text: str, *, strict: bool = False) -> Any:
    """``json.loads`` of ``text``, nesting bounded by ``MAX_JSON_DEPTH``; every failure a
    ``JSONTextError``. ``strict`` refuses what Python's decoder accepts but JSON does not
    (NaN, Infinity, a float literal past the float range)."""
    if _text_too_deep(text):
        raise _depth_error()
    try:
        if strict:
            return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise JSONTextError("syntax", str(error)) from None
    except _NotStrictJSON as error:
        raise JSONTextError("syntax", str(error)) from None
    except RecursionError:  # a stack already deep when called: the decoder's own limit
        raise _depth_error() from None
    except ValueError as error:  # an integer past Python's 4,300-digit conversion limit
        raise JSONTextError("number", str(error)) from None


def json_depth_problem(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why a decoded ``value`` nests too deeply (more than ``limit`` objects/arrays), or None.
    Iterative, so it cannot itself hit the recursion limit; a self-containing value is too
    deep. For values that did not come through ``loads`` (Python objects from a caller)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        depth += 1
        if depth > limit:
            return f"nests more than {limit} objects or arrays deep"
        stack.extend(
            (child, depth) for child in children if isinstance(child, Mapping | list | tuple)
        )
    return None
