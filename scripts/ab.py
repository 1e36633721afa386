"""In-process A/B: this checkout's ``qwen_encode`` against the one at another commit, imported side
by side in one process (the old package copied by ``git archive`` into a temporary folder under
another name), on the same rows, alternating, medians of paired ratios. Outputs are checked equal
(segments, input_ids, masks) before anything is timed.

    python scripts/ab.py --base b7c266e [--rows 5000] [--runs 9] [--set short|agent|corpus|chat]
        [--compiled]

``--compiled``: the base installed and compiled by pip under its other name (``install_base``),
to compare compiled code with compiled code; without it, the base runs as Python (compare it
with ``QWEN_ENCODE_PURE=1``).

``short``: scripts/short_rows.py rows; ``agent``: the same with one shared system prompt and tools
block; ``corpus``: bench.py's long conversations (``--rows`` of them); ``chat``: a chat session
grown to ``--rows`` messages. Ratio > 1: this checkout is faster. This machine drifts by ±20%
between runs; the same code against itself reads 0.89-1.05. Both packages share one fastokens
instance and one chunk worker thread, and every run starts from a collected heap.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from ab_tasks import row_tasks  # noqa: E402
from bench import make_corpus  # noqa: E402
from short_rows import make_rows  # noqa: E402

import qwen_encode as new  # noqa: E402


def full_hash(commit: str) -> str:
    """``commit``'s full hash. A base's copy is keyed by it: a name such as HEAD moves, and
    its folder would be a stale copy."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def install_base(commit: str, name: str = "qwen_encode") -> Path:
    """The folder holding ``qwen_encode`` at ``commit``, installed and compiled by pip as the
    README installs it, under the package name ``name``.

    Another name is written into the sources first (every ``qwen_encode`` word of the package,
    setup.py and pyproject.toml), so that Cython compiles the modules under it: a compiled
    module resolves its relative imports by the name it was compiled as, and a compiled copy
    merely renamed would import this checkout's modules."""
    full = full_hash(commit)
    folder = Path(tempfile.gettempdir()) / f"qwen-encode-ab-processes-{full}-{name}"
    if (folder / name / "_compiled.txt").is_file():
        return folder
    with tempfile.TemporaryDirectory() as source:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", full], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", source], input=archive, check=True)
        if name != "qwen_encode":
            package = Path(source) / "qwen_encode"
            top = [Path(source) / "setup.py", Path(source) / "pyproject.toml"]
            for path in [*package.rglob("*.py"), *package.rglob("*.pxd"), *top]:
                text = path.read_text(encoding="utf-8")
                path.write_text(re.sub(r"\bqwen_encode\b", name, text), encoding="utf-8")
            package.rename(package.with_name(name))
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", folder, source],
            check=True,
        )
    return folder


def import_base(commit: str, compiled: bool = False) -> Any:
    """``qwen_encode`` at ``commit``, importable as ``qwen_encode_<commit>``: its sources (run as
    Python), or installed and compiled under that name (``install_base``)."""
    commit = full_hash(commit)
    if compiled:
        name = f"qwen_encode_{commit[:12]}"
        sys.path.insert(0, str(install_base(commit, name)))
        return importlib.import_module(name)
    name = f"qwen_encode_{commit}"
    folder = Path(tempfile.gettempdir()) / f"qwen-encode-ab-{commit}"
    if not (folder / name).is_dir():
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, "qwen_encode"],
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder / "tmp", filter="data")
        (folder / "tmp" / "qwen_encode").rename(folder / name)
    sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def _segments(prompt: Any) -> list[tuple[Any, ...]]:
    return [(type(s).__name__, *(getattr(s, f) for f in s.__slots__)) for s in prompt.segments]


def _check(old: Any, old_enc: Any, new_enc: Any, rows: list[dict[str, Any]]) -> None:
    for row in rows[:500]:
        a = old.format_prompt(row["messages"], tools=row["tools"], add_generation_prompt=False)
        b = new.format_prompt(row["messages"], tools=row["tools"], add_generation_prompt=False)
        assert _segments(a) == _segments(b) and a.text == b.text
        ea, eb = old_enc.encode(a), new_enc.encode(b)
        for field in ("input_ids", "assistant_mask", "turn_index"):
            assert (getattr(ea, field) == getattr(eb, field)).all(), field


def _chat_tasks(pkg: Any, encoder: Any, turns: int) -> dict[str, Callable[[], Any]]:
    pool = [
        m
        for c in make_corpus(64, seed=64)
        for m in c["messages"]
        if m["role"] in ("user", "assistant") and not m.get("tool_calls")
    ]
    users = [m for m in pool if m["role"] == "user"]
    answers = [m for m in pool if m["role"] == "assistant"]
    grown = [
        users[i // 2 % len(users)] if i % 2 == 0 else answers[i // 2 % len(answers)]
        for i in range(turns)
    ]

    def chat() -> Any:
        encoder.clear_cache()
        session = encoder.chat(preserve_thinking=False)
        for message in grown:
            session.append(message)
            if message["role"] == "user":
                session.encoding()

    return {"chat session, IDs after every user turn": chat}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="b7c266e")
    parser.add_argument("--model", default=str(ROOT.parent / "shared/checkpoints/qwen3.8-27b"))
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--engine", default="fastokens")
    parser.add_argument("--set", default="short", choices=["short", "agent", "corpus", "chat"])
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="the base installed and compiled by pip under another name (this checkout runs as "
        "it is installed); without it, the base's sources run as Python",
    )
    args = parser.parse_args()
    old = import_base(args.base, compiled=args.compiled)
    old_enc = old.Encoder.from_pretrained(args.model, engine=args.engine)
    new_enc = new.Encoder.from_pretrained(args.model, engine=args.engine)
    # One fastokens instance for both: two used in turn slow each other 1.7-1.8x (measured; the
    # cause is not established), which would blur engine-side changes.
    engines = (getattr(old_enc, "_engine", None), getattr(new_enc, "_engine", None))
    if all(getattr(e, "name", None) == "fastokens" for e in engines):
        engines[0].tokenizer = engines[1].tokenizer  # type: ignore[union-attr]
    # And one worker thread for chunked batches: fastokens keeps state per calling thread.
    if hasattr(old.encoder, "_workers") and hasattr(new.encoder, "_workers"):
        old.encoder._workers = new.encoder._workers
    if args.set == "chat":
        tasks = {
            "old": _chat_tasks(old, old_enc, args.rows),
            "new": _chat_tasks(new, new_enc, args.rows),
        }
    else:
        if args.set == "corpus":
            rows = make_corpus(args.rows)
        else:
            rows = make_rows(args.rows, shared=args.set == "agent")
        _check(old, old_enc, new_enc, rows)
        tasks = {"old": row_tasks(old, old_enc, rows), "new": row_tasks(new, new_enc, rows)}
    times: dict[str, dict[str, list[float]]] = {v: {n: [] for n in tasks[v]} for v in tasks}
    for run in range(args.runs):
        order = ("old", "new") if run % 2 == 0 else ("new", "old")
        for name in tasks["old"]:
            for version in order:
                # Each run from a collected heap: the garbage of the run before (the other
                # package's, or its own) would otherwise be collected inside this one. Without
                # it the same code read 0.81-0.84x against itself on format_prompt.
                gc.collect()
                start = time.perf_counter()
                tasks[version][name]()
                times[version][name].append(time.perf_counter() - start)
    per = args.rows if args.set != "chat" else 1
    print(
        f"A/B {args.set}, {args.rows} rows, engine {new_enc.engine}: base {args.base} vs this "
        f"checkout, {args.runs} paired runs, load {Path('/proc/loadavg').read_text().split()[0]}"
    )
    for side, package in (("base", old), ("this checkout", new)):
        accelerator = getattr(package, "_accelerator", None)
        print(f"  {side}: {accelerator.summary() if accelerator else 'pure Python'}")
    for name in tasks["old"]:
        a, b = times["old"][name], times["new"][name]
        ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
        unit = "us/row" if per > 1 else "ms"
        scale = 1e6 / per if per > 1 else 1e3
        print(
            f"  {name:<42} base {statistics.median(a) * scale:9.1f} {unit}  "
            f"new {statistics.median(b) * scale:9.1f} {unit}  speed-up {ratio:5.2f}x"
        )


if __name__ == "__main__":
    main()
