"""turns_from_messages: OpenAI/HF dicts to typed turns, and back."""

from __future__ import annotations

import pytest

import qwen_encode as qe


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
