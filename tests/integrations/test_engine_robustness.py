"""The engines' parser classes driven with hostile output and requests, as the engines drive them:
any model text (marker soup, half calls, calls whose values fit no schema) in any chunking, and
any tool schema and chat_template_kwargs a request passes the engine's own validation with. Each
call returns a value or raises a ``QwenEncodeError``, never anything else (the contract of
tests/test_robustness.py, which drives the engine-free core of these classes in the normal run).

Each half skips where its engine is missing; ``scripts/integration_env.sh vllm`` and ``sglang``
run this file in their venvs."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.test_robustness import JSON_LIKE, MODEL_TEXT, REQUEST_TOOLS, _holds

from .cases import id_chunks

ENGINE_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
CHUNKS = st.lists(st.integers(min_value=1, max_value=7), max_size=40)
KWARGS = st.none() | st.dictionaries(
    st.sampled_from(["enable_thinking", "reasoning_effort", "preserve_thinking"]), JSON_LIKE
)


def _needs(engine: str) -> None:
    if importlib.util.find_spec(engine) is None:
        pytest.skip(
            f"{engine} is not installed: scripts/integration_env.sh {engine} builds a venv with it"
        )


# -- vLLM ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_tokenizer(qwen38_dir: Path) -> Any:
    _needs("vllm")
    from vllm.tokenizers import get_tokenizer

    return get_tokenizer(str(qwen38_dir))


def _vllm_request(tools: Any, kwargs: Any) -> Any:
    """vLLM's request, or None where vLLM's own validation refuses these tools or kwargs (the
    client gets vLLM's 400; qwen-encode never sees them)."""
    import pydantic
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.exceptions import VLLMValidationError

    try:
        return ChatCompletionRequest(
            model="qwen3.8",
            messages=[{"role": "user", "content": "hi"}],
            tools=tools,
            chat_template_kwargs=kwargs,
        )
    # VLLMValidationError (e.g. `tools=[]`) is vLLM's own 400 and no ValueError.
    except (pydantic.ValidationError, ValueError, VLLMValidationError):
        return None


@ENGINE_SETTINGS
@given(st.lists(MODEL_TEXT, max_size=4).map("".join), REQUEST_TOOLS, KWARGS, CHUNKS)
def test_vllm_parsers(vllm_tokenizer, text, tools, kwargs, sizes) -> None:
    from vllm.parser.parser_manager import ParserManager

    from qwen_encode.integrations.vllm import QwenEncodeReasoningParser, QwenEncodeToolParser

    request = _vllm_request(tools, kwargs)
    assume(request is not None)
    tokenizer = vllm_tokenizer
    # vLLM's output text is decoded from sampled IDs, so it never holds a lone surrogate (the
    # tokenizer refuses to encode one): such a character arrives as U+FFFD, here too.
    text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    ids = tokenizer.encode(text, add_special_tokens=False)
    parser_cls = ParserManager.get_parser(
        tool_parser_name="qwen_encode",
        reasoning_parser_name="qwen_encode",
        enable_auto_tools=True,
        tokenizer=tokenizer,
    )
    batch = parser_cls(tokenizer, request.tools, chat_template_kwargs=request.chat_template_kwargs)
    _holds(lambda: batch.parse(text, request, enable_auto_tools=True, model_output_token_ids=ids))
    streaming = parser_cls(
        tokenizer, request.tools, chat_template_kwargs=request.chat_template_kwargs
    )
    chunks = id_chunks(ids, sizes)
    for n, chunk in enumerate(chunks):
        last = n == len(chunks) - 1
        _holds(
            lambda c=chunk, f=last: streaming.parse_delta(
                tokenizer.decode(c), c, request, prompt_token_ids=[], finished=f
            )
        )
    # The classes vLLM composes, driven directly.
    reasoner = _holds(
        lambda: QwenEncodeReasoningParser(
            tokenizer, chat_template_kwargs=request.chat_template_kwargs
        )
    )
    caller = _holds(lambda: QwenEncodeToolParser(tokenizer, request.tools))
    if isinstance(reasoner, QwenEncodeReasoningParser):
        _holds(lambda: reasoner.extract_reasoning(text, request))
        for chunk in chunks:
            _holds(lambda c=chunk: reasoner.extract_reasoning_streaming("", "", "", [], [], c))
        _holds(reasoner.finish_streaming)
    if isinstance(caller, QwenEncodeToolParser):
        _holds(lambda: caller.extract_tool_calls(text, request))
        for chunk in chunks:
            _holds(
                lambda c=chunk: caller.extract_tool_calls_streaming("", "", "", [], [], c, request)
            )
        _holds(caller.finish_streaming)


# -- SGLang ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sglang_plugin() -> None:
    _needs("sglang")
    from qwen_encode.integrations.sglang import register

    register()


def _sglang_tools(tools: Any) -> list[Any] | None:
    """SGLang's Tool objects, or None where SGLang's own validation refuses them."""
    import pydantic
    from sglang.srt.entrypoints.openai.protocol import Tool

    try:
        return [Tool(**t) for t in tools or []]
    except (pydantic.ValidationError, ValueError, TypeError):
        return None


@ENGINE_SETTINGS
@given(
    st.lists(MODEL_TEXT, max_size=6),
    REQUEST_TOOLS,
    st.booleans(),
    st.booleans(),
)
def test_sglang_parsers(sglang_plugin, pieces, tools, thinking, stream_reasoning) -> None:
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    objects = _sglang_tools(tools)
    assume(objects is not None)
    text = "".join(pieces)

    def parsers() -> tuple[Any, Any]:
        reasoner = ReasoningParser(
            "qwen_encode",
            stream_reasoning=stream_reasoning,
            force_reasoning=thinking,
            tool_call_parser_active=bool(objects),
        )
        return reasoner, FunctionCallParser(objects, "qwen_encode") if objects else None

    reasoner, caller = parsers()
    answer = _holds(lambda: reasoner.parse_non_stream(text))
    if caller is not None and isinstance(answer, tuple):
        _holds(lambda: caller.parse_non_stream(answer[1] or ""))
    reasoner, caller = parsers()
    for piece in pieces:
        out = _holds(lambda p=piece: reasoner.parse_stream_chunk(p))
        if caller is not None and isinstance(out, tuple) and out[1]:
            _holds(lambda t=out[1]: caller.parse_stream_chunk(t))
    _holds(reasoner.parse_stream_end)
    if caller is not None:
        _holds(caller.parse_stream_end)
