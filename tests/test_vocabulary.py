"""``load_vocabulary`` / ``validate_checkpoint``: the two real checkpoints in ../shared, mutated
copies of them (made in tmp dirs, never in the repo), bad inputs, and a tiny synthetic vocabulary
for what the real ones cannot show (a BOS-adding post-processor, an unusual key order)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers.processors import TemplateProcessing

import qwen_encode.checkpoint_json as checkpoint_json
import qwen_encode.vocabulary as vocabulary
from qwen_encode.checkpoint import CheckpointFiles, resolve_checkpoint
from qwen_encode.errors import CheckpointError, VocabularyError
from qwen_encode.markers import ALL_ADDED_TOKENS, PROTOCOL_MARKERS, TURN_CLOSE, TURN_OPEN
from qwen_encode.vocabulary import (
    QWEN38_TEMPLATE_SHA256,
    MarkerEntry,
    ValidationReport,
    load_vocabulary,
    validate_checkpoint,
)

# What tokenizers' renumbering message ends with (see _check_declared_ids).
RENUMBERED = (
    "once loaded (tokenizers ignores declared IDs: it numbers added tokens in file order after the "
    "base vocabulary)"
)
DECODER = "tokenizer_config.json added_tokens_decoder"


def load(folder: Path) -> vocabulary.Vocabulary:
    return load_vocabulary(resolve_checkpoint(folder))


def config_ids(folder: Path) -> dict[str, int]:
    """The IDs the checkpoint's own tokenizer_config.json gives its added tokens: an oracle
    independent of the code under test (which reads tokenizer.json)."""
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    return {entry["content"]: int(key) for key, entry in config["added_tokens_decoder"].items()}


# --- the real checkpoints -------------------------------------------------------------------------


def test_qwen38_loads_and_is_certified(qwen38_dir: Path) -> None:
    vocab = load(qwen38_dir)
    report = vocab.report
    assert report.ok, report.problems
    assert report.vocabulary_ok
    assert report.problems == () == report.vocabulary_problems
    expected = config_ids(qwen38_dir)
    assert dict(vocab.marker_ids) == {m: expected[m] for m in PROTOCOL_MARKERS}
    assert dict(vocab.added_tokens) == expected
    assert set(vocab.added_tokens) == set(ALL_ADDED_TOKENS)
    assert vocab.marker_ids[TURN_OPEN] == 248045
    assert vocab.marker_ids[TURN_CLOSE] == 248046
    assert vocab.tokenizer.encode(TURN_OPEN, add_special_tokens=False).ids == [248045]


def test_qwen38_report_contents(qwen38_dir: Path) -> None:
    report = validate_checkpoint(qwen38_dir)
    expected = config_ids(qwen38_dir)
    special = {m: m.startswith("<|") for m in PROTOCOL_MARKERS}
    assert report.markers == tuple(
        MarkerEntry(m, expected[m], special[m], atomic=True) for m in PROTOCOL_MARKERS
    )
    assert report.source == str(qwen38_dir)
    assert report.vocab_size == 248077
    assert report.max_token_id == 248076
    assert report.normalizer == "NFC"
    assert report.pre_tokenizer == "Split(regex) + ByteLevel"
    assert report.stop_token_ids == (248046, 248044)
    assert report.bos == f"none: chat prompts start with {TURN_OPEN}"
    assert report.embedding_size == 248320
    assert report.template == "qwen3.8"
    assert report.template_sha256 == QWEN38_TEMPLATE_SHA256
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is True and data["vocabulary_ok"] is True
    assert data["stop_token_ids"] == [248046, 248044]
    assert data["markers"][2] == {
        "marker": TURN_CLOSE,
        "id": 248046,
        "special": True,
        "atomic": True,
    }
    assert set(data) == {
        "source",
        "ok",
        "vocabulary_ok",
        "problems",
        "vocabulary_problems",
        "markers",
        "vocab_size",
        "max_token_id",
        "normalizer",
        "pre_tokenizer",
        "stop_token_ids",
        "bos",
        "embedding_size",
        "template",
        "template_sha256",
        "findings",
        "special_tokens",
        "warnings",
        "tie_word_embeddings",
    }
    assert data["tie_word_embeddings"] is False
    assert data["warnings"] == []


def test_qwen3_loads_with_its_own_ids(qwen3_dir: Path) -> None:
    vocab = load(qwen3_dir)
    expected = config_ids(qwen3_dir)
    assert dict(vocab.marker_ids) == {m: expected[m] for m in PROTOCOL_MARKERS}
    assert vocab.marker_ids[TURN_OPEN] == 151644
    assert vocab.marker_ids["<think>"] == 151667
    assert vocab.marker_ids["<tool_call>"] == 151657
    assert dict(vocab.added_tokens) == expected  # its 26 added tokens, not Qwen 3.8's 33
    assert len(vocab.added_tokens) == 26


def test_qwen3_markers_present_but_another_protocol(qwen3_dir: Path) -> None:
    report = validate_checkpoint(qwen3_dir)
    assert report.vocabulary_ok
    assert not report.ok
    assert report.template == "other"
    assert report.template_sha256 == (
        "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"
    )
    assert all(entry.atomic for entry in report.markers)
    assert (report.stop_token_ids, report.embedding_size) == (None, None)
    assert report.problems == (
        "tokenizer_config.json chat_template: expected the official Qwen 3.8 template (sha256 "
        f"{QWEN38_TEMPLATE_SHA256}), found sha256 {report.template_sha256}: another protocol, or "
        "a modified template",
        "generation_config.json: expected stop tokens (eos_token_id) including 151645 "
        "('<|im_end|>'), found no file",
        "config.json: expected vocab_size (the embedding size) of at least 151669, found no file",
    )


def test_validate_a_tokenizer_json_path(qwen38_dir: Path) -> None:
    report = validate_checkpoint(str(qwen38_dir / "tokenizer.json"))
    assert report.ok  # the sibling files were used


def test_declared_added_tokens_read_from_the_head(qwen38_dir: Path, qwen3_dir: Path) -> None:
    for folder in (qwen38_dir, qwen3_dir):
        declared = checkpoint_json.declared_added_tokens(folder / "tokenizer.json")
        assert declared is not None
        assert {e["content"]: e["id"] for e in declared} == config_ids(folder)


# --- mutated copies of the real vocabulary --------------------------------------------------------


def mutated_copy(
    source: Path,
    destination: Path,
    *,
    added: Callable[[list[dict[str, Any]]], None] | None = None,
    base_vocab: dict[str, int] | None = None,
    config: Callable[[dict[str, Any]], None] | None = None,
    files: dict[str, Callable[[Any], Any]] | None = None,
) -> Path:
    """A copy of ``source`` in a tmp dir with ``added_tokens`` (and the base vocabulary) edited as
    text, so the rest of the 11 MB file is copied byte for byte without a parse."""
    destination.mkdir()
    for path in source.iterdir():
        shutil.copyfile(path, destination / path.name)
    if added is not None or base_vocab is not None:
        text = (source / "tokenizer.json").read_text(encoding="utf-8")
        start = text.index("[", text.index('"added_tokens"'))
        tokens, end = json.JSONDecoder().raw_decode(text, start)
        if added is not None:
            added(tokens)
        text = text[:start] + json.dumps(tokens) + text[end:]
        if base_vocab is not None:
            at = text.index('"vocab": {') + len('"vocab": {')
            entries = "".join(f"{json.dumps(k)}: {v}, " for k, v in base_vocab.items())
            text = text[:at] + entries + text[at:]
        (destination / "tokenizer.json").write_text(text, encoding="utf-8")
    edits = dict(files or {})
    if config is not None:

        def edit_config(data: dict[str, Any]) -> dict[str, Any]:
            config(data)
            return data

        edits["tokenizer_config.json"] = edit_config
    for name, edit in edits.items():
        path = destination / name
        if name.endswith(".json"):
            data = edit(json.loads(path.read_text(encoding="utf-8")))
            path.write_text(json.dumps(data), encoding="utf-8")
        else:
            path.write_bytes(edit(path.read_bytes()))
    return destination


def entry(tokens: list[dict[str, Any]], content: str) -> dict[str, Any]:
    return next(token for token in tokens if token["content"] == content)


def rejected(folder: Path, *, validate: bool = False) -> tuple[str, ...]:
    """Loading must raise VocabularyError listing every problem; with ``validate``, validating must
    report the same problems without raising (off by default: each load of the real vocabulary
    takes a second)."""
    with pytest.raises(VocabularyError) as raised:
        load(folder)
    error = raised.value
    assert isinstance(error, ValueError)
    assert error.source == str(folder / "tokenizer.json")
    for problem in error.problems:
        assert f"  - {problem}" in str(error)
    if validate:
        report = validate_checkpoint(folder)
        assert not report.vocabulary_ok and not report.ok
        assert report.vocabulary_problems == error.problems
        assert report.problems[: len(error.problems)] == error.problems
    return error.problems


def test_marker_removed(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(qwen38_dir, tmp_path / "c", added=lambda t: t.remove(entry(t, "<think>")))
    problems = rejected(folder, validate=True)
    assert problems[0] == (
        "'<think>': expected an added token in tokenizer.json, found none "
        "(the text encodes as 3 tokens [13314, 741, 29])"
    )
    assert problems[1] == (
        f"'<think>': expected {DECODER} to agree with tokenizer.json (no such added token), "
        "found it at ID 248068"
    )
    # Every later added token slid down one ID: each is named, the protocol's '</think>' first.
    assert problems[2] == (
        "'</think>': expected ID 248069 as declared in tokenizer.json, "
        f"found ID 248068 {RENUMBERED}"
    )
    assert len(problems) == 2 + 8
    think = next(e for e in validate_checkpoint(folder).markers if e.marker == "<think>")
    assert think == MarkerEntry("<think>", None, None, atomic=False)


@pytest.mark.parametrize("flag", ["normalized", "lstrip", "rstrip", "single_word"])
def test_marker_flag_flipped(flag: str, qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir, tmp_path / "c", added=lambda t: entry(t, TURN_CLOSE).update({flag: True})
    )
    assert rejected(folder) == (
        f"'<|im_end|>': expected {flag}=false in tokenizer.json, found {flag}=true",
        f"'<|im_end|>': expected {flag}=true in {DECODER} as in tokenizer.json, found {flag}=false",
    )


def test_marker_flag_flipped_without_tokenizer_config(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir, tmp_path / "c", added=lambda t: entry(t, "<think>").update(normalized=True)
    )
    (folder / "tokenizer_config.json").unlink()
    assert rejected(folder) == (
        "'<think>': expected normalized=false in tokenizer.json, found normalized=true",
    )


def test_marker_no_longer_a_single_token(qwen38_dir: Path, tmp_path: Path) -> None:
    """'<think>' kept at its ID, but as an ordinary base-vocabulary entry: the pre-tokenizer splits
    the text before BPE can reach it, so it encodes as three tokens."""
    folder = mutated_copy(
        qwen38_dir,
        tmp_path / "c",
        added=lambda t: t.remove(entry(t, "<think>")),
        base_vocab={"<think>": 248068},
    )
    problems = rejected(folder)
    assert problems[0] == (
        "'<think>': expected an added token in tokenizer.json, found only a base-vocabulary "
        "entry, ID 248068 (the text encodes as 3 tokens [13314, 741, 29])"
    )
    # The base vocabulary grew by one, so tokenizers moved every added token up by one.
    assert (
        "'<|im_end|>': expected ID 248046 as declared in tokenizer.json, found ID 248047 "
        + (RENUMBERED)
        in problems
    )
    think = next(e for e in validate_checkpoint(folder).markers if e.marker == "<think>")
    assert think == MarkerEntry("<think>", 248068, None, atomic=False)


def test_marker_with_two_ids(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir,
        tmp_path / "c",
        added=lambda t: t.append({**entry(t, "<think>"), "id": 248077}),
    )
    assert rejected(folder) == (
        "'<think>': expected exactly one ID in tokenizer.json added_tokens, found IDs "
        "[248068, 248077]",
    )


def test_other_added_token_renumbered(qwen38_dir: Path, tmp_path: Path) -> None:
    """Not a protocol marker, but the model's embedding row would not be the one encoding uses."""
    folder = mutated_copy(
        qwen38_dir, tmp_path / "c", added=lambda t: entry(t, "<|audio_pad|>").update(id=248100)
    )
    assert rejected(folder) == (
        f"'<|audio_pad|>': expected ID 248100 as declared in tokenizer.json, found ID 248076 "
        f"{RENUMBERED}",
    )


def swap_im_end(config: dict[str, Any]) -> None:
    decoder = config["added_tokens_decoder"]
    decoder["248046"], decoder["248047"] = decoder["248047"], decoder["248046"]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            swap_im_end,
            f"'<|im_end|>': expected ID 248046 in {DECODER} as in tokenizer.json, found ID 248047",
        ),
        (
            lambda c: c["added_tokens_decoder"]["248058"].update(special=True),
            f"'<tool_call>': expected special=false in {DECODER} as in tokenizer.json, "
            "found special=true",
        ),
        (
            lambda c: c["added_tokens_decoder"].pop("248069"),
            f"'</think>': expected {DECODER} to list it at ID 248069 as tokenizer.json does, "
            "found no entry",
        ),
        (
            lambda c: c["added_tokens_decoder"]["248069"].update(content="</thinking>"),
            f"'</think>': expected {DECODER} to list it at ID 248069 as tokenizer.json does, "
            "found no entry (ID 248069 there is '</thinking>')",
        ),
        (
            lambda c: c["added_tokens_decoder"].update(
                {"248077": dict(c["added_tokens_decoder"]["248069"])}
            ),
            f"'</think>': expected exactly one ID in {DECODER}, found IDs [248069, 248077]",
        ),
    ],
    ids=["id-swapped", "special-flipped", "entry-missing", "entry-renamed", "two-ids"],
)
def test_tokenizer_config_disagrees(
    edit: Callable[[dict[str, Any]], None], expected: str, qwen38_dir: Path, tmp_path: Path
) -> None:
    folder = mutated_copy(qwen38_dir, tmp_path / "c", config=edit)
    assert rejected(folder) == (expected,)


def test_every_problem_is_listed(qwen38_dir: Path, tmp_path: Path) -> None:
    def break_three(tokens: list[dict[str, Any]]) -> None:
        entry(tokens, TURN_OPEN).update(rstrip=True)
        entry(tokens, "<tool_call>").update(lstrip=True)
        entry(tokens, "</tool_response>").update(single_word=True)

    folder = mutated_copy(qwen38_dir, tmp_path / "c", added=break_three)
    (folder / "tokenizer_config.json").unlink()
    assert rejected(folder, validate=True) == (
        "'<|im_start|>': expected rstrip=false in tokenizer.json, found rstrip=true",
        "'<tool_call>': expected lstrip=false in tokenizer.json, found lstrip=true",
        "'</tool_response>': expected single_word=false in tokenizer.json, found single_word=true",
    )


# --- checkpoint-level problems: reported, loading still succeeds ----------------------------------


def reported(folder: Path, *, loads: bool = False) -> ValidationReport:
    """A report with problems but a sound vocabulary; with ``loads``, loading must succeed and
    carry the same report (only the vocabulary gates loading)."""
    report = validate_checkpoint(folder)
    assert report.vocabulary_ok and not report.ok
    if loads:
        assert load(folder).report == report
    return report


def test_modified_template(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir, tmp_path / "c", files={"chat_template.jinja": lambda b: b + b"\n"}
    )
    report = reported(folder, loads=True)
    assert report.template == "other"
    assert report.problems[0].startswith(
        f"chat_template.jinja: expected the official Qwen 3.8 template (sha256 "
        f"{QWEN38_TEMPLATE_SHA256}), found sha256 {report.template_sha256}"
    )
    # tokenizer_config.json still holds the official text, which now differs from the file.
    assert report.problems[1] == (
        "tokenizer_config.json chat_template: expected the template of chat_template.jinja "
        f"(sha256 {report.template_sha256}), found another one (sha256 {QWEN38_TEMPLATE_SHA256})"
    )


def test_template_from_tokenizer_config_only(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(qwen38_dir, tmp_path / "c")
    (folder / "chat_template.jinja").unlink()
    report = validate_checkpoint(folder)
    assert report.ok and report.template == "qwen3.8"


def test_tokenizer_config_template_differs(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir, tmp_path / "c", config=lambda c: c.update(chat_template="{{ messages }}")
    )
    report = reported(folder)
    assert report.template == "qwen3.8"  # chat_template.jinja wins, as in transformers
    other = hashlib.sha256(b"{{ messages }}").hexdigest()
    assert report.problems == (
        "tokenizer_config.json chat_template: expected the template of chat_template.jinja "
        f"(sha256 {QWEN38_TEMPLATE_SHA256}), found another one (sha256 {other})",
    )


def test_template_absent(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(qwen38_dir, tmp_path / "c", config=lambda c: c.pop("chat_template"))
    (folder / "chat_template.jinja").unlink()
    report = reported(folder)
    assert (report.template, report.template_sha256) == ("absent", None)
    assert report.problems == (
        "chat template: expected chat_template.jinja or a chat_template in tokenizer_config.json, "
        "found neither",
    )


def test_stop_tokens_without_im_end(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir,
        tmp_path / "c",
        files={"generation_config.json": lambda g: {**g, "eos_token_id": 248044}},
    )
    report = reported(folder)
    assert report.stop_token_ids == (248044,)
    assert report.problems == (
        "generation_config.json eos_token_id: expected to include 248046 ('<|im_end|>'), "
        "found [248044]",
    )


def test_stop_token_outside_the_vocabulary(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir,
        tmp_path / "c",
        files={"generation_config.json": lambda g: {**g, "eos_token_id": [248046, 300000]}},
    )
    assert reported(folder).problems == (
        "generation_config.json eos_token_id: expected IDs of the vocabulary, found 300000, "
        "which is no token",
    )


def test_stop_tokens_missing(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir,
        tmp_path / "c",
        files={
            "generation_config.json": lambda g: {k: v for k, v in g.items() if k != "eos_token_id"}
        },
    )
    assert reported(folder).problems == (
        "generation_config.json eos_token_id: expected a token ID or a list of IDs including "
        "248046 ('<|im_end|>'), found null",
    )


def test_embedding_smaller_than_the_vocabulary(qwen38_dir: Path, tmp_path: Path) -> None:
    def shrink(config: dict[str, Any]) -> dict[str, Any]:
        config["text_config"]["vocab_size"] = 248070
        return config

    folder = mutated_copy(qwen38_dir, tmp_path / "c", files={"config.json": shrink})
    report = reported(folder, loads=True)
    assert report.embedding_size == 248070
    assert report.problems == (
        "config.json text_config.vocab_size: expected at least 248077 (the largest token ID is "
        "248076), found 248070: token IDs 248070..248076 have no embedding row",
    )


def test_embedding_size_at_top_level(qwen38_dir: Path, tmp_path: Path) -> None:
    def flatten(config: dict[str, Any]) -> dict[str, Any]:
        return {"vocab_size": config["text_config"]["vocab_size"]}

    folder = mutated_copy(qwen38_dir, tmp_path / "c", files={"config.json": flatten})
    report = validate_checkpoint(folder)
    assert report.ok and report.embedding_size == 248320


def test_embedding_size_missing(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir, tmp_path / "c", files={"config.json": lambda c: {"model_type": "x"}}
    )
    assert reported(folder).problems == (
        "config.json: expected vocab_size (top level or under text_config) of at least 248077, "
        "found neither",
    )


# --- bad inputs: a clear error naming the path, never a fallback ----------------------------------


def test_missing_folder() -> None:
    with pytest.raises(CheckpointError, match="no such file or folder"):
        validate_checkpoint("./no-such-checkpoint")


def test_missing_tokenizer_json(tmp_path: Path) -> None:
    files = CheckpointFiles(str(tmp_path), tmp_path / "tokenizer.json", None, None, None, None)
    with pytest.raises(CheckpointError) as raised:
        load_vocabulary(files)
    assert (
        str(raised.value)
        == f"{tmp_path / 'tokenizer.json'}: missing; a checkpoint needs tokenizer.json"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"version": "1.0", "added_tokens": [', ": invalid JSON (it must end with the }"),
        (b"\xff\xfe{}", ": not UTF-8 text, so not a tokenizer.json"),
        (b'{"version": "1.0"}', ": valid JSON but not a tokenizer.json that tokenizers can load"),
    ],
    ids=["truncated", "binary", "json-not-tokenizer"],
)
def test_unreadable_tokenizer_json(content: bytes, expected: str, tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_bytes(content)
    for call in (lambda: load(tmp_path), lambda: validate_checkpoint(tmp_path)):
        with pytest.raises(CheckpointError) as raised:
            call()
        assert str(raised.value).startswith(f"{tmp_path / 'tokenizer.json'}{expected}")


def test_not_a_bpe_vocabulary(tmp_path: Path) -> None:
    word_level = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    word_level.add_special_tokens([AddedToken(m, normalized=False) for m in PROTOCOL_MARKERS])
    word_level.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(CheckpointError) as raised:
        load(tmp_path)
    assert str(raised.value) == (
        f"{tmp_path / 'tokenizer.json'}: expected a byte-level BPE vocabulary (every Qwen "
        "tokenizer.json is one), found a WordLevel model"
    )


@pytest.mark.parametrize("name", ["tokenizer_config.json", "generation_config.json", "config.json"])
def test_invalid_json_in_a_side_file(name: str, qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(qwen38_dir, tmp_path / "c")
    (folder / name).write_text('{"truncated": ', encoding="utf-8")
    with pytest.raises(CheckpointError) as raised:
        validate_checkpoint(folder)
    assert str(raised.value).startswith(f"{folder / name}: invalid JSON (")


def test_side_file_not_an_object(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(qwen38_dir, tmp_path / "c")
    (folder / "config.json").write_text("[]", encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"config\.json: expected a JSON object, found list"):
        load(folder)


# --- a tiny synthetic vocabulary (no ../shared needed) --------------------------------------------


def tiny_tokenizer(*, post_processor: Any = None) -> Tokenizer:
    """A byte-level BPE with no merges and every Qwen 3.8 added token, IDs after the 256 bytes."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(m, normalized=False) for m in ALL_ADDED_TOKENS])
    if post_processor is not None:
        tokenizer.post_processor = post_processor
    return tokenizer


def test_tiny_vocabulary_without_side_files(tmp_path: Path) -> None:
    tiny_tokenizer().save(str(tmp_path / "tokenizer.json"))
    vocab = load(tmp_path)
    assert vocab.marker_ids[TURN_OPEN] == 256 + ALL_ADDED_TOKENS.index(TURN_OPEN)
    report = vocab.report
    assert report.vocabulary_ok and not report.ok
    assert report.template == "absent"
    assert report.pre_tokenizer == "ByteLevel"
    assert report.max_token_id == 256 + len(ALL_ADDED_TOKENS) - 1
    assert len(report.problems) == 3  # no template, no generation_config.json, no config.json


def test_bos_added_by_the_post_processor(tmp_path: Path) -> None:
    bos = ALL_ADDED_TOKENS.index("<|endoftext|>") + 256
    processor = TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", bos)]
    )
    tiny_tokenizer(post_processor=processor).save(str(tmp_path / "tokenizer.json"))
    a = sorted(pre_tokenizers.ByteLevel.alphabet()).index("a")
    assert validate_checkpoint(tmp_path).bos == (
        f"post-processor adds tokens with add_special_tokens=True ([{bos}, {a}] for 'a' instead "
        f"of [{a}]); chat prompts must be encoded without them"
    )


def reordered_tiny(tmp_path: Path, order: Callable[[dict[str, Any]], dict[str, Any]]) -> Path:
    data = json.loads(tiny_tokenizer().to_str())
    (tmp_path / "tokenizer.json").write_text(json.dumps(order(data)), encoding="utf-8")
    return tmp_path / "tokenizer.json"


def model_first(data: dict[str, Any]) -> dict[str, Any]:
    return {"model": data.pop("model"), **data}


def test_added_tokens_after_the_model_are_read(tmp_path: Path) -> None:
    path = reordered_tiny(tmp_path, model_first)
    declared = checkpoint_json.declared_added_tokens(path)
    assert declared == json.loads(path.read_text(encoding="utf-8"))["added_tokens"]
    assert load(tmp_path).report.vocabulary_ok


@pytest.mark.parametrize("order", ["model-first", "added-tokens-last", "sorted-reversed"])
def test_declared_ids_are_checked_in_any_key_order(order: str, tmp_path: Path) -> None:
    """The declared-ID check held only when added_tokens came before model: a file declaring
    <|im_end|> at another ID than the one tokenizers loads it at validated as ok."""

    def wrong_im_end(data: dict[str, Any]) -> dict[str, Any]:
        entry(data["added_tokens"], TURN_CLOSE)["id"] = 99_999
        if order == "model-first":
            return model_first(data)
        if order == "added-tokens-last":
            return {**{k: v for k, v in data.items() if k != "added_tokens"}, **data}
        return dict(sorted(data.items(), reverse=True))

    path = reordered_tiny(tmp_path, wrong_im_end)
    loaded = Tokenizer.from_file(str(path)).token_to_id(TURN_CLOSE)
    assert loaded != 99_999
    report = validate_checkpoint(tmp_path)
    assert not report.vocabulary_ok
    assert f"'<|im_end|>': expected ID 99999 as declared in tokenizer.json, found ID {loaded} " in (
        "\n".join(report.vocabulary_problems)
    )


def test_added_tokens_far_into_the_head(tmp_path: Path) -> None:
    """Large values before added_tokens (a multi-byte character among them) are stepped over."""
    text = tiny_tokenizer().to_str()
    at = text.index('"added_tokens"')
    padded = text[:at] + '"x": "é", ' + " " * (1 << 20) + '"y": [[1, {"z": "]"}]], ' + text[at:]
    (tmp_path / "tokenizer.json").write_text(padded, encoding="utf-8")
    declared = checkpoint_json.declared_added_tokens(tmp_path / "tokenizer.json")
    assert declared is not None
    assert [e["content"] for e in declared] == list(ALL_ADDED_TOKENS)


def test_only_the_top_level_added_tokens_count() -> None:
    """A nested "added_tokens" key, or one inside a string, is not the file's list; an escaped
    spelling of the key is the same key (serde decodes escapes in keys)."""
    decoy = [{"id": 1, "content": "decoy"}]
    real = [{"id": 7, "content": '<|x"]}|>'}]
    text = json.dumps(
        {
            "version": '"added_tokens": [1]',
            "normalizer": {"added_tokens": decoy, "s": ["{", "\\", '\\"']},
            "model": {"vocab": {"[": 0, '"added_tokens": ': 1}, "merges": [["[", "{"]]},
            "added_tokens": real,
        }
    ).encode()
    assert checkpoint_json.top_level_added_tokens(text) == real
    escaped = text.replace(b'"added_tokens": [{"id": 7', b'"added\\u005ftokens": [{"id": 7')
    assert escaped != text
    assert checkpoint_json.top_level_added_tokens(escaped) == real


def test_scan_never_misreads_a_truncated_file() -> None:
    text = json.dumps(
        {
            "version": "1.0",
            "truncation": None,
            "x": [1.5, "a,b", {"y": ["]"]}],
            "model": {"vocab": {"a": 0}, "merges": [["a", "b"]]},
            "added_tokens": [{"id": 7, "content": "<é>"}],
        },
        ensure_ascii=False,
    ).encode()
    full = checkpoint_json.top_level_added_tokens(text)
    assert full == [{"id": 7, "content": "<é>"}]
    for cut in range(len(text)):
        assert checkpoint_json.top_level_added_tokens(text[:cut]) in (None, full), cut


def test_scan_is_linear_on_hostile_nesting() -> None:
    """Long runs that open a container but close none are where a backtracking pattern would go
    exponential: the scan must step over them by counting, in one pass."""
    text = (
        b'{"a": [' + b'{"k": 1, ' * 50_000 + b'"m": [1]' + b"}" * 50_000 + b'], "added_tokens": []}'
    )
    assert checkpoint_json.top_level_added_tokens(text) == []


def test_chat_template_kind_without_loading_the_vocabulary(qwen38_dir, qwen3_dir, monkeypatch):
    from qwen_encode import vocabulary

    monkeypatch.setattr(vocabulary, "_load_tokenizer", lambda path: pytest.fail("loaded"))
    assert vocabulary.chat_template_kind(qwen38_dir) == "qwen3.8"
    assert vocabulary.chat_template_kind(qwen3_dir) == "other"


# --- numbers and shapes in the side files: a problem in the report, never OverflowError -------

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "qwen3.8-tiny"


def tiny_with(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "tiny"
    shutil.copytree(TINY, folder)
    (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("eos", "found"),
    [
        ("[-1]", "found -1, which is no token"),
        ("-1", "found -1, which is no token"),
        (str(2**64), f"found {2**64}, which is no token"),
        (f"[2050, {2**63 + 1}]", f"found {2**63 + 1}, which is no token"),
        ('"2050"', 'found "2050"'),
        ("[[2050]]", "found [[2050]]"),
        ("[true]", "found [true]"),
        ("[2050.0]", "found [2050.0]"),
        ("[]", "found []"),
    ],
)
def test_stop_tokens_of_any_shape_are_a_problem_in_the_report(
    eos: str, found: str, tmp_path: Path
) -> None:
    folder = tiny_with(tmp_path, "generation_config.json", f'{{"eos_token_id": {eos}}}')
    report = validate_checkpoint(folder)
    assert report.vocabulary_ok and not report.ok
    stop_problems = [p for p in report.problems if p.startswith("generation_config.json")]
    assert stop_problems and all("eos_token_id" in p for p in stop_problems)
    assert any(found in p for p in stop_problems), stop_problems
    # Nothing else went missing from the report: the other checks ran.
    assert report.template == "qwen3.8" and report.embedding_size == 2112
    assert load(folder).report == report  # loading does not raise either


@pytest.mark.parametrize(
    ("vocab_size", "found"),
    [
        ("-1", "found -1"),
        (str(2**70), None),
        ("2112.0", "expected an integer of at least 2081, found 2112.0"),
        ('"2112"', 'expected an integer of at least 2081, found "2112"'),
        ("true", "expected an integer of at least 2081, found true"),
        ("[2112]", "expected an integer of at least 2081, found [2112]"),
    ],
)
def test_embedding_size_of_any_shape(vocab_size: str, found: str | None, tmp_path: Path) -> None:
    config = json.loads((TINY / "config.json").read_text(encoding="utf-8"))
    text = json.dumps(config).replace('"vocab_size": 2112', f'"vocab_size": {vocab_size}')
    report = validate_checkpoint(tiny_with(tmp_path, "config.json", text))
    embedding = [p for p in report.problems if p.startswith("config.json text_config.vocab_size")]
    if found is None:
        assert report.ok and report.embedding_size == 2**70
    else:
        assert len(embedding) == 1 and found in embedding[0], report.problems


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"eos_token_id": ' + "[" * 100_000 + "]" * 100_000 + "}", "JSON nested too deeply"),
        ('{"eos_token_id": ' + "7" * 5000 + "}", "JSON that cannot be read"),
    ],
    ids=["deep", "5000-digits"],
)
def test_side_file_json_python_cannot_hold(text: str, why: str, tmp_path: Path) -> None:
    folder = tiny_with(tmp_path, "generation_config.json", text)
    with pytest.raises(CheckpointError) as raised:
        validate_checkpoint(folder)
    assert str(raised.value).startswith(f"{folder / 'generation_config.json'}: {why}")


# --- a bound on tokenizer.json: refused before tokenizers reads it ---------------------------


@pytest.fixture
def never_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal must come before any parse: neither tokenizers nor json may read the file."""

    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail("the file was parsed before being refused")

    monkeypatch.setattr(vocabulary.tokenizers.Tokenizer, "from_file", refuse)
    monkeypatch.setattr(vocabulary.json, "load", refuse)


def sparse_tokenizer_json(tmp_path: Path, size: int) -> Path:
    """The tiny fixture's valid tokenizer.json followed by NUL bytes up to ``size``, sparse (the
    test costs no disk space or time)."""
    folder = tiny_with(tmp_path, "tokenizer.json", (TINY / "tokenizer.json").read_text("utf-8"))
    with (folder / "tokenizer.json").open("r+b") as handle:
        handle.truncate(size)
    return folder


def test_tokenizer_json_over_the_bound(tmp_path: Path, never_parsed: None) -> None:
    folder = sparse_tokenizer_json(tmp_path, 2 * 10**9)
    for call in (load, validate_checkpoint):
        with pytest.raises(CheckpointError) as raised:
            call(folder)
        assert str(raised.value).startswith(
            f"{folder / 'tokenizer.json'}: 2,000,000,000 bytes, more than the 268,435,456 "
            "(= 256 MiB) read"
        )


def test_tokenizer_json_with_trailing_nul_bytes_under_the_bound(
    tmp_path: Path, never_parsed: None
) -> None:
    folder = sparse_tokenizer_json(tmp_path, vocabulary.MAX_TOKENIZER_JSON_BYTES)
    with pytest.raises(CheckpointError) as raised:
        load(folder)
    message = str(raised.value)
    where = folder / "tokenizer.json"
    assert message.startswith(f"{where}: invalid JSON (it must end with the }} closing its object")
    last = vocabulary.MAX_TOKENIZER_JSON_BYTES - 1
    nul = bytes(12)
    assert f"found {nul!r} ending at byte {last:,}" in message


def test_trailing_blanks_are_still_json(tmp_path: Path) -> None:
    text = (TINY / "tokenizer.json").read_text("utf-8") + " \n" * (3 * checkpoint_json._TAIL_READ)
    assert load(tiny_with(tmp_path, "tokenizer.json", text)).report.ok


@pytest.mark.parametrize("name", ["tokenizer_config.json", "config.json", "chat_template.jinja"])
def test_side_file_over_the_bound(name: str, tmp_path: Path) -> None:
    folder = tiny_with(tmp_path, name, "{}")
    with (folder / name).open("r+b") as handle:
        handle.truncate(vocabulary.MAX_SIDE_FILE_BYTES + 1)
    with pytest.raises(CheckpointError, match="more than the 16,777,216 "):
        vocabulary.inspect_checkpoint(resolve_checkpoint(folder))


@pytest.mark.skipif(os.name != "posix", reason="POSIX file names are bytes")
def test_a_checkpoint_folder_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """tokenizers takes the path as a Rust string: a folder named b"x\\xff" failed to load."""
    folder = Path(os.fsdecode(os.fsencode(tmp_path) + b"/x\xff"))
    shutil.copytree(TINY, folder)
    report = load(folder).report
    assert report.ok, report.problems


# --- stop and special tokens field by field ----------------------------------------------------


def special(report: ValidationReport) -> dict[str, tuple[str, str]]:
    return {e.field: (e.tokens, e.verdict) for e in report.special_tokens}


def test_special_tokens_of_the_official_checkpoint(qwen38_dir: Path) -> None:
    report = validate_checkpoint(qwen38_dir)
    # Expected values read from the official files, not from the code under test.
    generation = json.loads((qwen38_dir / "generation_config.json").read_text(encoding="utf-8"))
    config = json.loads((qwen38_dir / "config.json").read_text(encoding="utf-8"))["text_config"]
    ids = config_ids(qwen38_dir)
    name = {i: t for t, i in ids.items()}
    assert special(report) == {
        "generation_config.json eos_token_id": (
            ", ".join(f"{i} {name[i]}" for i in generation["eos_token_id"]),
            "ok",
        ),
        "tokenizer_config.json eos_token": (f"{ids[TURN_CLOSE]} {TURN_CLOSE}", "ok"),
        "tokenizer_config.json pad_token": (f"{ids['<|endoftext|>']} <|endoftext|>", "ok"),
        "config.json text_config.eos_token_id": (
            f"{config['eos_token_id']} {name[config['eos_token_id']]}",
            "ok",
        ),
        "config.json text_config.bos_token_id": (
            f"{config['bos_token_id']} {name[config['bos_token_id']]}",
            "ok",
        ),
    }
    assert report.tie_word_embeddings is config["tie_word_embeddings"] is False
    assert all(e.rule for e in report.special_tokens)


def test_pad_token_equal_to_im_end_is_a_warning(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir, tmp_path / "c", config=lambda c: c.update(pad_token=TURN_CLOSE)
    )
    report = validate_checkpoint(folder)
    assert report.ok  # the protocol is intact; training on it is what goes wrong
    assert special(report)["tokenizer_config.json pad_token"] == (f"248046 {TURN_CLOSE}", "warning")
    (warning,) = report.warnings
    assert warning.startswith(f"tokenizer_config.json pad_token: {TURN_CLOSE!r}; collators mask")
    assert "never learns to stop" in warning


def test_pad_token_absent_is_a_warning(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(qwen38_dir, tmp_path / "c", config=lambda c: c.pop("pad_token"))
    report = validate_checkpoint(folder)
    assert report.ok and len(report.warnings) == 1
    assert "fall back to eos_token" in report.warnings[0]


def test_eos_token_other_than_im_end(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(
        qwen38_dir, tmp_path / "c", config=lambda c: c.update(eos_token="<|endoftext|>")
    )
    report = reported(folder)
    assert report.problems == (
        "tokenizer_config.json eos_token: expected '<|im_end|>', found '<|endoftext|>'",
    )
    assert special(report)["tokenizer_config.json eos_token"][1] == "problem"


def test_eos_token_not_a_token(qwen38_dir: Path, tmp_path: Path) -> None:
    folder = mutated_copy(qwen38_dir, tmp_path / "c", config=lambda c: c.update(pad_token="<pad>"))
    assert reported(folder).problems == (
        "tokenizer_config.json pad_token: expected a token of the vocabulary, found '<pad>', "
        "which is none",
    )


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("eos_token_id", 999999, "expected token IDs of the vocabulary, found 999999"),
        (
            "eos_token_id",
            [248046, "x"],
            'expected token IDs of the vocabulary, found [248046, "x"]',
        ),
        ("bos_token_id", -1, "expected a token ID or null of the vocabulary, found -1"),
    ],
)
def test_config_ids_that_are_no_token(
    field: str, value: Any, expected: str, qwen38_dir: Path, tmp_path: Path
) -> None:
    def edit(config: dict[str, Any]) -> dict[str, Any]:
        config["text_config"][field] = value
        return config

    folder = mutated_copy(qwen38_dir, tmp_path / "c", files={"config.json": edit})
    assert reported(folder).problems == (f"config.json text_config.{field}: {expected}",)


def test_config_bos_null_is_fine(qwen38_dir: Path, tmp_path: Path) -> None:
    def edit(config: dict[str, Any]) -> dict[str, Any]:
        config["text_config"]["bos_token_id"] = None
        config["text_config"]["tie_word_embeddings"] = True
        return config

    folder = mutated_copy(qwen38_dir, tmp_path / "c", files={"config.json": edit})
    report = validate_checkpoint(folder)
    assert report.ok and report.tie_word_embeddings is True


def test_problems_are_values_with_codes(tmp_path: Path) -> None:
    """Every problem string of the report is the rendering of a Problem value whose code and
    where other code acts on (the report lifts template problems by code, not by prefix)."""
    folder = tmp_path / "ckpt"
    shutil.copytree(TINY, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = "{{ messages }}"
    config["pad_token"] = TURN_CLOSE
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "generation_config.json").unlink()
    report = validate_checkpoint(folder)
    problems = [f for f in report.findings if f.severity == "problem"]
    assert [str(f) for f in problems] == list(report.problems)
    assert [str(f) for f in report.findings if f.severity == "warning"] == list(report.warnings)
    codes = {f.code for f in report.findings}
    assert {"template.config_differs", "stop.no_file", "special.pad_is_im_end"} <= codes
    differs = next(f for f in problems if f.code == "template.config_differs")
    assert differs.where == "tokenizer_config.json chat_template"
    assert report.config_template_problem == str(differs)
    data = json.loads(json.dumps(report.to_dict()))
    assert {"code", "where", "message", "severity", "rule"} == set(data["findings"][0])
