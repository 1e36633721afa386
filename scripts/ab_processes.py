"""A/B of compiled code: this checkout against another commit, each in its own fresh processes,
alternating, medians of paired ratios.

    python scripts/ab_processes.py --base 13d2bab [--set short|agent|agent32] [--rows 3000]
                                   [--pairs 4] [--runs 6]

``short`` and ``agent``: ``scripts/ab.py``'s sets; ``agent32``: the agent set whose shared block
is 32 tools and an 800-word system prompt (``short_rows.make_agent_rows``).

``scripts/ab.py`` imports its base beside this checkout under another name, so the base runs as
Python: it cannot compare what the compiled accelerator does. Here the base is installed, as
the README installs it (compiled by pip at install time, Cython from the package index), into a
folder of its own under the temporary folder (kept, keyed by the full hash), and each package
runs in a fresh process of its own: ``--pairs`` pairs, which goes first alternating, each
process timing ``--runs`` runs of each task (the first dropped as warm-up) and reporting
medians. Ratio > 1: this checkout is faster. Both processes check that the package they
import is the one asked for, compiled. Outputs are not compared here: ``scripts/ab.py`` does
that, on the same rows, as Python.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ab import install_base

ROOT = Path(__file__).resolve().parent.parent

# Run in each fresh process: times scripts/ab_tasks.row_tasks on the set asked for.
_CHILD = """
import gc, json, statistics, sys, time
sys.path.insert(0, {scripts!r})
import qwen_encode as qe
from ab_tasks import row_tasks
from short_rows import make_agent_rows, make_rows
assert qe.__file__.startswith({package!r}), qe.__file__
assert set(qe.accelerator_info().values()) == {{"compiled"}}, qe.accelerator_info()
encoder = qe.Encoder.from_pretrained({model!r}, engine="fastokens")
rows = {{
    "short": lambda n: make_rows(n),
    "agent": lambda n: make_rows(n, shared=True),
    "agent32": lambda n: make_agent_rows(n, 32, 800),
}}[{kind!r}]({rows})
tasks = row_tasks(qe, encoder, rows)
times = {{name: [] for name in tasks}}
for _ in range({runs}):
    for name, task in tasks.items():
        gc.collect()
        start = time.perf_counter()
        task()
        times[name].append((time.perf_counter() - start) / len(rows) * 1e6)
print(json.dumps({{name: statistics.median(t[1:]) for name, t in times.items()}}))
"""


def _run(package: Path, path: Path | None, args: argparse.Namespace) -> dict[str, float]:
    code = _CHILD.format(
        scripts=str(ROOT / "scripts"),
        package=str(package),
        model=args.model,
        kind=args.set,
        rows=args.rows,
        runs=args.runs,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QWEN_ENCODE_PURE")}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    # Not from this checkout's folder: the child must import the package asked for.
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--model", default=str(ROOT.parent / "shared/checkpoints/qwen3.8-27b"))
    parser.add_argument("--set", default="short", choices=["short", "agent", "agent32"])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    base = install_base(args.base)
    import qwen_encode

    here = Path(qwen_encode.__file__).resolve().parent.parent
    sides = {"base": (base / "qwen_encode", base), "new": (here / "qwen_encode", None)}
    results: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
    for pair in range(args.pairs):
        order = ("base", "new") if pair % 2 == 0 else ("new", "base")
        for side in order:
            results[side].append(_run(*sides[side], args))
    load = Path("/proc/loadavg").read_text().split()[0]
    print(
        f"A/B {args.set}, {args.rows} rows, compiled, fresh processes: base {args.base} vs this "
        f"checkout, {args.pairs} pairs, medians of {args.runs - 1} runs each, load {load}"
    )
    for name in results["base"][0]:
        old = [r[name] for r in results["base"]]
        new = [r[name] for r in results["new"]]
        ratios = [a / b for a, b in zip(old, new, strict=True)]
        print(
            f"  {name:<34} base {statistics.median(old):8.1f} us/row  new "
            f"{statistics.median(new):8.1f} us/row  speed-up {statistics.median(ratios):5.2f}x "
            f"(pairs {min(ratios):.2f}-{max(ratios):.2f})"
        )


if __name__ == "__main__":
    main()
