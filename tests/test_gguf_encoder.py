"""``Encoder.from_pretrained("model.gguf")`` and ``--model model.gguf``: the tokenizer rebuilt
from the GGUF's tokens, merges and pre, validated at load; anything but pre=qwen35 refused."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qwen_encode as qe
from qwen_encode.errors import CheckpointError, VocabularyError
from tests.gguf_files import (
    TINY,
    gguf_cache,  # noqa: F401  (the fixture, used by name below)
    write_gguf,
)
from tests.test_cli import run

from .conformance.corpus import generate

pytestmark = pytest.mark.usefixtures("gguf_cache")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(TINY, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def _ids(encoder: qe.Encoder, case: dict[str, Any]) -> list[int]:
    encoding = encoder.encode_messages(case["messages"], tools=case["tools"], **case["kwargs"])
    return list(np.asarray(encoding.input_ids))


@pytest.mark.parametrize("mode", ["literal", "atomic"])
def test_gguf_encodes_as_its_checkpoint(tiny_gguf: Path, mode: str) -> None:
    ours = qe.Encoder.from_pretrained(tiny_gguf, markers_in_text=mode, engine="tokenizers")
    folder = qe.Encoder.from_pretrained(TINY, markers_in_text=mode, engine="tokenizers")
    assert dict(ours.marker_ids) == dict(folder.marker_ids)
    for case in generate(count=120, seed=23, markers=True):
        assert _ids(ours, case) == _ids(folder, case)


def test_pickled_gguf_encoder_travels(tiny_gguf: Path) -> None:
    encoder = qe.Encoder.from_pretrained(tiny_gguf, engine="tokenizers")
    again = pickle.loads(pickle.dumps(encoder))
    case = generate(count=1, seed=5)[0]
    assert _ids(again, case) == _ids(encoder, case)


def _mutant(tmp_path: Path, key: str, value: Any) -> Path:
    def mutate(fields: dict[str, Any]) -> None:
        if value is None:
            del fields[key]
        else:
            fields[key][0] = value

    return write_gguf(TINY, tmp_path / "mutant.gguf", mutate)


@pytest.mark.parametrize(
    ("value", "said"),
    [(None, "the key is missing"), ("qwen2", "no \\\\p\\{M\\}"), ("llama-bpe", "not the Qwen")],
)
def test_other_pre_refused_with_the_reason(tmp_path: Path, value: str | None, said: str) -> None:
    path = _mutant(tmp_path, "tokenizer.ggml.pre", value)
    with pytest.raises(CheckpointError, match=f"tokenizer.ggml.pre.*expected 'qwen35'.*{said}"):
        qe.Encoder.from_pretrained(path)


def test_marker_typed_normal_refused_at_load(tmp_path: Path) -> None:
    def normal(fields: dict[str, Any]) -> None:
        fields["tokenizer.ggml.token_type"][0][2050] = 1  # <|im_end|>

    path = write_gguf(TINY, tmp_path / "normal.gguf", normal)
    with pytest.raises(VocabularyError, match="<\\|im_end\\|>"):
        qe.Encoder.from_pretrained(path)


def test_not_a_bpe_vocabulary(tmp_path: Path) -> None:
    path = _mutant(tmp_path, "tokenizer.ggml.model", "llama")
    with pytest.raises(
        CheckpointError, match=r"tokenizer\.ggml\.model .* 'llama', expected 'gpt2'"
    ):
        qe.Encoder.from_pretrained(path)


def test_cli_model_gguf(tiny_gguf: Path, tmp_path: Path) -> None:
    line = json.dumps({"messages": [{"role": "user", "content": "Hi <tool_call> é"}]}) + "\n"
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    ours = run("encode", "--model", tiny_gguf, stdin=line, env=env)
    folder = run("encode", "--model", TINY, stdin=line, env=env)
    assert ours.returncode == 0, ours.stderr
    assert json.loads(ours.stdout) == json.loads(folder.stdout)
    bad = _mutant(tmp_path, "tokenizer.ggml.pre", "qwen2")
    refused = run("encode", "--model", bad, stdin=line, env=env)
    assert refused.returncode == 2
    assert "expected 'qwen35'" in refused.stderr
