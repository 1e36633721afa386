"""The parser under hostile input: bad input gets a typed error naming where, deep input a stated
limit, token-ID streaming equals batch on any bytes, and every feed costs amortised O(delta)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qwen_encode as qe
from qwen_encode import markers as mk
from qwen_encode.errors import ParseError, PromptError
from qwen_encode.parser import MAX_DEPTH, StreamParser, parse_completion, typed_parameter_value
from tests.test_parser import BYTES, cut, span, stream

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures" / "qwen3.8-tiny"
QWEN38 = ROOT.parent / "shared" / "checkpoints" / "qwen3.8-27b"


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte -> the character its base token is spelled with."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    alphabet = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in alphabet:
            alphabet[b] = chr(256 + extra)
            extra += 1
    return alphabet


def byte_tokens(encoder: qe.Encoder) -> list[int]:
    """The ID of each byte's base token, index = byte."""
    tokenizer = encoder.vocabulary.tokenizer
    ids = [tokenizer.token_to_id(ch) for _, ch in sorted(_byte_alphabet().items())]
    assert all(i is not None for i in ids)
    return ids  # type: ignore[return-value]


@pytest.fixture(scope="module")
def tiny() -> qe.Encoder:
    return qe.Encoder.from_pretrained(TINY, engine="tokenizers")


@pytest.fixture(scope="module")
def real() -> qe.Encoder:
    if not QWEN38.exists():
        pytest.skip(f"{QWEN38} is absent: the real checkpoint lives in ../shared beside the repo")
    return qe.Encoder.from_pretrained(QWEN38, engine="tokenizers")


# ============================================================================================
# Amortised O(delta) per feed, counted in executed parser lines (not seconds: no timed tests)


def parser_lines(run: Callable[[], Any]) -> int:
    """How many lines of the parser package (every module of ``qwen_encode/parser/``) ``run``
    executes. Counting ``__init__.py`` alone would count only the entry points, never the
    machine's work, and no cost could show."""
    import qwen_encode.parser as module

    folder = str(Path(module.__file__).parent) + os.sep
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if not frame.f_code.co_filename.startswith(folder):
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    return count


def whitespace_in_an_open_call(n: int) -> str:
    # Once quadratic: 0.03 s at n=10k, 1.5 s at 80k, 248 s at 1M, fed one character at a time.
    return (
        "</think><tool_call>\n<function=f>\n"
        + " " * n
        + "<tool_call>\n<function=g>\n</function>\n</tool_call>"
    )


def markup_values(n: int) -> str:
    value = "</parameter>\n<parameter=x>\n</function>\n</tool_call>\n<tool_call>\n<function=h>\n"
    body = value * (n // len(value))
    return "</think>" + span("w", ("content", body), ("path", "p"))


WRITE_TOOL = [{"name": "write_file", "parameters": {"properties": {"path": {}, "content": {}}}}]


def unwrapped_near_misses(n: int) -> str:
    # Content whose every line may still open a call without the wrapper until its last byte.
    line = "<function=write_fil\n<function=write_files>\n"
    return "</think>" + line * (n // len(line))


def unwrapped_tag_then_spaces(n: int) -> str:
    # After a declared tag, whitespace may still lead to "<parameter=": held, appended in O(1).
    return "</think>\n<function=write_file>" + " " * n + "<parameter=path>\np\n</function>"


def unwrapped_blocks(n: int) -> str:
    block = (
        "<function=write_file>\n<parameter=path>\np\n</parameter>\n<parameter=content>\n"
        "</parameter>\n<parameter=path>\n</function>\n</tool_call>\n</parameter>\n</function>\n"
    )
    return "</think>" + block * (n // len(block))


def example_calls_in_a_value(n: int) -> str:
    # Every example repeats the junction that starts `content`: the balance of the tags decides,
    # in one scan per side, not one per candidate.
    example = span("write_file", ("path", "out.txt"), ("content", "hello")) + "\n"
    return "</think>" + span(
        "write_file", ("path", "p"), ("content", example * (n // len(example)))
    )


@pytest.mark.parametrize(
    ("shape", "tools"),
    [
        (whitespace_in_an_open_call, None),
        (markup_values, None),
        (unwrapped_near_misses, WRITE_TOOL),
        (unwrapped_tag_then_spaces, WRITE_TOOL),
        (unwrapped_blocks, WRITE_TOOL),
        (example_calls_in_a_value, WRITE_TOOL),
    ],
)
@pytest.mark.parametrize("kind", ["text", "ids"])
def test_feed_cost_is_linear(shape: Callable[[int], str], tools: Any, kind: str) -> None:
    def run(n: int) -> tuple[int, int]:
        """(most lines one feed ran, lines of the whole run including finish)."""
        text = shape(n)
        deltas: list[Any] = list(text) if kind == "text" else [[i] for i in BYTES.encode(text)]
        parser = StreamParser(tools=tools, encoder=BYTES if kind == "ids" else None)
        most = 0

        def feed(delta: Any) -> None:
            # A malformed span raises; the cost of finding out is what is measured.
            with contextlib.suppress(ParseError):
                parser.feed(delta)

        for delta in deltas:
            most = max(most, parser_lines(lambda d=delta: feed(d)))

        def finish() -> None:
            with contextlib.suppress(ParseError):
                parser.finish()

        return most, most + parser_lines(finish)

    (most_small, total_small), (most_large, total_large) = run(1000), run(4000)
    # One-token feeds each cost a bounded number of lines, whatever the length so far (the old
    # tail re-join walked the whole open span on the feed that completed "<function="), and the
    # whole run grows linearly: 4x the input, ~4x the lines.
    assert most_large <= most_small + 5, (most_small, most_large)
    assert total_large / total_small < 5, (total_small, total_large)


# ============================================================================================
# 9.8: token-ID streaming equals batch for every ID sequence and every chunking


def test_lone_continuation_bytes_then_a_character() -> None:
    ids = [0x80 + 1000] * 8 + BYTES.text("€")
    batch = parse_completion(ids, thinking=False, encoder=BYTES)
    assert batch.content == "\ufffd" * 8 + "€"
    final, _ = stream([[i] for i in ids], thinking=False, encoder=BYTES)
    assert final == batch


_BYTES = st.lists(
    st.sampled_from([0x80, 0xBF, 0xC2, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0xA6, 0x9C, 0xEF, 0xBD])
    | st.integers(0, 255),
    max_size=40,
)


def _check_stream_equals_batch(encoder: Any, ids: list[int], points: list[int]) -> None:
    batch = parse_completion(ids, thinking=False, encoder=encoder)
    final, _events = stream(cut(ids, points), thinking=False, encoder=encoder)
    assert final == batch
    one_by_one, _ = stream([[i] for i in ids], thinking=False, encoder=encoder)
    assert one_by_one == batch


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_BYTES, points=st.lists(st.integers(0, 10**6), max_size=8))
def test_random_bytes_stream_like_batch_byte_encoder(raw: list[int], points: list[int]) -> None:
    _check_stream_equals_batch(BYTES, [b + 1000 for b in raw], points)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_BYTES, points=st.lists(st.integers(0, 10**6), max_size=8))
def test_random_bytes_stream_like_batch_tiny_vocabulary(
    tiny: qe.Encoder, raw: list[int], points: list[int]
) -> None:
    table = byte_tokens(tiny)
    _check_stream_equals_batch(tiny, [table[b] for b in raw], points)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_BYTES, text=st.text(max_size=8), points=st.lists(st.integers(0, 10**6), max_size=8))
def test_random_bytes_stream_like_batch_real_vocabulary(
    real: qe.Encoder, raw: list[int], text: str, points: list[int]
) -> None:
    table = byte_tokens(real)
    # Byte tokens mixed with the real tokenizer's multi-byte tokens.
    merged = list(real.vocabulary.tokenizer.encode(text, add_special_tokens=False).ids)
    ids = (
        [table[b] for b in raw[: len(raw) // 2]] + merged + [table[b] for b in raw[len(raw) // 2 :]]
    )
    _check_stream_equals_batch(real, ids, points)


# ============================================================================================
# 9.7: depth limits and bad tools


def tools_with(schema: Any) -> list[dict[str, Any]]:
    return [{"name": "f", "parameters": {"properties": {"p": schema}}}]


def test_self_referencing_schema() -> None:
    schema: dict[str, Any] = {"type": "integer"}
    schema["anyOf"] = [schema]
    c = parse_completion(span("f", ("p", "7")), tools_with(schema), thinking=False)
    assert c.tool_calls[0].arguments == {"p": 7}


def test_deep_any_of_schema_is_cut_at_the_limit() -> None:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(1000):
        schema = {"anyOf": [schema]}
    # Deeper than MAX_DEPTH the branch constrains nothing: the schema-free rule ("JSON when it
    # parses") reads "7" as 7 and "x" as "x".
    c = parse_completion(span("f", ("p", "7")), tools_with(schema), thinking=False)
    assert c.tool_calls[0].arguments == {"p": 7}
    c = parse_completion(span("f", ("p", "x")), tools_with(schema), thinking=False)
    assert c.tool_calls[0].arguments == {"p": "x"}


def test_deep_json_values_stay_strings() -> None:
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert typed_parameter_value(deep) == deep
    assert isinstance(typed_parameter_value(ok), list)
    huge = "[" * 100_000 + "]" * 100_000
    c = parse_completion(span("f", ("p", huge)), tools_with({"type": "array"}), thinking=False)
    assert c.tool_calls[0].arguments == {"p": huge}
    # Brackets inside JSON strings do not count.
    quoted = json.dumps(["[" * 200])
    assert typed_parameter_value(quoted) == ["[" * 200]


@pytest.mark.parametrize(
    ("tools", "field"),
    [
        ({"name": "f"}, "tools"),
        (5, "tools"),
        ("[not json", "tools"),
        ("[" * 100_000, "tools"),
        ([{"name": "f"}, 7], "tools[1]"),
        ([{"name": "f"}, {"function": {"description": "no name"}}], "tools[1]"),
        ([{"name": "f"}, {"name": 5}], "tools[1]"),
        (["{broken"], "tools[0]"),
    ],
)
def test_bad_tools_name_where(tools: Any, field: str) -> None:
    with pytest.raises(PromptError) as info:
        parse_completion("x", tools=tools)
    assert info.value.field == field
    with pytest.raises(PromptError):
        StreamParser(tools=tools)


# ============================================================================================
# 9.13: huge integers never leak Python's digit-limit ValueError


@pytest.mark.parametrize("schema", [None, {"type": "integer"}, {"type": "number"}])
def test_five_thousand_digit_integer(schema: Any) -> None:
    digits = "9" * 5000
    tools = tools_with(schema) if schema else None
    for raw in (
        digits,
        digits + ".0",
        "1e5000",
        json.dumps({"n": int("9" * 100)})[:-1] + digits + "}",
    ):
        c = parse_completion(span("f", ("p", raw)), tools, thinking=False)
        (value,) = c.tool_calls[0].arguments.values()
        assert value == raw or isinstance(value, int | dict)
        json.loads(json.dumps(c.to_message()))  # the message serialises


# ============================================================================================
# 9.14 / 9.15: wrong argument types and out-of-vocabulary IDs


@pytest.mark.parametrize("flag", ["no", 1, None, "false"])
def test_thinking_must_be_a_bool(flag: Any) -> None:
    with pytest.raises(PromptError) as info:
        parse_completion("x", thinking=flag)
    assert info.value.field == "thinking"
    with pytest.raises(PromptError):
        StreamParser(thinking=flag)


@pytest.mark.parametrize("value", [5, None, b"5", ["5"]])
def test_typed_parameter_value_takes_text(value: Any) -> None:
    with pytest.raises(PromptError):
        typed_parameter_value(value)


@pytest.mark.parametrize("output", [None, {"a": 1}, 5.0, 7, b"text", bytearray(b"x")])
def test_output_of_a_wrong_type(output: Any) -> None:
    with pytest.raises(PromptError) as info:
        parse_completion(output, encoder=BYTES)
    assert info.value.field == "output"
    with pytest.raises(PromptError):
        StreamParser(encoder=BYTES).feed(output)


@pytest.mark.parametrize(
    ("ids", "position"),
    [([1000, 1.5], 1), ([True], 0), ([1000, "7"], 1), ([-1], 0), ([1000, 1000, None], 2)],
)
def test_bad_ids_name_their_position(ids: list[Any], position: int) -> None:
    with pytest.raises(qe.TokenIdError) as info:
        parse_completion(ids, encoder=BYTES)
    assert info.value.position == position


def test_ids_past_the_vocabulary(tiny: qe.Encoder) -> None:
    size = tiny.vocabulary.report.max_token_id + 1
    for bad in (size, 10**7, 2**64):
        with pytest.raises(qe.TokenIdError, match="outside the vocabulary") as info:
            parse_completion([tiny.marker_ids[mk.THINK_CLOSE], bad], encoder=tiny)
        assert info.value.position == 1
    parser = StreamParser(encoder=tiny)
    parser.feed([1, 2])
    with pytest.raises(qe.TokenIdError) as info:
        parser.feed([3, size])
    assert info.value.position == 3  # the position in the whole stream


def test_duck_typed_encoder_may_declare_vocab_size() -> None:
    class Small:
        marker_ids = BYTES.marker_ids
        vocab_size = 1100

        def decode(self, ids: Any) -> str:
            return BYTES.decode(ids)

    assert parse_completion([1000 + ord("a")], thinking=False, encoder=Small()).content == "a"
    with pytest.raises(qe.TokenIdError, match="1,100"):
        parse_completion([1000 + 0xFF], thinking=False, encoder=Small())


def test_feed_after_the_end_and_mixing() -> None:
    parser = StreamParser()
    parser.finish()
    with pytest.raises(PromptError):
        parser.feed("x")
    parser = StreamParser(encoder=BYTES)
    parser.feed([1000])
    with pytest.raises(PromptError):
        parser.feed("text")
    with pytest.raises(PromptError):
        StreamParser().feed([1000])  # IDs without an encoder
