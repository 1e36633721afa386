"""Qwen 3.8 prompt construction: conversations -> ``Prompt`` (typed segments), byte-identical to the
checkpoint's own chat template (``chat_template.jinja``, sha256 c3cf9e34…1041).

Why segments: the template produces one string, and once it is a string nobody can tell the
``<|im_end|>`` the protocol wrote from the one a user typed. Here every marker the protocol writes
is a ``Special`` and every piece of text is a ``Text`` that remembers which message and field it
came from, so the encoder can map delimiters straight to vocabulary IDs and keep caller text as
text.
``Prompt.text`` joins the segments and is what ``apply_chat_template(tokenize=False)`` renders.

Comments cite the template line each rule comes from. Evaluation order follows the template too, so
a conversation with several problems raises the error the template would raise first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .conversation import ImageBlock, TextBlock, Turn, VideoBlock, turns_from_messages
from .errors import PromptError, shown
from .prompt import _RUN_TEXT, Prompt, Segment, Special, Text, _Builder, _Run, _runs_of, _Seg

# The rooms of prompt construction, re-exported here: the protocol's texts, one turn's rendering,
# the render cache of system turns and primers, the fast renderers of the common turn shapes,
# and the fused renderer of whole rows of plain message dicts.
from .protocol_cache import _Fragment, _head_fragment, _tail_fragment, _tool_lines
from .protocol_cache import clear_render_cache as clear_render_cache  # the docs name it here
from .protocol_cache import render_cache_info as render_cache_info
from .protocol_plain import _plain_assistant, _plain_tool, _plain_user
from .protocol_rows import _render_plain
from .protocol_texts import (
    _REASONING_INSTRUCTIONS,
    ReasoningEffort,
    reasoning_effort_from_scale,
    reasoning_instruction,
    serialize_tool_signatures,
    tools_section,
)
from .protocol_turns import (
    TurnLayout,
    _is_tool_response_wrapper,
    _render_into,
    _turn_layout,
    format_tool_call,
    format_turn,
    render_turn,
)

__all__ = [
    "Prompt",
    "PromptPlan",
    "ReasoningEffort",
    "Segment",
    "Special",
    "Text",
    "TurnLayout",
    "format_prompt",
    "format_tool_call",
    "format_turn",
    "plan_prompt",
    "reasoning_effort_from_scale",
    "reasoning_instruction",
    "render_turn",
    "serialize_tool_signatures",
    "tools_section",
]


@dataclass(frozen=True)
class PromptPlan:
    """A conversation checked and laid out: the system turn (``head``), how each turn renders
    (``layouts``) and the generation primer (``tail``). ``format_prompt`` is
    ``head + render_turn(...) for each turn + tail``; a chat session re-renders only the turns
    whose layout changed."""

    head: tuple[Segment, ...]
    layouts: tuple[TurnLayout, ...]
    tail: tuple[Segment, ...]
    add_vision_id: bool
    #: Index of the last real user query (template lines 94-106).
    last_query: int = -1
    #: How many leading layouts were taken unchanged from ``previous`` (see ``plan_prompt``).
    unchanged: int = 0


def format_prompt(
    turns: Iterable[Turn | Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any] | str] | str | None = None,
    enable_thinking: bool = True,
    reasoning_effort: ReasoningEffort | str | None = None,
    preserve_thinking: bool = True,
    add_generation_prompt: bool = True,
    add_vision_id: bool = False,
    continue_final_message: bool = False,
) -> Prompt:
    """Render a conversation as the Qwen 3.8 template does, as typed segments.

    ``turns`` are ``Turn`` values or message dicts. ``reasoning_effort=None`` is the template's
    default (xhigh while thinking); the effort is ignored when ``enable_thinking`` is false.
    ``continue_final_message`` leaves the final turn open after its content, for the model to
    continue (then ``add_generation_prompt`` is ignored).
    """
    options = (
        tools,
        enable_thinking,
        reasoning_effort,
        preserve_thinking,
        add_generation_prompt,
        add_vision_id,
        continue_final_message,
    )
    # Plain message dicts are rendered in one pass; anything else, and every error, here.
    prompt = _render_plain(turns, *options)
    if prompt is not None:
        return prompt
    turns = turns_from_messages(turns)
    head, layouts, tail, _, _ = _plan(turns, *options, None)
    assert head is not None
    # Runs never cross a turn (each starts on a marker, or on text after the marker that ended
    # the turn before), so each turn's runs are made with it and the lists concatenate. The
    # common shapes (text content, no tool calls) are written directly (_plain_*), the others
    # through a builder.
    segs: list[_Seg] = list(head.segs)
    runs: list[_Run] = list(head.runs)
    joined = True
    for index, turn in enumerate(turns):
        layout = layouts[index]
        content = turn.content
        if (content is None or type(content) is str) and not layout.open_end:
            role = turn.role
            if role == "user" and content is not None:
                _plain_user(segs, runs, content, index)
                continue
            if role == "assistant":
                _plain_assistant(segs, runs, turn, index, layout.keep_reasoning)
                continue
            if role == "tool" and content is not None:
                _plain_tool(segs, runs, content, index, layout)
                continue
        b = _Builder()
        _render_into(b, turn, index, layout, add_vision_id)
        turn_runs = _runs_of(b.segs)
        joined = joined and not _joins_text(runs, turn_runs)
        segs += b.segs
        runs += turn_runs
    joined = joined and not _joins_text(runs, tail.runs)
    segs += tail.segs
    runs += tail.runs
    if not joined:
        return Prompt._compact(segs, _runs_of(segs))
    # The system turn (its text all one message's, untrained) is encoded once per encoder.
    return Prompt._compact(segs, runs, head.runs if len(head.runs) > 1 else None)


def _joins_text(before: Sequence[_Run], after: Sequence[_Run]) -> bool:
    """Whether two run lists meet text to text (one run, which concatenation would split)."""
    return bool(before and after and before[-1][0] == _RUN_TEXT and after[0][0] == _RUN_TEXT)


def plan_prompt(
    turns: Sequence[Turn],
    tools: Sequence[Mapping[str, Any] | str] | str | None = None,
    enable_thinking: bool = True,
    reasoning_effort: ReasoningEffort | str | None = None,
    preserve_thinking: bool = True,
    add_generation_prompt: bool = True,
    add_vision_id: bool = False,
    continue_final_message: bool = False,
    *,
    previous: PromptPlan | None = None,
) -> PromptPlan:
    """Check a conversation the way the template does, in the template's order, and lay it out.
    Raises ``PromptError`` for everything ``format_prompt`` refuses.

    ``previous`` is for a conversation that grows (a chat session): the plan of a prefix of
    ``turns``, made with the same options. Its head and the layouts that no later turn can change
    are reused, so planning costs what the new turns cost, not what the history does; the result
    equals planning from scratch. A new turn changes only the ``closes_turn`` of the turn before
    it and, with ``preserve_thinking=False``, the ``keep_reasoning`` of the turns since the last
    real query when it is a new one (each turn flips once: amortised constant).
    ``unchanged`` tells how many leading layouts are ``previous``'s."""
    _check_plan_arguments(turns, previous)
    head, layouts, tail, last_query, unchanged = _plan(
        turns,
        tools,
        enable_thinking,
        reasoning_effort,
        preserve_thinking,
        add_generation_prompt,
        add_vision_id,
        continue_final_message,
        previous,
    )
    return PromptPlan(
        head=previous.head if head is None else head.segments,  # type: ignore[union-attr]  # _plan keeps previous's head only when there is one
        layouts=tuple(layouts),
        tail=tail.segments,
        add_vision_id=add_vision_id,
        last_query=last_query,
        unchanged=unchanged,
    )


def _check_plan_arguments(turns: Sequence[Turn], previous: PromptPlan | None) -> None:
    """``plan_prompt`` takes ``Turn`` values (``format_prompt`` reads message dicts). Only the
    turns past ``previous`` are checked: those before it were when it was planned, and a chat
    session's planning must cost what its new turns cost."""
    if isinstance(turns, str | bytes | Mapping) or not isinstance(turns, Sequence):
        raise PromptError(
            f"expected a sequence of Turn values, got {type(turns).__name__}", field="turns"
        )
    if previous is not None and not isinstance(previous, PromptPlan):
        raise PromptError(
            f"expected a PromptPlan or None, got {type(previous).__name__}", field="previous"
        )
    known = len(previous.layouts) if previous is not None else 0
    for index in range(known if known <= len(turns) else 0, len(turns)):
        if not isinstance(turns[index], Turn):
            raise PromptError(
                f"expected a Turn, got {type(turns[index]).__name__} (turns_from_messages reads "
                "message dicts)",
                message_index=index,
            )


def _plan(
    turns: Sequence[Turn],
    tools: Sequence[Mapping[str, Any] | str] | str | None,
    enable_thinking: bool,
    reasoning_effort: ReasoningEffort | str | None,
    preserve_thinking: bool,
    add_generation_prompt: bool,
    add_vision_id: bool,
    continue_final_message: bool,
    previous: PromptPlan | None,
) -> tuple[_Fragment | None, list[TurnLayout], _Fragment, int, int]:
    """``plan_prompt``'s work: the head (None when ``previous``'s is kept), the layouts, the
    tail, the last real query and how many layouts are ``previous``'s."""
    _check_flags(
        enable_thinking,
        preserve_thinking,
        add_generation_prompt,
        add_vision_id,
        continue_final_message,
    )
    if not turns:
        raise PromptError("No messages provided.")
    # The template resolves and checks the effort only while thinking (its `if enable_thinking is
    # undefined or enable_thinking is true` block): with thinking off any value renders, OpenAI's
    # "none" included.
    instruction = ""
    if enable_thinking:
        effort = ReasoningEffort.parse(
            ReasoningEffort.XHIGH if reasoning_effort is None else reasoning_effort
        )
        instruction = _REASONING_INSTRUCTIONS[effort]
    if previous is not None and (
        continue_final_message or not previous.layouts or len(previous.layouts) > len(turns)
    ):
        previous = None  # continuing rewrites the last turn's layout and the last query rule
    if previous is None:
        tool_lines = _tool_lines(tools)

    last = len(turns) - 1
    if continue_final_message:
        _check_continuable(turns[last], last)
    elif add_generation_prompt and turns[last].role == "assistant":
        raise PromptError(
            "the conversation ends on an assistant turn and add_generation_prompt=True would open "
            "a second one; pass continue_final_message=True to continue it, or "
            "add_generation_prompt=False to render it closed",
            message_index=last,
        )

    head: _Fragment | None = None
    if previous is None:
        first = turns[0]
        head = _head_fragment(
            first if first.role == "system" else None, instruction, tool_lines, add_vision_id
        )
        last_query = _last_query_index(turns, add_vision_id, continue_final_message)
        start = 0
    else:
        # Only the new turns can be a new real query: the previous plan searched the others.
        last_query = _last_query_index(
            turns,
            add_vision_id,
            continue_final_message,
            stop=previous.last_query,
            searched=len(previous.layouts) - 1,
        )
        start = len(previous.layouts) - 1  # its closes_turn depends on the turn after it
        if not preserve_thinking and last_query != previous.last_query:
            start = min(start, previous.last_query + 1)

    layouts: list[TurnLayout] = [] if previous is None else list(previous.layouts[:start])
    if previous is None:
        images = videos = 0
    else:
        images, videos = (
            previous.layouts[start].images_before,
            previous.layouts[start].videos_before,
        )
    _lay_out_turns(
        layouts, turns, start, images, videos, preserve_thinking, last_query, continue_final_message
    )
    tail = _tail_fragment(add_generation_prompt, continue_final_message, enable_thinking)
    return head, layouts, tail, last_query, start


_FLAGS = (
    "enable_thinking",
    "preserve_thinking",
    "add_generation_prompt",
    "add_vision_id",
    "continue_final_message",
)


def _check_flags(*flags: object) -> None:
    """The template tests `is true` / `is false`: anything but a real bool would be read as
    neither, and silently select a third behaviour."""
    for name, flag in zip(_FLAGS, flags, strict=True):
        if not isinstance(flag, bool):
            raise PromptError(f"must be a bool, got {shown(flag)}", field=name)


def _lay_out_turns(
    layouts: list[TurnLayout],
    turns: Sequence[Turn],
    start: int,
    images: int,
    videos: int,
    preserve_thinking: bool,
    last_query: int,
    continue_final_message: bool,
) -> None:
    """Append the layouts of ``turns[start:]`` (with the images and videos before ``start``),
    refusing a misplaced system message or tool result (template order)."""
    last = len(turns) - 1
    for index in range(start, len(turns)):
        turn = turns[index]
        before = turns[index - 1].role if index else None
        if turn.role == "system" and index:
            raise PromptError("System message must be at the beginning.", message_index=index)
        if turn.role == "tool" and before in (None, "system", "user"):
            raise PromptError(
                "a tool result must follow an assistant turn (the template would render it "
                "without one)",
                message_index=index,
            )
        layouts.append(
            _turn_layout(
                preserve_thinking or index > last_query,
                before != "tool",
                index == last or turns[index + 1].role != "tool",
                continue_final_message and index == last,
                images,
                videos,
            )
        )
        if isinstance(turn.content, tuple):
            images += sum(isinstance(block, ImageBlock) for block in turn.content)
            videos += sum(isinstance(block, VideoBlock) for block in turn.content)


def _last_query_index(
    turns: Sequence[Turn],
    add_vision_id: bool,
    continuing: bool,
    stop: int = -1,
    searched: int = -1,
) -> int:
    """Template lines 94-106: the last user turn that is a real query, not a tool-response
    wrapper; thinking of assistant turns after it is always kept. ``stop`` is a real query
    already known (the last one of a shorter prefix) and ``searched`` the last turn of that
    prefix: the search ends there (an agent loop appends tool results after one query for
    thousands of turns; searching back to the query made each turn cost the history)."""
    for index in range(len(turns) - 1, max(stop, searched), -1):
        turn = turns[index]
        if turn.role != "user":
            continue
        if continuing and index == len(turns) - 1:
            # transformers appends its continuation tag to this content before rendering, so the
            # template sees it ending in the tag: never a tool-response wrapper.
            return index
        if not _is_tool_response_wrapper(turn, index, add_vision_id):
            return index
    if stop >= 0:
        return stop
    raise PromptError("No user query found in messages.")


def _check_continuable(turn: Turn, index: int) -> None:
    """What transformers' continue_final_message can cut after: the final content's last text."""
    if turn.role == "system":
        raise PromptError("a system message cannot be continued", message_index=index)
    if turn.content is None:
        raise PromptError(
            'continue_final_message is set but the final message has no "content" to continue',
            message_index=index,
            field="content",
        )
    if isinstance(turn.content, tuple) and not (
        turn.content and isinstance(turn.content[-1], TextBlock)
    ):
        raise PromptError(
            "continue_final_message needs the final content to end with a text block",
            message_index=index,
            field="content",
        )
    if turn.tool_calls:
        # transformers would cut them off silently; continuing after a call is not a thing.
        raise PromptError(
            "a message with tool calls cannot be continued", message_index=index, field="tool_calls"
        )
