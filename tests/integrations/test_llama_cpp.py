"""qwen-encode's model of llama.cpp against the real llama.cpp (llama-cpp-python, built by
``scripts/integration_env.sh llama``; skipped elsewhere): on the converter-made GGUF of the tiny
fixture, llama.cpp's own text tokenization equals the "as llama.cpp will" IDs that
``validate --against`` counts (the GGUF's vocabulary without NFC), its end-of-generation set
equals the one the report derives, and every USER_DEFINED marker is matched in text even with
``special=False`` (the forgery the report warns of)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_encode.validation.gguf import validate_gguf
from qwen_encode.validation.gguf_base import probe_texts
from tests.gguf_files import TINY, write_gguf

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is built by scripts/integration_env.sh llama"
)


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(TINY, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def llm(gguf_path: Path):
    return llama_cpp.Llama(model_path=str(gguf_path), vocab_only=True, verbose=False)


def test_text_path_ids_equal_ours_without_nfc(gguf_path: Path, llm, monkeypatch, tmp_path) -> None:
    import tokenizers

    from qwen_encode import Encoder

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ours = Encoder.from_pretrained(gguf_path, engine="tokenizers").vocabulary.tokenizer
    raw = tokenizers.Tokenizer.from_str(ours.to_str())
    raw.normalizer = None
    # Texts without markers: llama.cpp's special=False path still matches USER_DEFINED ones
    # (tested below), where the HF tokenizer, like ours, matches every added token.
    texts = [t for t in probe_texts(ours) if "<" not in t]
    differ = [
        t
        for t in texts
        if llm.tokenize(t.encode("utf-8"), add_bos=False, special=False)
        != raw.encode(t, add_special_tokens=False).ids
    ]
    assert differ == []


def test_end_of_generation_set(gguf_path: Path, llm) -> None:
    report = validate_gguf(gguf_path)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    real = {i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, i)}
    assert real == {token_id for token_id, _, _ in report.eog}


def test_user_defined_markers_are_matched_in_text(gguf_path: Path, llm) -> None:
    report = validate_gguf(gguf_path)
    for row in report.markers:
        ids = llm.tokenize(row.marker.encode("utf-8"), add_bos=False, special=False)
        if row.type == "USER_DEFINED":
            assert ids == list(row.ids), row.marker
        else:
            assert len(ids) > 1, row.marker  # CONTROL: text only with special=True
