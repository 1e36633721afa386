"""qwen-encode's parser as SGLang's ``qwen_encode`` tool-call parser and reasoning parser.

Turned on by ``python -m sglang.launch_server … --tool-call-parser qwen_encode
--reasoning-parser qwen_encode`` once ``qwen-encode[sglang]`` is installed: SGLang calls every
``sglang.srt.plugins`` entry point at startup, and ``register`` adds both names to
``FunctionCallParser.ToolCallParserEnum`` and ``ReasoningParser.DetectorMap`` (which the CLI
choices are read from).

The same parser name makes qwen-encode render the prompts (``sglang_renderer``): SGLang picks a
model's native chat encoding by its tool-call parser for Kimi K3 and DeepSeek, and ``register``
adds ``qwen_encode`` to that choice.

SGLang hands its detectors text, so markers are matched in text here (any spelling); the
reasoning detector splits at the first ``</think>`` and passes the answer on trimmed, the tool
detector reads it with one ``StreamParser`` per request, typed by the request's tools.
"""

from __future__ import annotations

from typing import Any

from . import PARSER_NAME
from ._common import (
    AnswerStream,
    Delta,
    ReasoningText,
    answer_of,
    arguments_json,
    require_engine,
    split_reasoning_text,
    tool_dicts,
)

require_engine("sglang", (0, 5, 23))

from sglang.srt.function_call.base_format_detector import BaseFormatDetector  # noqa: E402
from sglang.srt.function_call.core_types import (  # noqa: E402
    StreamingParseResult,
    StructureInfo,
    ToolCallItem,
    _GetInfoFunc,
)
from sglang.srt.function_call.function_call_parser import FunctionCallParser  # noqa: E402
from sglang.srt.parser import reasoning_parser as _reasoning  # noqa: E402

__all__ = ["QwenEncodeDetector", "QwenEncodeReasoningDetector", "register"]


class QwenEncodeDetector(BaseFormatDetector):
    """Content and calls after reasoning, in SGLang's detector shape."""

    def __init__(self) -> None:
        super().__init__()
        self.bot_token = "<tool_call>"
        self.eot_token = "</tool_call>"
        self._stream: AnswerStream | None = None

    def has_tool_call(self, text: str) -> bool:
        return self.bot_token in text

    def detect_and_parse(self, text: str, tools: Any) -> StreamingParseResult:
        content, calls = answer_of(text, tool_dicts(tools))
        return StreamingParseResult(
            normal_text=content or "",
            calls=[
                ToolCallItem(tool_index=i, name=call.name, parameters=arguments_json(call))
                for i, call in enumerate(calls)
            ],
        )

    def parse_streaming_increment(self, new_text: str, tools: Any) -> StreamingParseResult:
        if self._stream is None:
            self._stream = AnswerStream(tools=tool_dicts(tools))
        return self._result(self._stream.feed(new_text))

    def finish(self, tools: Any) -> StreamingParseResult:
        if self._stream is None:
            return StreamingParseResult()
        return self._result(self._stream.finish())

    def _result(self, delta: Delta) -> StreamingParseResult:
        calls: list[ToolCallItem] = []
        for index, call in delta.calls:
            arguments = arguments_json(call)
            # Name first, then the arguments JSON, as SGLang's own detectors stream a call.
            calls.append(ToolCallItem(tool_index=index, name=call.name, parameters=""))
            calls.append(ToolCallItem(tool_index=index, parameters=arguments))
            self.current_tool_id = index
            self.prev_tool_call_arr.append({"name": call.name, "arguments": dict(call.arguments)})
            self.streamed_args_for_tool.append(arguments)
        # A leading <think> span in the answer (only when no reasoning parser ran) is text here.
        return StreamingParseResult(normal_text=delta.reasoning + delta.content, calls=calls)

    def supports_structural_tag(self) -> bool:
        return True

    def structure_info(self) -> _GetInfoFunc:
        return lambda name: StructureInfo(
            begin=f"<tool_call>\n<function={name}>\n",
            end="\n</function>\n</tool_call>",
            trigger="<tool_call>",
        )

    def get_structural_tag_name(self) -> str:
        # xgrammar's builtin for this call format: strict tool calling keeps working.
        return "qwen_3_coder"


class QwenEncodeReasoningDetector(_reasoning.BaseReasoningFormatDetector):
    """Reasoning until the first ``</think>``; the answer after it, trimmed, as normal text."""

    def __init__(
        self,
        stream_reasoning: bool = True,
        force_reasoning: bool = False,
        continue_final_message: bool = False,
        previous_content: str = "",
        force_nonempty_content: bool = False,
        tool_call_parser_active: bool = False,
    ) -> None:
        super().__init__(
            "<think>",
            "</think>",
            force_reasoning=force_reasoning,
            stream_reasoning=stream_reasoning,
            tool_start_token="<tool_call>",
            continue_final_message=continue_final_message,
            previous_content=previous_content,
            thinks_internally=True,
            # SGLang reads enable_thinking from chat_template_kwargs into force_reasoning.
            reasoning_default="enable_thinking",
            force_nonempty_content=force_nonempty_content,
        )
        self._thinking = bool(self._in_reasoning)
        self._split = ReasoningText(self._thinking)
        self._held_reasoning = ""  # stream_reasoning=False: all of it at once

    def detect_and_parse(self, text: str) -> _reasoning.StreamingParseResult:
        reasoning, rest = split_reasoning_text(text, self._thinking)
        return _reasoning.StreamingParseResult(normal_text=rest.strip(), reasoning_text=reasoning)

    def parse_streaming_increment(self, new_text: str) -> _reasoning.StreamingParseResult:
        return self._result(*self._split.feed(new_text))

    def finish(self) -> _reasoning.StreamingParseResult:
        result = self._result(*self._split.finish())
        if self._held_reasoning:
            result.reasoning_text = self._held_reasoning + result.reasoning_text
            self._held_reasoning = ""
        return result

    def _result(self, reasoning: str, answer: str) -> _reasoning.StreamingParseResult:
        if not self.stream_reasoning and not answer:
            self._held_reasoning += reasoning
            reasoning = ""
        elif not self.stream_reasoning:
            reasoning, self._held_reasoning = self._held_reasoning + reasoning, ""
        return _reasoning.StreamingParseResult(normal_text=answer, reasoning_text=reasoning)


#: Every SGLang name outside its documented plugin surface that ``register`` touches, for
#: checking them again when the pinned SGLang version moves.
SGLANG_PRIVATE_HOOKS = (
    # the native chat encodings' builder table (no public registration function)
    "sglang.srt.entrypoints.openai.chat_encoding_adapters._BUILDERS",
    # the fixed chooser of a model's chat encoding, wrapped to choose ours by the parser name
    "sglang.srt.entrypoints.openai.chat_encoding.resolve_chat_encoding_spec",
)


def _build_encoding(context: Any) -> Any:
    # Imported only when a server chose the encoding (it loads the checkpoint's vocabulary).
    from .sglang_renderer import QwenEncodeChatEncodingAdapter

    if context.tokenizer is None:
        return None  # --skip-tokenizer-init: the server encodes no chat prompts
    return QwenEncodeChatEncodingAdapter(
        model_path=context.model_path,
        revision=context.revision,
        default_chat_template_kwargs=context.default_chat_template_kwargs,
    )


def _register_encoding() -> None:
    """``--tool-call-parser qwen_encode`` also renders the prompts, as SGLang chooses the Kimi
    K3 and DeepSeek encodings by their parser names."""
    from sglang.srt.entrypoints.openai import chat_encoding, chat_encoding_adapters

    chat_encoding_adapters._BUILDERS[PARSER_NAME] = {"builtin": _build_encoding}
    chooser = chat_encoding.resolve_chat_encoding_spec
    if getattr(chooser, "__module__", None) == __name__:
        return  # plugins may be loaded more than once in a process: this one is already ours

    def resolve_chat_encoding_spec(
        *, hf_config: Any, tokenizer: Any, tool_call_parser: str | None = None
    ) -> str | None:
        if tool_call_parser == PARSER_NAME:
            return PARSER_NAME
        spec: str | None = chooser(
            hf_config=hf_config, tokenizer=tokenizer, tool_call_parser=tool_call_parser
        )
        return spec

    chat_encoding.resolve_chat_encoding_spec = resolve_chat_encoding_spec


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: both parsers under ``qwen_encode``, and the chat
    encoding they choose."""
    FunctionCallParser.ToolCallParserEnum[PARSER_NAME] = QwenEncodeDetector
    _reasoning.ReasoningParser.DetectorMap[PARSER_NAME] = QwenEncodeReasoningDetector
    _register_encoding()


register()
