"""The batched encoder path: one engine call and whole-batch numpy assembly must give,
bit for bit, what one prompt at a time and a chat session give, on both engines; runs that cross
from one turn or role to another are split by token byte lengths exactly as by the reference
tokenizer's offsets."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qwen_encode as qe
from qwen_encode import encoder_whole
from qwen_encode.protocol import Prompt, Special, Text
from tests.conftest import runs_only

ROOT = Path(__file__).resolve().parent.parent


def _bench_corpus(count: int) -> list[dict[str, Any]]:
    """scripts/bench.py's generated corpus: the conversations the speed figures are taken on."""
    spec = importlib.util.spec_from_file_location("qwen_encode_bench", ROOT / "scripts/bench.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("qwen_encode_bench", bench)
    spec.loader.exec_module(bench)
    return bench.make_corpus(count, seed=13)


CORPUS = _bench_corpus(60)
OPTIONS = [{}, {"preserve_thinking": False}, {"enable_thinking": False}]


@pytest.fixture(scope="module", params=["tokenizers", "fastokens"])
def encoder(request, qwen38_dir: Path) -> qe.Encoder:
    encoder = qe.Encoder.from_pretrained(qwen38_dir, engine=request.param)
    if encoder.engine != request.param:
        pytest.skip(f"{request.param} is not available here")
    return encoder


def _same(a: qe.Encoding, b: qe.Encoding) -> None:
    assert np.array_equal(a.input_ids, b.input_ids)
    assert np.array_equal(a.assistant_mask, b.assistant_mask)
    assert np.array_equal(a.turn_index, b.turn_index)
    assert a.input_ids.dtype == b.input_ids.dtype == np.int32


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "no-preserve", "no-thinking"])
def test_batched_per_conversation_and_chat_session_agree(
    encoder: qe.Encoder, options: dict[str, Any]
) -> None:
    prompts = [
        qe.format_prompt(c["messages"], tools=c["tools"], add_generation_prompt=False, **options)
        for c in CORPUS
    ]
    encoder.clear_cache()
    batched = encoder.encode_batch(prompts)
    encoder.clear_cache()
    for conversation, prompt, together in zip(CORPUS, prompts, batched, strict=True):
        alone = encoder.encode(prompt)
        _same(together, alone)
        session = encoder.chat(conversation["tools"], add_generation_prompt=False, **options)
        session.extend(conversation["messages"])
        _same(session.encoding(), alone)
    # And again with every run in the cache: the cached path gives the same arrays.
    for prompt, together in zip(prompts, encoder.encode_batch(prompts), strict=True):
        _same(together, encoder.encode(prompt))


@pytest.mark.parametrize("mode", ["literal", "atomic"])
def test_crossing_runs_split_by_byte_lengths_as_by_offsets(qwen38_dir: Path, mode: str) -> None:
    # Without preserve_thinking every earlier assistant turn renders its "assistant\n" header
    # (not trained) and content (trained) as one run; NFD text, CJK, emoji and a spelled marker
    # cover the normaliser and literal paths.
    contents = ["plain", "e\u0301t\u00e9 caf\u00e9", "東京 👍🏽", "x <think> y", "\n\nlead", ""]
    conversations = [
        [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": text, "reasoning_content": "r"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": text[::-1], "reasoning_content": "r"},
        ]
        for text in contents
    ]
    prompts = [
        qe.format_prompt(c, preserve_thinking=False, add_generation_prompt=False)
        for c in conversations
    ]
    by_bytes = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers", markers_in_text=mode)
    by_offsets = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers", markers_in_text=mode)
    by_offsets.__dict__["_token_bytes"] = None  # no byte lengths: the offsets path decides
    assert by_bytes._token_bytes is not None
    for a, b in zip(by_bytes.encode_batch(prompts), by_offsets.encode_batch(prompts), strict=True):
        _same(a, b)
        # In each assistant turn, what is not trained is exactly the header and the "\n" after
        # <|im_end|>.
        for turn in (1, 3):
            own = a.turn_index == turn
            header = a.input_ids[own & ~a.assistant_mask].tolist()
            assert by_bytes.decode(header) == "<|im_start|>assistant\n\n"
            body = by_bytes.decode(a.input_ids[own & a.assistant_mask].tolist())
            assert body.endswith("<|im_end|>")


def test_byte_lengths_cover_every_token(qwen38_dir: Path) -> None:
    encoder = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers")
    sizes = encoder._token_bytes
    assert sizes is not None
    text = "Grüße, 東京! 👍🏽 <|im_end|> \t\n x"
    ids = encoder.vocabulary.tokenizer.encode(text, add_special_tokens=False).ids
    assert int(sizes[ids].sum()) == len(text.encode())


def test_an_unknown_segment_or_marker_is_refused_by_name(qwen38_dir: Path) -> None:
    encoder = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers")
    good = Prompt((Special("<|im_start|>"), Text("user\nhi")))
    odd = Prompt((Text("a"), "not a segment"))  # type: ignore[arg-type]
    unknown = Prompt((Special("<|no_such_marker|>", turn=2),))
    out = encoder.encode_batch([good, odd, unknown, good], errors="return")
    assert isinstance(out[1], qe.PromptError) and "str" in str(out[1])
    assert isinstance(out[2], qe.PromptError) and "<|no_such_marker|>" in str(out[2])
    assert out[2].message_index == 2
    _same(out[0], out[3])  # type: ignore[arg-type]


@pytest.mark.parametrize("chunked", [False, True])
def test_a_surrogate_in_one_prompt_refuses_it_alone(
    qwen38_dir: Path, chunked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No run is checked up front: the engine's refusal sends the batch round again, checked.
    # Chunked, the refusal is raised on the worker thread and reaches the caller all the same.
    if chunked:
        monkeypatch.setattr(encoder_whole, "_CHUNK_CHARS", 10)
    encoder = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers")
    good = Prompt((Special("<|im_start|>"), Text("user\nhé")))
    bad = Prompt((Special("<|im_start|>", turn=0), Text("a\ud800b", turn=0, field="content")))
    out = encoder.encode_batch([good, good, bad, good], errors="return")
    assert isinstance(out[2], qe.PromptError)
    assert out[2].field == "content" and out[2].message_index == 0
    _same(out[0], out[3])  # type: ignore[arg-type]
    _same(out[0], out[1])  # type: ignore[arg-type]
    _same(out[0], encoder.encode(good))
    with pytest.raises(qe.PromptError):
        encoder.encode_batch([good, bad])


@pytest.mark.parametrize("mode", ["literal", "atomic", "reject"])
def test_a_short_request_encoded_run_by_run_gives_the_reference_ids(
    qwen38_dir: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request with little new text is encoded run by run (fastokens' ordinary encoding, no
    batch call) when no run spells an added token; a run that does (atomic mode) still goes to
    the batch call, which matches it. Either way: the reference engine's IDs."""
    fast = qe.Encoder.from_pretrained(qwen38_dir, engine="fastokens", markers_in_text=mode)
    if fast.engine != "fastokens":
        pytest.skip("fastokens is not available here")
    runs_only(fast)  # (the whole-prompt path sends a request in one call: test_encoder_whole)
    reference = qe.Encoder(fast.vocabulary, markers_in_text=mode, cache_bytes=0)
    batch_calls: list[int] = []
    engine_batch = fast._engine.encode_flat
    monkeypatch.setattr(
        fast._engine,
        "encode_flat",
        lambda texts: batch_calls.append(len(texts)) or engine_batch(texts),
    )
    spelled = "see <think> and <|im_end|> here" if mode != "reject" else "no marker, é 数据"
    for conversation in _short_requests(spelled):
        fast.clear_cache()
        prompt = qe.format_prompt(conversation["messages"], tools=conversation["tools"])
        _same(fast.encode(prompt), reference.encode(prompt))
    # Only atomic mode, on the request that spells markers, needed the batch call.
    assert batch_calls == ([1] if mode == "atomic" else [])


def _short_requests(spelled: str) -> list[dict[str, Any]]:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    return [
        {"messages": [{"role": "user", "content": "Hello, how are you?  "}], "tools": None},
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": "r",
                    "tool_calls": [{"function": {"name": "f", "arguments": {"x": "1 é"}}}],
                },
                {"role": "tool", "content": "42"},
                {"role": "user", "content": "Thanks! Now in French: données, 数据."},
            ],
            "tools": tools,
        },
        {"messages": [{"role": "user", "content": spelled}], "tools": None},
    ]


@pytest.mark.parametrize("mode", ["literal", "atomic", "reject"])
def test_a_shared_system_turn_is_encoded_once_and_gives_the_same_ids(
    qwen38_dir: Path, mode: str
) -> None:
    """An agent data set: every row the same system prompt and tools block. Its IDs are kept as
    one block after the first row; every row still gets the IDs of a prompt built by hand (no
    shared head, laid out run by run), and in reject mode a head spelling a marker is refused
    every time, never kept."""
    tools = [{"type": "function", "function": {"name": "f", "description": "find <b>"}}]
    rows = [
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}", "reasoning_content": "r"},
        ]
        for i in range(6)
    ]
    encoder = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers", markers_in_text=mode)
    prompts = [qe.format_prompt(r, tools=tools, add_generation_prompt=False) for r in rows]
    by_hand = [qe.Prompt(p.segments) for p in prompts]
    expected = qe.Encoder.from_pretrained(
        qwen38_dir, engine="tokenizers", markers_in_text=mode, cache_bytes=0
    ).encode_batch(by_hand)
    first = [encoder.encode(p) for p in prompts[:2]]
    assert encoder.cache_info()["head_entries"] == 1 and encoder.cache_info()["head_bytes"] > 0
    assert encoder.cache_info()["head_hits"] == 1  # the second prompt took the block
    batch = encoder.encode_batch(prompts)
    for a, b in zip([*first, *batch], [*expected[:2], *expected], strict=True):
        _same(a, b)
    assert encoder.cache_info()["head_entries"] == 1
    assert encoder.cache_info()["head_hits"] == 2  # once per batch: the batch shares it
    spelled = [{"role": "system", "content": "<think> is a tag"}, *rows[0][1:]]
    prompt = qe.format_prompt(spelled, tools=tools, add_generation_prompt=False)
    if mode == "reject":
        for _ in range(2):
            with pytest.raises(qe.MarkerInTextError):
                encoder.encode(prompt)
        assert encoder.cache_info()["head_entries"] == 1
    else:
        reference = encoder.encode(qe.Prompt(prompt.segments))
        for _ in range(2):
            _same(encoder.encode(prompt), reference)
        assert encoder.cache_info()["head_entries"] == 2
    encoder.clear_cache()
    assert encoder.cache_info()["head_entries"] == encoder.cache_info()["head_bytes"] == 0


def test_a_shared_system_turn_in_one_cold_batch_with_refused_prompts(qwen38_dir: Path) -> None:
    """In one batch on an empty cache the first prompt lays the shared system turn out and the
    others take it as one block; a refused prompt that laid it out leaves nothing behind (the
    next one lays it out again), and every kept row gets the IDs of a prompt built by hand."""
    tools = [{"type": "function", "function": {"name": "f", "description": "d"}}]
    system = {"role": "system", "content": "You are terse."}

    def row(text: str) -> list[dict[str, Any]]:
        return [system, {"role": "user", "content": text}]

    rows = [row("bad <think> 1"), row("good 1"), row("bad </think> 2"), row("good 2"), row("3")]
    prompts = [qe.format_prompt(r, tools=tools) for r in rows]
    encoder = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers", markers_in_text="reject")
    got = encoder.encode_batch(prompts, errors="return")
    assert [type(g).__name__ for g in got] == [
        "MarkerInTextError",
        "Encoding",
        "MarkerInTextError",
        "Encoding",
        "Encoding",
    ]
    reference = qe.Encoder.from_pretrained(
        qwen38_dir, engine="tokenizers", markers_in_text="reject", cache_bytes=0
    )
    for position in (1, 3, 4):
        _same(got[position], reference.encode(qe.Prompt(prompts[position].segments)))
    assert encoder.cache_info()["head_entries"] == 1 and encoder.cache_info()["head_hits"] == 0


def test_an_object_named_like_a_marker_is_still_refused(qwen38_dir: Path) -> None:
    """A hand-made segment that is no segment is refused whatever its type's name spells."""
    encoder = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers")
    impostor = type("<|im_start|>", (), {})()
    prompt = Prompt((Special("<|im_start|>"), Text("user\nhi"), impostor))  # type: ignore[arg-type]
    with pytest.raises(qe.PromptError, match="expected Text or Special"):
        encoder.encode(prompt)


def test_reject_names_a_hand_made_text_that_is_no_caller_field(qwen38_dir: Path) -> None:
    """A hand-made prompt whose texts carry no field (as protocol text would) and spell a marker
    is refused naming the text, not with an IndexError from looking for a caller field."""
    encoder = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers", markers_in_text="reject")
    prompt = Prompt((Special("<|im_start|>", 0), Text("user\n<think>", 0)))
    with pytest.raises(qe.MarkerInTextError) as refused:
        encoder.encode(prompt)
    assert refused.value.field == "text" and refused.value.message_index == 0
