"""Where each token of an encoded prompt comes from: ``Encoding.provenance`` codes.

A prompt's segments say who wrote each piece (a marker or text of the protocol, or a caller's
field of some message); byte-level BPE tokens spell the UTF-8 bytes of the text in order and
every marker is one token, so each token belongs to the segment its first byte is in. Most of
the template's joins fall where a pre-token ends (after ``\\n``, before trimmed text); the one
that does not is a name after ``<function=`` / ``<parameter=`` (``=get`` is one pre-token: an
optional non-letter before letters), whose first token counts as protocol.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Final

import numpy as np

from . import markers as mk
from .protocol import Segment, Special

__all__ = [
    "ASSISTANT",
    "PRIMER",
    "PROTOCOL",
    "PROVENANCE_NAMES",
    "SAMPLED",
    "SYNTHESIZED",
    "SYSTEM",
    "TOOL",
    "UNRECORDED",
    "USER",
    "segment_provenance",
    "token_provenance",
]

#: A marker, or text the template writes (role names, ``\n`` between turns, the tools preamble).
PROTOCOL: Final = 0
#: The caller's system message and the tools' JSON signatures.
SYSTEM: Final = 1
#: A user message's content.
USER: Final = 2
#: A tool result's content (inside ``<tool_response>`` … ``</tool_response>``).
TOOL: Final = 3
#: An assistant message given as history (rendered by the template, not sampled).
ASSISTANT: Final = 4
#: The generation prompt: ``<|im_start|>assistant\\n<think>\\n`` (thinking off:
#: ``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n``).
PRIMER: Final = 5
#: Token IDs the engine sampled, kept verbatim.
SAMPLED: Final = 6
#: Closers the session wrote for a turn that stopped without ``<|im_end|>``: never trained.
SYNTHESIZED: Final = 7
#: An ``Encoding`` built by hand, whose origin is not known.
UNRECORDED: Final = -1

PROVENANCE_NAMES: Final[dict[int, str]] = {
    PROTOCOL: "protocol",
    SYSTEM: "system",
    USER: "user",
    TOOL: "tool",
    ASSISTANT: "assistant",
    PRIMER: "primer",
    SAMPLED: "sampled",
    SYNTHESIZED: "synthesized",
    UNRECORDED: "unrecorded",
}

_ROLE_CODES: Final = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}


def segment_provenance(segments: Sequence[Segment]) -> list[int]:
    """One code per segment. The role of a turn is the protocol text right after its
    ``<|im_start|>``; a caller's text inside ``<tool_response>`` is a tool result; the trailing
    assistant turn the protocol opens for no message (turn -1) is the generation primer."""
    codes: list[int] = []
    role_code = PROTOCOL
    expect_role = in_tool = primer = False
    for segment in segments:
        if isinstance(segment, Special):
            marker = segment.marker
            if marker == mk.TURN_OPEN:
                expect_role, in_tool = True, False
            elif marker == mk.TOOL_RESPONSE_OPEN:
                in_tool = True
            elif marker == mk.TOOL_RESPONSE_CLOSE:
                in_tool = False
            codes.append(PRIMER if primer else PROTOCOL)
            continue
        if expect_role:
            expect_role = False
            role = segment.text.split("\n", 1)[0]
            role_code = _ROLE_CODES.get(role, PROTOCOL)
            if role == "assistant" and segment.turn < 0 and segment.field is None:
                primer = True
                if codes:
                    codes[-1] = PRIMER  # its <|im_start|>
        if segment.field is None:
            codes.append(PRIMER if primer else PROTOCOL)
        else:
            codes.append(TOOL if in_tool else role_code)
    return codes


def token_provenance(
    segments: Sequence[Segment], ids: np.ndarray, token_bytes: np.ndarray | None, nfc: bool
) -> np.ndarray:
    """Each token's code (int8). ``token_bytes`` is each ID's length in bytes (None: the
    vocabulary is not byte-level); ``nfc`` whether the vocabulary normalises text to NFC first.
    Where the bytes do not add up (a vocabulary this argument does not hold for) every token is
    ``UNRECORDED`` rather than guessed."""
    out = np.full(len(ids), UNRECORDED, dtype=np.int8)
    if token_bytes is None or not segments:
        return out
    sizes = []
    for segment in segments:
        if isinstance(segment, Special):
            sizes.append(len(segment.marker.encode()))
            continue
        text = segment.text
        if nfc and not text.isascii():
            text = unicodedata.normalize("NFC", text)
        sizes.append(len(text.encode("utf-8", "surrogatepass")))
    ends = np.cumsum(sizes)
    lengths = token_bytes[ids]
    if int(lengths.sum()) != int(ends[-1]):
        return out
    begins = np.cumsum(lengths) - lengths
    owner = np.searchsorted(ends, begins, side="right")
    codes: np.ndarray = np.asarray(segment_provenance(segments), dtype=np.int8)[owner]
    return codes
