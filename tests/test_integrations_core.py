"""The engine-free part of qwen_encode.integrations, in the normal test run: the layering rule
(no core module imports it), the missing-engine message, and the split of an output into the
reasoning and the answer read by a second StreamParser, which must equal parse_completion."""

from __future__ import annotations

import importlib.util
import random
import re
from pathlib import Path

import pytest

import qwen_encode as qe
from qwen_encode.integrations._common import (
    AnswerStream,
    ReasoningText,
    Trimmed,
    answer_of,
    split_reasoning_text,
)

from .integrations.cases import ALL, UNTERMINATED, Case

PACKAGE = Path(qe.__file__).resolve().parent


def test_no_core_module_imports_the_integrations() -> None:
    for path in PACKAGE.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import)\s+\S*integrations", source, re.M), path.name


@pytest.mark.parametrize("engine, module", [("vllm", "vllm"), ("sglang", "sglang")])
def test_missing_engine_says_which_version(engine: str, module: str) -> None:
    if importlib.util.find_spec(engine) is not None:
        pytest.skip(f"{engine} is installed here")
    with pytest.raises(ImportError, match=rf"needs {engine}>=0\.\d+.*not installed"):
        importlib.import_module(f"qwen_encode.integrations.{module}")


def test_trimmed_stream_is_strip() -> None:
    rng = random.Random(0)
    for _ in range(300):
        text = "".join(
            rng.choice([" ", "\n", "a", "b", "\t", "é"]) for _ in range(rng.randint(0, 12))
        )
        trim, out, at = Trimmed(), [], 0
        while at < len(text):
            step = rng.randint(1, 4)
            out.append(trim.feed(text[at : at + step]))
            at += step
        assert "".join(out) == text.strip()


def _whole(case: Case) -> tuple[str | None, str | None, tuple[qe.ToolCall, ...]]:
    reasoning, rest = split_reasoning_text(case.text, case.thinking)
    content, calls = answer_of(rest, case.tools)
    return reasoning, content, tuple(calls)


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_split_then_answer_equals_parse_completion(case: Case) -> None:
    want = qe.parse_completion(case.text, tools=case.tools, thinking=case.thinking)
    assert _whole(case) == (want.reasoning, want.content, want.tool_calls)


@pytest.mark.parametrize("case", [*ALL, UNTERMINATED], ids=lambda c: c.name)
def test_streaming_split_equals_batch(case: Case) -> None:
    rng = random.Random(case.name)
    for _ in range(5):
        points = sorted(rng.sample(range(1, len(case.text)), min(9, len(case.text) - 1)))
        pieces = [
            case.text[a:b] for a, b in zip([0, *points], [*points, len(case.text)], strict=True)
        ]
        split, answer = ReasoningText(case.thinking), AnswerStream(tools=case.tools)
        reasoning, content, calls = [], [], []
        for piece in pieces:
            r, rest = split.feed(piece)
            reasoning.append(r)
            step = answer.feed(rest)
            content.append(step.content)
            calls += [c for _, c in step.calls]
        r, rest = split.finish()
        reasoning.append(r)
        for step in (answer.feed(rest), answer.finish()):
            content.append(step.content)
            calls += [c for _, c in step.calls]
        whole = split_reasoning_text(case.text, case.thinking)
        batch_content, batch_calls = answer_of(whole[1], case.tools)
        assert ("".join(reasoning) or None, "".join(content) or None, calls) == (
            whole[0],
            batch_content,
            batch_calls,
        )
