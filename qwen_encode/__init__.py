"""qwen-encode: exact, injection-safe Qwen 3.8 prompt encoding and completion parsing."""

from . import markers
from .conversation import ImageBlock, TextBlock, ToolCall, Turn, VideoBlock, turns_from_messages
from .encoder import Encoder, Encoding, MarkersInText
from .errors import (
    CheckpointError,
    MarkerInTextError,
    ParseError,
    PromptError,
    QwenEncodeError,
    VocabularyError,
)
from .protocol import (
    Prompt,
    ReasoningEffort,
    Segment,
    Special,
    Text,
    format_prompt,
    format_tool_call,
    format_turn,
    reasoning_effort_from_scale,
    reasoning_instruction,
    serialize_tool_signatures,
    tools_section,
)

__all__ = [
    "CheckpointError",
    "Encoder",
    "Encoding",
    "ImageBlock",
    "MarkerInTextError",
    "MarkersInText",
    "ParseError",
    "Prompt",
    "PromptError",
    "QwenEncodeError",
    "ReasoningEffort",
    "Segment",
    "Special",
    "Text",
    "TextBlock",
    "ToolCall",
    "Turn",
    "VideoBlock",
    "VocabularyError",
    "format_prompt",
    "format_tool_call",
    "format_turn",
    "markers",
    "reasoning_effort_from_scale",
    "reasoning_instruction",
    "serialize_tool_signatures",
    "tools_section",
    "turns_from_messages",
]
