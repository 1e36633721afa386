"""A deterministic generator of varied Qwen 3.8 conversations for parity tests against the oracle.

Every case is a dict ``{"messages", "tools", "kwargs"}`` where ``kwargs`` are the template options.
The generator covers every option combination, 0-3 tools with non-ASCII descriptions, every JSON
value type in arguments, several calls per turn, consecutive tool results, multimodal content,
training renders (no generation prompt), continued final messages, and awkward text (NBSP, U+3000,
CRLF, CJK, emoji, combining marks, leading and trailing whitespace). With ``markers=True`` some
caller fields also spell control-token strings (for the encoder's injection tests).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from qwen_encode.markers import ALL_ADDED_TOKENS

_WORDS = [
    "hello",
    "world",
    "Paris",
    "weather",
    "naïve",
    "café",
    "Straße",
    "数据",
    "你好世界",
    "東京",
    "こんにちは",
    "안녕하세요",
    "مرحبا",
    "שלום",
    "नमस्ते",
    "Привет",
    "γειά",
    "👍🏽",
    "🧪",
    "e\u0301",
    "a\u0308\u0301",
    "x²",
    "½",
    "1234567",
    "3.14",
    "-0",
    "def",
    "f(x)",
    '{"a": 1}',
    "<b>bold</b>",
    "a&b",
    "'quoted'",
    '"dq"',
    "\\n",
    "tab\there",
    "https://example.com/?q=1&r=2",
    "#",
    "**",
]
_SPACES = [" ", "  ", "\n", "\n\n", "\r\n", "\t", "\u00a0", "\u3000", "\u2009", " \n "]


def _text(rng: random.Random, markers: bool, max_words: int = 12) -> str:
    parts = []
    for _ in range(rng.randint(0, max_words)):
        parts.append(rng.choice(_WORDS))
        parts.append(rng.choice(_SPACES) if rng.random() < 0.3 else " ")
    if markers and rng.random() < 0.35:
        parts.insert(rng.randint(0, len(parts)), rng.choice(ALL_ADDED_TOKENS))
    text = "".join(parts)
    roll = rng.random()
    if roll < 0.15:
        text = rng.choice(_SPACES) + text
    elif roll < 0.3:
        text = text + rng.choice(_SPACES)
    return text


def _json_value(rng: random.Random, markers: bool, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 2 else 7)
    if kind == 0:
        return _text(rng, markers, 6)
    if kind == 1:
        return rng.choice([0, -1, 42, 10**20, -(2**63)])
    if kind == 2:
        return rng.choice([0.5, -2.25, 1e-7, 1e21, 3.0])
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return None
    if kind == 5:
        return rng.choice(["", " padded ", "line1\nline2", "  indented\n\tcode\r\n", "null", "42"])
    if kind == 6:
        return rng.choice(["é", "数据", "👍🏽", "\u00a0x\u3000"])
    if kind == 7:
        return [_json_value(rng, markers, depth + 1) for _ in range(rng.randint(0, 3))]
    return {
        rng.choice(["k", "clé", "键", "a b"]) + str(i): _json_value(rng, markers, depth + 1)
        for i in range(rng.randint(0, 3))
    }


def _tool(rng: random.Random, i: int, markers: bool) -> dict[str, Any]:
    name = rng.choice(["get_weather", "search", "run_code", "lookup_数据", "send_email"]) + f"_{i}"
    description = rng.choice(
        ["Météo à «Paris»", "搜索网页", "Führt Code aus — schnell", "Envoie un e-mail ✉️", "Busca"]
    )
    if markers and rng.random() < 0.3:
        description += " " + rng.choice(ALL_ADDED_TOKENS)
    properties = {
        "city": {"type": "string", "description": "ville / 城市"},
        "count": {"type": "integer"},
        "options": {"type": "object"},
    }
    tool = {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": ["city"]},
        },
    }
    if rng.random() < 0.2:
        return tool["function"]  # the bare form some clients send
    return tool


def _content(rng: random.Random, markers: bool, multimodal: bool) -> Any:
    roll = rng.random()
    if multimodal and roll < 0.35:
        blocks: list[dict[str, Any]] = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.randrange(5)
            if kind == 0:
                blocks.append({"type": "image", "image": "file:///img.png"})
            elif kind == 1:
                blocks.append({"type": "image_url", "image_url": {"url": "https://x/y.jpg"}})
            elif kind == 2:
                blocks.append({"type": "video", "video": "file:///clip.mp4"})
            else:
                blocks.append({"type": "text", "text": _text(rng, markers)})
        return blocks
    if roll < 0.42:
        return ""
    return _text(rng, markers)


def _tool_calls(rng: random.Random, tools: list[dict[str, Any]], markers: bool) -> list[Any]:
    calls = []
    for _ in range(rng.randint(1, 3)):
        name = rng.choice([t.get("function", t)["name"] for t in tools] or ["untooled_call"])
        arguments = {
            rng.choice(["city", "count", "options", "q", "代码"]) + str(k): _json_value(
                rng, markers
            )
            for k in range(rng.randint(0, 4))
        }
        if rng.random() < 0.5:
            calls.append(
                {
                    "id": f"call_{rng.randrange(10**6)}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        else:
            calls.append({"name": name, "arguments": arguments})
    return calls


def _conversation(
    rng: random.Random, markers: bool, multimodal: bool, tools: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        system_content = _text(rng, markers) if rng.random() < 0.85 else ""
        if multimodal and rng.random() < 0.3:
            system_content = [{"type": "text", "text": system_content}]
        messages.append({"role": "system", "content": system_content})
    for _ in range(rng.randint(1, 4)):
        messages.append({"role": "user", "content": _content(rng, markers, multimodal)})
        # An agentic exchange: calls, their results (often several in a row), more calls.
        for _ in range(rng.choice([0, 0, 1, 2])):
            assistant: dict[str, Any] = {
                "role": "assistant",
                "content": _content(rng, markers, False),
                "tool_calls": _tool_calls(rng, tools, markers),
            }
            if rng.random() < 0.6:
                assistant["reasoning_content"] = _text(rng, markers)
            messages.append(assistant)
            for _ in range(len(assistant["tool_calls"]) if rng.random() < 0.7 else 1):
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": "call_0",
                        "content": _content(rng, markers, multimodal),
                    }
                )
            if rng.random() < 0.15:
                # A user turn that only wraps a tool response is not a "real query".
                messages.append(
                    {
                        "role": "user",
                        "content": f"<tool_response>\n{_text(rng, False, 4)}\n</tool_response>",
                    }
                )
        reply: dict[str, Any] = {"role": "assistant", "content": _content(rng, markers, False)}
        roll = rng.random()
        if roll < 0.5:
            reply["reasoning_content"] = _text(rng, markers)
        elif roll < 0.6:
            reply["reasoning_content"] = None
        messages.append(reply)
    return messages


def generate(count: int = 640, seed: int = 38, markers: bool = False) -> list[dict[str, Any]]:
    """``count`` cases, deterministic for a given seed."""
    rng = random.Random(seed)
    options = list(
        itertools.product(
            [True, False],  # enable_thinking
            [None, "low", "medium", "xhigh"],  # reasoning_effort
            [True, False],  # preserve_thinking
            [True, False],  # add_generation_prompt
            [False, True],  # add_vision_id
        )
    )
    cases = []
    for n in range(count):
        thinking, effort, preserve, generation, vision_id = options[n % len(options)]
        tools = [_tool(rng, i, markers) for i in range(rng.randint(0, 3))]
        messages = _conversation(rng, markers, multimodal=rng.random() < 0.4, tools=tools)
        kwargs: dict[str, Any] = {
            "enable_thinking": thinking,
            "preserve_thinking": preserve,
            "add_vision_id": vision_id,
            "add_generation_prompt": generation,
        }
        if effort is not None:
            kwargs["reasoning_effort"] = effort
        if generation:
            messages.pop()  # end on the user (or tool) turn the model answers
            if messages[-1]["role"] == "system":
                messages.append({"role": "user", "content": _text(rng, markers)})
        elif (
            n % 7 == 0
            and isinstance(messages[-1].get("content"), str)
            and not messages[-1].get("tool_calls")
        ):
            kwargs["continue_final_message"] = True
        cases.append({"messages": messages, "tools": tools or None, "kwargs": kwargs})
    return cases


def text_only(messages: list[dict[str, Any]]) -> bool:
    """Whether every message's content is text (a string, none, or text parts): images need an
    engine's multimodal processor, which needs a real model."""
    return all(
        isinstance(m.get("content"), (str, type(None)))
        or all(isinstance(part, dict) and part.get("type") == "text" for part in m["content"])
        for m in messages
    )


def chat_request(case: dict[str, Any]) -> dict[str, Any] | None:
    """A case as an OpenAI chat completion request body (for the engines' request paths), or None
    when it is not ``text_only``. The template options become ``chat_template_kwargs``, except
    the two that are request fields."""
    if not text_only(case["messages"]):
        return None
    kwargs = dict(case["kwargs"])
    top = {
        key: kwargs.pop(key)
        for key in ("add_generation_prompt", "continue_final_message")
        if key in kwargs
    }
    if top.get("continue_final_message"):
        top["add_generation_prompt"] = False  # the engines refuse both at once
    return {
        "messages": case["messages"],
        "tools": case["tools"],
        "chat_template_kwargs": kwargs,
        **top,
    }
