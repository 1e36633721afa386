"""Side by side: an engine's built-in Qwen parsers and qwen_encode's, on the same outputs.

Run in the engine's venv (scripts/integration_env.sh builds them):

    .integration-venvs/vllm/bin/python scripts/serving_compare.py vllm
    .integration-venvs/sglang/bin/python scripts/serving_compare.py sglang

1. Readings: for the realistic outputs of tests/integrations/cases.py (thinking on and off, 0-3
   calls, values with indentation and markup), non-streaming and one token per delta, each
   parser's (reasoning, content, calls) against ``qe.parse_completion``; every difference is
   printed.
2. Streaming cost: microseconds per token (median of 3 runs) of one-token-per-delta parsing at
   several output lengths (a long reasoning, a sentence, one call with a long code value).
   A parser whose per-token cost is flat does the same work per token at any length.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import qwen_encode as qe  # noqa: E402
from tests.integrations.cases import REALISTIC, TOOLS, Case, call  # noqa: E402

CHECKPOINT = ROOT.parent / "shared" / "checkpoints" / "qwen3.8-27b"
Reading = tuple[Any, Any, Any]
LENGTHS = (250, 1000, 4000, 16000)


def expected(case: Case) -> Reading:
    got = qe.parse_completion(case.text, tools=case.tools, thinking=case.thinking)
    return got.reasoning, got.content, [(c.name, dict(c.arguments)) for c in got.tool_calls]


def _args(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


# --------------------------------------------------------------------------------------------
# vLLM


class Vllm:
    builtin = ("qwen3_coder", "qwen3")

    def __init__(self, model: Path) -> None:
        from vllm.parser.parser_manager import ParserManager
        from vllm.tokenizers import get_tokenizer

        import qwen_encode.integrations.vllm  # noqa: F401

        self.tokenizer = get_tokenizer(str(model))
        self.manager = ParserManager

    def parser_cls(self, names: tuple[str, str]) -> Any:
        return self.manager.get_parser(
            tool_parser_name=names[0],
            reasoning_parser_name=names[1],
            enable_auto_tools=True,
            tokenizer=self.tokenizer,
        )

    def _request(self, case: Case) -> Any:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        return ChatCompletionRequest(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            tools=case.tools,
            chat_template_kwargs={"enable_thinking": case.thinking},
        )

    def batch(self, cls: Any, case: Case) -> Reading:
        request = self._request(case)
        parser = cls(
            self.tokenizer, request.tools, chat_template_kwargs=request.chat_template_kwargs
        )
        ids = self.tokenizer.encode(case.text, add_special_tokens=False)
        reasoning, content, calls = parser.parse(
            case.text, request, enable_auto_tools=True, model_output_token_ids=ids
        )
        return reasoning, content or None, [(c.name, _args(c.arguments)) for c in calls or []]

    def streamer(self, cls: Any, case: Case) -> Callable[[], Reading]:
        request = self._request(case)
        tok = self.tokenizer
        ids = tok.encode(case.text, add_special_tokens=False)
        texts = [tok.decode([i]) for i in ids]
        primer = "<think>\n" if case.thinking else "<think>\n\n</think>\n\n"
        prompt = tok.encode("<|im_start|>assistant\n" + primer, add_special_tokens=False)

        def run() -> Reading:
            parser = cls(tok, request.tools, chat_template_kwargs=request.chat_template_kwargs)
            reasoning, content, names, arguments = [], [], {}, {}
            for n, token in enumerate(ids):
                delta = parser.parse_delta(
                    texts[n], [token], request, prompt_token_ids=prompt, finished=n == len(ids) - 1
                )
                if delta is None:
                    continue
                reasoning.append(delta.reasoning or "")
                content.append(delta.content or "")
                for piece in delta.tool_calls:
                    if piece.function is not None and piece.function.name:
                        names[piece.index] = piece.function.name
                    if piece.function is not None and piece.function.arguments:
                        arguments[piece.index] = (
                            arguments.get(piece.index, "") + piece.function.arguments
                        )
            calls = [(names.get(i), _args(arguments.get(i, "{}"))) for i in sorted(names)]
            return "".join(reasoning) or None, "".join(content) or None, calls

        return run


# --------------------------------------------------------------------------------------------
# SGLang


class Sglang:
    builtin = ("qwen3_coder", "qwen3")

    def __init__(self, model: Path) -> None:
        from transformers import AutoTokenizer

        from qwen_encode.integrations.sglang import register

        register()
        self.tokenizer = AutoTokenizer.from_pretrained(str(model))

    def parser_cls(self, names: tuple[str, str]) -> Any:
        return names

    def _parsers(self, names: tuple[str, str], case: Case) -> tuple[Any, Any]:
        from sglang.srt.entrypoints.openai.protocol import Tool
        from sglang.srt.function_call.function_call_parser import FunctionCallParser
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        tools = [Tool(**t) for t in case.tools or []]
        reasoning = ReasoningParser(
            names[1], stream_reasoning=True, force_reasoning=case.thinking,
            tool_call_parser_active=bool(tools),
        )  # fmt: skip
        return reasoning, FunctionCallParser(tools, names[0]) if tools else None

    def batch(self, names: tuple[str, str], case: Case) -> Reading:
        reasoner, caller = self._parsers(names, case)
        reasoning, text = reasoner.parse_non_stream(case.text)
        calls = []
        if caller is not None:
            text, items = caller.parse_non_stream(text)
            calls = [(i.name, _args(i.parameters)) for i in items]
        return reasoning or None, text or None, calls

    def streamer(self, names: tuple[str, str], case: Case) -> Callable[[], Reading]:
        tok = self.tokenizer
        ids = tok.encode(case.text, add_special_tokens=False)
        chunks, done = [], ""
        for at in range(1, len(ids) + 1):
            prefix = tok.decode(ids[:at])
            if prefix.endswith("\ufffd") and at < len(ids):
                continue
            chunks.append(prefix[len(done) :])
            done = prefix

        def run() -> Reading:
            reasoner, caller = self._parsers(names, case)
            reasoning, content, names_, arguments = [], [], {}, {}

            def take(items: list[Any]) -> None:
                for item in items:
                    if item.name:
                        names_[item.tool_index] = item.name
                    arguments[item.tool_index] = arguments.get(item.tool_index, "") + (
                        item.parameters or ""
                    )

            for n, chunk in enumerate(chunks):
                r, text = reasoner.parse_stream_chunk(chunk)
                if n == len(chunks) - 1:
                    end_r, end_text = reasoner.parse_stream_end()
                    r, text = (r or "") + (end_r or ""), (text or "") + (end_text or "")
                reasoning.append(r or "")
                if caller is None:
                    content.append(text or "")
                elif text:
                    normal, items = caller.parse_stream_chunk(text)
                    content.append(normal)
                    take(items)
            if caller is not None:
                normal, items = caller.parse_stream_end()
                content.append(normal)
                take(items)
            calls = [(names_.get(i), _args(arguments.get(i) or "{}")) for i in sorted(names_)]
            return "".join(reasoning) or None, "".join(content) or None, calls

        return run


# --------------------------------------------------------------------------------------------


def _diff(got: Reading, want: Reading) -> str:
    parts = []
    for field, a, b in zip(("reasoning", "content", "calls"), got, want, strict=True):
        if a != b:
            parts.append(f"{field} {a!r:.70} (want {b!r:.70})")
    return "; ".join(parts)


def long_case(tokens: int, tokenizer: Any) -> Case:
    """About ``tokens`` tokens: half reasoning, a sentence, one call holding code."""
    sentence = "The user wants the file rewritten, so I check each function in turn. "
    code = "def f(x):\n    return x + 1  # <b>markup</b> stays data\n"
    per_sentence = len(tokenizer.encode(sentence, add_special_tokens=False))
    per_code = len(tokenizer.encode(code, add_special_tokens=False))
    reasoning = sentence * max(1, tokens // 2 // per_sentence)
    value = code * max(1, tokens // 2 // per_code)
    text = f"{reasoning}\n</think>\n\nWriting it.\n" + call(
        "write_file", path="f.py", content=value
    )
    return Case(f"{tokens} tokens", text, True, TOOLS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("engine", choices=["vllm", "sglang"])
    parser.add_argument("--model", default=str(CHECKPOINT))
    parser.add_argument("--lengths", type=int, nargs="*", default=list(LENGTHS))
    args = parser.parse_args()
    engine = Vllm(Path(args.model)) if args.engine == "vllm" else Sglang(Path(args.model))
    sides = {
        "built-in " + "+".join(engine.builtin): engine.parser_cls(engine.builtin),
        "qwen_encode": engine.parser_cls(("qwen_encode", "qwen_encode")),
    }

    print(f"## {args.engine}: readings that differ from qe.parse_completion")
    print(f"{'case':34} {'parser':28} {'mode':9} difference")
    same = {name: 0 for name in sides}
    total = 0
    for case in REALISTIC:
        want = expected(case)
        for name, cls in sides.items():
            for mode, run in (
                ("batch", lambda c=cls, k=case: engine.batch(c, k)),
                ("per-token", engine.streamer(cls, case)),
            ):
                try:
                    got = run()
                except Exception as error:  # a built-in parser may raise on odd output
                    got = (f"raised {type(error).__name__}: {error}", None, None)
                if got == want:
                    same[name] += 1
                else:
                    print(f"{case.name:34} {name:28} {mode:9} {_diff(got, want)}")
        total += 2
    for name in sides:
        print(f"{name}: {same[name]}/{total} readings equal parse_completion")

    print(f"\n## {args.engine}: one token per delta, microseconds per token (median of 3)")
    print(f"{'tokens':>8} " + " ".join(f"{name:>30}" for name in sides))
    tokenizer = engine.tokenizer
    for length in args.lengths:
        case = long_case(length, tokenizer)
        count = len(tokenizer.encode(case.text, add_special_tokens=False))
        row = []
        for cls in sides.values():
            run = engine.streamer(cls, case)
            times = []
            for _ in range(3):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            row.append(f"{statistics.median(times) / count * 1e6:30.1f}")
        print(f"{count:>8} " + " ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
