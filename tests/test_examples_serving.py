"""examples/vllm_completions.py against a fake vLLM ``/v1/completions`` server on loopback
(stdlib http.server; no network, no engine): the prompt it sends is the ``qwen-encode encode``
reading of the request, and the token IDs it gets back parse as ``parse_completion`` reads
them, streaming or not."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import qwen_encode as qe
from qwen_encode.cli import main as cli_main

from .conftest import load_example

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures" / "qwen3.8-tiny"

recipe = load_example("vllm_completions")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]
OUTPUT = (
    "The user wants weather.\n</think>\n\nChecking.\n\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
    "</tool_call>"
)


@pytest.fixture(scope="module")
def encoder() -> qe.Encoder:
    return qe.Encoder.from_pretrained(TINY)


def _tokenizer() -> Any:
    """The fixture's own tokenizer, standing in for the model: markers written in its output
    text come out as their atomic IDs, as a model writes them."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TINY / "tokenizer.json"))


class Fake:
    """What the fake server saw and answers."""

    def __init__(self, output_ids: list[int]) -> None:
        self.output_ids = output_ids
        self.bodies: list[dict[str, Any]] = []


@pytest.fixture
def server(encoder: qe.Encoder) -> Iterator[tuple[str, Fake]]:
    stop = encoder.marker_ids["<|im_end|>"]
    output = [*_tokenizer().encode(OUTPUT, add_special_tokens=False).ids, stop]
    fake = Fake(output)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            assert self.path == "/v1/completions"
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.bodies.append(body)
            if not body["stream"]:
                payload = json.dumps({"choices": [{"token_ids": fake.output_ids, "text": ""}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(payload.encode())
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            ids = fake.output_ids
            for at in range(0, len(ids), 3):  # three tokens per chunk, the stop token last
                chunk = {"choices": [{"token_ids": ids[at : at + 3], "text": ""}]}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", fake
    finally:
        httpd.shutdown()
        httpd.server_close()


def _encode_cli_ids(tmp_path: Path, request: dict[str, Any]) -> list[int]:
    """What `qwen-encode encode` gives for the same request."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps(request) + "\n", encoding="utf-8")
    assert cli_main(["encode", "--model", str(TINY), str(source), "-o", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8").splitlines()[0])["input_ids"]


REQUESTS = [
    {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
    {
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": TOOLS,
        "chat_template_kwargs": {"enable_thinking": False},
    },
    {"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "low"},
]


@pytest.mark.parametrize("request_", REQUESTS, ids=["thinking", "no thinking", "effort"])
def test_prompt_is_the_encode_commands(
    server: tuple[str, Fake], encoder: qe.Encoder, tmp_path: Path, request_: dict[str, Any]
) -> None:
    url, fake = server
    recipe.complete(encoder, request_, url=url, model="qwen3.8")
    body = fake.bodies[-1]
    assert body["prompt"] == _encode_cli_ids(tmp_path, request_)
    assert body["return_token_ids"] is True and body["model"] == "qwen3.8"


def test_completion_parses_like_parse_completion(
    server: tuple[str, Fake], encoder: qe.Encoder
) -> None:
    url, _ = server
    got = recipe.complete(encoder, REQUESTS[0], url=url, model="qwen3.8")
    # The server's token_ids end with the stop token: the turn's end, not content.
    want = qe.parse_completion(OUTPUT + "<|im_end|>", tools=TOOLS, thinking=True)
    assert got == want and got.stop == "<|im_end|>"
    assert got.content == "Checking." and got.tool_calls[0].arguments == {
        "city": "Paris",
        "days": 3,
    }


def test_streaming_gives_the_same_completion(server: tuple[str, Fake], encoder: qe.Encoder) -> None:
    url, _ = server
    events = list(recipe.stream(encoder, REQUESTS[0], url=url, model="qwen3.8"))
    want = qe.parse_completion(OUTPUT, tools=TOOLS, thinking=True)
    reasoning = "".join(e.text for e in events if isinstance(e, qe.ReasoningDelta)).strip()
    content = "".join(e.text for e in events if isinstance(e, qe.ContentDelta)).strip()
    calls = tuple(e.call for e in events if isinstance(e, qe.ToolCallEvent))
    assert (reasoning, content, calls) == (want.reasoning, want.content, want.tool_calls)


def test_thinking_off_request_reads_the_output_as_an_answer(
    server: tuple[str, Fake], encoder: qe.Encoder
) -> None:
    url, fake = server
    _, thinking = recipe.prompt_ids(encoder, REQUESTS[1])
    assert thinking is False
    fake.output_ids = _tokenizer().encode("Sunny.", add_special_tokens=False).ids
    got = recipe.complete(encoder, REQUESTS[1], url=url, model="qwen3.8")
    assert got == qe.Completion(content="Sunny.")
