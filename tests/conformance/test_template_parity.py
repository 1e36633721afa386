"""``format_prompt(...).text`` against the checkpoint's own template rendered by transformers.

The expected strings come from the oracle at test time (``apply_chat_template(tokenize=False)``),
never from our renderer."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import qwen_encode as qe

from .corpus import generate

CASES = generate()


def _oracle_text(oracle, case: dict[str, Any]) -> str:
    kwargs = dict(case["kwargs"])
    if kwargs.get("continue_final_message"):
        kwargs["add_generation_prompt"] = False  # transformers refuses both at once
    return oracle.apply_chat_template(
        copy.deepcopy(case["messages"]), tools=case["tools"], tokenize=False, **kwargs
    )


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def test_corpus_is_varied() -> None:
    """The corpus really exercises what the parity claim covers."""
    assert len(CASES) >= 500
    flat = "\x00".join(_strings(CASES))
    for needle in ("\u00a0", "\u3000", "\r\n", "你好", "👍", "e\u0301", "image_url", "video"):
        assert needle in flat, needle
    assert any(c["kwargs"].get("continue_final_message") for c in CASES)
    assert any(not c["kwargs"]["add_generation_prompt"] for c in CASES)
    assert any(sum(1 for m in c["messages"] if m["role"] == "tool") >= 2 for c in CASES)
    assert any(len(m.get("tool_calls", [])) >= 2 for c in CASES for m in c["messages"])
    options = {tuple(sorted(c["kwargs"].items())) for c in CASES}
    assert len(options) >= 64


@pytest.mark.parametrize("n", range(len(CASES)))
def test_text_matches_oracle(oracle, n: int) -> None:
    case = CASES[n]
    expected = _oracle_text(oracle, case)
    prompt = qe.format_prompt(case["messages"], tools=case["tools"], **case["kwargs"])
    assert prompt.text == expected


def _system_with_image() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": [{"type": "image", "image": "x"}]},
        {"role": "user", "content": "hi"},
    ]


ERROR_CASES = [
    ("No messages provided.", [], {}),
    (
        "Unexpected reasoning effort high. Supported types are xhigh (default), medium, and low.",
        [{"role": "user", "content": "hi"}],
        {"reasoning_effort": "high"},
    ),
    ("System message cannot contain images.", _system_with_image(), {}),
    (
        "System message cannot contain videos.",
        [
            {"role": "system", "content": [{"type": "video", "video": "v"}]},
            {"role": "user", "content": "hi"},
        ],
        {},
    ),
    (
        "Unexpected item type in content.",
        [{"role": "user", "content": [{"type": "audio", "audio": "a"}]}],
        {},
    ),
    ("Unexpected content type.", [{"role": "user", "content": 5}], {}),
    ("Unexpected content type.", [{"role": "user", "content": {"text": "hi"}}], {}),
    (
        "No user query found in messages.",
        [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}],
        {"add_generation_prompt": False},
    ),
    (
        "No user query found in messages.",
        [{"role": "user", "content": " <tool_response>\nr\n</tool_response>\n"}],
        {},
    ),
    # Both "no user query" and a misplaced system message: the template checks the query first.
    (
        "No user query found in messages.",
        [{"role": "assistant", "content": "a"}, {"role": "system", "content": "s"}],
        {},
    ),
    (
        "System message must be at the beginning.",
        [{"role": "user", "content": "u"}, {"role": "system", "content": "s"}],
        {},
    ),
    (
        "Unexpected message role.",
        [{"role": "user", "content": "u"}, {"role": "developer", "content": "d"}],
        {},
    ),
    ("Unexpected message role.", [{"role": "user", "content": "u"}, {"content": "no role"}], {}),
]


@pytest.mark.parametrize(
    ("message", "messages", "kwargs"),
    ERROR_CASES,
    ids=[f"{i}-{c[0][:30]}" for i, c in enumerate(ERROR_CASES)],
)
def test_template_errors_keep_their_message(oracle, message, messages, kwargs) -> None:
    with pytest.raises(Exception) as raised:
        if messages:
            oracle.apply_chat_template(
                copy.deepcopy(messages), tokenize=False, **{"add_generation_prompt": True, **kwargs}
            )
        else:
            # apply_chat_template refuses an empty conversation before the template runs; the
            # template's own message comes from rendering it directly.
            from transformers.utils.chat_template_utils import render_jinja_template

            render_jinja_template(
                [[]], chat_template=oracle.chat_template, add_generation_prompt=True
            )
    assert message in str(raised.value)
    with pytest.raises(qe.PromptError) as ours:
        qe.format_prompt(messages, **kwargs)
    assert ours.value.reason == message
    assert isinstance(ours.value, ValueError)


@pytest.mark.parametrize("effort", ["none", "high", "max", "bogus", 3])
def test_thinking_off_renders_any_effort(oracle, effort: Any) -> None:
    # The template checks the effort only while thinking: OpenAI's "none" (which vLLM passes
    # along with enable_thinking false) and any other value render the thinking-off prompt.
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    kwargs = {"enable_thinking": False, "reasoning_effort": effort}
    expected = oracle.apply_chat_template(
        copy.deepcopy(messages), tokenize=False, add_generation_prompt=True, **kwargs
    )
    assert qe.format_prompt(messages, **kwargs).text == expected
