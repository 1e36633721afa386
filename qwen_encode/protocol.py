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

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Any, TypeAlias

from . import markers as mk
from .conversation import (
    MAX_JSON_DEPTH,
    ImageBlock,
    TextBlock,
    ToolCall,
    Turn,
    VideoBlock,
    json_depth_problem,
    load_json,
    surrogate_problem,
    turns_from_messages,
)
from .errors import PromptError, shown

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


# --------------------------------------------------------------------------------------------
# Segments


@dataclass(frozen=True, slots=True)
class Special:
    """A protocol marker, to be encoded as its single vocabulary ID.

    ``turn`` is the index of the message this belongs to (-1: protocol text of no message, i.e. a
    system turn synthesised for the reasoning instruction, or the generation primer). ``trained``
    marks what a fine-tuning run trains on: an assistant turn's body and its closing marker.
    """

    marker: str
    turn: int = -1
    trained: bool = False


@dataclass(frozen=True, slots=True)
class Text:
    """Plain text. ``field`` names the caller's field it came from (``content``,
    ``tool_calls[0].arguments.city``, ``tools[2]``, …); None for text the protocol wrote."""

    text: str
    turn: int = -1
    trained: bool = False
    field: str | None = None


Segment: TypeAlias = Special | Text


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: typed segments, and their concatenation as ``text``."""

    segments: tuple[Segment, ...]

    @cached_property
    def text(self) -> str:
        return "".join(s.marker if isinstance(s, Special) else s.text for s in self.segments)


class _Builder:
    """Collects segments; ``turn`` and ``trained`` apply to the segments added next.

    Consecutive protocol-authored texts are joined into one ``Text`` (the encoder joins text
    runs anyway; fewer, longer segments make rendering several times cheaper)."""

    __slots__ = ("_pending", "_segments", "_trained", "_turn")

    def __init__(self) -> None:
        self._segments: list[Segment] = []
        self._pending: list[str] = []
        self._turn = -1
        self._trained = False

    def _flush(self) -> None:
        if self._pending:
            self._segments.append(Text("".join(self._pending), self._turn, self._trained))
            self._pending.clear()

    @property
    def segments(self) -> list[Segment]:
        self._flush()
        return self._segments

    @segments.setter
    def segments(self, segments: list[Segment]) -> None:
        self._pending.clear()
        self._segments = segments

    def begin(self, turn: int, trained: bool) -> None:
        """What the segments added from now on belong to."""
        if self._pending:
            self._flush()
        self._turn, self._trained = turn, trained

    def special(self, marker: str) -> None:
        # `if self._pending` before each call: a builder gets ~100 of these per conversation, and
        # the call itself was a tenth of rendering time.
        if self._pending:
            self._flush()
        self._segments.append(Special(marker, self._turn, self._trained))

    def text(self, text: str, field: str | None = None) -> None:
        if not text:
            return
        if field is None:
            self._pending.append(text)
            return
        if not text.isascii() and (problem := surrogate_problem(text)):
            raise self.error(problem, field)
        if self._pending:
            self._flush()
        self._segments.append(Text(text, self._turn, self._trained, field))

    def error(self, reason: str, field: str) -> PromptError:
        """A ``PromptError`` about ``field`` of the message being rendered."""
        return PromptError(
            reason, message_index=self._turn if self._turn >= 0 else None, field=field
        )

    def protocol(self, text: str) -> None:
        """Protocol-authored text; the markers it spells (the tools block's example and reminder
        spell ``<tool_call>``) are ``Special``, because tokenizing the template's output turns
        them into the atomic IDs and that is what the model was trained on."""
        for i, part in enumerate(_MARKER_SPLIT.split(text)):
            if i % 2:
                self.special(part)
            else:
                self.text(part)

    def rstrip(self) -> None:
        """Drop trailing whitespace across trailing ``Text`` segments."""
        segments = self.segments
        while segments and isinstance(last := segments[-1], Text):
            stripped = last.text.rstrip()
            if stripped:
                segments[-1] = Text(stripped, last.turn, last.trained, last.field)
                return
            segments.pop()

    def prompt(self) -> Prompt:
        return Prompt(tuple(self.segments))


_MARKER_SPLIT = re.compile("(" + "|".join(re.escape(m) for m in mk.ALL_ADDED_TOKENS) + ")")


# --------------------------------------------------------------------------------------------
# Verbatim protocol texts (template lines 46-63, 70)


class ReasoningEffort(str, Enum):
    """The template's reasoning efforts. MEDIUM adds no instruction; XHIGH is the default."""

    LOW = "low"
    MEDIUM = "medium"
    XHIGH = "xhigh"

    @classmethod
    def parse(cls, value: ReasoningEffort | str) -> ReasoningEffort:
        if isinstance(value, ReasoningEffort):
            return value
        if isinstance(value, str):
            for effort in cls:
                if effort.value == value:
                    return effort
        # Template: raise_exception('Unexpected reasoning effort ' ~ reasoning_effort ~ '. …')
        raise PromptError(
            f"Unexpected reasoning effort {value if isinstance(value, str) else shown(value)}. "
            "Supported types are xhigh (default), medium, and low.",
            field="reasoning_effort",
        )


_REASONING_INSTRUCTIONS: Mapping[ReasoningEffort, str] = {
    ReasoningEffort.XHIGH: (
        "Reasoning effort is set to xhigh. Please think carefully through the task, validate key "
        "assumptions, consider plausible alternatives, and prioritize correctness, consistency, "
        "and clarity in the final answer."
    ),
    ReasoningEffort.MEDIUM: "",
    ReasoningEffort.LOW: (
        "Reasoning effort is set to low. Keep your thinking brief and focused, moving directly to "
        "the conclusion without unnecessary elaboration."
    ),
}


def reasoning_instruction(effort: ReasoningEffort | str) -> str:
    """The template's system instruction for ``effort``, verbatim; "" for MEDIUM."""
    return _REASONING_INSTRUCTIONS[ReasoningEffort.parse(effort)]


def reasoning_effort_from_scale(level: int) -> ReasoningEffort:
    """Map a host's 1..5 effort scale: 1 -> LOW, 2..4 -> MEDIUM, 5 -> XHIGH."""
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 5:
        raise PromptError(
            f"level must be an integer from 1 to 5, got {shown(level)}", field="reasoning_effort"
        )
    if level == 1:
        return ReasoningEffort.LOW
    return ReasoningEffort.XHIGH if level == 5 else ReasoningEffort.MEDIUM


_TOOLS_HEAD = "# Tools\n\nYou have access to the following functions:\n\n<tools>"
_TOOLS_TAIL = (
    "\n</tools>"
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
    "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...>"
    "</function> block must be nested within <tool_call></tool_call> XML tags\n- Required "
    "parameters MUST be specified\n- You may provide optional reasoning for your function call in "
    "natural language BEFORE the function call, but NOT after\n- If there is no function call "
    "available, answer the question like normal with your current knowledge and do not tell the "
    "user about function calls\n</IMPORTANT>"
)


def _tojson(value: Any, field: str) -> str:
    """The template's ``tojson``: transformers overrides Jinja's filter with
    ``json.dumps(x, ensure_ascii=False)`` (default separators, key order kept)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as error:
        # transformers would render a "<set>"-style placeholder; a value that is not JSON is a bug.
        # (ValueError: also an integer past Python's 4,300-digit conversion limit.)
        raise PromptError(f"is not JSON-serialisable: {error}", field=field) from None
    except RecursionError:  # a self-containing value; deep ones are refused before this
        raise PromptError("nests too deeply to serialise", field=field) from None


def _tool_signature_lines(tools: Any) -> list[str]:
    if isinstance(tools, str):
        tools = load_json(tools, "tools")
    if isinstance(tools, Mapping) or not isinstance(tools, Sequence):
        # The template skips a mapping (`tools is not mapping`): the tools would vanish unseen.
        raise PromptError(f"tools must be a list, got {type(tools).__name__}", field="tools")
    lines = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if isinstance(tool, str):
            tool = load_json(tool, where)
        if not isinstance(tool, Mapping):
            raise PromptError(
                f"a tool must be a JSON object, got {type(tool).__name__}", field=where
            )
        try:
            line: str | None = json.dumps(tool, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            line = None  # named below: too deep first, as a walk before the dump would say
        # Each object or array of the tool writes one "{" or "[": a text with no more of them
        # than the limit cannot nest past it, so only such a text needs the walk in Python
        # (a tenth of rendering a conversation with tools, done for every tool of every one).
        if (line is None or line.count("{") + line.count("[") > MAX_JSON_DEPTH) and (
            problem := json_depth_problem(tool)
        ):
            raise PromptError(problem, field=where)
        lines.append(_tojson(tool, where) if line is None else line)
    return lines


def serialize_tool_signatures(tools: Sequence[Mapping[str, Any] | str] | str) -> str:
    """One JSON object per line, as the template's ``tool | tojson`` writes each tool.

    ``tools`` is a list of tool objects (or JSON texts of objects), or the JSON text of such a
    list. Unparseable JSON raises ``PromptError`` naming the tool rather than dropping it.
    """
    return "\n".join(_tool_signature_lines(tools))


def tools_section(signatures: str) -> str:
    """The whole tools block of the system turn, verbatim (without the system turn's markers)."""
    if not signatures:
        raise PromptError(
            "the template renders a tools block only for a non-empty tools list", field="tools"
        )
    return f"{_TOOLS_HEAD}\n{signatures}{_TOOLS_TAIL}"


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
    return b.prompt().text


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
    start = len(b.segments)
    content = turn.content
    if isinstance(content, str):
        b.text(content, "content")
    elif content is not None:
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
    _trim(b.segments, start)


def _trim(segments: list[Segment], start: int) -> None:
    """Jinja ``trim`` (Python ``str.strip()``) over the segments from ``start`` on."""
    while start < len(segments) and isinstance(first := segments[start], Text):
        stripped = first.text.lstrip()
        if stripped:
            segments[start] = Text(stripped, first.turn, first.trained, first.field)
            break
        del segments[start]
    while len(segments) > start and isinstance(last := segments[-1], Text):
        stripped = last.text.rstrip()
        if stripped:
            segments[-1] = Text(stripped, last.turn, last.trained, last.field)
            break
        segments.pop()


def _is_tool_response_wrapper(turn: Turn, index: int, add_vision_id: bool) -> bool:
    """Template lines 97-100: a user turn whose trimmed content starts with ``<tool_response>``
    and ends with ``</tool_response>`` is not a real query (multi-step tool use)."""
    if isinstance(turn.content, str):  # what the rendering below comes to for plain text
        text = turn.content.strip()
        return text.startswith(mk.TOOL_RESPONSE_OPEN) and text.endswith(mk.TOOL_RESPONSE_CLOSE)
    b = _Builder()
    b.begin(index, False)
    _content_segments(b, turn, index, None, add_vision_id)
    text = b.prompt().text
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
    content_start = len(b.segments)
    _content_segments(b, turn, index, counter, add_vision_id)
    if open_end:
        return
    has_content = len(b.segments) > content_start
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
    tool_lines: list[str],
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
    if not (instruction or tool_lines or content.segments):
        return
    b.special(mk.TURN_OPEN)
    b.text("system\n")
    if tool_lines:
        if instruction:
            b.text(instruction + "\n\n")
        b.protocol(_TOOLS_HEAD)
        for i, line in enumerate(tool_lines):
            b.text("\n")
            b.text(line, f"tools[{i}]")
        b.protocol(_TOOLS_TAIL)
        if content.segments:
            b.text("\n\n")
    elif instruction:
        b.text(instruction + ("\n\n" if content.segments else ""))
    b.segments.extend(content.segments)
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
# Whole prompts


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
    turns = turns_from_messages(turns)
    plan = plan_prompt(
        turns,
        tools=tools,
        enable_thinking=enable_thinking,
        reasoning_effort=reasoning_effort,
        preserve_thinking=preserve_thinking,
        add_generation_prompt=add_generation_prompt,
        add_vision_id=add_vision_id,
        continue_final_message=continue_final_message,
    )
    segments = list(plan.head)
    for index, (turn, layout) in enumerate(zip(turns, plan.layouts, strict=True)):
        segments.extend(render_turn(turn, index, layout, add_vision_id))
    segments.extend(plan.tail)
    return Prompt(tuple(segments))


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
    for name, flag in (
        ("enable_thinking", enable_thinking),
        ("preserve_thinking", preserve_thinking),
        ("add_generation_prompt", add_generation_prompt),
        ("add_vision_id", add_vision_id),
        ("continue_final_message", continue_final_message),
    ):
        # The template tests `is true` / `is false`: anything but a real bool would be read as
        # neither, and silently select a third behaviour.
        if not isinstance(flag, bool):
            raise PromptError(f"must be a bool, got {shown(flag)}", field=name)
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
        tool_lines = [] if tools is None else _tool_signature_lines(tools)

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

    if previous is None:
        builder = _Builder()
        first = turns[0]
        _system_segments(
            builder,
            first if first.role == "system" else None,
            instruction,
            tool_lines,
            add_vision_id,
        )
        head = tuple(builder.segments)
        last_query = _last_query_index(turns, add_vision_id, continue_final_message)
        start = 0
    else:
        head = previous.head
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
            TurnLayout(
                keep_reasoning=preserve_thinking or index > last_query,
                opens_turn=before != "tool",
                closes_turn=index == last or turns[index + 1].role != "tool",
                open_end=continue_final_message and index == last,
                images_before=images,
                videos_before=videos,
            )
        )
        if isinstance(turn.content, tuple):
            images += sum(isinstance(block, ImageBlock) for block in turn.content)
            videos += sum(isinstance(block, VideoBlock) for block in turn.content)

    tail = _Builder()
    if add_generation_prompt and not continue_final_message:
        tail.special(mk.TURN_OPEN)
        tail.text("assistant\n")
        # The primer leaves the reasoning span open while thinking, and closes an empty one when
        # thinking is off, so the model answers directly.
        tail.special(mk.THINK_OPEN)
        if enable_thinking:
            tail.text("\n")
        else:
            tail.text("\n\n")
            tail.special(mk.THINK_CLOSE)
            tail.text("\n\n")
    return PromptPlan(
        head=head,
        layouts=tuple(layouts),
        tail=tuple(tail.segments),
        add_vision_id=add_vision_id,
        last_query=last_query,
        unchanged=start,
    )


def render_turn(
    turn: Turn, index: int, layout: TurnLayout, add_vision_id: bool = False
) -> tuple[Segment, ...]:
    """The segments of one turn in its conversation (a leading system message renders in the
    plan's head, so nothing here)."""
    b = _Builder()
    counter = _VisionCounter()
    counter.images, counter.videos = layout.images_before, layout.videos_before
    if turn.role == "user":
        _user_segments(b, turn, index, counter, add_vision_id, layout.open_end)
    elif turn.role == "assistant":
        _assistant_segments(
            b, turn, index, layout.keep_reasoning, counter, add_vision_id, layout.open_end
        )
    elif turn.role == "tool":
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
    return tuple(b.segments)


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
