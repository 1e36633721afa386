"""Very long text runs are encoded in pieces cut right after a "\\n" that a letter or digit follows
(issue 9: one 50 MB message took 111 s and 9.4 GB on the tokenizers engine). The cut must never
change an ID: checked here for every character the cut rule admits, and cut against uncut
encoding on generated text, in every marker mode, on both engines and on runs that cross turns."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers

import qwen_encode as qe
from qwen_encode import encoder as encoder_module
from tests.conftest import QWEN3, QWEN38, ROOT

VOCABULARIES = [ROOT / "fixtures" / "qwen3.8-tiny", QWEN38, QWEN3]


def _tokenizer(folder) -> Tokenizer:
    if not folder.exists():
        pytest.skip(f"{folder} is absent: the real checkpoints live in ../shared beside the repo")
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


# The cut's safety is a property of the normalizer and pre-tokenizer (BPE works inside
# pre-tokens): the tiny fixture has the Qwen 3.8 ones, byte for byte; Qwen3 has the older pattern.
@pytest.mark.parametrize("folder", [VOCABULARIES[0], QWEN3], ids=lambda f: f.name)
def test_every_character_the_cut_admits_keeps_the_ids(folder) -> None:
    tokenizer = _tokenizer(folder)
    assert encoder_module._cuttable(
        tokenizer, [t.content for t in tokenizer.get_added_tokens_decoder().values()]
    )
    follower = re.compile(encoder_module._SAFE_CUT.pattern.split("(?=")[1][:-1])
    chars = [
        chr(c)
        for c in range(sys.maxunicode + 1)
        if not 0xD800 <= c <= 0xDFFF and follower.fullmatch(chr(c))
    ]
    assert len(chars) > 100_000
    for before in ("é\u0301 \r\n",):
        head = tokenizer.encode(before, add_special_tokens=False).ids
        whole = tokenizer.encode_batch(
            [f"{before}{c}b\u0301 c" for c in chars], add_special_tokens=False
        )
        tails = tokenizer.encode_batch([f"{c}b\u0301 c" for c in chars], add_special_tokens=False)
        bad = [c for c, w, t in zip(chars, whole, tails, strict=True) if w.ids != head + t.ids]
        assert bad == [], [hex(ord(c)) for c in bad[:20]]


def test_other_pre_tokenizers_are_never_cut() -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    assert not encoder_module._cuttable(tokenizer, [])
    real = _tokenizer(ROOT / "fixtures" / "qwen3.8-tiny")
    assert not encoder_module._cuttable(real, ["line\nbreak"])  # an added token holding "\n"


def test_pieces_join_back_and_respect_the_size() -> None:
    text = ("word " * 30 + "\n") * 5000 + "no safe point " * 10000
    pieces = encoder_module._pieces(text)
    assert "".join(pieces) == text
    assert len(pieces) > 10
    assert all(len(p) >= encoder_module._PIECE_CHARS for p in pieces[:-1])
    assert all(p.endswith("\n") for p in pieces[:-1])


LINE = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12
) | st.sampled_from(["\n", "\r\n", " \n", "\n\n", "é", "e\u0301", "\u212b", "'s", "12", "<think>"])


@pytest.fixture(scope="module", params=VOCABULARIES[:2], ids=lambda f: f.name)
def vocabulary_folder(request):
    if not request.param.exists():
        pytest.skip(f"{request.param} is absent")
    return request.param


@pytest.fixture(scope="module")
def encoders(vocabulary_folder) -> dict[str, tuple[qe.Encoder, qe.Encoder]]:
    """Per marker mode: an encoder that cuts long runs, and one that never does."""
    vocabulary = qe.Encoder.from_pretrained(vocabulary_folder, engine="tokenizers").vocabulary
    pairs = {}
    for mode in ("literal", "atomic"):
        cut = qe.Encoder(vocabulary, markers_in_text=mode, cache_bytes=0)
        whole = qe.Encoder(vocabulary, markers_in_text=mode, cache_bytes=0)
        whole._cuttable = False
        pairs[mode] = cut, whole
    return pairs


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(LINE, min_size=20, max_size=120), st.sampled_from(["literal", "atomic"]))
def test_cut_encoding_equals_uncut(encoders, monkeypatch, lines, mode) -> None:
    text = "".join(lines)
    monkeypatch.setattr(encoder_module, "_PIECE_CHARS", 4)  # cut at nearly every safe point
    cut, whole = encoders[mode]
    conversations = [
        [{"role": "user", "content": text}],
        # An assistant turn before the last query, without its think span: its header and its
        # content form one run that crosses from untrained to trained text (the offsets path).
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": text, "reasoning_content": "r"},
            {"role": "user", "content": "q2 " + text},
        ],
    ]
    for messages in conversations:
        prompt = qe.format_prompt(messages, preserve_thinking=False)
        a, b = cut.encode(prompt), whole.encode(prompt)
        assert np.array_equal(a.input_ids, b.input_ids)
        assert np.array_equal(a.assistant_mask, b.assistant_mask)
        assert np.array_equal(a.turn_index, b.turn_index)


def test_a_long_message_on_both_engines(vocabulary_folder) -> None:
    lines = [f"line {i}: données 数据 {i * 7} x\u0301 <|im_end|>" for i in range(6000)]
    text = "\n".join(lines)  # ~250k characters: cut with the real piece size
    prompt = qe.format_prompt([{"role": "user", "content": text}])
    for engine in ("tokenizers", "fastokens"):
        encoder = qe.Encoder.from_pretrained(vocabulary_folder, engine=engine, cache_bytes=0)
        uncut = qe.Encoder(encoder.vocabulary, cache_bytes=0)
        uncut._cuttable = False
        assert np.array_equal(encoder.encode(prompt).input_ids, uncut.encode(prompt).input_ids)
