"""Very long text runs are encoded in pieces cut where the pre-tokenizer provably ends a pre-token
(see ``encoder_pieces._SAFE_CUT``: after a newline that indentation and a non-space follow, or
between a letter or number and a space or punctuation). One 50 MB message took 111 s and 9.4 GB on
the tokenizers engine uncut. The cut must never change an ID: checked here for every character
each rule admits, and cut against uncut encoding on generated text, in every marker mode, on both
engines and on runs that cross turns."""

from __future__ import annotations

import re
import sys
import unicodedata

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers

import qwen_encode as qe
from qwen_encode import encoder_pieces
from tests.conftest import QWEN3, QWEN38, ROOT

VOCABULARIES = [ROOT / "fixtures" / "qwen3.8-tiny", QWEN38, QWEN3]


def _tokenizer(folder) -> Tokenizer:
    if not folder.exists():
        pytest.skip(f"{folder} is absent: the real checkpoints live in ../shared beside the repo")
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def _ids(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]


def _cut_matches_uncut(
    tokenizer: Tokenizer, heads: list[str], tails: list[str], first: list[list[int]] | None = None
) -> list[int]:
    """Positions where encoding ``head + tail`` differs from encoding each alone, joined."""
    whole = _ids(tokenizer, [h + t for h, t in zip(heads, tails, strict=True)])
    first = _ids(tokenizer, heads) if first is None else first
    second = _ids(tokenizer, tails)
    return [i for i, (w, a, b) in enumerate(zip(whole, first, second, strict=True)) if w != a + b]


def _admitted(pattern: str) -> list[str]:
    """Every character ``pattern`` admits, but for unassigned and private-use ones past the BMP
    (860,000 code points no text holds, which would make this test minutes long)."""
    rule = re.compile(pattern)
    return [
        chr(c)
        for c in range(sys.maxunicode + 1)
        if not 0xD800 <= c <= 0xDFFF
        and rule.fullmatch(chr(c))
        and (c < 0x10000 or unicodedata.category(chr(c)) not in ("Cn", "Co"))
    ]


# The cut's safety is a property of the normalizer and pre-tokenizer (BPE works inside
# pre-tokens): the tiny fixture has the Qwen 3.8 ones, byte for byte; Qwen3 has the older pattern.
@pytest.mark.parametrize("folder", [VOCABULARIES[0], QWEN3], ids=lambda f: f.name)
def test_every_character_after_a_newline_the_cut_admits_keeps_the_ids(folder) -> None:
    """Rule 1: after a "\n" that spaces or tabs and then any non-space follow."""
    tokenizer = _tokenizer(folder)
    assert encoder_pieces._cuttable(
        tokenizer, [t.content for t in tokenizer.get_added_tokens_decoder().values()]
    )
    chars = _admitted(r"[^\s]")
    assert len(chars) > 150_000
    for before, indent in (("é\u0301 \r\n", ""), ("x.\n\n", "  \t ")):
        text = before + "\n" + indent + "c"
        assert [m.end() for m in encoder_pieces._SAFE_CUT.finditer(text)][-1] == len(before) + 1
        tails = [f"{indent}{c}b\u0301 c" for c in chars]
        head = _ids(tokenizer, [before + "\n"])
        bad = _cut_matches_uncut(tokenizer, [before + "\n"] * len(chars), tails, head * len(chars))
        assert bad == [], [hex(ord(chars[i])) for i in bad[:20]]


@pytest.mark.parametrize("folder", [VOCABULARIES[0], QWEN3], ids=lambda f: f.name)
def test_every_letter_or_number_the_cut_admits_keeps_the_ids(folder) -> None:
    """Rule 2: between any letter or number and a space or punctuation no added token holds;
    every letter and number before three of them, every one of them after a few letters."""
    tokenizer = _tokenizer(folder)
    letters = _admitted(r"[^\W_]")
    assert len(letters) > 130_000
    heads = [f"x\u0301 a.{c}" for c in letters]
    first = _ids(tokenizer, heads)
    for after in (" ", '"'):
        assert encoder_pieces._SAFE_CUT.search("xa" + after)
        tails = [f"{after}b\u0301{after}'s 1" for _ in letters]
        bad = _cut_matches_uncut(tokenizer, heads, tails, first)
        assert bad == [], [hex(ord(letters[i])) for i in bad[:20]]
    samples = ["a", "Z", "é", "ß", "я", "数", "ا", "क", "1", "٣", "²", "Ⅻ", "ǅ"]
    heads, tails = [], []
    for after in encoder_pieces._CUT_BEFORE:
        for c in samples:
            assert encoder_pieces._SAFE_CUT.search("x" + c + after).end() == 2
            for tail in ("s", "'ll", "  x", "\n\n y", after * 3 + "é", "ab" + after):
                heads.append(f"<|im_end|>{c}")
                tails.append(after + tail)
    bad = _cut_matches_uncut(tokenizer, heads, tails)
    assert bad == [], [(heads[i], tails[i]) for i in bad[:20]]


def test_no_cut_inside_what_the_rules_exclude() -> None:
    """Points the rules leave alone: inside a letter run, after punctuation (its run may take a
    following letter as ``"a``), between newlines, before a character an added token holds."""
    for text in ("abc", '{"a', "\n\nb", "\n \nb", "a<", "a/", "a|", "a_", "a>", "a\u0301", "\n "):
        cuts = [m.end() for m in encoder_pieces._SAFE_CUT.finditer(text)]
        assert 1 not in cuts and 2 not in cuts[:-1], (text, cuts)
    assert [m.end() for m in encoder_pieces._SAFE_CUT.finditer('{"a\n\n \nb')] == [3, 7]


def test_other_pre_tokenizers_are_never_cut() -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    assert not encoder_pieces._cuttable(tokenizer, [])
    real = _tokenizer(ROOT / "fixtures" / "qwen3.8-tiny")
    assert not encoder_pieces._cuttable(real, ["line\nbreak"])  # an added token holding "\n"
    assert not encoder_pieces._cuttable(real, ["<a,b>"])  # ... or a character cut before


def test_pieces_join_back_and_respect_the_size() -> None:
    text = ("word " * 30 + "\n") * 5000 + "/|" * 100_000
    pieces = encoder_pieces._pieces(text)
    assert "".join(pieces) == text
    assert len(pieces) > 10
    assert all(len(p) >= encoder_pieces._PIECE_CHARS for p in pieces[:-1])
    assert all(p.endswith(("\n", "d")) for p in pieces[:-1])
    assert len(pieces[-1]) > 200_000  # no safe point in "/|/|...": it stays whole


@pytest.mark.parametrize(
    "text",
    [
        "\n".join("    " * (i % 4) + f"x{i} = f(y)  # c" for i in range(40_000)),  # indented code
        " ".join(f"word{i}" for i in range(60_000)),  # one long line
        '{"k":[' + ",".join(f'{{"a{i}":"v é","n":{i}}}' for i in range(30_000)) + "]}",  # JSON
    ],
    ids=["indented-code", "one-line", "minified-json"],
)
def test_texts_the_newline_rule_could_not_cut_are_cut(text: str) -> None:
    pieces = encoder_pieces._pieces(text)
    assert "".join(pieces) == text
    assert len(pieces) >= len(text) // (3 * encoder_pieces._PIECE_CHARS)


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
    monkeypatch.setattr(encoder_pieces, "_PIECE_CHARS", 4)  # cut at nearly every safe point
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
