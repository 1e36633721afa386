"""``validate`` on GGUFs: the converter-made file passes, and each silent defect llama.cpp loads
without a word is found and named (by its code, never by matching message text)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from qwen_encode.errors import CheckpointError
from qwen_encode.validation.gguf import render_text, validate_gguf
from tests.gguf_files import (
    TINY,
    gguf_cache,  # noqa: F401  (the fixture, used by name below)
    make_gguf,
    write_gguf,
)
from tests.test_cli import run

IM_END, THINK, TOOL_CALL = 2050, 2072, 2062  # the tiny fixture's IDs (tokenizer_config.json)


pytestmark = pytest.mark.usefixtures("gguf_cache")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(TINY, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def _mutant(tmp_path: Path, mutate: Callable[[dict[str, Any]], None]) -> Path:
    return write_gguf(TINY, tmp_path / "mutant.gguf", mutate)


def test_converter_made_gguf_passes(tiny_gguf: Path) -> None:
    report = validate_gguf(tiny_gguf)
    assert report.ok, render_text(report)
    assert report.pre == "qwen35" and report.architecture == "qwen35"
    types = {m.marker: m.type for m in report.markers}
    assert types["<|im_end|>"] == "CONTROL" and types["<think>"] == "USER_DEFINED"
    # The FIM stop tokens llama.cpp derives are shown, as a note, not held against the file.
    eog = {token for _, token, _ in report.eog}
    assert eog == {"<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}
    assert "gguf.eog_fim" in {p.code for p in report.notes}
    assert "gguf.user_defined" in {p.code for p in report.notes}


def test_converter_made_gguf_passes_against_its_checkpoint(tiny_gguf: Path) -> None:
    report = validate_gguf(tiny_gguf, against=TINY)
    assert report.ok, render_text(report)
    assert report.probes is not None
    assert report.probes.differ_hf_rules == 0
    # llama.cpp applies no NFC: the probe corpus holds texts NFC changes.
    assert report.probes.differ_llama_text > 0
    assert "gguf.llama_text_path" in {p.code for p in report.notes}


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(fields: dict[str, Any]) -> None:
        fields[key][0] = value

    return mutate


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    def mutate(fields: dict[str, Any]) -> None:
        del fields[key]

    return mutate


def _type(token_id: int, kind: int) -> Callable[[dict[str, Any]], None]:
    def mutate(fields: dict[str, Any]) -> None:
        fields["tokenizer.ggml.token_type"][0][token_id] = kind

    return mutate


def _other_template(fields: dict[str, Any]) -> None:
    template = fields["tokenizer.chat_template"][0]
    # A "fixed" template that drops the reasoning block from history.
    fields["tokenizer.chat_template"][0] = template.replace("<think>", "<thinking>")


MUTANTS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "pre missing": (_drop("tokenizer.ggml.pre"), "gguf.pre"),
    "pre qwen2": (_set("tokenizer.ggml.pre", "qwen2"), "gguf.pre"),
    "<think> typed CONTROL": (_type(THINK, 3), "gguf.marker_type"),
    "<tool_call> typed CONTROL": (_type(TOOL_CALL, 3), "gguf.marker_type"),
    "<|im_end|> typed NORMAL": (_type(IM_END, 1), "gguf.marker_type"),
    "add_bos true": (_set("tokenizer.ggml.add_bos_token", True), "gguf.add_bos"),
    "add_bos missing": (_drop("tokenizer.ggml.add_bos_token"), "gguf.add_bos"),
    "eos <|endoftext|>": (_set("tokenizer.ggml.eos_token_id", 2048), "gguf.eos"),
    "eos </think>": (_set("tokenizer.ggml.eos_token_id", THINK + 1), "gguf.eog"),
    "template swapped": (_other_template, "gguf.template"),
    "template missing": (_drop("tokenizer.chat_template"), "gguf.template_missing"),
    "architecture qwen2": (_set("general.architecture", "qwen2"), "gguf.architecture"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_silent_defect_is_found_and_named(name: str, tmp_path: Path) -> None:
    mutate, code = MUTANTS[name]
    report = validate_gguf(_mutant(tmp_path, mutate))
    assert not report.ok
    assert code in report.codes(), render_text(report)
    text = render_text(report)
    assert f"[{code}]" in text


def _swap_tokens(fields: dict[str, Any]) -> None:
    tokens = fields["tokenizer.ggml.tokens"][0]
    tokens[300], tokens[301] = tokens[301], tokens[300]


def _drop_merges(fields: dict[str, Any]) -> None:
    del fields["tokenizer.ggml.merges"][0][10:20]


@pytest.mark.parametrize(
    ("mutate", "codes"),
    [
        (_swap_tokens, {"gguf.tokens_differ", "gguf.ids_differ"}),
        (_drop_merges, {"gguf.merges", "gguf.ids_differ"}),
        (_type(TOOL_CALL, 3), {"gguf.marker_type", "gguf.token_types_differ"}),
    ],
)
def test_against_the_checkpoint_names_each_difference(
    mutate: Callable[[dict[str, Any]], None], codes: set[str], tmp_path: Path
) -> None:
    report = validate_gguf(_mutant(tmp_path, mutate), against=TINY)
    assert codes <= report.codes(), render_text(report)


def test_stale_template_from_tokenizer_config(tmp_path: Path) -> None:
    folder = tmp_path / "finetune"
    shutil.copytree(TINY, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    # The fine-tune updated chat_template.jinja only; tokenizer_config.json keeps the old text.
    official = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    config["chat_template"] = official.replace("<think>", "<thinking>")
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    make_gguf()
    gguf_path = tmp_path / "finetune.gguf"
    make_gguf().write_fields(make_gguf().converter_fields(folder), gguf_path)
    report = validate_gguf(gguf_path, against=folder)
    assert {"gguf.stale_template", "gguf.template"} <= report.codes(), render_text(report)


def test_hostile_and_truncated_files_are_errors(tiny_gguf: Path, tmp_path: Path) -> None:
    data = tiny_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(CheckpointError, match=r"cut\.gguf: .* at byte"):
        validate_gguf(cut)
    result = run("validate", cut, "--json")
    assert result.returncode == 1
    body = json.loads(result.stdout)
    assert body["ok"] is False and "at byte" in body["error"]


def test_cli_validate_gguf_text_and_json(tiny_gguf: Path, tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    ok = run("validate", tiny_gguf, "--against", TINY, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "llama.cpp text path (no NFC)" in ok.stdout
    bad = _mutant(tmp_path, _set("tokenizer.ggml.add_bos_token", True))
    result = run("validate", bad, "--json", env=env)
    assert result.returncode == 1
    body = json.loads(result.stdout)
    assert body["kind"] == "gguf" and body["ok"] is False
    assert [p["code"] for p in body["problems"]] == ["gguf.add_bos"]
    assert body["problems"][0]["where"].startswith("tokenizer.ggml.add_bos_token (byte ")


# --- the real vocabulary: the expectation model's fingerprints ---------------------------------


@pytest.fixture(scope="module")
def real_fields(qwen38_dir: Path) -> dict[str, Any]:
    return make_gguf().converter_fields(qwen38_dir)


def _write_real(fields: dict[str, Any], out: Path, mutate: Callable | None = None) -> Path:
    copy = {k: [list(v) if isinstance(v, list) else v, t, s] for k, (v, t, s) in fields.items()}
    if mutate is not None:
        mutate(copy)
    make_gguf().write_fields({k: tuple(v) for k, v in copy.items()}, out)
    return out


def test_real_gguf_passes_and_its_defects_are_named_without_a_base(
    real_fields: dict[str, Any], tmp_path: Path
) -> None:
    report = validate_gguf(_write_real(real_fields, tmp_path / "ok.gguf"))
    assert report.ok, render_text(report)
    assert "gguf.vocabulary" not in {p.code for p in report.findings}  # the official tokens

    def swap(fields: dict[str, Any]) -> None:
        tokens = fields["tokenizer.ggml.tokens"][0]
        tokens[1000], tokens[2000] = tokens[2000], tokens[1000]

    def drop(fields: dict[str, Any]) -> None:
        del fields["tokenizer.ggml.merges"][0][-31:]

    swapped = validate_gguf(_write_real(real_fields, tmp_path / "swap.gguf", swap))
    assert "gguf.tokens_moved" in swapped.codes()
    dropped = validate_gguf(_write_real(real_fields, tmp_path / "drop.gguf", drop))
    assert "gguf.merges" in dropped.codes()
