"""Recipe: a multi-turn RL rollout against a vLLM server, by token IDs end to end.

Each prompt is the session's ``encoding()`` sent as token IDs to ``/v1/completions`` (the
server's chat template and tokenizer never touch it); the sampled token IDs and their
log-probabilities come back (``return_token_ids``, ``logprobs=0``) and go into the session with
``append_sampled``, verbatim. The parse (``SampledTurn.completion``) drives the environment; the
next prompt is the previous prompt plus the sampled IDs plus the tool results. At the end,
``session.trajectory()`` is the row to score and train: ``sampled_mask`` marks exactly the
sampled tokens, ``logprobs`` holds the engine's log-probabilities there.

    python examples/rollout_loop.py --model ../shared/checkpoints/qwen3.8-27b \\
        --url http://127.0.0.1:8000 --served-model qwen3.8
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import qwen_encode as qe


def sample(url: str, model: str, prompt: list[int], max_tokens: int, timeout: float) -> dict:
    """One completion of ``prompt`` (token IDs): the sampled IDs, their logprobs, and why it
    stopped."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "return_token_ids": True,  # the sampled IDs themselves, not text to re-tokenize
        "skip_special_tokens": False,
        "logprobs": 0,  # the sampled token's own log-probability
        "temperature": 1.0,
    }
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        choice = json.load(response)["choices"][0]
    logprobs = choice.get("logprobs") or {}
    return {
        "ids": choice["token_ids"],
        "logprobs": logprobs.get("token_logprobs"),
        "finish_reason": choice.get("finish_reason"),
    }


def rollout(
    encoder: qe.Encoder,
    messages: Sequence[dict[str, Any]],
    tools: list[dict[str, Any]],
    run_tool: Callable[[qe.ToolCall], str],
    *,
    url: str,
    model: str,
    max_turns: int = 8,
    max_tokens: int = 1024,
    timeout: float = 600.0,
) -> qe.ChatSession:
    """Sample, act, repeat until the model answers without a call (or is cut off)."""
    session = encoder.chat(tools)
    session.extend(messages)
    for _ in range(max_turns):
        prompt = session.encoding().input_ids.tolist()
        out = sample(url, model, prompt, max_tokens, timeout)
        turn = session.append_sampled(
            out["ids"], logprobs=out["logprobs"], finish_reason=out["finish_reason"]
        )
        calls = turn.completion.tool_calls if turn.completion is not None else ()
        if turn.truncated or not calls:
            break
        for call in calls:
            session.append({"role": "tool", "content": run_tool(call)})
    return session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="checkpoint folder or hub id")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--served-model", required=True)
    args = parser.parse_args()
    encoder = qe.Encoder.from_pretrained(args.model)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    session = rollout(
        encoder,
        [{"role": "user", "content": "What is the weather in Paris?"}],
        tools,
        lambda call: json.dumps({"city": call.arguments.get("city"), "sky": "sunny"}),
        url=args.url,
        model=args.served_model,
    )
    row = session.trajectory()
    print(json.dumps({"tokens": len(row), "sampled": int(row.sampled_mask.sum())}))


if __name__ == "__main__":
    main()
