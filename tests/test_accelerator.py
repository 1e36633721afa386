"""The compiled accelerator (``qwen_encode._accelerator``, ``setup.py``): which modules run
compiled, the switch back to pure Python, a stale compiled module refused, and the parity suites
run again on pure Python when this process runs compiled code (the suite itself ran compiled)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import qwen_encode
from qwen_encode import _accelerator as acc

from .conftest import ROOT

PACKAGE = Path(qwen_encode.__file__).resolve().parent
COMPILED = [name for name, how in qwen_encode.accelerator_info().items() if how == acc.COMPILED]
needs_compiled = pytest.mark.skipif(
    not COMPILED,
    reason="no module runs compiled here (installed without Cython or a C compiler, or "
    "QWEN_ENCODE_PURE=1): the suite already ran on pure Python",
)
# The suites that compare what the package makes with the oracle, an engine, or the general path
# (the fused renderer of plain rows, the whole-prompt path, batches against single prompts).
PARITY = [
    "tests/conformance",
    "tests/test_protocol_rows.py",
    "tests/test_protocol.py",
    "tests/test_protocol_cache.py",
    "tests/test_encoder_whole.py",
    "tests/test_encoder_batch.py",
    "tests/test_conversation.py",
]

REPORT = """
import json, sys
import qwen_encode
print(json.dumps({
    "info": qwen_encode.accelerator_info(),
    "files": {n: sys.modules["qwen_encode." + n].__file__ for n in qwen_encode.accelerator_info()
              if "qwen_encode." + n in sys.modules},
}))
"""


def _report(env: dict[str, str], path: Path | None = None) -> dict[str, dict[str, str]]:
    """What a fresh process reports: how each module runs and the file each was loaded from."""
    environment = {**os.environ, **env}
    if path is not None:
        environment["PYTHONPATH"] = str(path)
    done = subprocess.run(
        [sys.executable, "-c", REPORT],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path or ROOT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _copied(folder: Path) -> Path:
    """This install's package, compiled modules and manifest included, copied into ``folder``
    (run from there with ``_report(..., folder)``)."""
    copy = folder / "qwen_encode"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_every_module_is_reported() -> None:
    info = qwen_encode.accelerator_info()
    assert tuple(info) == acc.MODULES
    assert set(info.values()) <= {acc.COMPILED, acc.NOT_COMPILED, acc.FORCED, acc.STALE}
    for name, how in info.items():
        loaded = Path(sys.modules[f"qwen_encode.{name}"].__file__ or "")
        assert (loaded.suffix != ".py") == (how == acc.COMPILED), (name, how, loaded)
    if os.environ.get(acc.PURE_ENV) == "1":  # the parity suites' run below: all pure
        assert acc.COMPILED not in info.values()
    counted = [part.split(" ", 1) for part in acc.summary().split(", ")]
    assert {how: int(n) for n, how in counted} == {
        h: list(info.values()).count(h) for h in info.values()
    }


def test_the_switch_runs_pure_python() -> None:
    report = _report({acc.PURE_ENV: "1"})
    for name, how in report["info"].items():
        assert how in (acc.FORCED, acc.NOT_COMPILED)
        assert report["files"][name].endswith(f"{name}.py")
    assert [n for n, how in report["info"].items() if how == acc.FORCED] == COMPILED


@needs_compiled
def test_a_module_edited_since_compiled_runs_from_its_source(tmp_path: Path) -> None:
    """An editable install keeps the compiled modules while the sources change: a compiled
    module whose source differs from what it was compiled from must not run."""
    copy = _copied(tmp_path)
    edited = COMPILED[0]
    source = copy / f"{edited}.py"
    source.write_text(source.read_text(encoding="utf-8") + "\nEDITED = True\n", encoding="utf-8")
    report = _report({acc.PURE_ENV: "0"}, tmp_path)
    assert report["info"][edited] == acc.STALE
    assert report["files"][edited] == str(source)
    for name in COMPILED[1:]:
        assert report["info"][name] == acc.COMPILED
        assert not report["files"][name].endswith(".py")


@needs_compiled
def test_a_compiled_module_shipped_without_its_source_runs(tmp_path: Path) -> None:
    """An install may ship a compiled module without its .py (a freezer, a stripped image):
    it runs compiled, even with the switch set, rather than failing to import."""
    copy = _copied(tmp_path)
    gone = COMPILED[0]
    (copy / f"{gone}.py").unlink()
    for switch in ("0", "1"):
        report = _report({acc.PURE_ENV: switch}, tmp_path)
        assert report["info"][gone] == acc.COMPILED
        assert not report["files"][gone].endswith(".py")


@needs_compiled
def test_the_parity_suites_pass_on_pure_python() -> None:
    """The compiled modules are the same sources as the pure ones; the suites that compare
    the output with the oracle, the engines and the general path run here compiled, and again
    on pure Python in a process with the switch set."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *PARITY),
            "tests/test_accelerator.py::test_every_module_is_reported",
        ],
        env={**os.environ, acc.PURE_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
