"""Measure the GGUF metadata reader and ``validate model.gguf``, in-process, against baselines.

    .venv/bin/python scripts/gguf_cost.py [--runs 5] [--checkpoint FOLDER] [--gguf FILE]

FOLDER defaults to ../shared/checkpoints/qwen3.8-27b; without --gguf, its GGUF is written first
with scripts/make_gguf.py (needs the ``gguf`` and ``transformers`` packages).

1. Reading the metadata (every key, the 248k tokens and 247k merges decoded to str): qwen-encode's
   ``read_gguf`` against the ``gguf`` package's ``GGUFReader`` (with ``contents()`` of the token
   and merge arrays, which is what a caller needs). Time: medians of alternating runs. Memory:
   the high-water mark after resetting it (``/proc/self/clear_refs``), minus the RSS before.
2. ``validate``: ``validate_gguf(model.gguf)`` against ``checkpoint_report(FOLDER)``, both warm
   (caches of the rebuilt tokenizer.json and of the dead tokens filled by a first run, whose
   cold times are printed too). The target is at most 2 s more for the GGUF.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CHECKPOINT = ROOT.parent / "shared" / "checkpoints" / "qwen3.8-27b"


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _measure(call: Callable[[], object]) -> tuple[float, int]:
    """(seconds, KiB the call added at its peak) for one call."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM")
    del result
    return seconds, peak - before


def _gguf_package_read(path: Path) -> object:
    import gguf

    reader = gguf.GGUFReader(path)
    return {key: field.contents() for key, field in reader.fields.items()}


def _alternate(runs: int, **calls: Callable[[], object]) -> dict[str, list[tuple[float, int]]]:
    results: dict[str, list[tuple[float, int]]] = {name: [] for name in calls}
    for _ in range(runs):
        for name, call in calls.items():
            results[name].append(_measure(call))
    return results


def _report(title: str, results: dict[str, list[tuple[float, int]]]) -> dict[str, float]:
    print(title)
    medians = {}
    for name, samples in results.items():
        seconds = statistics.median(s for s, _ in samples)
        mib = statistics.median(k for _, k in samples) / 1024
        medians[name] = seconds
        runs = ", ".join(f"{s:.2f}" for s, _ in samples)
        print(f"  {name:<22} median {seconds:7.3f} s  peak +{mib:7.1f} MiB   runs: {runs}")
    return medians


def _make_gguf(folder: Path, out: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_gguf", ROOT / "scripts" / "make_gguf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_fields(module.converter_fields(folder), out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--gguf", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gguf-cost-"))
    os.environ["XDG_CACHE_HOME"] = str(work / "cache")  # cold caches, then warm
    path = args.gguf or work / "model.gguf"
    if args.gguf is None:
        _make_gguf(args.checkpoint, path)

    from qwen_encode.gguf_reader import read_gguf
    from qwen_encode.validation.gguf import validate_gguf
    from qwen_encode.validation.report import checkpoint_report

    reads = _report(
        f"reading the metadata of {path} ({path.stat().st_size:,} bytes)",
        _alternate(
            args.runs,
            qwen_encode=lambda: read_gguf(path),
            gguf_package=lambda: _gguf_package_read(path),
        ),
    )
    print(
        f"  ratio gguf package / qwen-encode: {reads['gguf_package'] / reads['qwen_encode']:.1f}x"
    )

    cold = _alternate(
        1,
        validate_gguf=lambda: validate_gguf(path),
        validate_folder=lambda: checkpoint_report(args.checkpoint),
    )
    _report("validate, cold caches (first run: rebuild tokenizer.json, dead tokens)", cold)
    warm = _report(
        "validate, warm",
        _alternate(
            args.runs,
            validate_gguf=lambda: validate_gguf(path),
            validate_folder=lambda: checkpoint_report(args.checkpoint),
        ),
    )
    extra = warm["validate_gguf"] - warm["validate_folder"]
    print(f"  GGUF costs {extra:+.2f} s against the folder (target: at most +2 s)")
    return 0 if extra <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
