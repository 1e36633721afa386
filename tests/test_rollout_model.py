"""A real model as sampler and scorer: a tiny random Qwen3 (torch CPU, ~8M parameters, built from
a config here, no download) on the real 248k-token Qwen 3.8 vocabulary runs a 3-turn tool-using
rollout through a ``ChatSession`` by token IDs, then scores the assembled row in one forward
pass. The scorer's log-probabilities at ``sampled_mask`` equal the ones the sampler reported
to 1e-5: the row holds exactly the sampled tokens, each after exactly the context it was sampled
in (a mask off by one token is off by about ln(248k) = 12).

A random model writes no tool calls of its own, so each turn is sampled as an engine with a
grammar would: free tokens (ordinary text only) for the reasoning, then the call's tokens forced;
every token's reported log-probability is the model's, unprocessed (vLLM's default). torch and
transformers are heavy: this runs in ``scripts/integration_env.sh train`` and skips elsewhere.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

import qwen_encode as qe

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/integration_env.sh)")
transformers = pytest.importorskip("transformers")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def encoder(qwen38_dir: Path) -> qe.Encoder:
    return qe.Encoder.from_pretrained(qwen38_dir, engine="tokenizers")


@pytest.fixture(scope="module")
def model(encoder: qe.Encoder):
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=encoder.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        # Peaked distributions, as a trained model's are (the default 0.02 gives a nearly
        # uniform one, where every token scores about -ln(248k) and a shifted mask would pass).
        initializer_range=0.5,
    )
    model = transformers.Qwen3ForCausalLM(config).eval()
    model.config._attn_implementation = "eager"
    assert 7e6 < sum(p.numel() for p in model.parameters()) < 9e6
    return model


def _logprobs(model, ids: list[int], rows: list[int]) -> torch.Tensor:
    """Log-probabilities of the next token after each position in ``rows`` (the full logits of
    a 500-token row over 248k tokens would be 500 MB)."""
    with torch.no_grad():
        hidden = model.model(torch.tensor([ids])).last_hidden_state[0]
        logits = model.lm_head(hidden[torch.tensor(rows)]).float()
    return torch.log_softmax(logits, dim=-1)


def _sample(model, encoder, prompt: list[int], forced: list[int], free: int, rng) -> tuple:
    """``free`` tokens sampled (added tokens excluded), then ``forced`` ones; each with the
    model's log-probability at its position, as an engine reports them."""
    added = torch.tensor(sorted(encoder.vocabulary.added_tokens.values()))
    ids, logprobs = [], []
    for step in range(free + len(forced)):
        context = prompt + ids
        distribution = _logprobs(model, context, [len(context) - 1])[0]
        if step < free:
            weights = distribution.exp().clone()
            weights[added] = 0
            token = int(torch.multinomial(weights, 1, generator=rng))
        else:
            token = forced[step - free]
        ids.append(token)
        logprobs.append(float(distribution[token]))
    return ids, logprobs


def test_scorer_logprobs_equal_sampler_logprobs(model, encoder) -> None:
    tokenizer = encoder.vocabulary.tokenizer

    def text(value: str) -> list[int]:
        return tokenizer.encode(value, add_special_tokens=False).ids

    rng = torch.Generator().manual_seed(1)
    session = encoder.chat(TOOLS)
    session.append({"role": "user", "content": "Weather in Paris and Rome?"})
    call = (
        "\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n{city}\n"
        "</parameter>\n</function>\n</tool_call><|im_end|>"
    )
    turns = [
        (text(call.format(city="Paris")), 6, None),
        (text(call.format(city="Rome")), 4, None),
        ([], 9, "length"),  # the third turn is cut off: closed by the session, not trained
    ]
    reported = []
    for index, (forced, free, finish) in enumerate(turns):
        prompt = session.encoding().input_ids.tolist()
        ids, logprobs = _sample(model, encoder, prompt, forced, free, rng)
        turn = session.append_sampled(ids, logprobs=logprobs, finish_reason=finish)
        reported += logprobs
        if index < 2:
            assert turn.completion is not None and turn.completion.tool_calls
            session.append({"role": "tool", "content": f"sunny, {20 + index} C"})
        else:
            assert turn.truncated
    row = session.trajectory()
    mask = row.sampled_mask
    assert int(mask.sum()) == len(reported)
    positions = np.flatnonzero(mask)
    tokens = torch.tensor(row.input_ids[positions].tolist())
    picked = torch.arange(len(positions))
    # The logits at position p - 1 predict token p.
    scored = _logprobs(model, row.input_ids.tolist(), (positions - 1).tolist())[picked, tokens]
    assert np.abs(scored.numpy() - row.logprobs[mask]).max() < 1e-5
    assert np.array_equal(row.logprobs[mask], np.asarray(reported, dtype=np.float32))
    # A mask shifted by one token is far off: the check can fail.
    shifted = _logprobs(model, row.input_ids.tolist(), (positions - 2).tolist())[picked, tokens]
    assert np.abs(shifted.numpy() - row.logprobs[mask]).mean() > 1.0  # measured: 4.2


# --------------------------------------------------------------------------------------------
# TRL's GRPOTrainer on the rows, through its rollout_func


def _rollout(model, encoder, rng) -> list[dict]:
    """A 2-turn tool-using rollout, recorded as the steps of a trajectory."""
    tokenizer = encoder.vocabulary.tokenizer
    call = (
        "\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
        "</parameter>\n</function>\n</tool_call><|im_end|>"
    )
    steps: list[dict] = [{"role": "user", "content": "Weather in Paris?"}]
    session = encoder.chat(TOOLS)
    session.append(steps[0])
    forced = tokenizer.encode(call, add_special_tokens=False).ids
    for free, tail in ((3, forced), (5, [encoder.marker_ids["<|im_end|>"]])):
        prompt = session.encoding().input_ids.tolist()
        ids, logprobs = _sample(model, encoder, prompt, tail, free, rng)
        turn = session.append_sampled(ids, logprobs=logprobs)
        steps.append({"role": "assistant", "sampled_ids": ids, "logprobs": logprobs})
        if turn.completion is not None and turn.completion.tool_calls:
            steps.append({"role": "tool", "content": "sunny, 21 C"})
            session.append(steps[-1])
    return steps


def test_grpo_trainer_reads_the_rows(model, encoder, qwen38_dir, tmp_path) -> None:
    """TRL's own forward pass over ``prompt_ids + completion_ids`` gives, on its loss mask
    (``completion_mask * env_mask``), the log-probabilities the sampler reported: TRL trains
    exactly the sampled tokens, each in the context it was sampled in."""
    trl = pytest.importorskip("trl", reason="TRL is not installed (scripts/integration_env.sh)")
    datasets = pytest.importorskip("datasets")
    from qwen_encode import data

    rng = torch.Generator().manual_seed(3)
    sampler = model
    seen: dict[str, list] = {"inputs": [], "logps": []}

    def rollout_func(prompts, trainer):
        trajectories = [{"tools": TOOLS, "steps": _rollout(sampler, encoder, rng)} for _ in prompts]
        return data.trl_rollout_output(data.trajectory_rows(encoder, trajectories))

    class Recording(trl.GRPOTrainer):
        def _compute_loss(self, model, inputs):
            seen["inputs"].append(inputs)
            return super()._compute_loss(model, inputs)

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            seen["logps"].append(out[0].detach())
            return out

    config = trl.GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        num_generations=2,
        max_steps=1,
        max_completion_length=2048,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        beta=0.0,
        bf16=False,  # TRL's default casts to bf16: the sampler ran in float32
    )
    trainer = Recording(
        model=copy.deepcopy(model),  # training changes the weights; the sampler keeps its own
        reward_funcs=lambda completions, **kw: [1.0, 0.0][: len(completions)],
        args=config,
        train_dataset=datasets.Dataset.from_dict(
            {"prompt": [[{"role": "user", "content": "Weather in Paris?"}]] * 2}
        ),
        processing_class=transformers.AutoTokenizer.from_pretrained(str(qwen38_dir)),
        rollout_func=rollout_func,
    )
    trainer.train()
    inputs = seen["inputs"][-1]
    mask = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
    sampled = inputs["sampling_per_token_logps"][mask]
    trl_logps = seen["logps"][-1][mask]
    assert mask.sum() > 0 and (~mask & inputs["completion_mask"].bool()).sum() > 0  # tools out
    # TRL scores both rows in one left-padded float32 batch, which reorders sums: measured
    # 1.05e-5 at most (a token out of place is ~4 off; TRL's default bf16 was 0.08 off).
    error = (trl_logps.float() - sampled.float()).abs().max().item()
    print(f"TRL vs sampler, max |logp difference| on the loss mask: {error:.2e}")
    assert error < 1e-4
