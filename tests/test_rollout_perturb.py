"""A perturbation harness over the conversation corpus: every assistant turn of the corpus is
"sampled" as an engine would emit it (its rendering after the generation prompt, markers
atomic, text by BPE), then perturbed as real samples are. Whatever was sampled, the next prompt
extends the prompt sent plus the sampled IDs, the turn closes on one ``<|im_end|>`` followed by
the template's ``\\n<|im_start|>``, and the next prompt holds the expected turns.

Then hypothesis over arbitrary ID lists, every added token included: ``append_sampled`` raises
nothing but ``QwenEncodeError`` subclasses, and when it accepts the IDs the invariant holds."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qwen_encode as qe
from qwen_encode import markers as mk
from tests.conformance.corpus import generate


@pytest.fixture(scope="module")
def encoder(qwen38_dir: Path) -> qe.Encoder:
    return qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers")


def _options(kwargs: dict) -> dict:
    drop = {"continue_final_message", "add_generation_prompt"}
    return {k: v for k, v in kwargs.items() if k not in drop}


def _samples(encoder: qe.Encoder, count: int, seed: int):
    """(case, index, completion IDs) for assistant turns the generation prompt can precede."""
    tokenizer = encoder.vocabulary.tokenizer
    out = []
    for case in generate(count=count, seed=seed):
        options = _options(case["kwargs"])
        messages = case["messages"]
        for i, message in enumerate(messages):
            if (
                message.get("role") != "assistant"
                or i == 0
                or messages[i - 1]["role"] == "assistant"
            ):
                continue
            try:
                sent = qe.format_prompt(messages[:i], tools=case["tools"], **options)
                turn = qe.format_turn(message, index=i).text
            except qe.PromptError:
                continue
            primer = sent.text[sent.text.rindex("<|im_start|>") :]
            if not turn.startswith(primer) or not turn.endswith("<|im_end|>\n"):
                continue  # thinking off with reasoning: not what a model emits after the primer
            completion = turn[len(primer) : -1]
            out.append((case, i, tokenizer.encode(completion, add_special_tokens=False).ids))
    return out


def _session(encoder, case, index) -> qe.ChatSession:
    session = encoder.chat(case["tools"], **_options(case["kwargs"]))
    session.extend(case["messages"][:index])
    return session


_ROLE = re.compile(r"<\|im_start\|>(\w+)")


def _check(encoder, session: qe.ChatSession, sampled: list[int], **kw) -> qe.SampledTurn:
    m = encoder.marker_ids
    roles_before = _ROLE.findall(encoder.decode(session.encoding().input_ids))
    sent = session.encoding().input_ids.tolist()
    turn = session.append_sampled(sampled, **kw)
    # A tool result: never a real query, so even preserve_thinking=False keeps every turn.
    session.append({"role": "tool", "content": "ok"})
    after = session.encoding().input_ids.tolist()
    kept = sampled[: turn.kept]
    # The extension invariant: the prompt sent, the sampled IDs, the closers, then '\n' and the
    # next turn's <|im_start|>: nothing else between turns.
    assert after[: len(sent) + len(kept)] == sent + kept
    end = len(sent) + len(kept) + len(turn.closers)
    assert after[len(sent) + len(kept) : end] == list(turn.closers)
    assert after[end : end + 2] == [198, m[mk.TURN_OPEN]]
    # The turn closes on exactly one <|im_end|>, opens no other turn.
    piece = after[len(sent) - len(turn.primer) : end]
    assert piece.count(m[mk.TURN_CLOSE]) == 1 and piece[-1] == m[mk.TURN_CLOSE]
    assert piece.count(m[mk.TURN_OPEN]) == 1 and piece[0] == m[mk.TURN_OPEN]
    # The next prompt parses into the turns it should hold.
    roles_after = _ROLE.findall(encoder.decode(after))
    if roles_before[-1] == "assistant":
        roles_before = roles_before[:-1]  # the primer's turn became the sampled one
    assert roles_after == [*roles_before, "assistant", "user", "assistant"]
    session.pop()
    session.pop()
    return turn


def _skeleton(encoder, turn: qe.SampledTurn) -> str:
    names = {
        encoder.marker_ids[k]: k
        for k in (
            mk.THINK_OPEN,
            mk.THINK_CLOSE,
            mk.TOOL_CALL_OPEN,
            mk.TOOL_CALL_CLOSE,
            mk.TURN_CLOSE,
        )
    }
    ids = [*turn.primer, *turn.ids[: turn.kept], *turn.closers]
    return "".join(names[t] for t in ids if t in names)


_WELL_FORMED = re.compile(r"^<think></think>(<tool_call></tool_call>)*<\|im_end\|>$")


_VOCABS: dict[int, tuple[dict[str, int], dict[int, str]]] = {}


def _vocab(encoder) -> tuple[dict[str, int], dict[int, str]]:
    if id(encoder) not in _VOCABS:
        vocab = encoder.vocabulary.tokenizer.get_vocab()
        _VOCABS[id(encoder)] = vocab, {v: k for k, v in vocab.items()}
    return _VOCABS[id(encoder)]


def _resegment(encoder, ids: list[int], rng: random.Random) -> list[int]:
    """Split up to 4 text tokens into two tokens whose bytes join to the same token."""
    vocab, inverse = _vocab(encoder)
    added = set(encoder.vocabulary.added_tokens.values())
    out = list(ids)
    for _ in range(4):
        spots = [i for i, t in enumerate(out) if t not in added and len(inverse[t]) > 1]
        if not spots:
            break
        i = rng.choice(spots)
        token = inverse[out[i]]
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                out[i : i + 1] = [vocab[left], vocab[right]]
                break
    return out


def _perturbations(encoder, ids: list[int], rng: random.Random):
    m = encoder.marker_ids
    tokenizer = encoder.vocabulary.tokenizer
    text = encoder.decode(ids)

    def reencode(new: str) -> list[int]:
        return tokenizer.encode(new, add_special_tokens=False).ids

    at = rng.randrange(len(ids) + 1)
    yield "canonical", ids, True
    yield "resegmented", _resegment(encoder, ids, rng), True
    yield "whitespace", [*ids[:at], *reencode(rng.choice([" ", "\n", "  \n"])), *ids[at:]], False
    compact = text.replace('": ', '":').replace(', "', ',"').replace(", ", ",")
    yield "compact_json", reencode(compact), True
    marker = m[rng.choice([mk.TOOL_CALL_OPEN, mk.THINK_OPEN, mk.TOOL_RESPONSE_OPEN, mk.IMAGE_PAD])]
    yield "marker_in_prose", [*ids[:at], marker, *ids[at:]], False
    closer = m[rng.choice([mk.THINK_CLOSE, mk.TOOL_CALL_CLOSE, mk.TOOL_RESPONSE_CLOSE])]
    yield "stray_closer", [*ids[:at], closer, *ids[at:]], False


SAMPLE_CASES = 160


def test_perturbed_samples_keep_the_invariant(encoder) -> None:
    samples = _samples(encoder, SAMPLE_CASES, seed=22)
    assert len(samples) >= 100
    rng = random.Random(22)
    im_end = encoder.marker_ids[mk.TURN_CLOSE]
    seen = set()
    for case, index, ids in samples:
        session = _session(encoder, case, index)
        body = ids[:-1]
        for name, perturbed, structural in _perturbations(encoder, body, rng):
            turn = _check(
                encoder, session, [*perturbed, im_end], logprobs=[-1.0] * (len(perturbed) + 1)
            )
            seen.add(name)
            if structural:
                assert _WELL_FORMED.match(_skeleton(encoder, turn)), (
                    name,
                    _skeleton(encoder, turn),
                )
    assert len(seen) == 6


def test_truncation_at_every_position(encoder) -> None:
    samples = _samples(encoder, 40, seed=7)
    long_ones = sorted(samples, key=lambda s: -len(s[2]))[:8]
    for case, index, ids in long_ones:
        session = _session(encoder, case, index)
        for cut in range(len(ids) - 1):  # everything short of the final <|im_end|>
            turn = _check(encoder, session, ids[:cut], finish_reason="length")
            assert turn.closers and turn.closers[-1] == encoder.marker_ids[mk.TURN_CLOSE]
            assert _WELL_FORMED.match(_skeleton(encoder, turn)), (cut, _skeleton(encoder, turn))


# --------------------------------------------------------------------------------------------
# Arbitrary IDs


@pytest.fixture(scope="module")
def hostile(encoder):
    """ID lists: mostly valid (every added token, any ID, whitespace tokens), with engine-like
    endings; a quarter with something invalid somewhere."""
    m = encoder.marker_ids
    added = sorted(encoder.vocabulary.added_tokens.values())
    size = encoder.vocab_size
    valid = st.one_of(
        st.sampled_from(added), st.integers(0, size - 1), st.sampled_from([198, 271, 220])
    )
    invalid = st.sampled_from([-1, size, 2**70, True, 1.0, None, "7"])
    ends = st.sampled_from(
        [[], [m[mk.TURN_CLOSE]], [m[mk.TURN_CLOSE], m[mk.END_OF_TEXT]], [m[mk.END_OF_TEXT]]]
    )
    body = st.lists(valid, max_size=24)
    spoiled = st.tuples(body, invalid, st.integers(0, 24)).map(
        lambda t: [*t[0][: t[2]], t[1], *t[0][t[2] :]]
    )
    return st.tuples(st.one_of(body, body, body, spoiled), ends).map(lambda t: t[0] + t[1])


def test_arbitrary_ids_raise_only_library_errors(encoder, hostile) -> None:
    session = encoder.chat([{"type": "function", "function": {"name": "f"}}])
    session.append({"role": "user", "content": "go"})
    sent = session.encoding().input_ids.tolist()

    accepted = []

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(ids=hostile, with_logprobs=st.booleans())
    def run(ids, with_logprobs) -> None:
        logprobs = [-0.5] * len(ids) if with_logprobs else None
        try:
            turn = session.append_sampled(ids, logprobs=logprobs)
        except qe.QwenEncodeError:
            assert len(session.turns) == 1
            return
        session.append({"role": "user", "content": "again"})
        after = session.encoding().input_ids.tolist()
        kept = list(ids[: turn.kept])
        assert after[: len(sent) + len(kept)] == sent + kept
        row = session.trajectory()
        assert int(row.sampled_mask.sum()) == turn.kept
        accepted.append(turn.kept)
        session.pop()
        session.pop()

    run()
    assert len(accepted) >= 30  # the accepting path was exercised, not only refusals
