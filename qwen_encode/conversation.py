"""Conversation values: turns, tool calls and content blocks, and their OpenAI/HF-style dict form.

``turns_from_messages`` is the one door from loosely-typed message dicts into typed ``Turn`` values.
It checks shapes (what the template would crash on or silently misrender) and says where the problem
is; the rules of the prompt format itself (ordering, "no user query", ...) live in ``protocol``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, get_args

from .errors import PromptError

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = get_args(Role)

# transformers (chat_template_utils._REASONING_FIELDS) accepts these names for the reasoning text
# and reads the first one that is not None, in this order.
REASONING_FIELDS: tuple[str, ...] = ("reasoning_content", "thinking", "reasoning")


@dataclass(frozen=True, slots=True)
class TextBlock:
    """A text part of a multimodal content list."""

    text: str


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """An image part. ``source`` is whatever the caller gave (URL, path, data); the prompt only
    holds a placeholder for it, which the model's processor expands later."""

    source: Any = None


@dataclass(frozen=True, slots=True)
class VideoBlock:
    """A video part; see ``ImageBlock``."""

    source: Any = None


ContentBlock: TypeAlias = TextBlock | ImageBlock | VideoBlock
Content: TypeAlias = str | tuple[ContentBlock, ...] | None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call written by the assistant. ``arguments`` maps parameter names to JSON
    values; treat it as read-only."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """OpenAI shape: ``{"type": "function", "function": {"name", "arguments": JSON text}}``."""
        call: dict[str, Any] = {
            "type": "function",
            "function": {
                "name": self.name,
                "arguments": json.dumps(dict(self.arguments), ensure_ascii=False),
            },
        }
        if self.id is not None:
            call["id"] = self.id
        return call


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of a conversation.

    ``reasoning`` and ``tool_calls`` belong to assistant turns only; ``tool_call_id`` and ``name``
    are carried for the caller's bookkeeping (the Qwen 3.8 template does not render them).
    """

    role: Role
    content: Content = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise PromptError("Unexpected message role.", field="role")
        if self.role != "assistant":
            # The template renders these on assistant turns only; on any other turn they would be
            # dropped without a word.
            if self.tool_calls:
                raise PromptError(
                    "only assistant messages can carry tool calls", field="tool_calls"
                )
            if self.reasoning is not None:
                raise PromptError(
                    "only assistant messages can carry reasoning", field="reasoning_content"
                )
        if isinstance(self.tool_calls, list):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if isinstance(self.content, list):
            object.__setattr__(self, "content", tuple(self.content))

    def to_message(self) -> dict[str, Any]:
        """OpenAI/HF-style dict; ``turns_from_messages`` reads it back to an equal ``Turn``."""
        message: dict[str, Any] = {"role": self.role, "content": _content_to_json(self.content)}
        if self.reasoning is not None:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            message["name"] = self.name
        return message


def _content_to_json(content: Content) -> str | list[dict[str, Any]] | None:
    if content is None or isinstance(content, str):
        return content
    blocks: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextBlock):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            blocks.append({"type": "image", "image": block.source})
        else:
            blocks.append({"type": "video", "video": block.source})
    return blocks


def turns_from_messages(messages: Iterable[Mapping[str, Any] | Turn]) -> tuple[Turn, ...]:
    """Convert OpenAI/HF-style message dicts (or ``Turn`` values, passed through) to turns.

    As transformers does, a key whose value is None counts as absent, and the reasoning text may
    arrive as ``reasoning_content``, ``thinking`` or ``reasoning``. Errors are ``PromptError``
    naming the message index and field.
    """
    if isinstance(messages, (str, bytes, Mapping)):
        raise PromptError("messages must be a list of message objects", field="messages")
    return tuple(_turn_from_message(i, m) for i, m in enumerate(messages))


def _turn_from_message(index: int, message: Mapping[str, Any] | Turn) -> Turn:
    if isinstance(message, Turn):
        return message
    if not isinstance(message, Mapping):
        raise PromptError(
            f"a message must be an object, got {type(message).__name__}", message_index=index
        )
    present = {k: v for k, v in message.items() if v is not None}
    role = present.get("role")
    if role not in ROLES:
        raise PromptError("Unexpected message role.", message_index=index, field="role")
    try:
        return Turn(
            role=role,
            content=_content_from_json(present.get("content")),
            reasoning=_reasoning_from_json(present),
            tool_calls=_tool_calls_from_json(present.get("tool_calls")),
            tool_call_id=_optional_str(present, "tool_call_id"),
            name=_optional_str(present, "name"),
        )
    except PromptError as error:
        raise PromptError(error.reason, message_index=index, field=error.field) from None


def _optional_str(message: Mapping[str, Any], key: str) -> str | None:
    value = message.get(key)
    if value is None or isinstance(value, str):
        return value
    raise PromptError(f"must be a string, got {type(value).__name__}", field=key)


def _reasoning_from_json(message: Mapping[str, Any]) -> str | None:
    given = [(key, message[key]) for key in REASONING_FIELDS if key in message]
    if not given:
        return None
    key, value = given[0]
    for other_key, other in given[1:]:
        if other != value:
            # transformers would silently keep the first; two different reasonings is a caller bug.
            raise PromptError(f"conflicts with {other_key!r}", field=key)
    if not isinstance(value, str):
        raise PromptError(f"must be a string, got {type(value).__name__}", field=key)
    return value


def _content_from_json(content: Any) -> Content:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        return tuple(_block_from_json(j, item) for j, item in enumerate(content))
    # Template: render_content raises this for anything but a string, a list or none.
    raise PromptError("Unexpected content type.", field="content")


def _block_from_json(position: int, item: Any) -> ContentBlock:
    where = f"content[{position}]"
    if isinstance(item, (TextBlock, ImageBlock, VideoBlock)):
        return item
    if not isinstance(item, Mapping):
        raise PromptError("Unexpected item type in content.", field=where)
    # The same tests, in the same order, as the template's render_content macro: presence of a key,
    # whatever its value, decides.
    if "image" in item or "image_url" in item or item.get("type") == "image":
        return ImageBlock(item.get("image", item.get("image_url")))
    if "video" in item or item.get("type") == "video":
        return VideoBlock(item.get("video"))
    if "text" in item:
        text = item["text"]
        if not isinstance(text, str):
            raise PromptError(
                f"text must be a string, got {type(text).__name__}", field=f"{where}.text"
            )
        return TextBlock(text)
    raise PromptError("Unexpected item type in content.", field=where)


def _tool_calls_from_json(calls: Any) -> tuple[ToolCall, ...]:
    if calls is None:
        return ()
    if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Sequence):
        raise PromptError(
            f"must be a list of tool calls, got {type(calls).__name__}", field="tool_calls"
        )
    return tuple(_tool_call_from_json(f"tool_calls[{j}]", call) for j, call in enumerate(calls))


def _tool_call_from_json(where: str, call: Any) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, Mapping):
        raise PromptError(f"a tool call must be an object, got {type(call).__name__}", field=where)
    call_id = call.get("id")
    function = call
    if call.get("function") is not None:
        function = call["function"]
        where += ".function"
        if not isinstance(function, Mapping):
            raise PromptError(f"must be an object, got {type(function).__name__}", field=where)
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise PromptError("a tool call needs a non-empty string name", field=f"{where}.name")
    return ToolCall(
        name=name,
        arguments=parse_arguments(function.get("arguments"), field=f"{where}.arguments"),
        id=call_id if isinstance(call_id, str) else None,
    )


def parse_arguments(arguments: Any, *, field: str = "arguments") -> dict[str, Any]:
    """A tool call's arguments as a dict: a mapping as is, a JSON object text parsed.

    The template iterates ``arguments|items`` and so crashes on JSON text, the form OpenAI clients
    send; we parse it. Absent, None and "" mean no arguments (the template skips ``''``).
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as error:
            raise PromptError(f"arguments are not valid JSON: {error}", field=field) from None
        if not isinstance(arguments, dict):
            raise PromptError(
                f"arguments must be a JSON object, got {type(arguments).__name__}", field=field
            )
    if not isinstance(arguments, Mapping):
        raise PromptError(
            f"arguments must be an object or JSON object text, got {type(arguments).__name__}",
            field=field,
        )
    for key in arguments:
        if not isinstance(key, str):
            raise PromptError(f"argument names must be strings, got {key!r}", field=field)
    return dict(arguments)
