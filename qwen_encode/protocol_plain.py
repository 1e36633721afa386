"""The fast renderers of the common turn shapes (text content, tool calls): they write the
compact segments and runs directly, equal to what the builder of ``protocol_turns`` writes for
the same turn. ``format_prompt`` takes them where a turn has one of those shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import markers as mk
from .conversation import ToolCall, Turn, surrogate_problem
from .errors import PromptError
from .prompt import _MARKER, _RUN_MARKER, _RUN_TEXT, _Run, _Seg
from .protocol_texts import _tojson
from .protocol_turns import TurnLayout


def _checked(text: str, index: int, field: str) -> str:
    if not text.isascii() and (problem := surrogate_problem(text)):
        raise PromptError(problem, message_index=index, field=field)
    return text


# The _plain_* renderers write what the builder writes for the same turn (the same segments,
# protocol text joined the same way, empty caller text left out), and the runs _runs_of makes of
# them; test_protocol checks them against the builder on every shape they take.


def _plain_user(segs: list[_Seg], runs: list[_Run], content: str, i: int) -> None:
    text = _checked(content, i, "content").strip()
    segs.append((mk.TURN_OPEN, i, False, _MARKER))
    segs.append(("user\n", i, False, None))
    if text:
        segs.append((text, i, False, "content"))
    segs.append((mk.TURN_CLOSE, i, False, _MARKER))
    segs.append(("\n", i, False, None))
    runs.append((_RUN_MARKER, mk.TURN_OPEN, i, False, None))
    runs.append((_RUN_TEXT, "user\n" + text, i, False, None))
    runs.append((_RUN_MARKER, mk.TURN_CLOSE, i, False, None))
    runs.append((_RUN_TEXT, "\n", i, False, None))


def _plain_assistant(
    segs: list[_Seg], runs: list[_Run], turn: Turn, i: int, keep_reasoning: bool
) -> None:
    # Checked in the template's order: the reasoning span renders before the content.
    if keep_reasoning:
        reasoning = _checked((turn.reasoning or "").strip(), i, "reasoning_content")
    content = turn.content
    assert content is None or isinstance(content, str)  # format_prompt sends only those here
    text = "" if content is None else _checked(content, i, "content").strip()
    segs.append((mk.TURN_OPEN, i, False, _MARKER))
    segs.append(("assistant\n", i, False, None))
    runs.append((_RUN_MARKER, mk.TURN_OPEN, i, False, None))
    # The text run still open before the calls or <|im_end|>: its text, owner and parts.
    parts: Any = None
    if keep_reasoning:
        # '<think>\n' + reasoning_content|trim + '\n</think>\n\n' + content
        runs.append((_RUN_TEXT, "assistant\n", i, False, None))
        segs.append((mk.THINK_OPEN, i, True, _MARKER))
        runs.append((_RUN_MARKER, mk.THINK_OPEN, i, True, None))
        if reasoning:
            segs.append(("\n", i, True, None))
            segs.append((reasoning, i, True, "reasoning_content"))
            segs.append(("\n", i, True, None))
            runs.append((_RUN_TEXT, "\n" + reasoning + "\n", i, True, None))
        else:
            segs.append(("\n\n", i, True, None))
            runs.append((_RUN_TEXT, "\n\n", i, True, None))
        segs.append((mk.THINK_CLOSE, i, True, _MARKER))
        segs.append(("\n\n", i, True, None))
        runs.append((_RUN_MARKER, mk.THINK_CLOSE, i, True, None))
        run, trained = "\n\n" + text, True
    elif text:
        # The header (not trained) and the content (trained) are one run of two parts.
        run, trained, parts = "assistant\n" + text, False, ((0, i, False), (10, i, True))
    else:
        run, trained = "assistant\n", False
    if text:
        segs.append((text, i, True, "content"))
    if turn.tool_calls:
        if text:
            # '\n\n' before the first call only when the trimmed content is non-empty.
            segs.append(("\n\n", i, True, None))
            run += "\n\n"
        runs.append((_RUN_TEXT, run, i, trained, parts))
        _plain_calls(segs, runs, turn.tool_calls, i)
    else:
        runs.append((_RUN_TEXT, run, i, trained, parts))
    segs.append((mk.TURN_CLOSE, i, True, _MARKER))
    segs.append(("\n", i, False, None))
    runs.append((_RUN_MARKER, mk.TURN_CLOSE, i, True, None))
    runs.append((_RUN_TEXT, "\n", i, False, None))


def _plain_calls(segs: list[_Seg], runs: list[_Run], calls: Sequence[ToolCall], i: int) -> None:
    """The calls of assistant turn ``i`` as ``_tool_call_segments`` writes them (same segments,
    same checks in the same order), each call one text run between its two markers."""
    for j, call in enumerate(calls):
        where = f"tool_calls[{j}]"
        if j:
            segs.append(("\n", i, True, None))  # '\n' between two calls
            runs.append((_RUN_TEXT, "\n", i, True, None))
        segs.append((mk.TOOL_CALL_OPEN, i, True, _MARKER))
        runs.append((_RUN_MARKER, mk.TOOL_CALL_OPEN, i, True, None))
        name = _checked(call.name, i, f"{where}.name")
        segs.append(("\n<function=", i, True, None))
        segs.append((name, i, True, f"{where}.name"))
        texts = ["\n<function=", name, ">\n"]
        protocol = ">\n"  # protocol text not yet written: joined with what follows it
        for key, value in call.arguments.items():
            field = f"{where}.arguments.{key}"
            segs.append((protocol + "<parameter=", i, True, None))
            segs.append((_checked(key, i, field), i, True, field))
            if not isinstance(value, str):
                value = _tojson_at(value, i, field)
            if value:
                segs.append((">\n", i, True, None))
                segs.append((_checked(value, i, field), i, True, field))
                protocol = "\n</parameter>\n"
            else:
                protocol = ">\n\n</parameter>\n"
            texts += ("<parameter=", key, ">\n", value, "\n</parameter>\n")
        segs.append((protocol + "</function>\n", i, True, None))
        texts.append("</function>\n")
        segs.append((mk.TOOL_CALL_CLOSE, i, True, _MARKER))
        runs.append((_RUN_TEXT, "".join(texts), i, True, None))
        runs.append((_RUN_MARKER, mk.TOOL_CALL_CLOSE, i, True, None))


def _tojson_at(value: Any, i: int, field: str) -> str:
    try:
        return _tojson(value, field)
    except PromptError as error:
        raise PromptError(error.reason, message_index=i, field=field) from None


def _plain_tool(
    segs: list[_Seg], runs: list[_Run], content: str, i: int, layout: TurnLayout
) -> None:
    # Template lines 160-172 (see _tool_segments).
    text = _checked(content, i, "content").strip()
    if layout.opens_turn:
        segs.append((mk.TURN_OPEN, i, False, _MARKER))
        segs.append(("user\n", i, False, None))
        runs.append((_RUN_MARKER, mk.TURN_OPEN, i, False, None))
        runs.append((_RUN_TEXT, "user\n", i, False, None))
    else:
        segs.append(("\n", i, False, None))
        runs.append((_RUN_TEXT, "\n", i, False, None))
    segs.append((mk.TOOL_RESPONSE_OPEN, i, False, _MARKER))
    segs.append(("\n", i, False, None))
    if text:
        segs.append((text, i, False, "content"))
    segs.append(("\n", i, False, None))
    segs.append((mk.TOOL_RESPONSE_CLOSE, i, False, _MARKER))
    runs.append((_RUN_MARKER, mk.TOOL_RESPONSE_OPEN, i, False, None))
    runs.append((_RUN_TEXT, "\n" + text + "\n", i, False, None))
    runs.append((_RUN_MARKER, mk.TOOL_RESPONSE_CLOSE, i, False, None))
    if layout.closes_turn:
        segs.append((mk.TURN_CLOSE, i, False, _MARKER))
        segs.append(("\n", i, False, None))
        runs.append((_RUN_MARKER, mk.TURN_CLOSE, i, False, None))
        runs.append((_RUN_TEXT, "\n", i, False, None))
