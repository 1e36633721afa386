"""``qwen_encode.report``: the template behaviour report (oracle: transformers'
``apply_chat_template``), prefix stability, dead tokens (oracle: each token checked with
``tokenizers`` directly, and the merges list read from the file), and the comparison with a base
on checkpoints derived in tmp dirs from the shared ones and the committed tiny fixture."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

import qwen_encode as qe
from qwen_encode import report
from qwen_encode.markers import TURN_CLOSE, TURN_OPEN
from qwen_encode.report import FEATURES, PROBES, render_template, template_behaviour
from qwen_encode.validation import dead as dead_module
from qwen_encode.validation import templates as templates_module

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures" / "qwen3.8-tiny"


@pytest.fixture(scope="module")
def official(qwen38_dir: Path) -> str:
    return (qwen38_dir / "chat_template.jinja").read_text(encoding="utf-8")


# --- rendering as transformers does -------------------------------------------------------------


def test_rendering_equals_apply_chat_template_on_every_probe(official: str, oracle: Any) -> None:
    pytest.importorskip("jinja2")
    for probe in PROBES:
        try:
            expected: str | None = oracle.apply_chat_template(
                [dict(m) for m in probe.messages],
                tools=None if probe.tools is None else list(probe.tools),
                add_generation_prompt=probe.add_generation_prompt,
                continue_final_message=probe.continue_final_message,
                tokenize=False,
                **probe.kwargs,
            )
        except Exception:
            expected = None
        try:
            mine: str | None = render_template(
                official,
                probe.messages,
                tools=probe.tools,
                add_generation_prompt=probe.add_generation_prompt,
                continue_final_message=probe.continue_final_message,
                **probe.kwargs,
            )
        except Exception:
            mine = None
        assert mine == expected, probe.name
    # The error probes are the only ones that raise, and they all do.
    assert sum(probe.feature == "error cases" for probe in PROBES) >= 8


def test_every_feature_has_probes() -> None:
    assert {probe.feature for probe in PROBES} == set(FEATURES)


def test_official_template_behaves_as_the_native_renderer(official: str) -> None:
    pytest.importorskip("jinja2")
    behaviour = template_behaviour(official)
    assert behaviour.available and behaviour.identical
    assert [f.feature for f in behaviour.features] == list(FEATURES)


# One mutation of the official template per feature: (feature, text replaced, replacement).
MUTATIONS = [
    (
        "system prompt",
        "else '')  + content + '<|im_end|>\\n' }}",
        "else '')  + content|upper + '<|im_end|>\\n' }}",
    ),
    (
        "reasoning effort",
        "Reasoning effort is set to low. Keep",
        "Reasoning effort: low. Keep",
    ),
    (
        "thinking primer",
        "{{- '<think>\\n\\n</think>\\n\\n' }}",
        "{{- '<think>\\n</think>\\n\\n' }}",
    ),
    ("tools block", '{{- "\\n</tools>" }}', '{{- "\\n</tools>\\n" }}'),
    (
        "tool calls",
        "{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}",
        "{{- '\\n\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}",
    ),
    (
        "tool results",
        '{%- if not loop.last and loop.nextitem.role != "tool" %}',
        "{%- if not loop.last %}",
    ),
    (
        "multi-turn reasoning",
        "{{- '<|im_start|>' + message.role + '\\n' + content }}",
        "{{- '<|im_start|>' + message.role + '\\n<think>\\n\\n</think>\\n\\n' + content }}",
    ),
    ("images and videos", "'Picture ' ~ image_count.value", "'Image ' ~ image_count.value"),
    (
        "continue_final_message",
        "{%- set content = render_content(message.content, true)|trim %}",
        "{%- set content = render_content(message.content, true) %}",
    ),
    (
        "error cases",
        "{{- raise_exception('System message must be at the beginning.') }}",
        "{{- '' }}",
    ),
]


@pytest.mark.parametrize(("feature", "old", "new"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_mutation_is_reported_under_its_feature_only(
    feature: str, old: str, new: str, official: str
) -> None:
    pytest.importorskip("jinja2")
    assert official.count(old) == 1, "the mutation must hit exactly one place"
    behaviour = template_behaviour(official.replace(old, new))
    changed = {f.feature: f for f in behaviour.features if f.status != "identical"}
    assert set(changed) == {feature}
    result = changed[feature]
    assert result.status == "differs"
    assert result.probe is not None and result.probe.feature == feature
    assert result.template_line != result.reference_line


def test_a_system_prompt_change_under_default_options_is_found(official: str) -> None:
    # A fine-tune that lets the system text replace the default (xhigh) effort line renders
    # every probe with an explicit effort exactly as before: only a probe that leaves the options
    # at their defaults sees it.
    pytest.importorskip("jinja2")
    old = "(reasoning_instructions + '\\n\\n' if reasoning_instructions else '')  + content"
    new = (
        "(reasoning_instructions + '\\n\\n' if reasoning_instructions and "
        "resolved_reasoning_effort != 'xhigh' else '')  + content"
    )
    assert official.count(old) == 1, "the mutation must hit exactly one place"
    behaviour = template_behaviour(official.replace(old, new))
    changed = {f.feature: f for f in behaviour.features if f.status != "identical"}
    assert "system prompt" in changed
    assert changed["system prompt"].probe is not None
    assert changed["system prompt"].probe.kwargs == {}


def test_every_listed_feature_has_a_mutation() -> None:
    # "turns" (user and assistant turns) is what every probe renders: a change there shows under
    # every feature, so it has no single-feature mutation.
    assert {m[0] for m in MUTATIONS} == set(FEATURES) - {"turns"}


# Templates that drop the reasoning of assistant turns before the last user query: Qwen3's
# rule (whatever preserve_thinking says), and the official rule with preserve_thinking off by
# default. Only the multi-turn reasoning probes may see it.
_KEEP = (
    "{%- if preserve_thinking is undefined or preserve_thinking is true or "
    "loop.index0 > ns.last_query_index %}"
)
REASONING_DROPPED = {
    "qwen3 rule": "{%- if loop.index0 > ns.last_query_index %}",
    "off by default": "{%- if preserve_thinking is true or loop.index0 > ns.last_query_index %}",
}


@pytest.fixture(scope="module")
def dropping(official: str) -> dict[str, report.BehaviourReport]:
    pytest.importorskip("jinja2")
    assert official.count(_KEEP) == 1
    return {
        name: template_behaviour(official.replace(_KEEP, rule))
        for name, rule in REASONING_DROPPED.items()
    }


@pytest.mark.parametrize("rule", list(REASONING_DROPPED))
@pytest.mark.parametrize("feature", [f for f in FEATURES if f != "multi-turn reasoning"])
def test_dropping_earlier_reasoning_leaves_this_feature_identical(
    feature: str, rule: str, dropping: dict[str, report.BehaviourReport]
) -> None:
    result = next(f for f in dropping[rule].features if f.feature == feature)
    assert result.status == "identical", (result.probe, result.template_line)


@pytest.mark.parametrize("rule", list(REASONING_DROPPED))
def test_dropping_earlier_reasoning_shows_under_multi_turn_reasoning(
    rule: str, dropping: dict[str, report.BehaviourReport]
) -> None:
    result = next(f for f in dropping[rule].features if f.feature == "multi-turn reasoning")
    assert result.status == "differs"


def test_a_reworded_error_message_is_a_difference(official: str) -> None:
    # Both still refuse a late system message, but the caller reads another message.
    pytest.importorskip("jinja2")
    old = "raise_exception('System message must be at the beginning.')"
    assert official.count(old) == 1
    behaviour = template_behaviour(
        official.replace(old, "raise_exception('The system message must come first.')")
    )
    changed = {f.feature: f for f in behaviour.features if f.status != "identical"}
    assert set(changed) == {"error cases"}
    result = changed["error cases"]
    assert result.status == "differs" and result.probe is not None
    assert result.probe.name == "system not first"
    assert result.template_line == "(raises: The system message must come first.)"
    assert result.reference_line == "(raises: System message must be at the beginning.)"
    # Against the official template's own text, as --against compares two templates.
    reworded = official.replace(old, "raise_exception('Nope.')")
    assert not template_behaviour(reworded, official).identical
    assert template_behaviour(official, official).identical


def test_a_template_that_raises_is_reported_as_raising(official: str) -> None:
    pytest.importorskip("jinja2")
    broken = official.replace(
        "{{- 'Picture ' ~ image_count.value ~ ': ' }}", "{{- raise_exception('no ids') }}"
    )
    behaviour = template_behaviour(broken)
    (result,) = [f for f in behaviour.features if f.status != "identical"]
    assert (result.feature, result.status) == ("images and videos", "raises")
    assert result.error == "TemplateError: no ids"


def test_the_first_differing_line_of_each_side(official: str) -> None:
    pytest.importorskip("jinja2")
    behaviour = template_behaviour(official.replace('"\\n</tools>"', '"\\n</TOOLS>"'))
    (result,) = [f for f in behaviour.features if f.status != "identical"]
    assert (result.template_line, result.reference_line) == ("</TOOLS>", "</tools>")
    assert result.probe is not None and result.probe.tools


def test_without_jinja2_the_report_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder = tmp_path / "c"
    shutil.copytree(TINY, folder)
    path = folder / "chat_template.jinja"
    path.write_text(path.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 now raises ImportError
    full = report.checkpoint_report(folder)
    assert full.behaviour is not None and not full.behaviour.available
    assert full.behaviour.note == "the template check needs jinja2 (pip install jinja2)"
    assert full.dead.checked > 0  # everything else still ran
    assert not full.ok  # the modified template is still a problem of the validation


def test_a_template_that_does_not_compile() -> None:
    pytest.importorskip("jinja2")
    behaviour = template_behaviour("{% if %}")
    assert not behaviour.available
    assert behaviour.note is not None and behaviour.note.startswith(
        "the template does not compile: TemplateSyntaxError"
    )


def test_known_templates_are_named() -> None:
    assert report.template_name(qe.vocabulary.QWEN38_TEMPLATE_SHA256) == (
        "the official Qwen 3.8 template"
    )
    assert report.template_name("0" * 64) == "an unknown template"
    assert report.template_name(None) == "no template"


def test_the_qwen3_template_is_recognised(qwen3_dir: Path) -> None:
    full = report.checkpoint_report(qwen3_dir)
    assert full.template_name.startswith("the Qwen3 template")


# --- prefix stability ---------------------------------------------------------------------------


def expected_breaks(preserve: bool) -> list[int]:
    """Where the official template must break: with preserve_thinking off, adding a new user
    query drops the reasoning of every assistant turn before it (template line 116), so the
    prefix breaks at each user message that follows an assistant turn with reasoning."""
    if preserve:
        return []
    roles = [role for role, _ in templates_module._GROWING]
    return [i for i, role in enumerate(roles) if role == "user" and "assistant" in roles[:i]]


def test_prefix_stability_of_the_official_template() -> None:
    results = report.prefix_stability()
    assert len(results) == 4
    for result in results:
        breaks = [b.length for b in result.breaks]
        assert breaks == expected_breaks(result.options["preserve_thinking"]), result.options
        assert all(not b.primer and b.role == "user" for b in result.breaks)


def test_prefix_stability_rendered_with_the_template_agrees(official: str) -> None:
    pytest.importorskip("jinja2")
    assert report.prefix_stability(official) == report.prefix_stability()


def test_a_template_that_always_keeps_reasoning_is_stable(official: str) -> None:
    pytest.importorskip("jinja2")
    # As TRL's qwen3_8_training.jinja does: no preserve_thinking condition.
    always = official.replace(
        "{%- if preserve_thinking is undefined or preserve_thinking is true or "
        "loop.index0 > ns.last_query_index %}",
        "{%- if true %}",
    )
    assert always != official
    assert all(not result.breaks for result in report.prefix_stability(always))


def test_a_primer_that_history_does_not_repeat_breaks_after_the_primer(official: str) -> None:
    pytest.importorskip("jinja2")
    # The Qwen3/3.5 pattern of QwenLM/Qwen3 1826: history turns without the empty think block.
    bare = official.replace(
        "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + "
        "'\\n</think>\\n\\n' + content }}",
        "{%- if reasoning_content %}{{- '<|im_start|>' + message.role + '\\n<think>\\n' + "
        "reasoning_content + '\\n</think>\\n\\n' + content }}{%- else %}"
        "{{- '<|im_start|>' + message.role + '\\n' + content }}{%- endif %}",
    )
    assert bare != official
    off = next(
        r
        for r in report.prefix_stability(bare)
        if r.options == {"preserve_thinking": True, "enable_thinking": False}
    )
    assert off.breaks and all(b.primer and b.role == "assistant" for b in off.breaks)


# --- dead tokens --------------------------------------------------------------------------------


def test_dead_tokens_of_the_real_vocabulary(qwen38_dir: Path) -> None:
    path = qwen38_dir / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    dead = report.dead_tokens(tokenizer)
    found = {kind: {t.id for t in dead.of(kind)} for kind in dead_module.DEAD_KINDS}

    # Oracle 1: every entry checked with tokenizers directly, one encode per token.
    size = tokenizer.get_vocab_size(with_added_tokens=True)

    def text(i: int) -> str:
        return tokenizer.decode([i], skip_special_tokens=False)

    failing = {
        i for i in range(size) if tokenizer.encode(text(i), add_special_tokens=False).ids != [i]
    }
    assert set().union(*found.values()) == failing

    # Oracle 2: the merges as the file lists them; a base token that no merge produces and that
    # is not a single byte can never be built (the shared README counts 201).
    model = json.loads(path.read_text(encoding="utf-8"))["model"]
    produced = {"".join(m) if isinstance(m, list) else m.replace(" ", "") for m in model["merges"]}
    singles = {token for token in model["vocab"] if len(token) == 1}
    buildable = produced | singles
    no_merge = {i for token, i in model["vocab"].items() if token not in buildable}
    assert found["unreachable"] == no_merge
    assert len(no_merge) == 201

    # Partial UTF-8: the decoder can only show them as U+FFFD.
    assert found["partial_utf8"] == {i for i in failing - no_merge if "\ufffd" in text(i)}
    # What remains is split by the pre-tokenizer (fullwidth digits go one by one).
    assert found["pre_tokenizer"] == failing - no_merge - found["partial_utf8"]
    assert all(
        len(tokenizer.pre_tokenizer.pre_tokenize_str(t.text or "")) > 1 for t in dead.pre_tokenizer
    )
    assert found["nfc"] == set() == found["added"]
    assert dead.checked == size


def copy_of(source: Path, destination: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    shutil.copytree(source, destination)
    data = json.loads((destination / "tokenizer.json").read_text(encoding="utf-8"))
    edit(data)
    (destination / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    return destination


def first_merge(data: dict[str, Any]) -> tuple[list[str], str]:
    """A merge of the tiny vocabulary whose result is a base token, and that token."""
    vocab = data["model"]["vocab"]
    for merge in data["model"]["merges"]:
        pair = merge if isinstance(merge, list) else merge.split(" ")
        if "".join(pair) in vocab and len("".join(pair)) == 2:
            return pair, "".join(pair)
    raise AssertionError("no merge")


def test_a_removed_merge_makes_its_token_unreachable(tmp_path: Path) -> None:
    data = json.loads((TINY / "tokenizer.json").read_text(encoding="utf-8"))
    pair, token = first_merge(data)

    def remove(d: dict[str, Any]) -> None:
        d["model"]["merges"] = [m for m in d["model"]["merges"] if list(m) != pair]

    folder = copy_of(TINY, tmp_path / "c", remove)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    dead = report.dead_tokens(tokenizer)
    assert data["model"]["vocab"][token] in {t.id for t in dead.unreachable}
    original = report.dead_tokens(Tokenizer.from_file(str(TINY / "tokenizer.json")))
    assert data["model"]["vocab"][token] not in {t.id for t in original.unreachable}


def replace_entry(d: dict[str, Any], text: str) -> int:
    """Put a base entry spelling ``text`` (in byte-level characters) in place of one that is no
    part of any merge (dropped with the merge that builds it); its ID."""
    bytes_of, unused = dead_module._BYTE_TABLE, dead_module._NOT_A_BYTE
    table = {byte: chr(char) for char, byte in bytes_of.items() if byte != unused}
    token = "".join(table[b] for b in text.encode("utf-8"))
    vocab, merges = d["model"]["vocab"], d["model"]["merges"]
    pairs = [m if isinstance(m, list) else m.split(" ") for m in merges]
    parts = {part for pair in pairs for part in pair}
    old = next(k for k in vocab if k not in parts and len(k) > 1)
    d["model"]["merges"] = [
        m for m, pair in zip(merges, pairs, strict=True) if "".join(pair) != old
    ]
    token_id: int = vocab.pop(old)
    vocab[token] = token_id
    return token_id


def test_a_token_changed_by_nfc(tmp_path: Path) -> None:
    decomposed = "e\u0301"  # NFC composes it to é: the entry can never come out of the normalizer

    replaced: list[int] = []
    folder = copy_of(TINY, tmp_path / "c", lambda d: replaced.append(replace_entry(d, decomposed)))
    dead = report.dead_tokens(Tokenizer.from_file(str(folder / "tokenizer.json")))
    assert [(t.id, t.text) for t in dead.nfc] == [(replaced[0], decomposed)]


def one_by_one(tokenizer: Tokenizer) -> set[int]:
    """The oracle: every ID whose decoded text, encoded alone, is not that one ID."""
    return {
        i
        for i in tokenizer.get_vocab(with_added_tokens=True).values()
        if tokenizer.encode(
            tokenizer.decode([i], skip_special_tokens=False), add_special_tokens=False
        ).ids
        != [i]
    }


def all_dead(dead: report.DeadTokens) -> set[int]:
    return {t.id for kind in dead_module.DEAD_KINDS for t in dead.of(kind)}


def tiny_with(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Tokenizer:
    folder = copy_of(TINY, tmp_path / "c", edit)
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def test_dead_tokens_without_a_usable_separator(tmp_path: Path) -> None:
    # Every added token strips its neighbours' spaces: joined texts would lose them, so each
    # text is encoded alone; the answer is the same.
    def strip(d: dict[str, Any]) -> None:
        for token in d["added_tokens"]:
            token["rstrip"] = True

    tokenizer = tiny_with(tmp_path, strip)
    assert dead_module._separator(tokenizer) is None
    assert all_dead(report.dead_tokens(tokenizer)) == one_by_one(tokenizer)


def test_dead_tokens_when_an_added_token_could_span_the_separator(tmp_path: Path) -> None:
    # "x<|endoftext" ends with the start of "<|endoftext|>": between two joined texts it would
    # match across the boundary, so <|endoftext|> is no separator (another one is taken).
    def add(d: dict[str, Any]) -> None:
        d["added_tokens"].append(
            {
                "id": 2081,
                "content": "x<|endoftext",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )

    tokenizer = tiny_with(tmp_path, add)
    chosen = dead_module._separator(tokenizer)
    assert chosen is not None and chosen[0] != "<|endoftext|>"
    assert all_dead(report.dead_tokens(tokenizer)) == one_by_one(tokenizer)


def test_a_token_holding_the_separator(tmp_path: Path) -> None:
    # A base entry (after the added tokens: IDs no longer contiguous) whose text holds the
    # separator: its chunk has one cut too many and is encoded text by text.
    replaced: list[int] = []
    tokenizer = tiny_with(tmp_path, lambda d: replaced.append(replace_entry(d, "x<|endoftext|>")))
    assert dead_module._separator(tokenizer) == ("<|endoftext|>", 2048)
    dead = report.dead_tokens(tokenizer)
    assert all_dead(dead) == one_by_one(tokenizer)
    assert [t.encodes_as for t in dead.pre_tokenizer if t.id == replaced[0]] == [(87, 2048)]


def test_base_ids_with_a_gap(tmp_path: Path) -> None:
    # IDs not 0..n-1: every entry is still checked, by its own ID.
    def gap(d: dict[str, Any]) -> None:
        vocab = d["model"]["vocab"]
        vocab[next(k for k, i in vocab.items() if i == 2047)] = 3000

    tokenizer = tiny_with(tmp_path, gap)
    assert tokenizer.id_to_token(2047) is None and tokenizer.id_to_token(3000) is not None
    assert sorted(dead_module._base_vocabulary(tokenizer)) == sorted(
        (i, t) for t, i in tokenizer.get_vocab(with_added_tokens=False).items()
    )
    assert all_dead(report.dead_tokens(tokenizer)) == one_by_one(tokenizer)


def test_a_tokenizer_set_to_pad_or_truncate(tmp_path: Path) -> None:
    # Padding to the longest text of a batch made every entry "dead" once one text encodes to
    # two IDs (here: a merge removed); truncation would cut the joined texts. The caller's
    # tokenizer keeps its settings.
    def remove(d: dict[str, Any]) -> None:
        pair = first_merge(d)[0]
        d["model"]["merges"] = [m for m in d["model"]["merges"] if list(m) != pair]

    tokenizer = tiny_with(tmp_path, remove)
    expected = one_by_one(tokenizer)
    assert report.dead_tokens(tokenizer).unreachable
    tokenizer.enable_padding(pad_id=2048, pad_token="<|endoftext|>")
    tokenizer.enable_truncation(max_length=8)
    assert all_dead(report.dead_tokens(tokenizer)) == expected
    assert tokenizer.padding is not None and tokenizer.truncation is not None


def test_dead_tokens_in_json_list_them_all(tmp_path: Path) -> None:
    dead = report.dead_tokens(Tokenizer.from_file(str(TINY / "tokenizer.json")))
    data = json.loads(json.dumps(dead.to_dict()))
    for kind in dead_module.DEAD_KINDS:
        assert data[kind]["count"] == len(data[kind]["tokens"]) == len(dead.of(kind))


# --- compare with a base ------------------------------------------------------------------------


def kinds(comparison: report.Comparison) -> dict[str, bool]:
    return {d.kind: d.breaking for d in comparison.differences}


def side_copy(destination: Path, name: str, edit: Callable[[Any], Any]) -> Path:
    shutil.copytree(TINY, destination)
    path = destination / name
    path.write_text(json.dumps(edit(json.loads(path.read_text(encoding="utf-8")))))
    return destination


def test_a_copy_is_compatible(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    shutil.copytree(TINY, folder)
    comparison = qe.compare_checkpoints(folder, TINY)
    assert comparison.compatible and comparison.differences == ()


def test_one_merge_removed(tmp_path: Path) -> None:
    data = json.loads((TINY / "tokenizer.json").read_text(encoding="utf-8"))
    pair, _ = first_merge(data)

    def remove(d: dict[str, Any]) -> None:
        d["model"]["merges"] = [m for m in d["model"]["merges"] if list(m) != pair]

    comparison = qe.compare_checkpoints(copy_of(TINY, tmp_path / "c", remove), TINY)
    assert not comparison.compatible
    assert kinds(comparison)["merges"] is True
    merges = next(d for d in comparison.differences if d.kind == "merges")
    assert f"removed 1 [{' '.join(pair)!r}]" in merges.message


def test_a_token_renumbered(tmp_path: Path) -> None:
    def swap(d: dict[str, Any]) -> None:
        vocab = d["model"]["vocab"]
        a, b = (next(k for k, v in vocab.items() if v == i) for i in (300, 301))
        vocab[a], vocab[b] = 301, 300

    comparison = qe.compare_checkpoints(copy_of(TINY, tmp_path / "c", swap), TINY)
    assert not comparison.compatible
    renumbered = next(d for d in comparison.differences if d.kind == "renumbered")
    assert renumbered.breaking and renumbered.message.startswith("2 token(s) at another ID")


def test_an_added_token_appended(tmp_path: Path) -> None:
    def append(d: dict[str, Any]) -> None:
        last = max(t["id"] for t in d["added_tokens"])
        d["added_tokens"].append(
            {
                "id": last + 1,
                "content": "<|my_tool|>",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )

    comparison = qe.compare_checkpoints(copy_of(TINY, tmp_path / "c", append), TINY)
    # A new token at a new ID leaves every base encoding as it was: listed, not breaking.
    assert kinds(comparison) == {"added": False}
    assert comparison.compatible
    assert "'<|my_tool|>' (ID 2081)" in comparison.differences[0].message


def test_a_changed_normalizer(tmp_path: Path) -> None:
    def nfkc(d: dict[str, Any]) -> None:
        d["normalizer"] = {"type": "NFKC"}

    comparison = qe.compare_checkpoints(copy_of(TINY, tmp_path / "c", nfkc), TINY)
    assert kinds(comparison)["normalizer"] is True
    assert not comparison.compatible
    # "ﬁ" is one of the probe texts' characters that NFKC changes.
    assert kinds(comparison).get("probe IDs") is True


def test_stop_tokens_without_im_end(tmp_path: Path) -> None:
    folder = side_copy(
        tmp_path / "c", "generation_config.json", lambda g: {**g, "eos_token_id": 2048}
    )
    comparison = qe.compare_checkpoints(folder, TINY)
    assert kinds(comparison) == {"stop tokens": True}
    full = report.checkpoint_report(folder, against=TINY)
    assert not full.ok and not full.validation.ok


@pytest.mark.parametrize(
    ("eos", "breaking", "why"),
    [
        # The official list stops on <|endoftext|> too: without it the fine-tune runs on where
        # its base stops (a raw-text completion past the end of its document).
        ([2050], True, "no longer stops at 2048 <|endoftext|>, where the base stops"),
        ([2048, 2050], False, "the same IDs in another order"),
        ([2050, 2048, 13], True, "stops at 13 ., where the base goes on"),
    ],
    ids=["endoftext dropped", "reordered", "a word added"],
)
def test_stop_tokens_against_the_base(
    tmp_path: Path, eos: list[int], breaking: bool, why: str
) -> None:
    folder = side_copy(
        tmp_path / "c", "generation_config.json", lambda g: {**g, "eos_token_id": eos}
    )
    comparison = qe.compare_checkpoints(folder, TINY)
    assert kinds(comparison) == {"stop tokens": breaking}
    assert comparison.differences[0].message.endswith(why)


def test_an_end_marker_added_to_the_stop_tokens_is_not_breaking(tmp_path: Path) -> None:
    base = side_copy(
        tmp_path / "b", "generation_config.json", lambda g: {**g, "eos_token_id": 2050}
    )
    comparison = qe.compare_checkpoints(TINY, base)
    assert kinds(comparison) == {"stop tokens": False}
    assert comparison.differences[0].message.endswith("an end marker added")


def test_stop_tokens_without_endoftext_are_a_warning_alone(tmp_path: Path) -> None:
    # The chat protocol needs <|im_end|> only: the checkpoint passes, with a warning.
    folder = side_copy(
        tmp_path / "c", "generation_config.json", lambda g: {**g, "eos_token_id": [2050]}
    )
    validation = report.checkpoint_report(folder).validation
    assert validation.ok
    (warning,) = validation.warnings
    assert warning.startswith("generation_config.json eos_token_id: no '<|endoftext|>' (2048)")
    (entry,) = [e for e in validation.special_tokens if e.field.startswith("generation_config")]
    assert entry.verdict == "warning"


def test_a_vocab_size_too_small(tmp_path: Path) -> None:
    def shrink(config: dict[str, Any]) -> dict[str, Any]:
        config["text_config"]["vocab_size"] = 2070
        return config

    comparison = qe.compare_checkpoints(side_copy(tmp_path / "c", "config.json", shrink), TINY)
    assert kinds(comparison) == {"embedding": True}
    assert comparison.differences[0].message == "embedding size 2070 (base 2112)"


def test_qwen3_against_qwen38(qwen3_dir: Path, qwen38_dir: Path) -> None:
    comparison = qe.compare_checkpoints(qwen3_dir, qwen38_dir)
    assert not comparison.compatible
    found = kinds(comparison)
    # Expected from the files themselves: another pre-tokenizer pattern, other merges, the
    # markers elsewhere, no config.json / generation_config.json in the Qwen3 folder, another
    # template.
    q3 = json.loads((qwen3_dir / "tokenizer.json").read_text(encoding="utf-8"))
    q38 = json.loads((qwen38_dir / "tokenizer.json").read_text(encoding="utf-8"))
    assert (q3["pre_tokenizer"] != q38["pre_tokenizer"]) == ("pre_tokenizer" in found)
    assert q3["normalizer"] == q38["normalizer"] and "normalizer" not in found
    assert set(found) >= {
        "merges",
        "renumbered",
        "removed",
        "added",
        "probe IDs",
        "embedding",
        "stop tokens",
        "template",
    }
    renumbered = next(d for d in comparison.differences if d.kind == "renumbered")
    ids = {t["content"]: t["id"] for t in q3["added_tokens"]}
    base_ids = {t["content"]: t["id"] for t in q38["added_tokens"]}
    # The message cuts long lists; items (and so --json) carry every move, the markers' too.
    move = f"{TURN_OPEN!r} {base_ids[TURN_OPEN]} -> {ids[TURN_OPEN]}"
    assert move in renumbered.items
    carried = json.loads(json.dumps(comparison.to_dict()))
    assert any(move in d["items"] for d in carried["differences"] if d["kind"] == "renumbered")
    expected = sorted(
        t for t in ids.keys() & base_ids.keys() if ids[t] != base_ids[t]
    )  # added tokens only: a lower bound for the whole vocabulary's moves
    assert {f"{t!r} {base_ids[t]} -> {ids[t]}" for t in expected} <= set(renumbered.items)
    merges = next(d for d in comparison.differences if d.kind == "merges")
    assert f"merges: {len(q3['model']['merges']):,} (base {len(q38['model']['merges']):,})" in (
        merges.message
    )
    assert comparison.template is not None and comparison.template.available
    assert not comparison.template.identical


def test_checkpoint_report_json_carries_everything(tmp_path: Path) -> None:
    data = json.loads(json.dumps(report.checkpoint_report(TINY, against=TINY).to_dict()))
    assert data["ok"] is True
    assert data["template_name"] == "the official Qwen 3.8 template"
    assert data["template_behaviour"] is None  # byte-identical: nothing to render
    assert len(data["prefix_stability"]) == 4
    assert data["comparison"]["compatible"] is True
    assert set(data["dead_tokens"]) == {"checked", "note", *dead_module.DEAD_KINDS}
    assert {e["field"] for e in data["special_tokens"]} >= {
        "generation_config.json eos_token_id",
        "tokenizer_config.json eos_token",
        "tokenizer_config.json pad_token",
    }
    assert TURN_CLOSE in json.dumps(data["special_tokens"])


# --- a template that is not byte-identical but behaves identically ------------------------------


def template_copy(tmp_path: Path, edit: Callable[[str], str]) -> Path:
    folder = tmp_path / "c"
    shutil.copytree(TINY, folder)
    path = folder / "chat_template.jinja"
    path.write_bytes(edit(path.read_bytes().decode("utf-8")).encode("utf-8"))
    return folder


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace("\n", "\r\n"),  # CRLF line ends: Jinja reads them as LF
        lambda t: t.replace(" %}\n", " %}  \n"),  # blanks the next {%- strips anyway
        lambda t: t + "\n\n",
    ],
    ids=["crlf", "trailing blanks", "final newlines"],
)
def test_a_template_identical_in_behaviour_passes_with_a_warning(
    tmp_path: Path, edit: Callable[[str], str]
) -> None:
    pytest.importorskip("jinja2")
    full = report.checkpoint_report(template_copy(tmp_path, edit))
    assert full.validation.template_sha256 != qe.vocabulary.QWEN38_TEMPLATE_SHA256
    assert full.behaviour is not None and full.behaviour.identical
    assert full.template_equivalent and full.ok and not full.problems
    assert not full.validation.ok  # validate_checkpoint alone still goes by the hash
    (warning,) = [w for w in full.warnings if w.startswith("chat template: modified")]
    assert "behaviour identical on all probes" in warning
    data = full.to_dict()
    assert data["ok"] is True and data["template_equivalent"] is True
    assert data["problems"] == [] and warning in data["warnings"]
    assert data["lifted"] == [full.validation.template_problem]


def test_crlf_in_what_the_template_writes_is_a_difference(tmp_path: Path) -> None:
    # "\r\n" written by the template (not its line ends) changes every rendering.
    pytest.importorskip("jinja2")
    folder = template_copy(tmp_path, lambda t: t.replace("'<|im_end|>\\n'", "'<|im_end|>\\r\\n'"))
    full = report.checkpoint_report(folder)
    assert not full.template_equivalent and not full.ok
    assert full.validation.template_problem in full.problems


def with_config_template(folder: Path, template: str) -> Path:
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**config, "chat_template": template}), encoding="utf-8")
    return folder


@pytest.mark.parametrize("crlf_in", ["chat_template.jinja", "tokenizer_config.json"])
def test_two_template_texts_that_render_the_same(tmp_path: Path, crlf_in: str) -> None:
    # As the real folder ships it, tokenizer_config.json holds a template too; one of the two is
    # the official text, the other its CRLF copy: both render the same, so the mismatch between
    # them is a warning, not a problem.
    pytest.importorskip("jinja2")
    official = (TINY / "chat_template.jinja").read_text(encoding="utf-8")
    crlf = official.replace("\n", "\r\n")
    jinja, config = (crlf, official) if crlf_in == "chat_template.jinja" else (official, crlf)
    folder = with_config_template(template_copy(tmp_path, lambda _: jinja), config)
    full = report.checkpoint_report(folder)
    assert full.validation.config_template_problem in full.validation.problems
    assert full.ok and not full.problems, full.problems
    assert any(
        w.startswith("tokenizer_config.json chat_template: another text") for w in full.warnings
    )


def test_a_config_template_that_renders_otherwise_stays_a_problem(tmp_path: Path) -> None:
    pytest.importorskip("jinja2")
    official = (TINY / "chat_template.jinja").read_text(encoding="utf-8")
    folder = with_config_template(
        template_copy(tmp_path, lambda t: t.replace("\n", "\r\n")),
        official.replace("'Picture '", "'Image '"),
    )
    full = report.checkpoint_report(folder)
    assert full.template_equivalent and not full.ok
    assert full.problems == (full.validation.config_template_problem,)


# --- the dead-token cache -----------------------------------------------------------------------


def kept_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[report.DeadTokens, Path]:
    """The tiny vocabulary's dead tokens, checked once with a cache in tmp_path, and its file."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = report.checkpoint_report(TINY).dead
    (kept,) = (tmp_path / "cache" / "qwen-encode" / "dead-tokens").iterdir()
    return first, kept


def test_dead_tokens_are_kept_by_the_vocabulary_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, kept = kept_once(tmp_path, monkeypatch)
    assert kept.name.startswith(hashlib.sha256((TINY / "tokenizer.json").read_bytes()).hexdigest())

    def never(tokenizer: Tokenizer) -> report.DeadTokens:
        raise AssertionError("the kept result was not used")

    monkeypatch.setattr(dead_module, "dead_tokens", never)
    assert report.checkpoint_report(TINY).dead == first
    # Another vocabulary (one merge removed) has another hash: checked, not read from the cache.
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = copy_of(TINY, tmp_path / "c", lambda d: d["model"]["merges"].pop(0))
    assert report.checkpoint_report(folder).dead.unreachable
    assert len(list((tmp_path / "cache" / "qwen-encode" / "dead-tokens").iterdir())) == 2


def test_a_damaged_dead_token_cache_is_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, kept = kept_once(tmp_path, monkeypatch)
    data = json.loads(kept.read_text(encoding="utf-8"))
    data["partial_utf8"]["tokens"][0]["id"] = "94"
    for damaged in ("{", "[]", json.dumps(data)):
        kept.write_text(damaged, encoding="utf-8")
        assert report.checkpoint_report(TINY).dead == first
        assert report.DeadTokens.from_dict(json.loads(kept.read_text(encoding="utf-8"))) == first
