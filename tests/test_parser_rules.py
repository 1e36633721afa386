"""The parser's repair and refusal rules, from realistic agent outputs: a value whose
``</parameter>`` the model dropped, a parameter the schema does not declare, a parameter given
twice, a ``</think>`` quoted in prose, CommonMark fences and code spans, the stop marker that
ends the turn. Each case is checked in batch, streamed by text in random chunkings, and streamed
by token ID, with the byte-level stand-in and with the real Qwen 3.8 vocabulary (markers as
their atomic IDs, as the model emits them).

Expected values are written by hand from what the agent meant (the peers' own tests for the
repairs: vLLM's ``test_extract_tool_calls_missing_closing_parameter_tag``); never from the
parser's output.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from qwen_encode import markers as mk
from qwen_encode.conversation import ToolCall
from qwen_encode.errors import ParseError
from qwen_encode.parser import Completion, StreamParser, parse_completion
from tests.test_parser import BYTES, check_events, cut


def tool(name: str, **types: str) -> dict[str, Any]:
    properties = {p: {"type": t} for p, t in types.items()}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


WEATHER = tool("get_current_weather", city="string", state="string", unit="string")
SHELL = tool("run_shell", command="string", timeout="integer")
EDIT = tool("edit_file", path="string", old_string="string", new_string="string")
TOOLS = [WEATHER, SHELL, EDIT]


def _stream(chunks: list[Any], **kwargs: Any) -> Completion:
    parser = StreamParser(**kwargs)
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.flush()
    final = parser.finish()
    check_events(final, events)
    return final


def results(text: str, real: Any, **kwargs: Any) -> Iterator[tuple[str, Any]]:
    """(how, Completion or ParseError): batch, streamed by text in random chunkings, streamed by
    byte IDs and by the real vocabulary's IDs (whole and in random chunkings)."""
    rng = random.Random(text)

    def run(how: str, call: Any) -> tuple[str, Any]:
        try:
            return how, call()
        except ParseError as error:
            return how, error

    yield run("batch", lambda: parse_completion(text, **kwargs))
    yield run("chars", lambda: _stream(list(text), **kwargs))
    for k in range(4):
        chunks = cut(text, [rng.randint(0, len(text)) for _ in range(rng.randint(1, 12))])
        yield run(f"chunks{k}", lambda chunks=chunks: _stream(chunks, **kwargs))
    byte_ids = BYTES.encode(text)
    yield run("byte ids", lambda: _stream([[i] for i in byte_ids], encoder=BYTES, **kwargs))
    encoder, encode = real
    if encoder is not None:
        ids = encode(text)
        yield run("real ids", lambda: parse_completion(ids, encoder=encoder, **kwargs))
        for k in range(3):
            chunks = cut(ids, [rng.randint(0, len(ids)) for _ in range(rng.randint(1, 12))])
            yield run(
                f"real id chunks{k}",
                lambda chunks=chunks: _stream(chunks, encoder=encoder, **kwargs),
            )


def calls_everywhere(text: str, real: Any, **kwargs: Any) -> tuple[ToolCall, ...]:
    """The calls, the same in every way of reading ``text``; checked for no error."""
    seen = None
    for how, got in results(text, real, **kwargs):
        assert not isinstance(got, ParseError), (how, got)
        if seen is None:
            seen = got
        assert got == seen, how
        # (getattr: the same checks run against the parser before ToolCall.undeclared existed)
        named = [getattr(c, "undeclared", ()) for c in got.tool_calls]
        assert named == [getattr(c, "undeclared", ()) for c in seen.tool_calls], how
    assert seen is not None
    return seen.tool_calls


def call_text(name: str, *params: tuple[str, str], close_each: bool = True) -> str:
    body = "".join(
        f"<parameter={p}>\n{v}\n" + ("</parameter>\n" if close_each else "") for p, v in params
    )
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


class TestMissingParameterClose:
    def test_vllm_missing_closing_parameter_tag(self, real: Any) -> None:
        # vLLM tests/tool_parsers/test_qwen3coder_tool_parser.py,
        # test_extract_tool_calls_missing_closing_parameter_tag: city="Dallas", state="TX".
        text = (
            "Let me check the weather for you:\n\n<tool_call>\n<function=get_current_weather>\n"
            "<parameter=city>\nDallas\n<parameter=state>\nTX\n</parameter>\n"
            "<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>"
        )
        (call,) = calls_everywhere(text, real, tools=TOOLS, thinking=False)
        assert call == ToolCall(
            "get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}
        )

    def test_shell_command_then_timeout(self, real: Any) -> None:
        # The closer dropped after a command: the next line-start tag must not become part of
        # the command a shell runs.
        text = (
            "I'll run the tests.\n<tool_call>\n<function=run_shell>\n<parameter=command>\n"
            "pytest -q tests/\n<parameter=timeout>\n600\n</parameter>\n</function>\n</tool_call>"
        )
        (call,) = calls_everywhere(text, real, tools=TOOLS, thinking=False)
        assert call == ToolCall("run_shell", {"command": "pytest -q tests/", "timeout": 600})


class TestUndeclaredParameter:
    def test_hallucinated_zip_is_kept_and_named(self, real: Any) -> None:
        text = "Checking.\n" + call_text(
            "get_current_weather", ("city", "Dallas"), ("state", "TX"), ("zip", "75201")
        )
        (call,) = calls_everywhere(text, real, tools=TOOLS, thinking=False)
        # Typed as without a schema: JSON when it parses (the peers read 75201 so too).
        assert call.arguments == {"city": "Dallas", "state": "TX", "zip": 75201}
        assert call.undeclared == ("zip",)

    def test_edit_with_a_hallucinated_flag(self, real: Any) -> None:
        text = call_text(
            "edit_file",
            ("path", "src/app.py"),
            ("old_string", "DEBUG = True"),
            ("new_string", "DEBUG = False"),
            ("replace_all", "true"),
        )
        (call,) = calls_everywhere(text, real, tools=TOOLS, thinking=False)
        assert call.arguments == {
            "path": "src/app.py",
            "old_string": "DEBUG = True",
            "new_string": "DEBUG = False",
            "replace_all": True,
        }
        assert call.undeclared == ("replace_all",)

    def test_undeclared_does_not_change_equality_or_the_wire_form(self) -> None:
        text = call_text("get_current_weather", ("city", "Dallas"), ("zip", "75201"))
        (call,) = parse_completion(text, tools=TOOLS, thinking=False).tool_calls
        plain = ToolCall("get_current_weather", {"city": "Dallas", "zip": 75201})
        assert call == plain and call.undeclared == ("zip",)
        assert call.to_dict() == plain.to_dict()
        assert "undeclared" not in str(call.to_dict())

    def test_without_tools_nothing_is_undeclared(self) -> None:
        text = call_text("get_current_weather", ("city", "Dallas"), ("zip", "75201"))
        (call,) = parse_completion(text, thinking=False).tool_calls
        assert call.undeclared == ()


class TestDuplicateParameter:
    def test_the_same_command_twice_is_one_key(self, real: Any) -> None:
        text = call_text("run_shell", ("command", "ls"), ("command", "ls"))
        (call,) = calls_everywhere(text, real, tools=TOOLS, thinking=False)
        assert call == ToolCall("run_shell", {"command": "ls"})

    def test_conflicting_commands_are_refused(self, real: Any) -> None:
        # Merged, a shell would run "rm -rf build/cache" as a second step; picked, either one
        # runs without the model having said which.
        text = "Cleaning up.\n" + call_text(
            "run_shell", ("command", "ls build"), ("command", "rm -rf build/cache")
        )
        first, second = text.index("ls build"), text.index("rm -rf")
        for how, got in results(text, real, tools=TOOLS, thinking=False):
            assert isinstance(got, ParseError), (how, got)
            assert got.offset == second, how
            assert str(first) in got.reason and str(second) in got.reason, how
            assert "'ls build'" in got.reason and "'rm -rf build/cache'" in got.reason, how

    def test_a_file_edit_giving_path_twice_is_refused(self) -> None:
        text = call_text(
            "edit_file",
            ("path", "README.md"),
            ("old_string", "v1"),
            ("new_string", "v2"),
            ("path", "setup.py"),
        )
        with pytest.raises(ParseError, match="'path' of 'edit_file' is given twice"):
            parse_completion(text, tools=TOOLS, thinking=False)


PROSE = "In Qwen output, the tag </think> closes reasoning."


class TestThinkCloseInContent:
    @pytest.mark.parametrize("thinking", [True, False])
    def test_prose_about_the_tag_is_verbatim(self, real: Any, thinking: bool) -> None:
        text = ("Recall the format.\n</think>\n\n" if thinking else "") + PROSE
        for how, got in results(text, real, thinking=thinking):
            assert isinstance(got, Completion), how
            assert got.content == PROSE, how

    def test_after_a_call_too(self, real: Any) -> None:
        text = (
            call_text("run_shell", ("command", "make docs"))
            + "\nDone. Note that </think> ends a reasoning span."
        )
        for how, got in results(text, real, tools=TOOLS, thinking=False):
            assert isinstance(got, Completion), how
            assert got.content == "Done. Note that </think> ends a reasoning span.", how

    def test_by_id_the_atomic_marker_is_kept(self) -> None:
        ids = BYTES.marker(mk.THINK_CLOSE) + BYTES.text("a ") + BYTES.marker(mk.THINK_CLOSE)
        assert parse_completion(ids, encoder=BYTES).content == "a </think>"


class TestFences:
    CALL = call_text("run_shell", ("command", "rm -rf /tmp/build"))

    def test_a_shorter_run_does_not_close_a_fence(self, real: Any) -> None:
        # A four-backtick fence quotes a Markdown example that itself holds a ``` fence.
        text = (
            "Here is how the README shows it:\n````markdown\n```\n"
            + self.CALL
            + "\n```\n````\nThat is all."
        )
        for how, got in results(text, real, tools=TOOLS, thinking=False):
            assert isinstance(got, Completion), how
            assert got.tool_calls == (), how

    def test_a_closing_line_with_an_info_string_does_not_close(self, real: Any) -> None:
        text = "Example:\n```\necho start\n``` trailing\n" + self.CALL + "\n```\nNot run."
        for how, got in results(text, real, tools=TOOLS, thinking=False):
            assert isinstance(got, Completion), how
            assert got.tool_calls == (), how

    def test_after_a_real_close_the_call_runs(self, real: Any) -> None:
        text = "Example:\n````\n```\n````\n" + self.CALL
        (call,) = calls_everywhere(text, real, tools=TOOLS, thinking=False)
        assert call == ToolCall("run_shell", {"command": "rm -rf /tmp/build"})

    def test_an_escaped_backtick_in_unclosed_reasoning_opens_no_code_span(self, real: Any) -> None:
        # "\`" is a literal backtick: the call after it is not quoted, and with no </think>
        # reasoning ends at it.
        reasoning = "Escape it as \\` in the shell, then: "
        text = reasoning + self.CALL
        (call,) = calls_everywhere(text, real, tools=TOOLS, thinking=True)
        assert call == ToolCall("run_shell", {"command": "rm -rf /tmp/build"})

    def test_a_longer_run_in_unclosed_reasoning_quotes_until_its_close(self, real: Any) -> None:
        reasoning = "Draft:\n`````\n```\n" + self.CALL + "\n```\n`````\nNow:\n"
        text = reasoning + self.CALL
        for how, got in results(text, real, tools=TOOLS, thinking=True):
            assert isinstance(got, Completion), how
            assert len(got.tool_calls) == 1 and got.reasoning == reasoning.strip(), how


class TestStop:
    def test_trailing_im_end_by_id_is_not_content(self, real: Any) -> None:
        text = "It is sunny." + mk.TURN_CLOSE
        for how, got in results(text, real, thinking=False):
            assert isinstance(got, Completion), how
            assert got.content == "It is sunny.", how
            assert (got.stop, got.stop_extra) == (mk.TURN_CLOSE, ()), how

    def test_endoftext_after_it(self, real: Any) -> None:
        text = "It is sunny." + mk.TURN_CLOSE + mk.END_OF_TEXT
        for how, got in results(text, real, thinking=False):
            assert isinstance(got, Completion), how
            assert got.content == "It is sunny.", how
            assert (got.stop, got.stop_extra) == (mk.TURN_CLOSE, (mk.END_OF_TEXT,)), how

    def test_after_a_call(self, real: Any) -> None:
        text = call_text("run_shell", ("command", "ls")) + mk.TURN_CLOSE
        for how, got in results(text, real, tools=TOOLS, thinking=False):
            assert isinstance(got, Completion), how
            assert got.tool_calls == (ToolCall("run_shell", {"command": "ls"}),), how
            assert got.content is None, how
            assert got.stop == mk.TURN_CLOSE, how

    def test_not_at_the_end_it_is_text(self, real: Any) -> None:
        text = "Write " + mk.TURN_CLOSE + " to end a turn."
        for how, got in results(text, real, thinking=False):
            assert isinstance(got, Completion), how
            assert (got.content, got.stop) == (text, None), how

    def test_no_stop(self) -> None:
        assert parse_completion("cut off", thinking=False).stop is None

    def test_the_encoder_from_ids_of_a_whole_turn(self, real_ids: Any) -> None:
        encoder, ids = real_ids
        tokens = [*ids("<think>\nhm\n</think>\n\nIt is sunny."), encoder.marker_ids[mk.TURN_CLOSE]]
        c = parse_completion(tokens, encoder=encoder, thinking=False)
        assert (c.reasoning, c.content) == ("hm", "It is sunny.")
        assert c.stop == mk.TURN_CLOSE


class TestStructuralReading:
    def test_an_opener_in_one_value_and_a_closer_in_the_next_quote_nothing(self) -> None:
        # Found by hypothesis: "<function=g>" in a and "…</function>" in b are no quoted block
        # (no </parameter> + </function> between them would close the call early), so the
        # junction between the values is structure and the call round-trips.
        from qwen_encode.protocol import format_tool_call

        arguments = {"a": "<function=g>", "b": "0</function>"}
        text = format_tool_call("g", arguments)
        for how, got in results(text, (None, None), thinking=False):
            assert isinstance(got, Completion), how
            assert got.tool_calls == (ToolCall("g", arguments),), how

    def test_a_quoted_example_call_keeps_its_junctions(self) -> None:
        from qwen_encode.protocol import format_tool_call

        example = format_tool_call("run_shell", {"command": "ls", "timeout": 5})
        arguments = {"path": "docs/calls.md", "old_string": "TODO", "new_string": example}
        text = format_tool_call("edit_file", arguments)
        for how, got in results(text, (None, None), tools=TOOLS, thinking=False):
            assert isinstance(got, Completion), how
            assert got.tool_calls == (ToolCall("edit_file", arguments),), how
