"""examples/rollout_loop.py against a fake vLLM ``/v1/completions`` server on loopback (stdlib
http.server; no network, no engine): every prompt the server receives is the previous prompt
plus exactly the token IDs it returned plus the tool result, and the row the loop ends with
trains exactly the returned IDs with the returned log-probabilities."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qwen_encode as qe
from qwen_encode import provenance as pv

from .conftest import load_example

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures" / "qwen3.8-tiny"

recipe = load_example("rollout_loop")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
# What the "model" writes each turn: the primer trap (empty reasoning), a call; then an answer.
OUTPUTS = [
    "\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "</function>\n</tool_call><|im_end|>",
    "The tool says sunny.\n</think>\n\nIt is sunny in Paris.<|im_end|>",
]


@pytest.fixture(scope="module")
def encoder() -> qe.Encoder:
    return qe.Encoder.from_pretrained(TINY)


class Fake:
    def __init__(self, outputs: list[list[int]]) -> None:
        self.outputs = outputs
        self.prompts: list[list[int]] = []
        self.sent: list[dict[str, Any]] = []


@pytest.fixture
def server(encoder: qe.Encoder) -> Iterator[tuple[str, Fake]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    fake = Fake([tokenizer.encode(text, add_special_tokens=False).ids for text in OUTPUTS])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            assert self.path == "/v1/completions"
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert body["return_token_ids"] is True and body["logprobs"] == 0
            turn = len(fake.prompts)
            fake.prompts.append(body["prompt"])
            ids = fake.outputs[turn]
            logprobs = [-0.01 * (turn + 1) * (i + 1) for i in range(len(ids))]
            choice = {
                "text": "",
                "token_ids": ids,
                "finish_reason": "stop",
                "logprobs": {"token_logprobs": logprobs, "tokens": [], "top_logprobs": None},
            }
            fake.sent.append({"ids": ids, "logprobs": logprobs})
            payload = json.dumps({"choices": [choice]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", fake
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_rollout_loop_by_token_ids(server: tuple[str, Fake], encoder: qe.Encoder) -> None:
    url, fake = server
    calls = []

    def run_tool(call: qe.ToolCall) -> str:
        calls.append(call)
        return "sunny, 21 C"

    session = recipe.rollout(
        encoder,
        [{"role": "user", "content": "Weather in Paris?"}],
        TOOLS,
        run_tool,
        url=url,
        model="qwen3.8",
    )
    assert [c.arguments for c in calls] == [{"city": "Paris"}]
    first, second = fake.prompts
    returned = fake.sent[0]["ids"]
    # What the server saw next: its own output, verbatim, right after the prompt it was given.
    assert second[: len(first) + len(returned)] == first + returned
    assert encoder.decode(second[len(first) + len(returned) :]).startswith(
        "\n<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response>"
    )
    row = session.trajectory()
    sampled = row.input_ids[row.sampled_mask].tolist()
    assert sampled == fake.sent[0]["ids"] + fake.sent[1]["ids"]
    expected = np.asarray(fake.sent[0]["logprobs"] + fake.sent[1]["logprobs"], dtype=np.float32)
    assert np.array_equal(row.logprobs[row.sampled_mask], expected)
    assert (row.provenance[row.sampled_mask] == pv.SAMPLED).all()
    assert row.input_ids[: len(second)].tolist() == second
