"""Conversation values: turns, tool calls and content blocks, and their OpenAI/HF-style dict form.

``turns_from_messages`` is the one door from loosely-typed message dicts into typed ``Turn`` values.
It checks shapes (what the template would crash on or silently misrender) and says where the problem
is; the rules of the prompt format itself (ordering, "no user query", ...) live in ``protocol``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias, get_args

from ._accelerator import runs_compiled
from .errors import PromptError, shown
from .json_text import MAX_JSON_DEPTH as MAX_JSON_DEPTH  # re-exported: the docs name it here
from .json_text import JSONTextError, json_depth_problem, loads
from .markers import CALL_NAME_FORBIDDEN, call_name_problem

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = get_args(Role)

# transformers (chat_template_utils._REASONING_FIELDS) accepts these names for the reasoning text
# and reads the first one that is not None, in this order.
REASONING_FIELDS: tuple[str, ...] = ("reasoning_content", "thinking", "reasoning")


def surrogate_problem(text: str) -> str | None:
    """Why ``text`` is not text, or None: a lone UTF-16 surrogate is valid in a Python str and
    in JSON (``"\\ud800"``) but has no UTF-8 form and no token, so a tokenizer fails the whole
    batch on it and a writer the whole output. ASCII (the common case) is cleared in C."""
    if text.isascii():
        return None
    try:
        text.encode()  # UTF-8 refuses lone surrogates and nothing else: 3x faster than a regex
    except UnicodeEncodeError as error:
        return (
            f"holds a lone UTF-16 surrogate (U+{ord(text[error.start]):04X} at character "
            f"{error.start}), which is not text"
        )
    return None


def load_json(text: str, field: str) -> Any:
    """``json.loads`` of caller text, every failure a ``PromptError`` naming ``field``: invalid
    JSON, an integer past Python's 4,300-digit conversion limit, and nesting past
    ``MAX_JSON_DEPTH`` (see ``qwen_encode.json_text``, the one loader)."""
    try:
        return loads(text)
    except JSONTextError as error:
        raise PromptError(error.reason, field=field) from None


@dataclass(frozen=True, slots=True)
class TextBlock:
    """A text part of a multimodal content list."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise PromptError(
                f"text must be a string, got {type(self.text).__name__}", field="text"
            )


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
    values; treat it as read-only.

    ``undeclared`` names the arguments the tool's schema does not declare (the parser keeps them,
    typed as without a schema, so a host can refuse them); it is left out of equality and of
    ``to_dict``: the call is the same call whoever checked it.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    undeclared: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        # Checked here, where every call is made (from messages, by the parser, by hand), so a
        # call that could not be written in the protocol's grammar never exists: the template
        # writes names raw into <function=NAME> and <parameter=NAME> tags.
        if not isinstance(self.name, str):
            raise PromptError(f"must be a string, got {type(self.name).__name__}", field="name")
        if problem := call_name_problem(self.name):
            raise PromptError(f"function name {shown(self.name)} {problem}", field="name")
        if not isinstance(self.arguments, Mapping):
            raise PromptError(
                f"must be an object, got {type(self.arguments).__name__}", field="arguments"
            )
        for key in self.arguments:
            if not isinstance(key, str):
                raise PromptError(
                    f"argument names must be strings, got {shown(key)}", field="arguments"
                )
            if problem := call_name_problem(key):
                raise PromptError(f"argument name {shown(key)} {problem}", field=f"arguments.{key}")
        if problem := json_depth_problem(self.arguments):
            raise PromptError(problem, field="arguments")
        if self.id is not None and not isinstance(self.id, str):
            raise PromptError(f"must be a string, got {type(self.id).__name__}", field="id")
        if not isinstance(self.undeclared, tuple) or not all(
            isinstance(name, str) for name in self.undeclared
        ):
            raise PromptError("must be a tuple of argument names", field="undeclared")

    def to_dict(self) -> dict[str, Any]:
        """OpenAI shape: ``{"type": "function", "function": {"name", "arguments": JSON text}}``."""
        try:
            arguments = json.dumps(dict(self.arguments), ensure_ascii=False)
        except (TypeError, ValueError) as error:  # not JSON, or an int past the digit limit
            raise PromptError(f"are not JSON-serialisable: {error}", field="arguments") from None
        call: dict[str, Any] = {
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
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
        if not isinstance(self.role, str) or self.role not in ROLES:
            raise PromptError("Unexpected message role.", field="role")
        # Types are checked where a turn is made, not later inside format_prompt, where a wrong
        # one would surface as an unrelated TypeError far from the caller's mistake.
        content = _checked_content(self.content)
        if content is not self.content:
            object.__setattr__(self, "content", content)
        calls = _checked_calls(self.tool_calls)
        if calls is not self.tool_calls:
            object.__setattr__(self, "tool_calls", calls)
        for key in ("reasoning", "tool_call_id", "name"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str):
                raise PromptError(f"must be a string, got {type(value).__name__}", field=key)
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


def _checked_content(content: Any) -> Content:
    """``Turn.content`` as stored (a list becomes a tuple), or ``PromptError``."""
    if isinstance(content, list):
        content = tuple(content)
    if isinstance(content, tuple):
        for j, block in enumerate(content):
            if not isinstance(block, TextBlock | ImageBlock | VideoBlock):
                raise PromptError("Unexpected item type in content.", field=f"content[{j}]")
    elif content is not None and not isinstance(content, str):
        # Template: render_content raises this for anything but a string, a list or none.
        raise PromptError("Unexpected content type.", field="content")
    return content  # type: ignore[no-any-return]  # checked above: str, tuple of blocks or None


def _checked_calls(calls: Any) -> tuple[ToolCall, ...]:
    """``Turn.tool_calls`` as stored (a list becomes a tuple), or ``PromptError``."""
    if isinstance(calls, list):
        calls = tuple(calls)
    if not isinstance(calls, tuple):
        raise PromptError(
            f"must be a list of tool calls, got {type(calls).__name__}", field="tool_calls"
        )
    for j, call in enumerate(calls):
        if not isinstance(call, ToolCall):
            raise PromptError(
                f"must be a ToolCall, got {type(call).__name__}", field=f"tool_calls[{j}]"
            )
    return calls


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
    if type(messages) is not list and (
        isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Iterable)
    ):
        raise PromptError(
            f"must be a list of message objects, got {type(messages).__name__}", field="messages"
        )
    return tuple([_plain_turn(m) or _turn_from_message(i, m) for i, m in enumerate(messages)])


# -- the common shapes, read without the general path's checks -------------------------------
#
# A data set's messages are plain dicts: a role and string content, an assistant's reasoning text
# and tool calls with flat arguments, tool results. Reading them through the general path (a
# filtered copy of the dict, a Turn whose checks redo what was just checked, call names checked a
# character at a time) cost more than rendering them. _plain_turn takes only messages it can
# prove the general path would accept, and makes the Turn that path would make; on anything else
# (a wrong type, a problem, an unusual shape) it returns None and the general path reads the
# message, so every error and its location stay that path's.

_ROLE_SET: Final = frozenset(ROLES)
# An ASCII name call_name_problem accepts: printable, no space, none of the forbidden characters
# (whatever it does not match goes to call_name_problem itself, through the general path).
_PLAIN_NAME: Final = re.compile(
    "["
    + "".join(re.escape(chr(c)) for c in range(0x21, 0x7F) if chr(c) not in CALL_NAME_FORBIDDEN)
    + "]+"
).fullmatch
_NAMES_IN_ONE_PASS: Final = runs_compiled("conversation")


def _plain_name(name: str) -> bool:
    """Whether ``name`` is a plain call or parameter name (``_PLAIN_NAME``). Compiled, in one
    pass over the characters (conversation.pxd types it: a C loop, where the regex took ~200 ns
    a name and allocated its stack each time; a tool row checks a name and each argument's
    key); as Python, by the regex, which is faster there."""
    if not _NAMES_IN_ONE_PASS:
        return _PLAIN_NAME(name) is not None
    if not name:
        return False
    # Printable ASCII but the space, and none of CALL_NAME_FORBIDDEN: a literal, so that the
    # compiled test is a switch (tests/test_conversation.py holds it to _PLAIN_NAME). A loop, not
    # all() over a generator, which Cython would not make a C loop.
    for ch in name:  # noqa: SIM110
        if ch < "!" or ch > "~" or ch in "<>{}\"'":
            return False
    return True


# Argument values that nest no object or array (depth 1: always within MAX_JSON_DEPTH).
_FLAT_VALUES: Final = frozenset({str, int, float, bool, type(None)})
_new = object.__new__
_ABSENT: Final = object()
# The slots' own setters: a frozen dataclass's __setattr__ refuses, and __init__ would run the
# checks again.
_set_role, _set_content, _set_reasoning, _set_calls, _set_call_id, _set_name = (
    Turn.__dict__[name].__set__
    for name in ("role", "content", "reasoning", "tool_calls", "tool_call_id", "name")
)
_set_call_name, _set_arguments, _set_id, _set_undeclared = (
    ToolCall.__dict__[name].__set__ for name in ("name", "arguments", "id", "undeclared")
)


_PlainParts: TypeAlias = tuple[str, str | None, str | None, tuple[ToolCall, ...], Any, Any]


def _plain_parts(message: Any) -> _PlainParts | None:
    """What a plain message dict holds, ``(role, content, reasoning, tool_calls, tool_call_id,
    name)``, as its Turn would hold it; None when the general path must read it. One reader
    for ``_plain_turn`` and for the protocol's fused renderer of plain rows, so both take
    exactly the same messages."""
    if type(message) is not dict:
        return None
    # Typed a dict when compiled (conversation.pxd): each get is a C call, with no bound
    # method made per message.
    fields = message
    role, content = fields.get("role"), fields.get("content", _ABSENT)
    if type(role) is not str or role not in _ROLE_SET:
        return None
    others = len(message) - 1  # keys besides the role and the content
    if content is _ABSENT:
        content = None
    else:
        others -= 1
        if content is not None and type(content) is not str:
            return None
    if not others:  # most messages of a data set: nothing else to read
        return role, content, None, (), None, None
    if others == 1 and role == "assistant":
        # An answer with its reasoning, the other common shape: that key alone besides.
        reasoning = fields.get("reasoning_content")
        if type(reasoning) is str:
            return role, content, reasoning, (), None, None
    return _plain_rest(fields.get, role, content)


def _plain_rest(get: Callable[[str], Any], role: str, content: str | None) -> _PlainParts | None:
    """``_plain_parts`` of a message with other keys than its role and content (``get`` is
    its ``dict.get``)."""
    reasoning = None
    for key in REASONING_FIELDS:
        value = get(key)
        if value is not None:
            if reasoning is not None or type(value) is not str:
                return None  # two of them (equal or conflicting), or not a string
            reasoning = value
    calls: tuple[ToolCall, ...] = ()
    given = get("tool_calls")
    if given:
        if type(given) is not list:
            return None
        plain = [_plain_call(call) for call in given]
        if None in plain:
            return None
        calls = tuple(plain)  # type: ignore[arg-type]  # no None left: refused just above
    elif given is not None and type(given) is not list:
        return None
    call_id, name = get("tool_call_id"), get("name")
    if (call_id is not None and type(call_id) is not str) or (
        name is not None and type(name) is not str
    ):
        return None
    if role != "assistant" and (calls or reasoning is not None):
        return None
    return role, content, reasoning, calls, call_id, name


def _plain_turn(message: Any) -> Turn | None:
    """The Turn of a plain message dict, or None when the general path must read it."""
    parts = _plain_parts(message)
    if parts is None:
        return None
    turn: Turn = _new(Turn)
    _set_role(turn, parts[0])
    _set_content(turn, parts[1])
    _set_reasoning(turn, parts[2])
    _set_calls(turn, parts[3])
    _set_call_id(turn, parts[4])
    _set_name(turn, parts[5])
    return turn


def _plain_call(call: Any) -> ToolCall | None:
    """The ToolCall of a plain call dict (OpenAI's nested form or the flat one), or None."""
    if type(call) is not dict:
        return None
    function = call.get("function")
    if function is None:
        function = call
    elif type(function) is not dict:
        return None
    name, arguments, call_id = function.get("name"), function.get("arguments"), call.get("id")
    if type(name) is not str or not _plain_name(name):
        return None
    if call_id is not None and type(call_id) is not str:
        return None
    if arguments is None:
        arguments = {}
    elif type(arguments) is str:
        try:
            arguments = loads(arguments) if arguments else {}
        except JSONTextError:
            return None  # the general path reports it, naming the field
        if type(arguments) is not dict:
            return None
    elif type(arguments) is dict:
        arguments = dict(arguments)
    else:
        return None
    flat = True
    for key, value in arguments.items():
        if type(key) is not str or not _plain_name(key):
            return None
        flat = flat and type(value) in _FLAT_VALUES
    if not flat and json_depth_problem(arguments) is not None:
        return None
    made: ToolCall = _new(ToolCall)
    _set_call_name(made, name)
    _set_arguments(made, arguments)
    _set_id(made, call_id)
    _set_undeclared(made, ())
    return made


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
            raise PromptError(f"conflicts with {shown(other_key)}", field=key)
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
    arguments = parse_arguments(function.get("arguments"), field=f"{where}.arguments")
    try:
        return ToolCall(
            name=name, arguments=arguments, id=call_id if isinstance(call_id, str) else None
        )
    except PromptError as error:
        # ToolCall names its own field ("name", "arguments.a>b"); put it under this call's.
        raise PromptError(error.reason, field=f"{where}.{error.field}") from None


def parse_arguments(arguments: Any, *, field: str = "arguments") -> dict[str, Any]:
    """A tool call's arguments as a dict: a mapping as is, a JSON object text parsed.

    The template iterates ``arguments|items`` and so crashes on JSON text, the form OpenAI clients
    send; we parse it. Absent, None and "" mean no arguments (the template skips ``''``).
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        arguments = load_json(arguments, field)
        if not isinstance(arguments, dict):
            raise PromptError(
                f"arguments must be a JSON object, got {type(arguments).__name__}", field=field
            )
    if not isinstance(arguments, Mapping):
        raise PromptError(
            f"arguments must be an object or JSON object text, got {type(arguments).__name__}",
            field=field,
        )
    return dict(arguments)  # names, nesting: checked by ToolCall
