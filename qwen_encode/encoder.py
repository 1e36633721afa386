"""Prompt -> input_ids: markers map straight to their vocabulary IDs, text is encoded with the
vocabulary's own byte-level BPE, and caller text never becomes a control token unless asked to.

Why this equals ``apply_chat_template(tokenize=True)``: tokenizers first splits its input at every
added token and then normalises, pre-tokenises and BPE-encodes each piece between them on its own.
Our ``Special`` segments are exactly those split points, and the text between two of them is
encoded as ONE piece (adjacent ``Text`` segments are joined first: encoding ``<parameter=x>\\n`` and
``\\nfoo`` apart would miss the ``\\n\\n`` merge the template's string gets).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import unicodedata
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal, TypeAlias, overload

import numpy as np
from tokenizers import Tokenizer

from . import markers as mk
from .checkpoint import TOKENIZER_JSON, CheckpointFiles, resolve_checkpoint
from .conversation import surrogate_problem
from .engines import Engine, TokenizersEngine, load_fastokens, split_flat
from .errors import (
    MarkerInTextError,
    PromptError,
    TokenIdError,
    check_token_id,
    outside_vocabulary,
    shown,
)
from .prompt import _RUN_MARKER, _RUN_TEXT, Prompt, Text, _segment_of
from .protocol import (
    format_prompt,
)
from .provenance import SAMPLED, UNRECORDED, token_provenance
from .vocabulary import ValidationReport, Vocabulary, load_vocabulary

__all__ = ["ChatSession", "Encoder", "Encoding", "EngineName", "MarkersInText"]

MarkersInText: TypeAlias = Literal["literal", "reject", "atomic"]
_MODES: tuple[str, ...] = ("literal", "reject", "atomic")
EngineName: TypeAlias = Literal["auto", "fastokens", "tokenizers"]
_ENGINES: tuple[str, ...] = ("auto", "fastokens", "tokenizers")

# "auto" keeps one-shot use fast: fastokens loads ~3x slower than tokenizers (2.8 s vs 0.8 s) but
# then encodes ~8x faster, saving ~1 s per million tokens. It is brought up once the encoder has
# met this much new text (about 2M tokens, in one batch or over many), where the saving starts to
# repay the one-time load; a single request or a small job never pays it.
_AUTO_FASTOKENS_CHARS = 8_000_000
# Text runs recur across requests (the tools block, a shared system prompt, every earlier turn of
# a growing chat): their IDs are kept, up to this many bytes of text plus IDs.
_RUN_CACHE_BYTES = 64 << 20
# What ChatSession takes besides tools (continue_final_message is not one: see the README).
_CHAT_OPTIONS = frozenset(
    {
        "enable_thinking",
        "reasoning_effort",
        "preserve_thinking",
        "add_generation_prompt",
        "add_vision_id",
        "on_template_change",
    }
)

# A batch whose new text is at most this many runs and characters (one short request) is encoded
# run by run on the calling thread instead of by the engine's parallel batch call (see _run_ids).
_SMALL_RUNS = 32
# Source codes of kept system turns in a _Batch: below every marker's (-1 - its ID).
_BLOCK = -(1 << 40)
_TURN, _TRAINED, _PARTS = itemgetter(2), itemgetter(3), itemgetter(4)
_SMALL_CHARS = 16_384
# Very long text runs (a 50 MB message) are encoded in pieces of about this many characters: one
# tokenizers call on 50 MB took 111 s and 9.4 GB (its normalised string keeps per-byte
# alignments), pieces take time and memory linear in the text, and run in parallel.
_PIECE_CHARS = 1 << 16
# Where a run may be cut without changing its IDs. Two kinds of point, each a place where the
# Qwen pre-tokenizer below (regex split, then byte-level BPE inside each pre-token) ends one
# pre-token and starts the next whether it sees the whole text, the text before the point alone
# or the text after it alone:
# 1. Right after a "\n" followed by spaces or tabs (or nothing) and then a non-space: whichever
#    alternative takes that "\n" (`\s*[\r\n]+`, or a punctuation run's `[\r\n]*`) ends after
#    the last newline of its whitespace run, which this one is; alone, the text before ends
#    there too. (Lines of code indented by spaces, lines starting with a letter or digit.)
# 2. Between a letter or number and one of _CUT_BEFORE (ASCII space, control and punctuation
#    characters that no added token holds): a letter run (`[\p{L}\p{M}]+` or `\p{L}+`) and a
#    number (`\p{N}`, one character) end before any of them, and a contraction ends on its
#    letter. (Words separated by spaces, minified JSON, one long line.)
# Either way no alternative needs to look past the point to end there: the regex has no
# look-behind, and its one look-ahead (`\s+(?!\S)`) only belongs to whitespace runs that end
# before a non-space. NFC never composes or reorders across a "\n" or before an ASCII character;
# no added token holds "\n" or a _CUT_BEFORE character, so none spans a cut.
# tests/test_encoder_pieces.py checks every character each rule admits, cut against uncut, on
# both Qwen pre-tokenizer patterns.
_CUT_BEFORE = " \t\r\n!\"#$%&'()*+,-.:;=?@[\\]^`{}~"
_SAFE_CUT = re.compile(r"\n(?=[ \t]*[^\s])|(?<=[^\W_])(?=[" + re.escape(_CUT_BEFORE) + "])")
# The pre-tokenizers (Split regex + ByteLevel) for which that argument is made: Qwen 3.5-3.8 and
# Qwen 2-3. Any other vocabulary is encoded uncut.
_CUTTABLE_PATTERNS = frozenset(
    {
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
        r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
        r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    }
)


# Byte-level BPE spells each byte as one character (GPT-2's table: printable Latin-1 bytes as
# themselves, the others shifted past U+0100), so a model token's length is its length in bytes.
_BYTE_ALPHABET = frozenset(
    [chr(b) for b in range(0x21, 0x7F)]
    + [chr(b) for b in range(0xA1, 0xAD)]
    + [chr(b) for b in range(0xAE, 0x100)]
    + [chr(0x100 + n) for n in range(68)]
)


def _cuttable(tokenizer: Tokenizer, added: Iterable[str]) -> bool:
    """Whether ``_SAFE_CUT`` provably keeps this vocabulary's IDs (see above)."""
    try:
        normalizer = (
            None
            if tokenizer.normalizer is None
            else json.loads(tokenizer.normalizer.__getstate__())
        )
        pre = json.loads(tokenizer.pre_tokenizer.__getstate__())
    except Exception:
        return False
    if normalizer not in (None, {"type": "NFC"}) or any(
        char in token for token in added for char in _CUT_BEFORE
    ):
        return False
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not isinstance(steps, list) or len(steps) != 2:
        return False
    split, byte_level = steps
    return (
        split.get("type") == "Split"
        and split.get("pattern", {}).get("Regex") in _CUTTABLE_PATTERNS
        and split.get("behavior") == "Isolated"
        and split.get("invert") is False
        and byte_level.get("type") == "ByteLevel"
        and byte_level.get("use_regex") is False
        and byte_level.get("add_prefix_space") is False
    )


def _pieces(text: str) -> list[str]:
    """``text`` cut at safe points into pieces of at least ``_PIECE_CHARS`` characters (the last
    may be shorter; text with no safe point stays whole)."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > 2 * _PIECE_CHARS:
        cut = _SAFE_CUT.search(text, start + _PIECE_CHARS)
        if cut is None:
            break
        pieces.append(text[start : cut.end()])
        start = cut.end()  # the match is empty (rule 2) or the "\n" (rule 1): cut after it
    pieces.append(text[start:])
    return pieces


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


class _Batch:
    """The prompts of one ``encode_batch`` call, laid out as one list of items: a marker (one
    known ID) or a text run (IDs from the engine or the run cache), each with the turn and
    trained flag of its tokens. Plain lists of ints here, then a few numpy operations over the
    whole batch, instead of Python objects and array joins per run and per prompt: with a fast
    engine the per-run bookkeeping, not BPE, was two thirds of the time when encoding went run by
    run."""

    __slots__ = (
        "blocks",
        "crossing",
        "deferred",
        "ends",
        "heads",
        "literal",
        "slots",
        "source",
        "trained",
        "turn",
    )

    def __init__(self) -> None:
        self.source: list[int] = []  # >= 0: a text run's slot; < 0: -1 - the marker's ID
        self.turn: list[int] = []
        self.trained: list[bool] = []
        self.ends: list[int] = []  # each prompt's end in the items
        # Each distinct run text once (encoded once), and whether it is encoded literally.
        self.slots: dict[str, int] = {}
        self.literal: list[bool] = []
        # Runs whose segments belong to more than one (turn, trained): first item, slot and the
        # character where each part starts (one item per part, its length known once encoded).
        self.crossing: list[tuple[int, int, tuple[int, ...]]] = []
        # Shared system turns, one item each (code _BLOCK - k in source): the code of each head
        # met, its IDs when the encoder knew them (blocks), or else where its runs were first
        # laid out in this batch, to be joined once encoded (deferred: key, code, first item).
        self.heads: dict[tuple[Any, ...], int] = {}
        self.blocks: dict[int, np.ndarray] = {}
        self.deferred: list[tuple[tuple[Any, ...], int, int]] = []

    def mark(self) -> tuple[int, int, int, int]:
        return len(self.source), len(self.slots), len(self.crossing), len(self.deferred)

    def rollback(self, mark: tuple[int, int, int, int]) -> None:
        """Forget what a refused prompt added, so none of its text is encoded."""
        items, slots, crossing, deferred = mark
        del self.source[items:], self.turn[items:], self.trained[items:]
        del self.crossing[crossing:], self.literal[slots:]
        for head, _, _ in self.deferred[deferred:]:
            del self.heads[head]  # laid out by the refused prompt: no later one refers to it
        del self.deferred[deferred:]
        while len(self.slots) > slots:
            self.slots.popitem()  # the last added first: O(what the prompt added)


class Encoder:
    """Encodes ``Prompt`` values with one checkpoint's vocabulary.

    ``markers_in_text`` decides what happens to caller text that spells a control token
    (``<|im_end|>``, ``<think>``, ``<|fim_prefix|>``, … any added token of the vocabulary):
    ``"literal"`` (default) encodes it as the ordinary text it is, so it can never forge a turn;
    ``"reject"`` raises ``MarkerInTextError`` naming the turn, field and marker; ``"atomic"``
    turns it into the control token, exactly as transformers does.
    """

    def __init__(
        self,
        vocabulary: Vocabulary,
        *,
        markers_in_text: MarkersInText = "literal",
        engine: EngineName = "tokenizers",
        tokenizer_json: str | os.PathLike[str] | None = None,
        cache_bytes: int = _RUN_CACHE_BYTES,
    ):
        # PromptError (a ValueError) like every other argument check, so one except clause
        # catches every refusal of the library.
        if not isinstance(vocabulary, Vocabulary):
            raise PromptError(
                f"expected a Vocabulary (load_vocabulary), got {type(vocabulary).__name__}; "
                "Encoder.from_pretrained takes a checkpoint path",
                field="vocabulary",
            )
        if not isinstance(markers_in_text, str) or markers_in_text not in _MODES:
            raise PromptError(
                f"must be one of {_MODES}, got {shown(markers_in_text)}", field="markers_in_text"
            )
        if not isinstance(engine, str) or engine not in _ENGINES:
            raise PromptError(f"must be one of {_ENGINES}, got {shown(engine)}", field="engine")
        if engine != "tokenizers" and tokenizer_json is None:
            raise PromptError(
                f"engine={shown(engine)} needs tokenizer_json (the file fastokens loads)",
                field="tokenizer_json",
            )
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise PromptError(
                f"must be a non-negative integer, got {shown(cache_bytes)}", field="cache_bytes"
            )
        self.vocabulary = vocabulary
        self.markers_in_text: MarkersInText = markers_in_text
        # What a pickle carries (see __reduce__): the engine asked for, not the one running now,
        # and where the vocabulary came from (set by from_pretrained).
        self._engine_option: EngineName = engine
        self._origin: CheckpointFiles | None = None
        self._packed_files: dict[str, bytes] | None = None
        self._tokenizer: Tokenizer = vocabulary.tokenizer
        self._reference = TokenizersEngine(vocabulary.tokenizer)
        self._engine: Engine = self._reference
        self._tokenizer_json = None if tokenizer_json is None else Path(tokenizer_json)
        self._engine_wanted: EngineName = engine
        self._work = 0  # characters of new text encoded so far, for the "auto" engine
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # encoders are shared by a server's threads
        self._cache_bytes = 0
        self._cache_limit = cache_bytes
        # A shared system turn's IDs as one block (see _lay_out_head), a quarter of the budget.
        self._heads: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
        self._head_bytes = 0
        self._head_hits = 0
        self._added_ids: Mapping[str, int] = vocabulary.added_tokens
        # A marker item's IDs, by its code in _Batch.source.
        self._marker_ids = {
            -1 - token_id: np.array([token_id], dtype=np.int32)
            for token_id in vocabulary.added_tokens.values()
        }
        # A marker's code in _Batch.source, by its text.
        self._marker_codes = {
            content: -1 - token_id for content, token_id in vocabulary.added_tokens.items()
        }
        # Longest first, so the alternation reports "<tts_text_bos_single>" rather than a prefix.
        contents = sorted(vocabulary.added_tokens, key=len, reverse=True)
        self._added_pattern = re.compile("|".join(re.escape(c) for c in contents))
        # tokenizers matches a `normalized: true` added token in the NFC-normalised text, where
        # e.g. U+212A KELVIN SIGN has become "K"; such vocabularies are checked on that text too.
        self._normalized_match = any(
            token.normalized for token in self._tokenizer.get_added_tokens_decoder().values()
        )
        self._cuttable = _cuttable(self._tokenizer, vocabulary.added_tokens)
        # Every Qwen added token starts with "<": text without one (most runs) needs no regex.
        # Not for `normalized` tokens, which NFC may create from other characters.
        initials = {content[:1] for content in contents}
        self._marker_initial = (
            initials.pop() if len(initials) == 1 and not self._normalized_match else None
        )
        if engine == "fastokens":
            self._bring_up_fastokens()

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike[str],
        *,
        revision: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        local_files_only: bool | None = None,
        markers_in_text: MarkersInText = "literal",
        engine: EngineName = "auto",
        cache_bytes: int = _RUN_CACHE_BYTES,
    ) -> Encoder:
        """Load a checkpoint's vocabulary (local folder, ``tokenizer.json`` path or hub repo id)
        and validate it: a vocabulary that does not carry the protocol's markers raises
        ``VocabularyError`` listing every problem.

        ``engine``: ``"tokenizers"`` (HF tokenizers only), ``"fastokens"`` (load and prove it
        now), or ``"auto"`` (start on tokenizers; bring fastokens up for the first large batch).
        fastokens is used only after it gave tokenizers' IDs on a probe set for this vocabulary;
        otherwise the encoder warns and stays on tokenizers.

        ``cache_bytes`` bounds the cache of encoded text runs (text plus IDs; 0 disables it)."""
        if local_files_only is not None and not isinstance(local_files_only, bool):
            raise PromptError(
                f"must be a bool or None, got {shown(local_files_only)}", field="local_files_only"
            )
        files = resolve_checkpoint(
            source, revision=revision, cache_dir=cache_dir, local_files_only=local_files_only
        )
        encoder = cls(
            load_vocabulary(files),
            markers_in_text=markers_in_text,
            engine=engine,
            tokenizer_json=files.tokenizer_json,
            cache_bytes=cache_bytes,
        )
        encoder._origin = files
        return encoder

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickling, for worker processes (``datasets.map(num_proc=N)``, Ray actors) that may run
        where the checkpoint folder does not exist: a hub checkpoint travels as its id and
        revision (the worker resolves it from its own hub cache), a local one as its tokenizer
        files, compressed, unpacked into a temporary folder on the worker for as long as the
        encoder lives. The options travel; the run cache does not (the worker fills its own)."""
        options = (self.markers_in_text, self._engine_option, self._cache_limit)
        origin = self._origin
        if origin is not None and origin.from_hub:
            return (_unpickle_encoder, (("hub", origin.source, origin.revision), *options))
        if origin is None and self._tokenizer_json is None:
            # Built from a Vocabulary by hand: the vocabulary itself travels (engine tokenizers).
            return (_unpickle_encoder, (("vocabulary", self.vocabulary), *options))
        if self._packed_files is None:
            if origin is None:
                assert self._tokenizer_json is not None
                paths = {TOKENIZER_JSON: self._tokenizer_json}
            else:
                paths = origin.present()
            # Level 1: tokenizer.json (11 MB) packs to a third in ~0.1 s; level 9 saves little.
            self._packed_files = {
                name: zlib.compress(path.read_bytes(), 1) for name, path in paths.items()
            }
        return (_unpickle_encoder, (("files", self._packed_files), *options))

    @property
    def engine(self) -> str:
        """The engine encoding text now: "tokenizers" or "fastokens"."""
        return self._engine.name

    def _bring_up_fastokens(self) -> None:
        self._engine_wanted = "tokenizers"  # one attempt: a failure is not retried per batch
        assert self._tokenizer_json is not None
        fast = load_fastokens(self._tokenizer_json, self._reference, list(self._added_ids))
        if fast is not None:
            self._engine = fast

    # -- what callers look up -----------------------------------------------------------------

    @property
    def report(self) -> ValidationReport:
        return self.vocabulary.report

    @property
    def marker_ids(self) -> Mapping[str, int]:
        """Protocol marker -> its ID in this vocabulary."""
        return self.vocabulary.marker_ids

    @property
    def pad_id(self) -> int:
        # Qwen checkpoints pad with <|endoftext|> (tokenizer_config.json pad_token).
        return self.vocabulary.marker_ids[mk.END_OF_TEXT]

    @property
    def vocab_size(self) -> int:
        """How many IDs the vocabulary has, added tokens included: valid IDs are below it."""
        return self.vocabulary.report.vocab_size

    def check_ids(self, ids: Iterable[int] | np.ndarray) -> list[int]:
        """``ids`` as a list of Python ints, each checked: an integer (not a bool, not a float
        such as 3.0, which would be truncated silently) from 0 to ``vocab_size - 1``. Raises
        ``TokenIdError`` naming the first bad position. tokenizers itself would return '' for an
        ID past the vocabulary and raise OverflowError for a negative one."""
        if isinstance(ids, str | bytes | bytearray | Mapping) or not isinstance(
            ids, Iterable | np.ndarray
        ):
            raise TokenIdError(
                f"expected a sequence of token IDs, got {type(ids).__name__}", position=0
            )
        size = self.vocab_size
        if not isinstance(ids, np.ndarray):
            ids = list(ids)
            # numpy would turn True into 1 and [1, 2.0] into floats: only a list of plain ints
            # takes the vectorised path; anything else is checked item by item below.
            plain = set(map(type, ids)) <= {int}
            try:
                array = np.asarray(ids if plain else [], dtype=np.int64)
            except OverflowError:  # an int past 64 bits
                array = np.zeros(0, dtype=np.int64)
                plain = False
            if not plain:
                array = np.asarray(ids, dtype=object)
        else:
            array = ids
        if array.ndim == 1 and array.dtype.kind in "iu":
            # The common case, checked without a Python loop over the IDs.
            bad = np.flatnonzero((array < 0) | (array >= size))
            if not len(bad):
                return list(array.tolist())
            position = int(bad[0])
            raise TokenIdError(outside_vocabulary(int(array[position]), size), position=position)
        items = ids if isinstance(ids, list) else array.tolist() if array.ndim == 1 else list(array)
        return [check_token_id(token, position, size) for position, token in enumerate(items)]

    def decode(self, ids: Iterable[int] | np.ndarray, skip_special_tokens: bool = False) -> str:
        """The text of ``ids`` (checked as ``check_ids`` checks them)."""
        if not isinstance(skip_special_tokens, bool):
            raise PromptError(
                f"must be a bool, got {shown(skip_special_tokens)}", field="skip_special_tokens"
            )
        return self._tokenizer.decode(self.check_ids(ids), skip_special_tokens=skip_special_tokens)

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, prompt: Prompt) -> Encoding:
        """The IDs of one ``Prompt`` (from ``format_prompt``); see ``encode_messages`` for
        message dicts."""
        return self.encode_batch([prompt])[0]

    def encode_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any] | str] | str | None = None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> Encoding:
        """``format_prompt`` then ``encode``: the IDs ``apply_chat_template(tokenize=True)``
        gives (in ``"atomic"`` mode, for every conversation; in ``"literal"`` mode, wherever no
        caller field spells a control token)."""
        prompt = format_prompt(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, **template_kwargs
        )
        return self.encode(prompt)

    def chat(
        self, tools: Sequence[Mapping[str, Any] | str] | str | None = None, **options: Any
    ) -> ChatSession:
        """A conversation to grow one message at a time, re-encoding only what changed;
        ``options`` are ``ChatSession``'s (the template options of ``format_prompt``)."""
        unknown = sorted(set(options) - _CHAT_OPTIONS)
        if unknown:
            raise PromptError(
                f"unknown option {shown(unknown[0])}; chat sessions take {sorted(_CHAT_OPTIONS)}",
                field=str(unknown[0]),
            )
        return ChatSession(self, tools, **options)

    def clear_cache(self) -> None:
        """Forget the IDs of text runs encoded so far."""
        with self._lock:
            self._cache.clear()
            self._cache_bytes = 0
            self._heads.clear()
            self._head_bytes = self._head_hits = 0

    @overload
    def encode_batch(
        self, prompts: Sequence[Prompt], *, errors: Literal["raise"] = "raise"
    ) -> list[Encoding]: ...

    @overload
    def encode_batch(
        self, prompts: Sequence[Prompt], *, errors: Literal["return"]
    ) -> list[Encoding | PromptError]: ...

    def encode_batch(
        self, prompts: Sequence[Prompt], *, errors: Literal["raise", "return"] = "raise"
    ) -> list[Encoding] | list[Encoding | PromptError]:
        """Encode many prompts; all their new text goes through the engine's parallel batch
        API in one call, and text already encoded (see ``cache_bytes``) is not encoded again.

        A prompt can be refused: one that spells a marker with ``markers_in_text="reject"``
        (``MarkerInTextError``), or that is not a ``Prompt`` or holds text no tokenizer takes (a
        lone surrogate in a hand-made segment: ``PromptError``). ``errors="raise"`` raises the
        first; ``errors="return"`` puts each in its prompt's place and still encodes the others
        (what a batch job that reports bad lines wants)."""
        if errors not in ("raise", "return"):
            raise PromptError(f"must be 'raise' or 'return', got {shown(errors)}", field="errors")
        if isinstance(prompts, Prompt | str | bytes | Mapping) or not isinstance(prompts, Iterable):
            raise PromptError(
                f"expected a list of Prompt values, got {type(prompts).__name__}", field="prompts"
            )
        prompts = list(prompts)
        try:
            return self._encode_prompts(prompts, errors, check_text=False)
        except (TypeError, UnicodeEncodeError):
            # The engine refused some run: it holds a lone surrogate. format_prompt refuses those
            # in caller fields, so only a hand-made Prompt gets here; the batch is laid out again
            # with every run checked, to refuse that prompt by name and encode the others. (A
            # check of every run up front cost 5% of a batch for what format_prompt has done.)
            return self._encode_prompts(prompts, errors, check_text=True)

    def _encode_prompts(
        self, prompts: list[Any], errors: str, *, check_text: bool
    ) -> list[Encoding | PromptError]:
        batch = _Batch()
        refused: dict[int, PromptError] = {}
        for position, prompt in enumerate(prompts):
            mark = batch.mark()
            try:
                self._lay_out(prompt, batch, check_text)
            except PromptError as refusal:
                if errors == "raise":
                    raise
                refused[position] = refusal
                batch.rollback(mark)
            batch.ends.append(len(batch.source))
        runs = self._run_ids(batch)
        encodings: list[Encoding | PromptError] = list(self._assemble(batch, runs))
        for position, error in refused.items():
            encodings[position] = error
        for prompt, encoding in zip(prompts, encodings, strict=True):
            if isinstance(encoding, Encoding):  # provenance from these, on first use
                encoding.__dict__["_source"] = (prompt._segments, prompt._segs, self)
        return encodings

    def _run_ids(self, batch: _Batch) -> list[np.ndarray]:
        """Each slot's IDs: from the run cache, or encoded now (all new text of the batch in one
        call of the engine's parallel batch API)."""
        texts = list(batch.slots)
        runs: list[np.ndarray | None] = [None] * len(texts)
        todo: list[int] = []
        # The lock guards only the cache and the work counter: `runs` keeps this call's IDs, so
        # another thread evicting an entry meanwhile cannot take one away.
        with self._lock:
            for slot, text in enumerate(texts):
                cached = self._cache.get(text)
                if cached is None:
                    todo.append(slot)
                else:
                    runs[slot] = cached
                    self._cache.move_to_end(text)
            self._work += sum(len(texts[slot]) for slot in todo)
            if self._engine_wanted == "auto" and self._work >= _AUTO_FASTOKENS_CHARS:
                self._bring_up_fastokens()
        literal = [slot for slot in todo if batch.literal[slot]]
        matched = [slot for slot in todo if not batch.literal[slot]] if literal else todo
        if self._engine is not self._reference and self._small(texts, matched):
            # A request's few short runs: one ordinary call each on this thread. fastokens' batch
            # call wakes its thread pool, ~50 µs a call on a busy machine against ~1 µs a run.
            # Text that spells no added token encodes the same with or without added-token
            # matching (there is nothing to split off), and that ordinary encoding is the one
            # proven for literal runs. (In literal and reject modes, a matched run spells none.)
            plain = [
                slot
                for slot in matched
                if self.markers_in_text != "atomic" or self._spelled_marker(texts[slot]) is None
            ]
            literal += plain
            matched = (
                [slot for slot in matched if slot not in plain] if len(plain) < len(matched) else []
            )
        if matched:
            ids_of = self._encode_texts([texts[s] for s in matched])
            for slot, ids in zip(matched, ids_of, strict=True):
                runs[slot] = ids
        for slot in literal:
            runs[slot] = self._encode_ordinary(texts[slot])
        if self._cache_limit:
            with self._lock:
                for slot in todo:
                    # A view of the engine's batch buffer is copied: the cache would otherwise
                    # keep the whole buffer alive while counting only this run's bytes. A run
                    # encoded on its own owns its array already.
                    encoded = runs[slot]
                    assert encoded is not None
                    self._remember(
                        texts[slot], encoded if encoded.base is None else np.array(encoded)
                    )
        return runs  # type: ignore[return-value]  # every slot was filled above

    @staticmethod
    def _small(texts: list[str], slots: list[int]) -> bool:
        """Whether these runs are few and short enough to encode one by one (see _run_ids)."""
        return len(slots) <= _SMALL_RUNS and sum(len(texts[s]) for s in slots) <= _SMALL_CHARS

    def cache_info(self) -> dict[str, int]:
        """Entries and bytes of the text-run cache, and its limit (``cache_bytes``); entries and
        bytes of the system turns kept whole (``head_entries``, ``head_bytes``: a quarter of the
        limit at most) and how many prompts took one since the cache was cleared
        (``head_hits``)."""
        with self._lock:
            return {
                "entries": len(self._cache),
                "bytes": self._cache_bytes,
                "limit": self._cache_limit,
                "head_entries": len(self._heads),
                "head_bytes": self._head_bytes,
                "head_hits": self._head_hits,
            }

    def _remember_head(self, key: tuple[Any, ...], ids: np.ndarray) -> None:
        if key in self._heads:
            self._heads.move_to_end(key)
            return
        cost = _head_cost(key, ids)
        limit = self._cache_limit // 4
        if cost > limit:
            return
        self._heads[key] = ids
        self._head_bytes += cost
        while self._head_bytes > limit:
            old_key, old_ids = self._heads.popitem(last=False)
            self._head_bytes -= _head_cost(old_key, old_ids)

    def _remember(self, text: str, ids: np.ndarray) -> None:
        if text in self._cache:
            # Two threads missed the same text and both encoded it: the entry is already counted
            # (storing it again would count its bytes twice and evict it once, and the cache
            # would believe it is full while it holds nothing).
            self._cache.move_to_end(text)
            return
        cost = len(text) + ids.nbytes + 100  # ~100 bytes of dict and array overhead per entry
        if cost > self._cache_limit:
            return
        self._cache[text] = ids
        self._cache_bytes += cost
        while self._cache_bytes > self._cache_limit:
            old_text, old_ids = self._cache.popitem(last=False)
            self._cache_bytes -= len(old_text) + old_ids.nbytes + 100

    def pad(
        self,
        encodings: Sequence[Encoding],
        side: Literal["right", "left"] = "right",
        pad_id: int | None = None,
    ) -> dict[str, np.ndarray]:
        """Stack encodings into 2-D arrays: ``input_ids`` (int32), ``attention_mask`` (int32,
        1 for real tokens), ``assistant_mask`` (bool) and ``turn_index`` (int32, -1 padding).
        ``pad_id`` defaults to ``<|endoftext|>``, Qwen's pad token."""
        if side not in ("right", "left"):
            raise PromptError(f"must be 'right' or 'left', got {shown(side)}", field="side")
        pad = self.pad_id if pad_id is None else self.check_ids([pad_id])[0]
        if isinstance(encodings, Encoding) or not isinstance(encodings, Iterable):
            raise PromptError(
                f"expected a list of Encoding values, got {type(encodings).__name__}",
                field="encodings",
            )
        encodings = list(encodings)
        for position, encoding in enumerate(encodings):
            if not isinstance(encoding, Encoding):
                raise PromptError(
                    f"expected an Encoding, got {type(encoding).__name__}",
                    field=f"encodings[{position}]",
                )
        rows = len(encodings)
        width = max((len(e) for e in encodings), default=0)
        out = {
            "input_ids": np.full((rows, width), pad, dtype=np.int32),
            "attention_mask": np.zeros((rows, width), dtype=np.int32),
            "assistant_mask": np.zeros((rows, width), dtype=bool),
            "turn_index": np.full((rows, width), -1, dtype=np.int32),
        }
        for row, e in enumerate(encodings):
            n = len(e)
            where = slice(0, n) if side == "right" else slice(width - n, width)
            out["input_ids"][row, where] = e.input_ids
            out["attention_mask"][row, where] = 1
            out["assistant_mask"][row, where] = e.assistant_mask
            out["turn_index"][row, where] = e.turn_index
        return out

    # -- internals ----------------------------------------------------------------------------

    def _spelled_marker(self, text: str) -> str | None:
        """The first added-token string ``text`` spells, if any (as tokenizers would match it)."""
        if self._marker_initial is not None and self._marker_initial not in text:
            return None  # no marker can start anywhere in it: one C scan, no regex
        found = self._added_pattern.search(text)
        if found is None and self._normalized_match:
            found = self._added_pattern.search(unicodedata.normalize("NFC", text))
        return found.group() if found else None

    def _lay_out(self, prompt: Prompt, batch: _Batch, check_text: bool) -> None:
        """Add ``prompt``'s markers and text runs to ``batch``, applying ``markers_in_text``.
        The runs come made with the prompt (``format_prompt`` joins them as it renders; a
        hand-made prompt's are made once, on first use): this runs for every run of every
        prompt, so the common case is a few C-level calls."""
        if not isinstance(prompt, Prompt):
            raise PromptError(
                f"expected a Prompt (from format_prompt), got {type(prompt).__name__}; "
                "encode_messages takes message dicts",
                field="prompt",
            )
        runs = prompt._layout()
        start = 0 if prompt._head is None else self._lay_out_head(prompt._head, batch)
        if check_text or not self._lay_out_plain(
            prompt, runs[start:] if start else runs, start, batch
        ):
            self._lay_out_runs(prompt, runs, start, batch, check_text)

    def _lay_out_plain(
        self, prompt: Prompt, runs: Sequence[Any], start: int, batch: _Batch
    ) -> bool:
        """``_lay_out_runs`` for runs that each give one item (none crosses parts, the common
        case), in a few C-level passes: lookups of every run, then the new texts and anything
        refused, in order. False (nothing done) when some run has parts."""
        if list(map(_PARTS, runs)).count(None) != len(runs):
            return False
        slot_of, marker_code = batch.slots.get, self._marker_codes.get
        codes: list[Any] = [
            slot_of(text)
            if kind == _RUN_TEXT
            else (marker_code(text) if kind == _RUN_MARKER else None)
            for kind, text, _, _, _ in runs
        ]
        at = _next_none(codes, 0)
        while at >= 0:
            kind, text, turn, _, _ = runs[at]
            if kind != _RUN_TEXT:
                self._refuse_run(kind, text, turn)
            slot = batch.slots.get(text)  # the same text earlier in this prompt
            codes[at] = self._new_slot(prompt, start + at, text, batch) if slot is None else slot
            at = _next_none(codes, at + 1)
        batch.source += codes
        batch.turn.extend(map(_TURN, runs))
        batch.trained.extend(map(_TRAINED, runs))
        return True

    @staticmethod
    def _refuse_run(kind: int, text: str, turn: int) -> None:
        if kind == _RUN_MARKER:
            raise PromptError(
                f"{shown(text)} is not a token of this vocabulary",
                message_index=turn if turn >= 0 else None,
                field="marker",
            )
        # A _RUN_BAD run: its text is the reason, its turn the segment's position (prompt._bad_seg).
        raise PromptError(text, field=f"prompt.segments[{turn}]")

    def _lay_out_runs(
        self, prompt: Prompt, runs: Sequence[Any], start: int, batch: _Batch, check_text: bool
    ) -> None:
        """The runs from ``start`` on, one at a time (see ``_lay_out``)."""
        added = self._added_ids
        slots = batch.slots
        source, turns, trains = batch.source, batch.turn, batch.trained
        # Bound once: three appends per run, ~30 runs per short row.
        add_source, add_turn, add_trained = source.append, turns.append, trains.append
        for position, (kind, text, turn, trained, parts) in enumerate(
            runs[start:] if start else runs, start
        ):
            if kind == _RUN_TEXT:
                if check_text and not text.isascii():
                    self._check_run(prompt, position)
                slot = slots.get(text)
                if slot is None:
                    slot = self._new_slot(prompt, position, text, batch)
                if parts is None:
                    add_source(slot)
                    add_turn(turn)
                    add_trained(trained)
                    continue
                # Parts: where the run's (turn, trained) changes, e.g. the "assistant\n" header
                # (not trained) joined to the content after it (trained) when no reasoning span
                # separates them. One item per part, its length known once encoded.
                for _, part_turn, part_trained in parts:
                    source.append(slot)
                    turns.append(part_turn)
                    trains.append(part_trained)
                starts = tuple(offset for offset, _, _ in parts)
                batch.crossing.append((len(source) - len(parts), slot, starts))
            elif kind == _RUN_MARKER and (token := added.get(text)) is not None:
                add_source(-1 - token)
                add_turn(turn)
                add_trained(trained)
            else:
                self._refuse_run(kind, text, turn)

    def _lay_out_head(self, head: tuple[Any, ...], batch: _Batch) -> int:
        """A shared system turn (the render cache's runs, the same in every row of an agent data
        set) as one item when its IDs are known: how many of the prompt's runs that covers (0:
        lay them out one by one, and keep their IDs as one block once encoded). Only a head
        laid out without refusal is ever kept, and the encoder's mode never changes, so a kept
        head would pass again."""
        code = batch.heads.get(head)
        if code is None:
            with self._lock:
                ids = self._heads.get(head)
                if ids is not None:
                    self._heads.move_to_end(head)
                    self._head_hits += 1
            code = _BLOCK - len(batch.heads)
            if ids is None:
                turn = head[0][2]
                if all(run[2] == turn and run[3] is False and run[4] is None for run in head):
                    batch.heads[head] = code
                    batch.deferred.append((head, code, len(batch.source)))
                return 0
            batch.heads[head] = code
            batch.blocks[code] = ids
        batch.source.append(code)
        batch.turn.append(head[0][2])
        batch.trained.append(False)
        return len(head)

    @staticmethod
    def _check_run(prompt: Prompt, position: int) -> None:
        """Refuse a run holding a lone surrogate, naming the segment's turn and field."""
        for text, turn, _, field in prompt._run_segs()[position]:
            if problem := surrogate_problem(text):
                raise PromptError(
                    problem, message_index=turn if turn >= 0 else None, field=field or "text"
                )

    def _new_slot(self, prompt: Prompt, position: int, text: str, batch: _Batch) -> int:
        """A slot for a run text new to the batch (each distinct text is encoded once)."""
        literal = False
        # The whole run is checked, not each segment: a tool name "<think" followed by the
        # protocol's ">\n" spells "<think>" across the join, and tokenizers would match it.
        if self.markers_in_text != "atomic" and (marker := self._spelled_marker(text)):
            if self.markers_in_text == "reject":
                segments = [Text(*seg) for seg in prompt._run_segs()[position]]
                raise self._rejection(segments, marker)
            literal = True
        slot = batch.slots[text] = len(batch.literal)
        batch.literal.append(literal)
        return slot

    @staticmethod
    def _rejection(segments: list[Text], marker: str) -> MarkerInTextError:
        # Protocol text never spells a marker (the protocol emits those as Special), so the
        # caller field to blame is one holding the marker, or else the first one in the run.
        callers = [s for s in segments if s.field is not None]
        blamed = next((s for s in callers if marker in s.text), callers[0])
        turn = blamed.turn if blamed.turn >= 0 else None
        return MarkerInTextError(marker, message_index=turn, field=str(blamed.field))

    def _assemble(self, batch: _Batch, runs: list[np.ndarray]) -> list[Encoding]:
        """Every prompt's arrays, built for the whole batch at once (one join of every item's
        IDs, one repeat per per-token array) and handed out as slices."""
        marker_ids = self._marker_ids
        if batch.heads:
            marker_ids = {**marker_ids, **batch.blocks}
            for head, code, item in batch.deferred:
                ids = np.concatenate(
                    [
                        runs[s] if s >= 0 else marker_ids[s]
                        for s in batch.source[item : item + len(head)]
                    ]
                )
                marker_ids[code] = ids
                if self._cache_limit:
                    with self._lock:
                        self._remember_head(head, ids)
        pieces = [runs[s] if s >= 0 else marker_ids[s] for s in batch.source]
        if batch.crossing:
            texts = list(batch.slots)
            for item, slot, part_starts in batch.crossing:
                ids = runs[slot]
                counts = self._part_lengths(
                    ids, texts[slot], part_starts, literal=batch.literal[slot]
                )
                at = 0
                for part, count in enumerate(counts):
                    pieces[item + part] = ids[at : at + count]
                    at += count
        if len(batch.ends) == 1 and pieces:
            # One prompt (a request): no offsets to slice at, a few numpy calls fewer.
            counts = [len(piece) for piece in pieces]
            return [
                Encoding(
                    np.concatenate(pieces),
                    np.repeat(np.asarray(batch.trained, dtype=bool), counts),
                    np.repeat(np.asarray(batch.turn, dtype=np.int32), counts),
                )
            ]
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        input_ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
        assistant_mask = np.repeat(np.asarray(batch.trained, dtype=bool), lengths)
        turn_index = np.repeat(np.asarray(batch.turn, dtype=np.int32), lengths)
        ends = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=ends[1:])
        bounds = ends[np.asarray([0, *batch.ends])].tolist()
        return [
            Encoding(input_ids[a:b], assistant_mask[a:b], turn_index[a:b])
            for a, b in pairwise(bounds)
        ]

    def _encode_texts(self, texts: list[str]) -> list[np.ndarray]:
        """The engine's batch encoding, long texts cut into pieces (``_pieces``) and joined."""
        if not self._cuttable or max(map(len, texts), default=0) <= 2 * _PIECE_CHARS:
            return split_flat(*self._engine.encode_flat(texts))
        cut = [_pieces(text) for text in texts]
        ids, bounds = self._engine.encode_flat([piece for pieces in cut for piece in pieces])
        # A text's pieces are consecutive in the flat result: keep the bounds between texts.
        firsts = np.cumsum([0, *map(len, cut)])
        return split_flat(ids, bounds[firsts])

    def _encode_ordinary(self, text: str) -> np.ndarray:
        if not self._cuttable or len(text) <= 2 * _PIECE_CHARS:
            return self._engine.encode_ordinary(text)
        return np.concatenate([self._engine.encode_ordinary(piece) for piece in _pieces(text)])

    def _part_lengths(
        self, ids: np.ndarray, text: str, part_starts: tuple[int, ...], *, literal: bool
    ) -> list[int]:
        """How many of a crossing run's tokens belong to each part: each token goes to the part
        its first character is in. The template's joins fall on pre-token boundaries there (a
        '\n' then trimmed content), so no token straddles two parts.

        Byte-level BPE tokens spell the UTF-8 bytes of the normalised text in order, so where the
        normaliser leaves the text as it is, each token's start is the sum of the byte lengths
        of the tokens before it: no offsets needed, so the run is encoded with the others by
        whichever engine runs (fastokens has no offsets). Otherwise (NFC changes the text), the
        reference tokenizer's character offsets decide."""
        token_bytes = self._token_bytes
        if token_bytes is not None and (
            self._tokenizer.normalizer is None or unicodedata.is_normalized("NFC", text)
        ):
            sizes = token_bytes[ids]
            edges = [*part_starts, len(text)]
            part_bytes = np.cumsum([0, *(len(text[a:b].encode()) for a, b in pairwise(edges))])
            if int(sizes.sum()) == int(part_bytes[-1]):
                begins = np.cumsum(sizes) - sizes
                owner = np.searchsorted(part_bytes[:-1], begins, side="right") - 1
                return list(np.bincount(owner, minlength=len(part_starts)).tolist())
        counts = [0] * len(part_starts)
        base = 0
        for piece in _pieces(text) if self._cuttable else [text]:
            if literal:
                encoding = self._reference.ordinary_encoding(piece)
            else:
                encoding = self._tokenizer.encode(piece, add_special_tokens=False)
            begins = np.asarray([b for b, _ in encoding.offsets], dtype=np.int64) + base
            owner = np.searchsorted(np.asarray(part_starts), begins, side="right") - 1
            for part, count in enumerate(np.bincount(owner, minlength=len(part_starts))):
                counts[part] += int(count)
            base += len(piece)
        return counts

    @cached_property
    def _token_bytes(self) -> np.ndarray | None:
        """Each ID's length in bytes, or None when the vocabulary is not byte-level (a token
        outside the byte alphabet). Built on first use: only runs that cross parts need it."""
        sizes = np.zeros(self._tokenizer.get_vocab_size(with_added_tokens=True), dtype=np.int64)
        for token, token_id in self._tokenizer.get_vocab(with_added_tokens=True).items():
            if token in self._added_ids:
                sizes[token_id] = len(token.encode())
            elif not _BYTE_ALPHABET.issuperset(token):
                return None
            else:
                sizes[token_id] = len(token)
        return sizes


def _next_none(codes: list[Any], start: int) -> int:
    """Where the next run without a code is (a new text, or one to refuse), or -1."""
    try:
        return codes.index(None, start)
    except ValueError:
        return -1


def _head_cost(key: tuple[Any, ...], ids: np.ndarray) -> int:
    """Bytes of a kept system turn, roughly: its text, its IDs, ~100 per run of overhead."""
    return sum(len(run[1]) + 100 for run in key) + ids.nbytes


def _unpickle_encoder(
    checkpoint: tuple[Any, ...],
    markers_in_text: MarkersInText,
    engine: EngineName,
    cache_bytes: int,
) -> Encoder:
    kind = checkpoint[0]
    if kind == "hub":
        return Encoder.from_pretrained(
            checkpoint[1],
            revision=checkpoint[2],
            markers_in_text=markers_in_text,
            engine=engine,
            cache_bytes=cache_bytes,
        )
    if kind == "vocabulary":
        return Encoder(checkpoint[1], markers_in_text=markers_in_text, cache_bytes=cache_bytes)
    packed: dict[str, bytes] = checkpoint[1]
    folder = Path(tempfile.mkdtemp(prefix="qwen-encode-checkpoint-"))
    try:
        for name, data in packed.items():
            (folder / name).write_bytes(zlib.decompress(data))
        encoder = Encoder.from_pretrained(
            folder, markers_in_text=markers_in_text, engine=engine, cache_bytes=cache_bytes
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    # The folder stays while the encoder lives: engine="auto" loads fastokens from its
    # tokenizer.json later. A second pickle sends the same packed bytes again.
    encoder._packed_files = packed
    weakref.finalize(encoder, shutil.rmtree, str(folder), True)
    return encoder


# Sessions live in their own module; re-exported here for ``from qwen_encode.encoder import
# ChatSession`` (imported last: the session module needs Encoder and Encoding).
from .session import ChatSession  # noqa: E402
