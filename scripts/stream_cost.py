"""Measure StreamParser's cost per token: it must stay flat as the completion grows (no rescans).

Feeds generated completions of 10k, 100k and 1M tokens (reasoning, then content paragraphs and
tool calls with multi-line string and JSON values) one token at a time, and prints the median
µs/token over several runs and its ratio to the smallest size. Two input kinds:

* ``text``: token-sized text deltas (the Qwen 3.8 tokenizer's own token boundaries when
  ../shared/checkpoints is present, else 4-character slices);
* ``ids``: token IDs, decoded by the real tokenizer (needs ../shared/checkpoints).

Four shapes (``--shapes``): ``plain`` (the above), ``markup`` (every written file documents the
call format: its value holds complete example calls, closers and junctions, all data),
``unwrapped`` (calls without the ``<tool_call>`` wrapper after content lines that could open one,
each writing a file that quotes a complete call to the same tool), and ``spaces`` (once
quadratic: whitespace inside an open call, then a nested ``<tool_call>``; it ends in a ParseError,
the cost of finding out is what is measured).

    .venv/bin/python scripts/stream_cost.py [--sizes 10000 100000 1000000] [--runs 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qwen_encode import markers as mk
from qwen_encode.errors import ParseError
from qwen_encode.parser import StreamParser

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT.parent / "shared" / "checkpoints" / "qwen3.8-27b" / "tokenizer.json"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                    "options": {"type": "object"},
                    "retries": {"type": "integer"},
                },
            },
        },
    }
]

REASONING = (
    "The user wants the report in São Paulo's format 🌦️; if x < 5 we keep <b>bold</b> "
    "headers, otherwise plain. Let me weigh both options carefully before answering.\n"
)
CONTENT = "Here is the next part of the file — 日本語のテキストも含めて書きます.\n\n"
CALL = (
    mk.TOOL_CALL_OPEN + "\n<function=write_file>\n<parameter=path>\n/tmp/out.py\n</parameter>\n"
    "<parameter=content>\ndef f(x):\n    if x < 5:\n        return '<tag>'\n    return x\n"
    '</parameter>\n<parameter=options>\n{"mode": "w", "encoding": "utf-8"}\n</parameter>\n'
    "<parameter=retries>\n3\n</parameter>\n</function>\n" + mk.TOOL_CALL_CLOSE + "\n"
)


MARKUP_CALL = (
    mk.TOOL_CALL_OPEN + "\n<function=write_file>\n<parameter=path>\ndocs/format.md\n</parameter>\n"
    "<parameter=content>\n# Calls\nInline: <tool_call><function=demo></function></tool_call>.\n"
    "Example:\n<tool_call>\n<function=demo>\n<parameter=x>\n1\n</parameter>\n"
    "<parameter=y>\n</parameter>\n</function>\n</tool_call>\nEnd.\n</parameter>\n"
    "<parameter=retries>\n3\n</parameter>\n</function>\n" + mk.TOOL_CALL_CLOSE + "\n"
)
# A call without the <tool_call> wrapper, after content lines that could open one
# until their last characters (held back, then released), writing a file that quotes a complete
# call to the same tool (the junction balance decides which "<parameter=content>" is real).
UNWRAPPED_CALL = (
    "<function=write_files>\n<function=write_fil\n"
    "<function=write_file>\n<parameter=path>\ndocs/same.md\n</parameter>\n<parameter=content>\n"
    "Example:\n<tool_call>\n<function=write_file>\n<parameter=path>\nx.txt\n</parameter>\n"
    "<parameter=content>\nhi\n</parameter>\n</function>\n</tool_call>\nEnd.\n</parameter>\n"
    "</function>\n"
)
SPACES_HEAD = mk.THINK_CLOSE + mk.TOOL_CALL_OPEN + "\n<function=f>\n"
SPACES_TAIL = mk.TOOL_CALL_OPEN + "\n<function=g>\n</function>\n" + mk.TOOL_CALL_CLOSE


class _Tokens:
    """Token streams for the blocks, from the real tokenizer or by slicing."""

    def __init__(self) -> None:
        self.tokenizer: Any = None
        if TOKENIZER.exists():
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(TOKENIZER))

    def text_tokens(self, block: str) -> list[str]:
        if self.tokenizer is None:
            return [block[i : i + 4] for i in range(0, len(block), 4)]
        encoding = self.tokenizer.encode(block, add_special_tokens=False)
        return [block[a:b] for a, b in encoding.offsets]

    def id_tokens(self, block: str) -> list[int]:
        return list(self.tokenizer.encode(block, add_special_tokens=False).ids)

    def encoder(self) -> Any:
        tokenizer = self.tokenizer

        class Encoder:
            def __init__(self) -> None:
                self.marker_ids = {m: tokenizer.token_to_id(m) for m in mk.ALL_ADDED_TOKENS}

            def decode(self, ids: Sequence[int]) -> str:
                return tokenizer.decode(list(ids), skip_special_tokens=False)

        return Encoder()


def completion(tokens: _Tokens, size: int, kind: str, shape: str) -> tuple[list[Any], int | None]:
    """A completion of ``size`` tokens: 30% reasoning, then content and calls; and its calls
    (None: the shape ends in a ParseError)."""
    split = tokens.text_tokens if kind == "text" else tokens.id_tokens
    if shape == "spaces":
        head, tail = split(SPACES_HEAD), split(SPACES_TAIL)
        space = split(" ")
        return head + space * (size - len(head) - len(tail)) + tail, None
    block = {"markup": MARKUP_CALL, "unwrapped": UNWRAPPED_CALL}.get(shape, CALL)
    reasoning, close, content, call = (
        split(b) for b in (REASONING, mk.THINK_CLOSE + "\n\n", CONTENT, block)
    )
    out: list[Any] = []
    while len(out) < size * 3 // 10:
        out += reasoning
    out += close
    calls = 0
    while len(out) + len(content) + len(call) <= size:
        out += content + call
        calls += 1
    while len(out) < size:
        out += content
    return out[:size], calls


def measure(tokens: list[Any], calls: int | None, encoder: Any, runs: int) -> float:
    """Median µs per token of feeding ``tokens`` one at a time, then finishing."""
    timings = []
    for _ in range(runs):
        parser = StreamParser(tools=TOOLS, encoder=encoder)
        wrap = (lambda t: [t]) if encoder is not None else (lambda t: t)
        deltas = [wrap(t) for t in tokens]
        gc.collect()
        start = time.perf_counter()
        try:
            for delta in deltas:
                parser.feed(delta)
            got: int | None = len(parser.finish().tool_calls)
        except ParseError:
            got = None
        elapsed = time.perf_counter() - start
        if got != calls:
            raise SystemExit(f"parsed {got} calls, expected {calls}")
        timings.append(elapsed / len(tokens) * 1e6)
    return statistics.median(timings)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--runs", type=int, default=5, help="runs of the largest size")
    parser.add_argument(
        "--budget",
        type=int,
        default=1_000_000,
        help="smaller sizes get more runs, up to this many tokens in all (steadier medians)",
    )
    parser.add_argument("--mode", choices=["text", "ids", "both"], default="both")
    parser.add_argument(
        "--shapes",
        nargs="+",
        choices=["plain", "markup", "unwrapped", "spaces"],
        default=["plain", "markup", "unwrapped"],
    )
    args = parser.parse_args(argv)

    tokens = _Tokens()
    kinds = ["text", "ids"] if args.mode == "both" else [args.mode]
    if "ids" in kinds and tokens.tokenizer is None:
        print(f"{TOKENIZER} is absent: measuring text deltas only", file=sys.stderr)
        kinds = [k for k in kinds if k != "ids"]
    source = "Qwen 3.8 tokenizer" if tokens.tokenizer is not None else "4-character slices"
    print(f"StreamParser cost, one token per feed(), median of >= {args.runs} runs ({source})")
    for shape in args.shapes:
        for kind in kinds:
            encoder = tokens.encoder() if kind == "ids" else None
            base: float | None = None
            for size in args.sizes:
                stream, calls = completion(tokens, size, kind, shape)
                runs = max(args.runs, args.budget // size)
                us = measure(stream, calls, encoder, runs)
                base = base or us
                shown = "error" if calls is None else f"{calls:,}"
                print(
                    f"  {shape:6} {kind:4}  {size:>9,} tokens  {shown:>6} calls  {runs:>3} runs  "
                    f"{us:6.2f} µs/token  x{us / base:.2f} vs {args.sizes[0]:,}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
