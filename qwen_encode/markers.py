"""The Qwen 3.8 protocol's marker strings: the one source of truth for every other module.

Each constant is the exact content of an added token of the Qwen 3.8 vocabulary
(``tokenizer.json`` ids 248044-248076). The protocol layer emits them as ``Special`` segments, the
vocabulary layer checks that a checkpoint carries each of them as one atomic token, and the parser
looks for them in completions.
"""

from __future__ import annotations

from typing import Final

# Turn delimiters (template: '<|im_start|>' + role + '\n' ... '<|im_end|>' + '\n').
TURN_OPEN: Final = "<|im_start|>"
TURN_CLOSE: Final = "<|im_end|>"

# The reasoning span every assistant turn may carry, and the generation primer leaves open.
THINK_OPEN: Final = "<think>"
THINK_CLOSE: Final = "</think>"

# Tool calls written by the assistant, and tool results fed back inside a user turn.
TOOL_CALL_OPEN: Final = "<tool_call>"
TOOL_CALL_CLOSE: Final = "</tool_call>"
TOOL_RESPONSE_OPEN: Final = "<tool_response>"
TOOL_RESPONSE_CLOSE: Final = "</tool_response>"

# Vision placeholders: the template renders every image as VISION_START IMAGE_PAD VISION_END
# (VIDEO_PAD for a video); the processor later expands the pad to the real patch count.
VISION_START: Final = "<|vision_start|>"
VISION_END: Final = "<|vision_end|>"
IMAGE_PAD: Final = "<|image_pad|>"
VIDEO_PAD: Final = "<|video_pad|>"

# End of document; generation_config.json lists it beside TURN_CLOSE as a stop token.
END_OF_TEXT: Final = "<|endoftext|>"

#: Every marker the Qwen 3.8 protocol itself uses: a checkpoint must carry each as an atomic token.
PROTOCOL_MARKERS: Final[tuple[str, ...]] = (
    END_OF_TEXT,
    TURN_OPEN,
    TURN_CLOSE,
    VISION_START,
    VISION_END,
    IMAGE_PAD,
    VIDEO_PAD,
    TOOL_CALL_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_RESPONSE_OPEN,
    TOOL_RESPONSE_CLOSE,
    THINK_OPEN,
    THINK_CLOSE,
)

#: The other added tokens of the Qwen 3.8 vocabulary. The protocol never writes them, but they are
#: still control tokens: caller text that spells one must not become it (``markers_in_text``).
OTHER_ADDED_TOKENS: Final[tuple[str, ...]] = (
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_pad|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
)

#: All 33 added tokens of the Qwen 3.8 vocabulary.
ALL_ADDED_TOKENS: Final[tuple[str, ...]] = PROTOCOL_MARKERS + OTHER_ADDED_TOKENS

#: Characters a function or parameter name may not hold. The call grammar writes names raw into
#: ``<function=NAME>`` / ``<parameter=NAME>``: ``<`` and ``>`` end or open a tag, whitespace is
#: trimmed or breaks the line the tag must sit on, quotes and braces are what a template
#: placeholder (``{{ tc.name }}``) or a JSON fragment leaves behind. The renderer refuses such a
#: name and the parser never dispatches one, so every rendered call parses back to itself.
CALL_NAME_FORBIDDEN: Final = frozenset("<>{}\"'")


def call_name_problem(name: str) -> str | None:
    """Why ``name`` cannot stand as NAME in ``<function=NAME>`` or ``<parameter=NAME>``; None
    when it can."""
    if not name:
        return "is empty"
    for ch in name:
        if ch.isspace():
            return f"holds whitespace ({ch!r})"
        if ch in CALL_NAME_FORBIDDEN:
            return f"holds {ch!r}, which the call format cannot carry"
    return None
