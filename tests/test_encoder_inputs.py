"""The encoder's public boundary under bad input: typed errors naming the position or
field, never TypeError, AttributeError or OverflowError; and the run cache's accounting under
threads. Runs on the committed tiny vocabulary, so it needs no ../shared."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import qwen_encode as qe
from tests.conftest import ROOT, runs_only


@pytest.fixture(scope="module")
def tiny() -> qe.Encoder:
    return qe.Encoder.from_pretrained(ROOT / "fixtures" / "qwen3.8-tiny", engine="tokenizers")


def _prompt(text: str = "hello") -> qe.Prompt:
    return qe.format_prompt([{"role": "user", "content": text}])


@pytest.mark.parametrize(
    ("ids", "position", "reason"),
    [
        ([-1], 0, "outside the vocabulary"),
        ([1, 10**7], 1, "outside the vocabulary"),
        ([1, 2**70], 1, "outside the vocabulary"),  # OverflowError inside tokenizers before
        (np.array([5, -3]), 1, "outside the vocabulary"),
        ([1.0], 0, "expected an integer"),  # truncated to 1 before
        (np.array([1.5]), 0, "expected an integer"),
        ([True], 0, "expected an integer"),
        ([5, 7, True], 2, "expected an integer"),  # numpy would read it as 1
        ([5, 2.0], 1, "expected an integer"),
        ([1, None], 1, "expected an integer"),
        ([1, "2"], 1, "expected an integer"),
        ([[1]], 0, "expected an integer"),
        (None, 0, "expected a sequence"),
        ("abc", 0, "expected a sequence"),
    ],
)
def test_decode_checks_every_id(tiny: qe.Encoder, ids, position: int, reason: str) -> None:
    with pytest.raises(qe.TokenIdError, match=reason) as raised:
        tiny.decode(ids)
    assert raised.value.position == position


def test_decode_still_takes_lists_arrays_and_numpy_scalars(tiny: qe.Encoder) -> None:
    ids = tiny.encode(_prompt("good morning")).input_ids
    text = tiny.decode(ids)
    assert tiny.decode(ids.tolist()) == text
    assert tiny.decode([np.int64(i) for i in ids]) == text
    assert tiny.decode(ids.astype(np.uint32)) == text
    assert tiny.decode([]) == ""
    assert tiny.decode(iter(ids.tolist())) == text
    assert tiny.vocab_size == 2048 + 33


@pytest.mark.parametrize("value", ["text", None, 5, {"role": "user"}, [{"role": "user"}]])
def test_encode_takes_a_prompt_only(tiny: qe.Encoder, value) -> None:
    with pytest.raises(qe.PromptError, match="expected a Prompt"):
        tiny.encode(value)


@pytest.mark.parametrize("value", [None, 5, _prompt()])
def test_encode_batch_takes_a_list(tiny: qe.Encoder, value) -> None:
    with pytest.raises(qe.PromptError, match="expected a list of Prompt"):
        tiny.encode_batch(value)


def test_a_surrogate_in_a_hand_made_prompt_refuses_that_prompt_only(tiny: qe.Encoder) -> None:
    # Before: the engine raised TypeError for the whole batch.
    bad = qe.Prompt((qe.Text("a\ud800", turn=1, field="content"),))
    good = _prompt()
    results = tiny.encode_batch([good, bad, "not a prompt", good], errors="return")
    assert isinstance(results[0], qe.Encoding) and isinstance(results[3], qe.Encoding)
    assert results[0].input_ids.tolist() == tiny.encode(good).input_ids.tolist()
    assert isinstance(results[1], qe.PromptError)
    assert (results[1].message_index, results[1].field) == (1, "content")
    assert isinstance(results[2], qe.PromptError)
    with pytest.raises(qe.PromptError, match="surrogate"):
        tiny.encode(bad)


def test_a_surrogate_in_a_chat_session_is_a_prompt_error(tiny: qe.Encoder) -> None:
    chat = tiny.chat()
    chat.append({"role": "user", "content": "ok \udc00"})
    with pytest.raises(qe.PromptError) as raised:
        chat.encoding()
    assert (raised.value.message_index, raised.value.field) == (0, "content")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"pad_id": 2**40}, qe.TokenIdError),
        ({"pad_id": -1}, qe.TokenIdError),
        ({"pad_id": 1.0}, qe.TokenIdError),
        ({"side": "middle"}, qe.PromptError),
    ],
)
def test_pad_checks_its_options(tiny: qe.Encoder, kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        tiny.pad([tiny.encode(_prompt())], **kwargs)


@pytest.mark.parametrize("value", [None, "x", [None], [_prompt()]])
def test_pad_takes_encodings(tiny: qe.Encoder, value) -> None:
    with pytest.raises(qe.PromptError, match="expected"):
        tiny.pad(value)


def _cache_sum(encoder: qe.Encoder) -> int:
    return sum(len(text) + ids.nbytes + 100 for text, ids in encoder._cache.items())


def test_two_threads_missing_the_same_text_count_it_once(tiny: qe.Encoder) -> None:
    # Both threads must be inside the engine at once (both missed the cache) before either
    # stores: a barrier in the engine makes that interleaving certain.
    encoder = runs_only(qe.Encoder(tiny.vocabulary, engine="tokenizers", cache_bytes=1 << 20))
    barrier = threading.Barrier(2, timeout=30)
    original = encoder._engine.encode_flat

    def both_inside(texts):
        barrier.wait()
        return original(texts)

    encoder._engine.encode_flat = both_inside  # type: ignore[method-assign]
    prompt = _prompt("the same text from two threads")
    results: list[qe.Encoding] = []
    threads = [
        threading.Thread(target=lambda: results.append(encoder.encode(prompt))) for _ in "ab"
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2
    info = encoder.cache_info()
    assert info["bytes"] == _cache_sum(encoder) > 0
    assert info["entries"] == len(encoder._cache)
    # And the cache still works afterwards: the entry evicts and refills with honest counts.
    encoder._engine.encode_flat = original  # type: ignore[method-assign]
    for i in range(3000):
        encoder.encode(_prompt(f"filler {i} " * 20))
    assert encoder.cache_info()["bytes"] == _cache_sum(encoder) <= 1 << 20
    assert encoder.cache_info()["entries"] > 10


def test_chat_refuses_unknown_options(tiny: qe.Encoder) -> None:
    with pytest.raises(qe.PromptError, match="unknown option") as raised:
        tiny.chat(continue_final_message=True)
    assert raised.value.field == "continue_final_message"


def test_local_files_only_must_be_a_bool() -> None:
    with pytest.raises(qe.PromptError) as raised:
        qe.Encoder.from_pretrained(ROOT / "fixtures" / "qwen3.8-tiny", local_files_only="yes")
    assert raised.value.field == "local_files_only"
