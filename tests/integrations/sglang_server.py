"""SGLang's chat serving layer in process, on CPU: its ``OpenAIServingChat`` over a stand-in
tokenizer manager (as SGLang's own unit tests build it) whose scheduler side replays token IDs.
The tokenizer is transformers' for the real vocabulary, as SGLang loads it; the template manager
carries what SGLang infers from the official template."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import Mock


class _Bag(SimpleNamespace):
    """A published config namespace: unset fields read as None."""

    def __getattr__(self, name: str) -> Any:
        return None


class Replay:
    """The scheduler's side of ``TokenizerManager.generate_request``: token IDs replayed as
    SGLang's output dicts (cumulative text and IDs, one token per step when streaming)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []

    def _output(self, n: int, last: bool) -> dict[str, Any]:
        ids = self.ids[:n]
        finish = {"type": "stop", "matched": ids[-1]} if last else None
        return {
            "text": self.tokenizer.decode(ids, skip_special_tokens=True),
            "output_ids": ids,
            "index": 0,
            "meta_info": {
                "id": "chatcmpl-test",
                "prompt_tokens": 5,
                "completion_tokens": n,
                "cached_tokens": 0,
                "finish_reason": finish,
                "weight_version": "default",
            },
        }

    def generate(self, adapted: Any, raw: Any = None) -> Any:
        async def outputs() -> Any:
            steps = range(1, len(self.ids) + 1) if adapted.stream else [len(self.ids)]
            for n in steps:
                yield self._output(n, n == len(self.ids))

        return outputs()


def make_serving(
    checkpoint: Path, tokenizer: Any, parser: str, patch: Callable[..., Any] = setattr
) -> Any:
    """SGLang's ``OpenAIServingChat`` over a stand-in tokenizer manager, as SGLang's own unit
    tests build it, with ``--tool-call-parser parser``. ``patch`` sets the published server
    configuration SGLang reads (pytest's ``monkeypatch.setattr`` in tests)."""
    from sglang.srt.entrypoints.openai import serving_chat

    patch(serving_chat, "get_serving", lambda: _Bag())
    patch(serving_chat, "get_model", lambda: _Bag())
    replay = Replay(tokenizer)
    manager = Mock()
    manager.model_config = Mock(is_multimodal=False)
    manager.model_config.hf_config = Mock(architectures=["Qwen3_5ForCausalLM"])
    manager.tokenizer = tokenizer
    manager.model_path = str(checkpoint)
    flags = {"tool_call_parser": parser, "reasoning_parser": "qwen_encode"}
    manager.config_value = flags.get
    manager.request_logger = Mock(log_requests=False)
    manager.generate_request = replay.generate
    from sglang.srt.parser.template_manager import detect_reasoning_pattern

    force, toggle = detect_reasoning_pattern(tokenizer.chat_template)
    # The checkpoint's Jinja template through transformers (no compiled Python rendition).
    templates = Mock(
        chat_template_name=None,
        jinja_template_content_format="string",
        completion_template_name=None,
        python_chat_template=None,
        # What SGLang's TemplateManager infers from the official template (no forced reasoning,
        # the enable_thinking toggle, on by default).
        force_reasoning=force,
        reasoning_config=toggle,
    )
    serving = serving_chat.OpenAIServingChat(manager, templates)
    serving.replay = replay
    return serving
