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
