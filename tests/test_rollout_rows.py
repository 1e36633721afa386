"""RL rows from trajectory files: the Parquet a job leaves holds, per trajectory, the prompt each
turn was sampled from plus exactly the sampled IDs, the mask over them, their logprobs, and the
prompt/completion split TRL and verl read; a bad step keeps its row, named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import qwen_encode as qe
from qwen_encode import data
from qwen_encode import provenance as pv

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed: pip install .[data]")

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def encoder(qwen38_dir: Path) -> qe.Encoder:
    return qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers")


def _ids(encoder: qe.Encoder, text: str) -> list[int]:
    return encoder.vocabulary.tokenizer.encode(text, add_special_tokens=False).ids


def _trajectory(encoder: qe.Encoder) -> dict:
    call = "\n\n<tool_call>\n<function=lookup>\n<parameter=q>\nx\n</parameter>\n</function>\n"
    first = _ids(encoder, "need data\n</think>" + call + "</tool_call><|im_end|>")
    second = _ids(encoder, "\n</think>\n\nFound it.<|im_end|><|endoftext|>")
    return {
        "id": "ep-1",
        "tools": json.dumps(TOOLS),
        "steps": [
            {"role": "user", "content": "Find x."},
            {"role": "assistant", "sampled_ids": first, "logprobs": [-0.5] * len(first)},
            {"role": "tool", "content": "x = 42"},
            {
                "role": "assistant",
                "sampled_ids": second,
                "logprobs": [-0.25] * len(second),
                "finish_reason": "stop",
            },
        ],
        "reward": 1.0,
    }


def test_rows_written_to_parquet(encoder, tmp_path) -> None:
    good = _trajectory(encoder)
    bad = _trajectory(encoder)
    bad["id"] = "ep-2"
    bad["steps"][3]["sampled_ids"] = [*bad["steps"][3]["sampled_ids"][:3], -4]
    source = tmp_path / "trajectories.jsonl"
    source.write_text(
        "\n".join([json.dumps(good), "{not json", json.dumps(bad), json.dumps(good)]) + "\n"
    )
    target = tmp_path / "rows.parquet"
    data.write_trajectory_rows(encoder, source, target)
    rows = pq.read_table(target).to_pylist()
    assert [r["id"] for r in rows] == ["ep-1", None, "ep-2", "ep-1"]
    assert rows[1]["error"].startswith("PromptError: trajectory:")
    assert rows[2]["error"].startswith("TokenIdError: steps[3].sampled_ids: token IDs[3]")
    assert rows[2]["input_ids"] == [] and rows[3]["input_ids"] == rows[0]["input_ids"]
    row = rows[0]
    assert row["error"] is None and row["reward"] == 1.0 and row["num_turns"] == 4
    first, second = good["steps"][1]["sampled_ids"], good["steps"][3]["sampled_ids"]
    ids, mask = row["input_ids"], np.asarray(row["sampled_mask"], bool)
    assert row["prompt_ids"] + row["completion_ids"] == ids
    # The sampled tokens, in order, are exactly what was sampled (the trailing <|endoftext|>
    # left the conversation: it is never between turns).
    assert np.asarray(ids)[mask].tolist() == first + second[:-1]
    assert ids[len(row["prompt_ids"]) : len(row["prompt_ids"]) + len(first)] == first
    assert encoder.decode(row["prompt_ids"]).endswith("<|im_start|>assistant\n<think>\n")
    logprobs = np.asarray(row["logprobs"], dtype=np.float32)
    assert np.allclose(logprobs[mask], [-0.5] * len(first) + [-0.25] * (len(second) - 1))
    assert all(math.isnan(v) for v in logprobs[~mask])
    assert row["completion_mask"] == mask[len(row["prompt_ids"]) :].astype(int).tolist()
    completion_logprobs = np.asarray(row["completion_logprobs"])
    assert (completion_logprobs[np.asarray(row["completion_mask"]) == 0] == 0.0).all()
    tool = np.asarray(row["provenance"]) == pv.TOOL
    assert encoder.decode(np.asarray(ids)[tool]) == "x = 42"
    assert set(np.asarray(row["turn_index"])[mask].tolist()) == {1, 3}


def test_trainer_views(encoder) -> None:
    rows = data.trajectory_rows(encoder, [_trajectory(encoder)])
    trl = data.trl_rollout_output(rows)
    assert set(trl) == {"prompt_ids", "completion_ids", "logprobs", "env_mask"}
    assert len(trl["completion_ids"][0]) == len(trl["logprobs"][0]) == len(trl["env_mask"][0])
    verl = data.verl_agent_loop_output(rows[0])
    assert verl["response_ids"] == trl["completion_ids"][0]
    assert verl["response_mask"] == trl["env_mask"][0] and verl["reward_score"] == 1.0


@pytest.mark.parametrize(
    "change,error",
    [
        (
            lambda t: t["steps"].__setitem__(1, {**t["steps"][1], "logprobs": [0.3]}),
            "steps[1].logprobs",
        ),
        (lambda t: t["steps"][1].__setitem__("score", 1), "steps[1].score"),
        (lambda t: t["steps"].__setitem__(2, {"role": "oracle"}), "steps[2]"),
        (lambda t: t.__setitem__("steps", "[1,"), "steps: "),
        (lambda t: t.__setitem__("reward", "high"), "reward"),
    ],
)
def test_bad_steps_are_named(encoder, change, error) -> None:
    trajectory = _trajectory(encoder)
    change(trajectory)
    (row,) = data.trajectory_rows(encoder, [trajectory])
    assert error in row["error"] and len(row["input_ids"]) == 0


def test_a_bug_met_on_one_trajectory_leaves_the_others_their_rows(encoder, monkeypatch) -> None:
    # A library bug (not a bad input) met on the second of three trajectories: it is answered in
    # its place, named as unexpected, and the first and third still get their rows.
    original = qe.ChatSession.append_sampled

    def buggy(self, ids, *args, **kwargs):
        if any(turn.content == "Find y." for turn in self.turns):
            raise ZeroDivisionError("planted")
        return original(self, ids, *args, **kwargs)

    monkeypatch.setattr(qe.ChatSession, "append_sampled", buggy)
    good = _trajectory(encoder)
    bad = _trajectory(encoder)
    bad["steps"][0] = {"role": "user", "content": "Find y."}
    rows = data.trajectory_rows(encoder, [good, bad, good])
    assert [row["error"] is None for row in rows] == [True, False, True]
    assert rows[1]["error"].startswith("ZeroDivisionError: planted (unexpected ZeroDivisionError")
    assert len(rows[0]["input_ids"]) == len(rows[2]["input_ids"]) > 0


def test_template_change_in_rows(encoder) -> None:
    trajectory = _trajectory(encoder)
    trajectory["chat_template_kwargs"] = {"preserve_thinking": False}
    trajectory["steps"].append({"role": "user", "content": "And y?"})
    (refused,) = data.trajectory_rows(encoder, [trajectory])
    assert refused["error"].startswith("TemplateDivergence: steps[1]")
    split = data.trajectory_rows(encoder, [trajectory], on_template_change="split")
    assert [r["row"] for r in split] == [0, 1] and split[0]["sampled_mask"].sum() > 0
    assert split[1]["sampled_mask"].sum() == 0


# --------------------------------------------------------------------------------------------
# SFT at the inference boundary (opt-in)

SFT = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},  # no reasoning: the primer trap
    {"role": "user", "content": "Weather?"},
    {
        "role": "assistant",
        "reasoning_content": "Use the tool.",
        "tool_calls": [{"function": {"name": "lookup", "arguments": {"q": "Paris"}}}],
    },
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "Sunny."},
]


def test_inference_boundary_rows_extend_every_generation_prompt(encoder, oracle) -> None:
    row = data.inference_boundary_encoding(encoder, SFT, TOOLS)
    ids = row.input_ids.tolist()
    primer_ids = None
    starts = [i for i, m in enumerate(SFT) if m["role"] == "assistant"]
    for i in starts:
        # What the engine is sent at inference, from the oracle itself.
        prompt = oracle.apply_chat_template(
            SFT[:i], tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        prompt = list(prompt["input_ids"] if isinstance(prompt, dict) else prompt)
        text = oracle.decode(prompt)
        primer_ids = prompt[-5:]
        # Where this turn's primer ends in the row: the row's text up to there is the prompt's.
        end = next(k for k in range(len(ids) + 1) if encoder.decode(ids[:k]) == text)
        assert ids[end - 5 : end] == primer_ids
        if i == starts[0]:
            assert ids[: len(prompt)] == prompt  # nothing sampled before: the very same IDs
        # The primer is not trained; what follows it is.
        assert not row.assistant_mask[end - 5 : end].any() and row.assistant_mask[end]
    # Later prompts hold the earlier turns as they were emitted (a session's rollout sends
    # exactly these); a server that re-renders history with the template sends other IDs there.
    default = encoder.encode_messages(SFT, tools=TOOLS, add_generation_prompt=False)
    assert default.input_ids.tolist() != ids  # the default differs: why this is opt-in
    assert encoder.decode(ids) == encoder.decode(default.input_ids)  # the same text
    assert not row.sampled_mask.any() and (row.provenance != pv.SAMPLED).all()
    trained = encoder.decode(row.input_ids[row.assistant_mask])
    assert trained.startswith("\n</think>\n\nHello!<|im_end|>")
