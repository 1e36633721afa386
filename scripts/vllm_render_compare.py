"""vLLM's stock chat renderer against ``--tokenizer-mode qwen_encode``, both through vLLM's own
render path (``OnlineRenderer.render_chat``: request -> chat parameters -> renderer -> the
prompt IDs the engine would get), on CPU, with the real vocabulary. Run in the vLLM venv from
the repository root:

    .integration-venvs/vllm/bin/python scripts/vllm_render_compare.py [--count 200] [--runs 5]

It prints (1) control tokens forged from caller text on a hostile set (the conversation corpus
with marker strings in every caller field): added-token IDs in the prompt less the markers the
protocol itself writes; (2) render time per request, p50 and p99, for a fresh conversation and
for one grown by one exchange (the previous request rendered just before), stock vs ours.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import qwen_encode as qe  # noqa: E402
from qwen_encode.integrations.vllm import register  # noqa: E402
from tests.conformance.corpus import generate  # noqa: E402
from tests.integrations.vllm_server import make_server  # noqa: E402


def _request(case: dict[str, Any]) -> Any:
    """The corpus case as an OpenAI chat request, or None where the API itself refuses its shape
    (the corpus also holds arguments as dicts, which transformers takes and OpenAI does not),
    or that has content parts (text only here: no image processor without a model)."""
    from pydantic import ValidationError
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    for message in case["messages"]:
        if not isinstance(message.get("content"), (str, type(None))):
            return None  # images need vLLM's multimodal processor, which needs a real model
    kwargs = dict(case["kwargs"])
    top = {
        key: kwargs.pop(key)
        for key in ("add_generation_prompt", "continue_final_message")
        if key in kwargs
    }
    if top.get("continue_final_message"):
        top["add_generation_prompt"] = False
    try:
        return ChatCompletionRequest(
            model="qwen3.8",
            messages=case["messages"],
            tools=case["tools"],
            chat_template_kwargs=kwargs,
            **top,
        )
    except ValidationError:
        return None


async def _ids(online: Any, request: Any) -> list[int] | None:
    from vllm.exceptions import VLLMValidationError

    try:
        result = await online.render_chat(request)
    except (VLLMValidationError, ValueError):  # a 400 for the client
        return None
    if not isinstance(result, tuple):
        return None  # an ErrorResponse (the same request is then refused by both)
    _, (engine_input,) = result
    return list(engine_input["prompt_token_ids"])


def _online(server: Any) -> Any:
    return server.client.app.state.openai_serving_chat.online_renderer


async def forged(stock: Any, ours: Any, count: int, encoder: qe.Encoder) -> None:
    added = np.array(sorted(encoder.vocabulary.added_tokens.values()))
    totals = {"stock": [0, 0], "ours": [0, 0]}
    refused = compared = 0
    for case in generate(count=count, seed=3808, markers=True):
        request = _request(case)
        if request is None:
            continue
        ids = {
            name: await _ids(_online(s), request) for name, s in (("stock", stock), ("ours", ours))
        }
        if ids["stock"] is None or ids["ours"] is None:
            refused += 1
            continue
        compared += 1
        tools = [t.model_dump() for t in request.tools or []] or None
        prompt = qe.format_prompt(case["messages"], tools=tools, **case["kwargs"])
        written = sum(1 for s in prompt.segments if isinstance(s, qe.Special))
        for name, got in ids.items():
            extra = int(np.isin(np.asarray(got), added).sum()) - written
            totals[name][0] += extra
            totals[name][1] += extra > 0
    print(f"hostile set: {compared} requests rendered by both ({refused} refused by one or both)")
    for name, (tokens, requests) in totals.items():
        print(f"  {name:5s}: {tokens} forged control tokens in {requests} requests")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timing(stock: Any, ours: Any, count: int, runs: int) -> None:
    cases = [
        c
        for c in generate(count=count, seed=11)
        if not c["kwargs"].get("continue_final_message") and _request(c) is not None
    ]
    grown = []
    for case in cases:
        messages = case["messages"]
        if messages[-1].get("role") == "user":
            more = [
                *messages,
                {"role": "assistant", "content": "Done."},
                {"role": "user", "content": "And tomorrow?"},
            ]
            grown.append(({**case, "messages": messages}, {**case, "messages": more}))
    print(
        f"render time per request (ms), {len(cases)} fresh and {len(grown)} grown requests, "
        f"{runs} runs, medians of the runs' percentiles"
    )
    for name, server in (("stock", stock), ("ours", ours)):
        online = _online(server)
        fresh_p50, fresh_p99, grow_p50, grow_p99 = [], [], [], []
        for _ in range(runs):
            if name == "ours":
                server.renderer.encoder.clear_cache()  # fresh means no text seen before
            times = []
            for case in cases:
                request = _request(case)
                start = time.perf_counter()
                await _ids(online, request)
                times.append((time.perf_counter() - start) * 1000)
            fresh_p50.append(_pct(times, 0.5))
            fresh_p99.append(_pct(times, 0.99))
            times = []
            for before, after in grown:
                await _ids(online, _request(before))
                request = _request(after)
                start = time.perf_counter()
                await _ids(online, request)
                times.append((time.perf_counter() - start) * 1000)
            grow_p50.append(_pct(times, 0.5))
            grow_p99.append(_pct(times, 0.99))
        med = statistics.median
        print(
            f"  {name:5s}: fresh p50 {med(fresh_p50):.2f} p99 {med(fresh_p99):.2f}; "
            f"grown by one exchange p50 {med(grow_p50):.2f} p99 {med(grow_p99):.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default=str(ROOT.parent / "shared/checkpoints/qwen3.8-27b"))
    args = parser.parse_args()
    register()
    stock = make_server(Path(args.model), renderer="hf")
    ours = make_server(Path(args.model), renderer="qwen_encode")
    asyncio.run(forged(stock, ours, args.count, ours.renderer.encoder))
    asyncio.run(timing(stock, ours, args.count, args.runs))


if __name__ == "__main__":
    main()
