"""turns_from_messages: OpenAI/HF dicts to typed turns, and back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qwen_encode as qe
from tests.test_robustness import MESSAGE


def test_none_valued_keys_count_as_absent() -> None:
    (turn,) = qe.turns_from_messages(
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": None,
                "reasoning_content": None,
                "name": None,
            }
        ]
    )
    assert turn == qe.Turn("assistant")


@pytest.mark.parametrize("key", ["reasoning_content", "thinking", "reasoning"])
def test_reasoning_aliases(key: str) -> None:
    (turn,) = qe.turns_from_messages([{"role": "assistant", "content": "a", key: "r"}])
    assert turn.reasoning == "r"


def test_conflicting_reasoning_aliases_are_an_error() -> None:
    with pytest.raises(qe.PromptError) as raised:
        qe.turns_from_messages(
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "reasoning_content": "a", "reasoning": "b"},
            ]
        )
    assert raised.value.message_index == 1
    assert "conflicts" in str(raised.value)


def test_content_blocks() -> None:
    (turn,) = qe.turns_from_messages(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "t"},
                    {"type": "image_url", "image_url": {"url": "u"}},
                    {"image": "p"},
                    {"type": "image"},
                    {"type": "video", "video": "v"},
                    {"video": "w"},
                ],
            }
        ]
    )
    assert turn.content == (
        qe.TextBlock("t"),
        qe.ImageBlock({"url": "u"}),
        qe.ImageBlock("p"),
        qe.ImageBlock(None),
        qe.VideoBlock("v"),
        qe.VideoBlock("w"),
    )


@pytest.mark.parametrize(
    ("message", "field", "reason"),
    [
        (
            {"role": "user", "content": [{"type": "audio"}]},
            "content[0]",
            "Unexpected item type in content.",
        ),
        (
            {"role": "user", "content": ["plain string"]},
            "content[0]",
            "Unexpected item type in content.",
        ),
        ({"role": "user", "content": [{"type": "text", "text": 3}]}, "content[0].text", None),
        ({"role": "user", "content": 3.5}, "content", "Unexpected content type."),
        ({"role": "bot", "content": "x"}, "role", "Unexpected message role."),
        ({"role": "user", "content": "x", "tool_calls": [{"name": "f"}]}, "tool_calls", None),
        ({"role": "user", "content": "x", "reasoning_content": "r"}, "reasoning_content", None),
        ({"role": "assistant", "tool_calls": {"name": "f"}}, "tool_calls", None),
        (
            {"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]},
            "tool_calls[0].function.name",
            None,
        ),
        (
            {"role": "assistant", "tool_calls": [{"name": "f", "arguments": {1: 2}}]},
            "tool_calls[0].arguments",
            None,
        ),
        (
            {"role": "assistant", "tool_calls": [{"name": "f", "arguments": 7}]},
            "tool_calls[0].arguments",
            None,
        ),
    ],
)
def test_bad_messages_name_index_and_field(message, field: str, reason: str | None) -> None:
    with pytest.raises(qe.PromptError) as raised:
        qe.turns_from_messages([{"role": "user", "content": "first"}, message])
    assert raised.value.message_index == 1
    assert raised.value.field == field
    assert f"messages[1].{field}" in str(raised.value)
    if reason:
        assert raised.value.reason == reason


def test_messages_must_be_a_list_of_objects() -> None:
    with pytest.raises(qe.PromptError):
        qe.turns_from_messages({"role": "user"})
    with pytest.raises(qe.PromptError) as raised:
        qe.turns_from_messages(["hi"])
    assert raised.value.message_index == 0


def test_arguments_as_json_text_are_parsed() -> None:
    (turn,) = qe.turns_from_messages(
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a": [1]}'},
                    },
                    {"name": "g", "arguments": ""},
                ],
            }
        ]
    )
    assert turn.tool_calls == (qe.ToolCall("f", {"a": [1]}, "c1"), qe.ToolCall("g", {}))


def test_to_message_round_trips() -> None:
    turns = (
        qe.Turn("system", "s"),
        qe.Turn("user", (qe.TextBlock("look"), qe.ImageBlock("img.png"), qe.VideoBlock("v.mp4"))),
        qe.Turn("assistant", "a", reasoning="r", tool_calls=(qe.ToolCall("f", {"x": 1}, "id1"),)),
        qe.Turn("tool", "result", tool_call_id="id1", name="f"),
    )
    assert qe.turns_from_messages([t.to_message() for t in turns]) == turns


# -- bad input at the door: typed errors naming the field, never a crash ----------------------


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("messages", [None, 5, 3.5, True, object()])
def test_messages_of_a_wrong_type(messages) -> None:
    with pytest.raises(qe.PromptError, match="must be a list of message objects") as raised:
        qe.turns_from_messages(messages)
    assert raised.value.field == "messages"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"content": 5}, "content"),
        ({"content": [5]}, "content[0]"),
        ({"content": ("x",)}, "content[0]"),
        ({"role": ["user"]}, "role"),
        ({"role": "assistant", "reasoning": 1}, "reasoning"),
        ({"role": "assistant", "tool_calls": "f"}, "tool_calls"),
        ({"role": "assistant", "tool_calls": [{"name": "f"}]}, "tool_calls[0]"),
        ({"tool_call_id": 7}, "tool_call_id"),
        ({"name": b"n"}, "name"),
    ],
)
def test_turn_checks_its_types_when_made(kwargs: dict, field: str) -> None:
    with pytest.raises(qe.PromptError) as raised:
        qe.Turn(**{"role": "user", **kwargs})
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((5, {}), "name"),
        (("f", None), "arguments"),
        (("f", [("a", 1)]), "arguments"),
        (("f", {1: "x"}), "arguments"),
        (("f", {}, 12), "id"),
        (("", {}), "name"),
        (("a b", {}), "name"),
        (("f\n", {}), "name"),
        (("{{ tc.name }}", {}), "name"),
        (("f", {"a>b": "v"}), "arguments.a>b"),
        (("f", {"": "v"}), "arguments."),
        (("f", {" ": "v"}), "arguments. "),
        (("f", {"<p": "v"}), "arguments.<p"),
        (("f", {"a": _nested(101)}), "arguments"),
    ],
)
def test_tool_call_refuses_what_the_call_format_cannot_carry(args: tuple, field: str) -> None:
    with pytest.raises(qe.PromptError) as raised:
        qe.ToolCall(*args)
    assert raised.value.field == field


def test_tool_call_at_the_depth_limit_is_accepted() -> None:
    assert qe.ToolCall("f", {"a": _nested(99)}).arguments["a"] == _nested(99)


def test_self_containing_arguments_are_too_deep_not_a_recursion_error() -> None:
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(qe.PromptError, match="nests more than 100"):
        qe.ToolCall("f", {"a": loop})


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{"a": ' * 3000 + "1" + "}" * 3000, "nests more than 100"),  # past the C decoder's limit
        ('{"a": ' * 150 + "1" + "}" * 150, "nests more than 100"),
        ('{"a": ' + "7" * 5000 + "}", "integer too long"),
        ('{"a": [' + "1," * 10 + "]}", "not valid JSON"),
    ],
)
def test_arguments_text_errors_name_the_message_and_call(arguments: str, reason: str) -> None:
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": arguments}}]},
    ]
    with pytest.raises(qe.PromptError, match=reason) as raised:
        qe.turns_from_messages(messages)
    assert (raised.value.message_index, raised.value.field) == (
        1,
        "tool_calls[0].function.arguments",
    )


def test_call_names_are_checked_in_messages() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [{"name": "f", "arguments": {"x\ny": 1}}]},
    ]
    with pytest.raises(qe.PromptError, match="whitespace") as raised:
        qe.turns_from_messages(messages)
    assert str(raised.value).startswith("messages[1].tool_calls[0].arguments.x")


def test_to_dict_of_an_integer_past_the_digit_limit_is_a_prompt_error() -> None:
    call = qe.ToolCall("f", {"n": 10**5000})
    with pytest.raises(qe.PromptError, match="not JSON-serialisable"):
        call.to_dict()


def test_error_messages_never_carry_a_lone_surrogate() -> None:
    # Quoting the caller's value is useful; a raw surrogate in the message crashed any writer.
    error = qe.PromptError("Unexpected reasoning effort \ud800.", field="a\udcff")
    str(error).encode("utf-8")
    assert error.reason == "Unexpected reasoning effort \\ud800."
    assert error.field == "a\\udcff"


# -- the plain-dict path: the same turns and the same errors as the general path -------------


def _general(messages: list) -> tuple | tuple[str, int | None, str | None]:
    """What the general path alone makes of ``messages`` (a tuple of turns, or the error)."""
    from qwen_encode.conversation import _turn_from_message

    try:
        return tuple(_turn_from_message(i, m) for i, m in enumerate(messages))
    except qe.PromptError as error:
        return (error.reason, error.message_index, error.field)


def _either(messages: list) -> tuple | tuple[str, int | None, str | None]:
    try:
        return qe.turns_from_messages(messages)
    except qe.PromptError as error:
        return (error.reason, error.message_index, error.field)


def _strict(value: object) -> object:
    """A value with every type spelled out (1, 1.0 and True compare equal; here they differ)."""
    if isinstance(value, qe.Turn | qe.ToolCall):
        return (type(value), *(_strict(getattr(value, f)) for f in value.__slots__))
    if isinstance(value, dict):
        return (dict, [(_strict(k), _strict(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value), [_strict(v) for v in value])
    return (type(value), value)


_PLAIN_SHAPES: list[dict] = [
    {"role": "user", "content": "q"},
    {"role": "system", "content": " s "},
    {"role": "assistant", "content": "a", "reasoning_content": "r"},
    {"role": "assistant", "content": None, "thinking": "r", "name": "bot"},
    {"role": "assistant", "reasoning": "r", "tool_calls": []},
    {"role": "tool", "content": "t", "tool_call_id": "c1", "name": "f"},
    # A role and a content alone are read without looking for the other keys; any other key
    # (unknown ones too, which the general path ignores) sends the message through every check.
    {"role": "user"},
    {"role": "tool", "content": None},
    {"content": "", "role": "assistant"},
    {"role": "user", "content": "q", "weight": [1]},
    {"role": "assistant", "content": None, "reasoning_content": None, "tool_calls": None},
    {"role": "assistant", "reasoning_content": " r "},
    {"role": "assistant", "content": "a", "reasoning_content": None},
    {"role": "assistant", "content": "a", "thinking": "r"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "id": "c1", "function": {"name": "f", "arguments": {"a": 1}}},
            {"function": {"name": "g.h-1", "arguments": '{"x": [1, {"y": null}], "z": 2.5}'}},
            {"name": "k", "arguments": ""},
            {"name": "k", "arguments": None, "id": None},
            {"name": "k", "arguments": {"b": True, "c": None, "d": "v"}},
        ],
    },
]

_ODD_SHAPES: list = [
    {"role": "user", "content": "q", "reasoning_content": "r"},
    {"role": "user", "content": "q", "tool_calls": [{"name": "f"}]},
    {"role": "assistant", "reasoning_content": "a", "thinking": "a"},
    {"role": "assistant", "reasoning_content": "a", "thinking": "b"},
    {"role": "assistant", "reasoning_content": 5},
    {"role": "assistant", "tool_calls": ""},
    {"role": "assistant", "tool_calls": {}},
    {"role": "assistant", "tool_calls": ({"name": "f"},)},
    {"role": "assistant", "tool_calls": [{"name": "a b"}]},
    {"role": "assistant", "tool_calls": [{"name": "f\x7f"}]},
    {"role": "assistant", "tool_calls": [{"name": "é"}]},
    {"role": "assistant", "tool_calls": [{"name": ""}]},
    {"role": "assistant", "tool_calls": [{"name": "f", "id": 5}]},
    {"role": "assistant", "tool_calls": [{"function": None, "name": "f"}]},
    {"role": "assistant", "tool_calls": [{"function": "f"}]},
    {"role": "assistant", "tool_calls": [{"name": "f", "arguments": "[1]"}]},
    {"role": "assistant", "tool_calls": [{"name": "f", "arguments": "{"}]},
    {"role": "assistant", "tool_calls": [{"name": "f", "arguments": {"a<": 1}}]},
    {"role": "assistant", "tool_calls": [{"name": "f", "arguments": {"a": _nested(101)}}]},
    {"role": "assistant", "tool_calls": [{"name": "f", "arguments": {"a": _nested(99)}}]},
    {"role": "assistant", "tool_calls": [{"name": "f", "arguments": [("a", 1)]}]},
    {"role": "user", "content": ["x"]},
    {"role": "user", "content": [{"type": "text", "text": "x"}]},
    {"role": "user", "content": 5},
    {"role": "bot", "content": "x"},
    {"role": None, "content": "x"},
    {"role": ["user"], "content": "x"},
    {"role": "user", "content": "x", "name": 5},
    {"role": "tool", "content": "x", "tool_call_id": b"c"},
    {"content": "x"},
    "user",
    qe.Turn("user", "x"),
    {"role": "user", "content": b"x"},
    {"role": "system", "content": ("x",)},
    {"role": "user", "content": "x", "tool_calls": [{"name": "f"}], "weight": 1},
    {"role": "assistant", "content": 5, "extra": None},
]


@pytest.mark.parametrize("message", _PLAIN_SHAPES + _ODD_SHAPES)
def test_plain_path_reads_every_shape_as_the_general_path(message) -> None:
    messages = [{"role": "user", "content": "first"}, message]
    assert _strict(_either(messages)) == _strict(_general(messages))


def test_plain_path_takes_the_plain_shapes_and_leaves_the_others() -> None:
    from qwen_encode.conversation import _plain_turn

    assert all(_plain_turn(m) is not None for m in _PLAIN_SHAPES)
    taken = [m for m in _ODD_SHAPES if _plain_turn(m) is not None]
    # Valid after all: "function": None reads the flat form, and nesting within the limit.
    assert taken == [_ODD_SHAPES[13], _ODD_SHAPES[19]]


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGE, max_size=3))
def test_plain_path_agrees_with_the_general_path_on_hostile_messages(messages) -> None:
    assert _strict(_either(messages)) == _strict(_general(messages))


def test_a_plain_call_name_is_checked_alike_by_the_loop_and_the_regex() -> None:
    """The compiled module checks plain call names and argument keys in one loop over the
    characters, Python with the regex: the two accept exactly the same names (as Python the
    check is the regex itself; the compiled run is the one that holds the loop to it)."""
    from qwen_encode.conversation import _PLAIN_NAME, _plain_name
    from qwen_encode.markers import CALL_NAME_FORBIDDEN

    names = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    names += ["", "get_weather", "a b", "a\tb", "ok!", "x\x7f", "é", "a" * 300, "a\u00a0b"]
    names += [f"f{c}x" for c in sorted(CALL_NAME_FORBIDDEN)]
    accepted = [name for name in names if _plain_name(name)]
    assert accepted == [name for name in names if _PLAIN_NAME(name)]
    assert len(accepted) == 0x7E - 0x20 - len(CALL_NAME_FORBIDDEN) + 3  # one char each; 3 names
