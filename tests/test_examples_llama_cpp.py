"""examples/llama_cpp.py against a fake llama-server ``/completion`` on loopback (stdlib
http.server; no engine) and a stand-in for llama-cpp-python's ``Llama``: the prompt sent is the
``qwen-encode encode --model model.gguf`` reading of the request, sent as token IDs with
``cache_prompt``, and what comes back parses as ``parse_completion`` reads it."""

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
from tests.gguf_files import TINY, write_gguf
from tests.test_examples_serving import OUTPUT, TOOLS

from .conftest import load_example

ROOT = Path(__file__).resolve().parent.parent
recipe = load_example("llama_cpp")

REQUEST = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(TINY, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def encoder(gguf_path: Path, tmp_path_factory: pytest.TempPathFactory) -> qe.Encoder:
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    try:
        return qe.Encoder.from_pretrained(gguf_path)
    finally:
        mp.undo()


def _output_ids(encoder: qe.Encoder) -> list[int]:
    """The model's output as IDs: markers at their atomic IDs, then the stop token."""
    tokenizer = encoder.vocabulary.tokenizer
    return [
        *tokenizer.encode(OUTPUT, add_special_tokens=False).ids,
        encoder.marker_ids["<|im_end|>"],
    ]


@pytest.fixture
def server(encoder: qe.Encoder) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    output = _output_ids(encoder)
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            assert self.path == "/completion"
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            # llama-server leaves the end-of-generation token out of its output.
            generated = output[:-1]
            if not body["stream"]:
                payload = {"content": "", "tokens": generated, "stop": True, "stop_type": "eos"}
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps(payload).encode())
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for at in range(0, len(generated), 4):
                chunk = {"content": "", "tokens": generated[at : at + 4], "stop": False}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            final = {"content": "", "tokens": [], "stop": True, "stop_type": "eos"}
            self.wfile.write(b"data: " + json.dumps(final).encode() + b"\n\n")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", bodies
    finally:
        httpd.shutdown()
        httpd.server_close()


def _encode_cli_ids(gguf_path: Path, tmp_path: Path) -> list[int]:
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps(REQUEST) + "\n", encoding="utf-8")
    assert cli_main(["encode", "--model", str(gguf_path), str(source), "-o", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8").splitlines()[0])["input_ids"]


def test_server_gets_the_encode_commands_ids_with_cache_prompt(
    server, encoder: qe.Encoder, gguf_path: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    url, bodies = server
    recipe.complete_server(encoder, REQUEST, url=url)
    body = bodies[-1]
    assert body["prompt"] == _encode_cli_ids(gguf_path, tmp_path)
    assert body["cache_prompt"] is True and body["return_tokens"] is True


def test_server_completion_parses_like_parse_completion(server, encoder: qe.Encoder) -> None:
    url, _ = server
    want = qe.parse_completion(OUTPUT, tools=TOOLS, thinking=True)
    assert recipe.complete_server(encoder, REQUEST, url=url) == want
    assert want.tool_calls[0].arguments == {"city": "Paris", "days": 3}


def test_server_streaming_gives_the_same_completion(server, encoder: qe.Encoder) -> None:
    url, _ = server
    events = list(recipe.stream_server(encoder, REQUEST, url=url))
    want = qe.parse_completion(OUTPUT, tools=TOOLS, thinking=True)
    reasoning = "".join(e.text for e in events if isinstance(e, qe.ReasoningDelta)).strip()
    content = "".join(e.text for e in events if isinstance(e, qe.ContentDelta)).strip()
    calls = tuple(e.call for e in events if isinstance(e, qe.ToolCallEvent))
    assert (reasoning, content, calls) == (want.reasoning, want.content, want.tool_calls)


class FakeLlama:
    """llama-cpp-python's ``Llama.create_completion`` as seen from Python: token IDs in, the
    detokenized text out (USER_DEFINED tags are text; the stop token is not)."""

    def __init__(self, encoder: qe.Encoder) -> None:
        ids = _output_ids(encoder)[:-1]
        self.text = encoder.vocabulary.tokenizer.decode(ids, skip_special_tokens=False)
        self.prompts: list[Any] = []

    def create_completion(self, prompt: Any, max_tokens: int = 16, stream: bool = False, **_: Any):
        self.prompts.append(prompt)
        if stream:
            return iter(
                {"choices": [{"text": self.text[i : i + 7]}]} for i in range(0, len(self.text), 7)
            )
        return {"choices": [{"text": self.text}]}


def test_llama_cpp_python_gets_ids_and_its_text_parses(encoder: qe.Encoder) -> None:
    llm = FakeLlama(encoder)
    got = recipe.complete_llama_cpp_python(llm, encoder, REQUEST)
    assert llm.prompts[-1] == recipe.prompt_ids(encoder, REQUEST)[0]
    assert all(isinstance(i, int) for i in llm.prompts[-1])
    assert got == qe.parse_completion(OUTPUT, tools=TOOLS, thinking=True)
    events = list(recipe.stream_llama_cpp_python(llm, encoder, REQUEST))
    calls = tuple(e.call for e in events if isinstance(e, qe.ToolCallEvent))
    assert calls == got.tool_calls
