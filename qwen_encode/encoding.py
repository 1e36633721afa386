"""``Encoding``: one encoded prompt's arrays (input_ids, assistant mask, turn index), and the
per-token provenance, sampled mask and log-probabilities computed on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .prompt import _segment_of
from .provenance import SAMPLED, UNRECORDED, token_provenance

__all__ = ["Encoding"]


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

    input_ids: np.ndarray
    assistant_mask: np.ndarray
    turn_index: np.ndarray

    def __init__(
        self,
        input_ids: np.ndarray,
        assistant_mask: np.ndarray,
        turn_index: np.ndarray,
        provenance: np.ndarray | None = None,
        sampled_mask: np.ndarray | None = None,
        logprobs: np.ndarray | None = None,
    ) -> None:
        # One dict update (frozen: no __setattr__); _source is (segments, compact segments,
        # encoder) to attribute the tokens from when provenance is first asked for. A prompt
        # from format_prompt has only the compact form (tuples): its segments (one object
        # each) are built only if provenance is read, which a batch job never does. Not the
        # prompt itself: its joined runs would stay alive with every encoding.
        self.__dict__.update(
            input_ids=input_ids,
            assistant_mask=assistant_mask,
            turn_index=turn_index,
            _provenance=provenance,
            _sampled_mask=sampled_mask,
            _logprobs=logprobs,
            _source=None,
        )

    @property
    def provenance(self) -> np.ndarray:
        codes: np.ndarray | None = self.__dict__["_provenance"]
        if codes is None:
            source = self.__dict__["_source"]
            if source is None:
                codes = np.full(len(self.input_ids), UNRECORDED, dtype=np.int8)
            else:
                segments, segs, encoder = source
                codes = token_provenance(
                    tuple(map(_segment_of, segs)) if segments is None else segments,
                    self.input_ids,
                    encoder._token_bytes,
                    nfc=encoder._tokenizer.normalizer is not None,
                )
            object.__setattr__(self, "_provenance", codes)
            object.__setattr__(self, "_source", None)
        return codes

    @property
    def sampled_mask(self) -> np.ndarray:
        mask: np.ndarray | None = self.__dict__["_sampled_mask"]
        if mask is None:
            mask = self.provenance == SAMPLED
            object.__setattr__(self, "_sampled_mask", mask)
        return mask

    @property
    def logprobs(self) -> np.ndarray:
        values: np.ndarray | None = self.__dict__["_logprobs"]
        if values is None:
            values = np.full(len(self.input_ids), np.nan, dtype=np.float32)
            object.__setattr__(self, "_logprobs", values)
        return values

    def __getstate__(self) -> dict[str, Any]:
        # A pickle (to a worker, into a cache) carries the arrays, not the encoder.
        return {
            "input_ids": self.input_ids,
            "assistant_mask": self.assistant_mask,
            "turn_index": self.turn_index,
            "_provenance": self.provenance,
            "_sampled_mask": self.__dict__["_sampled_mask"],
            "_logprobs": self.__dict__["_logprobs"],
            "_source": None,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __len__(self) -> int:
        return len(self.input_ids)
