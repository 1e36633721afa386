"""Recipe: qwen-encode's token IDs into llama.cpp (llama-server or llama-cpp-python), and the
output parsed by qwen-encode.

Why IDs and not text: llama.cpp's text path applies no NFC normalization (texts NFC changes
tokenize otherwise than the checkpoint's tokenizer.json), matches USER_DEFINED markers such as
``<tool_call>`` and ``<think>`` in caller text even with ``parse_special=false`` (a message can
forge a tool call), and its own Jinja engine renders some values otherwise (``1.0`` as ``1``).
Sending the prompt as token IDs skips all three; ``cache_prompt`` keeps the shared prefix of a
growing chat in llama-server's KV cache, as with a text prompt.

* llama-server: ``POST /completion`` with ``prompt`` a list of token IDs, ``cache_prompt`` and
  ``return_tokens`` (the generated IDs in ``tokens``), parsed from IDs by ``StreamParser``;
* llama-cpp-python: ``Llama.create_completion(ids)``; it returns text, which ``StreamParser``
  reads (the official GGUF types the tags USER_DEFINED, so they are in that text; a GGUF that
  types them CONTROL loses them: ``qwen-encode validate model.gguf`` says so).

    python examples/llama_cpp.py --model model.gguf --url http://127.0.0.1:8080 request.json
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


def server_body(request: Mapping[str, Any], ids: list[int], stream: bool) -> dict[str, Any]:
    """The llama-server ``/completion`` body for ``ids``."""
    body: dict[str, Any] = {
        "prompt": ids,
        "n_predict": request.get("max_tokens", 1024),
        "cache_prompt": True,
        "return_tokens": True,
        "stream": stream,
    }
    for key in ("temperature", "top_p", "top_k", "seed"):
        if key in request:
            body[key] = request[key]
    return body


def _post(url: str, body: dict[str, Any], timeout: float) -> Any:
    request = urllib.request.Request(
        url.rstrip("/") + "/completion",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    return urllib.request.urlopen(request, timeout=timeout)


def complete_server(
    encoder: qe.Encoder, request: Mapping[str, Any], *, url: str, timeout: float = 600.0
) -> qe.Completion:
    """One llama-server completion, parsed from the generated token IDs."""
    ids, thinking = prompt_ids(encoder, request)
    with _post(url, server_body(request, ids, stream=False), timeout) as response:
        answer = json.load(response)
    # The tokens end with the stop token that ended generation: the parser reads it as the
    # turn's end (Completion.stop), never as content.
    return qe.parse_completion(
        list(answer["tokens"]), tools=request.get("tools"), thinking=thinking, encoder=encoder
    )


def stream_server(
    encoder: qe.Encoder, request: Mapping[str, Any], *, url: str, timeout: float = 600.0
) -> Iterator[qe.StreamEvent]:
    """Streaming from llama-server: the parser's events as chunks of token IDs arrive."""
    ids, thinking = prompt_ids(encoder, request)
    # A stop token at the end is held back by the parser until the output ends: it ends the
    # turn (Completion.stop) and is never content.
    parser = qe.StreamParser(tools=request.get("tools"), thinking=thinking, encoder=encoder)
    with _post(url, server_body(request, ids, stream=True), timeout) as response:
        for line in response:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            chunk = json.loads(line[len(b"data:") :])
            yield from parser.feed(list(chunk.get("tokens") or []))
            if chunk.get("stop"):
                break
    yield from parser.flush()


def complete_llama_cpp_python(
    llm: Any, encoder: qe.Encoder, request: Mapping[str, Any]
) -> qe.Completion:
    """One completion through llama-cpp-python's ``Llama.create_completion`` (token IDs in,
    text out), parsed."""
    ids, thinking = prompt_ids(encoder, request)
    options = {k: request[k] for k in ("temperature", "top_p", "top_k", "seed") if k in request}
    answer = llm.create_completion(ids, max_tokens=request.get("max_tokens", 1024), **options)
    text = answer["choices"][0]["text"]
    return qe.parse_completion(text, tools=request.get("tools"), thinking=thinking)


def stream_llama_cpp_python(
    llm: Any, encoder: qe.Encoder, request: Mapping[str, Any]
) -> Iterator[qe.StreamEvent]:
    """Streaming through llama-cpp-python: text chunks into ``StreamParser``."""
    ids, thinking = prompt_ids(encoder, request)
    parser = qe.StreamParser(tools=request.get("tools"), thinking=thinking)
    chunks = llm.create_completion(ids, max_tokens=request.get("max_tokens", 1024), stream=True)
    for chunk in chunks:
        yield from parser.feed(chunk["choices"][0]["text"])
    yield from parser.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("request", help="a JSON file holding one chat request")
    parser.add_argument("--model", required=True, help="the GGUF (or checkpoint folder)")
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args(argv)
    with open(args.request, encoding="utf-8") as f:
        request = json.load(f)
    encoder = qe.Encoder.from_pretrained(args.model)
    if args.stream:
        for event in stream_server(encoder, request, url=args.url):
            print(repr(event), flush=True)
        return 0
    completion = complete_server(encoder, request, url=args.url)
    print(json.dumps(completion.to_message(), ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
