"""The fused renderer of plain rows: a conversation of message dicts in the common shapes (string
content, an assistant's reasoning and tool calls, tool results) read, checked, laid out and
written into the compact form in one pass, with no ``Turn``, ``TurnLayout`` or builder.

A data job renders thousands of short rows, and there the objects of the general path (a Turn
per message, a TurnLayout per turn, a tuple per segment and run) cost more than the text: their
allocation, and the garbage collector walking every one of them. Here the runs that do not
depend on the caller's text (markers, the protocol's fixed texts) are made once per message
index and shared by every prompt; a row allocates only the runs that hold its text, and its
segments are made from its runs only if asked for (``prompt._LATER``).

``_render_plain`` returns None for anything it does not take (a Turn, a content list, an option
that is not a plain bool, continuing a message, a conversation the template refuses, a lone
surrogate, a value that is not JSON, more than ``_TABLE_SIZE`` messages): ``format_prompt`` then
renders through the general path, which raises every error with its own type, message and
place, in the template's order. What this returns equals what the general path makes (the
differential tests in test_protocol_rows check segments, runs and head on every shape).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final

from . import markers as mk
from ._accelerator import runs_compiled
from .conversation import ToolCall, _plain_parts, _PlainParts
from .errors import PromptError
from .prompt import _LATER, _RUN_MARKER, _RUN_TEXT, Prompt, _Run
from .protocol_cache import _system_fragment, _tail_fragment, _tool_lines
from .protocol_texts import _REASONING_INSTRUCTIONS, ReasoningEffort, _tojson

# Compiled: CPython's C API, declared in _capi.pxd (a cimport, resolved at build time, so
# nothing is imported), and C loops. As Python there is no C API to call (nor is Cython, if
# installed, imported for nothing: 2.4 ms); the collector untracks the tuples at its first pass.
_COMPILED: Final = runs_compiled("protocol_rows")
if _COMPILED:
    from cython.cimports.qwen_encode._capi import (
        PyObject_GC_IsTracked,
        PyObject_GC_UnTrack,
        qe_has_surrogate,
    )


def _kept(item: tuple[Any, ...]) -> tuple[Any, ...]:
    """A tuple this module made of a row's text (strings, ints, bools, None, and the shared
    parts of a run, tuples of ints), or of such tuples and the render cache's runs (the same,
    of rendered strings), left out of the garbage collector's passes: none of it can lead back
    to the tuple, whether the collector has yet untracked it or not.

    A data job keeps thousands of prompts alive, each with a dozen such tuples. The collector
    would walk each once and then untrack it (it holds nothing that can be in a cycle); walked
    by every young collection, they cost a short row more than rendering its markers did."""
    if _COMPILED:
        PyObject_GC_UnTrack(item)
    return item


def _kept_if_plain(item: tuple[Any, ...]) -> tuple[Any, ...]:
    """``_kept`` for a tuple holding what may be the caller's (an argument value of a ``str``
    subclass, whose instance may hold anything): untracked only when nothing in it is
    tracked."""
    if _COMPILED:
        for part in item:
            if PyObject_GC_IsTracked(part):
                return item
        PyObject_GC_UnTrack(item)
    return item


# Conversations longer than this go the general path: the shared runs of an index cost ~1.6 kB
# (0.4 MB for all), kept for the life of the process (short rows reach ~10 messages, agent
# trajectories a few hundred).
_TABLE_SIZE: Final = 256


class _Shared:
    """The runs of message ``i`` that hold no caller text (one per index, made on first use).
    ``u``: untrained (a turn's header, a user turn, a tool result), ``t``: trained (an
    assistant's body)."""

    __slots__ = (
        "header_parts",
        "r_assistant",
        "r_call_close",
        "r_call_open",
        "r_close_t",
        "r_close_u",
        "r_nl_t",
        "r_nl_u",
        "r_nlnl_t",
        "r_nlnl_u",
        "r_open",
        "r_response_close",
        "r_response_open",
        "r_think_close",
        "r_think_open",
        "r_user",
    )

    def __init__(self, i: int) -> None:
        def run(text: str, trained: bool, marker: bool = False) -> _Run:
            return _kept((_RUN_MARKER if marker else _RUN_TEXT, text, i, trained, None))

        self.r_open = run(mk.TURN_OPEN, False, True)
        self.r_close_u = run(mk.TURN_CLOSE, False, True)
        self.r_close_t = run(mk.TURN_CLOSE, True, True)
        self.r_user = run("user\n", False)
        self.r_assistant = run("assistant\n", False)
        self.r_nl_u = run("\n", False)
        self.r_nl_t = run("\n", True)
        self.r_nlnl_t = run("\n\n", True)
        self.r_nlnl_u = run("\n\n", False)
        self.r_think_open = run(mk.THINK_OPEN, True, True)
        self.r_think_close = run(mk.THINK_CLOSE, True, True)
        self.r_call_open = run(mk.TOOL_CALL_OPEN, True, True)
        self.r_call_close = run(mk.TOOL_CALL_CLOSE, True, True)
        self.r_response_open = run(mk.TOOL_RESPONSE_OPEN, False, True)
        self.r_response_close = run(mk.TOOL_RESPONSE_CLOSE, False, True)
        # The header (untrained) and the content (trained) of an assistant turn without its
        # reasoning span are one run of two parts.
        self.header_parts = _kept((_kept((0, i, False)), _kept((len("assistant\n"), i, True))))


_TABLE: list[_Shared] = []
_TABLE_LOCK = threading.Lock()


def _share(count: int) -> None:
    """Make the shared tuples of the first ``count`` message indices. Readers take entries
    below ``len(_TABLE)`` without the lock: the table only grows, one entry at a time."""
    with _TABLE_LOCK:  # two threads growing it at once would each append index n
        while len(_TABLE) < count:
            _TABLE.append(_Shared(len(_TABLE)))


# The reasoning instruction of each effort the template accepts, by the values a caller passes
# (anything else goes the general path, which parses it or names it).
_INSTRUCTIONS: Final[dict[Any, str]] = {
    None: _REASONING_INSTRUCTIONS[ReasoningEffort.XHIGH],
    **{effort.value: text for effort, text in _REASONING_INSTRUCTIONS.items()},
}


def _render_plain(
    messages: Any,
    tools: Any,
    enable_thinking: Any,
    reasoning_effort: Any,
    preserve_thinking: Any,
    add_generation_prompt: Any,
    add_vision_id: Any,
    continue_final_message: Any,
) -> Prompt | None:
    """``format_prompt`` of a plain row, or None (see the module's docstring)."""
    if (
        type(messages) is not list
        or not messages
        or len(messages) > _TABLE_SIZE
        or continue_final_message is not False
        or type(enable_thinking) is not bool
        or type(preserve_thinking) is not bool
        or type(add_generation_prompt) is not bool
        or type(add_vision_id) is not bool
    ):
        return None
    instruction = ""
    if enable_thinking:
        kind = type(reasoning_effort)
        if reasoning_effort is not None and kind is not str and kind is not ReasoningEffort:
            return None
        found = _INSTRUCTIONS.get(
            reasoning_effort.value if kind is ReasoningEffort else reasoning_effort
        )
        if found is None:
            return None
        instruction = found
    rows = _read(messages, add_generation_prompt)
    if rows is None:
        return None
    last_query = _last_query(rows)
    has_system = rows[0][0] == "system"
    system = rows[0][1] if has_system else None
    if last_query < 0 or (system is not None and not system.isascii() and _bad(system)):
        return None
    runs: list[_Run] = []
    pieces: list[Any] = []
    if not _render_turns(runs, pieces, rows, preserve_thinking, last_query):
        return None
    # The caches are touched only once the turns are known to render: a conversation refused
    # here is rendered again by the general path, and counted in render_cache_info once.
    try:
        tool_lines = _tool_lines(tools)
    except PromptError:
        return None
    head = _system_fragment(has_system, system, instruction, tool_lines, add_vision_id)
    tail = _tail_fragment(add_generation_prompt, False, enable_thinking)
    # A tuple, not a list: a list never leaves the garbage collector, and a data job keeps
    # thousands of prompts alive. Every run is this module's or the render cache's (strings,
    # ints, tuples of those): none can lead back to the tuple. No run crosses a turn here (each
    # turn starts on a marker), so the runs concatenate as they are.
    all_runs = _kept((*head.runs, *runs, *tail.runs))
    called = _kept_if_plain(tuple(pieces)) if pieces else ()
    # No segments: what makes them when first asked for (``_later_segs``). A data job encodes
    # its prompts and never reads their segments, and a tuple per caller text (and its field's
    # name) made, walked by the collector and freed with each row was a quarter of rendering it.
    later = (_LATER, all_runs, head.segs, len(head.runs), tail.segs, len(tail.runs), called)
    prompt = Prompt._compact(later, all_runs, head.runs if len(head.runs) > 1 else None)
    if _COMPILED and not PyObject_GC_IsTracked(called):
        # Then nothing the prompt holds can lead back to it: runs and pieces of strings and
        # ints, the render cache's segments (tuples of strings); nor can the segments and text
        # it makes of them later (strings, ints, frozen segments of those). So it can be in no
        # cycle. Tracked, the prompts a data job holds were what set off each full collection.
        PyObject_GC_UnTrack(later)
        PyObject_GC_UnTrack(prompt)
    return prompt


def _read(messages: list[Any], add_generation_prompt: bool) -> list[_PlainParts] | None:
    """The messages' parts (``_plain_parts``), or None when one is not plain or the template
    would refuse their order: a late system message, a tool result after no assistant turn, a
    generation prompt after an assistant turn."""
    rows: list[_PlainParts] = []
    before = None
    for index, message in enumerate(messages):
        row = _plain_parts(message)
        if row is None:
            return None
        role = row[0]
        if (role == "system" and index) or (
            role == "tool" and (before is None or before == "system" or before == "user")
        ):
            return None
        rows.append(row)
        before = role
    if add_generation_prompt and before == "assistant":
        return None
    return rows


def _last_query(rows: list[_PlainParts]) -> int:
    """Template lines 94-106 on plain content: the last user turn whose trimmed text is not
    wrapped in ``<tool_response>`` … ``</tool_response>``; -1 if there is none."""
    for index in range(len(rows) - 1, -1, -1):
        role, content = rows[index][0], rows[index][1]
        if role != "user":
            continue
        text = "" if content is None else content.strip()
        if not (text.startswith(mk.TOOL_RESPONSE_OPEN) and text.endswith(mk.TOOL_RESPONSE_CLOSE)):
            return index
    return -1


def _bad(text: str) -> bool:
    """Whether non-ASCII ``text`` holds a lone surrogate (``surrogate_problem``, which the
    general path raises with; callers test ``isascii()`` first, in C)."""
    if _COMPILED:
        # A C loop over the code points (_capi.qe_has_surrogate): no UTF-8 copy made and
        # thrown away for every non-ASCII text of a multilingual set.
        return bool(qe_has_surrogate(text))
    try:  # as Python, encoding is the fastest scan (3x the regex's)
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _render_turns(
    runs: list[_Run],
    pieces: list[Any],
    rows: list[_PlainParts],
    preserve_thinking: bool,
    last_query: int,
) -> bool:
    """Each turn's runs, as ``protocol_plain`` lays them out, and each call's pieces (what
    ``prompt._later_segs`` makes its segments of); False on a lone surrogate or a value that is
    not JSON (the general path names it)."""
    last = len(rows) - 1
    table = _TABLE
    if len(table) < len(rows):
        _share(len(rows))
    for i, (role, content, reasoning, calls, _, _) in enumerate(rows):
        if role == "system":
            continue  # message 0: the head renders it
        if content is None:
            content = ""  # renders as empty content does, in every role
        elif not content.isascii() and _bad(content):
            return False
        if role == "user":
            _user(runs, content.strip(), i, table[i])
        elif role == "assistant":
            keep = preserve_thinking or i > last_query
            s = table[i]
            if not _assistant(runs, pieces, content.strip(), reasoning, calls, i, keep, s):
                return False
        else:
            opens = rows[i - 1][0] != "tool"
            closes = i == last or rows[i + 1][0] != "tool"
            _tool(runs, content.strip(), i, opens, closes, table[i])
    return True


def _user(runs: list[_Run], text: str, i: int, s: _Shared) -> None:
    if text:
        runs += (
            s.r_open,
            _kept((_RUN_TEXT, "user\n" + text, i, False, None)),
            s.r_close_u,
            s.r_nl_u,
        )
    else:
        runs += (s.r_open, s.r_user, s.r_close_u, s.r_nl_u)


def _tool(runs: list[_Run], text: str, i: int, opens: bool, closes: bool, s: _Shared) -> None:
    # Template lines 160-172: consecutive results share one user turn, each in its own
    # '\n<tool_response>\n' … '\n</tool_response>' span.
    if opens:
        runs += (s.r_open, s.r_user)
    else:
        runs.append(s.r_nl_u)
    if text:
        runs += (s.r_response_open, _kept((_RUN_TEXT, "\n" + text + "\n", i, False, None)))
    else:
        runs += (s.r_response_open, s.r_nlnl_u)
    runs.append(s.r_response_close)
    if closes:
        runs += (s.r_close_u, s.r_nl_u)


def _assistant(
    runs: list[_Run],
    pieces: list[Any],
    text: str,
    reasoning: str | None,
    calls: tuple[ToolCall, ...],
    i: int,
    keep_reasoning: bool,
    s: _Shared,
) -> bool:
    """As ``_plain_assistant``, of the trimmed content ``text``; False on a lone surrogate in
    the reasoning or the calls, or a value that is not JSON."""
    # '<think>\n' + reasoning_content|trim + '\n</think>\n\n' + content
    runs.append(s.r_open)
    parts: Any = None
    if keep_reasoning:
        thought = "" if reasoning is None else reasoning.strip()
        if not thought.isascii() and _bad(thought):
            return False
        if thought:
            runs += (
                s.r_assistant,
                s.r_think_open,
                _kept((_RUN_TEXT, "\n" + thought + "\n", i, True, None)),
            )
        else:
            runs += (s.r_assistant, s.r_think_open, s.r_nlnl_t)
        runs.append(s.r_think_close)
        run, trained = "\n\n" + text, True
    elif text:
        run, trained, parts = "assistant\n" + text, False, s.header_parts
    else:
        run, trained = "assistant\n", False
    if text and calls:
        run += "\n\n"  # '\n\n' before the first call only when the trimmed content is non-empty
    runs.append(_kept((_RUN_TEXT, run, i, trained, parts)))
    if calls and not _calls(runs, pieces, calls, i, s):
        return False
    runs += (s.r_close_t, s.r_nl_u)
    return True


def _calls(
    runs: list[_Run], pieces: list[Any], calls: Sequence[ToolCall], i: int, s: _Shared
) -> bool:
    """As ``_plain_calls``: each call one text run between its two markers; its pieces (name,
    argument count, then each key and value as written) for ``prompt._later_segs``."""
    for j, call in enumerate(calls):
        if j:
            runs.append(s.r_nl_t)  # '\n' between two calls
        name = call.name  # plain names are printable ASCII (_PLAIN_NAME)
        arguments = call.arguments
        runs.append(s.r_call_open)
        pieces += (name, len(arguments))
        texts = ["\n<function=", name, ">\n"]
        for key, value in arguments.items():
            if not isinstance(value, str):
                try:
                    # json writes an int as its repr (and refuses one past the digit limit,
                    # as repr does); anything else through the template's tojson.
                    field = f"tool_calls[{j}].arguments.{key}"
                    value = repr(value) if type(value) is int else _tojson(value, field)
                except Exception:  # whatever it is, the general path raises it
                    return False
            if value and not value.isascii() and _bad(value):
                return False
            pieces += (key, value)
            texts += ("<parameter=", key, ">\n", value, "\n</parameter>\n")
        texts.append("</function>\n")
        runs += (_kept((_RUN_TEXT, "".join(texts), i, True, None)), s.r_call_close)
    return True
