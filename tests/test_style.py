"""The code stays ruff-clean (lint and format), with the configuration in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["qwen_encode", "tests", "scripts", "docs"]  # docs: the mkdocs hooks


def _ruff() -> list[str]:
    try:
        import ruff  # noqa: F401
    except ImportError:
        if shutil.which("ruff") is None:
            pytest.skip("ruff is not installed: pip install -e .[test]")
        return ["ruff"]
    return [sys.executable, "-m", "ruff"]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(command: list[str]) -> None:
    result = subprocess.run([*_ruff(), *command, *PATHS], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
