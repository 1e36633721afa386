"""qwen-encode as vLLM's chat renderer: ``vllm serve MODEL --tokenizer-mode qwen_encode``.

vLLM 0.33 picks a renderer by tokenizer mode (``vllm.renderers.registry.RENDERER_REGISTRY``).
The ``vllm.general_plugins`` entry point registers the mode ``qwen_encode`` there by class path,
so this module is imported only when the mode is chosen, and the tokenizer registry maps the
same mode to vLLM's own cached Hugging Face tokenizer, which decoding and the parsers use.

The renderer builds each chat request's prompt with ``format_prompt`` and encodes it with
``Encoder.encode``: the IDs ``apply_chat_template`` gives for every request the template renders,
except that caller text (messages, tool results, tool schemas) never becomes a control token
(the safety model, ``markers_in_text="literal"``; a server may choose another mode with the
environment variable ``QWEN_ENCODE_MARKERS_IN_TEXT``). Images and videos stay the template's
placeholders (``<|vision_start|><|image_pad|><|vision_end|>``), which vLLM's multimodal
processor expands as it does for the stock renderer. One ``Encoder`` serves every request, so
its run cache keeps the IDs of text seen before: a conversation that grows by one turn encodes
that turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..chat_request import request_options
from ..encoder import Encoder
from ..errors import QwenEncodeError
from ..protocol import format_prompt
from ._common import markers_in_text_mode, require_engine

require_engine("vllm", (0, 33))

from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.renderers.base import BaseRenderer  # noqa: E402
from vllm.renderers.chat_utils import (  # noqa: E402
    ChatCompletionMessageParam,
    ConversationMessage,
    parse_chat_messages,
    parse_chat_messages_async,
)
from vllm.renderers.inputs import DictPrompt  # noqa: E402
from vllm.renderers.inputs.preprocess import parse_dec_only_prompt  # noqa: E402
from vllm.renderers.params import ChatParams  # noqa: E402
from vllm.tokenizers.hf import HfTokenizer  # noqa: E402
from vllm.utils.async_utils import make_async  # noqa: E402

__all__ = ["VLLM_TEMPLATE_KEYS", "QwenEncodeRenderer", "request_from_params"]

#: The template arguments vLLM 0.33 adds to every chat request itself (``build_chat_params``,
#: ``OnlineRenderer.preprocess_chat``, ``ChatParams.get_apply_chat_template_kwargs``, and the
#: ``--cohere-format`` default that ``resolve_default_chat_template_kwargs`` puts into every
#: server's defaults). They are read or ignored here; any other key comes from the client or
#: ``--default-chat-template-kwargs`` and must be one the Qwen 3.8 template reads.
VLLM_TEMPLATE_KEYS = frozenset(
    {
        "cohere_format",
        "add_generation_prompt",
        "continue_final_message",
        "documents",
        "reasoning_effort",
        "tools",
        "tokenize",
        "chat_template",
        "return_dict",
    }
)


def request_from_params(
    conversation: list[Any], chat_template_kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The chat request, in the shape ``request_options`` reads, of what vLLM hands a renderer:
    the parsed conversation and ``ChatParams.get_apply_chat_template_kwargs()``
    (the client's ``chat_template_kwargs`` merged with vLLM's own keys, the reasoning effort
    already rewritten by ``--reasoning-effort-map`` and ``"none"`` already turned into
    ``enable_thinking: false``)."""
    kwargs = dict(chat_template_kwargs)
    if kwargs.get("chat_template") is not None:
        raise VLLMValidationError(
            "chat_template cannot be used with --tokenizer-mode qwen_encode: the Qwen 3.8 "
            "template is rendered natively",
            parameter="chat_template",
        )
    if kwargs.get("documents") is not None:
        raise VLLMValidationError(
            "documents: the Qwen 3.8 chat template does not read documents",
            parameter="documents",
        )
    request = {
        "messages": conversation,
        "tools": kwargs.get("tools"),
        "add_generation_prompt": kwargs.get("add_generation_prompt"),
        "continue_final_message": kwargs.get("continue_final_message"),
    }
    template = {k: v for k, v in kwargs.items() if k not in VLLM_TEMPLATE_KEYS}
    # vLLM's own "none" rewrite already happened (enable_thinking false); the effort itself is
    # then ignored by the template, as by format_prompt.
    if kwargs.get("reasoning_effort") is not None:
        template["reasoning_effort"] = kwargs["reasoning_effort"]
    request["chat_template_kwargs"] = template
    return request


class QwenEncodeRenderer(BaseRenderer[HfTokenizer]):
    """Renders chat requests with qwen-encode; everything after the prompt IDs (tokenization
    parameters, multimodal processing, truncation) is vLLM's own ``BaseRenderer``."""

    def __init__(self, config: Any, tokenizer: HfTokenizer | None) -> None:
        super().__init__(config, tokenizer)
        model_config = config.model_config
        self.encoder = Encoder.from_pretrained(
            str(model_config.tokenizer),
            revision=model_config.tokenizer_revision,
            markers_in_text=markers_in_text_mode(),
        )
        self._render_async = make_async(self._render, executor=self._executor)

    def warmup(self, chat_params: ChatParams) -> None:
        # Called once at startup with the server's --chat-template and
        # --default-chat-template-kwargs: a bad flag stops the server here, naming it, instead of
        # failing every request.
        if chat_params.chat_template is not None:
            raise ValueError(
                "--chat-template cannot be used with --tokenizer-mode qwen_encode: qwen-encode "
                "renders the Qwen 3.8 template natively"
            )
        try:
            request_options(request_from_params([], chat_params.get_apply_chat_template_kwargs()))
        except QwenEncodeError as error:
            raise ValueError(f"--default-chat-template-kwargs: {error}") from None
        super().warmup(chat_params)

    def _render(self, conversation: list[Any], params: ChatParams) -> list[int]:
        kwargs = params.get_apply_chat_template_kwargs()
        try:
            options = request_options(request_from_params(conversation, kwargs))
            prompt = format_prompt(**options)
            ids: list[int] = self.encoder.encode(prompt).input_ids.tolist()
        except QwenEncodeError as error:
            # A request the template would refuse, or caller text refused under "reject": a 400
            # with the reason (which names the message and field), as vLLM answers template errors.
            raise VLLMValidationError(str(error)) from None
        return ids

    def _prompt(
        self, conversation: list[Any], ids: list[int], mm_data: Any, mm_uuids: Any
    ) -> tuple[list[ConversationMessage], DictPrompt]:
        prompt = parse_dec_only_prompt(ids)
        if mm_data is not None:
            prompt["multi_modal_data"] = mm_data
        if mm_uuids is not None:
            prompt["multi_modal_uuids"] = mm_uuids
        return conversation, prompt

    def render_messages(
        self,
        messages: list[ChatCompletionMessageParam],
        params: ChatParams,
    ) -> tuple[list[ConversationMessage], DictPrompt]:
        # "openai" keeps each image or video as its own content part, which the protocol renders
        # as the template's placeholder.
        conversation, mm_data, mm_uuids = parse_chat_messages(
            messages,
            self.model_config,
            content_format="openai",
            media_io_kwargs=params.media_io_kwargs,
            mm_processor_kwargs=params.mm_processor_kwargs,
        )
        ids = self._render(list(conversation), params)
        return self._prompt(list(conversation), ids, mm_data, mm_uuids)

    async def render_messages_async(
        self,
        messages: list[ChatCompletionMessageParam],
        params: ChatParams,
    ) -> tuple[list[ConversationMessage], DictPrompt]:
        conversation, mm_data, mm_uuids = await parse_chat_messages_async(
            messages,
            self.model_config,
            content_format="openai",
            media_io_kwargs=params.media_io_kwargs,
            mm_processor_kwargs=params.mm_processor_kwargs,
        )
        ids = await self._render_async(list(conversation), params)
        return self._prompt(list(conversation), ids, mm_data, mm_uuids)
