"""Cost of one very long message: time and peak memory per MB of text, per engine.

    python scripts/long_message.py [--model ../shared/checkpoints/qwen3.8-27b] [--sizes 5 20 50]
                                   [--shapes lines indented one-line json] [--engines tokenizers]
                                   [--package qwen_encode_b7c266e --path DIR]

Each measurement runs in a fresh process: the text is built first, then one ``encode_messages``
call on a single user message is timed, and the peak RSS it adds is read from /proc: the
high-water mark is reset (``/proc/self/clear_refs``) after loading, so the figure is the call's
own peak above the RSS it started from. Shapes: ``lines`` (lines of mixed Latin, accented and
CJK words, code and numbers), ``indented`` (code whose every line starts with spaces),
``one-line`` (words on one line), ``json`` (minified JSON). Before long runs were cut, 50 MB on
the tokenizers engine took 111 s and 9.4 GB. ``--package``/``--path`` measure
another copy of the package (scripts/ab.py leaves one per commit under the temporary folder).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import importlib, json, random, sys, time
mb, engine, model, shape, package, path = sys.argv[1:7]
mb = float(mb)
if path:
    sys.path.insert(0, path)
qe = importlib.import_module(package)
rng = random.Random(0)
words = ["alpha", "beta", "gamma", "délta", "数据", "print(x)", "  indent", "3.14", "end."]
pieces, size = [], 0
while size < mb * 1e6:
    if shape == "lines":
        piece = " ".join(rng.choice(words) for _ in range(12)) + "\n"
    elif shape == "indented":
        piece = " " * rng.choice((4, 8, 12)) + f"x{rng.randint(0, 99)} = f(y, 'délta')  # 数据\n"
    elif shape == "one-line":
        piece = rng.choice(words) + " "
    else:
        key, word, n = rng.randint(0, 999), rng.choice(words), rng.randint(0, 99)
        piece = f'{{"k{key}":"{word}","n":[{n},1.5]}},'
    pieces.append(piece)
    size += len(piece)
text = "[" + "".join(pieces) + "]" if shape == "json" else "".join(pieces)
encoder = qe.Encoder.from_pretrained(model, engine=engine)
def status(key):
    with open("/proc/self/status") as lines:
        return next(int(l.split()[1]) for l in lines if l.startswith(key)) / 1024
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # the high-water mark restarts from the RSS now
before = status("VmRSS")
start = time.perf_counter()
tokens = len(encoder.encode_messages([{"role": "user", "content": text}]))
print(json.dumps({"seconds": time.perf_counter() - start, "tokens": tokens,
                  "added_mb": status("VmHWM") - before, "chars": len(text)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT.parent / "shared/checkpoints/qwen3.8-27b"))
    parser.add_argument("--sizes", type=float, nargs="+", default=[5, 20, 50])
    parser.add_argument(
        "--shapes", nargs="+", default=["lines"], choices=["lines", "indented", "one-line", "json"]
    )
    parser.add_argument("--engines", nargs="+", default=["tokenizers", "fastokens"])
    parser.add_argument("--package", default="qwen_encode")
    parser.add_argument("--path", default="")
    args = parser.parse_args()
    print(
        f"{'MB':>5} {'shape':<9} {'engine':<11} {'time':>8} {'s per MB':>9} {'peak MB per MB':>15}"
    )
    extra = [args.package, args.path]
    for shape in args.shapes:
        for mb in args.sizes:
            for engine in args.engines:
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(mb), engine, args.model, shape, *extra],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                r = json.loads(out.strip().splitlines()[-1])
                size = r["chars"] / 1e6
                print(
                    f"{mb:5.1f} {shape:<9} {engine:<11} {r['seconds']:7.2f}s "
                    f"{r['seconds'] / size:9.3f} {r['added_mb'] / size:15.1f}"
                )


if __name__ == "__main__":
    main()
