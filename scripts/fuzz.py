"""Coverage-guided fuzzing of the completion parser and ``turns_from_messages``.

Each input is a little program over the grammar's pieces: its first byte picks the target, the
rest are read one byte at a time, a byte below ``len(PIECES)`` standing for that piece (a tag,
a marker, whitespace, a backtick fence…) and any other byte for one character. Properties:

* only ``ParseError`` comes out of the parser on well-typed input (``PromptError`` of
  ``turns_from_messages`` on bad messages), never another exception;
* ``StreamParser`` fed in random chunks, as text and as token IDs, equals the batch parse
  (errors included, same offset);
* a call whose ``</tool_call>`` is missing is never dispatched;
* every ``format_tool_call`` output whose values hold no line-start boundary markup (nor the
  other sequences the README lists as provably ambiguous) parses back to its arguments;
* a call that gives one parameter twice with different values is a ``ParseError``;
* no dispatched value holds a line-start ``</parameter>`` followed by a line-start
  ``<parameter=`` unless the structural reading was impossible (inside a complete
  ``<function=…>…</function>`` block quoted in the value);
* the spans account for the parts: the content spans' text, joined and trimmed, is ``content``
  (likewise reasoning), and from token IDs every span has its token positions.

    .venv/bin/python scripts/fuzz.py --minutes 10        # saves crashes under tests/fuzz_corpus
    .venv/bin/python scripts/fuzz.py --seconds 20 --crashes /tmp/x

Crashes are written to ``--crashes`` (default ``tests/fuzz_corpus``), which
``tests/test_parser_fuzz.py`` replays on every run.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import re
import resource
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fuzz_corpus"

try:  # instrumented for coverage when atheris is there; the replay needs no atheris
    import atheris

    with atheris.instrument_imports(include=["qwen_encode"]):
        from qwen_encode import markers as mk
        from qwen_encode.conversation import turns_from_messages
        from qwen_encode.errors import ParseError, PromptError
        from qwen_encode.parser import Completion, StreamParser, parse_completion
        from qwen_encode.protocol import format_tool_call
except ImportError:
    atheris = None
    from qwen_encode import markers as mk
    from qwen_encode.conversation import turns_from_messages
    from qwen_encode.errors import ParseError, PromptError
    from qwen_encode.parser import Completion, StreamParser, parse_completion
    from qwen_encode.protocol import format_tool_call

# After the instrumented imports: it imports qwen_encode, which must be instrumented first.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the byte stand-in encoder lives with the tests
from tests.byte_ids import ByteEncoder  # noqa: E402

PIECES: tuple[str, ...] = (
    *mk.PROTOCOL_MARKERS,
    "<function=f>",
    "<function=g>",
    "<function=",
    "</function>",
    "<parameter=a>",
    "<parameter=b>",
    "<parameter=",
    "</parameter>",
    "</parameter1>",
    "\n",
    " ",
    "\n\n",
    "```",
    "~~~",
    "`",
    ">",
    "<",
    "{{ x }}",
    "7",
    "true",
    '{"k": [1]}',
)
TOOLS = [
    {"name": "f", "parameters": {"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}}
]
_TARGETS = 4


IDS = ByteEncoder()


def program_text(data: bytes) -> str:
    return "".join(PIECES[b] if b < len(PIECES) else chr(b) for b in data)


def outcome(run: Any) -> Completion | tuple[str, int]:
    try:
        return run()
    except ParseError as error:
        return ("ParseError", error.offset)


def streamed(chunks: list[Any], **kwargs: Any) -> Completion | tuple[str, int]:
    def run() -> Completion:
        parser = StreamParser(**kwargs)
        for chunk in chunks:
            parser.feed(chunk)
        return parser.finish()

    return outcome(run)


def chunked(seq: Sequence[Any], rng: random.Random) -> list[Any]:
    points = sorted({rng.randint(0, len(seq)) for _ in range(rng.randint(0, 6))})
    edges = [0, *points, len(seq)]
    return [seq[a:b] for a, b in itertools.pairwise(edges) if b > a]


_CONFUSABLE = re.compile(
    r"</parameter[A-Za-z0-9_-]{0,16}>\s*(?:<parameter=|</function>|\Z)"
    r"|(?:^|\n)(?:<parameter=|</function>|</parameter)"
)
# A line-start </parameter> then a line-start <parameter=: the structural junction.
_JUNCTION = re.compile(r"(?:^|\n)</parameter>\s*\n<parameter=([^<>\n]*)>")
_QUOTED_BLOCK = re.compile(r"<function=[^<>\n]*>.*</function>", re.DOTALL)


def confusable(value: str) -> bool:
    """A value holding what the README's Limitations call provably ambiguous."""
    if _CONFUSABLE.search(value):
        return True
    return mk.TOOL_CALL_OPEN in value and "<function=" in value and mk.TOOL_CALL_CLOSE in value


def check_parse(text: str, flags: int, rng: random.Random) -> None:
    kwargs: dict[str, Any] = {"thinking": bool(flags & 1), "tools": TOOLS if flags & 2 else None}
    batch = outcome(lambda: parse_completion(text, **kwargs))
    assert streamed(chunked(text, rng), **kwargs) == batch, "text stream != batch"
    ids = IDS.encode(text)
    by_ids = outcome(lambda: parse_completion(ids, encoder=IDS, **kwargs))
    assert streamed(chunked(ids, rng), encoder=IDS, **kwargs) == by_ids, "ID stream != batch"
    if isinstance(batch, Completion):
        check_spans(text, batch)
        check_values(batch)
    if isinstance(by_ids, Completion):
        assert all(s.token_start is not None for s in by_ids.spans), "a span without tokens"


def check_spans(text: str, completion: Completion) -> None:
    for kind in ("reasoning", "content"):
        joined = "".join(text[s.start : s.end] for s in completion.spans if s.kind == kind)
        assert (joined.strip() or None) == getattr(completion, kind), f"{kind} spans"
    calls = [s for s in completion.spans if s.kind == "tool_call"]
    assert len(calls) == len(completion.tool_calls), "one span per call"


def check_values(completion: Completion) -> None:
    for call in completion.tool_calls:
        for value in call.arguments.values():
            if not isinstance(value, str):
                continue
            for match in _JUNCTION.finditer(_QUOTED_BLOCK.sub("\x00", value)):
                assert mk.call_name_problem(match.group(1).strip()) is not None, (
                    "a dispatched value holds a structural junction",
                    call,
                )


def check_round_trip(data: bytes) -> None:
    parts = program_text(data).split("\x00")
    values = parts[:3]
    names = ["a", "b", "c"][: len(values)]
    arguments = dict(zip(names, values, strict=False))
    text = format_tool_call("g", arguments)
    tools = [{"name": "g", "parameters": {"properties": {n: {"type": "string"} for n in names}}}]
    # With the schema saying string (without one, "7" would rightly come back as 7); the
    # schema-free reading of unknown parameters is exercised by check_parse.
    kwargs: dict[str, Any] = {"thinking": False, "tools": tools}
    got = outcome(lambda: parse_completion(text, **kwargs))
    ambiguous = any(map(confusable, values))
    if isinstance(got, Completion):
        calls = [(call.name, call.arguments) for call in got.tool_calls]
        if calls != [("g", arguments)]:
            assert ambiguous, ("round trip", arguments, calls)
    else:
        assert ambiguous, ("ParseError on a plain value", arguments, got)
    if len(values) >= 2 and not ambiguous and values[0] != values[1]:
        # The first parameter given again with another value: refused, never picked.
        second = format_tool_call("g", {"a": values[1]}).split("<parameter=a>", 1)[1]
        duplicate = text.replace(
            "</function>", "<parameter=a>" + second.split("</function>")[0] + "</function>", 1
        )
        twice = outcome(lambda: parse_completion(duplicate, **kwargs))
        assert isinstance(twice, tuple), ("a conflicting duplicate was dispatched", duplicate)
    # Cut before its </tool_call>: never dispatched (unless a value holds a complete call).
    cut = text[: text.rindex(mk.TOOL_CALL_CLOSE)]
    if not any(mk.TOOL_CALL_CLOSE in v for v in values):
        truncated = outcome(lambda: parse_completion(cut, **kwargs))
        assert not isinstance(truncated, Completion) or truncated.tool_calls == (), "cut call ran"


def check_messages(data: bytes, rng: random.Random) -> None:
    text = program_text(data)
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = [{"role": rng.choice(["user", "assistant", "tool", "x"]), "content": text}]
        if rng.random() < 0.5:
            value[0]["tool_calls"] = [{"function": {"name": text[:8], "arguments": text}}]
    if not isinstance(value, list):
        # turns_from_messages(5) / (None) are refused by the conversation layer (a PromptError,
        # not the parser's concern); the fuzzer looks at message lists.
        value = [value]
    with contextlib.suppress(PromptError):
        turns_from_messages(value)


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    target, flags, body = data[0] % _TARGETS, data[1], data[2:]
    rng = random.Random(data)
    if target == 0:
        check_parse(program_text(body), flags, rng)
    elif target == 1:
        check_parse(mk.THINK_CLOSE + program_text(body), flags, rng)
    elif target == 2:
        check_round_trip(body)
    else:
        check_messages(body, rng)


def seeds() -> list[bytes]:
    """Seed inputs: rendered calls and the grammar's tags, as programs."""
    index = {piece: i for i, piece in enumerate(PIECES)}

    def program(text: str) -> bytes:
        out = bytearray()
        pattern = "|".join(re.escape(p) for p in sorted(PIECES, key=len, reverse=True))
        pos = 0
        for match in re.finditer(pattern, text):
            out += bytes(b for b in text[pos : match.start()].encode("latin-1", "ignore"))
            out.append(index[match.group()])
            pos = match.end()
        out += text[pos:].encode("latin-1", "ignore")
        return bytes(out)

    calls = [
        format_tool_call("f", {"a": 7, "b": "x"}),
        format_tool_call("f", {"b": "</parameter>\n<parameter=a>\n1"}),
        format_tool_call("f", {"b": format_tool_call("g", {"a": "1"})}),
    ]
    out = [bytes([t, f]) + program(c) for c in calls for t in (0, 1) for f in (0, 2, 3)]
    out += [bytes([2, 2]) + program("x</parameter>\x00y"), bytes([3, 0]) + b"[]"]
    out += [bytes([0, 0]) + program("```\n" + calls[0] + "\n```\n" + calls[0])]
    return out


def _rss_limit_mb() -> int:
    """libFuzzer's default limit (2,048 MB) over what this process starts with: Linux carries a
    parent's high-water mark across exec into the ru_maxrss libFuzzer reads, and the test suite
    runs this from a process of 2 GB or more, which hit the limit at the first input."""
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # KB on Linux
    return start + 2048


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--crashes", type=Path, default=CORPUS, help="where crashes are saved")
    parser.add_argument("--runs", type=int, default=None, help="stop after this many inputs")
    parser.add_argument("--seed", type=int, default=None, help="libFuzzer's random seed")
    args = parser.parse_args(argv)
    if atheris is None:
        print("atheris is not installed: pip install -e .[test]", file=sys.stderr)
        return 2
    seconds = args.seconds if args.seconds is not None else (args.minutes or 1) * 60
    args.crashes.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        corpus = Path(work) / "corpus"
        corpus.mkdir()
        for i, seed in enumerate(seeds()):
            (corpus / f"seed-{i}").write_bytes(seed)
        atheris.Setup(
            [
                sys.argv[0],
                f"-max_total_time={max(1, int(seconds))}",
                *([f"-runs={args.runs}"] if args.runs is not None else []),
                *([f"-seed={args.seed}"] if args.seed is not None else []),
                f"-artifact_prefix={args.crashes}/",
                f"-rss_limit_mb={_rss_limit_mb()}",
                "-max_len=512",
                "-timeout=20",
                str(corpus),
            ],
            one_input,
        )
        atheris.Fuzz()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
