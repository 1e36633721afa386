"""Measure what loading a checkpoint's vocabulary costs next to a bare ``tokenizers`` load.

    .venv/bin/python scripts/load_cost.py [--runs 7] [--checkpoint FOLDER]

FOLDER defaults to ../shared/checkpoints/qwen3.8-27b beside the repo (the 248k-token vocabulary).

Each run is a fresh interpreter, so peak RSS (``ru_maxrss``) belongs to that one load: the baseline
runs ``tokenizers.Tokenizer.from_file(tokenizer.json)``, the candidate
``load_vocabulary(resolve_checkpoint(folder))`` (one parse plus every validation check). Runs
alternate between the two so background load on the machine hits both alike. Prints the medians and
the ratios, and exits 1 when a ratio exceeds the target (1.3x on time and on peak memory).

Time is measured around the call only (interpreter start-up and imports excluded); memory is the
process's peak, and also the part the call added on top of the interpreter and imports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CHECKPOINT = ROOT.parent / "shared" / "checkpoints" / "qwen3.8-27b"
TARGET = 1.3

# The child imports everything before measuring, so module import costs are not counted as loading.
_CHILD = r"""
import json, resource, sys, time
which, folder = sys.argv[1], sys.argv[2]
if which == "baseline":
    import tokenizers
    def load():
        return tokenizers.Tokenizer.from_file(folder + "/tokenizer.json")
else:
    from qwen_encode.checkpoint import resolve_checkpoint
    from qwen_encode.vocabulary import load_vocabulary
    def load():
        return load_vocabulary(resolve_checkpoint(folder))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
result = load()
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_kib": peak, "before_kib": before}))
"""


def _run(which: str, folder: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, which, str(folder)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each (median taken; >= 5)")
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    args = parser.parse_args(argv)
    if args.runs < 5:
        parser.error("--runs must be at least 5")
    folder: Path = args.checkpoint.resolve()
    if not (folder / "tokenizer.json").is_file():
        print(f"{folder}/tokenizer.json: missing (the real checkpoints live in ../shared)")
        return 2

    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "load_vocabulary": []}
    for _ in range(args.runs):
        for which in runs:
            runs[which].append(_run(which, folder))

    def median(which: str, key: str) -> float:
        if key == "added_kib":
            return statistics.median(r["peak_kib"] - r["before_kib"] for r in runs[which])
        return statistics.median(r[key] for r in runs[which])

    print(f"checkpoint: {folder}  ({args.runs} fresh processes each, medians)")
    print(f"{'':37}{'time (s)':>10}{'peak RSS (MiB)':>16}{'added by call (MiB)':>21}")
    labels = {
        "baseline": "tokenizers.Tokenizer.from_file",
        "load_vocabulary": "load_vocabulary(resolve_checkpoint)",
    }
    for which, label in labels.items():
        print(
            f"{label:37}{median(which, 'seconds'):>10.3f}"
            f"{median(which, 'peak_kib') / 1024:>16.1f}{median(which, 'added_kib') / 1024:>21.1f}"
        )
    ratios = {
        key: median("load_vocabulary", key) / median("baseline", key)
        for key in ("seconds", "peak_kib", "added_kib")
    }
    print(
        f"{'ratio (target <= ' + str(TARGET) + 'x)':37}{ratios['seconds']:>9.2f}x"
        f"{ratios['peak_kib']:>15.2f}x{ratios['added_kib']:>20.2f}x"
    )
    return 0 if max(ratios.values()) <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
