"""An OpenAI-style chat request body -> the arguments of ``format_prompt``, read as vLLM reads it.

One mapping for every caller that takes a request body: the ``qwen-encode`` command line
(``encode``, ``render``), the training-data functions of ``qwen_encode.data``, and the vLLM and
SGLang renderers of ``qwen_encode.integrations``. The shape is vLLM's tokenize chat request:
``messages``, ``tools``, ``add_generation_prompt``, ``continue_final_message``,
``chat_template_kwargs`` and OpenAI's top-level ``reasoning_effort``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import PromptError, shown

__all__ = [
    "IGNORED_REQUEST_FIELDS",
    "REQUEST_FIELDS",
    "TEMPLATE_KWARGS",
    "json_type",
    "request_options",
]

# The chat_template_kwargs the Qwen 3.8 template reads. Anything else is refused per row: a typo
# such as "enable_thinkng" would otherwise be ignored and silently render another prompt.
TEMPLATE_KWARGS = ("enable_thinking", "reasoning_effort", "preserve_thinking", "add_vision_id")

# Fields of vLLM's tokenize chat request (plus OpenAI's top-level reasoning_effort) that are acted
# on, and those accepted that cannot change the IDs: `model` names a served model (the vocabulary
# comes from the encoder), Qwen's tokenizer adds no BOS whatever add_special_tokens says, and
# mm_processor_kwargs configure the image processor, which runs after tokenization.
REQUEST_FIELDS = frozenset(
    {
        "messages",
        "tools",
        "add_generation_prompt",
        "continue_final_message",
        "chat_template_kwargs",
        "chat_template",
        "reasoning_effort",
        "return_token_strs",
    }
)
IGNORED_REQUEST_FIELDS = frozenset({"model", "add_special_tokens", "mm_processor_kwargs"})


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for messages ("a JSON array")."""
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _unknown_kwargs_message(unknown: Sequence[str]) -> str:
    parts = []
    for key in unknown:
        if key in ("add_generation_prompt", "continue_final_message", "tools"):
            parts.append(f"{key!r} (a top-level request field, not a template option)")
            continue
        close = difflib.get_close_matches(key, TEMPLATE_KWARGS, n=1)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (
        f"unknown chat_template_kwargs {', '.join(parts)}; the Qwen 3.8 template reads "
        f"{', '.join(TEMPLATE_KWARGS)}"
    )


def _check_shape(value: Any, ignored: Callable[[str], None] | None) -> None:
    """The request itself: an object with a ``messages`` array, ``tools`` an array or null, no
    template override; ``ignored`` is told each field that cannot change the prompt."""
    if not isinstance(value, dict):
        raise PromptError(f"a request must be a JSON object, got a JSON {json_type(value)}")
    if "messages" not in value:
        raise PromptError('missing "messages" (the conversation to render)')
    for name, allowed in (("messages", (list,)), ("tools", (list, type(None)))):
        if name in value and not isinstance(value[name], allowed):
            expected = "a JSON array" + (" or null" if type(None) in allowed else "")
            raise PromptError(f'"{name}" must be {expected}, got a JSON {json_type(value[name])}')
    if ignored is not None:
        for key in value:
            if key not in REQUEST_FIELDS and key not in IGNORED_REQUEST_FIELDS:
                ignored(key)
    if value.get("chat_template") is not None:
        raise PromptError(
            "chat_template overrides are not supported: qwen-encode renders the Qwen 3.8 "
            "template, natively"
        )


def _template_kwargs(value: dict[str, Any]) -> dict[str, Any]:
    """``chat_template_kwargs``, checked, without the keys set to null."""
    kwargs = value.get("chat_template_kwargs")
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise PromptError(
            f"chat_template_kwargs must be a JSON object, got a JSON {json_type(kwargs)}"
        )
    unknown = [key for key in kwargs if key not in TEMPLATE_KWARGS]
    if unknown:
        raise PromptError(_unknown_kwargs_message(unknown))
    # As transformers does for message fields, null means absent (the template's default). Arrow
    # also writes null for every kwarg a row lacks when the column is a struct.
    return {key: v for key, v in kwargs.items() if v is not None}


def _apply_reasoning_effort(options: dict[str, Any], top_effort: Any) -> None:
    """Fold the top-level ``reasoning_effort`` into the template options, as vLLM does."""
    if top_effort == "none":
        # OpenAI's "no reasoning": vLLM sets enable_thinking false unless the request set it.
        if options.get("enable_thinking") is True:
            raise PromptError(
                'reasoning_effort "none" conflicts with chat_template_kwargs.enable_thinking true'
            )
        options["enable_thinking"] = False
    elif top_effort is not None:
        inner = options.get("reasoning_effort")
        if inner is not None and inner != top_effort:
            raise PromptError(
                f"reasoning_effort {shown(top_effort)} (top level) conflicts with "
                f"chat_template_kwargs.reasoning_effort {shown(inner)}"
            )
        options["reasoning_effort"] = top_effort


def request_options(
    value: Any,
    ignored: Callable[[str], None] | None = None,
    *,
    reasoning_effort_map: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``format_prompt`` arguments of one chat request, read as vLLM reads it (the
    ``qwen-encode encode`` shape; the data functions and the vLLM renderer use this too).

    The top-level ``reasoning_effort`` is first rewritten by ``reasoning_effort_map`` (vLLM's
    ``--reasoning-effort-map``); OpenAI's ``"none"`` turns thinking off unless
    ``chat_template_kwargs.enable_thinking`` says otherwise, as vLLM's ``build_chat_params`` does.
    Raises ``PromptError`` whose reason names the request field when the request itself has the
    wrong shape (what the command line reports as ``RequestError``); what is inside the messages
    is checked by ``format_prompt``. ``ignored`` is told each unknown field's name."""
    _check_shape(value, ignored)
    options = _template_kwargs(value)
    top_effort = value.get("reasoning_effort")
    if isinstance(top_effort, str) and reasoning_effort_map:
        top_effort = reasoning_effort_map.get(top_effort, top_effort)
    _apply_reasoning_effort(options, top_effort)
    add_generation_prompt = value.get("add_generation_prompt")
    continue_final = value.get("continue_final_message")
    if add_generation_prompt is True and continue_final is True:
        # vLLM's own check, word for word.
        raise PromptError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    return {
        "turns": value["messages"],
        "tools": value.get("tools"),
        # vLLM's default is True; format_prompt ignores it when continuing the final message.
        "add_generation_prompt": True if add_generation_prompt is None else add_generation_prompt,
        "continue_final_message": False if continue_final is None else continue_final,
        **options,
    }
