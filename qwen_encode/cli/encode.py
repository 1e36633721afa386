"""``qwen-encode encode``: chat requests (JSON Lines or Parquet) -> token IDs.

JSON Lines out (or padded NumPy arrays) line for line here; Parquet training rows are the work
of ``qwen_encode.data``, which this module calls with the parsed options.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from ..batch import encode_each
from ..chat_request import TEMPLATE_KWARGS
from ..errors import PromptError
from .common import (
    DEFAULT_BATCH,
    DEFAULT_MODEL,
    EXIT_LINES_FAILED,
    EXIT_OK,
    PROG,
    TINY_FIXTURE,
    Request,
    UsageError,
    add_io,
    add_model,
    chat_request,
    load_encoder,
    warn,
)
from .lines import Line, Tally, error_record, line_job
from .output import AtomicOutput, dump
from .progress import Progress
from .types import CLISubcommand

if TYPE_CHECKING:
    from ..encoder import Encoder, Encoding

__all__ = ["cmd_encode", "cmd_init"]

ENCODE_HELP = f"""\
Encode chat requests to token IDs, exactly as the checkpoint's chat template + tokenizer would.

INPUT is JSON Lines (default: stdin), one request per line in the shape of vLLM's /tokenize chat
request: "messages", "tools", "add_generation_prompt" (default true), "continue_final_message",
"chat_template_kwargs" ({", ".join(TEMPLATE_KWARGS[:2])},
{", ".join(TEMPLATE_KWARGS[2:])}) and a top-level "reasoning_effort" as OpenAI clients send it.
"return_token_strs": true adds "token_strs" (vLLM's token strings) to the answer.
"model", "add_special_tokens" and "mm_processor_kwargs" are accepted and do not change the IDs;
other unknown fields are ignored with a warning; unknown chat_template_kwargs are an error.

Output line i answers input line i:
  {{"input_ids": [...], "num_tokens": n}}            (+ "assistant_mask": [0/1...] if asked)
  {{"error": {{"type": ..., "message": ..., "line": i}}}}   (a bad line, in place)
A blank line is an error line too (dropping it would shift every later answer).
Exit 1 when any line failed (summary on stderr), 2 for usage errors, 0 otherwise
(130, 143, 129 after SIGINT, SIGTERM, SIGHUP: no partial output file is left).

--format npz writes padded arrays input_ids, attention_mask, assistant_mask (one row per
successful line, right-padded with <|endoftext|>) and "line": the 1-based input line of each
row, since failed lines have no row (their errors go to stderr).

--format parquet writes training rows (docs: guide/training-data.md): input_ids list<int32>, and by
--columns assistant_masks list<int8> (TRL), attention_mask and labels (-100 outside the mask,
axolotl), plus num_tokens and error (null, or "Type: message"). Row i answers request i; an
error row keeps its place with empty lists unless --drop-errors. INPUT may then also be a
.parquet file or a folder of shards (one output shard of the same name each, in the -o folder,
each written atomically); --num-proc N uses datasets, --ray [ADDRESS] Ray Data. A summary
(rows, tokens, error rows by type, time) goes to stderr; exit 1 when any row failed.
"""

ENCODE_EXAMPLE = f"""\
examples:
  {PROG} encode --model {TINY_FIXTURE} examples/chat.jsonl
  {PROG} encode --model {DEFAULT_MODEL} requests.jsonl -o ids.jsonl --assistant-mask
  {PROG} encode --model ./my-checkpoint train.jsonl --format npz -o train.npz
  echo '{{"messages": [{{"role": "user", "content": "Hi"}}]}}' | {PROG} encode --model ./ckpt
  {PROG} encode --model ./ckpt chats/ --format parquet -o rows/ --num-proc 8 --resume
  {PROG} encode --model ./ckpt s3://bucket/chats/ --format parquet -o rows/ --ray auto
"""


# One answered line: (line number, error record or None, encoding or None, token_strs).
Answer: TypeAlias = tuple[int, dict[str, Any] | None, "Encoding | None", bool]


def _encode_chunk(encoder: Encoder, chunk: list[Line], tally: Tally) -> list[Answer]:
    """(line, error record or None, encoding or None, token_strs) for each line of a chunk."""
    requests: list[Request | None] = []
    errors: list[dict[str, Any] | None] = []
    for line in chunk:
        if line.error is not None:
            requests.append(None)
            errors.append(error_record(line.error, line.number))
            continue
        try:
            requests.append(chat_request(line.value, tally.ignoring(line.number)))
            errors.append(None)
        except Exception as bad:  # any bad input is reported in place, never a traceback
            requests.append(None)
            errors.append(error_record(bad, line.number))
    encoded = iter(encode_each(encoder, [r.prompt for r in requests if r is not None]))
    results: list[Answer] = []
    for line, request, error in zip(chunk, requests, errors, strict=True):
        if request is None:
            results.append((line.number, error, None, False))
            continue
        outcome = next(encoded)
        if isinstance(outcome, Exception):
            results.append((line.number, error_record(outcome, line.number), None, False))
        else:
            results.append((line.number, None, outcome, request.token_strs))
    return results


def is_parquet(path: str) -> bool:
    return path != "-" and (path.endswith(".parquet") or Path(path).is_dir())


def _check_line_options(args: argparse.Namespace) -> None:
    """JSON Lines or npz output: the Parquet-only options are refused, binary output needs -o."""
    for option, given in (
        ("--num-proc", args.num_proc),
        ("--ray", args.ray),
        ("--resume", args.resume or None),
        ("--drop-errors", args.drop_errors or None),
    ):
        if given is not None:
            raise UsageError(f"{option} applies to --format parquet")
    if args.format == "npz" and args.output in (None, "-") and sys.stdout.isatty():
        raise UsageError("--format npz writes binary data: pass -o FILE.npz (or redirect stdout)")


def cmd_encode(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    if args.num_proc is not None and args.num_proc < 1:
        raise UsageError("--num-proc must be at least 1")
    parquet_in = is_parquet(args.input)
    if args.format == "parquet" or parquet_in:
        return _encode_parquet(args, parquet_in)
    _check_line_options(args)
    encoder = load_encoder(args.model, args.markers_in_text)
    tally = Tally("encode")
    rows: list[Encoding] = []
    row_lines: list[int] = []
    with line_job(args, "encode", args.batch_size) as (chunks, output, progress):
        for chunk in chunks:
            for number, error, encoding, token_strs in _encode_chunk(encoder, chunk, tally):
                if encoding is None:
                    assert error is not None
                    tally.record(error, number)
                    if args.format == "jsonl":
                        output.write(dump(error))
                    else:
                        # An npz has no row for a failed line: say which, here, line by line.
                        e = error["error"]
                        warn(f"encode: line {number}: {e['type']}: {e['message']}")
                    continue
                record = _encoding_record(encoder, encoding, args.assistant_mask, token_strs)
                tally.record(record, number)
                if args.format == "jsonl":
                    output.write(dump(record))
                else:
                    rows.append(encoding)
                    row_lines.append(number)
            progress.lines_done(len(chunk))
            output.flush()
        if args.format == "npz":
            _write_npz(output, encoder, rows, row_lines)
        output.commit()
    return tally.report()


def _encode_parquet(args: argparse.Namespace, parquet_in: bool) -> int:
    """Parquet out (from Parquet or JSON Lines in): the work is qwen_encode.data's; this parses
    options, shows progress and prints the summary."""
    import importlib.util

    from .. import data

    if importlib.util.find_spec("pyarrow") is None:
        raise UsageError("--format parquet needs pyarrow: pip install 'qwen-encode[data]'")
    if args.format != "parquet":
        raise UsageError("Parquet input is written as Parquet: pass --format parquet")
    if args.output in (None, "-"):
        raise UsageError("--format parquet writes files: pass -o FILE.parquet (or -o FOLDER)")
    if not parquet_in and (args.num_proc is not None or args.ray is not None or args.resume):
        raise UsageError("--num-proc, --ray and --resume read Parquet input (a file or a folder)")
    if args.ray is not None and args.resume:
        # Ray's write_parquet names its files by task, not by input shard, so no output file
        # stands for a finished input shard; the folder is staged and appears whole instead.
        raise UsageError(
            "--resume does not apply to --ray: a Ray run writes its output folder whole (staged, "
            "renamed at the end), so there are no finished shards to skip; rerun without "
            "--resume, or use --num-proc N, which writes and resumes shard by shard"
        )
    encoder = load_encoder(args.model, args.markers_in_text)
    started = time.monotonic()
    enabled = not args.no_progress and sys.stderr.isatty()
    try:
        if not parquet_in:
            summary = _jsonl_to_parquet(args, encoder)
        elif args.ray is not None:
            summary = data.encode_ray(
                encoder,
                args.input,
                args.output,
                columns=args.columns,
                drop_errors=args.drop_errors,
                batch_size=args.batch_size,
                address=None if args.ray == "local" else args.ray,
            )
        else:
            if args.num_proc is not None and args.num_proc > 1:
                import datasets

                datasets.disable_progress_bars()  # ours counts rows and tokens over all shards
            progress = Progress("encode", data.count_rows(args.input), enabled, unit="rows")
            try:
                summary = data.encode_parquet(
                    encoder,
                    args.input,
                    args.output,
                    num_proc=args.num_proc,
                    columns=args.columns,
                    drop_errors=args.drop_errors,
                    resume=args.resume,
                    batch_size=args.batch_size,
                    progress=lambda part: progress.lines_done(part.rows, part.tokens),
                )
            finally:
                progress.close()
    except PromptError as error:  # an input or output path that cannot be used
        raise UsageError(str(error)) from None
    _report_summary(summary, time.monotonic() - started)
    return EXIT_LINES_FAILED if summary.error_rows else EXIT_OK


def _jsonl_to_parquet(args: argparse.Namespace, encoder: Encoder) -> Any:
    import pyarrow.parquet as pq

    from .. import data

    total = data.Summary()
    with line_job(args, "encode", args.batch_size) as (chunks, output, progress):
        writer = None
        for chunk in chunks:
            requests = [line.value if line.error is None else line.error for line in chunk]
            table = data.encode_requests(encoder, requests, args.columns)
            part = data.summarize(table)
            if writer is None:
                writer = pq.ParquetWriter(output.stream, table.schema)
            writer.write_table(data.kept_rows(table, args.drop_errors))
            total += part
            progress.lines_done(part.rows, part.tokens)
        if writer is None:
            writer = pq.ParquetWriter(
                output.stream, data.encode_requests(encoder, [], args.columns).schema
            )
        writer.close()
        output.commit()
    if args.drop_errors:
        total = dataclasses.replace(total, dropped=total.error_rows)
    return dataclasses.replace(total, shards_written=1)


def _report_summary(summary: Any, seconds: float) -> None:
    kinds = ", ".join(f"{kind} {count:,}" for kind, count in sorted(summary.errors.items()))
    errors = f"{summary.error_rows:,} error rows" + (f" ({kinds})" if kinds else "")
    if summary.dropped:
        errors += f", {summary.dropped:,} dropped (--drop-errors)"
    shards = f"{summary.shards_written:,} shards written"
    if summary.shards_skipped:
        shards += f", {summary.shards_skipped:,} skipped (--resume)"
    rate = summary.tokens / seconds if seconds > 0 else 0.0
    warn(
        f"encode: {summary.rows:,} rows, {summary.tokens:,} tokens, {errors}; {shards}; "
        f"{seconds:.1f} s ({rate:,.0f} tokens/s)"
    )


def _encoding_record(
    encoder: Encoder, encoding: Encoding, assistant_mask: bool, token_strs: bool
) -> dict[str, Any]:
    ids = encoding.input_ids.tolist()
    record: dict[str, Any] = {"input_ids": ids, "num_tokens": len(ids)}
    if assistant_mask:
        record["assistant_mask"] = encoding.assistant_mask.astype("int8").tolist()
    if token_strs:
        to_token = encoder.vocabulary.tokenizer.id_to_token
        record["token_strs"] = [to_token(i) for i in ids]
    return record


def _write_npz(
    output: AtomicOutput, encoder: Encoder, rows: list[Encoding], row_lines: list[int]
) -> None:
    import numpy as np

    padded = encoder.pad(rows, side="right")
    buffer = io.BytesIO()  # zip needs a seekable file; stdout may be a pipe
    np.savez_compressed(
        buffer,
        input_ids=padded["input_ids"],
        attention_mask=padded["attention_mask"],
        assistant_mask=padded["assistant_mask"].astype(np.int8),
        line=np.asarray(row_lines, dtype=np.int64),
    )
    output.write(buffer.getvalue())


def _add_arguments(encode: argparse.ArgumentParser) -> None:
    add_io(encode)
    add_model(encode, DEFAULT_MODEL, f"default {DEFAULT_MODEL}")
    encode.add_argument(
        "--markers-in-text",
        choices=("literal", "reject", "atomic"),
        default="literal",
        help="caller text spelling a control token: encode it as text (default), fail the line, "
        "or make it the control token as transformers does",
    )
    encode.add_argument(
        "--assistant-mask",
        action="store_true",
        help="add assistant_mask (1 on the tokens a fine-tuning run trains on)",
    )
    encode.add_argument(
        "--format",
        choices=("jsonl", "npz", "parquet"),
        default="jsonl",
        help="JSON Lines (default), padded NumPy arrays, or Parquet training rows (see above)",
    )
    encode.add_argument(
        "--columns",
        choices=("trl", "axolotl", "all"),
        default="trl",
        help="Parquet columns: trl (input_ids, assistant_masks), axolotl (input_ids, "
        "attention_mask, labels), all; num_tokens and error always",
    )
    encode.add_argument(
        "--num-proc",
        type=int,
        metavar="N",
        help="Parquet input: encode with Hugging Face datasets in N processes",
    )
    encode.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="Parquet input: encode with Ray Data on the cluster at ADDRESS (local Ray if none)",
    )
    encode.add_argument(
        "--resume",
        action="store_true",
        help="Parquet folder input: skip shards whose output already exists (they are whole)",
    )
    encode.add_argument(
        "--drop-errors",
        action="store_true",
        help="Parquet output: leave error rows out (they are counted in the summary)",
    )
    encode.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"lines per parallel encoding batch (default {DEFAULT_BATCH})",
    )


def cmd_init() -> list[CLISubcommand]:
    return [
        CLISubcommand(
            "encode",
            "chat requests (JSONL) -> token IDs",
            ENCODE_HELP,
            ENCODE_EXAMPLE,
            add_arguments=_add_arguments,
            cmd=cmd_encode,
        )
    ]
