"""qwen-encode as SGLang's chat encoder, chosen by ``--tool-call-parser qwen_encode``.

SGLang 0.5.23 renders chat prompts with the checkpoint's Jinja template unless a native chat
encoding serves the model: ``chat_encoding.resolve_chat_encoding_spec`` names the encoding (by the
tool-call parser for Kimi K3 and DeepSeek, by architecture for others) and the builder table of
``chat_encoding_adapters`` builds its adapter, whose ``encode_messages`` returns the prompt IDs.
``qwen_encode.integrations.sglang.register`` (the ``sglang.srt.plugins`` entry point) extends both:
with ``--tool-call-parser qwen_encode`` the encoding is ``qwen_encode``, and its builder imports
this module. The private names touched are listed in ``sglang.SGLANG_PRIVATE_HOOKS``.

Each request is rendered by ``format_prompt`` and encoded by one ``Encoder`` per server (its run
cache keeps the IDs of text seen before), so caller text never becomes a control token
(``QWEN_ENCODE_MARKERS_IN_TEXT`` chooses another mode, as for vLLM). Requests with images or
videos are refused with a 400: SGLang sends a native encoding's multimodal prompt as text to its
processor, which would re-tokenize it with Jinja's reading of caller text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..chat_request import request_options
from ..encoder import Encoder
from ..errors import PromptError
from ..protocol import format_prompt
from ._common import markers_in_text_mode, require_engine

require_engine("sglang", (0, 5, 23))

__all__ = ["QwenEncodeChatEncodingAdapter", "request_from_sglang"]


def request_from_sglang(
    messages: list[dict[str, Any]],
    request: Any,
    tools: list[dict[str, Any]] | None,
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The chat request, in the shape ``request_options`` reads, of what SGLang hands a native
    encoding: the messages as its pydantic models dump them (history tool-call arguments already
    parsed), the request (its ``chat_template_kwargs`` already holding the server's defaults),
    and the tools it keeps (none for ``tool_choice="none"``). ``defaults`` is for checking
    ``--default-chat-template-kwargs`` alone, at startup."""
    kwargs = {**(defaults or {}), **(getattr(request, "chat_template_kwargs", None) or {})}
    # SGLang sets "thinking" (DeepSeek's and Kimi's switch) beside "enable_thinking" (Qwen's)
    # from the reasoning effort; alone, it is read as enable_thinking.
    thinking = kwargs.pop("thinking", None)
    if isinstance(thinking, bool) and "enable_thinking" not in kwargs:
        kwargs["enable_thinking"] = thinking
    return {
        "messages": messages,
        "tools": tools,
        "add_generation_prompt": getattr(request, "add_generation_prompt", None),
        "continue_final_message": getattr(request, "continue_final_message", None),
        "chat_template_kwargs": kwargs,
        "reasoning_effort": getattr(request, "reasoning_effort", None),
    }


def _has_media(messages: list[dict[str, Any]]) -> bool:
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(part, Mapping) and part.get("type") not in ("text", None) for part in content
        ):
            return True
    return False


class QwenEncodeChatEncodingAdapter:
    """SGLang's ``ChatEncodingAdapter`` protocol: prompt IDs for a chat request. Output is left
    to the text parsers (SGLang's ``--reasoning-parser``/``--tool-call-parser``)."""

    # No media is encoded here (refused above), and history tool-call arguments must be JSON.
    collects_openai_media = True
    strict_tool_call_arguments = True
    output = None

    def __init__(
        self,
        *,
        model_path: str,
        revision: str | None,
        default_chat_template_kwargs: Mapping[str, Any] | None,
    ) -> None:
        self.encoder = Encoder.from_pretrained(
            model_path, revision=revision, markers_in_text=markers_in_text_mode()
        )
        # A bad --default-chat-template-kwargs stops the server here, naming the flag.
        try:
            request_options(request_from_sglang([], None, None, default_chat_template_kwargs))
        except PromptError as error:
            raise ValueError(f"--default-chat-template-kwargs: {error}") from None

    def encode_messages(
        self,
        *,
        messages: list[dict[str, Any]],
        request: Any,
        tools: list[dict[str, Any]] | None,
        thinking: bool,
        image_data: list[Any],
    ) -> list[int]:
        # `thinking` is SGLang's decision from its own kwargs; the template reads
        # enable_thinking, which request_from_sglang carries.
        if _has_media(messages):
            raise PromptError(
                "images and videos are not supported by the qwen_encode chat encoding in "
                "SGLang; send input_ids to /generate instead",
                field="messages",
            )
        options = request_options(request_from_sglang(messages, request, tools))
        ids: list[int] = self.encoder.encode(format_prompt(**options)).input_ids.tolist()
        return ids
