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
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from . import markers as mk
from .conversation import (
    ImageBlock,
    TextBlock,
    ToolCall,
    Turn,
    VideoBlock,
    load_json,
    surrogate_problem,
    turns_from_messages,
)
from .errors import PromptError, shown
from .json_text import MAX_JSON_DEPTH, json_depth_problem
from .prompt import (
    _MARKER,
    _MARKER_SPLIT,
    _RUN_MARKER,
    _RUN_TEXT,
    Prompt,
    Segment,
    Special,
    Text,
    _Builder,
    _Run,
    _runs_of,
    _Seg,
    _segment_of,
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


def _protocol_parts(text: str) -> tuple[str, ...]:
    """``text`` split at the markers it spells: text, marker, text, ... (the tools block's
    example and reminder spell ``<tool_call>``, and tokenizing the template's output turns them
    into the atomic IDs the model was trained on)."""
    return tuple(_MARKER_SPLIT.split(text))


_TOOLS_HEAD_PARTS = _protocol_parts(_TOOLS_HEAD)
_TOOLS_TAIL_PARTS = _protocol_parts(_TOOLS_TAIL)


# json.dumps with any non-default option builds a JSONEncoder per call (a third of its time on a
# small tool); this one is built once (JSONEncoder keeps no state between calls).
_JSON_DUMPS = json.JSONEncoder(ensure_ascii=False).encode


def _tojson(value: Any, field: str) -> str:
    """The template's ``tojson``: transformers overrides Jinja's filter with
    ``json.dumps(x, ensure_ascii=False)`` (default separators, key order kept)."""
    try:
        return _JSON_DUMPS(value)
    except (TypeError, ValueError) as error:
        # transformers would render a "<set>"-style placeholder; a value that is not JSON is a bug.
        # (ValueError: also an integer past Python's 4,300-digit conversion limit.)
        raise PromptError(f"is not JSON-serialisable: {error}", field=field) from None
    except RecursionError:  # a self-containing value; deep ones are refused before this
        raise PromptError("nests too deeply to serialise", field=field) from None


def _tool_signature_lines(tools: Any) -> list[str]:
    if isinstance(tools, str):
        tools = load_json(tools, "tools")
    if type(tools) is not list and (isinstance(tools, Mapping) or not isinstance(tools, Sequence)):
        # The template skips a mapping (`tools is not mapping`): the tools would vanish unseen.
        raise PromptError(f"tools must be a list, got {type(tools).__name__}", field="tools")
    lines = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if isinstance(tool, str):
            tool = load_json(tool, where)
        if type(tool) is not dict and not isinstance(tool, Mapping):
            raise PromptError(
                f"a tool must be a JSON object, got {type(tool).__name__}", field=where
            )
        try:
            line: str | None = _JSON_DUMPS(tool)
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
    if not isinstance(signatures, str):
        raise PromptError(
            f"expected the text of serialize_tool_signatures, got {type(signatures).__name__}",
            field="signatures",
        )
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


class _RenderCache:
    """Rendered system turns (tools block, reasoning instruction, system prompt) and primers,
    keyed by everything they render from, least recently used out first, bounded in bytes of
    text. What a data set repeats in every row is rendered once and is the same string object
    every time, so the encoder's run cache finds it by a hash computed once."""

    def __init__(self, limit: int) -> None:
        self._entries: OrderedDict[tuple[Any, ...], _Fragment] = OrderedDict()
        self._lock = threading.Lock()  # format_prompt is called from a server's threads
        self._bytes = 0
        self.limit = limit
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[Any, ...]) -> _Fragment | None:
        with self._lock:
            fragment = self._entries.get(key)
            if fragment is None:
                self.misses += 1
            else:
                self.hits += 1
                self._entries.move_to_end(key)
            return fragment

    def put(self, key: tuple[Any, ...], fragment: _Fragment) -> None:
        cost = fragment.size + sum(len(k) if isinstance(k, str) else 0 for k in key)
        with self._lock:
            if key in self._entries or cost > self.limit:
                return
            self._entries[key] = fragment
            self._bytes += cost
            while self._bytes > self.limit:
                old_key, old = self._entries.popitem(last=False)
                self._bytes -= old.size + sum(len(k) if isinstance(k, str) else 0 for k in old_key)

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


_RENDER_CACHE = _RenderCache(16 << 20)


def render_cache_info() -> dict[str, int]:
    """Entries, bytes (of text, roughly) and limit of the cache of rendered system turns and
    primers, and its hits and misses since it was last cleared."""
    return _RENDER_CACHE.info()


def clear_render_cache() -> None:
    """Forget the rendered system turns and primers (and the hit counts)."""
    _RENDER_CACHE.clear()


def _head_fragment(
    system: Turn | None, instruction: str, tool_lines: list[str], add_vision_id: bool
) -> _Fragment:
    """The system turn (template lines 55-91), from the cache when its inputs are plain text."""
    content = None if system is None else system.content
    if content is not None and not isinstance(content, str):
        builder = _Builder()
        _system_segments(builder, system, instruction, tool_lines, add_vision_id)
        return _Fragment(builder.segs)
    # The system turn's text and its owner (message 0, or none) are all it renders from.
    key = ("head", system is not None, content, instruction, add_vision_id, *tool_lines)
    fragment = _RENDER_CACHE.get(key)
    if fragment is None:
        builder = _Builder()
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
    head, layouts, tail, _, _ = _plan(
        turns,
        tools,
        enable_thinking,
        reasoning_effort,
        preserve_thinking,
        add_generation_prompt,
        add_vision_id,
        continue_final_message,
        None,
    )
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
        head=previous.head if head is None else head.segments,  # type: ignore[union-attr]
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
