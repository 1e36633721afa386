"""Recipe: qwen-encode on both sides of a vLLM server, through ``/v1/completions``.

The prompt is rendered and encoded here (``prompt`` is sent as a list of token IDs, so the
server's own chat template and tokenizer never touch it), and the completion comes back as token
IDs (``return_token_ids``) that ``StreamParser`` reads, markers only at their atomic IDs. No
server-side plugin is needed. A request is a chat request as ``qwen-encode encode`` reads one
(``messages``, ``tools``, ``chat_template_kwargs``, ``reasoning_effort``, ...) and is mapped the
same way.

    python examples/vllm_completions.py --model ../shared/checkpoints/qwen3.8-27b \\
        --url http://127.0.0.1:8000 --served-model qwen3.8 request.json [--stream]
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import qwen_encode as qe
from qwen_encode import markers as mk

# The request mapping `qwen-encode encode` and the vLLM renderer use, so the recipe cannot drift
# from them.
from qwen_encode.chat_request import request_options


def prompt_ids(encoder: qe.Encoder, request: Mapping[str, Any]) -> tuple[list[int], bool]:
    """The request's prompt IDs, and whether its primer left ``<think>`` open."""
    prompt = qe.format_prompt(**request_options(dict(request)))
    ids = encoder.encode(prompt).input_ids.tolist()
    opened, closed = encoder.marker_ids[mk.THINK_OPEN], encoder.marker_ids[mk.THINK_CLOSE]
    last = next((i for i in reversed(ids) if i in (opened, closed)), None)
    return ids, last == opened


def _body(request: Mapping[str, Any], ids: list[int], model: str, stream: bool) -> bytes:
    body = {
        "model": model,
        "prompt": ids,
        "max_tokens": request.get("max_tokens", 1024),
        "return_token_ids": True,
        "skip_special_tokens": False,
        "stream": stream,
    }
    for key in ("temperature", "top_p", "seed"):
        if key in request:
            body[key] = request[key]
    return json.dumps(body).encode()


def _post(url: str, body: bytes, timeout: float) -> Any:
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    return urllib.request.urlopen(request, timeout=timeout)


def complete(
    encoder: qe.Encoder,
    request: Mapping[str, Any],
    *,
    url: str,
    model: str,
    timeout: float = 600.0,
) -> qe.Completion:
    """One non-streaming completion, parsed."""
    ids, thinking = prompt_ids(encoder, request)
    with _post(url, _body(request, ids, model, stream=False), timeout) as response:
        answer = json.load(response)
    # vLLM's token_ids end with the stop token that ended generation: the parser reads it as
    # the turn's end (Completion.stop), never as content.
    output = list(answer["choices"][0]["token_ids"])
    return qe.parse_completion(
        output, tools=request.get("tools"), thinking=thinking, encoder=encoder
    )


def stream(
    encoder: qe.Encoder,
    request: Mapping[str, Any],
    *,
    url: str,
    model: str,
    timeout: float = 600.0,
) -> Iterator[qe.StreamEvent]:
    """Streaming: the parser's events as the server's chunks arrive (server-sent events)."""
    ids, thinking = prompt_ids(encoder, request)
    # A stop token at the end is held back by the parser until the output ends: it ends the
    # turn (Completion.stop) and is never content.
    parser = qe.StreamParser(tools=request.get("tools"), thinking=thinking, encoder=encoder)
    with _post(url, _body(request, ids, model, stream=True), timeout) as response:
        for line in response:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[len(b"data:") :].strip()
            if data == b"[DONE]":
                break
            yield from parser.feed(list(json.loads(data)["choices"][0].get("token_ids") or []))
    yield from parser.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("request", help="a JSON file holding one chat request")
    parser.add_argument("--model", required=True, help="the checkpoint folder (tokenizer)")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--served-model", default="qwen3.8")
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args(argv)
    with open(args.request, encoding="utf-8") as f:
        request = json.load(f)
    encoder = qe.Encoder.from_pretrained(args.model)
    if args.stream:
        for event in stream(encoder, request, url=args.url, model=args.served_model):
            print(repr(event), flush=True)
        return 0
    completion = complete(encoder, request, url=args.url, model=args.served_model)
    print(json.dumps(completion.to_message(), ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
