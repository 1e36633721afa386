"""How close qwen-encode can come to the engine on the benchmark corpus, with one encoder alone in
the process (the bench holds three, which slow each other's engine).

For each step: wall time, CPU time of every thread of the process, and the calling thread's own
CPU time, in µs a conversation, and the share of the engine limit (fastokens ``encode_batch_flat``
on every rendered conversation in one call) with the share the step's CPU time allows at most on
this machine's cores (wall >= CPU / cores). Steps: the limit; the engine alone with a call per
conversation in the pieces a request hands it (``_for_threads``: the ceiling of "per
conversation"); ``format_prompt``; ``encode_batch`` on prompts rendered before; end to end
batched; end to end per conversation (``encode_messages``). Medians of ``--runs`` alternating
runs, the run cache cleared before each.

    .venv/bin/python scripts/corpus_ceiling.py [--conversations 300] [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench import make_corpus  # noqa: E402

import qwen_encode as qe  # noqa: E402
from qwen_encode.encoder_whole import _THREADS, _for_threads  # noqa: E402

LIMIT = "engine limit (one call)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(ROOT.parent / "shared/checkpoints/qwen3.8-27b"))
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    corpus = make_corpus(args.conversations)
    encoder = qe.Encoder.from_pretrained(args.model, engine="fastokens")
    if encoder.engine != "fastokens":
        sys.exit("fastokens is not available: the limit is a fastokens call")
    engine = encoder._engine.tokenizer  # type: ignore[attr-defined]

    def prompts() -> list[qe.Prompt]:
        return [
            qe.format_prompt(c["messages"], tools=c["tools"], add_generation_prompt=False)
            for c in corpus
        ]

    ready = prompts()
    rendered = [prompt.text for prompt in ready]
    requests = [_for_threads([text])[0] for text in rendered]
    steps: dict[str, Callable[[], object]] = {
        LIMIT: lambda: engine.encode_batch_flat(rendered),
        "engine alone, a call per conversation": lambda: [
            engine.encode_batch_flat(pieces) for pieces in requests
        ],
        "format_prompt": prompts,
        "encode_batch, rendered before": lambda: encoder.encode_batch(ready),
        "end to end, batched": lambda: encoder.encode_batch(prompts()),
        "end to end, per conversation": lambda: [
            encoder.encode_messages(c["messages"], tools=c["tools"], add_generation_prompt=False)
            for c in corpus
        ],
    }
    engine.encode_batch_flat(rendered)  # the engine's word cache warm, as for every step after
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in steps}
    for _ in range(args.runs):
        for name, step in steps.items():
            encoder.clear_cache()
            wall, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
            step()
            times[name].append(
                (time.perf_counter() - wall, time.process_time() - cpu, time.thread_time() - own)
            )
    cores = _THREADS  # the cores this process may run on, as the encoder counts them
    per = 1e6 / len(corpus)
    medians = {
        name: [statistics.median(column) * per for column in zip(*rows, strict=True)]
        for name, rows in times.items()
    }
    limit = medians[LIMIT][0]
    print(
        f"{len(corpus)} conversations, {sum(map(len, rendered)) / len(corpus):.0f} characters "
        f"each, {cores} cores, load {os.getloadavg()[0]:.2f}, medians of {args.runs} runs; "
        "µs a conversation"
    )
    print(f"  {'step':<40} {'wall':>7} {'cpu':>7} {'caller':>7}  share (at most)")
    for name, (wall, cpu, own) in medians.items():
        ceiling = limit / (cpu / (cores or 1)) if cpu > 0 else float("inf")
        print(
            f"  {name:<40} {wall:7.1f} {cpu:7.1f} {own:7.1f}  "
            f"{limit / wall:5.2f} ({min(ceiling, 99):4.2f})"
        )


if __name__ == "__main__":
    main()
