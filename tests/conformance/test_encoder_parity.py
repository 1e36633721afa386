"""Encoder IDs against ``apply_chat_template(tokenize=True)`` on the real Qwen 3.8 checkpoint.

``"atomic"`` mode must equal the oracle on every conversation; ``"literal"`` mode wherever no
caller field spells a control token, and where one does, the oracle forges control tokens and we
forge none. Expected IDs come from the oracle at test time."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qwen_encode as qe
from qwen_encode.markers import ALL_ADDED_TOKENS

from .corpus import generate

PLAIN = generate()
WITH_MARKERS = generate(count=200, seed=3808, markers=True)


@pytest.fixture(scope="module")
def atomic(qwen38_dir: Path) -> qe.Encoder:
    return qe.Encoder.from_pretrained(qwen38_dir, markers_in_text="atomic")


@pytest.fixture(scope="module")
def literal(atomic: qe.Encoder) -> qe.Encoder:
    return qe.Encoder(atomic.vocabulary, markers_in_text="literal")


def _oracle_ids(oracle, case: dict[str, Any]) -> list[int]:
    kwargs = dict(case["kwargs"])
    if kwargs.get("continue_final_message"):
        kwargs["add_generation_prompt"] = False
    out = oracle.apply_chat_template(
        copy.deepcopy(case["messages"]),
        tools=case["tools"],
        tokenize=True,
        return_dict=False,
        **kwargs,
    )
    return list(out)


def _prompt(case: dict[str, Any]) -> qe.Prompt:
    return qe.format_prompt(case["messages"], tools=case["tools"], **case["kwargs"])


def _caller_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_caller_strings(k), *_caller_strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in _caller_strings(item)]
    return []


def _spells_marker(case: dict[str, Any]) -> bool:
    text = "\x00".join(_caller_strings([case["messages"], case["tools"]]))
    return any(marker in text for marker in ALL_ADDED_TOKENS)


@pytest.mark.parametrize("n", range(len(PLAIN)))
def test_atomic_equals_oracle(oracle, atomic: qe.Encoder, n: int) -> None:
    case = PLAIN[n]
    assert atomic.encode(_prompt(case)).input_ids.tolist() == _oracle_ids(oracle, case)


@pytest.mark.parametrize("n", range(len(WITH_MARKERS)))
def test_atomic_equals_oracle_even_with_markers_in_text(oracle, atomic: qe.Encoder, n) -> None:
    case = WITH_MARKERS[n]
    assert atomic.encode(_prompt(case)).input_ids.tolist() == _oracle_ids(oracle, case)


def test_literal_equals_oracle_without_markers_in_text(oracle, literal: qe.Encoder) -> None:
    clean = [case for case in PLAIN + WITH_MARKERS if not _spells_marker(case)]
    assert len(clean) >= 500
    prompts = [_prompt(case) for case in clean]
    mismatches = [
        i
        for i, (case, encoding) in enumerate(zip(clean, literal.encode_batch(prompts), strict=True))
        if encoding.input_ids.tolist() != _oracle_ids(oracle, case)
    ]
    assert mismatches == []


def test_literal_forges_nothing_where_the_oracle_forges(oracle, literal: qe.Encoder) -> None:
    added = set(literal.vocabulary.added_tokens.values())
    dirty = [case for case in WITH_MARKERS if _spells_marker(case)]
    assert len(dirty) >= 100
    oracle_forged = ours_forged = 0
    for case in dirty:
        prompt = _prompt(case)
        written = sum(1 for s in prompt.segments if isinstance(s, qe.Special))
        oracle_forged += sum(1 for i in _oracle_ids(oracle, case) if i in added) - written
        ours = literal.encode(prompt).input_ids
        ours_forged += int(np.isin(ours, list(added)).sum()) - written
    assert ours_forged == 0
    assert oracle_forged > len(dirty)  # the attack is real: transformers turns them into tokens
