"""qwen_encode's vLLM parsers, driven as vLLM 0.33 drives them (no GPU: the parser classes run
with only the tokenizer). Every reading must equal ``qe.parse_completion`` on the same output:
non-streaming, one token per delta, random multi-token deltas, and the legacy
previous/current/delta bookkeeping. Run by ``scripts/integration_env.sh vllm``."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "vllm", reason="vLLM is not installed: scripts/integration_env.sh vllm builds a venv with it"
)

import qwen_encode as qe
from qwen_encode.integrations._common import TokenizerMarkers

from .cases import ALL, REALISTIC, TOOLS, UNTERMINATED, Case, cuts, id_chunks

ROOT = Path(__file__).resolve().parents[2]
Reading = tuple[str | None, str | None, list[tuple[str, dict[str, Any]]]]


@pytest.fixture(scope="module")
def tokenizer(qwen38_dir: Path) -> Any:
    from vllm.tokenizers import get_tokenizer

    return get_tokenizer(str(qwen38_dir))


@pytest.fixture(scope="module")
def parser_cls(tokenizer: Any) -> Any:
    from vllm.parser.parser_manager import ParserManager

    import qwen_encode.integrations.vllm  # noqa: F401  (registers; the entry point does it too)

    return ParserManager.get_parser(
        tool_parser_name="qwen_encode",
        reasoning_parser_name="qwen_encode",
        enable_auto_tools=True,
        tokenizer=tokenizer,
    )


def _request(case: Case) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(
        model="qwen3.8",
        messages=[{"role": "user", "content": "hi"}],
        tools=case.tools,
        chat_template_kwargs={"enable_thinking": case.thinking},
    )


def _prompt(tokenizer: Any, thinking: bool) -> list[int]:
    primer = "<think>\n" if thinking else "<think>\n\n</think>\n\n"
    text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" + primer
    return tokenizer.encode(text, add_special_tokens=False)


def expected(case: Case, tokenizer: Any) -> Reading:
    ids = tokenizer.encode(case.text, add_special_tokens=False)
    got = qe.parse_completion(
        ids, tools=case.tools, thinking=case.thinking, encoder=TokenizerMarkers(tokenizer)
    )
    # The same output read as text gives the same result (no marker is spelled in text here).
    assert got == qe.parse_completion(case.text, tools=case.tools, thinking=case.thinking)
    calls = [(c.name, dict(c.arguments)) for c in got.tool_calls]
    return got.reasoning, got.content, calls


def batch(parser_cls: Any, tokenizer: Any, case: Case) -> Reading:
    request = _request(case)
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs=request.chat_template_kwargs)
    ids = tokenizer.encode(case.text, add_special_tokens=False)
    reasoning, content, calls = parser.parse(
        case.text, request, enable_auto_tools=True, model_output_token_ids=ids
    )
    return reasoning, content or None, [(c.name, json.loads(c.arguments)) for c in calls or []]


def stream(parser_cls: Any, tokenizer: Any, case: Case, sizes: list[int] | None = None) -> Reading:
    """parse_delta as vLLM's stream processor calls it; checks the tool-call delta shape."""
    request = _request(case)
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs=request.chat_template_kwargs)
    ids = tokenizer.encode(case.text, add_special_tokens=False)
    prompt = _prompt(tokenizer, case.thinking)
    chunks = id_chunks(ids, sizes)
    reasoning, content = [], []
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for n, chunk in enumerate(chunks):
        delta = parser.parse_delta(
            tokenizer.decode(chunk),
            chunk,
            request,
            prompt_token_ids=prompt,
            finished=n == len(chunks) - 1,
        )
        if delta is None:
            continue
        reasoning.append(delta.reasoning or "")
        content.append(delta.content or "")
        for piece in delta.tool_calls:
            function = piece.function
            if piece.index not in names:
                # The name comes first, with the call's id, before any argument text.
                assert function is not None and function.name and piece.id
                assert not function.arguments
                names[piece.index] = function.name
                arguments[piece.index] = ""
            else:
                assert function is not None and function.name is None
                arguments[piece.index] += function.arguments or ""
    calls = [(names[i], json.loads(arguments[i])) for i in sorted(names)]
    return "".join(reasoning) or None, "".join(content) or None, calls


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_batch_and_streaming_equal_parse_completion(
    parser_cls: Any, tokenizer: Any, case: Case
) -> None:
    want = expected(case, tokenizer)
    assert batch(parser_cls, tokenizer, case) == want
    assert stream(parser_cls, tokenizer, case) == want
    rng = random.Random(case.name)
    for _ in range(3):
        assert stream(parser_cls, tokenizer, case, cuts(400, rng)) == want


@pytest.mark.parametrize("case", REALISTIC, ids=lambda c: c.name)
def test_legacy_bookkeeping(tokenizer: Any, case: Case) -> None:
    """The two parsers driven directly with vLLM's previous/current/delta text and IDs, the
    reasoning parser until it confirms the end, then the tool parser, then finish_streaming."""
    from qwen_encode.integrations.vllm import QwenEncodeReasoningParser, QwenEncodeToolParser

    request = _request(case)
    reasoner = QwenEncodeReasoningParser(
        tokenizer, chat_template_kwargs=request.chat_template_kwargs
    )
    tools = QwenEncodeToolParser(tokenizer, request.tools)
    prompt = _prompt(tokenizer, case.thinking)
    in_reasoning = not reasoner.is_reasoning_end(prompt)
    if in_reasoning:
        reasoner.adjust_initial_state_from_prompt(prompt)
    ids = tokenizer.encode(case.text, add_special_tokens=False)
    previous_text, previous_ids = "", []
    deltas = []
    for token in ids:
        delta_text = tokenizer.decode([token])
        current_text, current_ids = previous_text + delta_text, [*previous_ids, token]
        args = (previous_text, current_text, delta_text, previous_ids, current_ids, [token])
        if in_reasoning:
            deltas.append(reasoner.extract_reasoning_streaming(*args))
            if reasoner.has_engine_confirmed_reasoning_end():
                in_reasoning = False
                content_ids = reasoner.extract_content_ids([token])
                text = tokenizer.decode(content_ids)
                deltas.append(
                    tools.extract_tool_calls_streaming(
                        "", text, text, [], content_ids, content_ids, request
                    )
                )
        else:
            deltas.append(tools.extract_tool_calls_streaming(*args, request))
        previous_text, previous_ids = current_text, current_ids
    deltas += [reasoner.finish_streaming() if in_reasoning else None, tools.finish_streaming()]
    reasoning = "".join(d.reasoning or "" for d in deltas if d) or None
    content = "".join(d.content or "" for d in deltas if d) or None
    pieces = [p for d in deltas if d for p in d.tool_calls]
    calls = [
        (p.function.name, json.loads(q.function.arguments))
        for p, q in zip(pieces[::2], pieces[1::2], strict=True)
    ]
    want = expected(case, tokenizer)
    if case.name == "call without </think>":
        # Only the reasoning parser saw this output, and vLLM gives it no tools: the value is
        # typed by the schema-free rule, which reads "Oslo" the same.
        assert calls == want[2]
    assert (reasoning, content, calls) == want


def test_unterminated_call_is_content_with_one_warning(
    parser_cls: Any, tokenizer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    case = UNTERMINATED
    raw = case.text.split("</think>", 1)[1].strip()
    for run in (batch, stream):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="qwen_encode.integrations"):
            reasoning, content, calls = run(parser_cls, tokenizer, case)
        assert (reasoning, content, calls) == ("Checking.", raw, [])
        warnings = [r for r in caplog.records if r.name == "qwen_encode.integrations"]
        assert len(warnings) == 1 and "not dispatched" in warnings[0].getMessage()


def test_malformed_call_is_content_not_an_exception(parser_cls: Any, tokenizer: Any) -> None:
    # A closed span with no <function=…>: ParseError in the library, content here.
    case = Case("malformed", "</think>\n\nOk <tool_call>\nnothing\n</tool_call> end", True, TOOLS)
    with pytest.raises(qe.ParseError):
        qe.parse_completion(case.text, tools=TOOLS)
    want = (None, "Ok <tool_call>\nnothing\n</tool_call> end", [])
    assert batch(parser_cls, tokenizer, case) == want
    assert stream(parser_cls, tokenizer, case) == want
    assert stream(parser_cls, tokenizer, case, [3] * 30) == want


def test_malformed_call_without_think_close(parser_cls: Any, tokenizer: Any) -> None:
    """The call that ends reasoning (no </think>) does not parse: only the reasoning parser
    saw it while streaming, and it must not raise into vLLM either."""
    text = "Let me look.\n<tool_call>\n<function=get_weather>\nno parameter\n</tool_call>"
    case = Case("malformed, no </think>", text, True, TOOLS)
    want = ("Let me look.", text.split("\n", 1)[1], [])
    assert batch(parser_cls, tokenizer, case) == want
    assert stream(parser_cls, tokenizer, case) == want


def test_the_issue_example(parser_cls: Any, tokenizer: Any) -> None:
    """vLLM's own parsers give '\\n\\nChecking.\\n\\n' one token at a time."""
    case = REALISTIC[2]
    assert stream(parser_cls, tokenizer, case)[1] == "Checking."


def test_reasoning_state_from_the_prompt(tokenizer: Any) -> None:
    from qwen_encode.integrations.vllm import QwenEncodeReasoningParser

    parser = QwenEncodeReasoningParser(tokenizer)
    assert not parser.is_reasoning_end(_prompt(tokenizer, thinking=True))
    assert parser.is_reasoning_end(_prompt(tokenizer, thinking=False))
    output = tokenizer.encode("a b\n</think>\n\nc", add_special_tokens=False)
    assert parser.is_reasoning_end(output)
    assert tokenizer.decode(parser.extract_content_ids(output)) == "\n\nc"
    think_close = tokenizer.get_vocab()["</think>"]
    assert parser.count_reasoning_tokens(output) == output.index(think_close)


def test_structural_tag_model_kept(parser_cls: Any) -> None:
    assert parser_cls.tool_parser_cls.structural_tag_model == "qwen_3_coder"


def test_registration_from_the_entry_point() -> None:
    """A fresh interpreter: vLLM's plugin loader alone puts qwen_encode in both registries,
    the API server's argument validator accepts it, and --tool-parser-plugin works too."""
    script = """
from argparse import Namespace
from types import SimpleNamespace
from vllm.plugins import load_general_plugins
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager
from vllm.entrypoints.common.cli_args import validate_api_server_args
assert "qwen_encode" not in ToolParserManager.list_registered()
load_general_plugins()
assert "qwen_encode" in ToolParserManager.list_registered()
assert "qwen_encode" in ReasoningParserManager.list_registered()
def args(name):
    return Namespace(enable_auto_tool_choice=True, tool_call_parser=name,
                     structured_outputs_config=SimpleNamespace(reasoning_parser=name))
validate_api_server_args(args("qwen_encode"))
try:
    validate_api_server_args(args("qwen_encode_typo"))
except KeyError:
    print("ok")
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


def test_tool_parser_plugin_flag() -> None:
    script = """
from vllm.entrypoints.common.cli_args import init_parser_plugin
from vllm.tool_parsers import ToolParserManager
from argparse import Namespace
assert "qwen_encode" not in ToolParserManager.list_registered()
init_parser_plugin(Namespace(tool_parser_plugin="qwen_encode.integrations.vllm",
                             reasoning_parser_plugin=None))
print(ToolParserManager.get_tool_parser("qwen_encode").__name__)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("QwenEncodeToolParser")


def test_unknown_tokenizer_fails_at_startup(parser_cls: Any) -> None:
    from vllm.parser.parser_manager import ParserManager

    class NoMarkers:
        def get_vocab(self) -> dict[str, int]:
            return {"a": 0}

    with pytest.raises(TypeError, match=r"Qwen 3\.8"):
        ParserManager.validate_parser_tokenizer(
            parser_cls, NoMarkers(), "qwen_encode", "qwen_encode", "m"
        )


def test_missing_engine_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    from qwen_encode.integrations import _common

    monkeypatch.setattr(metadata, "version", lambda name: "0.32.1")
    with pytest.raises(ImportError, match=r"vllm>=0\.33, found 0\.32\.1"):
        _common.require_engine("vllm", (0, 33))
