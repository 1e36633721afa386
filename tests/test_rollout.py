"""Rollouts: sampled IDs are kept verbatim, every next prompt extends the previous prompt plus
the sampled IDs token for token, and the arrays say exactly which tokens were sampled.

The sampled IDs here are written with the real vocabulary the way an engine emits them (markers
as their atomic IDs, text as BPE tokens) and then perturbed as real samples are; the expected
prefixes are built from the IDs the test itself sent and sampled, never from the session."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import qwen_encode as qe
from qwen_encode import provenance as pv

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "opts": {"type": "object"}},
            },
        },
    }
]


@pytest.fixture(scope="module")
def encoder(qwen38_dir: Path) -> qe.Encoder:
    return qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers")


@pytest.fixture(scope="module")
def ids_of(encoder: qe.Encoder):
    """An engine's view of a completion text: markers atomic, text by BPE."""
    tokenizer = encoder.vocabulary.tokenizer

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    return encode


def _session(encoder: qe.Encoder, **options) -> qe.ChatSession:
    session = encoder.chat(TOOLS, **options)
    session.append({"role": "user", "content": "What is the weather in Paris?"})
    return session


def _roll(session: qe.ChatSession, sampled: list[int], follow: dict | None = None, **kw):
    """Send, sample, answer; assert the extension invariant; return the pieces."""
    sent = session.encoding().input_ids.tolist()
    turn = session.append_sampled(sampled, **kw)
    session.append(follow or {"role": "tool", "content": "sunny, 21 C"})
    after = session.encoding().input_ids.tolist()
    kept = sampled[: turn.kept]
    assert after[: len(sent) + len(kept)] == sent + kept
    rest = after[len(sent) + len(kept) :]
    assert rest[: len(turn.closers)] == list(turn.closers)
    return sent, turn, after, rest[len(turn.closers) :]


def _between(encoder: qe.Encoder, rest: list[int]) -> str:
    return encoder.decode(rest)


# --------------------------------------------------------------------------------------------
# The cases that broke the naive loop (parse, to_message, append, re-encode)


def test_primer_trap_empty_reasoning_is_kept_as_sampled(encoder, ids_of) -> None:
    m = encoder.marker_ids
    # The primer ends <think> '\n' (198); an empty reasoning span is sampled as '\n' + </think>,
    # which history would render as one '\n\n' token (271) at the primer's own last token.
    sampled = [*ids_of("\n"), m["</think>"], *ids_of("\n\nIt is sunny."), m["<|im_end|>"]]
    sent, turn, _after, between = _roll(encoder_session := _session(encoder), sampled)
    assert sent[-2:] == [m["<think>"], 198] and sampled[0] == 198
    assert _between(encoder, between).startswith("\n<|im_start|>user\n<tool_response>")
    drift = encoder_session.drift(1)
    assert not drift.same and drift.kind == "primer_merge"
    rendered = encoder.encode(qe.format_turn(turn.completion.to_turn(), index=1))
    assert 271 in rendered.input_ids.tolist()  # what the naive loop would have put back


def test_non_canonical_split_is_kept(encoder, ids_of) -> None:
    m = encoder.marker_ids
    canonical = ids_of(" sunny")
    split = ids_of(" sun") + ids_of("ny")
    assert len(canonical) == 1 and len(split) == 2
    sampled = [*ids_of("\n"), m["</think>"], *ids_of("\n\nIt is"), *split, m["<|im_end|>"]]
    session = _session(encoder, enable_thinking=True)
    _roll(session, sampled)
    drift = session.drift(1)
    assert drift.kind == "primer_merge"  # the first difference; the split is after it
    # Without the primer trap (reasoning present), the split is the first difference.
    sampled = [*ids_of("ok\n"), m["</think>"], *ids_of("\n\nIt is"), *split, m["<|im_end|>"]]
    session = _session(encoder)
    _roll(session, sampled)
    assert session.drift(1).kind == "bpe_split"


@pytest.mark.parametrize(
    "text,kind",
    [
        ("ok\n</think>\n\n  It is sunny.  ", "trim"),
        (
            "ok\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=opts>\n"
            '{"unit":"C"}\n</parameter>\n</function>\n</tool_call>',
            "json_reserialization",
        ),
        ("ok\n</think>\n\nI would write <tool_call> here.", None),
    ],
)
def test_trim_json_and_markers_in_prose_keep_the_invariant(encoder, ids_of, text, kind) -> None:
    m = encoder.marker_ids
    sampled = [*ids_of(text), m["<|im_end|>"]]
    session = _session(encoder)
    _, _turn, _, between = _roll(session, sampled)
    assert encoder.decode(between).startswith("\n<|im_start|>user\n")
    drift = session.drift(1)
    if kind is not None:
        assert drift.kind == kind, drift
    else:  # the atomic <tool_call> in prose parses as an unterminated call: dropped markup
        assert drift.kind in ("dropped_markup", "marker_identity"), drift


def test_sampled_turn_trains_exactly_what_was_sampled(encoder, ids_of) -> None:
    m = encoder.marker_ids
    sampled = [*ids_of("plan\n"), m["</think>"], *ids_of("\n\nDone."), m["<|im_end|>"]]
    logprobs = [-0.25 * (i + 1) for i in range(len(sampled))]
    session = _session(encoder)
    sent, _, _, _ = _roll(session, sampled, logprobs=logprobs)
    row = session.trajectory()
    span = slice(len(sent), len(sent) + len(sampled))
    assert row.sampled_mask.sum() == len(sampled)
    assert row.sampled_mask[span].all()
    assert np.array_equal(row.assistant_mask, row.sampled_mask)
    assert np.allclose(row.logprobs[span], logprobs)
    assert np.isnan(row.logprobs[~row.sampled_mask]).all()
    assert (row.provenance[span] == pv.SAMPLED).all()
    # The primer it was sampled after: provenance primer, not trained.
    primer = row.provenance[len(sent) - 5 : len(sent)]
    assert (primer == pv.PRIMER).all()
    assert not row.assistant_mask[len(sent) - 5 : len(sent)].any()
    assert (row.turn_index[len(sent) - 5 : span.stop + 1] == 1).all()
    assert row.logprobs.dtype == np.float32 and row.provenance.dtype == np.int8


# --------------------------------------------------------------------------------------------
# Ends of a sampled turn


def test_endoftext_after_im_end_is_sampled_and_dropped(encoder, ids_of) -> None:
    m = encoder.marker_ids
    sampled = [
        *ids_of("x\n"),
        m["</think>"],
        *ids_of("\n\nHi"),
        m["<|im_end|>"],
        m["<|endoftext|>"],
    ]
    session = _session(encoder)
    sent, turn, after, _ = _roll(session, sampled, logprobs=[-1.0] * len(sampled))
    assert turn.ids == tuple(sampled) and turn.kept == len(sampled) - 1
    assert turn.stop == "<|im_end|>" and turn.closers == ()
    assert after[len(sent) + len(sampled) - 1] == 198  # '\n', not <|endoftext|>
    assert m["<|endoftext|>"] not in session.trajectory().input_ids.tolist()
    assert session.trajectory().sampled_mask.sum() == len(sampled) - 1


@pytest.mark.parametrize(
    "text,closers",
    [
        ("I think the", "\n</think>\n\n<|im_end|>"),
        ("a\n</think>\n\nThe answer", "<|im_end|>"),
        (
            "a\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
            "\n</parameter>\n</function>\n</tool_call><|im_end|>",
        ),
        (
            "a\n</think>\n\n<tool_call>\n<function=get_weather>\n",
            "</function>\n</tool_call><|im_end|>",
        ),
        ("", "\n</think>\n\n<|im_end|>"),
    ],
)
def test_cut_off_turn_is_closed_with_the_templates_closers(encoder, ids_of, text, closers) -> None:
    sampled = ids_of(text)
    session = _session(encoder)
    sent, turn, _after, between = _roll(
        session, sampled, finish_reason="length", logprobs=[-0.1] * len(sampled)
    )
    assert encoder.decode(list(turn.closers)) == closers
    assert turn.truncated and turn.stop is None and turn.finish_reason == "length"
    row = session.trajectory()
    start = len(sent) + len(sampled)
    closing = slice(start, start + len(turn.closers))
    assert (row.provenance[closing] == pv.SYNTHESIZED).all()
    assert not row.sampled_mask[closing].any() and not row.assistant_mask[closing].any()
    assert np.isnan(row.logprobs[closing]).all()
    assert encoder.decode(between).startswith("\n<|im_start|>user\n")


def test_endoftext_alone_closes_the_turn(encoder, ids_of) -> None:
    m = encoder.marker_ids
    sampled = [*ids_of("a\n"), m["</think>"], *ids_of("\n\nHi"), m["<|endoftext|>"]]
    session = _session(encoder)
    _, turn, _, _ = _roll(session, sampled)
    assert turn.stop == "<|endoftext|>" and turn.kept == len(sampled) - 1
    assert encoder.decode(list(turn.closers)) == "<|im_end|>"


def test_thinking_off_parses_as_an_answer(encoder, ids_of) -> None:
    m = encoder.marker_ids
    sampled = [*ids_of("Sunny."), m["<|im_end|>"]]
    session = _session(encoder, enable_thinking=False)
    sent, turn, _, _ = _roll(session, sampled)
    assert turn.completion.content == "Sunny." and turn.completion.reasoning is None
    assert encoder.decode(sent).endswith("<think>\n\n</think>\n\n")
    assert session.drift(1).same


# --------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    "build,position",
    [
        (lambda m, n: [5, -1, 7], 1),
        (lambda m, n: [5, n, 7], 1),
        (lambda m, n: [5, True, 7], 1),
        (lambda m, n: [5, m["<|im_start|>"], 7], 1),
        (lambda m, n: [5, m["<|im_end|>"], 7], 1),
        (lambda m, n: [5, m["<|endoftext|>"], 7, m["<|im_end|>"]], 1),
    ],
)
def test_bad_ids_name_their_position(encoder, build, position) -> None:
    session = _session(encoder)
    before = session.encoding().input_ids.tolist()
    with pytest.raises(qe.TokenIdError) as info:
        session.append_sampled(build(encoder.marker_ids, encoder.vocab_size))
    assert info.value.position == position
    assert len(session.turns) == 1 and session.encoding().input_ids.tolist() == before


@pytest.mark.parametrize(
    "logprobs,field",
    [([-1.0], "logprobs"), ([-1.0, 0.5], "logprobs[1]"), ([-1.0, float("nan")], "logprobs[1]")],
)
def test_bad_logprobs_name_the_field(encoder, logprobs, field) -> None:
    with pytest.raises(qe.PromptError) as info:
        _session(encoder).append_sampled([5, 6], logprobs=logprobs)
    assert info.value.field == field


def test_sampling_needs_a_generation_prompt(encoder) -> None:
    session = _session(encoder, add_generation_prompt=False)
    with pytest.raises(qe.PromptError, match="add_generation_prompt"):
        session.append_sampled([5])
    with pytest.raises(qe.PromptError, match="on_template_change"):
        encoder.chat(on_template_change="ignore")


# --------------------------------------------------------------------------------------------
# When the template would change a sampled turn


def _dropping_session(encoder, ids_of, policy: str):
    m = encoder.marker_ids
    session = _session(encoder, preserve_thinking=False, on_template_change=policy)
    first = session.encoding().input_ids.tolist()
    sampled = [*ids_of("think hard\n"), m["</think>"], *ids_of("\n\nSunny."), m["<|im_end|>"]]
    session.append_sampled(sampled, logprobs=[-0.5] * len(sampled))
    session.append({"role": "user", "content": "<tool_response>\nwrapped\n</tool_response>"})
    assert session.encoding().input_ids.tolist()[: len(first) + len(sampled)] == first + sampled
    session.append({"role": "user", "content": "And tomorrow?"})  # a real query: drops reasoning
    return session, first, sampled


def test_template_change_raises_naming_the_turn(encoder, ids_of) -> None:
    session, _, _ = _dropping_session(encoder, ids_of, "raise")
    with pytest.raises(qe.TemplateDivergence) as info:
        session.encoding()
    assert info.value.message_index == 1 and info.value.cause == 3
    session.pop()  # the caller takes the query back: the session is as before
    assert session.encoding().sampled_mask.any()


def test_template_change_keep_is_verbatim_and_flagged(encoder, ids_of) -> None:
    session, first, sampled = _dropping_session(encoder, ids_of, "keep")
    ids = session.encoding().input_ids.tolist()
    assert ids[: len(first) + len(sampled)] == first + sampled
    assert session.off_template == (1,)
    assert session.drift(1).kind == "template_drop"
    assert "think hard" not in session.prompt().text  # the template's rendering drops it


def test_template_change_split_starts_a_new_row(encoder, ids_of) -> None:
    session, first, sampled = _dropping_session(encoder, ids_of, "split")
    expected = encoder.encode(session.prompt()).input_ids.tolist()
    assert session.encoding().input_ids.tolist() == expected  # the template's rendering now
    rows = session.rows()
    assert len(rows) == 2
    assert rows[0].input_ids.tolist()[: len(first) + len(sampled)] == first + sampled
    assert rows[0].sampled_mask.sum() == len(sampled)
    assert not rows[1].sampled_mask.any()  # the re-rendered turn is history, not a sample
    assert (rows[1].provenance[rows[1].turn_index == 1][5:-2] == pv.ASSISTANT).any()


# --------------------------------------------------------------------------------------------
# Provenance of ordinary prompts


def test_provenance_codes_of_an_ordinary_prompt(encoder) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "need tool",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny"},
    ]
    encoding = encoder.encode_messages(messages, tools=TOOLS)
    ids = encoding.input_ids
    text_of = {
        code: encoder.decode(ids[encoding.provenance == code])
        for code in (pv.SYSTEM, pv.USER, pv.TOOL, pv.ASSISTANT, pv.PRIMER)
    }
    assert text_of[pv.SYSTEM] == json.dumps(TOOLS[0], ensure_ascii=False) + "Be brief."
    assert text_of[pv.USER] == "Weather in Paris?"
    assert text_of[pv.TOOL] == "sunny"
    # "<function=" + name: '=get' is one pre-token (an optional non-letter before letters), so
    # that token straddles protocol and name and goes where its first byte is (the protocol).
    assert text_of[pv.ASSISTANT] == "need toolChecking._weathercityParis"
    assert text_of[pv.PRIMER] == "<|im_start|>assistant\n<think>\n"
    assert not encoding.sampled_mask.any() and np.isnan(encoding.logprobs).all()
    assert (encoding.provenance >= 0).all()


def test_an_encoding_is_one_tracked_object_and_pickles_its_provenance(encoder) -> None:
    """A batch job holds an Encoding per row: slots (no dict), its source's tuples untracked
    by the garbage collector after a collection, the encoder let go once provenance is read,
    and a pickle that carries the codes, not the encoder; frozen all along."""
    import dataclasses
    import gc
    import pickle

    encoding = encoder.encode_messages([{"role": "user", "content": "Weather in Paris?"}])
    assert not hasattr(encoding, "__dict__")
    for _ in range(5):  # a tuple leaves tracking once all it holds has: a pass or so a level
        gc.collect()
        if not gc.is_tracked(encoding._source):
            break
    assert not gc.is_tracked(encoding._source)  # it holds no encoder, nothing tracked
    with pytest.raises(dataclasses.FrozenInstanceError):
        encoding.input_ids = np.zeros(1)  # type: ignore[misc]
    back = pickle.loads(pickle.dumps(encoding))
    assert back._encoder is None and back._source is None
    assert back.provenance.tolist() == encoding.provenance.tolist()
    assert (encoding.provenance == pv.USER).sum() > 0
    assert encoding._encoder is None and encoding._source is None  # read: the source let go
    assert back.input_ids.tolist() == encoding.input_ids.tolist()
    assert repr(back).startswith("Encoding(input_ids=array(")


def test_hand_built_encoding_is_unrecorded() -> None:
    encoding = qe.Encoding(np.array([1, 2]), np.zeros(2, bool), np.zeros(2, np.int32))
    assert encoding.provenance.tolist() == [pv.UNRECORDED] * 2
    assert not encoding.sampled_mask.any() and len(encoding.logprobs) == 2


# --------------------------------------------------------------------------------------------
# Per-field attribution (written against the agreed Span API; the parser that produces spans
# lands on another branch, so the spans here are built by hand as it will give them)


def test_field_attribution_from_spans(encoder, ids_of) -> None:
    from qwen_encode.rollout import FIELD_KINDS, field_attribution

    m = encoder.marker_ids
    reasoning = ids_of("plan\n")
    call = ids_of("\n<function=get_weather>\n<parameter=city>\n")
    value = ids_of("Paris")
    tail = ids_of("\n</parameter>\n</function>\n")
    sampled = [
        *reasoning, m["</think>"], *ids_of("\n\n"), m["<tool_call>"], *call, *value, *tail,
        m["</tool_call>"], m["<|im_end|>"],
    ]  # fmt: skip
    session = _session(encoder)
    turn = session.append_sampled(sampled)
    fields = field_attribution(turn)  # from the parser's own spans
    assert fields is not None
    open_at = len(reasoning) + 1 + len(ids_of("\n\n"))
    value_at = open_at + 1 + len(call)
    close_at = value_at + len(value) + len(tail)
    kinds = [FIELD_KINDS[k] if k >= 0 else None for k in fields.kind]
    assert kinds[: len(reasoning)] == ["reasoning"] * len(reasoning)
    assert kinds[len(reasoning)] != "reasoning"  # </think>: markup
    assert kinds[value_at : value_at + len(value)] == ["argument"] * len(value)
    assert fields.names[value_at] == "city" and fields.call_index[value_at] == 0
    assert kinds[open_at] == "tool_call" and kinds[close_at] == "tool_call"
    assert kinds[-1] == "stop"


def test_resampling_after_pop_and_the_generation_prompt(encoder, ids_of) -> None:
    m = encoder.marker_ids
    session = _session(encoder)
    sent = session.encoding().input_ids.tolist()
    assert session.generation_prompt().input_ids.tolist() == sent[-5:]
    first = [*ids_of("a\n"), m["</think>"], *ids_of("\n\nOne."), m["<|im_end|>"]]
    session.append_sampled(first)
    with pytest.raises(qe.PromptError, match="ends on an assistant turn"):
        session.encoding()  # the next prompt needs the environment's answer first
    assert session.trajectory().input_ids.tolist()[: len(sent) + len(first)] == sent + first
    session.pop()  # a second sample of the same prompt (best-of-n, a retry)
    assert session.encoding().input_ids.tolist() == sent
    second = [*ids_of("\n"), m["</think>"], *ids_of("\n\nTwo."), m["<|im_end|>"]]
    _roll(session, second)
    assert [t.index for t in session.sampled] == [1]
    assert session.sampled[0].ids == tuple(second)
