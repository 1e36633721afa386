"""The protocol's verbatim texts: the reasoning efforts and their system instructions, and the
tools block with its one-JSON-object-per-line tool signatures (template lines 46-63, 70).
``protocol`` renders them into the system turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any

from .conversation import load_json
from .errors import PromptError, shown
from .json_text import MAX_JSON_DEPTH, json_depth_problem
from .prompt import _MARKER_SPLIT

__all__ = [
    "ReasoningEffort",
    "reasoning_effort_from_scale",
    "reasoning_instruction",
    "serialize_tool_signatures",
    "tools_section",
]


# --------------------------------------------------------------------------------------------
# Verbatim protocol texts (template lines 46-63, 70)


class ReasoningEffort(str, Enum):
    """The template's reasoning efforts. MEDIUM adds no instruction; XHIGH is the default."""

    LOW = "low"
    MEDIUM = "medium"
    XHIGH = "xhigh"

    @classmethod
    def parse(cls, value: ReasoningEffort | str) -> ReasoningEffort:
        if isinstance(value, ReasoningEffort):
            return value
        if isinstance(value, str):
            for effort in cls:
                if effort.value == value:
                    return effort
        # Template: raise_exception('Unexpected reasoning effort ' ~ reasoning_effort ~ '. …')
        raise PromptError(
            f"Unexpected reasoning effort {value if isinstance(value, str) else shown(value)}. "
            "Supported types are xhigh (default), medium, and low.",
            field="reasoning_effort",
        )


_REASONING_INSTRUCTIONS: Mapping[ReasoningEffort, str] = {
    ReasoningEffort.XHIGH: (
        "Reasoning effort is set to xhigh. Please think carefully through the task, validate key "
        "assumptions, consider plausible alternatives, and prioritize correctness, consistency, "
        "and clarity in the final answer."
    ),
    ReasoningEffort.MEDIUM: "",
    ReasoningEffort.LOW: (
        "Reasoning effort is set to low. Keep your thinking brief and focused, moving directly to "
        "the conclusion without unnecessary elaboration."
    ),
}


def reasoning_instruction(effort: ReasoningEffort | str) -> str:
    """The template's system instruction for ``effort``, verbatim; "" for MEDIUM."""
    return _REASONING_INSTRUCTIONS[ReasoningEffort.parse(effort)]


def reasoning_effort_from_scale(level: int) -> ReasoningEffort:
    """Map a host's 1..5 effort scale: 1 -> LOW, 2..4 -> MEDIUM, 5 -> XHIGH."""
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 5:
        raise PromptError(
            f"level must be an integer from 1 to 5, got {shown(level)}", field="reasoning_effort"
        )
    if level == 1:
        return ReasoningEffort.LOW
    return ReasoningEffort.XHIGH if level == 5 else ReasoningEffort.MEDIUM


_TOOLS_HEAD = "# Tools\n\nYou have access to the following functions:\n\n<tools>"
_TOOLS_TAIL = (
    "\n</tools>"
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
    "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...>"
    "</function> block must be nested within <tool_call></tool_call> XML tags\n- Required "
    "parameters MUST be specified\n- You may provide optional reasoning for your function call in "
    "natural language BEFORE the function call, but NOT after\n- If there is no function call "
    "available, answer the question like normal with your current knowledge and do not tell the "
    "user about function calls\n</IMPORTANT>"
)


def _protocol_parts(text: str) -> tuple[str, ...]:
    """``text`` split at the markers it spells: text, marker, text, ... (the tools block's
    example and reminder spell ``<tool_call>``, and tokenizing the template's output turns them
    into the atomic IDs the model was trained on)."""
    return tuple(_MARKER_SPLIT.split(text))


_TOOLS_HEAD_PARTS = _protocol_parts(_TOOLS_HEAD)
_TOOLS_TAIL_PARTS = _protocol_parts(_TOOLS_TAIL)


# json.dumps with any non-default option builds a JSONEncoder per call (a third of its time on a
# small tool); this one is built once (JSONEncoder keeps no state between calls).
_JSON_DUMPS = json.JSONEncoder(ensure_ascii=False).encode
# And JSONEncoder.encode still builds its C encoder per call (a third of the rest): the tools,
# encoded for every row that carries them, go through one built once, with the same options
# and no circular-reference markers, so it holds no state and threads share it. A tool that
# contains itself then ends in RecursionError, which _tool_signature_lines treats as any
# failure of this first attempt: the error is named by the checks and the encoder above.
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # CPython's _json accelerator
_TOOL_CHUNKS: Callable[[Any, int], Sequence[str]] | None = (
    None
    if _C_ENCODER is None
    else _C_ENCODER(
        None,  # markers
        json.JSONEncoder().default,  # raises TypeError, as json.dumps does
        json.encoder.encode_basestring,  # ensure_ascii=False
        None,  # indent
        ": ",
        ", ",
        False,  # sort_keys
        False,  # skipkeys
        True,  # allow_nan
    )
)


def _encode_tool(tool: Any) -> str:
    """``json.dumps(tool, ensure_ascii=False)``; on a tool that contains itself,
    RecursionError."""
    if _TOOL_CHUNKS is None:
        return _JSON_DUMPS(tool)
    return "".join(_TOOL_CHUNKS(tool, 0))


def _tojson(value: Any, field: str) -> str:
    """The template's ``tojson``: transformers overrides Jinja's filter with
    ``json.dumps(x, ensure_ascii=False)`` (default separators, key order kept)."""
    try:
        return _JSON_DUMPS(value)
    except (TypeError, ValueError) as error:
        # transformers would render a "<set>"-style placeholder; a value that is not JSON is a bug.
        # (ValueError: also an integer past Python's 4,300-digit conversion limit.)
        raise PromptError(f"is not JSON-serialisable: {error}", field=field) from None
    except RecursionError:  # a self-containing value; deep ones are refused before this
        raise PromptError("nests too deeply to serialise", field=field) from None


def _tool_signature_lines(tools: Any) -> list[str]:
    if isinstance(tools, str):
        tools = load_json(tools, "tools")
    if type(tools) is not list and (isinstance(tools, Mapping) or not isinstance(tools, Sequence)):
        # The template skips a mapping (`tools is not mapping`): the tools would vanish unseen.
        raise PromptError(f"tools must be a list, got {type(tools).__name__}", field="tools")
    lines = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if isinstance(tool, str):
            tool = load_json(tool, where)
        if type(tool) is not dict and not isinstance(tool, Mapping):
            raise PromptError(
                f"a tool must be a JSON object, got {type(tool).__name__}", field=where
            )
        try:
            line: str | None = _encode_tool(tool)
        except (TypeError, ValueError, RecursionError):
            line = None  # named below: too deep first, as a walk before the dump would say
        # Each object or array of the tool writes one "{" or "[": a text with no more of them
        # than the limit cannot nest past it, so only such a text needs the walk in Python
        # (a tenth of rendering a conversation with tools, done for every tool of every one).
        if (line is None or line.count("{") + line.count("[") > MAX_JSON_DEPTH) and (
            problem := json_depth_problem(tool)
        ):
            raise PromptError(problem, field=where)
        lines.append(_tojson(tool, where) if line is None else line)
    return lines


def serialize_tool_signatures(tools: Sequence[Mapping[str, Any] | str] | str) -> str:
    """One JSON object per line, as the template's ``tool | tojson`` writes each tool.

    ``tools`` is a list of tool objects (or JSON texts of objects), or the JSON text of such a
    list. Unparseable JSON raises ``PromptError`` naming the tool rather than dropping it.
    """
    return "\n".join(_tool_signature_lines(tools))


def tools_section(signatures: str) -> str:
    """The whole tools block of the system turn, verbatim (without the system turn's markers)."""
    if not isinstance(signatures, str):
        raise PromptError(
            f"expected the text of serialize_tool_signatures, got {type(signatures).__name__}",
            field="signatures",
        )
    if not signatures:
        raise PromptError(
            "the template renders a tools block only for a non-empty tools list", field="tools"
        )
    return f"{_TOOLS_HEAD}\n{signatures}{_TOOLS_TAIL}"
