"""What an OpenAI client reads from a chat completion: the SSE framing of a stream and the
accumulation of its deltas, or the message of a JSON body. Shared by the engines' serving tests;
imports no engine."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

Reading = tuple[str | None, str | None, list[tuple[str, dict[str, Any]]]]


def sse_chunks(body: str) -> list[dict[str, Any]]:
    """The JSON chunks of an SSE body, checking the framing a client relies on."""
    chunks, done = [], False
    for event in body.split("\n\n"):
        if not event.strip():
            continue
        assert event.startswith("data: "), event
        payload = event[len("data: ") :]
        assert not done, "data after [DONE]"
        if payload == "[DONE]":
            done = True
            continue
        chunks.append(json.loads(payload))
    assert done, "the stream did not end with [DONE]"
    return chunks


def streamed_reading(chunks: Sequence[dict[str, Any]]) -> tuple[Reading, str | None]:
    """What an OpenAI client accumulates from the chunks: reasoning, content, the calls (name
    from the first piece of each index, arguments concatenated), and the finish reason."""
    reasoning, content, finish = [], [], None
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice.get("delta") or {}
            # vLLM names it "reasoning", SGLang "reasoning_content".
            reasoning.append(delta.get("reasoning") or delta.get("reasoning_content") or "")
            content.append(delta.get("content") or "")
            for piece in delta.get("tool_calls") or []:
                function = piece.get("function") or {}
                if function.get("name"):
                    assert piece["index"] not in names, "a call's name was sent twice"
                    assert piece.get("id"), "a call started without an id"
                    names[piece["index"]] = function["name"]
                arguments[piece["index"]] = arguments.get(piece["index"], "") + (
                    function.get("arguments") or ""
                )
            finish = choice.get("finish_reason") or finish
    calls = [(names[i], json.loads(arguments[i])) for i in sorted(names)]
    return ("".join(reasoning) or None, "".join(content) or None, calls), finish


def message_reading(body: dict[str, Any]) -> tuple[Reading, str | None]:
    choice = body["choices"][0]
    message = choice["message"]
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]
    reasoning = message.get("reasoning") or message.get("reasoning_content") or None
    return (reasoning, message.get("content") or None, calls), choice["finish_reason"]
