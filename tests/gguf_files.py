"""GGUF test data, made by ``scripts/make_gguf.py`` (llama.cpp's converter, restated) and the PyPI
``gguf`` package's writer; mutants are the converter's fields with one thing changed."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures" / "qwen3.8-tiny"


@cache
def make_gguf() -> ModuleType:
    """scripts/make_gguf.py as a module (it needs the ``gguf`` package: a test dependency)."""
    pytest.importorskip("gguf", reason="the gguf package writes the test GGUFs (pip install gguf)")
    pytest.importorskip("transformers", reason="make_gguf reads the checkpoint as the converter")
    spec = importlib.util.spec_from_file_location("make_gguf", ROOT / "scripts" / "make_gguf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def _fields(folder: Path) -> dict[str, Any]:
    return make_gguf().converter_fields(folder)


def write_gguf(
    folder: Path, out: Path, mutate: Callable[[dict[str, Any]], None] | None = None
) -> Path:
    """Write the converter's GGUF of ``folder`` at ``out``, after ``mutate`` changed its fields
    (a copy: key -> [value, type, element type], lists copied)."""
    fields = {
        key: [list(value) if isinstance(value, list) else value, kind, sub]
        for key, (value, kind, sub) in _fields(folder).items()
    }
    if mutate is not None:
        mutate(fields)
    make_gguf().write_fields({k: tuple(v) for k, v in fields.items()}, out)
    return out


@pytest.fixture
def gguf_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache the rebuilt tokenizer.json files go to, under this session's temporary folder
    (shared by the tests of a session, never the user's ~/.cache)."""
    cache = tmp_path_factory.getbasetemp() / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache
