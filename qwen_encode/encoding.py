"""``Encoding``: one encoded prompt's arrays (input_ids, assistant mask, turn index), and the
per-token provenance, sampled mask and log-probabilities computed on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from ._accelerator import runs_compiled, slot_members
from .prompt import _made, _segment_of
from .provenance import SAMPLED, UNRECORDED, token_provenance

__all__ = ["Encoding"]

# Compiled: a C helper declared in _capi.pxd (a cimport, resolved at build time).
_COMPILED: Final = runs_compiled("encoding")
if _COMPILED:
    from cython.cimports.qwen_encode._capi import qe_set_slots


@dataclass(frozen=True, eq=False, init=False)
class Encoding:
    """One encoded prompt. Every array has one entry per token.

    ``assistant_mask`` marks the tokens a fine-tuning run trains on: each assistant turn's body
    (reasoning span, content, tool calls) and its closing ``<|im_end|>``; never the
    ``<|im_start|>assistant\\n`` header nor the generation primer. In a rollout (a
    ``ChatSession`` fed with ``append_sampled``) a sampled turn trains exactly its sampled tokens.
    ``turn_index`` is the index of the message each token renders (-1: protocol text of no
    message, such as the primer).

    ``provenance`` (int8) says who wrote each token: the codes of ``qwen_encode.provenance``
    (0 protocol, 1 system, 2 user, 3 tool result, 4 assistant history, 5 primer, 6 sampled,
    7 synthesized; -1 when built by hand). ``sampled_mask`` marks the tokens an engine sampled,
    ``logprobs`` (float32) their log-probabilities as the engine reported them, NaN elsewhere.
    These three are computed on first use: a batch job that never reads them never pays for
    them (attributing every token to its segment cost 60% of a cached batch encode).
    """

    # Slots, not a dict: a batch job keeps an Encoding per row alive, and each object the
    # garbage collector tracks is walked by every full collection. With a dict and a tuple for
    # the source, an encoding was three tracked objects; now it is one (the source's tuples hold
    # only untracked tuples and are dropped from tracking at their first collection).
    __slots__ = (
        "_encoder",
        "_logprobs",
        "_provenance",
        "_sampled_mask",
        "_source",
        "assistant_mask",
        "input_ids",
        "turn_index",
    )

    input_ids: np.ndarray
    assistant_mask: np.ndarray
    turn_index: np.ndarray
    if TYPE_CHECKING:  # not fields: computed on first use, or what they are computed from
        _provenance: np.ndarray | None
        _sampled_mask: np.ndarray | None
        _logprobs: np.ndarray | None
        _source: tuple[Any, Any] | None
        _encoder: Any

    def __init__(
        self,
        input_ids: np.ndarray,
        assistant_mask: np.ndarray,
        turn_index: np.ndarray,
        provenance: np.ndarray | None = None,
        sampled_mask: np.ndarray | None = None,
        logprobs: np.ndarray | None = None,
    ) -> None:
        # Frozen: set through the slots' own descriptors. _source is (segments, compact
        # segments) and _encoder the encoder, to attribute the tokens from when provenance is
        # first asked for (``_attach_source``). A prompt from format_prompt has only the compact
        # form (tuples): its segments (one object each) are built only if provenance is read,
        # which a batch job never does. Not the prompt itself: its joined runs would stay alive
        # with every encoding.
        _SET_IDS(self, input_ids)
        _SET_MASK(self, assistant_mask)
        _SET_TURN(self, turn_index)
        _SET_PROVENANCE(self, provenance)
        _SET_SAMPLED(self, sampled_mask)
        _SET_LOGPROBS(self, logprobs)
        _SET_SOURCE(self, None)
        _SET_ENCODER(self, None)

    @property
    def provenance(self) -> np.ndarray:
        codes: np.ndarray | None = self._provenance
        if codes is None:
            source = self._source
            if source is None:
                codes = np.full(len(self.input_ids), UNRECORDED, dtype=np.int8)
            else:
                segments, segs = source
                encoder = self._encoder
                codes = token_provenance(
                    tuple(map(_segment_of, _made(segs))) if segments is None else segments,
                    self.input_ids,
                    encoder._token_bytes,
                    nfc=encoder._tokenizer.normalizer is not None,
                )
            _SET_PROVENANCE(self, codes)
            _SET_SOURCE(self, None)
            _SET_ENCODER(self, None)
        return codes

    @property
    def sampled_mask(self) -> np.ndarray:
        mask: np.ndarray | None = self._sampled_mask
        if mask is None:
            mask = self.provenance == SAMPLED
            _SET_SAMPLED(self, mask)
        return mask

    @property
    def logprobs(self) -> np.ndarray:
        values: np.ndarray | None = self._logprobs
        if values is None:
            values = np.full(len(self.input_ids), np.nan, dtype=np.float32)
            _SET_LOGPROBS(self, values)
        return values

    def __getstate__(self) -> dict[str, Any]:
        # A pickle (to a worker, into a cache) carries the arrays, not the encoder.
        return {
            "input_ids": self.input_ids,
            "assistant_mask": self.assistant_mask,
            "turn_index": self.turn_index,
            "_provenance": self.provenance,
            "_sampled_mask": self._sampled_mask,
            "_logprobs": self._logprobs,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        Encoding.__init__(
            self,
            state["input_ids"],
            state["assistant_mask"],
            state["turn_index"],
            state.get("_provenance"),
            state.get("_sampled_mask"),
            state.get("_logprobs"),
        )

    def __len__(self) -> int:
        return len(self.input_ids)


# The slots' descriptors: how a frozen instance sets its own fields.
_SET_IDS = Encoding.__dict__["input_ids"].__set__
_SET_MASK = Encoding.__dict__["assistant_mask"].__set__
_SET_TURN = Encoding.__dict__["turn_index"].__set__
_SET_PROVENANCE = Encoding.__dict__["_provenance"].__set__
_SET_SAMPLED = Encoding.__dict__["_sampled_mask"].__set__
_SET_LOGPROBS = Encoding.__dict__["_logprobs"].__set__
_SET_SOURCE = Encoding.__dict__["_source"].__set__
_SET_ENCODER = Encoding.__dict__["_encoder"].__set__


# The fields ``_encoded`` sets directly when compiled, in the order it gives their values (what
# ``qe_set_slots`` takes: __slots__ members of the class).
_FIELDS = slot_members(
    Encoding,
    (
        "input_ids",
        "assistant_mask",
        "turn_index",
        "_provenance",
        "_sampled_mask",
        "_logprobs",
        "_source",
        "_encoder",
    ),
)
_NEW = object.__new__


def _encoded(
    input_ids: np.ndarray,
    assistant_mask: np.ndarray,
    turn_index: np.ndarray,
    source: tuple[Any, Any],
    encoder: Any,
) -> Encoding:
    """``Encoding(input_ids, assistant_mask, turn_index)`` with its source attached
    (``_attach_source``): how the encoder makes one per row. Compiled, the fields are set
    directly (``qe_set_slots``): through ``__init__`` and the descriptors' bound ``__set__``, an
    encoding cost 0.45 µs, a tenth of assembling a short row."""
    if not _COMPILED:
        encoding: Encoding = _NEW(Encoding)
        Encoding.__init__(encoding, input_ids, assistant_mask, turn_index)
        _SET_SOURCE(encoding, source)
        _SET_ENCODER(encoding, encoder)
        return encoding
    encoding = _NEW(Encoding)
    values = (input_ids, assistant_mask, turn_index, None, None, None, source, encoder)
    qe_set_slots(encoding, _FIELDS, values)
    return encoding


def _attach_source(encoding: Encoding, segments: Any, segs: Any, encoder: Any) -> None:
    """What ``encoding.provenance`` is computed from on first use: the prompt's segments (None
    when it has only the compact form), its compact segments (or what makes them: ``_LATER``),
    and the encoder."""
    _SET_SOURCE(encoding, (segments, segs))
    _SET_ENCODER(encoding, encoder)
