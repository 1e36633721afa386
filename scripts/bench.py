"""Benchmark: qwen-encode against transformers and raw tokenizers, in one process.

    python scripts/bench.py [--model ../shared/checkpoints/qwen3.8-27b] [--conversations 1000]
                            [--runs 5] [--skip-cold] [--chat-turns 2000] [--only-long-chat]
                            [--only-throughput] [--skip-threads]
    python scripts/bench.py --only-data --runs 3     # section 7 (needs [data]; Ray: [ray])

Prints tokens/s, medians of ``--runs`` alternating runs, and ratios against transformers'
``apply_chat_template(tokenize=True)``, plus the commit measured. Sections:
1. transformers apply_chat_template(tokenize=True), per conversation
2. tokenizers encode_batch on the pre-rendered strings
3. rendering alone, and per engine (and, for fastokens, in literal and atomic mode) qwen-encode
   per conversation, batched (rendering included) and encode_batch on prompts rendered
   beforehand (run cache cleared before every run). Each fastokens encoder is timed in a group of
   its own with its engine limit (fastokens encode_batch_flat on the pre-rendered strings, one
   call, on that encoder's own instance), and each row's share is of that limit, with the share
   its CPU time allows at most (wall >= CPU / cores). Beside the limit, the engine alone with a
   call per conversation, as a request hands it: the ceiling of qwen-encode per conversation.
   Then encode_batch on 1 and on 2 threads (fresh processes).
4. incremental chat: one conversation grown to 64 turns, input_ids after every turn; then one
   grown to ``--chat-turns`` turns (qwen-encode only: transformers is quadratic there), with the
   cost of one new user turn early and late, and their ratio
5. cold start: process start to the first input_ids of one short request (subprocesses)
6. load + validate of the vocabulary, per engine (subprocesses, with peak RSS)
7. training data (``--only-data``): Parquet shards of ``--data-conversations`` conversations
   -> Parquet training rows, end to end (read, encode, write), for one process (on one BPE
   thread, the scaling baseline, and on tokenizers' default of a thread per core), ``datasets``
   with 1 and 2 processes and Ray Data local; tokens/s and ratios against the baseline, Ray
   against ``datasets`` at the same parallelism, and first the fixed cost of a run (what a
   worker pays before its first row), with the load average before and after and the machine's
   own two-process ceiling (pure Python work in 1 and 2 processes) before and after
8. short rows (``--only-short-rows``, ``--rows``): fine-tuning rows from ``scripts/short_rows.py``
   (6-7 messages, ~445 tokens, 40% with a tools block), per-row microseconds of each step
   (turns_from_messages, format_prompt, encode_batch on rendered prompts, the engine alone on the
   rendered text), end to end batched and per row with its share of the engine and its ratio to
   transformers; then an agent set (every row the same system prompt and tools block), and agent
   sets whose shared block grows to ~9,000 tokens (``short_rows.AGENT_BLOCKS``)

The corpus is generated deterministically: multi-turn, multilingual, code, reasoning, tools in
half of the conversations, fine-tuning-like sizes, and words drawn at random so that no cache
is flattered by repetition.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import qwen_encode as qe  # noqa: E402
from qwen_encode.encoder_whole import _THREADS, _for_threads  # noqa: E402

# -- corpus ------------------------------------------------------------------------------------

_LATIN = "ba be bi bo bu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri ro"
_SCRIPTS = [
    _LATIN.split(),
    [
        "ва",
        "ве",
        "ви",
        "во",
        "ву",
        "ка",
        "ке",
        "ки",
        "ко",
        "ку",
        "ла",
        "ле",
        "ли",
        "ло",
        "лу",
        "ма",
        "ме",
        "ми",
        "мо",
        "му",
        "на",
        "не",
        "ни",
        "но",
        "ну",
        "ра",
        "ре",
        "ри",
        "ро",
    ],
    [chr(c) for c in range(0x4E00, 0x4E00 + 3000, 7)],
    [
        "با",
        "بي",
        "بو",
        "تا",
        "تي",
        "تو",
        "سا",
        "سي",
        "سو",
        "لا",
        "لي",
        "لو",
        "ما",
        "مي",
        "مو",
        "نا",
        "ني",
        "نو",
    ],
    [
        "का",
        "कि",
        "की",
        "कु",
        "के",
        "को",
        "ना",
        "नि",
        "नी",
        "नु",
        "ने",
        "नो",
        "मा",
        "मि",
        "मी",
        "मु",
        "मे",
        "मो",
    ],
]


def _words(rng: random.Random, n: int) -> str:
    script = rng.choices(_SCRIPTS, weights=[6, 1, 2, 1, 1])[0]
    joiner = "" if script is _SCRIPTS[2] else " "
    out = []
    for i in range(n):
        word = "".join(rng.choice(script) for _ in range(rng.randint(1, 4)))
        if i % rng.randint(8, 15) == 0:
            word += rng.choice([".", ",", "?", "!", ":", ";"]) + (" " if joiner else "")
        if rng.random() < 0.03:
            word += "\n\n"
        if rng.random() < 0.05:
            word = str(rng.randint(0, 10 ** rng.randint(1, 7)))
        out.append(word)
    return joiner.join(out)


def _code(rng: random.Random, lines: int) -> str:
    names = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(3, 10)))
        for _ in range(8)
    ]
    body = [f"def {names[0]}({names[1]}, {names[2]}=None):"]
    for _ in range(lines):
        indent = "    " * rng.randint(1, 3)
        a, b = rng.sample(names, 2)
        body.append(
            rng.choice(
                [
                    f"{indent}{a} = {b}[{rng.randint(0, 99)}] + {rng.random():.4f}",
                    f"{indent}if {a} is not None and len({b}) > {rng.randint(1, 9)}:",
                    f'{indent}return {{"{a}": {b}, "n": {rng.randint(0, 999)}}}',
                    f"{indent}for {a} in range({rng.randint(2, 64)}):  # {_words(rng, 4)}",
                ]
            )
        )
    return "```python\n" + "\n".join(body) + "\n```"


def _tool(
    rng: random.Random,
    i: int,
    *,
    description: tuple[int, int] = (8, 30),
    parameters: tuple[int, int] = (1, 4),
    parameter_words: int = 6,
    types: tuple[str, ...] = ("string", "integer", "array", "object"),
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"tool_{i}_{rng.randint(0, 10**6)}",
            "description": _words(rng, rng.randint(*description)),
            "parameters": {
                "type": "object",
                "properties": {
                    f"p{j}": {
                        "type": rng.choice(list(types)),
                        "description": _words(rng, parameter_words),
                    }
                    for j in range(rng.randint(*parameters))
                },
            },
        },
    }


def make_corpus(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    corpus = []
    for _ in range(count):
        tools = [_tool(rng, i) for i in range(rng.randint(1, 4))] if rng.random() < 0.5 else None
        messages: list[dict[str, Any]] = []
        if rng.random() < 0.6:
            messages.append({"role": "system", "content": _words(rng, rng.randint(10, 120))})
        for _ in range(rng.randint(1, 5)):
            user = _words(rng, rng.randint(10, 250))
            if rng.random() < 0.3:
                user += "\n\n" + _code(rng, rng.randint(3, 25))
            messages.append({"role": "user", "content": user})
            if tools and rng.random() < 0.5:
                calls = [
                    {
                        "type": "function",
                        "function": {
                            "name": t["function"]["name"],
                            "arguments": {
                                k: _words(rng, 3) if v["type"] == "string" else rng.randint(0, 99)
                                for k, v in t["function"]["parameters"]["properties"].items()
                            },
                        },
                    }
                    for t in rng.sample(tools, rng.randint(1, len(tools)))
                ]
                messages.append(
                    {
                        "role": "assistant",
                        "content": _words(rng, rng.randint(0, 30)),
                        "reasoning_content": _words(rng, rng.randint(20, 200)),
                        "tool_calls": calls,
                    }
                )
                for _ in calls:
                    messages.append({"role": "tool", "content": _words(rng, rng.randint(5, 150))})
            answer = _words(rng, rng.randint(30, 500))
            if rng.random() < 0.3:
                answer += "\n\n" + _code(rng, rng.randint(5, 30))
            messages.append(
                {
                    "role": "assistant",
                    "content": answer,
                    "reasoning_content": _words(rng, rng.randint(20, 400)),
                }
            )
        corpus.append({"messages": messages, "tools": tools})
    return corpus


# -- timing ------------------------------------------------------------------------------------


def _median_runs(
    tasks: dict[str, Callable[[], int]], runs: int, cpu: dict[str, float] | None = None
) -> dict[str, tuple[float, int]]:
    """Run every task ``runs`` times, alternating between tasks; median seconds and tokens, and
    into ``cpu`` (when given) each task's median CPU seconds, every thread of the process."""
    times: dict[str, list[float]] = {name: [] for name in tasks}
    cpus: dict[str, list[float]] = {name: [] for name in tasks}
    tokens: dict[str, int] = {}
    for _ in range(runs):
        for name, task in tasks.items():
            start, spent = time.perf_counter(), time.process_time()
            tokens[name] = task()
            times[name].append(time.perf_counter() - start)
            cpus[name].append(time.process_time() - spent)
    if cpu is not None:
        cpu.update((name, statistics.median(cpus[name])) for name in tasks)
    return {name: (statistics.median(times[name]), tokens[name]) for name in tasks}


def _subprocess_median(code: str, runs: int) -> tuple[float, float]:
    """Median wall seconds and peak RSS (MB) of ``python -c code`` over ``runs`` runs.

    Peak RSS is VmHWM: ru_maxrss would report this (large) parent's RSS at fork."""
    wrapper = (
        code
        + "\nimport re\nprint(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])"
    )
    seconds, rss = [], []
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", wrapper],
            capture_output=True,
            text=True,
            check=True,
            env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "TRANSFORMERS_VERBOSITY": "error"},
        )
        seconds.append(time.perf_counter() - start)
        rss.append(float(out.stdout.split()[-1]) / 1024)
    return statistics.median(seconds), statistics.median(rss)


def _row(name: str, seconds: float, tokens: int, baseline: float | None) -> str:
    ratio = f"{baseline / seconds:6.2f}x" if baseline else "      "
    return f"  {name:<62} {seconds * 1000:9.1f} ms {tokens / seconds / 1e6:8.2f} M tok/s {ratio}"


ENGINE_LIMIT = "3. engine limit: fastokens encode_batch_flat (pre-rendered)"
ENGINE_PER_CONVERSATION = "3. engine alone, a call per conversation (pre-rendered)"


def _throughput_tasks(
    model: str,
    corpus: list[dict[str, Any]],
    rendered: list[str],
    tokens: int,
    encoders: dict[str, qe.Encoder],
) -> list[dict[str, Callable[[], int]]]:
    """Sections 1-3, as groups of tasks that alternate among themselves: first the references,
    rendering and the tokenizers engine; then one group per fastokens encoder, its engine limit
    first. The engine limit is the fastest exact engine on the same text, rendered beforehand, in
    one call: what qwen-encode would cost if rendering, markers, masks and the per-run
    bookkeeping were free. It runs on the encoder's own fastokens instance, apart from any
    other: two instances used in turn slow each other 1.7-1.8x (measured; the cause is not
    established), and the limit, a pure engine call, loses more to that than qwen-encode does:
    with literal and atomic mode in one group the shares read up to 2x too high. Every row,
    the limit included, runs on an engine that has seen the corpus before (fastokens keeps a
    word cache: new text costs it ~1.4x more), so the shares compare like with like."""
    tasks: dict[str, Callable[[], int]] = {}
    try:
        from transformers import AutoTokenizer
        from transformers.utils import logging

        logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        hf = AutoTokenizer.from_pretrained(model)

        def transformers_task() -> int:
            return sum(
                len(
                    hf.apply_chat_template(
                        c["messages"],
                        tools=c["tools"],
                        tokenize=True,
                        return_dict=False,
                        add_generation_prompt=False,
                    )
                )
                for c in corpus
            )

        tasks["1. transformers apply_chat_template"] = transformers_task
    except ImportError:
        print("  transformers not installed: ratios are against tokenizers")
    raw = encoders["tokenizers"].vocabulary.tokenizer
    tasks["2. tokenizers encode_batch (pre-rendered)"] = lambda: sum(
        len(e.ids) for e in raw.encode_batch(rendered, add_special_tokens=False)
    )

    def prompts() -> list[qe.Prompt]:
        return [
            qe.format_prompt(c["messages"], tools=c["tools"], add_generation_prompt=False)
            for c in corpus
        ]

    # Rendering makes no tokens: its row counts the tokens the rendered text encodes to.
    tasks["3. rendering alone (format_prompt)"] = lambda: len(prompts()) and tokens
    ready = prompts()
    groups = [tasks]
    for name, encoder in encoders.items():
        group = tasks
        if encoder.engine == "fastokens":  # a group of its own, its engine limit first
            flat = encoder._engine.tokenizer  # type: ignore[attr-defined]
            # The ceiling of "per conversation": the engine alone, one call a conversation, in
            # the pieces a request hands it (a long text cut before a turn's marker, a piece a
            # core). Measured 0.73-0.81 of the limit on 2 cores, before any Python work.
            requests = [_for_threads([text])[0] for text in rendered]
            group = {
                f"{ENGINE_LIMIT} [{name}]": lambda flat=flat: (
                    len(flat.encode_batch_flat(rendered)[0]) // 4
                ),
                f"{ENGINE_PER_CONVERSATION} [{name}]": lambda flat=flat, requests=requests: sum(
                    len(flat.encode_batch_flat(pieces)[0]) // 4 for pieces in requests
                ),
            }
            groups.append(group)

        def per_conversation(encoder: qe.Encoder = encoder) -> int:
            encoder.clear_cache()
            return sum(
                len(
                    encoder.encode_messages(
                        c["messages"], tools=c["tools"], add_generation_prompt=False
                    )
                )
                for c in corpus
            )

        def batched(encoder: qe.Encoder = encoder) -> int:
            encoder.clear_cache()
            return sum(len(e) for e in encoder.encode_batch(prompts()))

        def encode_only(encoder: qe.Encoder = encoder) -> int:
            encoder.clear_cache()
            return sum(len(e) for e in encoder.encode_batch(ready))

        group[f"3. qwen-encode per conversation [{name}]"] = per_conversation
        group[f"3. qwen-encode batched [{name}]"] = batched
        group[f"3. qwen-encode encode_batch, rendered before [{name}]"] = encode_only
    return groups


_THREADS_CODE = """
import sys, time, statistics
sys.path.insert(0, {scripts!r})
import qwen_encode as qe
from bench import make_corpus
corpus = make_corpus({count})
encoder = qe.Encoder.from_pretrained({model!r}, engine="fastokens")
prompts = [qe.format_prompt(c["messages"], tools=c["tools"], add_generation_prompt=False)
           for c in corpus]
rendered = [p.text for p in prompts]
flat = encoder._engine.tokenizer
times, limits = [], []
for _ in range({runs}):
    encoder.clear_cache()
    start = time.perf_counter()
    encoder.encode_batch(prompts)
    times.append(time.perf_counter() - start)
    start = time.perf_counter()
    flat.encode_batch_flat(rendered)
    limits.append(time.perf_counter() - start)
print(statistics.median(times), statistics.median(limits))
"""


def _threads(model: str, count: int, runs: int) -> None:
    """encode_batch on 1 and 2 threads: fresh processes, since the Rust thread pools read their
    size once (fastokens: FASTOKENS_BPE_THREADS; tokenizers: RAYON_RS_NUM_CPUS)."""
    code = _THREADS_CODE.format(scripts=str(ROOT / "scripts"), count=count, model=model, runs=runs)
    seconds: dict[int, tuple[float, float]] = {}
    for threads in (1, 2):
        env = {
            "PATH": "/usr/bin:/bin",
            "HF_HUB_OFFLINE": "1",
            "FASTOKENS_BPE_THREADS": str(threads),
            "RAYON_NUM_THREADS": str(threads),
            "RAYON_RS_NUM_CPUS": str(threads),
        }
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        batch, limit = map(float, out.stdout.split()[-2:])
        seconds[threads] = (batch, limit)
    print(
        f"\nthreads (fastokens, encode_batch on rendered prompts, fresh process each, medians of "
        f"{runs}, load {os.getloadavg()[0]:.2f}):"
    )
    for threads, (batch, limit) in seconds.items():
        print(
            f"  {threads} thread(s): encode_batch {batch * 1000:8.1f} ms, engine limit "
            f"{limit * 1000:8.1f} ms, share {limit / batch:4.2f}"
        )
    print(
        f"  speed-up 1 -> 2 threads: encode_batch {seconds[1][0] / seconds[2][0]:.2f}x, "
        f"engine limit {seconds[1][1] / seconds[2][1]:.2f}x"
    )


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT.parent / "shared/checkpoints/qwen3.8-27b"))
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-cold", action="store_true", help="skip sections 5 and 6")
    parser.add_argument("--only-cold", action="store_true", help="only sections 5 and 6")
    parser.add_argument("--chat-turns", type=int, default=2000, help="length of the long chat")
    parser.add_argument("--only-long-chat", action="store_true", help="only the long chat of 4")
    parser.add_argument("--only-data", action="store_true", help="only the training data of 7")
    parser.add_argument("--shards", type=int, default=8, help="Parquet shards for section 7")
    parser.add_argument(
        "--data-engine", default="tokenizers", help="engine for section 7 (tokenizers, fastokens)"
    )
    parser.add_argument("--skip-ray", action="store_true", help="section 7 without Ray")
    parser.add_argument("--skip-threads", action="store_true", help="skip the 1 vs 2 threads run")
    parser.add_argument(
        "--only-throughput", action="store_true", help="only sections 1-3 and the threads run"
    )
    parser.add_argument(
        "--data-conversations",
        type=int,
        default=4000,
        help="conversations in 7 (4000: ~28M tokens, so that worker start-up weighs as in a job)",
    )
    parser.add_argument("--data-batch", type=int, default=512, help="rows per batch in 7")
    parser.add_argument("--only-short-rows", action="store_true", help="only section 8")
    parser.add_argument("--rows", type=int, default=10_000, help="short rows in section 8")
    return parser.parse_args()


def _header() -> None:
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"qwen-encode bench, commit {commit}{' (+uncommitted changes)' if dirty else ''}")
    print("modules: " + qe._accelerator.summary())


def _only(model: str, args: argparse.Namespace) -> bool:
    """Run the one section an ``--only-*`` option asks for; whether one did."""
    if args.only_cold:
        _cold(model, max(3, args.runs))
    elif args.only_long_chat:
        _long_chat(model, args.chat_turns, args.runs)
    elif args.only_data:
        _data(model, args)
    elif args.only_short_rows:
        _short_rows(model, args.rows, args.runs)
    else:
        return False
    return True


def main() -> None:
    args = _arguments()
    model = str(Path(args.model).resolve())
    _header()
    if _only(model, args):
        return
    tasks, encoders = _throughput(model, args)
    if args.only_throughput:
        return
    _incremental_chat(model, tasks, encoders, args.runs)
    _long_chat(model, args.chat_turns, args.runs)
    _short_rows(model, args.rows, args.runs)
    if not args.skip_cold:
        _cold(model, max(3, args.runs))


def _throughput(
    model: str, args: argparse.Namespace
) -> tuple[dict[str, Callable[[], int]], dict[str, qe.Encoder]]:
    """Sections 1-3 (and the 1 vs 2 threads run)."""
    corpus = make_corpus(args.conversations)
    encoders = {
        "tokenizers": qe.Encoder.from_pretrained(model, engine="tokenizers"),
    }
    try:
        for mode in ("literal", "atomic"):
            fast = qe.Encoder.from_pretrained(model, engine="fastokens", markers_in_text=mode)
            if fast.engine == "fastokens":
                encoders["fastokens" if mode == "literal" else "fastokens, atomic"] = fast
    except Exception as error:  # pragma: no cover - platform without fastokens
        print(f"  fastokens unavailable: {error}")
    reference = encoders["tokenizers"]
    rendered = [
        qe.format_prompt(c["messages"], tools=c["tools"], add_generation_prompt=False).text
        for c in corpus
    ]
    tokens = sum(
        len(e)
        for e in reference.encode_batch(
            [
                qe.format_prompt(c["messages"], tools=c["tools"], add_generation_prompt=False)
                for c in corpus
            ]
        )
    )
    print(
        f"corpus: {len(corpus)} conversations, {tokens} tokens "
        f"({tokens / len(corpus):.0f} per conversation)\n"
    )

    groups = _throughput_tasks(model, corpus, rendered, tokens, encoders)
    tasks = {name: task for group in groups for name, task in group.items()}
    results: dict[str, tuple[float, int]] = {}
    cpu: dict[str, float] = {}
    for group in groups:
        results |= _median_runs(group, args.runs, cpu)
    baseline_name = next(iter(results))
    baseline = results[baseline_name][0]
    cores = _THREADS  # the cores this process may run on, as the encoder counts them
    print(
        f"throughput (median of {args.runs} alternating runs per group, load "
        f"{os.getloadavg()[0]:.2f}; ratio = speed vs {baseline_name}; share = speed vs the "
        "engine limit on the same fastokens instance, measured in the same group; at most = "
        f"the share the row's CPU time (every thread) allows on {cores} cores even if it kept "
        "every core busy: wall time >= CPU time / cores):"
    )
    limit = None
    for name, (seconds, count) in results.items():
        share = ""
        if name.startswith(ENGINE_LIMIT):
            limit = seconds
            share = f"  {cpu[name] / seconds:4.2f} cores busy"
        measured = "qwen-encode" in name or name.startswith(ENGINE_PER_CONVERSATION)
        if limit and measured and "[tokenizers]" not in name:
            ceiling = limit / (cpu[name] / (cores or 1)) if cpu[name] > 0 else float("inf")
            share = f"  share {limit / seconds:4.2f} (at most {min(ceiling, 99):4.2f})"
        print(_row(name, seconds, count, baseline) + share)
    if "fastokens" in encoders and not args.skip_threads:
        _threads(model, args.conversations, args.runs)
    return tasks, encoders


def _incremental_chat(
    model: str,
    tasks: dict[str, Callable[[], int]],
    encoders: dict[str, qe.Encoder],
    runs: int,
) -> None:
    """Section 4: a chat grown to 64 turns, IDs after every user turn."""
    chat = make_corpus(64, seed=64)
    grown: list[dict[str, Any]] = []
    for conversation in chat:
        grown.extend(
            m
            for m in conversation["messages"]
            if m["role"] in ("user", "assistant") and not m.get("tool_calls")
        )
        if len(grown) >= 64:
            break
    grown = grown[:64]
    steps = [grown[: i + 1] for i in range(len(grown)) if grown[i]["role"] == "user"]
    chat_tasks: dict[str, Callable[[], int]] = {}
    if "1. transformers apply_chat_template" in tasks:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(model)
        chat_tasks["4. transformers, whole history every turn"] = lambda: sum(
            len(
                hf.apply_chat_template(
                    s, tokenize=True, return_dict=False, add_generation_prompt=True
                )
            )
            for s in steps
        )
    sessions = {name: e for name, e in encoders.items() if e.markers_in_text == "literal"}
    turn_times: dict[str, list[float]] = {name: [] for name in sessions}
    for name, encoder in sessions.items():

        def session_task(encoder: qe.Encoder = encoder, name: str = name) -> int:
            encoder.clear_cache()
            session = encoder.chat()
            total = 0
            for message in grown:
                session.append(message)
                if message["role"] == "user":
                    start = time.perf_counter()
                    total += len(session.encoding())
                    turn_times[name].append(time.perf_counter() - start)
            return total

        chat_tasks[f"4. qwen-encode chat session [{name}]"] = session_task
    results = _median_runs(chat_tasks, runs)
    baseline = next(iter(results.values()))[0]
    print(
        f"\nincremental chat ({len(grown)} turns, input_ids after each of {len(steps)} user turns):"
    )
    for name, (seconds, count) in results.items():
        print(_row(name, seconds, count, baseline))
    for name, times in turn_times.items():
        # Per user turn, over all runs: does a new turn cost more when the history is longer?
        per_turn = [times[i :: len(steps)] for i in range(len(steps))]
        early = statistics.median(t for turn in per_turn[:8] for t in turn)
        late = statistics.median(t for turn in per_turn[-8:] for t in turn)
        print(
            f"  cost of one new turn [{name}]: first 8 user turns {early * 1e3:.2f} ms, "
            f"last 8 {late * 1e3:.2f} ms (history {len(grown)} turns at the end)"
        )


def _data(model: str, args: argparse.Namespace) -> None:
    """Section 7. Every variant reads the same shards and writes the same rows (token counts
    checked). Each worker (a datasets process, a Ray actor) runs one BPE thread, so the scaling
    baseline is one process on one BPE thread; one process with tokenizers' default (a BPE
    thread per core) is shown beside it, with its CPU time / wall time."""
    import os
    import pickle
    import shutil
    import tempfile

    import datasets  # type: ignore[import-untyped, import-not-found, unused-ignore]

    from qwen_encode import data

    datasets.disable_progress_bars()
    corpus = make_corpus(args.data_conversations)
    work = Path(tempfile.mkdtemp(prefix="qwen-encode-bench-"))
    shards, tiny = _write_shards(corpus, work, args.shards)
    encoder = qe.Encoder.from_pretrained(model, engine=args.data_engine)
    print(
        f"training data: {len(corpus)} conversations in {args.shards} Parquet shards, "
        f"engine {args.data_engine}, {args.data_batch} rows per batch, {os.cpu_count()} CPUs, "
        f"load average {_load()}"
    )

    def fresh(name: str) -> Path:
        out = work / name
        shutil.rmtree(out, ignore_errors=True)
        return out

    def bpe_threads(enabled: bool) -> None:
        # tokenizers reads this before every batch call; datasets sets it to false in the
        # processes it forks, encode_ray in its actors.
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if enabled else "false"

    cpu: dict[str, list[float]] = {}

    # Every run starts with an empty run cache, as a worker's unpickled encoder does (the cache
    # does not travel): otherwise the in-process runs would find every text already encoded.
    def one_process(threads: bool, name: str) -> Callable[[], int]:
        def task() -> int:
            bpe_threads(threads)
            encoder.clear_cache()
            started, clock = time.perf_counter(), time.process_time()
            summary = data.encode_parquet(encoder, shards, fresh("one"), batch_size=args.data_batch)
            cpu.setdefault(name, []).append(
                (time.process_time() - clock) / (time.perf_counter() - started)
            )
            bpe_threads(False)
            return summary.tokens

        return task

    def with_datasets(num_proc: int, files: Path = shards) -> Callable[[], int]:
        def task() -> int:
            encoder.clear_cache()
            # Loaded as from_parquet does by default: converted to Arrow files in a (fresh) cache
            # and memory-mapped, its time counted. keep_in_memory=True would make datasets pickle
            # each worker's rows to it and its results back through a pipe, which a job that
            # loads its data the usual way does not pay.
            dataset = datasets.Dataset.from_parquet(
                [str(p) for p in sorted(files.iterdir())], cache_dir=str(fresh("hf-cache"))
            )
            encoded = data.encode_dataset(
                dataset, encoder, num_proc=num_proc, batch_size=args.data_batch
            )
            out = fresh(f"datasets{num_proc}")
            out.mkdir()
            encoded.to_parquet(str(out / "rows.parquet"))
            return data.summarize(encoded.data.table).tokens

        return task

    def with_ray(files: Path = shards) -> Callable[[], int]:
        def task() -> int:
            return data.encode_ray(encoder, files, fresh("ray"), batch_size=args.data_batch).tokens

        return task

    def unpickle() -> int:
        pickle.loads(pickle.dumps(encoder))
        return 0

    one = "one process, 1 BPE thread (baseline)"
    tasks: dict[str, Callable[[], int]] = {
        one: one_process(False, one),
        "one process, BPE threads on every core": one_process(
            True, "one process, BPE threads on every core"
        ),
        "datasets num_proc=1": with_datasets(1),
        "datasets num_proc=2": with_datasets(2),
    }
    fixed: dict[str, Callable[[], int]] = {
        "unpickle the encoder (each worker that does not fork)": unpickle,
        "datasets num_proc=2 on 2 rows": with_datasets(2, tiny),
    }
    ray_name = "Ray Data local (2 actors)"
    if not args.skip_ray:
        try:
            import ray  # type: ignore[import-not-found, unused-ignore]

            ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            ray.data.DataContext.get_current().enable_progress_bars = False
            with_ray(tiny)()  # cold: Ray's worker processes start; what follows is warm
            tasks[ray_name] = with_ray()
            fixed["Ray Data local on 2 rows (actors start, unpickle)"] = with_ray(tiny)
        except ImportError:
            print("  ray not installed: pip install -e .[ray]")
    bpe_threads(False)
    ceiling = _two_process_ceiling(args.runs)
    costs = _median_runs(fixed, max(3, args.runs))
    print("  fixed cost of a run, median of runs (paid once per job, per worker in parallel):")
    for name, (seconds, _) in costs.items():
        print(f"  {name:<56} {seconds:6.2f} s")
    results = _median_runs(tasks, args.runs)
    tokens = results[one][1]
    assert all(count == tokens for _, count in results.values()), results
    baseline = results[one][0]
    print(
        f"  {tokens} tokens; median of {args.runs} alternating runs; ratio vs one process on "
        "1 BPE thread:"
    )
    for name, (seconds, _) in results.items():
        extra = f"  CPU/wall {statistics.median(cpu[name]):.2f}" if name in cpu else ""
        print(_row(name, seconds, tokens, baseline) + extra)
    if ray_name in results:
        ratio = results["datasets num_proc=2"][0] / results[ray_name][0]
        print(f"  Ray local vs datasets num_proc=2: {ratio:.2f}x")
    after = _two_process_ceiling(args.runs)
    print(
        "  the machine's own ceiling, 2 processes vs 1 on pure Python work (no I/O, no shared "
        f"data): {ceiling:.2f}x before, {after:.2f}x after"
    )
    print(f"  load average at the end: {_load()}")
    shutil.rmtree(work, ignore_errors=True)


def _write_shards(corpus: list[dict[str, Any]], work: Path, count: int) -> tuple[Path, Path]:
    """The corpus as ``count`` Parquet shards (messages and tools as JSON text, as a data set
    stores them), and a shard of 2 rows for the fixed costs."""
    import json

    import pyarrow as pa  # type: ignore[import-untyped, import-not-found, unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped, import-not-found, unused-ignore]

    shards = work / "in"
    shards.mkdir()
    per = -(-len(corpus) // count)
    for i in range(count):
        rows = [
            {
                "messages": json.dumps(c["messages"]),
                "tools": None if c["tools"] is None else json.dumps(c["tools"]),
                "add_generation_prompt": False,
            }
            for c in corpus[i * per : (i + 1) * per]
        ]
        pq.write_table(pa.Table.from_pylist(rows), shards / f"part-{i:03d}.parquet")
    tiny = work / "tiny"
    tiny.mkdir()
    pq.write_table(
        pa.Table.from_pylist([{"messages": json.dumps(c["messages"])} for c in corpus[:2]]),
        tiny / "part-000.parquet",
    )
    return shards, tiny


def _spin() -> None:
    total = 0
    for i in range(10_000_000):
        total += i * i % 7


def _two_process_ceiling(runs: int) -> float:
    """How much faster two processes do twice the work of one, on work that shares nothing: what
    any two workers can reach on this machine at this moment (a 2-vCPU VM gave 1.63-2.00x within
    a minute), to read the data section's speed-ups against."""
    import multiprocessing

    def timed(count: int) -> float:
        workers = [multiprocessing.Process(target=_spin) for _ in range(count)]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return time.perf_counter() - start

    return statistics.median(2 * timed(1) / timed(2) for _ in range(max(3, runs)))


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _long_chat(model: str, turns: int, runs: int) -> None:
    """One conversation grown to ``turns`` messages, IDs after every user turn: the cost of a new
    turn must not grow with the history (re-rendering the whole history measured 0.31 ms early
    and 9.75 ms at turn 2,000)."""
    pool = [
        m
        for c in make_corpus(64, seed=64)
        for m in c["messages"]
        if m["role"] in ("user", "assistant") and not m.get("tool_calls")
    ]
    users = [m for m in pool if m["role"] == "user"]
    assistants = [m for m in pool if m["role"] == "assistant"]
    grown = [
        users[i // 2 % len(users)] if i % 2 == 0 else assistants[i // 2 % len(assistants)]
        for i in range(turns)
    ]
    print(f"\nlong chat ({turns} turns, input_ids after each of {turns // 2} user turns):")
    for engine in ("tokenizers", "fastokens"):
        encoder = qe.Encoder.from_pretrained(model, engine=engine)
        if encoder.engine != engine:
            continue
        early: list[float] = []
        late: list[float] = []
        for _ in range(runs):
            encoder.clear_cache()
            session = encoder.chat(preserve_thinking=False)
            times = []
            for message in grown:
                session.append(message)
                if message["role"] == "user":
                    start = time.perf_counter()
                    session.encoding()
                    times.append(time.perf_counter() - start)
            early += times[:8]
            late += times[-8:]
        first, last = statistics.median(early), statistics.median(late)
        print(
            f"  cost of one new turn [{engine}]: first 8 user turns {first * 1e3:.2f} ms, "
            f"last 8 {last * 1e3:.2f} ms, ratio {last / first:.2f} (medians over {runs} runs)"
        )


def _short_rows(model: str, count: int, runs: int) -> None:
    """Section 8. Every qwen-encode run starts with the encoder's run cache and the renderer's
    caches cleared: what repeats inside the set (tools blocks, system prompts) is found again
    within the run, as a data job finds it. The engine alone runs warm, as in section 3."""
    from short_rows import make_rows

    encoder = qe.Encoder.from_pretrained(model, engine="fastokens")
    if encoder.engine != "fastokens":
        print("\nshort rows: fastokens unavailable, skipped")
        return
    clear_render = getattr(qe.protocol, "clear_render_cache", lambda: None)

    def clear() -> None:
        encoder.clear_cache()
        clear_render()

    sets = {
        "short rows": make_rows(count),
        "agent set (same system prompt and tools block in every row)": make_rows(
            count, shared=True
        ),
    }
    for title, rows in sets.items():
        results = _short_rows_set(encoder, clear, title, rows, runs)
        _short_rows_transformers(model, rows[: min(len(rows), 1000)], results, len(rows))
    _agent_blocks(encoder, clear, min(count, 3000), runs)


def _agent_blocks(encoder: qe.Encoder, clear: Callable[[], None], count: int, runs: int) -> None:
    """Agent sets whose shared block grows: the engine pays for the block in every row,
    qwen-encode renders and encodes it once, so past some size it must overtake the engine."""
    from short_rows import AGENT_BLOCKS, make_agent_rows

    flat = encoder._engine.tokenizer  # type: ignore[attr-defined]
    print(
        f"\nagent sets by shared block ({count} rows each, median of {runs} alternating runs, "
        f"load {_load()}):"
    )
    for tools, words in AGENT_BLOCKS:
        rows = make_agent_rows(count, tools=tools, system_words=words)

        def render(rows: list[dict[str, Any]] = rows) -> list[qe.Prompt]:
            return [
                qe.format_prompt(r["messages"], tools=r["tools"], add_generation_prompt=False)
                for r in rows
            ]

        rendered = [p.text for p in render()]

        def batched(render: Callable[[], list[qe.Prompt]] = render) -> int:
            clear()
            return sum(len(e) for e in encoder.encode_batch(render()))

        def engine(rendered: list[str] = rendered) -> int:
            return len(flat.encode_batch_flat(rendered)[0]) // 4

        per_row = _per_row(encoder, clear, rows)
        results = _median_runs({"engine": engine, "batched": batched, "per row": per_row}, runs)
        limit = results["engine"][0]
        tokens = results["batched"][1] / count
        shares = ", ".join(
            f"{name} {seconds / count * 1e6:6.1f} us/row (share {limit / seconds:4.2f})"
            for name, (seconds, _) in results.items()
            if name != "engine"
        )
        print(
            f"  {tools:2d} tools, {words:3d}-word system prompt: {tokens:6.0f} tokens/row, "
            f"engine {limit / count * 1e6:6.1f} us/row; {shares}"
        )


def _per_row(
    encoder: qe.Encoder, clear: Callable[[], None], rows: list[dict[str, Any]]
) -> Callable[[], int]:
    """End to end, per row: ``encode_messages`` on each row, the caches cleared first."""

    def per_row() -> int:
        clear()
        return sum(
            len(
                encoder.encode_messages(
                    r["messages"], tools=r["tools"], add_generation_prompt=False
                )
            )
            for r in rows
        )

    return per_row


def _short_rows_set(
    encoder: qe.Encoder,
    clear: Callable[[], None],
    title: str,
    rows: list[dict[str, Any]],
    runs: int,
) -> dict[str, tuple[float, int]]:
    flat = encoder._engine.tokenizer  # type: ignore[attr-defined]
    ready = [
        qe.format_prompt(r["messages"], tools=r["tools"], add_generation_prompt=False) for r in rows
    ]
    rendered = [p.text for p in ready]
    tokens = sum(len(e) for e in encoder.encode_batch(ready))

    def render() -> list[qe.Prompt]:
        return [
            qe.format_prompt(r["messages"], tools=r["tools"], add_generation_prompt=False)
            for r in rows
        ]

    per_row = _per_row(encoder, clear, rows)

    def turns_only() -> int:
        for r in rows:
            qe.turns_from_messages(r["messages"])
        return tokens

    def render_only() -> int:
        clear()
        render()
        return tokens

    def encode_only() -> int:
        clear()
        return sum(len(e) for e in encoder.encode_batch(ready))

    def batched() -> int:
        clear()
        return sum(len(e) for e in encoder.encode_batch(render()))

    def engine() -> int:
        return len(flat.encode_batch_flat(rendered)[0]) // 4

    tasks: dict[str, Callable[[], int]] = {
        "engine alone on the rendered text (fastokens encode_batch_flat)": engine,
        "turns_from_messages": turns_only,
        "format_prompt (from message dicts)": render_only,
        "encode_batch on prompts rendered before": encode_only,
        "end to end, batched (format_prompt all, encode_batch)": batched,
        "end to end, per row (encode_messages)": per_row,
    }
    results = _median_runs(tasks, runs)
    limit = results["engine alone on the rendered text (fastokens encode_batch_flat)"][0]
    print(
        f"\n{title}: {len(rows)} rows, {tokens / len(rows):.0f} tokens and "
        f"{sum(len(r['messages']) for r in rows) / len(rows):.1f} messages per row, "
        f"{sum(r['tools'] is not None for r in rows) / len(rows):.0%} with tools "
        f"(median of {runs} alternating runs, load {_load()}):"
    )
    for name, (seconds, _) in results.items():
        share = f"  share of the engine {limit / seconds:5.3f}" if "end to end" in name else ""
        print(f"  {name:<62} {seconds / len(rows) * 1e6:8.1f} us/row{share}")
    return results


def _short_rows_transformers(
    model: str, rows: list[dict[str, Any]], results: dict[str, tuple[float, int]], count: int
) -> None:
    """transformers on (at most) the first 1,000 rows: per row, against qwen-encode's rows."""
    try:
        from transformers import AutoTokenizer
        from transformers.utils import logging
    except ImportError:
        print("  transformers not installed: no ratio")
        return
    logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    hf = AutoTokenizer.from_pretrained(model)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for r in rows:
            hf.apply_chat_template(
                r["messages"], tools=r["tools"], tokenize=True, add_generation_prompt=False
            )
        times.append((time.perf_counter() - start) / len(rows))
    per = statistics.median(times)
    name = "transformers apply_chat_template(tokenize=True)"
    print(f"  {name:<62} {per * 1e6:8.1f} us/row (first {len(rows)} rows)")
    for name in (
        "end to end, batched (format_prompt all, encode_batch)",
        "end to end, per row (encode_messages)",
    ):
        print(f"  ratio to transformers, {name}: {per / (results[name][0] / count):.1f}x")


def _cold(model: str, runs: int) -> None:
    """Sections 5 and 6: fresh processes, alternating between tasks, medians."""
    request = "[{'role': 'user', 'content': 'What is the capital of France?'}]"
    cold = {
        "5. transformers": (
            "from transformers import AutoTokenizer\n"
            f"t = AutoTokenizer.from_pretrained({model!r})\n"
            f"ids = t.apply_chat_template({request}, tokenize=True, add_generation_prompt=True)"
        ),
        "5. qwen-encode": (
            "import qwen_encode as qe\n"
            f"e = qe.Encoder.from_pretrained({model!r})\n"
            f"ids = e.encode_messages({request}).input_ids"
        ),
        "6. load+validate [tokenizers]": (
            "import qwen_encode as qe\n"
            f"e = qe.Encoder.from_pretrained({model!r}, engine='tokenizers')"
        ),
        "6. load+validate [fastokens]": (
            "import qwen_encode as qe\n"
            f"e = qe.Encoder.from_pretrained({model!r}, engine='fastokens')"
        ),
        "6. tokenizers.Tokenizer.from_file alone": (
            f"import tokenizers\nt = tokenizers.Tokenizer.from_file({model + '/tokenizer.json'!r})"
        ),
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cold}
    for _ in range(runs):
        for name, code in cold.items():
            samples[name].append(_subprocess_median(code, 1))
    print(f"\ncold start and load (fresh processes, median of {runs} alternating runs):")
    base = statistics.median(s for s, _ in samples["5. transformers"])
    for name, values in samples.items():
        seconds = statistics.median(s for s, _ in values)
        rss = statistics.median(r for _, r in values)
        print(f"  {name:<44} {seconds:7.2f} s ({seconds / base:4.2f}x)  peak RSS {rss:6.0f} MB")


if __name__ == "__main__":
    main()
