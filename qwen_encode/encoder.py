"""Prompt -> input_ids: markers map straight to their vocabulary IDs, text is encoded with the
vocabulary's own byte-level BPE, and caller text never becomes a control token unless asked to.

Why this equals ``apply_chat_template(tokenize=True)``: tokenizers first splits its input at every
added token and then normalises, pre-tokenises and BPE-encodes each piece between them on its own.
Our ``Special`` segments are exactly those split points, and the text between two of them is
encoded as ONE piece (adjacent ``Text`` segments are joined first: encoding ``<parameter=x>\\n`` and
``\\nfoo`` apart would miss the ``\\n\\n`` merge the template's string gets).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

import numpy as np
from tokenizers import Tokenizer

from . import markers as mk
from .checkpoint import TOKENIZER_JSON, CheckpointFiles, resolve_checkpoint
from .encoder_layout import _Batch
from .encoder_pieces import _cuttable
from .encoder_runs import _RUN_CACHE_BYTES
from .encoder_whole import _Whole
from .encoding import Encoding, _attach_source
from .engines import Engine, TokenizersEngine
from .errors import PromptError, TokenIdError, check_token_id, outside_vocabulary, shown
from .prompt import Prompt
from .protocol import format_prompt
from .vocabulary import ValidationReport, Vocabulary, load_vocabulary

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from .encoder_whole import _Rows

__all__ = ["ChatSession", "Encoder", "Encoding", "EngineName", "MarkersInText"]

MarkersInText: TypeAlias = Literal["literal", "reject", "atomic"]
_MODES: tuple[str, ...] = ("literal", "reject", "atomic")
EngineName: TypeAlias = Literal["auto", "fastokens", "tokenizers"]
_ENGINES: tuple[str, ...] = ("auto", "fastokens", "tokenizers")

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


def _alternation(words: Iterable[str]) -> str:
    """A pattern matching any of ``words`` (none empty), factored by their shared prefixes, the
    longer first where one word begins another ("<tts_text_bos_single>", not its prefix
    "<tts_text_bos>").

    A flat alternation of Qwen's 33 added tokens, all starting with "<", had the regex engine try
    every one at each "<" of a text: a tool call's run has several ("<function=",
    "<parameter="), and searching the runs that may spell a marker took 0.8 µs of a short row;
    factored, 0.35."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here

    def branches(node: dict[str, Any]) -> str:
        parts = [re.escape(char) + branches(child) for char, child in sorted(node.items()) if char]
        if not parts:
            return ""
        body = parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
        return f"(?:{body})?" if "" in node else body  # greedy: the longer word first

    return branches(trie)


# The internals live in rooms of their own, inherited in this order: _Layout (encoder_layout) lays
# prompts out as a batch of items, _Runs (encoder_runs) encodes and caches the run texts,
# _Assembly (encoder_assembly) builds the arrays, _Whole (encoder_whole) encodes whole prompts in
# one engine call where that gives the same IDs. This class is the public face and the state.
class Encoder(_Whole):
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
        # A dict of its own (the vocabulary holds a read-only view): the layouts look markers up
        # in it directly, a view costs a method call a lookup.
        self._added_ids: dict[str, int] = dict(vocabulary.added_tokens)
        # A marker item's IDs, by its code in _Batch.source.
        self._marker_ids = {
            -1 - token_id: np.array([token_id], dtype=np.int32)
            for token_id in vocabulary.added_tokens.values()
        }
        # A marker's code in _Batch.source, by its text.
        self._marker_codes = {
            content: -1 - token_id for content, token_id in vocabulary.added_tokens.items()
        }
        contents = list(vocabulary.added_tokens)
        self._added_pattern = re.compile(_alternation(contents))
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
        if check_text or self.markers_in_text == "atomic" or not self._whole_ready:
            encodings = self._encode_runs(prompts, errors, check_text=check_text)
        else:
            encodings = self._encode_mixed(prompts, errors)
        return encodings

    def _encode_mixed(self, prompts: list[Any], errors: str) -> list[Encoding | PromptError]:
        """Whole prompts in one engine call where that gives the same IDs (``encoder_whole``);
        the others, and so every refusal, run by run, first (a refusal raises before any engine
        work on its chunk, and a refused prompt takes nothing from a system turn kept by its
        chunk). A large batch goes in chunks: each chunk's engine call runs on a worker thread
        while the main thread lays out the next chunk and assembles the one before."""
        encodings: list[Any] = [None] * len(prompts)
        pending: tuple[_Rows, Future[tuple[np.ndarray, np.ndarray]]] | None = None
        try:
            for rows, others, more in self._whole_chunks(prompts):
                if others:
                    left = self._encode_runs([prompts[i] for i in others], errors, check_text=False)
                    _place(encodings, others, left)
                if not rows.texts:
                    continue
                if pending is None and not more:  # one chunk, or the last after none: no thread
                    self._place_whole(encodings, prompts, errors, rows, None)
                    continue
                work = _workers().submit(self._whole_engine, rows, more)
                previous, pending = pending, (rows, work)
                # The worker needs the GIL to make its engine call; handed over now, the call
                # starts at once instead of after the switch interval (5 ms: a chunk's worth).
                time.sleep(0)
                if previous is not None:
                    self._place_whole(encodings, prompts, errors, *previous)
            if pending is not None:
                previous, pending = pending, None
                self._place_whole(encodings, prompts, errors, *previous)
        finally:
            if pending is not None:  # something raised: that chunk's engine work is not wanted
                pending[1].cancel()
        return encodings

    def _place_whole(
        self,
        encodings: list[Any],
        prompts: list[Any],
        errors: str,
        rows: _Rows,
        encoded: Future[tuple[np.ndarray, np.ndarray]] | None,
    ) -> None:
        done, failed = self._whole_encode(rows, None if encoded is None else encoded.result())
        for position, encoding in done.items():
            encodings[position] = encoding
        if failed:  # a guard that has never fired (see encoder_whole): the run-by-run IDs
            again = self._encode_runs([prompts[i] for i in failed], errors, check_text=False)
            _place(encodings, failed, again)

    def _encode_runs(
        self, prompts: list[Any], errors: str, *, check_text: bool
    ) -> list[Encoding | PromptError]:
        """Prompts laid out run by run (``encoder_layout``): each distinct run encoded once,
        runs met before taken from the run cache."""
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
                _attach_source(encoding, prompt._segments, prompt._segs, self)
        return encodings

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


_WORKERS: ThreadPoolExecutor | None = None
_WORKERS_LOCK = threading.Lock()


def _workers() -> ThreadPoolExecutor:
    """The thread that runs the engine calls of batches encoded in chunks. Kept for the
    process: fastokens called from a new thread ran 30% slower (37-39 against 28-29 ms on 300
    benchmark conversations), so a thread per batch lost what the overlap gains. One: the
    engine spreads each call over every core, so batches encoded at once by several threads
    lose little by queueing their chunks' calls."""
    global _WORKERS
    with _WORKERS_LOCK:
        if _WORKERS is None:
            # Imported here: 6 ms that a request or a small batch never needs.
            from concurrent.futures import ThreadPoolExecutor

            _WORKERS = ThreadPoolExecutor(1, thread_name_prefix="qwen-encode")
        return _WORKERS


def _forget_workers() -> None:
    """In a forked child (``datasets.map(num_proc=N)`` forks on Linux): its copy of the pool
    counts the parent's thread as idle and has none, so work handed to it would wait forever."""
    global _WORKERS, _WORKERS_LOCK
    _WORKERS = None
    _WORKERS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def _place(encodings: list[Any], positions: list[int], found: Sequence[Any]) -> None:
    """Put each of ``found`` at its position among the batch's ``encodings``."""
    for position, encoding in zip(positions, found, strict=True):
        encodings[position] = encoding


# Sessions live in their own module; re-exported here for ``from qwen_encode.encoder import
# ChatSession`` (imported last: the session module needs Encoder and Encoding).
from .session import ChatSession  # noqa: E402
