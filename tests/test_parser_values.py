"""A value is data until the rest of the output confirms its end; quoted examples are
never run. Each realistic agent output is checked in batch, streamed by text (one character at a
time and in random chunks), and streamed by token ID, with the tiny byte-level stand-in and with
the real Qwen 3.8 vocabulary (markers as their atomic IDs, as the model emits them).

Expected values are written out by hand from what the agent meant to send; the call texts are
built with the protocol layer's own renderer (``format_tool_call``), as the model would write
them, never from the parser's output.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qwen_encode import markers as mk
from qwen_encode.conversation import ToolCall, Turn
from qwen_encode.errors import ParseError
from qwen_encode.parser import (
    Completion,
    ContentDelta,
    StreamParser,
    parse_completion,
    parse_tool_call,
    typed_parameter_value,
)
from qwen_encode.protocol import format_tool_call, format_turn
from tests.test_parser import BYTES, check_events, cut, stream


def tool(name: str, *params: str, types: dict[str, str] | None = None) -> dict[str, Any]:
    types = types or {}
    properties = {p: {"type": types.get(p, "string")} for p in params}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


WRITE = tool("write_file", "path", "content")
EDIT = tool("edit_file", "path", "old_string", "new_string")
PING = tool("ping", "host")
TOOLS = [WRITE, EDIT, PING]

FORMAT_DOC = (
    "# The call format\n\n"
    "Format: <tool_call><function=demo></function></tool_call> (single line)\n\n"
    "Multi-line:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n</function>\n</tool_call>\n"
)
FIXTURE = format_tool_call("get_weather", {"city": "Paris", "unit": "celsius"}) + "\n"
EDIT_NEW = (
    'EXPECTED = """\n<parameter=path>\na.py\n</parameter>\n<parameter=old_string>\nx = 1\n'
    '</parameter>\n"""\n'
)


def everywhere(
    text: str,
    expected: Completion | type[ParseError],
    real: Any,
    thinking: bool = False,
    tools: Any = TOOLS,
) -> None:
    """Batch, streamed by text and streamed by IDs all give ``expected``."""
    kwargs: dict[str, Any] = {"tools": tools, "thinking": thinking}
    rng = random.Random(text)
    runs: list[tuple[list[Any], dict[str, Any]]] = [
        ([text], kwargs),
        (list(text), kwargs),
        (cut(text, [rng.randint(0, len(text)) for _ in range(12)]), kwargs),
        ([[i] for i in BYTES.encode(text)], {**kwargs, "encoder": BYTES}),
    ]
    encoder, ids = real
    if encoder is not None:
        runs.append(([[i] for i in ids(text)], {**kwargs, "encoder": encoder}))
    if isinstance(expected, type):
        with pytest.raises(expected):
            parse_completion(text, **kwargs)
        for chunks, options in runs:
            with pytest.raises(expected):
                stream(chunks, **options)
        return
    assert parse_completion(text, **kwargs) == expected
    for chunks, options in runs:
        final, events = stream(chunks, **options)
        assert final == expected
        check_events(final, events)


class TestValuesHoldingMarkup:
    def test_markdown_file_documenting_the_format(self, real: Any) -> None:
        args = {"path": "docs/format.md", "content": FORMAT_DOC}
        text = "I'll document it.\n\n" + format_tool_call("write_file", args)
        everywhere(
            text,
            Completion(content="I'll document it.", tool_calls=(ToolCall("write_file", args),)),
            real,
        )

    def test_test_fixture_holding_a_complete_call(self, real: Any) -> None:
        # Both parameter orders: the fixture's closers are followed by the real ones (orphans
        # for any earlier end) or by a later <parameter=path>.
        for args in (
            {"path": "tests/fixture.txt", "content": FIXTURE},
            {"content": FIXTURE, "path": "tests/fixture.txt"},
        ):
            text = format_tool_call("write_file", args)
            everywhere(text, Completion(tool_calls=(ToolCall("write_file", args),)), real)

    def test_fixture_of_a_call_to_the_same_tool(self, real: Any) -> None:
        # The fixture's "</parameter>\n<parameter=content>" could start `content` too; read so,
        # `path` would end in an orphan "</parameter>" and open tags, and `content` would hold
        # three orphan closers. The reading that keeps the example whole is the one meant.
        fixture = format_tool_call("write_file", {"path": "out.txt", "content": "hello"})
        for args in (
            {"path": "tests/fixtures/call.txt", "content": fixture},
            {"path": "tests/fixtures/call.txt", "content": 'doc = """\n' + fixture + '\n"""'},
        ):
            text = format_tool_call("write_file", args)
            everywhere(text, Completion(tool_calls=(ToolCall("write_file", args),)), real)

    def test_value_ending_in_two_example_calls(self, real: Any) -> None:
        # Closing the real call at the first example's </tool_call> leaves no orphan either:
        # the second example would then be a call holding the real closers. Only the reading
        # whose </tool_call> matches its own <tool_call> keeps both examples whole.
        ping = format_tool_call("ping", {"host": "example.com"})
        doc = "# Calls\n\nTwo pings:\n\n" + ping + "\n" + ping
        args = {"path": "docs/calls.md", "content": doc}
        text = format_tool_call("write_file", args) + "\nWritten."
        expected = Completion(content="Written.", tool_calls=(ToolCall("write_file", args),))
        everywhere(text, expected, real)

    def test_python_fixture_then_a_second_call(self, real: Any) -> None:
        fixture = format_tool_call("write_file", {"path": "out.txt", "content": "hello"})
        module = (
            f'FIXTURE = """\n{fixture}\n"""\n\n\ndef test_parse():\n    assert parse(FIXTURE)\n'
        )
        first = {"path": "tests/test_fixture.py", "content": module}
        second = {"path": "tests/__init__.py", "content": ""}
        text = format_tool_call("write_file", first) + "\n" + format_tool_call("write_file", second)
        expected = Completion(
            tool_calls=(ToolCall("write_file", first), ToolCall("write_file", second))
        )
        everywhere(text, expected, real)

    def test_edit_whose_new_string_holds_a_parameter_junction(self, real: Any) -> None:
        args = {
            "path": "tests/test_x.py",
            "old_string": "EXPECTED = None\n",
            "new_string": EDIT_NEW,
        }
        text = format_tool_call("edit_file", args)
        assert "</parameter>\n<parameter=old_string>" in text.split("<parameter=new_string>")[1]
        # Read structurally, path and old_string are each given twice with different values:
        # never a silent pick (README, Limitations: the template writes both readings alike).
        with pytest.raises(ParseError, match="given twice with different values") as info:
            parse_completion(text, tools=TOOLS, thinking=False)
        assert info.value.offset == text.index("a.py")
        assert str(text.index("tests/test_x.py")) in info.value.reason

    def test_two_calls_each_holding_markup_then_content(self, real: Any) -> None:
        first = {"path": "a.md", "content": FORMAT_DOC}
        second = {"path": "b.txt", "content": FIXTURE}
        text = format_tool_call("write_file", first) + "\n" + format_tool_call("write_file", second)
        expected = Completion(
            tool_calls=(ToolCall("write_file", first), ToolCall("write_file", second))
        )
        everywhere(text, expected, real)

    def test_tool_call_close_inside_a_value_in_token_ids(self) -> None:
        # The model may emit the atomic </tool_call> inside the data: still data.
        doc = "close with " + mk.TOOL_CALL_CLOSE + " then stop"
        ids = (
            BYTES.marker(mk.TOOL_CALL_OPEN)
            + BYTES.text("\n<function=write_file>\n<parameter=path>\nx\n</parameter>\n")
            + BYTES.text("<parameter=content>\nclose with ")
            + BYTES.marker(mk.TOOL_CALL_CLOSE)
            + BYTES.text(" then stop\n</parameter>\n</function>\n")
            + BYTES.marker(mk.TOOL_CALL_CLOSE)
        )
        c = parse_completion(ids, tools=TOOLS, thinking=False, encoder=BYTES)
        assert c.tool_calls == (ToolCall("write_file", {"path": "x", "content": doc}),)


class TestAmbiguity:
    def test_two_readings_of_one_text_raise(self) -> None:
        # new_string (written before old_string, against the schema's order) holds
        # "</parameter>\n<parameter=old_string>\n": either occurrence could be the real one, and
        # both readings render to exactly this text.
        args = {
            "path": "f",
            "new_string": "a\n</parameter>\n<parameter=old_string>\nb",
            "old_string": "c",
        }
        text = format_tool_call("edit_file", args)
        with pytest.raises(ParseError, match="given twice with different values") as info:
            parse_completion(text, tools=TOOLS, thinking=False)
        first = text.index("b\n</parameter>")
        second = text.index("c\n</parameter>")
        assert info.value.offset == second
        assert str(first) in info.value.reason and str(second) in info.value.reason
        assert "'b'" in info.value.reason and "'c'" in info.value.reason

    def test_without_a_schema_a_repeated_name_is_ambiguous(self) -> None:
        text = format_tool_call("f", {"a": "1", "b": "x\n</parameter>\n<parameter=c>\n2", "c": "3"})
        with pytest.raises(ParseError, match="given twice with different values"):
            parse_completion(text, thinking=False)


class TestQuotedExamples:
    CALL = format_tool_call("ping", {"host": "example.com"})

    @pytest.mark.parametrize("fence", ["```", "~~~", "   ```xml"])
    def test_fenced_block_in_content_is_text(self, fence: str, real: Any) -> None:
        # vLLM issue 57541: a call quoted in a fenced block was run.
        close = fence.strip()[:3]
        text = f"Here is how a call looks:\n{fence}\n{self.CALL}\n{close}\nThat's all."
        everywhere(text, Completion(content=text), real)

    def test_a_call_after_the_fence_still_runs(self, real: Any) -> None:
        quoted = f"Example:\n```\n{self.CALL}\n```\n"
        text = quoted + self.CALL
        expected = Completion(
            content=quoted.strip(), tool_calls=(ToolCall("ping", {"host": "example.com"}),)
        )
        everywhere(text, expected, real)

    def test_after_a_call_a_fenced_example_is_text_and_the_next_call_runs(self, real: Any) -> None:
        first = format_tool_call("write_file", {"path": "a.txt", "content": "a"})
        quoted = "\nTo ping, write:\n~~~\n" + self.CALL + "\n~~~\nPinging now.\n"
        text = first + quoted + self.CALL
        expected = Completion(
            content=quoted.strip(),
            tool_calls=(
                ToolCall("write_file", {"path": "a.txt", "content": "a"}),
                ToolCall("ping", {"host": "example.com"}),
            ),
        )
        everywhere(text, expected, real)

    def test_a_fence_inside_a_value_quotes_nothing_after_the_call(self, real: Any) -> None:
        # Fences are tracked in content only: a value's unclosed ``` is the file's business.
        readme = "# Demo\n\n```python\nprint('hi')\n"
        first = {"path": "README.md", "content": readme}
        text = format_tool_call("write_file", first) + "\nNow the check:\n" + self.CALL
        expected = Completion(
            content="Now the check:",
            tool_calls=(ToolCall("write_file", first), ToolCall("ping", {"host": "example.com"})),
        )
        everywhere(text, expected, real)

    def test_fence_markers_must_match(self) -> None:
        # A ~~~ line does not close a ``` fence.
        text = f"```\n~~~\n{self.CALL}\n```\n"
        assert parse_completion(text, tools=TOOLS, thinking=False).tool_calls == ()

    def test_code_span_in_unclosed_reasoning_is_text(self, real: Any) -> None:
        # With no </think>, the first <tool_call> + <function= ends reasoning, but not one quoted
        # in a code span: the quoted ping stayed a call and ran twice.
        reasoning = "I could call `" + self.CALL + "` here; let me do it."
        text = reasoning + "\n" + self.CALL
        expected = Completion(
            reasoning=reasoning, tool_calls=(ToolCall("ping", {"host": "example.com"}),)
        )
        everywhere(text, expected, real, thinking=True)

    def test_code_span_of_three_backticks_cut_by_the_stream(self, real: Any) -> None:
        # Streamed one character at a time, each ``` came as three runs of one and the lone
        # backtick inside counted as a run of its own: the span stayed open and the real call
        # below was read as quoted (found by the fuzzer).
        reasoning = "In Markdown, ```a ` b``` shows a lone backtick; now the ping:"
        text = reasoning + self.CALL  # on the same line: a span open there would quote it
        expected = Completion(
            reasoning=reasoning, tool_calls=(ToolCall("ping", {"host": "example.com"}),)
        )
        everywhere(text, expected, real, thinking=True)

    def test_code_span_opening_a_line_quotes_the_marker(self, real: Any) -> None:
        # "``" at line start might still have become a ``` fence line when the marker came; it
        # opens a code span all the same, and the quoted opener must not end reasoning.
        reasoning = "The opener:\n``<tool_call><function=ping>``, then the parameters."
        text = reasoning + "\n" + self.CALL
        expected = Completion(
            reasoning=reasoning, tool_calls=(ToolCall("ping", {"host": "example.com"}),)
        )
        everywhere(text, expected, real, thinking=True)

    def test_backticks_in_an_info_string_quote_nothing(self, real: Any) -> None:
        # The rest of a fence line is its info string; streamed, it came in pieces that were
        # scanned for code spans, and the "````" opened one that quoted the real call.
        reasoning = "Example:\n~~~ (```` marks a fence too)\n" + self.CALL + "\n~~~\nso:"
        text = reasoning + self.CALL
        expected = Completion(
            reasoning=reasoning, tool_calls=(ToolCall("ping", {"host": "example.com"}),)
        )
        everywhere(text, expected, real, thinking=True)

    def test_a_line_with_text_after_the_run_closes_no_fence(self, real: Any) -> None:
        # CommonMark: a closing fence line holds nothing after its run but spaces, so the
        # fence is still open and the call after it is quoted: reasoning, never dispatched.
        text = "Example:\n~~~\n" + self.CALL + "\n~~~ (```` marks a fence too), so:" + self.CALL
        everywhere(text, Completion(reasoning=text), real, thinking=True)

    def test_fence_in_unclosed_reasoning_is_text(self, real: Any) -> None:
        reasoning = "Plan:\n```\n" + self.CALL + "\n```\nNow the real one."
        text = reasoning + "\n" + self.CALL
        expected = Completion(
            reasoning=reasoning, tool_calls=(ToolCall("ping", {"host": "example.com"}),)
        )
        everywhere(text, expected, real, thinking=True)


class TestStrayThinkClose:
    def test_kept_in_content_and_history_renders_back_the_same(self, real: Any) -> None:
        text = "why\n</think>\n\nThe answer</think> is 4."
        expected = Completion(reasoning="why", content="The answer</think> is 4.")
        everywhere(text, expected, real, thinking=True)
        # The turn goes back into history and is read again as the same turn.
        rendered = format_turn(expected.to_turn()).text
        body = rendered[len(mk.TURN_OPEN + "assistant\n") : -len(mk.TURN_CLOSE + "\n")]
        assert parse_completion(body, thinking=False) == expected

    def test_by_id_the_atomic_marker_is_content_too(self) -> None:
        ids = (
            BYTES.marker(mk.THINK_CLOSE)
            + BYTES.text("a ")
            + BYTES.marker(mk.THINK_CLOSE)
            + BYTES.text("b </think> c")
        )
        assert parse_completion(ids, encoder=BYTES).content == "a </think>b </think> c"

    def test_after_a_call(self) -> None:
        text = format_tool_call("ping", {"host": "h"}) + "\n</think>done"
        c = parse_completion(text, tools=TOOLS, thinking=False)
        assert c.content == "</think>done"


class TestNames:
    @pytest.mark.parametrize("name", ["{{ tc.name }}", "a'b", 'x"y', "{name}"])
    def test_a_function_name_the_format_cannot_carry_is_not_a_call(self, name: str) -> None:
        text = f"<tool_call>\n<function={name}>\n</function>\n</tool_call>"
        with pytest.raises(ParseError, match="function name") as info:
            parse_completion(text, thinking=False)
        assert info.value.offset == text.index("<function=")

    def test_a_first_parameter_name_the_format_cannot_carry(self) -> None:
        text = span_text("f", ("{{ p }}", "1"))
        with pytest.raises(ParseError, match="parameter name"):
            parse_completion(text, thinking=False)

    def test_a_later_bad_name_is_data(self) -> None:
        text = span_text("f", ("a", "1\n</parameter>\n<parameter={x}>\n2"))
        c = parse_completion(text, thinking=False)
        assert c.tool_calls == (ToolCall("f", {"a": "1\n</parameter>\n<parameter={x}>\n2"}),)


def span_text(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<parameter={p}>\n{v}\n</parameter>\n" for p, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


class TestDrift:
    def test_drifted_parameter_closer(self) -> None:
        # SGLang Qwen3CoderDetector: models drift to </parameter1>-style closers.
        text = (
            "<tool_call>\n<function=ping>\n<parameter=host>\nexample.com\n</parameter1>\n"
            "</function>\n</tool_call>"
        )
        c = parse_completion(text, tools=TOOLS, thinking=False)
        assert c.tool_calls == (ToolCall("ping", {"host": "example.com"}),)

    def test_parameter_closer_missing_its_bracket(self, real: Any) -> None:
        # SGLang: "</parameter" then the line break; read as data it gave city the whole text.
        text = (
            "<tool_call>\n<function=edit_file>\n<parameter=path>\na.py\n</parameter\n"
            "<parameter=old_string>\nx = 1\n</parameter>\n</function>\n</tool_call>"
        )
        call = ToolCall("edit_file", {"path": "a.py", "old_string": "x = 1"})
        everywhere(text, Completion(tool_calls=(call,)), real)


class TestTyping:
    def test_schema_typing_from_issue_10(self) -> None:
        tools = [tool("t", "n", "b", "x", types={"n": "integer", "b": "boolean", "x": "number"})]
        text = span_text("t", ("n", "007"), ("b", "FALSE"), ("x", "5.0"))
        (call,) = parse_completion(text, tools=tools, thinking=False).tool_calls
        assert call.arguments == {"n": 7, "b": False, "x": 5.0}
        assert isinstance(call.arguments["x"], float)
        big = "123456789" * 10
        (call,) = parse_completion(
            span_text("t", ("n", big)), tools=tools, thinking=False
        ).tool_calls
        assert call.arguments["n"] == int(big)

    def test_without_a_schema_nothing_changes(self) -> None:
        (call,) = parse_completion(
            span_text("u", ("n", "007"), ("b", "TRUE")), thinking=False
        ).tool_calls
        assert call.arguments == {"n": "007", "b": "TRUE"}


# ============================================================================================
# Round trip: every rendered call parses back to itself, or the text is provably ambiguous.

_PIECES = [
    "</parameter>",
    "<parameter=",
    "</function>",
    "<function=",
    "<parameter=a>",
    "<parameter=b>",
    "<function=g>",
    mk.TOOL_CALL_OPEN,
    mk.TOOL_CALL_CLOSE,
    mk.THINK_CLOSE,
    "\n",
    " ",
    "x",
    ">",
    "```",
    "日",
]
_VALUE = st.lists(st.sampled_from(_PIECES) | st.text(max_size=3), max_size=12).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(_VALUE, min_size=1, max_size=3),
    schema=st.booleans(),
    points=st.lists(st.integers(0, 10**6), max_size=6),
)
def test_every_rendered_call_parses_back_or_is_provably_ambiguous(
    values: list[str], schema: bool, points: list[int]
) -> None:
    """``format_tool_call`` output with markup-filled values: the parse is the same call, or a
    ParseError, or a call that renders to exactly the same text (then no parser can tell the two
    apart: the README's Limitations). Never anything else, streamed or not."""
    names = ["a", "b", "c"][: len(values)]
    arguments = dict(zip(names, values, strict=True))
    text = format_tool_call("g", arguments)
    tools = [tool("g", *names)] if schema else None
    try:
        got = parse_completion(text, tools=tools, thinking=False)
    except ParseError:
        got = None
    ids = BYTES.encode(text)
    try:
        streamed = stream(cut(ids, points), tools=tools, thinking=False, encoder=BYTES)[0]
    except ParseError:
        streamed = None
    assert streamed == got
    if got is None:
        assert any(map(_confusable, values)), "a ParseError only where the README says"
        return
    assert got.content is None and got.unterminated is None
    (call,) = got.tool_calls
    # Without a schema a value that is JSON text comes back as JSON ("0" is 0).
    expected = arguments if schema else {k: typed_parameter_value(v) for k, v in arguments.items()}
    if call.arguments != expected:
        assert any(map(_confusable, values)), (expected, call.arguments)


# What the README's Limitations list as provably ambiguous inside a value: a "</parameter>"
# followed by a tag or the end, a line-start "<parameter=" or "</function>", or a complete call.
_CONFUSABLE = re.compile(
    r"</parameter[A-Za-z0-9_-]{0,16}>\s*(?:<parameter=|</function>|\Z)|(?:^|\n)(?:<parameter=|</function>)"
)


def _confusable(value: str) -> bool:
    if _CONFUSABLE.search(value):
        return True
    return mk.TOOL_CALL_OPEN in value and "<function=" in value and mk.TOOL_CALL_CLOSE in value


def test_history_round_trip_of_a_turn_with_markup() -> None:
    turn = Turn(
        "assistant",
        content="Writing the docs.",
        reasoning="The user wants docs.",
        tool_calls=(ToolCall("write_file", {"path": "d.md", "content": FORMAT_DOC}),),
    )
    rendered = format_turn(turn).text
    body = rendered[len(mk.TURN_OPEN + "assistant\n") : -len(mk.TURN_CLOSE + "\n")]
    assert parse_completion(body, tools=TOOLS, thinking=False).to_turn() == turn


# ============================================================================================
# A call without the <tool_call> wrapper: a complete line-start <function=NAME>…</function> of a
# declared tool, outside reasoning and fences (vLLM and llama.cpp dispatch it).

SETUP_CFG = "[metadata]\nname = demo\nversion = 0.1\n"
UNWRAPPED_WRITE = (
    "<function=write_file>\n<parameter=path>\nsetup.cfg\n</parameter>\n"
    f"<parameter=content>\n{SETUP_CFG}\n</parameter>\n</function>"
)
WRITE_SETUP = ToolCall("write_file", {"path": "setup.cfg", "content": SETUP_CFG})


class TestUnwrappedCalls:
    def test_a_declared_block_after_prose_is_dispatched(self, real: Any) -> None:
        text = "Writing the config.\n\n" + UNWRAPPED_WRITE + "\n\nDone."
        expected = Completion(content="Writing the config.\n\n\n\nDone.", tool_calls=(WRITE_SETUP,))
        everywhere(text, expected, real)

    def test_two_blocks_and_a_wrapped_call(self, real: Any) -> None:
        ping = "<function=ping>\n<parameter=host>example.com</parameter>\n</function>"
        text = UNWRAPPED_WRITE + "\n" + ping + "\n" + format_tool_call("ping", {"host": "b"})
        expected = Completion(
            tool_calls=(
                WRITE_SETUP,
                ToolCall("ping", {"host": "example.com"}),
                ToolCall("ping", {"host": "b"}),
            )
        )
        everywhere(text, expected, real)

    def test_after_a_wrapped_call(self, real: Any) -> None:
        text = format_tool_call("ping", {"host": "a"}) + "\nAnd the config:\n" + UNWRAPPED_WRITE
        expected = Completion(
            content="And the config:", tool_calls=(ToolCall("ping", {"host": "a"}), WRITE_SETUP)
        )
        everywhere(text, expected, real)

    def test_its_own_tool_call_closer_goes_with_it(self, real: Any) -> None:
        # vLLM's missing-opening-tag case: only <tool_call> was dropped.
        text = "Checking.\n" + UNWRAPPED_WRITE + "\n</tool_call>"
        everywhere(text, Completion(content="Checking.", tool_calls=(WRITE_SETUP,)), real)

    def test_missing_parameter_closers_are_repaired_as_in_a_span(self, real: Any) -> None:
        text = "<function=edit_file>\n<parameter=path>a.py\n<parameter=old_string>x\n</function>"
        expected = Completion(
            tool_calls=(ToolCall("edit_file", {"path": "a.py", "old_string": "x"}),)
        )
        everywhere(text, expected, real)

    @pytest.mark.parametrize(
        ("text", "tools"),
        [
            pytest.param("Writing.\n" + UNWRAPPED_WRITE, None, id="no-tools-list"),
            pytest.param(
                "Writing.\n" + UNWRAPPED_WRITE.replace("write_file", "write_files"),
                TOOLS,
                id="undeclared",
            ),
            pytest.param("Writing: " + UNWRAPPED_WRITE, TOOLS, id="mid-line"),
            pytest.param("Writing.\n " + UNWRAPPED_WRITE, TOOLS, id="indented"),
            pytest.param(
                "Writing.\n" + UNWRAPPED_WRITE[: -len("</function>")], TOOLS, id="cut-off"
            ),
            pytest.param("Writing.\n" + UNWRAPPED_WRITE[:25], TOOLS, id="cut-in-the-tag"),
            pytest.param("Like this:\n```\n" + UNWRAPPED_WRITE + "\n```\n", TOOLS, id="fenced"),
            pytest.param("Note:\n<function=ping>\nhello\n</function>", TOOLS, id="no-parameters"),
        ],
    )
    def test_what_stays_content(self, text: str, tools: Any, real: Any) -> None:
        everywhere(text, Completion(content=text.strip()), real, tools=tools)

    def test_inside_a_value_after_a_quoted_closer_it_is_data(self, real: Any) -> None:
        # Read as a call closed at the quoted </tool_call> plus an unwrapped ping, the value's
        # real closers would be the ping's; the wrapper is the model's word that this is one
        # call, and an unwrapped block never beats a reading that keeps the text inside it.
        doc = (
            "A call ends with\n</tool_call>\nand one without the wrapper looks like\n"
            "<function=ping>"
        )
        args = {"path": "docs/format.md", "content": doc}
        text = format_tool_call("write_file", args)
        everywhere(text, Completion(tool_calls=(ToolCall("write_file", args),)), real)

    def test_a_line_start_parameter_in_a_value_without_a_closer_ends_it(self) -> None:
        # The structural reading first: a line-start <parameter=host> with no </parameter>
        # before it ends the value (the peers' repair); host is kept and named undeclared.
        doc = "One without the wrapper looks like\n<function=ping>\n<parameter=host>\nexample.com"
        text = format_tool_call("write_file", {"path": "docs/format.md", "content": doc})
        (call,) = parse_completion(text, tools=TOOLS, thinking=False).tool_calls
        assert call.arguments == {
            "path": "docs/format.md",
            "content": "One without the wrapper looks like\n<function=ping>",
            "host": "example.com",
        }
        assert call.undeclared == ("host",)

    def test_parse_tool_call_returns_it(self) -> None:
        text = "Checking.\n" + UNWRAPPED_WRITE + "\n" + format_tool_call("ping", {"host": "h"})
        assert parse_tool_call(text, tools=TOOLS) == WRITE_SETUP
        assert parse_tool_call(text) == ToolCall("ping", {"host": "h"})

    def test_in_reasoning_it_is_reasoning(self, real: Any) -> None:
        text = "Maybe:\n" + UNWRAPPED_WRITE + "\nNo, ask first."
        everywhere(text, Completion(reasoning=text), real, thinking=True)

    def test_after_a_fence_closes_it_runs(self, real: Any) -> None:
        quoted = "Like this:\n~~~\n" + UNWRAPPED_WRITE + "\n~~~\nNow for real:\n"
        text = quoted + UNWRAPPED_WRITE
        everywhere(text, Completion(content=quoted.strip(), tool_calls=(WRITE_SETUP,)), real)

    def test_a_fence_after_a_call_quotes_a_later_call(self, real: Any) -> None:
        # Fences in content are tracked after the first call too.
        first = format_tool_call("ping", {"host": "a"})
        quoted = "\nExample:\n```\n" + first + "\n" + UNWRAPPED_WRITE + "\n```\nDone."
        text = first + quoted
        expected = Completion(content=quoted.strip(), tool_calls=(ToolCall("ping", {"host": "a"}),))
        everywhere(text, expected, real)


def test_content_streams_while_no_unwrapped_call_can_start() -> None:
    """Content is held back only while it is a prefix of a declared tool's line-start tag."""
    parser = StreamParser(tools=TOOLS, thinking=False)
    said = ""
    for ch in "Intro\n<functional style>\n<function=ping_all>\n<function=writ":
        said += "".join(e.text for e in parser.feed(ch) if isinstance(e, ContentDelta))
    assert said == "Intro\n<functional style>\n<function=ping_all>\n"
    said += "".join(e.text for e in parser.feed("x") if isinstance(e, ContentDelta))
    assert said.endswith("<function=writx")
    for ch in "\n<function=ping>\n<parameter=host>\nh\n</parameter>\n":
        said += "".join(e.text for e in parser.feed(ch) if isinstance(e, ContentDelta))
    assert not said.endswith("\n<function=ping>\n"), "a possible call is not content yet"
    parser.feed("</function>")
    assert parser.finish().tool_calls == (ToolCall("ping", {"host": "h"}),)


def test_a_declared_tag_in_prose_is_held_only_until_the_block_shape_fails() -> None:
    parser = StreamParser(tools=TOOLS, thinking=False)
    said = ""
    for ch in "Intro\n<function=ping>  \n is how a ping starts; then more prose.":
        said += "".join(e.text for e in parser.feed(ch) if isinstance(e, ContentDelta))
    assert said == "Intro\n<function=ping>  \n is how a ping starts; then more prose."
    # The tag, whitespace and a prefix of "<parameter=" are held; one more character decides.
    for ch in "\n<function=ping>\n\n<param":
        said += "".join(e.text for e in parser.feed(ch) if isinstance(e, ContentDelta))
    assert said.endswith("prose.\n")
    said += "".join(e.text for e in parser.feed("s>") if isinstance(e, ContentDelta))
    assert said.endswith("prose.\n<function=ping>\n\n<params>")
    assert parser.finish().tool_calls == ()
