"""Shared test fixtures: the real checkpoints in ``../shared/checkpoints`` (read in place, never
copied) and the transformers oracle. Tests that need them skip with the reason when absent."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINTS = ROOT.parent / "shared" / "checkpoints"
QWEN38 = CHECKPOINTS / "qwen3.8-27b"
QWEN3 = CHECKPOINTS / "qwen3"


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent: the real checkpoints live in ../shared beside the repo")
    return path


@pytest.fixture(scope="session")
def qwen38_dir() -> Path:
    return _require(QWEN38)


@pytest.fixture(scope="session")
def qwen3_dir() -> Path:
    return _require(QWEN3)


@pytest.fixture(scope="session")
def oracle(qwen38_dir: Path):
    """transformers' tokenizer for the Qwen 3.8 folder: ``apply_chat_template`` is the oracle."""
    transformers = pytest.importorskip(
        "transformers", reason="transformers (the oracle) is not installed: pip install -e .[test]"
    )
    transformers.logging.set_verbosity_error()
    return transformers.AutoTokenizer.from_pretrained(str(qwen38_dir))
