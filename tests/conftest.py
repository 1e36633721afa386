"""Shared test fixtures: the real checkpoints in ``../shared/checkpoints`` (read in place, never
copied) and the transformers oracle. Tests that need them skip with the reason when absent."""

from __future__ import annotations

import importlib.util
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINTS = ROOT.parent / "shared" / "checkpoints"
QWEN38 = CHECKPOINTS / "qwen3.8-27b"
QWEN3 = CHECKPOINTS / "qwen3"


def pytest_report_header() -> str:
    """Whether this run tests the compiled modules or pure Python (``qwen_encode._accelerator``)."""
    from qwen_encode import _accelerator

    return "qwen-encode modules: " + _accelerator.summary()


@pytest.fixture
def foreground_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP as a process run from a terminal has them, for the tests of what
    a run does when they arrive. A job that a non-interactive shell starts in the background
    (``cmd &``, as a CI script or a runner may) begins with SIGINT ignored, and Python keeps it
    so: Ctrl-C then raises nothing, and every child inherits the ignoring (nohup does the same to
    SIGHUP). Each one found ignored gets its foreground disposition back while the test runs."""
    if sys.platform == "win32":
        yield
        return
    foreground = {
        signal.SIGINT: signal.default_int_handler,
        signal.SIGTERM: signal.SIG_DFL,
        signal.SIGHUP: signal.SIG_DFL,
    }
    ignored = [signum for signum in foreground if signal.getsignal(signum) is signal.SIG_IGN]
    for signum in ignored:
        signal.signal(signum, foreground[signum])
    try:
        yield
    finally:
        for signum in ignored:
            signal.signal(signum, signal.SIG_IGN)


def runs_only(encoder):  # type: ignore[no-untyped-def]
    """``encoder`` with its whole-prompt path off: every prompt laid out run by run, for the
    tests of that path's own machinery (the run cache, encoding a request run by run)."""
    encoder.__dict__["_whole_ready"] = False
    return encoder


def load_example(name: str) -> ModuleType:
    """``examples/NAME.py`` as a module: the examples are scripts, not a package, and the tests
    drive their functions as a user's code would."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


@pytest.fixture(scope="session")
def real_ids(qwen38_dir: Path):  # type: ignore[no-untyped-def]
    """(encoder, text -> IDs) for Qwen 3.8, every marker spelling as its atomic ID, as the
    model emits them: the parser's tests read completions through it."""
    import qwen_encode as qe

    encoder = qe.Encoder.from_pretrained(qwen38_dir, markers_in_text="atomic", engine="tokenizers")
    tokenizer = encoder.vocabulary.tokenizer

    def ids(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False).ids)

    return encoder, ids


@pytest.fixture(params=["tiny", "real"])
def real(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """The parser's tests twice: with the byte stand-in alone ("tiny": (None, None)), and with
    the real vocabulary's IDs too (``real_ids``)."""
    if request.param == "tiny":
        return (None, None)
    return request.getfixturevalue("real_ids")
