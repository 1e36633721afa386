"""One turn rendered as the template renders it: tool calls, content (the template's
``render_content`` macro), the user, assistant, tool-result and system turns, and what a turn's
rendering depends on besides the turn itself (``TurnLayout``). All through the segment builder;
``protocol_plain`` writes the common shapes directly, ``protocol`` plans whole conversations.

Comments cite the template line each rule comes from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import markers as mk
from .conversation import (
    ImageBlock,
    TextBlock,
    ToolCall,
    Turn,
    VideoBlock,
    surrogate_problem,
    turns_from_messages,
)
from .errors import PromptError, shown
from .prompt import _MARKER, Prompt, Segment, _Builder, _Seg, _segment_of
from .protocol_texts import _TOOLS_HEAD_PARTS, _TOOLS_TAIL_PARTS, _tojson

__all__ = ["TurnLayout", "format_tool_call", "format_turn", "render_turn"]


def _tool_call_segments(b: _Builder, call: ToolCall, where: str) -> None:
    # Template: '<tool_call>\n<function=' + name + '>\n', per argument '<parameter=' + name + '>\n'
    # value '\n</parameter>\n', then '</function>\n</tool_call>'.
    b.special(mk.TOOL_CALL_OPEN)
    b.text("\n<function=")
    b.text(call.name, f"{where}.name")
    b.text(">\n")
    for name, value in call.arguments.items():
        field = f"{where}.arguments.{name}"
        b.text("<parameter=")
        b.text(name, field)
        b.text(">\n")
        # `args_value | string if args_value is string else args_value | tojson`: strings are
        # spliced raw (no quotes, no escaping, no trimming), everything else is JSON.
        if not isinstance(value, str):
            try:
                value = _tojson(value, field)
            except PromptError as error:
                raise b.error(error.reason, field) from None
        b.text(value, field)
        b.text("\n</parameter>\n")
    b.text("</function>\n")
    b.special(mk.TOOL_CALL_CLOSE)


def format_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """One call in the protocol's grammar, from ``<tool_call>`` to ``</tool_call>``. A name the
    grammar cannot carry (``markers.call_name_problem``) raises ``PromptError``."""
    try:
        call = ToolCall(name, arguments)
    except PromptError as error:
        raise PromptError(error.reason, field=f"tool_call.{error.field}") from None
    b = _Builder()
    _tool_call_segments(b, call, "tool_call")
    return "".join([seg[0] for seg in b.segs])


# --------------------------------------------------------------------------------------------
# Content (template macro render_content)


class _VisionCounter:
    """Template: image_count / video_count namespaces, counted across the whole conversation in
    message order (only the main loop counts: do_vision_count=true)."""

    def __init__(self) -> None:
        self.images = 0
        self.videos = 0


def _content_segments(
    b: _Builder,
    turn: Turn,
    index: int,
    counter: _VisionCounter | None,
    add_vision_id: bool,
    is_system: bool = False,
) -> None:
    """Render ``turn.content`` and trim it (template: ``render_content(...)|trim``)."""
    start = len(b.segs)  # flushes pending protocol text, as the trim below needs
    content = turn.content
    if isinstance(content, str):
        # One text: trimmed before it is added (checked whole first, so that a lone surrogate's
        # offset is the caller's).
        if not content.isascii() and (problem := surrogate_problem(content)):
            raise b.error(problem, "content")
        b.text(content.strip(), "content")
        return
    if content is not None:
        for j, block in enumerate(content):
            if isinstance(block, TextBlock):
                b.text(block.text, f"content[{j}].text")
                continue
            image = isinstance(block, ImageBlock)
            if not image and not isinstance(block, VideoBlock):
                raise PromptError(
                    "Unexpected item type in content.", message_index=index, field=f"content[{j}]"
                )
            if is_system:
                kind = "images" if image else "videos"
                raise PromptError(
                    f"System message cannot contain {kind}.",
                    message_index=index,
                    field=f"content[{j}]",
                )
            if counter is not None:
                if image:
                    counter.images += 1
                else:
                    counter.videos += 1
            if add_vision_id:
                # Outside the main loop the template still prints the prefix, with the count as it
                # stands; we only render there to test for tool responses, where it cannot matter.
                count = (counter.images if image else counter.videos) if counter else 0
                b.text(f"Picture {count}: " if image else f"Video {count}: ")
            b.special(mk.VISION_START)
            b.special(mk.IMAGE_PAD if image else mk.VIDEO_PAD)
            b.special(mk.VISION_END)
    _trim(b.segs, start)


def _trim(segs: list[_Seg], start: int) -> None:
    """Jinja ``trim`` (Python ``str.strip()``) over the segments from ``start`` on."""
    while start < len(segs) and (first := segs[start])[3] is not _MARKER:
        stripped = first[0].lstrip()
        if stripped:
            segs[start] = (stripped, *first[1:])
            break
        del segs[start]
    while len(segs) > start and (last := segs[-1])[3] is not _MARKER:
        stripped = last[0].rstrip()
        if stripped:
            segs[-1] = (stripped, *last[1:])
            break
        segs.pop()


def _is_tool_response_wrapper(turn: Turn, index: int, add_vision_id: bool) -> bool:
    """Template lines 97-100: a user turn whose trimmed content starts with ``<tool_response>``
    and ends with ``</tool_response>`` is not a real query (multi-step tool use)."""
    if isinstance(turn.content, str):  # what the rendering below comes to for plain text
        text = turn.content.strip()
        return text.startswith(mk.TOOL_RESPONSE_OPEN) and text.endswith(mk.TOOL_RESPONSE_CLOSE)
    b = _Builder()
    b.begin(index, False)
    _content_segments(b, turn, index, None, add_vision_id)
    text = "".join([seg[0] for seg in b.segs])
    return text.startswith(mk.TOOL_RESPONSE_OPEN) and text.endswith(mk.TOOL_RESPONSE_CLOSE)


# --------------------------------------------------------------------------------------------
# Turns


def _assistant_segments(
    b: _Builder,
    turn: Turn,
    index: int,
    keep_reasoning: bool,
    counter: _VisionCounter | None,
    add_vision_id: bool,
    open_end: bool = False,
) -> None:
    b.begin(index, False)
    b.special(mk.TURN_OPEN)
    b.text("assistant\n")
    # What the model produces starts here: the reasoning span, content, calls and <|im_end|>.
    b.begin(index, True)
    if keep_reasoning:
        # Template: '<think>\n' + reasoning_content|trim + '\n</think>\n\n' + content
        b.special(mk.THINK_OPEN)
        b.text("\n")
        b.text((turn.reasoning or "").strip(), "reasoning_content")
        b.text("\n")
        b.special(mk.THINK_CLOSE)
        b.text("\n\n")
    content_start = len(b.segs)
    _content_segments(b, turn, index, counter, add_vision_id)
    if open_end:
        return
    has_content = len(b.segs) > content_start
    for j, call in enumerate(turn.tool_calls):
        # Template: '\n\n' before the first call only when the trimmed content is non-empty,
        # '\n' before every later one.
        if j:
            b.text("\n")
        elif has_content:
            b.text("\n\n")
        _tool_call_segments(b, call, f"tool_calls[{j}]")
    b.special(mk.TURN_CLOSE)
    b.begin(index, False)
    b.text("\n")


def _user_segments(
    b: _Builder,
    turn: Turn,
    index: int,
    counter: _VisionCounter | None,
    add_vision_id: bool,
    open_end: bool = False,
) -> None:
    b.begin(index, False)
    b.special(mk.TURN_OPEN)
    b.text("user\n")
    _content_segments(b, turn, index, counter, add_vision_id)
    if not open_end:
        b.special(mk.TURN_CLOSE)
        b.text("\n")


def _tool_segments(
    b: _Builder,
    turn: Turn,
    index: int,
    counter: _VisionCounter | None,
    add_vision_id: bool,
    opens_turn: bool,
    closes_turn: bool,
    open_end: bool = False,
) -> None:
    # Template lines 160-172: consecutive tool results share one user turn, each in its own
    # '\n<tool_response>\n' … '\n</tool_response>' span.
    b.begin(index, False)
    if opens_turn:
        b.special(mk.TURN_OPEN)
        b.text("user")
    b.text("\n")
    b.special(mk.TOOL_RESPONSE_OPEN)
    b.text("\n")
    _content_segments(b, turn, index, counter, add_vision_id)
    if open_end:
        return
    b.text("\n")
    b.special(mk.TOOL_RESPONSE_CLOSE)
    if closes_turn:
        b.special(mk.TURN_CLOSE)
        b.text("\n")


def _system_segments(
    b: _Builder,
    system: Turn | None,
    instruction: str,
    tool_lines: Sequence[str],
    add_vision_id: bool,
    index: int = 0,
) -> None:
    """Template lines 55-91: the system turn is the reasoning instruction, then the tools block,
    then the caller's system text, each part only when present. ``index`` is the system
    message's; a turn synthesised for the instruction or tools alone belongs to no message."""
    turn = -1 if system is None else index
    b.begin(turn, False)
    content = _Builder()
    content.begin(turn, False)
    if system is not None:
        _content_segments(content, system, index, None, add_vision_id, is_system=True)
    content_segs = content.segs
    if not (instruction or tool_lines or content_segs):
        return
    b.special(mk.TURN_OPEN)
    b.text("system\n")
    if tool_lines:
        if instruction:
            b.text(instruction + "\n\n")
        b.protocol(_TOOLS_HEAD_PARTS)
        for i, line in enumerate(tool_lines):
            b.text("\n")
            b.text(line, f"tools[{i}]")
        b.protocol(_TOOLS_TAIL_PARTS)
        if content_segs:
            b.text("\n\n")
    elif instruction:
        b.text(instruction + ("\n\n" if content_segs else ""))
    b.segs.extend(content_segs)
    b.special(mk.TURN_CLOSE)
    b.text("\n")


def format_turn(
    turn: Turn | Mapping[str, Any],
    *,
    index: int = 0,
    keep_reasoning: bool = True,
    add_vision_id: bool = False,
) -> Prompt:
    """One turn rendered on its own, as the template renders it inside a conversation.

    A tool result renders as a complete user turn holding one ``<tool_response>`` span. A system
    turn renders without reasoning instruction or tools. ``index`` is the turn number recorded in
    the segments; ``keep_reasoning`` whether an assistant turn shows its ``<think>`` span.
    """
    (turn,) = turns_from_messages([turn])
    b = _Builder()
    counter = _VisionCounter()
    if turn.role == "system":
        _system_segments(b, turn, "", [], add_vision_id, index)
    elif turn.role == "user":
        _user_segments(b, turn, index, counter, add_vision_id)
    elif turn.role == "assistant":
        _assistant_segments(b, turn, index, keep_reasoning, counter, add_vision_id)
    else:
        _tool_segments(b, turn, index, counter, add_vision_id, True, True)
    return b.prompt()


# --------------------------------------------------------------------------------------------
# A turn in its conversation


@dataclass(frozen=True, slots=True)
class TurnLayout:
    """What one turn's rendering depends on besides the turn itself: the rest of the
    conversation decides these, and a turn renders the same whenever they are the same."""

    keep_reasoning: bool = True  # show the <think> span (preserve_thinking / last real query)
    opens_turn: bool = True  # a tool result that starts the user turn its run shares
    closes_turn: bool = True  # a tool result that ends it
    open_end: bool = False  # continue_final_message: left open after its content
    images_before: int = 0  # vision ids are counted across the conversation
    videos_before: int = 0


_LAYOUTS: dict[tuple[bool, bool, bool, bool, int, int], TurnLayout] = {}


def _turn_layout(
    keep_reasoning: bool,
    opens_turn: bool,
    closes_turn: bool,
    open_end: bool,
    images_before: int,
    videos_before: int,
) -> TurnLayout:
    """A ``TurnLayout``, made once per distinct value (a frozen dataclass costs ~1 µs to make,
    and a conversation without images has at most 16 distinct layouts)."""
    key = (keep_reasoning, opens_turn, closes_turn, open_end, images_before, videos_before)
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = TurnLayout(*key)
        if images_before == videos_before == 0:  # bounded: counts of images are not kept
            _LAYOUTS[key] = layout
    return layout


def render_turn(
    turn: Turn, index: int, layout: TurnLayout, add_vision_id: bool = False
) -> tuple[Segment, ...]:
    """The segments of one turn in its conversation (a leading system message renders in the
    plan's head, so nothing here)."""
    if not isinstance(turn, Turn):
        raise PromptError(f"expected a Turn, got {type(turn).__name__}", field="turn")
    if isinstance(index, bool) or not isinstance(index, int):
        raise PromptError(f"must be an integer, got {shown(index)}", field="index")
    if not isinstance(layout, TurnLayout):
        raise PromptError(
            f"expected a TurnLayout (from plan_prompt), got {type(layout).__name__}", field="layout"
        )
    if not isinstance(add_vision_id, bool):
        raise PromptError(f"must be a bool, got {shown(add_vision_id)}", field="add_vision_id")
    b = _Builder()
    _render_into(b, turn, index, layout, add_vision_id)
    return tuple(map(_segment_of, b.segs))


def _render_into(
    b: _Builder, turn: Turn, index: int, layout: TurnLayout, add_vision_id: bool
) -> None:
    counter = _VisionCounter()
    counter.images, counter.videos = layout.images_before, layout.videos_before
    role = turn.role
    if role == "user":
        _user_segments(b, turn, index, counter, add_vision_id, layout.open_end)
    elif role == "assistant":
        _assistant_segments(
            b, turn, index, layout.keep_reasoning, counter, add_vision_id, layout.open_end
        )
    elif role == "tool":
        _tool_segments(
            b,
            turn,
            index,
            counter,
            add_vision_id,
            opens_turn=layout.opens_turn,
            closes_turn=layout.closes_turn,
            open_end=layout.open_end,
        )
    if layout.open_end:
        # transformers cuts the render where the final content ends and strips trailing
        # whitespace (so an empty final content also loses the '\n\n' after </think>).
        b.rstrip()
