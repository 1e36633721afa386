"""Short fine-tuning rows, the shape most SFT sets have: six or seven messages, about 420 tokens,
40% of rows with a tools block (drawn from a small pool of tool sets, as a real data set repeats
its tools), half of the others with a system prompt (from a small pool too).

    from short_rows import make_rows
    rows = make_rows(10_000)                # [{"messages": [...], "tools": [...] | None}, ...]
    agent = make_rows(10_000, shared=True)  # every row: the same system prompt and tools block
    big = make_agent_rows(3_000, tools=32, system_words=800)  # the same, a ~9,000-token block

Deterministic (seeded). The words are random syllables (``bench._words``), so nothing but what a
data set would really repeat (tools, system prompts) repeats. Each row is returned as a data set
reads it, parsed from its own JSON line: rows share no objects (equal tools lists, equal system
prompts are each row's own), as rows read from a file or a server's requests do not. (Built
shared, the 32-tool agent rows rendered 55 µs a row against 63 parsed: a shared tools list is
cheaper to key, a shared string's hash is kept.)
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import _tool as bench_tool
from bench import _words

#: The shared blocks of ``make_agent_rows`` the bench sweeps: (tools, system prompt words), from
#: a small block to one of ~9,000 tokens (an agent harness's system prompt and tool schemas).
AGENT_BLOCKS = ((8, 150), (16, 400), (32, 800))

#: Distinct tool sets and system prompts a set draws from.
TOOL_SETS = 24
SYSTEM_PROMPTS = 8


def _tool(rng: random.Random, i: int) -> dict[str, Any]:
    # smaller than bench's tools: a short description, one or two parameters
    return bench_tool(
        rng,
        i,
        description=(4, 10),
        parameters=(1, 2),
        parameter_words=3,
        types=("string", "integer"),
    )


def _call(rng: random.Random, tool: dict[str, Any]) -> dict[str, Any]:
    function = tool["function"]
    return {
        "type": "function",
        "function": {
            "name": function["name"],
            "arguments": {
                key: _words(rng, 2) if spec["type"] == "string" else rng.randint(0, 99)
                for key, spec in function["parameters"]["properties"].items()
            },
        },
    }


def _tool_row(rng: random.Random, system: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # system, user, assistant calling two tools, their two results, the answer: 6 messages
    calls = [_call(rng, rng.choice(tools)) for _ in range(2)]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": _words(rng, rng.randint(4, 10))},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": _words(rng, rng.randint(4, 10)),
            "tool_calls": calls,
        },
        {"role": "tool", "content": _words(rng, rng.randint(3, 8))},
        {"role": "tool", "content": _words(rng, rng.randint(3, 8))},
        {"role": "assistant", "content": _words(rng, rng.randint(6, 14))},
    ]


def _chat_row(rng: random.Random, system: str | None) -> list[dict[str, Any]]:
    # three user / assistant exchanges (6 messages), a system prompt first in half of them
    messages: list[dict[str, Any]] = (
        [] if system is None else [{"role": "system", "content": system}]
    )
    for _ in range(3):
        messages.append({"role": "user", "content": _words(rng, rng.randint(4, 12))})
        messages.append(
            {
                "role": "assistant",
                "content": _words(rng, rng.randint(5, 14)),
                "reasoning_content": _words(rng, rng.randint(3, 8)),
            }
        )
    return messages


def make_rows(count: int, seed: int = 0, *, shared: bool = False) -> list[dict[str, Any]]:
    """``count`` rows; ``shared``: every row has the tools block and system prompt of row 0 (an
    agent SFT set), else 40% carry one of ``TOOL_SETS`` tools blocks."""
    rng = random.Random(seed)
    tool_sets = [[_tool(rng, i) for i in range(rng.randint(1, 2))] for _ in range(TOOL_SETS)]
    systems = [_words(rng, rng.randint(4, 10)) for _ in range(SYSTEM_PROMPTS)]
    rows: list[dict[str, Any]] = []
    for _ in range(count):
        if shared:
            tools = tool_sets[0]
            rows.append({"messages": _tool_row(rng, systems[0], tools), "tools": tools})
        elif rng.random() < 0.4:
            tools = rng.choice(tool_sets)
            rows.append({"messages": _tool_row(rng, rng.choice(systems), tools), "tools": tools})
        else:
            system = rng.choice(systems) if rng.random() < 0.5 else None
            rows.append({"messages": _chat_row(rng, system), "tools": None})
    return _as_read(rows)


def _as_read(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as read from a JSON-lines file: each its own objects."""
    return [json.loads(json.dumps(row)) for row in rows]


def make_agent_rows(
    count: int, tools: int, system_words: int, seed: int = 1
) -> list[dict[str, Any]]:
    """``count`` rows sharing one system prompt of ``system_words`` words and one block of
    ``tools`` tools of the benchmark corpus's size (longer descriptions, up to four parameters),
    each row otherwise an agent set's row (a call of two tools, their results, the answer)."""
    rng = random.Random(seed)
    block = [bench_tool(rng, i) for i in range(tools)]
    system = _words(rng, system_words)
    return _as_read(
        [{"messages": _tool_row(rng, system, block), "tools": block} for _ in range(count)]
    )
