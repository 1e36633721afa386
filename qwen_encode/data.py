"""Training data at scale: chat requests in, the rows TRL and axolotl train on out.

One row function (``encode_table``) does the work; it runs in-process, inside Hugging Face
``datasets.map`` (``encode_dataset``: one machine, ``num_proc`` processes) and inside Ray Data
(``EncodeBatches`` with ``map_batches``; ``encode_ray`` for read -> encode -> write). Whatever
runs it, row *i* of the output answers row *i* of the input: a request that cannot be encoded
keeps its row, with empty token lists and its ``error`` ("Type: message naming the field"),
and only a writer asked to (``drop_errors``) leaves such rows out, counting them.

The columns (``COLUMNS``), typed explicitly so that neither pyarrow's inference nor Ray's tensor
extension type ever sees a ragged numpy array:

- ``input_ids`` list<int32>
- ``assistant_masks`` list<int8>: TRL's name; TRL 1.16 applies such a column to its loss whenever
  present (and refuses ``assistant_only_loss=True`` on pre-tokenized rows, so this is the way)
- ``labels`` list<int32>: ``input_ids`` with -100 outside the mask (axolotl; TRL keeps a ready
  ``labels`` column as it is)
- ``attention_mask`` list<int8>: all ones (axolotl's pre-tokenized format asks for it)
- ``num_tokens`` int32, ``error`` string (null on a good row)

The request shape is the one ``qwen-encode encode`` reads (vLLM's tokenize chat request):
``messages``, ``tools``, ``add_generation_prompt``, ``continue_final_message``,
``chat_template_kwargs``, top-level ``reasoning_effort``. In Parquet, ``messages``, ``tools`` and
``chat_template_kwargs`` may be JSON text (one string per row), which survives Arrow unchanged.
As nested structs, Arrow fills every key missing from a row with null, which the protocol reads
as absent (as transformers does), but it also unions the keys of tool schemas and tool-call
arguments across rows: keep those as JSON strings.

This module imports numpy, pyarrow, datasets and ray only inside the functions that need them:
the command line loads it for every ``encode`` and ``render`` run.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from .batch import RecordError, encode_each, error_parts
from .chat_request import (
    IGNORED_REQUEST_FIELDS,
    REQUEST_FIELDS,
    TEMPLATE_KWARGS,
    request_options,
)
from .errors import PromptError, shown
from .files import atomic_path
from .json_text import JSONTextError, loads

if TYPE_CHECKING:
    import datasets
    import pyarrow as pa

    from .encoder import Encoder, EngineName, MarkersInText
    from .protocol import Prompt

__all__ = [
    "COLUMNS",
    "IGNORED_REQUEST_FIELDS",
    "REQUEST_FIELDS",
    "TEMPLATE_KWARGS",
    "ColumnSet",
    "EncodeBatches",
    "Summary",
    "count_rows",
    "encode_dataset",
    "encode_parquet",
    "encode_ray",
    "encode_requests",
    "encode_table",
    "kept_rows",
    "parquet_shards",
    "request_options",
    "summarize",
    "summarize_parquet",
    "write_parquet",
]

ColumnSet: TypeAlias = Literal["trl", "axolotl", "all"]

#: The output columns of each column set, in order; ``num_tokens`` and ``error`` are always there.
COLUMNS: Mapping[str, tuple[str, ...]] = {
    "trl": ("input_ids", "assistant_masks", "num_tokens", "error"),
    "axolotl": ("input_ids", "attention_mask", "labels", "num_tokens", "error"),
    "all": ("input_ids", "assistant_masks", "attention_mask", "labels", "num_tokens", "error"),
}

# The label transformers' and axolotl's losses ignore (torch's cross_entropy ignore_index).
IGNORE_INDEX = -100

# Rows per call of the row function: big enough that one engine call encodes many texts in
# parallel, small enough that a worker's memory stays flat.
DEFAULT_BATCH_ROWS = 512


# -- requests -> prompts ---------------------------------------------------------------------


def _row_prompt(row: dict[str, Any]) -> Prompt:
    """One table row -> its prompt; raises ``RecordError`` or a ``QwenEncodeError``."""
    from .protocol import format_prompt

    for name in ("messages", "tools", "chat_template_kwargs"):
        # JSON text in a string column: the way nested, heterogeneous values survive Parquet.
        if isinstance(row.get(name), str):
            try:
                row[name] = loads(row[name])
            except JSONTextError as error:
                raise RecordError(
                    "RequestError", f'"{name}" is not valid JSON text: {error.detail}'
                ) from None
    try:
        options = request_options(row)
    except PromptError as error:
        raise RecordError("RequestError", error.reason) from None
    return format_prompt(**options)


def _error_text(error: BaseException) -> str:
    kind, message = error_parts(error)
    return f"{kind}: {message}"


# -- the row function --------------------------------------------------------------------------


def _rows(batch: Any) -> list[dict[str, Any]]:
    """Request dicts from a pyarrow Table / RecordBatch or a dict of columns (datasets)."""
    import pyarrow as pa

    if isinstance(batch, pa.Table | pa.RecordBatch):
        names = [name for name in batch.schema.names if name in REQUEST_FIELDS]
        rows: list[dict[str, Any]] = batch.select(names).to_pylist()
        return rows
    if not isinstance(batch, Mapping):
        raise PromptError(
            f"expected a pyarrow Table or a dict of columns, got {type(batch).__name__}",
            field="batch",
        )
    lengths = set()
    for name, column in batch.items():
        length = _column_length(column)
        if length is None:
            raise PromptError(
                f"a column must be a list of values, got {type(column).__name__}",
                field=f"batch[{shown(name)}]",
            )
        lengths.add(length)
    if len(lengths) > 1:
        raise PromptError(f"columns of different lengths {sorted(lengths)}", field="batch")
    names = [name for name in batch if name in REQUEST_FIELDS]
    if not names:
        return [{} for _ in range(lengths.pop() if lengths else 0)]
    return [
        dict(zip(names, values, strict=True))
        for values in zip(*(batch[n] for n in names), strict=True)
    ]


def _column_length(column: Any) -> int | None:
    """The length of a column of a dict batch (a list, or the numpy array a formatted dataset
    passes), or None when it is not a column of values."""
    if isinstance(column, str | bytes | Mapping) or not isinstance(column, Iterable):
        return None
    if not isinstance(column, Sized):
        return None
    try:
        return len(column)
    except TypeError:  # a 0-d numpy array is Sized, but has no len()
        return None


def _check_columns(columns: str) -> tuple[str, ...]:
    if not isinstance(columns, str) or columns not in COLUMNS:
        raise PromptError(f"must be one of {tuple(COLUMNS)}, got {shown(columns)}", field="columns")
    return COLUMNS[columns]


# The largest row count or process count taken: datasets and pyarrow pass them on as C integers
# (2**63 raised OverflowError inside datasets.map), and no batch of rows reaches it.
_MAX_COUNT = 2**31 - 1


def _check_count(value: Any, name: str, *, optional: bool = False) -> None:
    """``value`` is a positive integer up to ``_MAX_COUNT`` (or None where ``optional``); else
    ``PromptError``."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_COUNT:
        expected = f"an integer from 1 to {_MAX_COUNT}" + (" or None" if optional else "")
        raise PromptError(f"must be {expected}, got {shown(value)}", field=name)


def _check_flags(**flags: Any) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise PromptError(f"must be a bool, got {shown(value)}", field=name)


def _check_path(value: Any, name: str) -> Path:
    if not isinstance(value, str | os.PathLike):
        raise PromptError(
            f"expected a path (a str or os.PathLike), got {type(value).__name__}", field=name
        )
    if not os.fspath(value).strip():
        # Path("") is the current directory: an unset variable would read or write shards there.
        raise PromptError(f"expected a path, got the empty string {value!r}", field=name)
    return Path(value)


def _check_encoder(encoder: Any) -> None:
    from .encoder import Encoder

    if not isinstance(encoder, Encoder):
        raise PromptError(f"expected an Encoder, got {type(encoder).__name__}", field="encoder")


def encode_table(encoder: Encoder, batch: Any, columns: ColumnSet = "trl") -> pa.Table:
    """The row function: a batch of requests (a pyarrow Table or RecordBatch, or a dict of
    columns as ``datasets.map(batched=True)`` passes it) -> a pyarrow Table of ``COLUMNS[columns]``
    with one row per input row, in order. Columns other than the request fields are ignored."""
    return encode_requests(encoder, _rows(batch), columns)


def encode_requests(
    encoder: Encoder, requests: Sequence[Any], columns: ColumnSet = "trl"
) -> pa.Table:
    """``encode_table`` for a list of requests (dicts in the ``qwen-encode encode`` shape). An
    item that is an exception stands for a row that already failed (a line that was not JSON):
    it is answered with its own error, in its place."""
    import numpy as np
    import pyarrow as pa

    _check_encoder(encoder)
    names = _check_columns(columns)
    if isinstance(requests, str | bytes | Mapping) or not isinstance(requests, Iterable):
        raise PromptError(
            f"expected a list of requests, got {type(requests).__name__}", field="requests"
        )
    rows = list(requests)
    errors: list[str | None] = [None] * len(rows)
    prompts: list[Prompt] = []
    where: list[int] = []
    for index, row in enumerate(rows):
        if isinstance(row, BaseException):
            errors[index] = _error_text(row)
            continue
        try:
            prompts.append(_row_prompt(row))
            where.append(index)
        except Exception as error:  # any bad row is answered in its row, never raised
            errors[index] = _error_text(error)
    ids: list[np.ndarray] = [np.zeros(0, dtype=np.int32)] * len(rows)
    masks: list[np.ndarray] = [np.zeros(0, dtype=bool)] * len(rows)
    for index, outcome in zip(where, encode_each(encoder, prompts), strict=True):
        if isinstance(outcome, BaseException):
            errors[index] = _error_text(outcome)
        else:
            ids[index], masks[index] = outcome.input_ids, outcome.assistant_mask
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # list<> offsets are int32: a batch past 2**31 tokens would need large_list (never seen in a
    # batch of rows; say so rather than wrap around).
    if offsets[-1] >= 2**31:
        raise PromptError(
            f"a batch of {len(rows)} rows holds {int(offsets[-1])} tokens, past list<int32>'s "
            "2**31 offsets; use fewer rows per batch",
            field="batch",
        )
    arrow_offsets = pa.array(offsets.astype(np.int32))
    flat_ids = np.concatenate(ids).astype(np.int32, copy=False) if ids else np.zeros(0, np.int32)
    flat_mask = np.concatenate(masks) if masks else np.zeros(0, dtype=bool)

    def lists(values: np.ndarray, kind: pa.DataType) -> pa.Array:
        return pa.ListArray.from_arrays(arrow_offsets, pa.array(values, type=kind))

    made: dict[str, Callable[[], pa.Array]] = {
        "input_ids": lambda: lists(flat_ids, pa.int32()),
        "assistant_masks": lambda: lists(flat_mask.astype(np.int8), pa.int8()),
        "labels": lambda: lists(np.where(flat_mask, flat_ids, IGNORE_INDEX), pa.int32()),
        "attention_mask": lambda: lists(np.ones(len(flat_ids), dtype=np.int8), pa.int8()),
        "num_tokens": lambda: pa.array(lengths.astype(np.int32), type=pa.int32()),
        "error": lambda: pa.array(errors, type=pa.string()),
    }
    return pa.table({name: made[name]() for name in names})


# -- summaries and writing ---------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """What a run produced: rows answered, tokens in good rows, error rows by error type, rows
    left out by ``drop_errors``, shards written and skipped (``resume``), and seconds taken."""

    rows: int = 0
    tokens: int = 0
    errors: Mapping[str, int] = field(default_factory=dict)
    dropped: int = 0
    shards_written: int = 0
    shards_skipped: int = 0
    seconds: float = 0.0

    @property
    def error_rows(self) -> int:
        return sum(self.errors.values())

    def __add__(self, other: Summary) -> Summary:
        errors = Counter(self.errors)
        errors.update(other.errors)
        return Summary(
            rows=self.rows + other.rows,
            tokens=self.tokens + other.tokens,
            errors=dict(errors),
            dropped=self.dropped + other.dropped,
            shards_written=self.shards_written + other.shards_written,
            shards_skipped=self.shards_skipped + other.shards_skipped,
            seconds=self.seconds + other.seconds,
        )


def summarize(table: pa.Table) -> Summary:
    """Rows, tokens and error rows by type of an encoded table."""
    import pyarrow.compute as pc

    errors: Counter[str] = Counter()
    failed = table.column("error").drop_null()
    if len(failed):
        kinds = pc.split_pattern(failed, ": ", max_splits=1)
        errors.update(str(parts[0]) for parts in kinds.to_pylist())
    tokens = pc.sum(table.column("num_tokens")).as_py() or 0
    return Summary(rows=table.num_rows, tokens=int(tokens), errors=dict(errors))


def kept_rows(table: pa.Table, drop_errors: bool) -> pa.Table:
    """``table`` without its error rows when ``drop_errors``, else unchanged."""
    if not drop_errors:
        return table
    import pyarrow.compute as pc

    return table.filter(pc.is_null(table.column("error")))


def write_parquet(table: pa.Table, path: str | os.PathLike[str]) -> None:
    """Write ``table`` to ``path`` atomically (temporary file beside it, then rename)."""
    import pyarrow.parquet as pq

    target = Path(path)
    with atomic_path(target) as tmp:
        pq.write_table(table, tmp)


# -- datasets ----------------------------------------------------------------------------------


def _encoder(source: Encoder | str | os.PathLike[str], **options: Any) -> Encoder:
    from .encoder import Encoder

    if isinstance(source, Encoder):
        return source
    return Encoder.from_pretrained(source, **options)


# The encoders of this process's EncodeBatches, by their token. A worker that ``datasets.map``
# forked from this process inherits this table: it finds its parent's encoder here and skips
# unpickling its own copy, which costs a worker about a second (Tokenizer.from_file parsing the
# 11 MB tokenizer.json) and was paid again for every map call, so for every shard of a folder.
# Weak values: a table entry never keeps an encoder alive.
_LOADED: weakref.WeakValueDictionary[str, Encoder] = weakref.WeakValueDictionary()


class EncodeBatches:
    """The row function as a callable that owns its encoder: for ``datasets.map`` (pickled to
    each of ``num_proc`` processes: a forked worker uses the encoder it inherited, a spawned one
    loads it once as it unpickles) and for Ray Data's ``map_batches`` (one per actor: Ray calls
    the constructor once per worker).

    ``source`` is an ``Encoder`` (it travels pickled: see ``Encoder.__reduce__``) or a checkpoint
    source, loaded here with ``options`` (``Encoder.from_pretrained``'s keywords)."""

    def __init__(
        self,
        source: Encoder | str | os.PathLike[str],
        columns: ColumnSet = "trl",
        **options: Any,
    ) -> None:
        _check_columns(columns)
        self.encoder = _encoder(source, **options)
        self.columns: ColumnSet = columns
        self._token = uuid.uuid4().hex
        self._pickled: bytes | None = None
        _LOADED[self._token] = self.encoder

    def __call__(self, batch: Any) -> pa.Table:
        return encode_table(self.encoder, batch, self.columns)

    def __reduce__(self) -> tuple[Any, ...]:
        # The encoder travels as bytes, so that unpickling them is left to _restore_batches,
        # which does it only where no inherited copy exists.
        if self._pickled is None:
            self._pickled = pickle.dumps(self.encoder, protocol=pickle.HIGHEST_PROTOCOL)
        return (_restore_batches, (self._token, self._pickled, self.columns))


def _restore_batches(token: str, pickled: bytes, columns: ColumnSet) -> EncodeBatches:
    encoder = _LOADED.get(token)
    if encoder is None:
        encoder = pickle.loads(pickled)
        _LOADED[token] = encoder
    restored = EncodeBatches.__new__(EncodeBatches)
    restored.encoder = encoder
    restored.columns = columns
    restored._token = token
    restored._pickled = pickled
    return restored


def encode_dataset(
    dataset: datasets.Dataset,
    source: Encoder | str | os.PathLike[str],
    *,
    num_proc: int | None = None,
    columns: ColumnSet = "trl",
    batch_size: int = DEFAULT_BATCH_ROWS,
    keep_columns: bool = False,
    markers_in_text: MarkersInText = "literal",
    engine: EngineName = "auto",
) -> datasets.Dataset:
    """Encode a Hugging Face ``datasets.Dataset`` of requests (the embedded default: one
    machine, ``num_proc`` processes, each loading the encoder once). Row *i* of the result
    answers row *i*; error rows are kept (filter on ``error`` to drop them). The request columns
    are removed unless ``keep_columns``. ``source`` is an ``Encoder`` or a checkpoint source
    (``markers_in_text`` and ``engine`` apply to the latter)."""
    import datasets

    if not isinstance(dataset, datasets.Dataset):
        raise PromptError(
            f"expected a datasets.Dataset, got {type(dataset).__name__}", field="dataset"
        )
    _check_count(num_proc, "num_proc", optional=True)
    _check_count(batch_size, "batch_size")
    _check_flags(keep_columns=keep_columns)
    function = EncodeBatches(source, columns, markers_in_text=markers_in_text, engine=engine)
    if keep_columns:
        clash = sorted(set(dataset.column_names) & set(COLUMNS[columns]))
        if clash:
            raise PromptError(
                f"the dataset already has column {clash[0]!r}; keep_columns would overwrite it",
                field="keep_columns",
            )

        def run(batch: Any) -> Any:
            return {**batch, **encode_table(function.encoder, batch, columns).to_pydict()}

        mapped: Callable[[Any], Any] = run
    else:
        mapped = function
    if len(dataset) == 0:
        # datasets.map never calls the function on no rows, which left no columns at all: a
        # filter on "error" then failed. The empty table has the columns, typed.
        table = encode_table(function.encoder, {}, columns)
        if keep_columns:
            kept = dataset.data.table
            for name in table.column_names:
                kept = kept.append_column(table.field(name), table.column(name))
            table = kept
        return datasets.Dataset(datasets.table.InMemoryTable(table))

    # An explicit fingerprint: hashing the function would pickle the encoder's packed files
    # (megabytes) for nothing, and say so in a warning when it cannot.
    report = function.encoder.report
    fingerprint = hashlib.sha256(
        json.dumps(
            [
                dataset._fingerprint,
                report.source,
                report.template_sha256,
                report.vocab_size,
                function.encoder.markers_in_text,
                columns,
                keep_columns,
            ]
        ).encode()
    ).hexdigest()[:32]
    return dataset.map(
        mapped,
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc if num_proc and num_proc > 1 else None,
        remove_columns=None if keep_columns else dataset.column_names,
        new_fingerprint=fingerprint,
        desc="qwen-encode",
    )


# -- Parquet folders ---------------------------------------------------------------------------


def parquet_shards(path: str | os.PathLike[str]) -> list[Path]:
    """The Parquet files of ``path``: the file itself, or a folder's ``*.parquet`` files in
    name order. Raises ``PromptError`` naming the path when there are none."""
    where = _check_path(path, "input")
    if where.is_file():
        return [where]
    if where.is_dir():
        shards = sorted(p for p in where.iterdir() if p.suffix == ".parquet" and p.is_file())
        if shards:
            return shards
        raise PromptError(f"{where}: a folder with no .parquet files", field="input")
    raise PromptError(f"{where}: no such file or folder", field="input")


def count_rows(path: str | os.PathLike[str]) -> int:
    """Rows in a Parquet file or folder of shards, from the files' footers (nothing is read)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(shard).metadata.num_rows for shard in parquet_shards(path))


def encode_parquet(
    source: Encoder | str | os.PathLike[str],
    inputs: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    num_proc: int | None = None,
    columns: ColumnSet = "trl",
    drop_errors: bool = False,
    resume: bool = False,
    batch_size: int = DEFAULT_BATCH_ROWS,
    progress: Callable[[Summary], None] | None = None,
    markers_in_text: MarkersInText = "literal",
    engine: EngineName = "auto",
) -> Summary:
    """A Parquet file -> a Parquet file, or a folder of shards -> a folder with one output shard
    of the same name per input shard. Each shard is written atomically; with ``resume`` a shard
    whose output already exists is skipped (it is whole: see ``qwen_encode.files.atomic_path``).
    ``num_proc`` > 1 encodes each shard with ``datasets`` in that many processes; otherwise in
    this process, one record batch at a time. ``progress`` is called with each batch's (or
    shard's) summary."""
    import pyarrow.parquet as pq

    started = time.monotonic()
    target = _check_path(output, "output")
    _check_columns(columns)
    _check_count(num_proc, "num_proc", optional=True)
    _check_count(batch_size, "batch_size")
    _check_flags(drop_errors=drop_errors, resume=resume)
    if progress is not None and not callable(progress):
        raise PromptError(f"must be a callable or None, got {shown(progress)}", field="progress")
    shards = parquet_shards(inputs)
    for shard in shards:
        _read_footer(shard)  # a file that is not Parquet is refused before anything is written
    if Path(inputs).is_dir():
        _make_folder(target)
        pairs = [(shard, target / shard.name) for shard in shards]
    else:
        if target.is_dir():
            raise PromptError(f"{target}: is a folder; the input is one file", field="output")
        _make_folder(target.parent)
        pairs = [(shards[0], target)]
    encoder = _encoder(source, markers_in_text=markers_in_text, engine=engine)
    total = Summary()
    for shard, out in pairs:
        if resume and out.is_file():
            total += Summary(shards_skipped=1)
            continue
        if num_proc is not None and num_proc > 1:
            import datasets

            # Memory-mapped Arrow files, not keep_in_memory: in memory, datasets pickles each
            # worker's rows to it and its token lists back through a pipe, in this process's one
            # thread (num_proc=2 scaled 1.42-1.97x that way, 1.78-2.06x mapped; see
            # docs/performance.md). The cache sits beside the output, on the disk that has room
            # for it, and goes with it.
            with tempfile.TemporaryDirectory(prefix=".qwen-encode-cache-", dir=out.parent) as cache:
                dataset = datasets.Dataset.from_parquet(str(shard), cache_dir=cache)
                encoded = encode_dataset(
                    dataset, encoder, num_proc=num_proc, columns=columns, batch_size=batch_size
                )
                table = encoded.data.table
                part = summarize(table)
                write_parquet(kept_rows(table, drop_errors), out)
                del dataset, encoded, table  # the files they map are deleted next
            part = _with(part, dropped=part.error_rows if drop_errors else 0, shards_written=1)
            if progress is not None:
                progress(part)
            total += part
            continue
        with atomic_path(out) as tmp:
            writer = None
            shard_total = Summary()
            for batch in _read_batches(shard, batch_size):
                table = encode_table(encoder, batch, columns)
                part = summarize(table)
                kept = kept_rows(table, drop_errors)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, kept.schema)
                writer.write_table(kept)
                part = _with(part, dropped=part.error_rows if drop_errors else 0)
                if progress is not None:
                    progress(part)
                shard_total += part
            if writer is None:  # an empty shard still gets its (empty) output
                writer = pq.ParquetWriter(tmp, encode_table(encoder, {}, columns).schema)
            writer.close()
        total += _with(shard_total, shards_written=1)
    return _with(total, seconds=time.monotonic() - started)


def _unreadable(shard: Path, error: Exception) -> PromptError:
    return PromptError(f"{shard}: not a readable Parquet file ({error})", field="input")


def _read_footer(shard: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(shard)
    except (pa.ArrowException, OSError) as error:
        raise _unreadable(shard, error) from None


def _read_batches(shard: Path, batch_size: int) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        yield from pq.ParquetFile(shard).iter_batches(batch_size=batch_size)
    except (pa.ArrowException, OSError) as error:  # a footer that reads, pages that do not
        raise _unreadable(shard, error) from None


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a file in the way, or no permission
        raise PromptError(
            f"{folder}: cannot make the output folder ({error.strerror or error})", field="output"
        ) from None


def _with(summary: Summary, **changes: Any) -> Summary:
    import dataclasses

    return dataclasses.replace(summary, **changes)


# -- Ray Data ----------------------------------------------------------------------------------


class _RayEncodeBatches(EncodeBatches):
    """``EncodeBatches`` as one of ``encode_ray``'s actors, each given its share of a node's
    CPUs (one core's worth at most): HF tokenizers would otherwise start a BPE thread per core
    of the node in every actor, N actors x N threads (what datasets prevents in its forked
    workers by setting the same variable). The actor's process is its own, so this is local."""

    def __init__(self, source: Encoder, columns: ColumnSet) -> None:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        super().__init__(source, columns)


def encode_ray(
    source: Encoder | str | os.PathLike[str],
    inputs: str | os.PathLike[str] | Sequence[str],
    output: str | os.PathLike[str],
    *,
    columns: ColumnSet = "trl",
    drop_errors: bool = False,
    actors: int | None = None,
    batch_size: int = DEFAULT_BATCH_ROWS,
    address: str | None = None,
    markers_in_text: MarkersInText = "literal",
    engine: EngineName = "auto",
) -> Summary:
    """``read_parquet -> map_batches(EncodeBatches) -> write_parquet`` with Ray Data, on the
    cluster at ``address`` (or the one this process is already connected to), else a local Ray
    with every core of this machine.

    Resources are set so the read tasks always get a slot: with actors at 1 CPU each on a 2-CPU
    machine, two actors held every CPU and the read tasks that feed them waited forever (a hang
    seen on a 2-core machine). Here the actors ask for every CPU but one between them (see
    below); ``actors`` defaults to the cluster's CPU count.

    The output folder appears whole or not at all: Ray writes into a staging folder beside it,
    renamed into place when every task has finished. ``inputs`` is a Parquet file, a folder or a
    list of paths Ray can read (local, ``s3://``, ...)."""
    import ray

    started = time.monotonic()
    # Every argument is checked before a cluster is started or joined.
    _check_columns(columns)
    _check_count(actors, "actors", optional=True)
    _check_count(batch_size, "batch_size")
    _check_flags(drop_errors=drop_errors)
    target = _check_path(output, "output")
    if isinstance(inputs, list | tuple):
        for position, path in enumerate(inputs):
            _check_path(path, f"inputs[{position}]")
    else:
        _check_path(inputs, "inputs")
    if address is not None and not isinstance(address, str):
        raise PromptError(f"must be a str or None, got {shown(address)}", field="address")
    if not ray.is_initialized():
        if address is not None:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(include_dashboard=False, log_to_driver=False)
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    count = actors if actors is not None else cpus
    # The actors together hold every CPU but one, so a 1-CPU task (listing files, reading a
    # shard, writing one) can always be scheduled beside them; their real use is a core each.
    actor_cpus = max(0.0, cpus - 1.0) / count
    encoder = _encoder(source, markers_in_text=markers_in_text, engine=engine)
    paths = [str(p) for p in inputs] if isinstance(inputs, list | tuple) else str(inputs)
    context = ray.data.DataContext.get_current()
    settings = {
        # Row i of the output answers row i of the input: Ray Data reorders blocks unless told
        # not to (and write_parquet names its files by task index, in that order).
        "preserve_order": (context.execution_options, True),
        # Ray 2.60 reads Parquet through "datasource V2" by default: its listing starts 32
        # footer-reader actors (RAY_DATA_PARQUET_FOOTER_NUM_ACTORS) and it packs small files
        # into one read task. On 2 CPUs the listing alone took 5.5 s, then every actor waited
        # for the one task reading every shard. V1 (what older Rays have, without this
        # setting) gives a read task per file and splits its output into small blocks inside
        # that task, which map_batches bundles into batches of batch_size rows, so the actors
        # share the work without a repartition stage (whose 1-CPU tasks queued by the dozen
        # for the one CPU the actors leave free).
        "use_datasource_v2": (context, False),
    }
    previous = {
        name: getattr(owner, name) for name, (owner, _) in settings.items() if hasattr(owner, name)
    }
    for name, (owner, value) in settings.items():
        if name in previous:
            setattr(owner, name, value)
    dataset = ray.data.read_parquet(paths)
    encoded = dataset.map_batches(
        _RayEncodeBatches,
        fn_constructor_args=(encoder, columns),
        batch_format="pyarrow",
        batch_size=batch_size,
        # One block in flight per actor: with the default (several), the first actor to start
        # took every block queued so far and Ray stopped the second as idle ("consumed all
        # inputs"), so one actor encoded the whole input while a CPU stood idle.
        compute=ray.data.ActorPoolStrategy(size=count, max_tasks_in_flight_per_actor=1),
        num_cpus=actor_cpus,
        zero_copy_batch=True,
    )
    if drop_errors:
        encoded = encoded.filter(expr="error is null")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        encoded.write_parquet(str(staging))
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        for name, value in previous.items():
            setattr(settings[name][0], name, value)
    return _with(summarize_parquet(target), seconds=time.monotonic() - started)


def summarize_parquet(path: str | os.PathLike[str]) -> Summary:
    """The summary of encoded Parquet output (a file or a folder of shards), read back from its
    ``num_tokens`` and ``error`` columns only."""
    import pyarrow.parquet as pq

    total = Summary()
    for shard in parquet_shards(path):
        total += _with(
            summarize(pq.read_table(shard, columns=["num_tokens", "error"])), shards_written=1
        )
    return total


# RL trajectory rows live in their own module (this one is about SFT requests); reachable from
# here too, loaded only when asked for.
def __getattr__(name: str) -> Any:
    from . import trajectories

    if name in trajectories.__all__:
        return getattr(trajectories, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
