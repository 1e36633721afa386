"""The fuzz harness (scripts/fuzz.py) as part of the suite: every saved crash is
replayed (no atheris needed), and a short coverage-guided run must find nothing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "fuzz.py"
CORPUS = ROOT / "tests" / "fuzz_corpus"


def _harness():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("qwen_encode_fuzz", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", sorted(p.name for p in CORPUS.iterdir() if p.is_file()))
def test_saved_crashes_replay_clean(case: str) -> None:
    _harness().one_input((CORPUS / case).read_bytes())


def test_the_seeds_hold_the_properties() -> None:
    harness = _harness()
    for seed in harness.seeds():
        harness.one_input(seed)


def test_a_short_fuzz_run_finds_nothing(tmp_path: Path) -> None:
    # A fixed seed and a fixed number of inputs: the run is the same sequence on every machine
    # (a slower one stops early, on a prefix of it), so the suite cannot fail at random on a
    # bug that a lucky draw finds; longer, unseeded hunts are `scripts/fuzz.py --minutes N`.
    pytest.importorskip("atheris", reason="atheris is not installed: pip install -e .[test]")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--seconds",
            "60",
            "--runs",
            "12000",
            "--seed",
            "1",
            "--crashes",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    crashes = list(tmp_path.iterdir())
    assert result.returncode == 0 and not crashes, (
        f"the fuzzer found a failing input (saved as {crashes}; copy it into {CORPUS}):\n"
        + result.stderr[-3000:]
    )
