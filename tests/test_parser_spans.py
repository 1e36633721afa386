"""``Completion.spans``: where the reasoning, each piece of content, each call, each parameter
value and the stop came from, as character offsets and (from IDs) token positions. Checked
against the text itself and, on the real vocabulary, against the marker IDs' own positions."""

from __future__ import annotations

import random
from typing import Any

import qwen_encode as qe
from qwen_encode import markers as mk
from qwen_encode.parser import Completion, Span, StreamParser, parse_completion
from qwen_encode.protocol import format_tool_call
from tests.test_parser import BYTES, cut

CALL = format_tool_call("run_shell", {"command": "ls -la\nwc -l *.py", "timeout": 30})
TEXT = (
    "Let me look.\n</think>\n\nSure, listing.\n"
    + CALL
    + "\nThen I'll count </think> lines."
    + mk.TURN_CLOSE
)


def kinds(c: Completion, kind: str) -> list[Span]:
    return [s for s in c.spans if s.kind == kind]


def test_spans_of_a_whole_turn_from_text() -> None:
    c = parse_completion(TEXT)
    assert qe.Span is Span
    (reasoning,) = kinds(c, "reasoning")
    assert TEXT[reasoning.start : reasoning.end] == "Let me look.\n"
    assert TEXT[reasoning.end :].startswith(mk.THINK_CLOSE)
    content = kinds(c, "content")
    assert [TEXT[s.start : s.end] for s in content] == [
        "\n\nSure, listing.\n",
        "\nThen I'll count </think> lines.",
    ]
    (call,) = kinds(c, "tool_call")
    assert TEXT[call.start : call.end] == CALL and call.call_index == 0
    arguments = kinds(c, "argument")
    assert [(s.name, TEXT[s.start : s.end], s.call_index) for s in arguments] == [
        ("command", "ls -la\nwc -l *.py", 0),
        ("timeout", "30", 0),
    ]
    (stop,) = kinds(c, "stop")
    assert TEXT[stop.start : stop.end] == mk.TURN_CLOSE and stop.end == len(TEXT)
    assert all(s.token_start is None and s.token_end is None for s in c.spans)
    assert [s.start for s in c.spans] == sorted(s.start for s in c.spans)


def test_the_content_spans_join_to_the_content() -> None:
    c = parse_completion(TEXT)
    joined = "".join(TEXT[s.start : s.end] for s in kinds(c, "content"))
    assert joined.strip() == c.content


def test_streamed_spans_equal_the_batch_spans() -> None:
    batch = parse_completion(TEXT).spans
    rng = random.Random(7)
    for _ in range(20):
        parser = StreamParser()
        for chunk in cut(TEXT, [rng.randint(0, len(TEXT)) for _ in range(rng.randint(1, 30))]):
            parser.feed(chunk)
        assert parser.finish().spans == batch


def test_byte_ids_give_the_same_offsets_and_one_token_per_character() -> None:
    ids = BYTES.encode(TEXT)
    text_spans = parse_completion(TEXT).spans
    id_spans = parse_completion(ids, encoder=BYTES).spans
    assert [(s.kind, s.start, s.end) for s in id_spans] == [
        (s.kind, s.start, s.end) for s in text_spans
    ]
    # The stand-in maps each marker to one ID and each ASCII character to one byte-token.
    (stop,) = [s for s in id_spans if s.kind == "stop"]
    assert (stop.token_start, stop.token_end) == (len(ids) - 1, len(ids))


def test_a_call_without_parameters_and_several_calls() -> None:
    text = format_tool_call("ping", {}) + "\n" + format_tool_call("ping", {"host": "h"})
    c = parse_completion(text, thinking=False)
    calls = kinds(c, "tool_call")
    assert [text[s.start : s.end] for s in calls] == [
        format_tool_call("ping", {}),
        format_tool_call("ping", {"host": "h"}),
    ]
    assert [s.call_index for s in calls] == [0, 1]
    (argument,) = kinds(c, "argument")
    assert (argument.call_index, argument.name, text[argument.start : argument.end]) == (
        1,
        "host",
        "h",
    )


def test_token_positions_on_the_real_vocabulary(real_ids: Any) -> None:
    encoder, _ = real_ids
    tokenizer = encoder.vocabulary.tokenizer
    ids = list(tokenizer.encode(TEXT, add_special_tokens=False).ids)
    markers = encoder.marker_ids
    c = parse_completion(ids, encoder=encoder)
    decoded = tokenizer.decode(ids, skip_special_tokens=False)
    assert decoded == TEXT
    (reasoning,) = kinds(c, "reasoning")
    assert ids[reasoning.token_end] == markers[mk.THINK_CLOSE]
    (call,) = kinds(c, "tool_call")
    assert ids[call.token_start] == markers[mk.TOOL_CALL_OPEN]
    assert ids[call.token_end - 1] == markers[mk.TOOL_CALL_CLOSE]
    assert decoded[call.start : call.end] == CALL
    for argument in kinds(c, "argument"):
        value = decoded[argument.start : argument.end]
        assert value in tokenizer.decode(ids[argument.token_start : argument.token_end])
        # The tokens hold the value and at most the characters of the tokens at its edges.
        assert argument.token_end > argument.token_start
    (stop,) = kinds(c, "stop")
    assert (stop.token_start, stop.token_end) == (len(ids) - 1, len(ids))
    assert ids[-1] == markers[mk.TURN_CLOSE]
    # Streamed one token at a time: the same spans.
    parser = StreamParser(encoder=encoder)
    for token in ids:
        parser.feed([token])
    assert parser.finish().spans == c.spans


def test_content_tokens_on_the_real_vocabulary(real_ids: Any) -> None:
    encoder, _ = real_ids
    tokenizer = encoder.vocabulary.tokenizer
    text = "Plan.\n</think>\n\nIt is sunny in Zürich 🌞 today." + mk.TURN_CLOSE + mk.END_OF_TEXT
    ids = list(tokenizer.encode(text, add_special_tokens=False).ids)
    c = parse_completion(ids, encoder=encoder)
    (content,) = kinds(c, "content")
    assert ids[content.token_start - 1] == encoder.marker_ids[mk.THINK_CLOSE]
    assert tokenizer.decode(ids[content.token_start : content.token_end]) == (
        "\n\nIt is sunny in Zürich 🌞 today."
    )
    (stop,) = kinds(c, "stop")
    assert (stop.token_start, stop.token_end) == (len(ids) - 2, len(ids))
    assert (c.stop, c.stop_extra) == (mk.TURN_CLOSE, (mk.END_OF_TEXT,))


def test_characters_split_over_several_byte_tokens() -> None:
    # The byte stand-in gives each UTF-8 byte its own token: a span's tokens are exactly the
    # bytes of its characters, never half a character.
    value = "Zürich 🌞 — 東京"
    text = format_tool_call("run_shell", {"command": f"echo {value}"}) + "\nDone ✅."
    ids = BYTES.encode(text)
    c = parse_completion(ids, encoder=BYTES, thinking=False)
    (argument,) = kinds(c, "argument")
    assert BYTES.decode(ids[argument.token_start : argument.token_end]) == f"echo {value}"
    (content,) = kinds(c, "content")
    assert BYTES.decode(ids[content.token_start : content.token_end]) == "\nDone ✅."
    streamed = StreamParser(encoder=BYTES, thinking=False)
    for token in ids:
        streamed.feed([token])
    assert streamed.finish().spans == c.spans
