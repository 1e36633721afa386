"""Cost of one very long message: time and peak memory per MB of text, per engine.

    python scripts/long_message.py [--model ../shared/checkpoints/qwen3.8-27b] [--sizes 5 20 50]

Each measurement runs in a fresh process: the text (lines of mixed Latin, accented and CJK words,
code and numbers) is built first, then one ``encode_messages`` call on a single user message is
timed, and the peak RSS it adds (VmHWM after minus VmHWM before) is read from /proc. Issue 9
measured 111 s and 9.4 GB for 50 MB on the tokenizers engine before long runs were cut.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, random, sys, time
import qwen_encode as qe
mb, engine, model = float(sys.argv[1]), sys.argv[2], sys.argv[3]
rng = random.Random(0)
words = ["alpha", "beta", "gamma", "délta", "数据", "print(x)", "  indent", "3.14", "end."]
lines, size = [], 0
while size < mb * 1e6:
    line = " ".join(rng.choice(words) for _ in range(12))
    lines.append(line)
    size += len(line) + 1
text = "\n".join(lines)
encoder = qe.Encoder.from_pretrained(model, engine=engine)
def hwm():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) for l in status if l.startswith("VmHWM")) / 1024
before = hwm()
start = time.perf_counter()
tokens = len(encoder.encode_messages([{"role": "user", "content": text}]))
print(json.dumps({"seconds": time.perf_counter() - start, "tokens": tokens,
                  "added_mb": hwm() - before, "chars": len(text)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT.parent / "shared/checkpoints/qwen3.8-27b"))
    parser.add_argument("--sizes", type=float, nargs="+", default=[5, 20, 50])
    args = parser.parse_args()
    print(f"{'MB':>5} {'engine':<11} {'time':>8} {'s per MB':>9} {'peak MB per MB':>15}")
    for mb in args.sizes:
        for engine in ("tokenizers", "fastokens"):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(mb), engine, args.model],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            size = r["chars"] / 1e6
            print(
                f"{mb:5.0f} {engine:<11} {r['seconds']:7.2f}s {r['seconds'] / size:9.3f} "
                f"{r['added_mb'] / size:15.1f}"
            )


if __name__ == "__main__":
    main()
