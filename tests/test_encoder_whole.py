"""The whole-prompt path (``encoder_whole``) against the run-by-run path (``encoder_layout``),
the one the conformance tests held against transformers before this path existed: the same
input_ids, assistant mask and turn index, or the same refusal, for every conversation of the
conformance corpus (every template option, tools, multimodal content, reasoning kept and
dropped, caller text spelling markers), batched and one prompt at a time, on both engines."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qwen_encode as qe
from qwen_encode import encoder_whole
from qwen_encode.encoder_whole import _separable
from qwen_encode.prompt import Prompt, Special, Text
from tests.conformance.corpus import generate
from tests.conftest import ROOT, runs_only

CASES = [*generate(count=320, seed=2608), *generate(count=120, seed=2609, markers=True)]


def _prompts(cases: list[dict[str, Any]]) -> list[qe.Prompt]:
    return [qe.format_prompt(c["messages"], tools=c["tools"], **c["kwargs"]) for c in cases]


PROMPTS = _prompts(CASES)


@pytest.fixture(
    scope="module",
    params=[("tokenizers", "literal"), ("fastokens", "literal"), ("fastokens", "reject")],
    ids=lambda p: "-".join(p),
)
def pair(request, qwen38_dir: Path) -> tuple[qe.Encoder, qe.Encoder]:
    engine, mode = request.param
    whole = qe.Encoder.from_pretrained(qwen38_dir, engine=engine, markers_in_text=mode)
    if whole.engine != engine:
        pytest.skip(f"{engine} is not available here")
    runs = runs_only(qe.Encoder(whole.vocabulary, markers_in_text=mode, cache_bytes=0))
    assert whole._whole_ready
    return whole, runs


def _same(got: Any, want: Any, where: Any = None) -> None:
    assert type(got) is type(want), where
    if isinstance(want, qe.Encoding):
        assert np.array_equal(got.input_ids, want.input_ids), where
        assert np.array_equal(got.assistant_mask, want.assistant_mask), where
        assert np.array_equal(got.turn_index, want.turn_index), where
        assert got.input_ids.dtype == want.input_ids.dtype
        assert got.assistant_mask.dtype == want.assistant_mask.dtype == np.bool_
        assert got.turn_index.dtype == want.turn_index.dtype
    else:
        assert str(got) == str(want), where


def _count_whole(
    encoder: qe.Encoder, monkeypatch: pytest.MonkeyPatch, failed: list[int] | None = None
) -> list[int]:
    """How many prompts each whole-path engine call carried (and, into ``failed``, the
    positions it gave back to the run-by-run path after all: its columns did not fit)."""
    taken: list[int] = []
    original = encoder._whole_encode

    def spy(rows, *rest):  # type: ignore[no-untyped-def]
        taken.append(len(rows.texts))
        done, back = original(rows, *rest)
        if failed is not None:
            failed.extend(back)
        return done, back

    monkeypatch.setattr(encoder, "_whole_encode", spy)
    return taken


def test_a_batch_gives_the_run_by_run_arrays(pair, monkeypatch) -> None:
    whole, runs = pair
    whole.clear_cache()
    failed: list[int] = []
    taken = _count_whole(whole, monkeypatch, failed)
    want = runs.encode_batch(PROMPTS, errors="return")
    for round_ in ("cold", "kept heads"):
        got = whole.encode_batch(PROMPTS, errors="return")
        for n, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, (round_, n))
    # The path is not vacuous: most of the plain cases went whole (218 of 320: the others hold
    # a user text spelling <tool_response>, or a combining mark where the owner changes), and
    # stayed whole: the columns of the prompts it did not take, some partly laid out before
    # they were refused, left none behind (the one pass would refuse the batch's columns).
    assert taken and min(taken) > 200, taken
    assert failed == []
    assert whole.cache_info()["head_hits"] >= 1


def test_a_large_batch_goes_in_chunks_encoded_on_a_worker_thread(pair, monkeypatch) -> None:
    """Past ``_CHUNK_CHARS`` of text a batch is laid out and encoded chunk by chunk, each
    chunk's engine call on a worker thread: the same arrays and refusals, in place, with system
    turns kept by one chunk taken by the next."""
    whole, runs = pair
    monkeypatch.setattr(encoder_whole, "_CHUNK_CHARS", 3000)
    threads: list[str] = []
    original = whole._whole_engine

    def spy(rows, *rest):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return original(rows, *rest)

    monkeypatch.setattr(whole, "_whole_engine", spy)
    joined: list[bool] = []
    original_joined = whole._joined_engine

    def spy_joined(rows):  # type: ignore[no-untyped-def]
        found = original_joined(rows)
        joined.append(found is not None)
        return found

    monkeypatch.setattr(whole, "_joined_engine", spy_joined)
    want = runs.encode_batch(PROMPTS, errors="return")
    whole.clear_cache()
    for round_ in ("cold", "kept heads"):
        threads.clear()
        joined.clear()
        got = whole.encode_batch(PROMPTS, errors="return")
        for n, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, (round_, n))
        assert len(threads) > 20 and all(t.startswith("qwen-encode") for t in threads)
        # fastokens takes every chunk but the last (and those of one text) as one text.
        assert (len(joined) > 15 and all(joined)) if whole._engine.joins_chunks else not joined
    assert whole.cache_info()["head_hits"] >= 1
    refused = [n for n, w in enumerate(want) if not isinstance(w, qe.Encoding)]
    if refused:  # reject mode: the first refusal raises, from whichever chunk holds it
        with pytest.raises(type(want[refused[0]])):
            whole.encode_batch(PROMPTS)
    # A batch under the limit is one chunk, encoded on the calling thread.
    monkeypatch.setattr(encoder_whole, "_CHUNK_CHARS", 1 << 20)
    threads.clear()
    whole.encode_batch(PROMPTS[:3], errors="return")
    assert threads == [threading.current_thread().name]


def test_a_chunk_counts_the_kept_system_turns_it_fills_in(pair, monkeypatch) -> None:
    """A chunk bounds the arrays it fills, not only the text it sends: rows that share a long
    kept system turn send little text each, so counted by text alone a whole agent set would be
    one chunk of fresh arrays; each kept token counts as ``_HEAD_CHARS`` characters."""
    whole, runs = pair
    system = " ".join(f"rule {n}: answer in full sentences." for n in range(60))
    prompts = [
        qe.format_prompt(
            [
                {"role": "system", "content": system},
                {"role": "user", "content": f"question {n}"},
                {"role": "assistant", "content": f"answer {n}"},
            ],
            add_generation_prompt=False,
        )
        for n in range(40)
    ]
    kept = int(np.count_nonzero(runs.encode_batch(prompts[:1])[0].turn_index == 0))
    own = sum(len(p.text.split("<|im_end|>\n", 1)[1]) for p in prompts)  # after the system turn
    limit = 10 * encoder_whole._HEAD_CHARS * kept
    assert own < limit  # by text alone, one chunk
    monkeypatch.setattr(encoder_whole, "_CHUNK_CHARS", limit)
    want = runs.encode_batch(prompts)
    whole.clear_cache()
    whole.encode_batch(prompts[:1])  # the system turn kept
    taken = _count_whole(whole, monkeypatch)
    got = whole.encode_batch(prompts)
    for n, (g, w) in enumerate(zip(got, want, strict=True)):
        _same(g, w, n)
    assert sum(taken) == 40 and len(taken) >= 4 and max(taken) <= 10, taken
    assert whole.cache_info()["head_hits"] >= len(taken)  # each chunk took the kept turn


def _chunked_ids(encoder: qe.Encoder, out: Any) -> None:
    out.put(
        [
            e.input_ids.tolist()
            for e in encoder.encode_batch(PROMPTS[:60], errors="return")
            if isinstance(e, qe.Encoding)
        ]
    )


def test_a_chunk_whose_joined_text_spells_more_added_tokens_goes_text_by_text(
    pair, monkeypatch
) -> None:
    """A chunk encoded as one text finds each row where its first marker is: if the added
    tokens found were not as many as the markers (a guard), each text goes on its own."""
    whole, runs = pair
    if not whole._engine.joins_chunks:
        pytest.skip(f"{whole.engine} encodes every chunk text by text")
    monkeypatch.setattr(encoder_whole, "_CHUNK_CHARS", 3000)
    original = whole._added_at

    def one_more(ids):  # type: ignore[no-untyped-def]
        where = original(ids)
        return np.append(where, where[-1:])  # one added token more than the markers

    monkeypatch.setattr(whole, "_added_at", one_more)
    refused: list[bool] = []
    original_joined = whole._joined_engine
    monkeypatch.setattr(
        whole, "_joined_engine", lambda rows: refused.append(original_joined(rows) is None)
    )
    whole.clear_cache()
    got = whole.encode_batch(PROMPTS[:60], errors="return")
    want = runs.encode_batch(PROMPTS[:60], errors="return")
    for n, (g, w) in enumerate(zip(got, want, strict=True)):
        _same(g, w, n)
    assert refused and all(refused)  # every joined chunk refused, then encoded text by text


def test_chunked_batches_from_threads_and_from_a_forked_child(pair, monkeypatch) -> None:
    """Batches chunked at once by several threads share the worker thread; a child forked after
    the worker started (datasets' num_proc) gets a worker of its own instead of its copy of the
    parent's, which holds no thread and would never run the work handed to it."""
    import multiprocessing
    import queue

    whole, runs = pair
    monkeypatch.setattr(encoder_whole, "_CHUNK_CHARS", 3000)
    want = [
        e.input_ids.tolist()
        for e in runs.encode_batch(PROMPTS[:60], errors="return")
        if isinstance(e, qe.Encoding)
    ]
    results: queue.Queue[Any] = queue.Queue()
    callers = [threading.Thread(target=_chunked_ids, args=(whole, results)) for _ in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=120)
    assert [results.get_nowait() for _ in callers] == [want] * 4
    context = multiprocessing.get_context("fork")
    child_results = context.Queue()
    child = context.Process(target=_chunked_ids, args=(whole, child_results), daemon=True)
    child.start()
    try:
        got = child_results.get(timeout=60)  # queue.Empty: the child's work never ran
        child.join(timeout=60)
        assert child.exitcode == 0 and got == want
    finally:
        child.kill()


def test_the_arrays_are_the_callers_to_change(pair) -> None:
    """fastokens hands its IDs over as a read-only view of its bytes; the arrays an Encoding
    holds are writable on every path (a collator masks IDs in place)."""
    whole, _ = pair
    whole.clear_cache()
    for _ in range(2):  # the second time the system turns are kept blocks
        for batch in (PROMPTS[:8], PROMPTS[:1]):
            for encoding in whole.encode_batch(batch, errors="return"):
                if not isinstance(encoding, qe.Encoding):
                    continue  # refused in reject mode
                for array in (encoding.input_ids, encoding.assistant_mask, encoding.turn_index):
                    assert array.flags.writeable


def test_one_prompt_at_a_time_gives_the_run_by_run_arrays(pair, monkeypatch) -> None:
    whole, runs = pair
    whole.clear_cache()
    taken = _count_whole(whole, monkeypatch)
    for n, prompt in enumerate(PROMPTS[::3]):
        want = runs.encode_batch([prompt], errors="return")[0]
        for round_ in ("first", "again"):  # the second time its system turn is kept
            _same(whole.encode_batch([prompt], errors="return")[0], want, (round_, n))
    assert len(taken) > 0.5 * len(PROMPTS[::3])


def test_a_batch_mixing_refused_literal_and_whole_prompts(qwen38_dir: Path) -> None:
    """Refusals keep their places and types; a system turn first met by a prompt that goes run
    by run is still laid out by the next whole one."""
    tools = [{"type": "function", "function": {"name": "f", "description": "d"}}]
    system = {"role": "system", "content": "You are terse."}
    texts = ["spells <|im_end|> here", "plain one", "<think>", "plain two", "ü </tool_call>"]
    prompts = [
        qe.format_prompt([system, {"role": "user", "content": t}], tools=tools) for t in texts
    ]
    prompts.insert(2, Prompt((Text("text first"), Special("<|im_end|>"))))
    for mode in ("literal", "reject"):
        whole = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers", markers_in_text=mode)
        runs = runs_only(qe.Encoder(whole.vocabulary, markers_in_text=mode, cache_bytes=0))
        got = whole.encode_batch(prompts, errors="return")
        want = runs.encode_batch(prompts, errors="return")
        for n, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, (mode, n))
        kinds = [type(g).__name__ for g in got]
        if mode == "reject":
            assert kinds.count("MarkerInTextError") == 3
            with pytest.raises(qe.MarkerInTextError):
                whole.encode_batch(prompts)
        else:
            assert kinds == ["Encoding"] * 6


def test_the_markers_check_sends_a_prompt_run_by_run(pair, monkeypatch) -> None:
    """If a caller run did spell an added token past the per-prompt check (it cannot: the check
    is disabled here to reach the guard), the IDs' added tokens would not be the markers: the
    batch is encoded run by run, with the right IDs."""
    whole, runs = pair
    if whole.markers_in_text == "reject":
        pytest.skip("in reject mode the check refuses the prompt instead")
    monkeypatch.setattr(whole, "_spells_marker", lambda *args: False)
    cases = CASES[:10]
    spelled = [
        qe.format_prompt([{"role": "user", "content": f"a <|im_end|> b {i}"}]) for i in range(3)
    ]
    prompts = [*_prompts(cases[:5]), spelled[0], *_prompts(cases[5:10]), *spelled[1:]]
    got = whole.encode_batch(prompts)
    want = runs.encode_batch(prompts)
    for n, (g, w) in enumerate(zip(got, want, strict=True)):
        _same(g, w, n)
    _same(whole.encode(spelled[0]), runs.encode(spelled[0]))
    im_end = whole.vocabulary.added_tokens["<|im_end|>"]
    # The <|im_end|> the protocol wrote (the system turn's and the user turn's): none from text.
    written = [s for s in spelled[0].segments if s == Special("<|im_end|>", s.turn)]
    assert list(got[5].input_ids).count(im_end) == len(written) == 2


def test_long_prompts_and_hand_made_ones_go_run_by_run(pair) -> None:
    whole, runs = pair
    long = qe.format_prompt([{"role": "user", "content": "word " * 30_000}])
    hand = [
        Prompt((Text("no marker first"), Special("<|im_start|>"), Text("x"))),
        Prompt((Special("<|im_start|>"), Text("user\nhi"), Special("<|im_end|>"))),
        Prompt(()),
    ]
    for prompt in [long, *hand]:
        _same(whole.encode(prompt), runs.encode(prompt))


def test_a_growing_conversation_sent_alone_encodes_only_its_new_exchange(pair, monkeypatch):
    """A server sees a conversation again and again, one exchange longer each time. Short, it
    goes whole (one engine call); past a few thousand characters, the first time still whole
    (its first text run kept), met again run by run, so the run cache spares the turns seen."""
    whole, runs = pair
    whole.clear_cache()
    sent: list[str] = []
    for name in ("encode_flat", "encode_ordinary"):
        original = getattr(whole._engine, name)

        def spy(texts, original=original):  # type: ignore[no-untyped-def]
            sent.extend([texts] if isinstance(texts, str) else texts)
            return original(texts)

        monkeypatch.setattr(whole._engine, name, spy)
    history = [{"role": "user", "content": "a short question"}]
    for i in range(12):
        history.append({"role": "assistant", "content": f"answer {i}: " + "many words " * 60})
        history.append({"role": "user", "content": f"question {i + 1}"})
        prompt = qe.format_prompt(history)
        sent.clear()
        _same(whole.encode(prompt), runs.encode(prompt), i)
        if i == 0:
            assert len(sent) == 1 and sent[0].startswith("<|im_start|>")  # whole, one call
        if i >= 8:  # past 4,096 characters: only the new exchange reaches the engine
            assert sum(map(len, sent)) < 1000, (i, sum(map(len, sent)))


def test_a_long_prompt_alone_with_one_marker(pair) -> None:
    whole, runs = pair
    prompt = Prompt((Special("<|im_start|>"), Text("user\n" + "word " * 2000)))
    for _ in range(2):  # whole, then (its text kept) run by run
        _same(whole.encode(prompt), runs.encode(prompt))


@pytest.mark.parametrize("threads", [2, 3])
def test_long_prompts_of_a_small_batch_are_cut_for_the_engines_threads(
    pair, monkeypatch, threads
) -> None:
    """A request (or a batch smaller than the machine's cores) is handed to the engine in pieces
    cut before turn markers, so that every thread has text: the IDs are the run-by-run ones."""
    whole, runs = pair
    monkeypatch.setattr(encoder_whole, "_THREADS", threads)
    sent: list[list[str]] = []
    original = whole._engine.encode_flat

    def spy(texts):  # type: ignore[no-untyped-def]
        sent.append(list(texts))
        return original(texts)

    monkeypatch.setattr(whole._engine, "encode_flat", spy)
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(14):
        history.append({"role": "user", "content": f"question {i}: " + "ünïcode words " * 40})
        history.append(
            {"role": "assistant", "content": f"answer {i} " * 50, "reasoning_content": "hm " * 30}
        )
    prompt = qe.format_prompt(history, add_generation_prompt=False)
    one_message = qe.format_prompt(
        [{"role": "user", "content": "word " * 4000}], add_generation_prompt=False
    )
    for batch in ([prompt], [prompt, one_message], [one_message]):
        whole.clear_cache()
        sent.clear()
        got = whole.encode_batch(batch)
        for n, (g, w) in enumerate(zip(got, runs.encode_batch(batch), strict=True)):
            _same(g, w, (threads, len(batch), n))
        # One engine call: with fewer texts than threads, the long conversation in `threads`
        # pieces, each on a turn marker; the one-message prompt has no turn marker past its
        # first half (a system turn, then the message), so it stays whole.
        assert len(sent) == 1 and "".join(sent[0]) == "".join(p.text for p in batch)
        assert all(piece.startswith("<|im_start|>") for piece in sent[0])
        cut = len(batch) < threads
        assert len(sent[0]) == sum(threads if cut and p is prompt else 1 for p in batch)


def _decision(columns: Any, pattern: Any) -> Any:
    """What ``_lay_out_whole`` reads from a prompt's ``_Columns``: the suspect runs matter only
    through whether the added tokens' pattern finds one in them."""
    if columns is None:
        return None
    text, crossing, suspect = columns
    spells = suspect is not None and pattern.search(suspect) is not None
    return text, crossing, spells


EMPTY_CROSSING = [
    # A run whose owner changes inside it but that has no text: no tokens to split.
    Prompt((Special("<|im_start|>", 0), Text("", 0, False), Text("", 0, True))),
    Prompt(
        (
            Special("<|im_start|>", 0),
            Text("", 0, False),
            Text("", 0, True),
            Special("<|im_end|>", 0),
        )
    ),
    Prompt(
        (
            *(Special("<|im_start|>", 0), Text("", 0, False), Text("", 0, True)),
            *(Special("<|im_end|>", 0), Text("user\n", 1, False), Text("hi", 1, True)),
        )
    ),
]


@pytest.mark.parametrize("one_pass", [False, True], ids=["numpy passes", "one pass"])
def test_both_ways_to_the_arrays_give_the_run_by_run_arrays(pair, monkeypatch, one_pass) -> None:
    """The batch's arrays from the IDs: the numpy passes (pure Python) or ``_owners``' one pass
    (the compiled module's; run here as whatever this install has, Python or compiled), on the
    conformance batch, requests one at a time, and runs changing owner with no tokens (a batch
    of two of those once failed to broadcast)."""
    whole, runs = pair
    monkeypatch.setattr(encoder_whole, "_ONE_PASS", one_pass)
    prompts = [*PROMPTS[:200], *EMPTY_CROSSING, *EMPTY_CROSSING]
    whole.clear_cache()
    for batch in (prompts, EMPTY_CROSSING[:1] * 2, EMPTY_CROSSING[1:]):
        got = whole.encode_batch(batch, errors="return")
        want = runs.encode_batch(batch, errors="return")
        for n, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, n)
    for n, prompt in enumerate(prompts[:40] + EMPTY_CROSSING):
        got = whole.encode_batch([prompt], errors="return")
        _same(got[0], runs.encode_batch([prompt], errors="return")[0], n)


def test_the_one_pass_refuses_columns_that_do_not_fit() -> None:
    """Compiled, ``_owners``' loops index without bounds checks: whatever does not fit
    together must be refused before they run (None), never read or written out of range."""
    from qwen_encode.encoder_owners import _owners

    floor = 100
    ids = np.array([100, 5, 6, 101, 7], dtype=np.int32)  # marker, text, marker, text
    good = ([0, 2], [100, 101], [0, 2], [0, 0, 1, 1], [False, False, True, True])
    owned = _owners(ids, [0, 5], floor, good, [None], [], 4)
    assert owned is not None
    assert owned[2].tolist() == [0, 0, 0, 1, 1] and owned[3].tolist() == [0, 0, 0, 1, 1]
    assert owned[4].tolist() == [1, 2, 1, 1]
    head = np.array([1, 2, 3], dtype=np.int32)
    with_head = ([0, 2], [100, 101], [1, 3], [0, 0, 0, 1, 1], [False, False, False, True, True])
    owned = _owners(ids, [0, 5], floor, with_head, [head], [0], 5)
    assert owned is not None and owned[0].tolist() == [1, 2, 3, 100, 5, 6, 101, 7]
    assert owned[4].tolist() == [3, 1, 2, 1, 1]
    bad = {
        "bounds short of the IDs": (ids, [0, 4], good, [None], [], 4),
        "bounds past the IDs": (ids, [0, 9], good, [None], [], 4),
        "bounds backwards": (ids, [0, 5, 3, 5], ([0, 1, 2, 2], *good[1:]), [None] * 3, [], 4),
        "no rows": (ids, [], good, [], [], 4),
        "a marker's run past the runs": (
            ids,
            [0, 5],
            ([0, 2], [100, 101], [0, 9], *good[3:]),
            [None],
            [],
            4,
        ),
        "a negative marker run": (
            ids,
            [0, 5],
            ([0, 2], [100, 101], [-1, 2], *good[3:]),
            [None],
            [],
            4,
        ),
        "fewer owners than runs": (ids, [0, 5], (*good[:3], [0, 0, 1], good[4]), [None], [], 4),
        "firsts not ending at the markers": (ids, [0, 5], ([0, 1], *good[1:]), [None], [], 4),
        "a head without its run": (ids, [0, 5], with_head, [head], [], 5),
        "a head run past the runs": (ids, [0, 5], with_head, [head], [7], 5),
        "text after the last run": (
            ids,
            [0, 5],
            ([0, 2], [100, 101], [0, 3], *good[3:]),
            [None],
            [],
            4,
        ),
        "a marker the row lacks": (
            ids,
            [0, 5],
            ([0, 2], [100, 102], [0, 2], *good[3:]),
            [None],
            [],
            4,
        ),
        "a row not starting on a marker": (
            ids[1:],
            [0, 4],
            ([0, 1], [101], [2], *good[3:]),
            [None],
            [],
            4,
        ),
    }
    for name, (array, bounds, columns, heads, head_runs, runs) in bad.items():
        assert _owners(array, bounds, floor, columns, heads, head_runs, runs) is None, name


def test_the_two_layouts_of_a_prompt_agree(qwen38_dir: Path) -> None:
    """The compiled module lays out with ``_columns_loop``, pure Python with
    ``_columns_builtin``: both run here, as Python, on the corpus (markers spelled in caller
    text, runs changing owner), hand-made prompts (text first, an unknown segment type, a
    marker the vocabulary lacks), every offset, and with and without the markers' initial."""
    encoder = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers")
    odd = [
        Prompt((Text("no marker first"), Special("<|im_start|>"), Text("x"))),
        Prompt((Special("<|im_start|>"), Text("user\nhi"), Special("<|im_end|>"))),
        Prompt((Special("<|im_start|>"), Special("<|im_end|>"))),
        Prompt((Special("<|im_start|>"), Special("<not_a_token|>"), Text("x"))),
        Prompt((Special("<|im_start|>"), "neither", Text("x"))),  # type: ignore[arg-type]
    ]
    initials = (encoder._marker_initial, None)
    taken = refused = spelled = 0
    for prompt in [*PROMPTS, *odd]:
        runs = prompt._layout()
        for base, initial in ((0, initials[0]), (7, initials[0]), (3, initials[1])):
            args = (runs, base, encoder._added_ids, initial)
            # Added after what a batch's columns already hold, as _lay_out_whole adds them.
            want_out: Any = ([7], [0], [-1], [False])
            got_out: Any = ([7], [0], [-1], [False])
            want = _decision(
                encoder_whole._columns_builtin(*args, want_out), encoder._added_pattern
            )
            got = _decision(encoder_whole._columns_loop(*args, got_out), encoder._added_pattern)
            assert got == want, (prompt, base, initial)
            if want is not None:  # else partly added, for the caller to drop
                assert got_out == want_out, (prompt, base, initial)
        taken += want is not None
        refused += want is None
        spelled += want is not None and want[-1]
    assert initials[0] == "<" and taken > 400 and refused == 3 and spelled > 20


def test_separable() -> None:
    qwen = json.loads((ROOT / "fixtures" / "qwen3.8-tiny" / "tokenizer.json").read_text())
    assert _separable([t["content"] for t in qwen["added_tokens"]])
    assert not _separable(["<a>", "<a>b"])  # one holds another
    assert not _separable(["<ab>", "b><c"])  # a proper suffix of one begins the other
    assert not _separable(["<x|", "|y>"])  # ... ends it
    assert not _separable(["abc", "zab"])
    assert not _separable(["<x>", "a-b-a"])  # one overlaps itself ("a" ends and begins it)


def test_a_vocabulary_whose_markers_strip_goes_run_by_run(tmp_path: Path) -> None:
    """The path is proven for added tokens matched as plain strings (no lstrip, rstrip,
    single_word or normalized matching, which would take whitespace from or match beside the
    text around them): a vocabulary with any other goes run by run."""
    source = ROOT / "fixtures" / "qwen3.8-tiny"
    target = tmp_path / "stripping"
    target.mkdir()
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    data = json.loads((source / "tokenizer.json").read_text())
    # Not a protocol marker (the vocabulary refuses those with lstrip), another added token.
    extra = 1 + max(t["id"] for t in data["added_tokens"])
    data["added_tokens"].append(
        {
            "id": extra,
            "content": "<|extra|>",
            "single_word": False,
            "lstrip": True,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    (target / "tokenizer.json").write_text(json.dumps(data))
    encoder = qe.Encoder.from_pretrained(target, engine="tokenizers")
    assert not encoder._whole_ready
    plain = qe.Encoder.from_pretrained(source, engine="tokenizers")
    assert plain._whole_ready


_MARKERS = ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<|vision_pad|>"]
_PIECES = st.sampled_from(
    [
        "",
        " ",
        "\n",
        "\n\n",
        "user\n",
        "assistant\n",
        "hello",
        "é",
        "e\u0301",
        "数据",
        "<",
        "<|",
        "|>",
    ]
    + [m[:-1] for m in _MARKERS]
    + [m[1:] for m in _MARKERS]
    + _MARKERS
)
_SEGMENT = st.one_of(
    st.builds(
        Special,
        st.sampled_from([*_MARKERS, "<|not_a_token|>"]),
        st.integers(-1, 3),
        st.booleans(),
    ),
    st.builds(
        Text,
        st.lists(_PIECES, max_size=4).map("".join),
        st.integers(-1, 3),
        st.booleans(),
        st.sampled_from([None, "content", "reasoning_content"]),
    ),
)


@pytest.fixture(scope="module")
def pairs_by_mode(qwen38_dir: Path) -> dict[str, tuple[qe.Encoder, qe.Encoder]]:
    pairs = {}
    for mode in ("literal", "reject"):
        whole = qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers", markers_in_text=mode)
        pairs[mode] = (whole, runs_only(qe.Encoder(whole.vocabulary, markers_in_text=mode)))
    return pairs


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.lists(_SEGMENT, max_size=12), min_size=1, max_size=4))
def test_hand_made_prompts_give_the_run_by_run_arrays(pairs_by_mode, batch) -> None:
    """Hand-made prompts (a chat session encodes its turns as these): markers next to markers,
    empty texts, texts spelling markers or halves of them across segments, unknown markers,
    owners changing inside a run; each mode, batched and alone."""
    prompts = [Prompt(tuple(segments)) for segments in batch]
    for mode, (whole, runs) in pairs_by_mode.items():
        want = runs.encode_batch(prompts, errors="return")
        got = whole.encode_batch(prompts, errors="return")
        for n, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, (mode, n))
        for n, prompt in enumerate(prompts):
            _same(whole.encode_batch([prompt], errors="return")[0], want[n], (mode, "alone", n))
