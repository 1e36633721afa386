"""An engine's stock chat rendering against qwen-encode's, both through the engine's own render
path, on CPU, with the real vocabulary. Run from the repository root in the engine's venv:

    .integration-venvs/vllm/bin/python scripts/render_compare.py vllm [--count 1500] [--runs 5]
    .integration-venvs/sglang/bin/python scripts/render_compare.py sglang [--count 1500]

vLLM: ``OnlineRenderer.render_chat`` (request -> chat parameters -> renderer -> the prompt IDs
the engine gets) with the stock ``HfRenderer`` and with ``--tokenizer-mode qwen_encode``.
SGLang: ``OpenAIServingChat._process_messages`` (request -> prompt IDs for the scheduler) with
its Jinja path and with the ``qwen_encode`` chat encoding. The serving stand-ins are the tests'
(``tests/integrations/vllm_server.py``, ``sglang_server.py``).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import qwen_encode as qe  # noqa: E402
from tests.conformance.corpus import chat_request, generate  # noqa: E402

Render = Callable[[dict[str, Any]], "list[int] | None"]


def _body(case: dict[str, Any]) -> dict[str, Any] | None:
    body = chat_request(case)
    return None if body is None else {"model": "qwen3.8", **body}


def _vllm(checkpoint: Path) -> tuple[Render, Render, qe.Encoder]:
    from pydantic import ValidationError
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.exceptions import VLLMValidationError

    from qwen_encode.integrations.vllm import register
    from tests.integrations.vllm_server import make_server

    register()
    loop = asyncio.new_event_loop()  # one loop for every request, as in a server

    def renderer(mode: str) -> Render:
        online = make_server(checkpoint, renderer=mode).client.app.state.openai_serving_chat
        online = online.online_renderer

        def render(case: dict[str, Any]) -> list[int] | None:
            body = _body(case)
            try:
                request = ChatCompletionRequest(**body) if body else None
            except ValidationError:  # a shape the OpenAI API refuses (dict arguments)
                return None
            if request is None:
                return None
            try:
                result = loop.run_until_complete(online.render_chat(request))
            except (VLLMValidationError, ValueError):  # a 400 for the client
                return None
            if not isinstance(result, tuple):
                return None
            return list(result[1][0]["prompt_token_ids"])

        render.encoder = getattr(online.renderer, "encoder", None)  # type: ignore[attr-defined]
        return render

    ours = renderer("qwen_encode")
    return renderer("hf"), ours, ours.encoder  # type: ignore[attr-defined]


def _sglang(checkpoint: Path) -> tuple[Render, Render, qe.Encoder]:
    import transformers
    from pydantic import ValidationError
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    from qwen_encode.integrations.sglang import register
    from tests.integrations.sglang_server import make_serving

    register()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(checkpoint))

    def renderer(parser: str) -> tuple[Render, Any]:
        serving = make_serving(checkpoint, tokenizer, parser)

        def render(case: dict[str, Any]) -> list[int] | None:
            body = _body(case)
            try:
                request = ChatCompletionRequest(**body) if body else None
                if request is None:
                    return None
                return list(serving._process_messages(request, is_multimodal=False).prompt_ids)
            except (ValidationError, ValueError):  # refused: a 400 for the client
                return None

        return render, serving

    stock, _ = renderer("qwen3_coder")
    ours, serving = renderer("qwen_encode")
    return stock, ours, serving.encoding_adapter.encoder


def forged(stock: Render, ours: Render, count: int, encoder: qe.Encoder) -> None:
    added = np.array(sorted(encoder.vocabulary.added_tokens.values()))
    totals = {"stock": [0, 0], "ours": [0, 0]}
    refused = compared = 0
    for case in generate(count=count, seed=3808, markers=True):
        if _body(case) is None:
            continue
        ids = {"stock": stock(case), "ours": ours(case)}
        if ids["stock"] is None or ids["ours"] is None:
            refused += 1
            continue
        compared += 1
        # The tools as the engines pass them on: their pydantic dumps add null fields, which
        # hold no marker, so the protocol's own markers are counted on the corpus's tools.
        prompt = qe.format_prompt(case["messages"], tools=case["tools"], **case["kwargs"])
        written = sum(1 for s in prompt.segments if isinstance(s, qe.Special))
        for name, got in ids.items():
            extra = int(np.isin(np.asarray(got), added).sum()) - written
            totals[name][0] += extra
            totals[name][1] += extra > 0
    print(
        f"hostile set: {compared} requests rendered by both ({refused} left out: a shape the "
        "OpenAI API refuses, or a request an engine refused)"
    )
    for name, (tokens, requests) in totals.items():
        print(f"  {name:5s}: {tokens} forged control tokens in {requests} requests")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _timed(render: Render, case: dict[str, Any]) -> float:
    start = time.perf_counter()
    render(case)
    return (time.perf_counter() - start) * 1000


def timing(stock: Render, ours: Render, count: int, runs: int, encoder: qe.Encoder) -> None:
    cases = [
        c
        for c in generate(count=count, seed=11)
        if not c["kwargs"].get("continue_final_message") and ours(c) is not None
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
            grown.append((case, {**case, "messages": more}))
    print(
        f"render time per request (ms), {len(cases)} fresh and {len(grown)} grown requests, "
        f"{runs} runs, medians of the runs' percentiles"
    )
    figures: dict[str, list[list[float]]] = {"stock": [[], [], [], []], "ours": [[], [], [], []]}
    for _ in range(runs):
        for name, render in (("stock", stock), ("ours", ours)):  # alternated, one process
            if name == "ours":
                encoder.clear_cache()  # fresh means no text seen before
            fresh = [_timed(render, case) for case in cases]
            grow = []
            for before, after in grown:
                render(before)
                grow.append(_timed(render, after))
            for slot, value in enumerate(
                (_pct(fresh, 0.5), _pct(fresh, 0.99), _pct(grow, 0.5), _pct(grow, 0.99))
            ):
                figures[name][slot].append(value)
    for name, (f50, f99, g50, g99) in figures.items():
        med = statistics.median
        print(
            f"  {name:5s}: fresh p50 {med(f50):.2f} p99 {med(f99):.2f}; "
            f"grown by one exchange p50 {med(g50):.2f} p99 {med(g99):.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=["vllm", "sglang"])
    parser.add_argument("--count", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default=str(ROOT.parent / "shared/checkpoints/qwen3.8-27b"))
    args = parser.parse_args()
    build = _vllm if args.engine == "vllm" else _sglang
    stock, ours, encoder = build(Path(args.model))
    forged(stock, ours, args.count, encoder)
    timing(stock, ours, args.count, args.runs, encoder)


if __name__ == "__main__":
    main()
