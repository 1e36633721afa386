"""The real Qwen 3.8 vocabulary as llama.cpp's converter writes it (``scripts/make_gguf.py``),
loaded by ``Encoder.from_pretrained("model.gguf")``: the oracle's IDs on every corpus
conversation, and 0 ID differences from ``tokenizer.json`` on the probe texts (a sample of every
Unicode block, code, the markers, and every vocabulary token's own text), with both engines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qwen_encode as qe
from qwen_encode.validation.gguf import compare_probe_ids, probe_texts
from tests.gguf_files import write_gguf

from .corpus import generate
from .test_encoder_parity import _oracle_ids

CASES = generate(count=200, seed=2323)


@pytest.fixture(scope="module")
def real_gguf(qwen38_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(qwen38_dir, tmp_path_factory.mktemp("gguf") / "qwen3.8-27b.gguf")


@pytest.fixture(scope="module")
def from_gguf(real_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> qe.Encoder:
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    try:
        return qe.Encoder.from_pretrained(real_gguf, markers_in_text="atomic", engine="tokenizers")
    finally:
        mp.undo()


def test_gguf_encoder_equals_oracle(oracle, from_gguf: qe.Encoder) -> None:
    for n, case in enumerate(CASES):
        ids = from_gguf.encode_messages(case["messages"], tools=case["tools"], **case["kwargs"])
        assert list(np.asarray(ids.input_ids)) == _oracle_ids(oracle, case), n


def test_zero_probe_differences_from_tokenizer_json(qwen38_dir: Path, from_gguf) -> None:
    reference = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers").vocabulary.tokenizer
    texts = probe_texts(reference)
    assert len(texts) > 248_000
    result = compare_probe_ids(from_gguf.vocabulary.tokenizer, reference, texts)
    assert result.differ_hf_rules == 0, result.examples_hf_rules
    # llama.cpp's text path (no NFC) differs exactly on texts NFC changes.
    assert result.differ_llama_text > 0


def test_fastokens_engine_on_the_gguf(real_gguf: Path, oracle, tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("fastokens", reason="fastokens ships no wheel for this platform")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    fast = qe.Encoder.from_pretrained(real_gguf, markers_in_text="atomic", engine="fastokens")
    assert fast.engine == "fastokens"
    for case in CASES[:60]:
        ids = fast.encode_messages(case["messages"], tools=case["tools"], **case["kwargs"])
        assert list(np.asarray(ids.input_ids)) == _oracle_ids(oracle, case)
