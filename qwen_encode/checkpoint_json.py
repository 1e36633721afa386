"""Reading a checkpoint's JSON files with bounds: sizes checked before reading, a truncated
``tokenizer.json`` refused from its last bytes, and its top-level ``added_tokens`` found without
parsing the megabytes of vocabulary and merges again (the declared IDs that tokenizers ignores).
Every failure is a ``CheckpointError`` naming the path."""

from __future__ import annotations

import json
import mmap
import os
import re
from pathlib import Path
from typing import Any, Final

from .checkpoint import FILE, path_kind
from .errors import CheckpointError
from .json_text import JSONTextError, loads

#: The largest ``tokenizer.json`` read: 256 MiB, 23 times the Qwen 3.8 one (11 MB for 248k tokens)
#: and several times the largest vocabularies published (a few tens of MB). tokenizers reads the
#: whole file before it can fail, and a broken file's diagnosis parses it once more: a 2 GB file
#: cost 17.7 s and 10.5 GB of memory before this bound.
MAX_TOKENIZER_JSON_BYTES: Final = 256 << 20
#: The largest side file read (tokenizer_config.json, configs, the chat template): 16 MiB, about
#: 900 times the largest real one (tokenizer_config.json, 18 KB).
MAX_SIDE_FILE_BYTES: Final = 16 << 20
# How much of the end of tokenizer.json is read at a time to find its last non-blank byte.
_TAIL_READ: Final = 1 << 16
_JSON_BLANKS: Final = b" \t\n\r"

# Patterns over tokenizer.json's bytes that find its top-level "added_tokens" whatever the key
# order, stepping over every other value without building it: the ``model`` value (megabytes of
# vocabulary and merges) is never parsed a second time. Each is written so that every byte can
# match in one way only (the "unrolled loop"), which keeps a failed attempt linear, never
# exponential. _FLAT steps over scalars, strings and innermost arrays/objects (those holding no
# bracket outside strings, such as a vocab object or a merge pair), stopping at any other bracket.
_BLANKS = re.compile(rb"[ \t\n\r]*")
_STRING_RE: Final = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRING = re.compile(_STRING_RE, re.S)
_SCALAR = re.compile(rb"[^,\]}\s]+")
_PLAIN: Final = rb'[^"\[\]{}]*'
_LEAF: Final = rb"[\[{]" + _PLAIN + rb"(?:" + _STRING_RE + _PLAIN + rb")*[\]}]"
_FLAT = re.compile(_PLAIN + rb"(?:(?:" + _STRING_RE + rb"|" + _LEAF + rb")" + _PLAIN + rb")*", re.S)


def _past(pattern: re.Pattern[bytes], data: bytes | mmap.mmap, i: int) -> int:
    """Where ``pattern`` stops matching from ``i``; _BLANKS and _FLAT also match the empty text,
    so they never fail and this is ``i`` at least."""
    match = pattern.match(data, i)
    return i if match is None else match.end()


def checked_size(path: Path, limit: int) -> int:
    """The size of ``path``, after checking it is a regular file (never open a FIFO: it blocks)
    no larger than ``limit``; ``CheckpointError`` naming the path otherwise."""
    kind = path_kind(path)
    if kind != FILE:
        raise CheckpointError(f"{path}: {kind or 'missing'}, not a file")
    try:
        size = path.stat().st_size
    except OSError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror or error})") from error
    if size > limit:
        raise CheckpointError(
            f"{path}: {size:,} bytes, more than the {limit:,} (= {limit >> 20} MiB) read from a "
            "checkpoint file of this kind: not a vocabulary's file, or padded with garbage"
        )
    return size


def check_ends_as_an_object(path: Path, size: int) -> None:
    """Refuse, from the file's last bytes alone, a tokenizer.json that cannot be one JSON object:
    truncated, or followed by other data (NUL padding from a failed copy). tokenizers would read
    and parse all of it before failing."""
    tail, end = b"", size
    try:
        with path.open("rb") as handle:
            while end > 0 and not tail:
                start = max(0, end - _TAIL_READ)
                handle.seek(start)
                tail = handle.read(end - start).rstrip(_JSON_BLANKS)
                end = start + len(tail)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror or error})") from error
    if not tail:
        raise CheckpointError(f"{path}: empty, or only blanks: not a tokenizer.json")
    if not tail.endswith(b"}"):
        raise CheckpointError(
            f"{path}: invalid JSON (it must end with the }} closing its object; found "
            f"{tail[-12:]!r} ending at byte {end - 1:,}: a truncated file, or data after the "
            "JSON such as NUL padding)"
        )


# How read_json names each way a side file's JSON fails.
_JSON_FAILURE: Final = {
    "syntax": "invalid JSON",
    "depth": "JSON nested too deeply to read",
    "number": "JSON that cannot be read",
}


def read_json(path: Path) -> dict[str, Any]:
    checked_size(path, MAX_SIDE_FILE_BYTES)
    try:
        with path.open(encoding="utf-8") as handle:
            value = loads(handle.read())
    except OSError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror or error})") from error
    except UnicodeDecodeError as error:
        raise CheckpointError(f"{path}: not UTF-8 text ({error})") from error
    except JSONTextError as error:
        raise CheckpointError(f"{path}: {_JSON_FAILURE[error.kind]} ({error.detail})") from error
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def read_bytes(path: Path) -> bytes:
    checked_size(path, MAX_SIDE_FILE_BYTES)
    try:
        return path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror or error})") from error


def declared_added_tokens(path: Path) -> list[Any] | None:
    """``added_tokens`` exactly as ``tokenizer.json`` declares them, or None if it has none.

    Needed because tokenizers renumbers silently: it numbers added tokens in file order after the
    base vocabulary whatever IDs the file declares (only a Rust log warning says so), so one
    removed or repeated entry shifts every later ID. The file is mapped, not read, and only the
    ``added_tokens`` value is parsed: in the order tokenizers writes keys it comes before
    ``model``, and the scan stops a few hundred bytes in; in any other order ``model`` is
    stepped over (about 0.6 s for the 11 MB Qwen 3.8 file, no memory beyond the mapping).
    Called after tokenizers loaded the file, so it is one JSON object.
    """
    with path.open("rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return None
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return top_level_added_tokens(data)


def top_level_added_tokens(data: bytes | mmap.mmap) -> list[Any] | None:
    """The value of the top-level key "added_tokens" of the JSON object in ``data`` (a list), or
    None when there is no such key or the text is not a well-formed object."""
    i = _past(_BLANKS, data, 0)
    if data[i : i + 1] != b"{":
        return None
    i += 1
    while True:
        key = _STRING.match(data, _past(_BLANKS, data, i))
        if key is None:
            return None  # the closing }, or not JSON
        i = _past(_BLANKS, data, key.end())
        if data[i : i + 1] != b":":
            return None
        start = _past(_BLANKS, data, i + 1)
        end = _skip_value(data, start)
        if end is None:
            return None
        # Decoded as JSON, as serde matches keys: "added\u005ftokens" is the same key.
        if json.loads(key.group()) == "added_tokens":
            try:
                value = json.loads(data[start:end])
            except (ValueError, RecursionError):
                return None
            return value if isinstance(value, list) else None
        i = _past(_BLANKS, data, end)
        if data[i : i + 1] != b",":
            return None
        i += 1


def _skip_value(data: bytes | mmap.mmap, i: int) -> int | None:
    """Where the JSON value starting at ``i`` ends, found without building it; None if it does
    not end (truncated or malformed text)."""
    first = data[i : i + 1]
    if first not in (b"[", b"{"):
        scalar = (_STRING if first == b'"' else _SCALAR).match(data, i)
        return None if scalar is None else scalar.end()
    depth = 0
    while True:
        bracket = data[i : i + 1]
        if bracket in (b"[", b"{"):
            depth += 1
        elif bracket in (b"]", b"}"):
            depth -= 1
        else:
            return None  # the end of the data, or a quote that opens no complete string
        i += 1
        if depth == 0:
            return i
        i = _past(_FLAT, data, i)
