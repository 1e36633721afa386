"""The fused renderer of plain rows: a conversation of message dicts in the common shapes (string
content, an assistant's reasoning and tool calls, tool results) read, checked, laid out and
written into the compact form in one pass, with no ``Turn``, ``TurnLayout`` or builder.

A data job renders thousands of short rows, and there the objects of the general path (a Turn
per message, a TurnLayout per turn, a tuple per segment and run) cost more than the text: their
allocation, and the garbage collector walking every one of them. Here the segments and runs
that do not depend on the caller's text (markers, the protocol's fixed texts) are made once per
message index and shared by every prompt; a row allocates only the tuples that hold its text.

``_render_plain`` returns None for anything it does not take (a Turn, a content list, an option
that is not a plain bool, continuing a message, a conversation the template refuses, a lone
surrogate, a value that is not JSON, more than ``_TABLE_SIZE`` messages): ``format_prompt`` then
renders through the general path, which raises every error with its own type, message and
place, in the template's order. What this returns equals what the general path makes (the
differential tests in test_protocol check segments, runs and head on every shape).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final

from . import markers as mk
from .conversation import ToolCall, _plain_parts, _PlainParts
from .errors import PromptError
from .prompt import _MARKER, _RUN_MARKER, _RUN_TEXT, Prompt, _Run, _Seg
from .protocol_cache import _system_fragment, _tail_fragment, _tool_lines
from .protocol_texts import _REASONING_INSTRUCTIONS, ReasoningEffort, _tojson

# Conversations longer than this go the general path: the shared tuples of an index cost ~4 kB
# (1 MB for all), kept for the life of the process (short rows reach ~10 messages, agent
# trajectories a few hundred).
_TABLE_SIZE: Final = 256


class _Shared:
    """The segments and runs of message ``i`` that hold no caller text (one per index, made on
    first use), flat (see ``prompt._flat``): ``s_*`` segments, ``r_*`` runs, what follows one
    another in every prompt joined in one tuple. ``u``: untrained (a turn's header, a user
    turn, a tool result), ``t``: trained (an assistant's body)."""

    __slots__ = (
        "after_param",
        "end_function",
        "gt_nl_t",
        "header_parts",
        "nl_t",
        "nl_u",
        "nlnl_t",
        "r_assistant_think",
        "r_assistant_think_nlnl",
        "r_call_close",
        "r_call_open",
        "r_close_nl_t",
        "r_close_nl_u",
        "r_nl_t",
        "r_nl_u",
        "r_open",
        "r_open_user",
        "r_response_close",
        "r_response_open",
        "r_response_open_nlnl",
        "r_think_close",
        "r_user_empty",
        "s_call_open_function",
        "s_close_nl_t",
        "s_close_nl_u",
        "s_open_assistant",
        "s_open_user",
        "s_response_close",
        "s_response_open_nl",
        "s_response_open_nl_nl",
        "s_think_close_nlnl",
        "s_think_open_nl",
        "s_think_open_nlnl",
        "s_user_empty",
    )

    def __init__(self, i: int) -> None:
        def seg(text: str, trained: bool, marker: bool = False) -> _Seg:
            return (text, i, trained, _MARKER if marker else None)

        def run(text: str, trained: bool, marker: bool = False) -> _Run:
            return (_RUN_MARKER if marker else _RUN_TEXT, text, i, trained, None)

        open_, user = seg(mk.TURN_OPEN, False, True), seg("user\n", False)
        close_u, close_t = seg(mk.TURN_CLOSE, False, True), seg(mk.TURN_CLOSE, True, True)
        self.nl_u, self.nl_t, self.nlnl_t = seg("\n", False), seg("\n", True), seg("\n\n", True)
        think_open, think_close = seg(mk.THINK_OPEN, True, True), seg(mk.THINK_CLOSE, True, True)
        response_open = seg(mk.TOOL_RESPONSE_OPEN, False, True)
        self.s_open_user = open_ + user
        self.s_close_nl_u = close_u + self.nl_u
        self.s_close_nl_t = close_t + self.nl_u
        self.s_user_empty = open_ + user + close_u + self.nl_u
        self.s_open_assistant = open_ + seg("assistant\n", False)
        self.s_think_open_nl = think_open + self.nl_t
        self.s_think_open_nlnl = think_open + self.nlnl_t
        self.s_think_close_nlnl = think_close + self.nlnl_t
        self.s_response_open_nl = response_open + self.nl_u
        self.s_response_open_nl_nl = response_open + self.nl_u + self.nl_u
        self.s_response_close = seg(mk.TOOL_RESPONSE_CLOSE, False, True)
        self.s_call_open_function = seg(mk.TOOL_CALL_OPEN, True, True) + seg("\n<function=", True)

        r_open, r_nl_u = run(mk.TURN_OPEN, False, True), run("\n", False)
        r_close_u = run(mk.TURN_CLOSE, False, True)
        r_think_open = run(mk.THINK_OPEN, True, True)
        self.r_open, self.r_nl_u, self.r_nl_t = r_open, r_nl_u, run("\n", True)
        self.r_open_user = r_open + run("user\n", False)
        self.r_close_nl_u = r_close_u + r_nl_u
        self.r_close_nl_t = run(mk.TURN_CLOSE, True, True) + r_nl_u
        self.r_user_empty = self.r_open_user + self.r_close_nl_u
        self.r_assistant_think = run("assistant\n", False) + r_think_open
        self.r_assistant_think_nlnl = self.r_assistant_think + run("\n\n", True)
        self.r_think_close = run(mk.THINK_CLOSE, True, True)
        self.r_call_open = run(mk.TOOL_CALL_OPEN, True, True)
        self.r_call_close = run(mk.TOOL_CALL_CLOSE, True, True)
        self.r_response_open = run(mk.TOOL_RESPONSE_OPEN, False, True)
        self.r_response_open_nlnl = self.r_response_open + run("\n\n", False)
        self.r_response_close = run(mk.TOOL_RESPONSE_CLOSE, False, True)
        # The header (untrained) and the content (trained) of an assistant turn without its
        # reasoning span are one run of two parts.
        self.header_parts = ((0, i, False), (len("assistant\n"), i, True))
        # A call's protocol text is joined with what follows it (the builder joins consecutive
        # protocol texts): what comes before a parameter, and the function's end, after the
        # name (0), after a value (1), after an empty value (2).
        before = (">\n", "\n</parameter>\n", ">\n\n</parameter>\n")
        self.gt_nl_t = seg(">\n", True)
        self.after_param = tuple(seg(text + "<parameter=", True) for text in before)
        self.end_function = tuple(
            seg(text + "</function>\n", True) + seg(mk.TOOL_CALL_CLOSE, True, True)
            for text in before
        )


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
    segs: list[Any] = []  # flat, as the prompt keeps them
    runs: list[Any] = []
    if not _render_turns(segs, runs, rows, preserve_thinking, last_query):
        return None
    # The caches are touched only once the turns are known to render: a conversation refused
    # here is rendered again by the general path, and counted in render_cache_info once.
    try:
        tool_lines = _tool_lines(tools)
    except PromptError:
        return None
    head = _system_fragment(has_system, system, instruction, tool_lines, add_vision_id)
    tail = _tail_fragment(add_generation_prompt, False, enable_thinking)
    # Tuples, not lists: a tuple that holds only strings, ints and None leaves the garbage
    # collector at its first pass, and a data job keeps thousands of prompts alive. No run
    # crosses a turn here (each turn starts on a marker), so the runs concatenate as they are.
    return Prompt._compact(
        (*head.flat_segs, *segs, *tail.flat_segs),
        (*head.flat_runs, *runs, *tail.flat_runs),
        head.runs if len(head.runs) > 1 else None,
    )


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
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _render_turns(
    segs: list[_Seg],
    runs: list[_Run],
    rows: list[_PlainParts],
    preserve_thinking: bool,
    last_query: int,
) -> bool:
    """Each turn's segments and runs, as ``protocol_plain`` writes them; False on a lone
    surrogate or a value that is not JSON (the general path names it)."""
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
            _user(segs, runs, content.strip(), i, table[i])
        elif role == "assistant":
            keep = preserve_thinking or i > last_query
            if not _assistant(segs, runs, content.strip(), reasoning, calls, i, keep, table[i]):
                return False
        else:
            opens = rows[i - 1][0] != "tool"
            closes = i == last or rows[i + 1][0] != "tool"
            _tool(segs, runs, content.strip(), i, opens, closes, table[i])
    return True


def _user(segs: list[Any], runs: list[Any], text: str, i: int, s: _Shared) -> None:
    if text:
        segs += s.s_open_user
        segs += (text, i, False, "content")
        segs += s.s_close_nl_u
        runs += s.r_open
        runs += (_RUN_TEXT, "user\n" + text, i, False, None)
        runs += s.r_close_nl_u
    else:
        segs += s.s_user_empty
        runs += s.r_user_empty


def _tool(
    segs: list[Any], runs: list[Any], text: str, i: int, opens: bool, closes: bool, s: _Shared
) -> None:
    # Template lines 160-172: consecutive results share one user turn, each in its own
    # '\n<tool_response>\n' … '\n</tool_response>' span.
    if opens:
        segs += s.s_open_user
        runs += s.r_open_user
    else:
        segs += s.nl_u
        runs += s.r_nl_u
    if text:
        segs += s.s_response_open_nl
        segs += (text, i, False, "content")
        segs += s.nl_u
        runs += s.r_response_open
        runs += (_RUN_TEXT, "\n" + text + "\n", i, False, None)
    else:
        segs += s.s_response_open_nl_nl
        runs += s.r_response_open_nlnl
    segs += s.s_response_close
    runs += s.r_response_close
    if closes:
        segs += s.s_close_nl_u
        runs += s.r_close_nl_u


def _assistant(
    segs: list[Any],
    runs: list[Any],
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
    segs += s.s_open_assistant
    runs += s.r_open
    parts: Any = None
    if keep_reasoning:
        thought = "" if reasoning is None else reasoning.strip()
        if not thought.isascii() and _bad(thought):
            return False
        if thought:
            segs += s.s_think_open_nl
            segs += (thought, i, True, "reasoning_content")
            segs += s.nl_t
            runs += s.r_assistant_think
            runs += (_RUN_TEXT, "\n" + thought + "\n", i, True, None)
        else:
            segs += s.s_think_open_nlnl
            runs += s.r_assistant_think_nlnl
        segs += s.s_think_close_nlnl
        runs += s.r_think_close
        run, trained = "\n\n" + text, True
    elif text:
        run, trained, parts = "assistant\n" + text, False, s.header_parts
    else:
        run, trained = "assistant\n", False
    if text:
        segs += (text, i, True, "content")
        if calls:
            # '\n\n' before the first call only when the trimmed content is non-empty.
            segs += s.nlnl_t
            run += "\n\n"
    runs += (_RUN_TEXT, run, i, trained, parts)
    if calls and not _calls(segs, runs, calls, i, s):
        return False
    segs += s.s_close_nl_t
    runs += s.r_close_nl_t
    return True


def _calls(segs: list[Any], runs: list[Any], calls: Sequence[ToolCall], i: int, s: _Shared) -> bool:
    """As ``_plain_calls``: each call one text run between its two markers."""
    for j, call in enumerate(calls):
        where = f"tool_calls[{j}]"
        if j:
            segs += s.nl_t  # '\n' between two calls
            runs += s.r_nl_t
        name = call.name  # plain names are printable ASCII (_PLAIN_NAME)
        segs += s.s_call_open_function
        segs += (name, i, True, where + ".name")
        runs += s.r_call_open
        texts = ["\n<function=", name, ">\n"]
        state = 0  # what the protocol text still to write follows: the name, a value, ""
        for key, value in call.arguments.items():
            field = f"{where}.arguments.{key}"
            segs += s.after_param[state]
            segs += (key, i, True, field)
            if not isinstance(value, str):
                try:
                    # json writes an int as its repr (and refuses one past the digit limit,
                    # as repr does); anything else through the template's tojson.
                    value = repr(value) if type(value) is int else _tojson(value, field)
                except Exception:  # whatever it is, the general path raises it
                    return False
            if value:
                if not value.isascii() and _bad(value):
                    return False
                segs += s.gt_nl_t
                segs += (value, i, True, field)
                state = 1
            else:
                state = 2
            texts += ("<parameter=", key, ">\n", value, "\n</parameter>\n")
        texts.append("</function>\n")
        segs += s.end_function[state]
        runs += (_RUN_TEXT, "".join(texts), i, True, None)
        runs += s.r_call_close
    return True
