"""The cost of one rollout turn as the history grows: ``append_sampled`` + a tool result +
``encoding()`` per turn, to ``--turns`` sampled turns (default 2,000). The cost of a turn must not
grow with the history: the script prints the medians of the first and last 32 turns and their
ratio, next to the same for a plain chat session (``append`` of an assistant message) grown
alike in the same process.

usage: python scripts/rollout_cost.py [--checkpoint ../shared/checkpoints/qwen3.8-27b]
                                      [--turns 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import qwen_encode as qe

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 32


def _sampled_turns(encoder: qe.Encoder, count: int) -> list[list[int]]:
    """Realistic sampled turns: reasoning, a call, the primer trap, a split word, cut-offs."""
    tokenizer = encoder.vocabulary.tokenizer
    texts = [
        "I should look this up.\n</think>\n\n<tool_call>\n<function=search>\n<parameter=q>\n"
        "weather in Paris\n</parameter>\n</function>\n</tool_call><|im_end|>",
        "\n</think>\n\nIt is sunny in Paris today, 21 C.<|im_end|>",
        "The result says rain; check another source.\n</think>\n\nLet me verify.<|im_end|>",
        "Thinking about the next step and what the user asked for",  # cut off (length)
    ]
    return [tokenizer.encode(texts[i % 4], add_special_tokens=False).ids for i in range(count)]


def _run(encoder: qe.Encoder, turns: list[list[int]], sampled: bool) -> list[float]:
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    session = encoder.chat(tools)
    session.append({"role": "user", "content": "Plan a trip to Paris."})
    times = []
    for i, ids in enumerate(turns):
        start = time.perf_counter()
        if sampled:
            session.append_sampled(ids, finish_reason=None if i % 4 != 3 else "length")
        else:
            session.append({"role": "assistant", "content": encoder.decode(ids[:-1])})
        session.append({"role": "tool", "content": f"result {i}: sunny, 21 C"})
        session.encoding()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=str(ROOT.parent / "shared/checkpoints/qwen3.8-27b"))
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    encoder = qe.Encoder.from_pretrained(args.checkpoint, engine="tokenizers")
    turns = _sampled_turns(encoder, args.turns)
    print(f"{args.turns} turns, first/last {WINDOW} turns, medians over {args.runs} runs")
    for name, sampled in (("append_sampled", True), ("append (re-rendered)", False)):
        early: list[float] = []
        late: list[float] = []
        for _ in range(args.runs):
            encoder.clear_cache()
            times = _run(encoder, turns, sampled)
            early += times[:WINDOW]
            late += times[-WINDOW:]
        first, last = statistics.median(early), statistics.median(late)
        print(
            f"  {name:22s} first {first * 1e3:.3f} ms, last {last * 1e3:.3f} ms, "
            f"ratio {last / first:.2f}"
        )


if __name__ == "__main__":
    main()
