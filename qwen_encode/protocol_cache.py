"""The render cache: rendered system turns (tools block, reasoning instruction, system prompt)
and generation primers, kept in compact form (``_Fragment``) so that what a data set repeats in
every row is rendered once, and is the same string object every time.
"""

from __future__ import annotations

import marshal
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

from . import markers as mk
from .conversation import Turn
from .errors import PromptError
from .prompt import Segment, _Builder, _runs_of, _Seg, _segment_of
from .protocol_texts import _tool_signature_lines
from .protocol_turns import _system_segments

__all__ = ["clear_render_cache", "render_cache_info"]


class _Fragment:
    """A rendered part of a prompt (a system turn, the primer) in compact form: its segments, its
    runs, and the public segments once asked for."""

    __slots__ = ("runs", "segments_", "segs", "size")

    def __init__(self, segs: list[_Seg]) -> None:
        self.segs = tuple(segs)
        self.runs = tuple(_runs_of(segs))
        self.segments_: tuple[Segment, ...] | None = None
        # Characters of the segments and of the runs joined from them, and ~64 bytes of tuple
        # per segment and run: bytes, roughly (ASCII text; wider text counts low).
        self.size = sum(len(run[1]) + 64 for run in self.runs) + sum(
            len(seg[0]) + 64 for seg in segs
        )

    @property
    def segments(self) -> tuple[Segment, ...]:
        if self.segments_ is None:
            self.segments_ = tuple(map(_segment_of, self.segs))
        return self.segments_


class _Sized(Protocol):
    @property
    def size(self) -> int: ...


_Entry = TypeVar("_Entry", bound=_Sized)


def _key_size(key: tuple[Any, ...]) -> int:
    return sum(len(k) if isinstance(k, str | bytes) else 0 for k in key)


class _RenderCache(Generic[_Entry]):
    """Rendered system turns (tools block, reasoning instruction, system prompt) and primers,
    keyed by everything they render from, least recently used out first, bounded in bytes of
    text. What a data set repeats in every row is rendered once and is the same string object
    every time, so the encoder's run cache finds it by a hash computed once."""

    def __init__(self, limit: int) -> None:
        self._entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._lock = threading.Lock()  # format_prompt is called from a server's threads
        self._bytes = 0
        self.limit = limit
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[Any, ...]) -> _Entry | None:
        # acquire and release, not ``with``: compiled, a ``with`` looks up and calls the lock's
        # __enter__ and __exit__, most of a hit's cost (three hits a row).
        lock = self._lock
        lock.acquire()
        try:
            entries = self._entries
            fragment = entries.get(key)
            if fragment is None:
                self.misses += 1
            else:
                self.hits += 1
                entries.move_to_end(key)
        finally:
            lock.release()
        return fragment

    def put(self, key: tuple[Any, ...], fragment: _Entry) -> None:
        cost = fragment.size + _key_size(key)
        with self._lock:
            if key in self._entries or cost > self.limit:
                return
            self._entries[key] = fragment
            self._bytes += cost
            while self._bytes > self.limit:
                old_key, old = self._entries.popitem(last=False)
                self._bytes -= old.size + _key_size(old_key)

    def drop(self, key: tuple[Any, ...]) -> None:
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._bytes -= entry.size + _key_size(key)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self.hits = self.misses = 0

    def info(self) -> dict[str, int]:
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self._bytes,
                "limit": self.limit,
                "hits": self.hits,
                "misses": self.misses,
            }


class _ToolLines:
    """The tools block's JSON lines (``_tool_signature_lines``) of one tools list, and whether
    what ``marshal`` reads back from its key gives them too (checked on the first hit)."""

    __slots__ = ("checked", "lines", "size")

    def __init__(self, lines: tuple[str, ...]) -> None:
        self.lines = lines
        self.checked = False
        self.size = sum(map(len, lines)) + 64 * len(lines)


class _MissRun:
    """When to stop keying tools lists: a data set whose every row carries its own tools (as
    function-calling sets often do) never hits, and its key and entry cost a third again of
    encoding the tools. After ``run`` misses in a row, only one list in ``probe`` is looked up
    (the others are encoded directly) until a lookup hits again. What is rendered never
    depends on it; the counts are approximate under threads, which costs nothing but a
    lookup more or less."""

    __slots__ = ("misses", "probe", "run", "skipped")

    def __init__(self, run: int, probe: int) -> None:
        self.run, self.probe = run, probe
        self.misses = self.skipped = 0

    def skip(self) -> bool:
        if self.misses < self.run:
            return False
        self.skipped += 1
        return self.skipped % self.probe != 0

    def count(self, missed: bool) -> None:
        self.misses = self.misses + 1 if missed else 0


_RENDER_CACHE: _RenderCache[_Fragment] = _RenderCache(16 << 20)
_TOOL_LINES: _RenderCache[_ToolLines] = _RenderCache(4 << 20)
_TOOL_MISSES = _MissRun(64, 16)


def render_cache_info() -> dict[str, int]:
    """Entries, bytes (of text, roughly) and limit of the cache of rendered system turns and
    primers, and its hits and misses since it was last cleared; ``tools_*``: the same of the
    cache of tools lists' JSON lines."""
    info = _RENDER_CACHE.info()
    info.update({f"tools_{name}": value for name, value in _TOOL_LINES.info().items()})
    return info


def clear_render_cache() -> None:
    """Forget the rendered system turns and primers, the tools lists' JSON lines (and the hit
    counts)."""
    _RENDER_CACHE.clear()
    _TOOL_LINES.clear()
    _TOOL_MISSES.misses = 0


def _tool_lines(tools: Any) -> Sequence[str]:
    """``_tool_signature_lines(tools)``, without encoding a tools list of plain values again.

    The rows of a data set carry equal tools lists as different objects, and the system turn
    is cached by these lines: encoding each tool to JSON for every row, to find the rendered
    block, was most of the cost of a row with tools. A list is keyed instead by its ``marshal``
    bytes, a sixth of the cost: marshal writes dicts, lists, strings, numbers, bools and None
    of exactly those types (a subclass is refused), each with its type and in order (True, 1
    and 1.0 differ; so does key order), and ``marshal.loads`` reads them back, so equal bytes
    are equal content, whose JSON lines are equal. Anything marshal refuses is encoded as
    before.

    Version 4, not 2: it writes ASCII strings as they are, where version 2 encodes each string
    to UTF-8 first (a 32-tool block: 16 µs against 34). Its back-references (an object met
    again, kept only for an object referenced more than once) make the bytes depend on how the
    list shares its objects, so equal content shared otherwise gives other bytes: a miss, never
    a wrong hit, since what marshal reads back is still the content. Rows parsed alike (json
    shares a document's repeated keys) share alike. A list that holds itself is written too,
    by reference, but never gets an entry: its lines raise.

    marshal also writes any object with the buffer protocol as bytes, which JSON refuses: an
    entry is used only once what marshal reads back from its key is seen to give its lines
    (then no such object can share the key), checked on its first hit, so that a data set
    whose every row has its own tools pays for no check."""
    if type(tools) is not list or not tools:
        return [] if tools is None else _tool_signature_lines(tools)
    if _TOOL_MISSES.skip():
        return _tool_signature_lines(tools)
    try:
        key = (marshal.dumps(tools, 4),)
    except (ValueError, TypeError, RecursionError):  # not marshal's types, or too deep for it
        return _tool_signature_lines(tools)
    found = _TOOL_LINES.get(key)
    _TOOL_MISSES.count(found is None)
    if found is None:
        lines = tuple(_tool_signature_lines(tools))  # the caller's errors, named as they are
        _TOOL_LINES.put(key, _ToolLines(lines))
        return lines
    if not found.checked:
        try:
            read_back = tuple(_tool_signature_lines(marshal.loads(key[0])))
        except PromptError:
            read_back = None
        if read_back != found.lines:
            _TOOL_LINES.drop(key)
            return _tool_signature_lines(tools)
        found.checked = True
    return found.lines


def _head_fragment(
    system: Turn | None, instruction: str, tool_lines: Sequence[str], add_vision_id: bool
) -> _Fragment:
    """The system turn (template lines 55-91), from the cache when its inputs are plain text."""
    content = None if system is None else system.content
    if content is not None and not isinstance(content, str):
        builder = _Builder()
        _system_segments(builder, system, instruction, tool_lines, add_vision_id)
        return _Fragment(builder.segs)
    return _system_fragment(system is not None, content, instruction, tool_lines, add_vision_id)


def _system_fragment(
    has_system: bool,
    content: str | None,
    instruction: str,
    tool_lines: Sequence[str],
    add_vision_id: bool,
) -> _Fragment:
    """The system turn of a conversation whose system message (``has_system``: message 0 is
    one) holds ``content`` as plain text. A lone surrogate in ``content`` raises
    ``PromptError`` here on a miss (an entry is only made of text that rendered)."""
    # The system turn's text and its owner (message 0, or none) are all it renders from.
    key = ("head", has_system, content, instruction, add_vision_id, *tool_lines)
    fragment = _RENDER_CACHE.get(key)
    if fragment is None:
        builder = _Builder()
        system = Turn("system", content) if has_system else None
        _system_segments(builder, system, instruction, tool_lines, add_vision_id)
        fragment = _Fragment(builder.segs)
        _RENDER_CACHE.put(key, fragment)
    return fragment


def _tail_fragment(add_generation_prompt: bool, continuing: bool, thinking: bool) -> _Fragment:
    key = ("tail", add_generation_prompt, continuing, thinking)
    fragment = _RENDER_CACHE.get(key)
    if fragment is None:
        tail = _Builder()
        if add_generation_prompt and not continuing:
            tail.special(mk.TURN_OPEN)
            tail.text("assistant\n")
            # The primer leaves the reasoning span open while thinking, and closes an empty one
            # when thinking is off, so the model answers directly.
            tail.special(mk.THINK_OPEN)
            if thinking:
                tail.text("\n")
            else:
                tail.text("\n\n")
                tail.special(mk.THINK_CLOSE)
                tail.text("\n\n")
        fragment = _Fragment(tail.segs)
        _RENDER_CACHE.put(key, fragment)
    return fragment
