"""vLLM's own chat endpoint, in process, on CPU: its FastAPI router and ``OpenAIServingChat``
over a fake engine that records the prompt it is given and replays token IDs. Tests read what a
client receives: the HTTP body, or the SSE lines of a streamed answer.

Only the engine is fake (vLLM's ``EngineClient.generate``: prompt in, ``RequestOutput``s out);
the tokenizer, renderer, parsers, stream processor and serializer are vLLM's, with the real
Qwen 3.8 vocabulary."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock

from fastapi import FastAPI
from fastapi.testclient import TestClient
from vllm.config import MultiModalConfig
from vllm.entrypoints.openai.chat_completion.api_router import attach_router
from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
from vllm.entrypoints.openai.models.serving import BaseModelPath, OpenAIServingModels
from vllm.entrypoints.scale_out.derender.api_router import router as derender_router
from vllm.entrypoints.scale_out.derender.serving import ServingDerender
from vllm.entrypoints.serve.exception_handling.register import init_exception_handler
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.renderers.hf import HfRenderer
from vllm.renderers.online_derenderer import OnlineDerenderer
from vllm.renderers.online_renderer import OnlineRenderer
from vllm.sampling_params import RequestOutputKind
from vllm.tokenizers.registry import cached_tokenizer_from_config
from vllm.v1.engine.async_llm import AsyncLLM

MODEL = "qwen3.8"


@dataclass
class _HfConfig:
    model_type: str = "qwen3_5"


@dataclass
class ModelConfig:
    """The fields of vLLM's ``ModelConfig`` that the chat path reads (as vLLM's own
    ``test_serving_chat.py`` builds it), for a tokenizer folder."""

    model: str
    tokenizer: str
    tokenizer_mode: str = "auto"
    task = "generate"
    runner_type = "generate"
    trust_remote_code = False
    max_model_len = 262144
    revision = None
    code_revision = None
    tokenizer_revision = None
    multimodal_config = MultiModalConfig()
    hf_config = _HfConfig()
    hf_text_config = _HfConfig()
    logits_processors = None
    diff_sampling_param = None
    allowed_local_media_path = ""
    allowed_media_domains = None
    encoder_config = None
    generation_config = "auto"
    override_generation_config: dict[str, Any] = field(default_factory=dict)
    media_io_kwargs: dict[str, Any] = field(default_factory=dict)
    skip_tokenizer_init = False
    is_encoder_decoder = False
    is_multimodal_model = False
    supports_multimodal_inputs = False
    renderer_num_workers = 1
    enable_prompt_embeds = False

    max_logprobs = 20

    def get_diff_sampling_param(self) -> dict[str, Any]:
        return {}

    def try_get_generation_config(self) -> dict[str, Any]:
        # The checkpoint's generation_config.json, as vLLM reads it (its eos_token_id list).
        path = Path(self.tokenizer) / "generation_config.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    def get_vocab_size(self) -> int:
        return 248320


@dataclass
class _ParallelConfig:
    _api_process_rank: int = 0


@dataclass
class VllmConfig:
    model_config: ModelConfig
    parallel_config: _ParallelConfig = field(default_factory=_ParallelConfig)


class Replay:
    """The fake engine's output: token IDs given in deltas of the given sizes (streaming) or at
    once (non-streaming), as vLLM's engine returns them for each request's output kind."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.sizes: list[int] | None = None
        self.prompts: list[dict[str, Any]] = []

    async def generate(
        self, prompt: dict[str, Any], params: Any, request_id: str, **_: Any
    ) -> AsyncIterator[RequestOutput]:
        self.prompts.append(prompt)
        ids, prompt_ids = self.ids, list(prompt["prompt_token_ids"])
        chunks = [ids]
        if params.output_kind == RequestOutputKind.DELTA:
            chunks, at = [], 0
            for size in self.sizes or [1] * len(ids):
                if at < len(ids):
                    chunks.append(ids[at : at + size])
                    at += size
            if at < len(ids):
                chunks.append(ids[at:])
        for n, chunk in enumerate(chunks):
            last = n == len(chunks) - 1
            output = CompletionOutput(
                index=0,
                text=self.tokenizer.decode(chunk, skip_special_tokens=True),
                token_ids=list(chunk),
                cumulative_logprob=None,
                logprobs=None,
                finish_reason="stop" if last else None,
            )
            yield RequestOutput(
                request_id=request_id,
                prompt=None,
                prompt_token_ids=prompt_ids,
                prompt_logprobs=None,
                outputs=[output],
                finished=last,
            )


@dataclass
class Server:
    client: TestClient
    replay: Replay
    tokenizer: Any
    renderer: Any

    def post(self, body: dict[str, Any]) -> Any:
        # ASCII JSON, so that a lone surrogate travels as the "\ud800" escape a client sends.
        return self.client.post(
            "/v1/chat/completions",
            content=json.dumps({"model": MODEL, **body}),
            headers={"content-type": "application/json"},
        )

    def derender(self, chat_request: dict[str, Any], prompt: list[int], ids: list[int]) -> Any:
        """``/v1/chat/completions/derender``: token IDs from a token-in/token-out engine and
        the chat request they answer, in; the chat completion a client would have got, out."""
        body = {
            "generate_response": {"choices": [{"index": 0, "token_ids": ids}]},
            "chat_request": {"model": MODEL, **chat_request},
            "prompt_token_ids": prompt,
        }
        return self.client.post(
            "/v1/chat/completions/derender",
            content=json.dumps(body),
            headers={"content-type": "application/json"},
        )

    def prompt_ids(self) -> list[int]:
        return list(self.replay.prompts[-1]["prompt_token_ids"])


def attach_derender_router(app: FastAPI) -> None:
    app.include_router(derender_router)


def make_server(
    checkpoint: Path,
    *,
    renderer: str = "hf",
    parsers: bool = True,
    reasoning_effort_map: dict[str, str] | None = None,
) -> Server:
    """The chat endpoint with the stock renderer (``hf``) or qwen-encode's (``qwen_encode``)."""
    config = ModelConfig(model=str(checkpoint), tokenizer=str(checkpoint), tokenizer_mode=renderer)
    tokenizer = cached_tokenizer_from_config(config)
    if renderer == "hf":
        chosen: Any = HfRenderer(VllmConfig(config), tokenizer)
    else:
        from vllm.renderers.registry import RENDERER_REGISTRY

        chosen = RENDERER_REGISTRY.load_renderer(renderer, VllmConfig(config), tokenizer)
    engine = MagicMock(spec=AsyncLLM)
    engine.errored = False
    engine.model_config = config
    engine.input_processor = MagicMock()
    engine.renderer = chosen
    replay = Replay(tokenizer)
    engine.generate = replay.generate
    names = {"tool_parser": "qwen_encode", "reasoning_parser": "qwen_encode"} if parsers else {}
    models = OpenAIServingModels(
        engine_client=engine, base_model_paths=[BaseModelPath(name=MODEL, model_path=MODEL)]
    )
    # What vLLM's app state gives its renderer and derenderer alike.
    common: dict[str, Any] = dict(
        model_config=config,
        renderer=chosen,
        request_logger=None,
        chat_template=None,
        chat_template_content_format="auto",
        enable_auto_tools=parsers,
        **names,
    )
    online = OnlineRenderer(**common, reasoning_effort_map=reasoning_effort_map)
    serving = OpenAIServingChat(
        engine,
        models,
        response_role="assistant",
        online_renderer=online,
        request_logger=None,
        chat_template=None,
        chat_template_content_format="auto",
        enable_auto_tools=parsers,
        **names,
    )
    derenderer = OnlineDerenderer(**common)
    app = FastAPI()
    attach_router(app)
    attach_derender_router(app)
    init_exception_handler(app)  # as vLLM's api_server: VLLMValidationError is a 400
    app.state.openai_serving_chat = serving
    app.state.serving_derender = ServingDerender(models, derenderer)
    # The server's parsed flags, as the handlers read them.
    app.state.args = SimpleNamespace(log_error_stack=False, sse_keep_alive_interval=0)
    return Server(TestClient(app), replay, tokenizer, chosen)
