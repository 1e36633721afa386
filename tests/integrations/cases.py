"""Outputs the serving tests run through both engines' parser interfaces: realistic agent
outputs (thinking on and off, 0-3 calls, values with indentation and markup) and generated
``format_turn`` round trips. The expected reading is always ``qe.parse_completion``."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from qwen_encode import markers as mk
from qwen_encode.conversation import ToolCall, Turn
from qwen_encode.parser import parse_completion
from qwen_encode.protocol import format_turn

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
WRITE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "overwrite": {"type": "boolean"},
            },
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "filters": {"type": "object"},
                "limit": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}
TOOLS = [WEATHER, WRITE, SEARCH]


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


@dataclass(frozen=True)
class Case:
    name: str
    text: str  # what the model wrote after the primer
    thinking: bool  # whether the primer left <think> open
    tools: Any = None


HTML = '<div class="box">\n    <p>Hello &amp; <b>bye</b></p>\n</div>'
PY = "def f(x):\n    if x < 3:\n        return '<tool_call>'\n    return x\n"

REALISTIC = [
    Case("answer only", "The user greets me.\n</think>\n\nHello! How can I help?", True),
    Case("thinking off", "Paris is the capital of France.", False),
    Case(
        "one call",
        "Need the weather.\n</think>\n\nChecking.\n\n"
        + call("get_weather", city="Paris", days="3"),
        True,
        TOOLS,
    ),
    Case(
        "call only, thinking off",
        call("get_weather", city="Paris"),
        False,
        TOOLS,
    ),
    Case(
        "two calls",
        "Two cities.\n</think>\n\n"
        + call("get_weather", city="Paris")
        + "\n"
        + call("get_weather", city="Tokyo", days="2"),
        True,
        TOOLS,
    ),
    Case(
        "three calls, markup values",
        "I will write the files.\n</think>\n\nWriting three files.\n"
        + call("write_file", path="a.html", content=HTML, overwrite="true")
        + "\n"
        + call("write_file", path="f.py", content=PY)
        + "\n"
        + call("search", query="a <b>bold</b> query", filters='{"lang": "en"}', limit="2.5"),
        True,
        TOOLS,
    ),
    Case(
        "indented value kept",
        "</think>\n\n" + call("write_file", path="x", content="    indented\n\n  two\n"),
        True,
        TOOLS,
    ),
    Case(
        "tool markup inside reasoning",
        "Maybe call <tool_call>\n<function=get_weather>\n</function>\n</tool_call> later.\n"
        "</think>\n\nNo call needed.",
        True,
        TOOLS,
    ),
    Case(
        "call without </think>",
        "I should check the weather.\n" + call("get_weather", city="Oslo"),
        True,
        TOOLS,
    ),
    Case("bare <tool_call> mention", "</think>\n\nThe tag <tool_call> opens a call.", True, TOOLS),
    Case(
        "content after a call",
        "</think>\n\nFirst.\n" + call("search", query="x", tags='["a", "b"]') + "\nDone.",
        True,
        TOOLS,
    ),
    Case("thinking off, own think span", "<think>\nhm\n</think>\n\nYes.", False),
    Case("truncated reasoning", "Still thinking about the", True),
    Case("unicode", "Überlegung… 日本語\n</think>\n\nАнтвет: 😀 ok", True),
    Case(
        "fenced markup",
        "</think>\n\n```\n<tool_call>\n<function=x>\n```\nThat is the format.",
        True,
        TOOLS,
    ),
]

# The output ended inside a call (max_tokens): not dispatched, its text kept as content.
UNTERMINATED = Case(
    "unterminated",
    "Checking.\n</think>\n\nSure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
    True,
    TOOLS,
)

_WORDS = ["alpha", "beta <i>x</i>", "gamma\n  delta", "ε ζ", "x < y && y > z", '{"k": 1}', "  lead"]


def round_trips(count: int, seed: int = 11) -> list[Case]:
    """Assistant turns built at random, rendered by ``format_turn`` and read back."""
    rng = random.Random(seed)
    cases = []
    for n in range(count):
        calls = []
        for _ in range(rng.randint(0, 3)):
            kind = rng.choice(["weather", "write", "search"])
            if kind == "weather":
                args: dict[str, Any] = {"city": rng.choice(_WORDS).strip()}
                if rng.random() < 0.5:
                    args["days"] = rng.randint(-3, 30)
                calls.append(ToolCall("get_weather", args))
            elif kind == "write":
                text = "\n".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))
                calls.append(
                    ToolCall("write_file", {"path": "p.txt", "content": text, "overwrite": True})
                )
            else:
                args = {"query": rng.choice(_WORDS).strip() or "q", "limit": rng.randint(1, 9)}
                if rng.random() < 0.5:
                    args["filters"] = {"a": [1, 2], "b": "<c>"}
                    args["tags"] = ["t1", "t2"]
                calls.append(ToolCall("search", args))
        content = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 3))).strip() or None
        reasoning = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3))).strip()
        if content is None and not calls:
            content = "ok"
        turn = Turn("assistant", content=content, reasoning=reasoning, tool_calls=tuple(calls))
        text = format_turn(turn).text
        head, tail = mk.TURN_OPEN + "assistant\n", mk.TURN_CLOSE + "\n"
        body = text[len(head) : -len(tail)]
        # The primer wrote "<think>\n" (thinking on): the model wrote the rest.
        cases.append(Case(f"round trip {n}", body.removeprefix(mk.THINK_OPEN + "\n"), True, TOOLS))
    return cases


ALL = REALISTIC + round_trips(40)


def cuts(count: int, rng: random.Random) -> list[int]:
    """Random multi-token delta sizes (1 to 7 tokens)."""
    return [rng.randint(1, 7) for _ in range(count)]


def id_chunks(ids: list[int], sizes: list[int] | None = None) -> list[list[int]]:
    """``ids`` cut into the deltas an engine streams: ``sizes`` tokens at a time (one by one
    without sizes), the rest in one last delta when the sizes run out."""
    chunks, at = [], 0
    for size in sizes or [1] * len(ids):
        if at >= len(ids):
            break
        chunks.append(ids[at : at + size])
        at += size
    if at < len(ids):
        chunks.append(ids[at:])
    return chunks


# Requests the prompt-side tests render through each engine: no caller text spells a marker.
CONVERSATIONS = [
    [{"role": "user", "content": "Weather in Paris?"}],
    [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "Need the weather.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ],
]


def client_reading(case: Case) -> tuple[Any, str]:
    """What a client of either engine must receive for ``case``: (reasoning, content, calls) as
    ``qe.parse_completion`` reads the output, and the finish reason."""
    if case is UNTERMINATED:
        # Cut off inside a call: nothing dispatched, the answer's raw text is the content.
        return ("Checking.", case.text.split("</think>", 1)[1].strip(), []), "stop"
    got = parse_completion(case.text, tools=case.tools, thinking=case.thinking)
    calls = [(c.name, dict(c.arguments)) for c in got.tool_calls]
    return (got.reasoning, got.content or None, calls), "tool_calls" if calls else "stop"
