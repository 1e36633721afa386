"""qwen_encode.data: the row function, datasets, Parquet shards, Ray Data, and pickled encoders.

Every output is checked against ``Encoder.encode_messages`` called row by row on the same
request: the reference is the encoder's own single-conversation path, never the code under test.
Ray tests need ``ray`` (the ``[ray]`` extra, not in ``[test]``): they skip without it and run in
``scripts/integration_env.sh train``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qwen_encode as qe

from .conftest import ROOT, runs_only

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install -e .[test]")
pq = pytest.importorskip("pyarrow.parquet")
datasets = pytest.importorskip(
    "datasets", reason="datasets is not installed: pip install -e .[test]"
)

from qwen_encode import data  # noqa: E402 - after the skips: it needs pyarrow to run

TINY = ROOT / "fixtures" / "qwen3.8-tiny"
REQUESTS: list[dict[str, Any]] = [
    json.loads(line)
    for line in (ROOT / "examples" / "chat.jsonl").read_text(encoding="utf-8").splitlines()
]
# Rows that must fail, each in its own place, with the type the row reports.
BAD: dict[int, tuple[dict[str, Any], str]] = {
    1: ({"messages": [{"role": "assistant", "content": "no user"}]}, "PromptError"),
    4: ({"messages": [{"role": "user", "content": "x"}], "tools": "not a list"}, "RequestError"),
    6: (
        {"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"thinking": 1}},
        "RequestError",
    ),
}


def _mixed() -> list[dict[str, Any]]:
    rows = list(REQUESTS)
    for index, (row, _) in sorted(BAD.items()):
        rows.insert(index, row)
    return rows


MIXED = _mixed()


@pytest.fixture(scope="module")
def encoder() -> qe.Encoder:
    return qe.Encoder.from_pretrained(TINY, engine="tokenizers")


def expected(encoder: qe.Encoder, request: dict[str, Any]) -> qe.Encoding:
    """The reference: one encode_messages call with the request's fields spelled out."""
    kwargs = dict(request.get("chat_template_kwargs") or {})
    if request.get("reasoning_effort") is not None:
        kwargs["reasoning_effort"] = request["reasoning_effort"]
    return encoder.encode_messages(
        request["messages"],
        tools=request.get("tools"),
        add_generation_prompt=request.get("add_generation_prompt") is not False,
        continue_final_message=request.get("continue_final_message") is True,
        **kwargs,
    )


def as_json_text(request: dict[str, Any]) -> dict[str, Any]:
    """The Parquet-safe form: messages and tools as JSON text, the rest as plain columns."""
    row = {
        "messages": json.dumps(request["messages"]),
        "tools": None if request.get("tools") is None else json.dumps(request["tools"]),
        "add_generation_prompt": request.get("add_generation_prompt"),
        "continue_final_message": request.get("continue_final_message"),
        "reasoning_effort": request.get("reasoning_effort"),
        "chat_template_kwargs": json.dumps(request.get("chat_template_kwargs") or {}),
    }
    return row


def check_rows(encoder: qe.Encoder, rows: list[dict[str, Any]], requests: list[dict[str, Any]]):
    """Row i answers request i: equal to encode_messages, or its error in place."""
    assert len(rows) == len(requests)
    for index, (row, request) in enumerate(zip(rows, requests, strict=True)):
        if index in BAD and request is BAD[index][0]:
            assert row["error"].startswith(BAD[index][1] + ": "), (index, row["error"])
            assert row["input_ids"] == [] and row["num_tokens"] == 0
            continue
        assert row["error"] is None, (index, row["error"])
        reference = expected(encoder, request)
        assert row["input_ids"] == reference.input_ids.tolist(), index
        assert row["num_tokens"] == len(reference)
        mask = reference.assistant_mask
        if "assistant_masks" in row:
            assert row["assistant_masks"] == mask.astype(int).tolist(), index
        if "labels" in row:
            labels = np.where(mask, reference.input_ids, -100).tolist()
            assert row["labels"] == labels, index
        if "attention_mask" in row:
            assert row["attention_mask"] == [1] * len(reference)


# -- the row function ----------------------------------------------------------------------------


def test_rows_answer_rows_with_errors_in_place(encoder: qe.Encoder) -> None:
    # chat_template_kwargs as a dict column, messages as Python lists: the datasets batch shape.
    columns = {
        name: [request.get(name) for request in MIXED]
        for name in (
            "messages",
            "tools",
            "add_generation_prompt",
            "continue_final_message",
            "chat_template_kwargs",
            "reasoning_effort",
        )
    }
    table = data.encode_table(encoder, columns, "all")
    assert table.schema.field("input_ids").type == pa.list_(pa.int32())
    assert table.schema.field("assistant_masks").type == pa.list_(pa.int8())
    assert table.schema.field("labels").type == pa.list_(pa.int32())
    assert table.schema.field("attention_mask").type == pa.list_(pa.int8())
    assert table.schema.field("num_tokens").type == pa.int32()
    check_rows(encoder, table.to_pylist(), MIXED)
    summary = data.summarize(table)
    assert summary.rows == len(MIXED)
    assert summary.errors == {"PromptError": 1, "RequestError": 2}
    assert summary.tokens == sum(len(expected(encoder, r)) for r in REQUESTS)


def test_error_names_the_field(encoder: qe.Encoder) -> None:
    bad = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": 3}]}
    (row,) = data.encode_requests(encoder, [bad], "trl").to_pylist()
    assert row["error"].startswith("PromptError: messages[1].content: "), row["error"]


def test_column_sets(encoder: qe.Encoder) -> None:
    rows = {"messages": [REQUESTS[0]["messages"]]}
    assert data.encode_table(encoder, rows, "trl").column_names == [
        "input_ids",
        "assistant_masks",
        "num_tokens",
        "error",
    ]
    assert data.encode_table(encoder, rows, "axolotl").column_names == [
        "input_ids",
        "attention_mask",
        "labels",
        "num_tokens",
        "error",
    ]
    with pytest.raises(qe.PromptError, match="columns"):
        data.encode_table(encoder, rows, "openai")  # type: ignore[arg-type]


def test_json_text_columns_and_a_broken_one(encoder: qe.Encoder) -> None:
    table = pa.Table.from_pylist([as_json_text(r) for r in REQUESTS] + [{"messages": "[{"}])
    got = data.encode_table(encoder, table, "all").to_pylist()
    check_rows(encoder, got[:-1], REQUESTS)
    assert got[-1]["error"].startswith('RequestError: "messages" is not valid JSON text')


def test_kept_rows_drops_only_error_rows(encoder: qe.Encoder) -> None:
    table = data.encode_requests(encoder, MIXED, "trl")
    kept = data.kept_rows(table, drop_errors=True)
    assert kept.num_rows == len(REQUESTS)
    check_rows(encoder, kept.to_pylist(), REQUESTS)
    assert data.kept_rows(table, drop_errors=False) is table


# -- datasets ----------------------------------------------------------------------------------


def _struct_requests() -> list[dict[str, Any]]:
    # Arrow structs need one shape per column: no content-block lists, no tools (their schemas
    # would be unioned key by key, adding null properties).
    return [
        r
        for r in REQUESTS
        if "tools" not in r and all(isinstance(m.get("content"), str) for m in r["messages"])
    ]


@pytest.mark.parametrize("num_proc", [1, 2])
def test_encode_dataset_equals_encode_messages(encoder: qe.Encoder, num_proc: int) -> None:
    requests = _struct_requests() * 3
    # from_list takes its columns from the first row: give every row every key.
    keys = sorted({key for request in requests for key in request})
    dataset = datasets.Dataset.from_list([{k: r.get(k) for k in keys} for r in requests])
    out = data.encode_dataset(dataset, encoder, num_proc=num_proc, columns="all", batch_size=4)
    assert out.column_names == list(data.COLUMNS["all"])
    assert out.features["input_ids"].feature.dtype == "int32"
    assert out.features["assistant_masks"].feature.dtype == "int8"
    check_rows(encoder, out.to_list(), requests)


@pytest.mark.parametrize(
    ("option", "value"),
    [("num_proc", 0), ("num_proc", True), ("batch_size", 0), ("batch_size", "8")],
)
def test_encode_dataset_refuses_a_bad_count_naming_it(
    encoder: qe.Encoder, option: str, value: Any
) -> None:
    # A PromptError naming the option, not the TypeError a positional field raised.
    dataset = datasets.Dataset.from_list([as_json_text(_struct_requests()[0])])
    with pytest.raises(qe.PromptError) as raised:
        data.encode_dataset(dataset, encoder, **{option: value})
    assert raised.value.field == option


def test_encode_dataset_keeps_error_rows_in_place(encoder: qe.Encoder, tmp_path: Path) -> None:
    rows = [as_json_text(r) for r in MIXED]
    out = data.encode_dataset(datasets.Dataset.from_list(rows), encoder, num_proc=2, batch_size=3)
    got = out.to_list()
    assert [i for i, r in enumerate(got) if r["error"]] == sorted(BAD)
    assert got[4]["error"].startswith('RequestError: "tools" must be a JSON array')
    check_rows(encoder, got, MIXED)
    # datasets reads the Parquet it writes back with the same list types.
    out.to_parquet(tmp_path / "rows.parquet")
    back = datasets.Dataset.from_parquet(str(tmp_path / "rows.parquet"))
    assert back.features == out.features
    assert back.to_list() == got


def test_encode_dataset_from_a_source_path() -> None:
    dataset = datasets.Dataset.from_list([as_json_text(REQUESTS[0])])
    out = data.encode_dataset(dataset, TINY, engine="tokenizers", keep_columns=True)
    assert "messages" in out.column_names and "input_ids" in out.column_names
    reference = qe.Encoder.from_pretrained(TINY, engine="tokenizers")
    assert out[0]["input_ids"] == expected(reference, REQUESTS[0]).input_ids.tolist()


# -- Parquet shards ----------------------------------------------------------------------------


def _write_shards(folder: Path, requests: list[dict[str, Any]], per_shard: int) -> None:
    folder.mkdir()
    for start in range(0, len(requests), per_shard):
        rows = [as_json_text(r) for r in requests[start : start + per_shard]]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"part-{start:04d}.parquet")


def _read_folder(folder: Path) -> list[dict[str, Any]]:
    return pa.concat_tables(pq.read_table(p) for p in sorted(folder.glob("*.parquet"))).to_pylist()


PLAIN = REQUESTS


@pytest.mark.parametrize("num_proc", [None, 2])
def test_encode_parquet_folder(encoder: qe.Encoder, tmp_path: Path, num_proc: int | None) -> None:
    requests = PLAIN * 4
    _write_shards(tmp_path / "in", requests, per_shard=5)
    summary = data.encode_parquet(
        encoder, tmp_path / "in", tmp_path / "out", num_proc=num_proc, columns="all", batch_size=3
    )
    names = sorted(p.name for p in (tmp_path / "in").iterdir())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == names
    check_rows(encoder, _read_folder(tmp_path / "out"), requests)
    assert summary.rows == len(requests) and summary.shards_written == len(names)
    assert summary.tokens == sum(len(expected(encoder, r)) for r in requests)


def test_encode_parquet_with_workers_maps_its_input_from_files(
    encoder: qe.Encoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In memory, datasets pickles every worker's rows and results through a pipe; memory-mapped,
    # workers read and write Arrow files. The cache goes with the shard (the folder test above
    # sees nothing but the output shards).
    _write_shards(tmp_path / "in", PLAIN * 2, per_shard=len(PLAIN))
    seen: list[int] = []
    real = data.encode_dataset

    def spy(dataset: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(len(dataset.cache_files))
        return real(dataset, *args, **kwargs)

    monkeypatch.setattr(data, "encode_dataset", spy)
    data.encode_parquet(encoder, tmp_path / "in", tmp_path / "out", num_proc=2, batch_size=2)
    assert seen and all(count > 0 for count in seen)
    check_rows(encoder, _read_folder(tmp_path / "out"), PLAIN * 2)


def test_interrupted_shard_leaves_nothing_and_resume_skips_finished(
    encoder: qe.Encoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_shards(tmp_path / "in", PLAIN * 3, per_shard=len(PLAIN))
    out = tmp_path / "out"
    real = data.encode_table
    calls = {"n": 0}

    def dies_on_the_third_batch(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # what Ctrl-C raises mid-shard
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "encode_table", dies_on_the_third_batch)
    # batch_size=len(PLAIN) // 2 + 1: two batches a shard, so the third call is inside shard 2.
    with pytest.raises(KeyboardInterrupt):
        data.encode_parquet(encoder, tmp_path / "in", out, batch_size=len(PLAIN) // 2 + 1)
    assert sorted(p.name for p in out.iterdir()) == ["part-0000.parquet"]  # no half shard, no tmp
    finished = (out / "part-0000.parquet").stat().st_mtime_ns
    monkeypatch.setattr(data, "encode_table", real)
    summary = data.encode_parquet(encoder, tmp_path / "in", out, resume=True)
    assert (summary.shards_skipped, summary.shards_written) == (1, 2)
    assert (out / "part-0000.parquet").stat().st_mtime_ns == finished
    check_rows(encoder, _read_folder(out), PLAIN * 3)


def test_encode_parquet_drop_errors_counts_them(encoder: qe.Encoder, tmp_path: Path) -> None:
    bad = {"messages": json.dumps([{"role": "assistant", "content": "x"}])}
    rows = [{"messages": json.dumps(r["messages"])} for r in REQUESTS[:2]]
    pq.write_table(pa.Table.from_pylist([rows[0], bad, rows[1]]), tmp_path / "in.parquet")
    summary = data.encode_parquet(
        encoder, tmp_path / "in.parquet", tmp_path / "out.parquet", drop_errors=True
    )
    assert (summary.rows, summary.dropped, summary.errors) == (3, 1, {"PromptError": 1})
    got = pq.read_table(tmp_path / "out.parquet").to_pylist()
    check_rows(encoder, got, [{"messages": r["messages"]} for r in REQUESTS[:2]])


# -- pickling ----------------------------------------------------------------------------------

UNPICKLE = """
import json, pickle, sys
loaded = pickle.load(open(sys.argv[1], "rb"))
encoder = getattr(loaded, "encoder", loaded)  # an Encoder, or an EncodeBatches holding one
messages = [{"role": "user", "content": "Hello <|im_end|> there"}]
try:
    ids = encoder.encode_messages(messages).input_ids.tolist()
except Exception as error:
    ids = type(error).__name__
print(json.dumps({"ids": ids, "mode": encoder.markers_in_text, "cache": encoder.cache_info(),
                  "source": encoder.report.source}))
"""


def _unpickle_elsewhere(path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", UNPICKLE, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=path.parent,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_encoder_unpickles_after_its_folder_is_deleted(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint"
    shutil.copytree(TINY, folder)
    original = qe.Encoder.from_pretrained(folder, engine="tokenizers", cache_bytes=12345)
    messages = [{"role": "user", "content": "Hello <|im_end|> there"}]
    want = original.encode_messages(messages).input_ids.tolist()
    assert original.cache_info()["entries"] > 0
    (tmp_path / "encoder.pkl").write_bytes(pickle.dumps(original))
    shutil.rmtree(folder)
    got = _unpickle_elsewhere(tmp_path / "encoder.pkl")
    assert got["ids"] == want
    # The cache limit travelled; the entries are the child's own one request's.
    assert got["cache"] == original.cache_info()
    assert not got["source"].startswith(str(folder))


def test_encoder_options_travel(tmp_path: Path) -> None:
    original = qe.Encoder.from_pretrained(TINY, markers_in_text="reject", engine="tokenizers")
    (tmp_path / "encoder.pkl").write_bytes(pickle.dumps(original))
    got = _unpickle_elsewhere(tmp_path / "encoder.pkl")
    assert (got["ids"], got["mode"]) == ("MarkerInTextError", "reject")


def test_the_run_cache_does_not_travel(encoder: qe.Encoder) -> None:
    fresh = qe.Encoder.from_pretrained(TINY, engine="tokenizers")
    before = len(pickle.dumps(fresh))
    long = [{"role": "system", "content": "word " * 5000}, {"role": "user", "content": "hi"}]
    fresh.encode_batch([qe.format_prompt(long)])  # the system turn's IDs are kept whole
    runs_only(fresh).encode_batch([qe.format_prompt(long[1:])])  # the run cache fills
    assert fresh.cache_info()["entries"] > 0 and fresh.cache_info()["head_entries"] > 0
    assert len(pickle.dumps(fresh)) == before
    info = pickle.loads(pickle.dumps(fresh)).cache_info()
    assert info["entries"] == info["head_entries"] == 0


def test_a_hub_checkpoint_travels_as_its_id(tmp_path: Path) -> None:
    # A hub cache laid out as huggingface_hub lays it out, read offline.
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--qwen-encode--tiny"
    shutil.copytree(TINY, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    old = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        original = qe.Encoder.from_pretrained("qwen-encode/tiny", engine="tokenizers")
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    pickled = pickle.dumps(original)
    assert len(pickled) < 1000  # an id and a revision, not the files
    (tmp_path / "encoder.pkl").write_bytes(pickled)
    got = _unpickle_elsewhere(tmp_path / "encoder.pkl", env)
    want = original.encode_messages([{"role": "user", "content": "Hello <|im_end|> there"}])
    assert got["ids"] == want.input_ids.tolist()
    assert got["source"] == "qwen-encode/tiny"


def _inherited(pickled: bytes, parent_id: int) -> bool:
    # In a forked child the parent's objects keep their addresses: the restored callable holds
    # the very encoder the parent had, not a copy unpickled beside it.
    return id(pickle.loads(pickled).encoder) == parent_id


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(),
    reason="no fork on this platform (datasets' workers are spawned and load the bytes)",
)
def test_a_forked_worker_uses_the_encoder_it_inherited(tmp_path: Path) -> None:
    # Unpickling an encoder costs a worker about a second (Tokenizer.from_file), which
    # datasets.map(num_proc=N) paid in every worker on every call, so on every shard of a folder.
    function = data.EncodeBatches(TINY, engine="tokenizers")
    pickled = pickle.dumps(function)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_inherited, (pickled, id(function.encoder)))
    # Where nothing was inherited (a spawned worker, another machine), the bytes are loaded.
    (tmp_path / "batches.pkl").write_bytes(pickled)
    got = _unpickle_elsewhere(tmp_path / "batches.pkl")
    want = function.encoder.encode_messages([{"role": "user", "content": "Hello <|im_end|> there"}])
    assert got["ids"] == want.input_ids.tolist()


def test_the_table_of_loaded_encoders_keeps_none_alive() -> None:
    """The table that lets a forked worker reuse its parent's encoder holds none of them alive:
    once the row function is gone, so is the encoder it loaded."""
    import gc
    import weakref

    function = data.EncodeBatches(TINY, engine="tokenizers")
    encoder = weakref.ref(function.encoder)
    del function
    gc.collect()
    assert encoder() is None


def test_a_hand_built_vocabulary_pickles(encoder: qe.Encoder) -> None:
    by_hand = qe.Encoder(encoder.vocabulary)
    copy = pickle.loads(pickle.dumps(by_hand))
    prompt = qe.format_prompt(REQUESTS[0]["messages"])
    assert copy.encode(prompt).input_ids.tolist() == by_hand.encode(prompt).input_ids.tolist()
    assert dict(copy.vocabulary.marker_ids) == dict(encoder.vocabulary.marker_ids)


# -- Ray Data ----------------------------------------------------------------------------------

RAY_RUN = """
import json, sys
import ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
import qwen_encode as qe
from qwen_encode import data
encoder = qe.Encoder.from_pretrained(sys.argv[1], engine="tokenizers")
summary = data.encode_ray(encoder, sys.argv[2], sys.argv[3], columns="all", batch_size=16)
print(json.dumps({"rows": summary.rows, "errors": dict(summary.errors)}))
"""

# On this 2-core machine the run below took 25-30 s (Ray's start ~5 s, two actors loading the
# encoder); the bound only catches a hang like the one once seen here (read tasks starved by
# actors holding every CPU), which never finishes.
RAY_BOUND_SECONDS = 240


def test_encode_ray_on_two_cpus_finishes_and_keeps_rows(
    encoder: qe.Encoder, tmp_path: Path
) -> None:
    pytest.importorskip("ray", reason="ray is not installed: pip install -e .[ray]")
    requests = PLAIN * 20
    requests[7] = {"messages": [{"role": "assistant", "content": "x"}]}
    _write_shards(tmp_path / "in", requests, per_shard=40)
    result = subprocess.run(
        [sys.executable, "-c", RAY_RUN, str(TINY), str(tmp_path / "in"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=RAY_BOUND_SECONDS,
        env={**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "rows": len(requests),
        "errors": {"PromptError": 1},
    }
    rows = _read_folder(tmp_path / "out")
    assert rows[7]["error"].startswith("PromptError: ")
    good = [i for i in range(len(requests)) if i != 7]
    check_rows(encoder, [rows[i] for i in good], [requests[i] for i in good])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]  # no staging left


# Loaded by every Python process of the run (Ray's workers inherit PYTHONPATH): each batch is
# made as slow as a batch of real conversations (seconds), so that a second actor is up before
# the first is done, and each actor notes its process and its BPE-threads setting. (A patched
# class cannot be shipped from the driver instead: Ray would pickle it by value, and its
# super() would no longer name its own class.)
SLOW_BATCHES = """
import os
if os.environ.get("QE_TEST_NOTES"):
    import time
    from qwen_encode import data

    real = data.EncodeBatches.__call__

    def slow(self, batch):
        time.sleep(4)
        with open(os.environ["QE_TEST_NOTES"], "a") as out:
            out.write(f"{os.getpid()} {os.environ.get('TOKENIZERS_PARALLELISM')}\\n")
        return real(self, batch)

    data.EncodeBatches.__call__ = slow
"""


def test_encode_ray_gives_every_actor_work(encoder: qe.Encoder, tmp_path: Path) -> None:
    # Two batches, two actors: with Ray's default of two blocks in flight per actor, the first
    # actor up took both and Ray stopped the second as idle. Each actor runs on one thread, as
    # it is given one core's share (HF tokenizers would start a thread per core in each).
    pytest.importorskip("ray", reason="ray is not installed: pip install -e .[ray]")
    requests = (PLAIN * 4)[:32]
    _write_shards(tmp_path / "in", requests, per_shard=8)
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(SLOW_BATCHES)
    result = subprocess.run(
        [sys.executable, "-c", RAY_RUN, str(TINY), str(tmp_path / "in"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=RAY_BOUND_SECONDS,
        env={
            **os.environ,
            "PYTHONPATH": f"{tmp_path / 'hook'}{os.pathsep}{ROOT}",
            "QE_TEST_NOTES": str(tmp_path / "notes.txt"),
            "RAY_USAGE_STATS_ENABLED": "0",
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {"rows": 32, "errors": {}}
    notes = [line.split() for line in (tmp_path / "notes.txt").read_text().splitlines()]
    assert len({pid for pid, _ in notes}) == 2, notes
    assert {setting for _, setting in notes} == {"false"}, notes
    check_rows(encoder, _read_folder(tmp_path / "out"), requests)
