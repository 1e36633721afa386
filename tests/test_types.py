"""The package type-checks under mypy's strict mode, with the configuration in pyproject.toml
(the optional engines' modules that have no stubs are handled there, each with its reason), and
every ``# type: ignore[code]`` that remains says why on its own line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "qwen_encode"
# "# type: ignore[code]" followed by a comment of its own: "  # why".
_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")


def test_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed: pip install -e .[test]")
    # A cache of its own: the test leaves nothing in the work tree and never reads a stale one.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout, result.stdout


def _unexplained(text: str) -> list[str]:
    """The ``type: ignore`` comments of ``text`` that name no error code or give no reason."""
    bad = []
    for number, line in enumerate(text.splitlines(), 1):
        found = _IGNORE.search(line)
        if found is None:
            continue
        reason = found["rest"].strip().lstrip("#").strip()
        if not found["codes"] or not reason:
            bad.append(f"{number}: {line.strip()}")
    return bad


def test_every_ignore_says_why() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in _unexplained(path.read_text(encoding="utf-8"))
    ]
    assert not bad, "type: ignore without an error code or a reason:\n" + "\n".join(bad)


def test_the_ignore_check_reads_what_it_must() -> None:
    assert _unexplained("x = f()  # type: ignore[arg-type]") != []
    assert _unexplained("x = f()  # type: ignore") != []
    assert _unexplained("x = f()  # type: ignore  # why") != []
    assert _unexplained("x = f()  # type: ignore[arg-type]  # the engine's object is untyped") == []
    assert _unexplained("x = f()  # a comment") == []
