"""qwen_encode's SGLang detectors, driven as SGLang 0.5.23's chat serving drives them (the
reasoning parser first, its normal text into the function-call parser; no GPU needed). Every
reading must equal ``qe.parse_completion`` on the same output, non-streaming and streaming (one
token per delta, random multi-token deltas, random character chunks). SGLang hands its parsers
text. Run by ``scripts/integration_env.sh sglang``."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "sglang",
    reason="SGLang is not installed: scripts/integration_env.sh sglang builds a venv with it",
)

import json

import qwen_encode as qe

from .cases import ALL, REALISTIC, TOOLS, UNTERMINATED, Case, cuts

ROOT = Path(__file__).resolve().parents[2]
Reading = tuple[str | None, str | None, list[tuple[str, dict[str, Any]]]]


@pytest.fixture(scope="module")
def tokenizer(qwen38_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen38_dir))


@pytest.fixture(scope="module", autouse=True)
def plugin() -> None:
    from qwen_encode.integrations.sglang import register

    register()


def _parsers(case: Case) -> tuple[Any, Any]:
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    tools = [Tool(**t) for t in case.tools or []]
    reasoning = ReasoningParser(
        "qwen_encode",
        stream_reasoning=True,
        force_reasoning=case.thinking,
        tool_call_parser_active=bool(tools),
    )
    return reasoning, FunctionCallParser(tools, "qwen_encode") if tools else None


def expected(case: Case) -> Reading:
    got = qe.parse_completion(case.text, tools=case.tools, thinking=case.thinking)
    return got.reasoning, got.content, [(c.name, dict(c.arguments)) for c in got.tool_calls]


def batch(case: Case) -> Reading:
    reasoner, caller = _parsers(case)
    reasoning, text = reasoner.parse_non_stream(case.text)
    calls = []
    if caller is not None:
        text, items = caller.parse_non_stream(text)
        calls = [(i.name, json.loads(i.parameters)) for i in items]
    return reasoning or None, text or None, calls


def stream(case: Case, chunks: list[str]) -> Reading:
    reasoner, caller = _parsers(case)
    reasoning, content = [], []
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}

    def take(items: list[Any]) -> None:
        for item in items:
            if item.tool_index not in names:
                # The name first, before any argument text.
                assert item.name and not item.parameters
                names[item.tool_index], arguments[item.tool_index] = item.name, ""
            else:
                assert item.name is None
                arguments[item.tool_index] += item.parameters

    for n, chunk in enumerate(chunks):
        r, text = reasoner.parse_stream_chunk(chunk)
        if n == len(chunks) - 1:
            end_r, end_text = reasoner.parse_stream_end()
            r, text = (r or "") + (end_r or ""), (text or "") + (end_text or "")
        reasoning.append(r or "")
        if caller is None:
            content.append(text or "")
            continue
        if text:
            normal, items = caller.parse_stream_chunk(text)
            content.append(normal)
            take(items)
    if caller is not None:
        normal, items = caller.parse_stream_end()
        content.append(normal)
        take(items)
    calls = [(names[i], json.loads(arguments[i])) for i in sorted(names)]
    return "".join(reasoning) or None, "".join(content) or None, calls


def token_chunks(tokenizer: Any, text: str, sizes: list[int] | None = None) -> list[str]:
    """The text deltas a detokenizer sends: whole characters, one or more tokens at a time."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    chunks, done, at, sizes = [], "", 0, list(sizes or [])
    while at < len(ids):
        at = min(len(ids), at + (sizes.pop(0) if sizes else 1))
        prefix = tokenizer.decode(ids[:at])
        if prefix.endswith("\ufffd") and at < len(ids):
            continue
        chunks.append(prefix[len(done) :])
        done = prefix
    assert "".join(chunks) == text
    return chunks


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_batch_and_streaming_equal_parse_completion(tokenizer: Any, case: Case) -> None:
    want = expected(case)
    assert batch(case) == want
    assert stream(case, token_chunks(tokenizer, case.text)) == want
    rng = random.Random(case.name)
    for _ in range(2):
        assert stream(case, token_chunks(tokenizer, case.text, cuts(400, rng))) == want
        points = sorted(rng.sample(range(1, len(case.text)), min(8, len(case.text) - 1)))
        pieces = [
            case.text[a:b] for a, b in zip([0, *points], [*points, len(case.text)], strict=True)
        ]
        assert stream(case, pieces) == want


def test_the_issue_example(tokenizer: Any) -> None:
    """SGLang's own parsers give '\\n\\nChecking.\\n\\n' both ways."""
    case = REALISTIC[2]
    assert batch(case)[1] == "Checking."
    assert stream(case, token_chunks(tokenizer, case.text))[1] == "Checking."


def test_unterminated_call_is_content_with_one_warning(
    tokenizer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    case = UNTERMINATED
    raw = case.text.split("</think>", 1)[1].strip()
    for reading in (lambda: batch(case), lambda: stream(case, token_chunks(tokenizer, case.text))):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="qwen_encode.integrations"):
            assert reading() == ("Checking.", raw, [])
        warnings = [r for r in caplog.records if r.name == "qwen_encode.integrations"]
        assert len(warnings) == 1 and "not dispatched" in warnings[0].getMessage()


def test_malformed_call_is_content(tokenizer: Any) -> None:
    case = Case("malformed", "</think>\n\nOk <tool_call>\nnothing\n</tool_call> end", True, TOOLS)
    want = (None, "Ok <tool_call>\nnothing\n</tool_call> end", [])
    assert batch(case) == want
    assert stream(case, token_chunks(tokenizer, case.text)) == want


def test_malformed_call_without_think_close(tokenizer: Any) -> None:
    text = "Let me look.\n<tool_call>\n<function=get_weather>\nno parameter\n</tool_call>"
    case = Case("malformed, no </think>", text, True, TOOLS)
    want = ("Let me look.", text.split("\n", 1)[1], [])
    assert batch(case) == want
    assert stream(case, token_chunks(tokenizer, case.text)) == want


def test_structural_tag_name() -> None:
    from qwen_encode.integrations.sglang import QwenEncodeDetector

    detector = QwenEncodeDetector()
    assert detector.get_structural_tag_name() == "qwen_3_coder"
    assert detector.supports_structural_tag()
    info = detector.structure_info()("get_weather")
    assert info.begin == "<tool_call>\n<function=get_weather>\n" and info.trigger == "<tool_call>"
    assert detector.has_tool_call("x <tool_call>") and not detector.has_tool_call("x")


def test_registration_from_the_entry_point() -> None:
    """A fresh interpreter: SGLang's plugin loader alone registers both names, and the server's
    argument parser then accepts them."""
    script = """
import argparse
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser
from sglang.srt.server_args import ServerArgs
assert "qwen_encode" in FunctionCallParser.ToolCallParserEnum
assert "qwen_encode" in ReasoningParser.DetectorMap
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
args = parser.parse_args(["--model-path", "m", "--tool-call-parser", "qwen_encode",
                          "--reasoning-parser", "qwen_encode"])
print(args.tool_call_parser, args.reasoning_parser)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "qwen_encode qwen_encode"
