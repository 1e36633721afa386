"""ChatSession: growing a conversation turn by turn gives exactly the IDs of encoding it from
scratch, including where a new turn changes how an earlier one renders, and reuses the rest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qwen_encode as qe
from tests.conformance.corpus import generate


@pytest.fixture(scope="module")
def encoder(qwen38_dir: Path) -> qe.Encoder:
    return qe.Encoder.from_pretrained(qwen38_dir)


def _assert_same(a: qe.Encoding, b: qe.Encoding) -> None:
    assert np.array_equal(a.input_ids, b.input_ids)
    assert np.array_equal(a.assistant_mask, b.assistant_mask)
    assert np.array_equal(a.turn_index, b.turn_index)


CASES = [c for c in generate(count=160, seed=4242) if not c["kwargs"].get("continue_final_message")]


@pytest.mark.parametrize("n", range(0, len(CASES), 2))
def test_every_step_equals_encoding_from_scratch(encoder: qe.Encoder, n: int) -> None:
    case = CASES[n]
    options = {k: v for k, v in case["kwargs"].items()}
    session = encoder.chat(case["tools"], **options)
    checked = 0
    for i, message in enumerate(case["messages"]):
        session.append(message)
        try:
            expected = encoder.encode(
                qe.format_prompt(case["messages"][: i + 1], tools=case["tools"], **options)
            )
        except qe.PromptError:
            with pytest.raises(qe.PromptError):
                session.encoding()
            continue
        _assert_same(session.encoding(), expected)
        checked += 1
    assert checked >= 1


def test_new_query_drops_earlier_reasoning_without_preserve_thinking(encoder) -> None:
    session = encoder.chat(preserve_thinking=False)
    session.append({"role": "user", "content": "q1"})
    session.append({"role": "assistant", "content": "a1", "reasoning_content": "r1"})
    session.append({"role": "user", "content": "<tool_response>\nx\n</tool_response>"})
    before = encoder.decode(session.encoding().input_ids)
    assert "<think>\nr1\n</think>" in before  # the wrapper turn is not a real query
    session.append({"role": "assistant", "content": "a2", "reasoning_content": "r2"})
    session.append({"role": "user", "content": "q2"})
    after = encoder.decode(session.encoding().input_ids)
    assert "r1" not in after and "r2" not in after
    _assert_same(session.encoding(), encoder.encode(session.prompt()))


def test_consecutive_tool_results_merge(encoder: qe.Encoder) -> None:
    session = encoder.chat()
    session.extend(
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [{"name": "f"}, {"name": "g"}]},
            {"role": "tool", "content": "one"},
        ]
    )
    first = encoder.decode(session.encoding().input_ids)
    assert first.endswith(
        "<tool_response>\none\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    session.append({"role": "tool", "content": "two"})
    second = encoder.decode(session.encoding().input_ids)
    assert "</tool_response>\n<tool_response>\ntwo\n</tool_response><|im_end|>" in second
    _assert_same(session.encoding(), encoder.encode(session.prompt()))


def test_earlier_turns_are_reused(encoder: qe.Encoder, monkeypatch) -> None:
    session = encoder.chat()
    for i in range(10):
        session.append({"role": "user", "content": f"question {i}"})
        session.encoding()
        session.append({"role": "assistant", "content": f"answer {i}"})
    encoded: list[str] = []
    original = encoder.encode

    def spy(prompt: qe.Prompt) -> qe.Encoding:
        encoded.append(prompt.text)
        return original(prompt)

    monkeypatch.setattr(encoder, "encode", spy)
    session.append({"role": "user", "content": "last question"})
    session.encoding()
    # Only the new turn and the assistant turn before it (first encoded now) are encoded.
    assert encoded == [
        "<|im_start|>assistant\n<think>\n\n</think>\n\nanswer 9<|im_end|>\n",
        "<|im_start|>user\nlast question<|im_end|>\n",
    ]


def test_bad_message_names_its_index_and_pop_recovers(encoder: qe.Encoder) -> None:
    session = encoder.chat()
    session.append({"role": "user", "content": "q"})
    with pytest.raises(qe.PromptError) as raised:
        session.append({"role": "user", "content": 7})
    assert raised.value.message_index == 1
    session.append({"role": "assistant", "content": "a"})
    with pytest.raises(qe.PromptError, match="ends on an assistant turn"):
        session.encoding()
    session.pop()
    assert len(session.encoding()) > 0


@pytest.mark.parametrize("n", range(1, len(CASES), 2))
def test_planning_on_a_previous_plan_equals_planning_from_scratch(n: int) -> None:
    case = CASES[n]
    turns = qe.turns_from_messages(case["messages"])
    options = {"tools": case["tools"], **case["kwargs"]}
    previous = None
    for k in range(1, len(turns) + 1):
        try:
            scratch = qe.plan_prompt(turns[:k], **options)
        except qe.PromptError:
            with pytest.raises(qe.PromptError):
                qe.plan_prompt(turns[:k], **options, previous=previous)
            continue
        grown = qe.plan_prompt(turns[:k], **options, previous=previous)
        assert (grown.head, grown.layouts, grown.tail, grown.last_query) == (
            scratch.head,
            scratch.layouts,
            scratch.tail,
            scratch.last_query,
        )
        previous = grown


def test_a_new_turn_plans_only_what_it_changes(encoder: qe.Encoder) -> None:
    # encoding() at turn 2,000 once cost 30x what it did at the start, because every call
    # re-planned the whole history. A new turn lays out itself and the turn before it only.
    session = encoder.chat()
    for i in range(300):
        session.append({"role": "user", "content": f"q{i}"})
        session.encoding()
        assert session._plan is not None
        assert session._plan.unchanged >= len(session.turns) - 3
        session.append({"role": "assistant", "content": f"a{i}", "reasoning_content": f"r{i}"})


def test_pop_then_another_continuation_equals_scratch(encoder: qe.Encoder) -> None:
    for preserve in (True, False):
        session = encoder.chat(preserve_thinking=preserve)
        session.extend([{"role": "user", "content": "q1"}])
        session.encoding()
        session.extend(
            [
                {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
                {"role": "user", "content": "q2"},
            ]
        )
        session.encoding()
        session.pop()
        session.pop()
        session.extend(
            [
                {"role": "assistant", "tool_calls": [{"name": "f", "arguments": {"x": 1}}]},
                {"role": "tool", "content": "one"},
            ]
        )
        _assert_same(session.encoding(), encoder.encode(session.prompt()))
        session.append({"role": "tool", "content": "two"})
        _assert_same(session.encoding(), encoder.encode(session.prompt()))
        session.extend(
            [{"role": "assistant", "content": "done"}, {"role": "user", "content": "q3"}]
        )
        _assert_same(session.encoding(), encoder.encode(session.prompt()))
