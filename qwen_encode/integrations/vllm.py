"""qwen-encode's parser as vLLM's ``qwen_encode`` tool parser and reasoning parser, and the
registration of its renderer.

Turned on by ``vllm serve … --tool-call-parser qwen_encode --reasoning-parser qwen_encode
--enable-auto-tool-choice`` once ``qwen-encode[vllm]`` is installed (the ``vllm.general_plugins``
entry point imports this module), or explicitly with ``--tool-parser-plugin
qwen_encode.integrations.vllm``. ``--tokenizer-mode qwen_encode`` renders the prompts too
(``vllm_renderer``).

vLLM 0.33 composes the two (``ParserManager.get_parser``) into one parser per request: the
reasoning parser reads the output's token IDs until reasoning ends, the tool parser reads the
rest. Both are "engine based" in vLLM's sense: each keeps one ``StreamParser`` over the token
IDs it is given (markers count only at their atomic IDs), vLLM hands them only the new IDs of
each step and calls ``finish_streaming`` at the end, where held-back text and the calls are
released. Non-streaming, vLLM's parser interface passes text, so markers are matched in text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..conversation import ToolCall as QeToolCall
from ..errors import ParseError
from ..parser import ContentDelta, ReasoningDelta, StreamParser, ToolCallEvent
from . import PARSER_NAME
from ._common import (
    AnswerStream,
    Delta,
    TokenizerMarkers,
    Trimmed,
    answer_of,
    arguments_json,
    chat_thinking,
    hold_split,
    logger,
    require_engine,
    split_reasoning_text,
    tool_dicts,
)

require_engine("vllm", (0, 33))

from vllm.entrypoints.generate.base.protocol import (  # noqa: E402
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.reasoning import ReasoningParser, ReasoningParserManager  # noqa: E402
from vllm.renderers.chat_utils import make_tool_call_id  # noqa: E402
from vllm.renderers.registry import RENDERER_REGISTRY  # noqa: E402
from vllm.tokenizers.registry import TokenizerRegistry  # noqa: E402
from vllm.tool_parsers.abstract_tool_parser import ToolParser, ToolParserManager  # noqa: E402

__all__ = ["QwenEncodeReasoningParser", "QwenEncodeToolParser", "register"]


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Importing this module registered both parsers;
    this adds the tokenizer mode ``qwen_encode``: vLLM's own Hugging Face tokenizer for token
    operations, and qwen-encode's renderer for chat prompts, named by class path so that it is
    imported only when the mode is chosen."""
    TokenizerRegistry.register(PARSER_NAME, "vllm.tokenizers.hf", "CachedHfTokenizer")
    RENDERER_REGISTRY.register(
        PARSER_NAME, "qwen_encode.integrations.vllm_renderer", "QwenEncodeRenderer"
    )


def _tool_call_deltas(index: int, call: QeToolCall, arguments: str) -> list[DeltaToolCall]:
    # The engines' streaming shape: the name (with the call's id) first, then the arguments
    # JSON; a call is only released once its span closed, so its arguments are one increment.
    return [
        DeltaToolCall(
            index=index,
            id=make_tool_call_id(),
            type="function",
            function=DeltaFunctionCall(name=call.name, arguments=""),
        ),
        DeltaToolCall(index=index, function=DeltaFunctionCall(arguments=arguments)),
    ]


def _delta_message(
    *, reasoning: str, content: str, tool_calls: list[DeltaToolCall]
) -> DeltaMessage | None:
    """One stream delta, or None when it says nothing. Every field is given to the constructor:
    vLLM serializes stream chunks with ``exclude_unset``, and a list filled in place after
    construction was never "set", so the client received ``finish_reason: "tool_calls"`` and no
    calls."""
    if not (reasoning or content or tool_calls):
        return None
    fields: dict[str, Any] = {}
    if reasoning:
        fields["reasoning"] = reasoning
    if content:
        fields["content"] = content
    if tool_calls:
        fields["tool_calls"] = tool_calls
    return DeltaMessage(**fields)


def _markers(tokenizer: Any) -> TokenizerMarkers:
    markers = TokenizerMarkers(tokenizer)
    if markers.think_close is None or markers.tool_call_open is None:
        # ParserManager.validate_parser_tokenizer turns this into a startup error.
        raise ValueError(
            "the tokenizer has no atomic <think>/</think>/<tool_call> tokens: not a Qwen 3.8 "
            "vocabulary"
        )
    return markers


@ReasoningParserManager.register_module(PARSER_NAME)
class QwenEncodeReasoningParser(ReasoningParser):
    """Reasoning ends at the first ``</think>`` ID (or, with none, at a call: known at the end).

    The switch to the tool parser is confirmed only once the answer shows a non-whitespace
    character: the whitespace the template writes after ``</think>`` is trimmed away either
    way, and this keeps it from reaching a client that runs no tool parser.
    """

    engine_based_streaming = True

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        self._markers = _markers(tokenizer)
        self._thinking = chat_thinking(kwargs.get("chat_template_kwargs"))
        self._parser: StreamParser | None = None
        self._reasoning = Trimmed()
        self._phase = "reasoning"  # -> "after" (</think> seen) -> "answer" (confirmed)
        self._fed: list[int] = []  # the IDs read as reasoning, for a call that does not parse
        self._said = ""  # the reasoning events' text, untrimmed

    @property
    def reasoning_start_str(self) -> str:
        return "<think>"

    @property
    def reasoning_end_str(self) -> str:
        return "</think>"

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        # The primer decides for a prompt: "<think>\n" leaves it open, "<think>\n\n</think>\n\n"
        # (enable_thinking false) closes it; the last of the two markers tells which.
        markers = self._markers
        for token in reversed(input_ids):
            if token == markers.think_close:
                return True
            if token == markers.think_open:
                return False
        return False

    def adjust_initial_state_from_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        # Called when the prompt does not end reasoning: it is open if a <think> is last.
        self._thinking = self._markers.think_open in prompt_token_ids

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        ids = list(input_ids)
        close = self._markers.think_close
        if close in ids:
            return ids[ids.index(close) + 1 :]
        if self._phase == "answer" or not self._thinking:
            return ids
        return []

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        ids = list(token_ids)
        close = self._markers.think_close
        if close in ids:
            return ids.index(close)
        return len(ids) if self._thinking else 0

    def extract_reasoning(self, model_output: str, request: Any) -> tuple[str | None, str | None]:
        kwargs = getattr(request, "chat_template_kwargs", None)
        thinking = chat_thinking(kwargs) if kwargs is not None else self._thinking
        reasoning, rest = split_reasoning_text(model_output, thinking)
        return reasoning, rest.strip() or None

    def extract_reasoning_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> DeltaMessage | None:
        ids = list(delta_token_ids)
        for i, token in enumerate(ids):
            if token in self._markers.end_ids:
                ids = ids[:i]
                break
        if self._phase == "reasoning":
            if not self._thinking:
                # The prompt opened no reasoning: the tool parser reads all of the output (and
                # a leading <think> span in it, as parse_completion(thinking=False) does).
                self._phase = "answer"
                return None
            if self._parser is None:
                self._parser = StreamParser(thinking=True, encoder=self._markers)
            close = self._markers.think_close
            cut = ids.index(close) + 1 if close in ids else len(ids)
            self._fed += ids[:cut]
            text = "".join(
                e.text for e in self._parser.feed(ids[:cut]) if isinstance(e, ReasoningDelta)
            )
            self._said += text
            reasoning = self._reasoning.feed(text)
            if cut <= len(ids) and close in ids:
                self._phase = "after"
                ids = ids[cut:]
            else:
                ids = []
            if self._phase == "after":
                self._confirm(ids)
            return DeltaMessage(reasoning=reasoning) if reasoning else None
        if self._phase == "after":
            self._confirm(ids)
        return None

    def _confirm(self, ids: list[int]) -> None:
        if ids and not self._markers.decode(ids).isspace():
            self._phase = "answer"

    def has_engine_confirmed_reasoning_end(self) -> bool:
        return self._phase == "answer"

    def finish_streaming(self) -> DeltaMessage | None:
        """End of output while still in reasoning (vLLM also calls it at the switch, when it
        has nothing to give): cut-off reasoning, or a call that ended reasoning without
        ``</think>`` (typed without schemas: the reasoning parser is not given the tools)."""
        if self._phase != "reasoning" or self._parser is None:
            return None
        self._phase = "done"
        reasoning, content = [], Trimmed()
        answer, calls = [], []
        try:
            events = self._parser.flush()
        except ParseError as error:
            # The call that ended reasoning does not parse: the answer is its raw text.
            logger.warning("tool call markup did not parse (%s); it is returned as content", error)
            raw = self._markers.decode(self._fed)
            start = hold_split(raw, self._said.strip() or None)
            rest = raw[start:].strip() if start is not None else ""
            return DeltaMessage(content=rest) if rest else None
        for event in events:
            if isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
            elif isinstance(event, ContentDelta):
                answer.append(content.feed(event.text))
            elif isinstance(event, ToolCallEvent):
                call = event.call
                calls += _tool_call_deltas(event.index, call, arguments_json(call))
        unterminated = self._parser.finish().unterminated
        if unterminated is not None:
            answer.append(content.feed(unterminated))
        return _delta_message(
            reasoning=self._reasoning.feed("".join(reasoning)),
            content="".join(answer),
            tool_calls=calls,
        )


@ToolParserManager.register_module(PARSER_NAME)
class QwenEncodeToolParser(ToolParser):
    """Content and calls after reasoning; values typed by the request's tool schemas."""

    # vLLM's strict tool calling (xgrammar's structural tag) describes the same call format.
    structural_tag_model = "qwen_3_coder"
    engine_based_streaming = True

    def __init__(self, tokenizer: Any, tools: Any = None) -> None:
        super().__init__(tokenizer, tools)
        self._markers = _markers(tokenizer)
        self._stream: AnswerStream | None = None

    def _tools(self, request: Any) -> list[dict[str, Any]] | None:
        return tool_dicts(getattr(request, "tools", None) or self.tools)

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        content, calls = answer_of(model_output, self._tools(request))
        return ExtractedToolCallInformation(
            tools_called=bool(calls),
            tool_calls=[
                ToolCall(function=FunctionCall(name=call.name, arguments=arguments_json(call)))
                for call in calls
            ],
            content=content,
        )

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: Any,
    ) -> DeltaMessage | None:
        if self._stream is None:
            self._stream = AnswerStream(tools=self._tools(request), encoder=self._markers)
        return self._message(self._stream.feed(list(delta_token_ids)))

    def finish_streaming(self) -> DeltaMessage | None:
        if self._stream is None:
            return None
        return self._message(self._stream.finish())

    def _message(self, delta: Delta) -> DeltaMessage | None:
        calls: list[DeltaToolCall] = []
        for index, call in delta.calls:
            arguments = arguments_json(call)
            calls += _tool_call_deltas(index, call, arguments)
            # What the serving layer reads back at the end (get_remaining_unstreamed_args).
            self.current_tool_id = index
            self.prev_tool_call_arr.append({"name": call.name, "arguments": dict(call.arguments)})
            self.streamed_args_for_tool.append(arguments)
        return _delta_message(reasoning=delta.reasoning, content=delta.content, tool_calls=calls)
