"""Tests of the completion parser.

Expected values are written out by hand from the protocol's grammar (chat_template.jinja renders
an assistant turn as ``<think>\\n{reasoning}\\n</think>\\n\\n{content}`` then the call spans), never
copied from the parser's own output. Tests marked with a source reproduce a case from vLLM's
qwen3_coder / qwen3_xml tool parsers, SGLang's Qwen3CoderDetector or llama.cpp's Qwen3-Coder XML
parsing, where that parser had (or still has) a bug.
"""

from __future__ import annotations

import itertools
import json
import random
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from qwen_encode import markers as mk
from qwen_encode.conversation import ToolCall, Turn
from qwen_encode.errors import ParseError, PromptError
from qwen_encode.parser import (
    Completion,
    ContentDelta,
    ReasoningDelta,
    StreamEvent,
    StreamParser,
    ToolCallEvent,
    parse_completion,
    parse_tool_call,
    typed_parameter_value,
)
from tests.byte_ids import ByteEncoder

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT.parent / "shared" / "checkpoints" / "qwen3.8-27b" / "tokenizer.json"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "state": {"type": "string"},
                "unit": {"type": "string", "enum": ["fahrenheit", "celsius"]},
            },
            "required": ["city", "state"],
        },
    },
}
AREA = {
    "type": "function",
    "function": {
        "name": "calculate_area",
        "parameters": {
            "type": "object",
            "properties": {
                "shape": {"type": "string"},
                "dimensions": {"type": "object"},
                "precision": {"type": "integer"},
            },
        },
    },
}
TOOLS = [WEATHER, AREA]

DALLAS = (
    "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n"
    "<parameter=state>\nTX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n"
    "</function>\n</tool_call>"
)
DALLAS_CALL = ToolCall(
    "get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}
)


def span(name: str, *params: tuple[str, str]) -> str:
    """A call span written the way the template writes one (values given as raw text)."""
    body = "".join(f"<parameter={p}>\n{v}\n</parameter>\n" for p, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def answer(text: str, tools: Any = None) -> Completion:
    """Parse a completion produced with thinking off (the primer closed the reasoning span)."""
    return parse_completion(text, tools=tools, thinking=False)


def one_value(raw: str, schema: Any = None, *, declared: bool = True) -> Any:
    """The typed value of parameter ``p`` of tool ``t`` whose raw text is ``raw``."""
    tools = None
    if declared:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "t",
                    "parameters": {"type": "object", "properties": {"p": schema}},
                },
            }
        ]
    completion = answer(span("t", ("p", raw)), tools)
    (call,) = completion.tool_calls
    return call.arguments["p"]


def same(a: Any, b: Any) -> bool:
    """Equal with the same JSON types (1 == 1.0 == True in Python; not in a tool's arguments)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and type(a) is type(b)


# ============================================================================================
# Parameter values


class TestSchemaFreeValues:
    @pytest.mark.parametrize(
        ("text", "value"),
        [
            ("42", 42),
            ("-3.5", -3.5),
            ("true", True),
            ("false", False),
            ("null", None),
            ('{"a": [1, "x"]}', {"a": [1, "x"]}),
            ("[1, 2]", [1, 2]),
            ('"quoted"', "quoted"),
            ("hello world", "hello world"),
            ("", ""),
            # Python spellings are not JSON: they stay text.
            ("True", "True"),
            ("None", "None"),
            # vLLM/SGLang _convert_param_value fall back to ast.literal_eval, which turns Python
            # literals into values; "JSON when it parses" must not.
            ("{'a': 1}", "{'a': 1}"),
            ("(1, 2)", "(1, 2)"),
            # json.loads accepts these by default; they are not JSON and json.dumps cannot write
            # them back as JSON.
            ("NaN", "NaN"),
            ("Infinity", "Infinity"),
            ("-Infinity", "-Infinity"),
            ("1e400", "1e400"),
        ],
    )
    def test_json_when_it_parses_else_the_string(self, text: str, value: Any) -> None:
        assert same(typed_parameter_value(text), value)

    def test_big_integers_are_exact(self) -> None:
        digits = "123456789012345678901234567890123456789"
        assert typed_parameter_value(digits) == int(digits)

    def test_undeclared_parameter_and_unknown_tool_use_the_schema_free_rule(self) -> None:
        assert one_value("42", declared=False) == 42
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "t",
                    "parameters": {"type": "object", "properties": {"other": {"type": "string"}}},
                },
            }
        ]
        assert answer(span("t", ("p", "42")), tools).tool_calls[0].arguments == {"p": 42}
        assert answer(span("u", ("p", "[1]")), tools).tool_calls[0].arguments == {"p": [1]}

    def test_declared_without_type_uses_the_schema_free_rule(self) -> None:
        assert one_value('{"k": 1}', {"description": "anything"}) == {"k": 1}
        assert one_value("abc", {}) == "abc"


class TestSchemaTypes:
    @pytest.mark.parametrize(
        ("schema", "raw", "value"),
        [
            # string: the raw text, even when it looks like JSON
            ({"type": "string"}, "42", "42"),
            ({"type": "string"}, '{"a": 1}', '{"a": 1}'),
            ({"type": "string"}, "true", "true"),
            ({"type": "string"}, "  padded  ", "  padded  "),
            ({"type": "string", "enum": ["a", "b"]}, "1", "1"),
            # vLLM/SGLang map "null" to None for every type; only a schema allowing null may.
            ({"type": "string"}, "null", "null"),
            ({"type": "integer"}, "null", "null"),
            ({"type": ["string", "null"]}, "null", None),
            ({"type": ["integer", "null"]}, "null", None),
            ({"type": ["integer", "null"]}, "3", 3),
            ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "null", None),
            ({"type": "string", "nullable": True}, "null", None),
            # integer
            ({"type": "integer"}, "42", 42),
            ({"type": "integer"}, "-7", -7),
            # Floats stay floats; for an integer, a float's spelling is no integer
            # (vLLM: int("5.0") fails, the string is kept), so it stays the text as written
            ({"type": "integer"}, "5.0", "5.0"),
            ({"type": "integer"}, "1e3", "1e3"),
            ({"type": ["integer", "number"]}, "5.0", 5.0),
            ({"type": "integer"}, "12345678901234567890123", 12345678901234567890123),
            ({"type": "number"}, "12345678901234567890123", 12345678901234567890123),
            ({"type": "integer"}, "5.5", "5.5"),
            ({"type": "integer"}, "abc", "abc"),
            # mlx-lm PR 1310 (qwen3_coder _convert_param_value): int("2026-01-15") raised and the
            # whole call was dropped; a value that does not fit stays a string.
            ({"type": "integer"}, "2026-01-15", "2026-01-15"),
            ({"type": "integer"}, "+5", "+5"),
            # Leading zeros for an integer ("007" is 7); floats stay floats
            ({"type": "integer"}, "007", 7),
            ({"type": "integer"}, "-007", -7),
            ({"type": "number"}, "007", 7),
            ({"type": "integer"}, "1_000", "1_000"),
            # number: vLLM turns "5.0" into the integer 5 (float(v) - int(v) == 0); JSON's 5.0
            # is a float. SGLang/vLLM go through float(), so big integers lose digits.
            ({"type": "number"}, "3.14", 3.14),
            ({"type": "number"}, "5.0", 5.0),
            ({"type": "number"}, "10", 10),
            ({"type": "number"}, "-2.5e-3", -0.0025),
            ({"type": "number"}, "NaN", "NaN"),
            ({"type": "number"}, "1e400", "1e400"),
            ({"type": "number"}, "12,5", "12,5"),
            # boolean: vLLM/SGLang return False for anything but "true" ("degenerating to false")
            ({"type": "boolean"}, "true", True),
            ({"type": "boolean"}, "false", False),
            ({"type": "boolean"}, "True", True),
            ({"type": "boolean"}, "False", False),
            ({"type": "boolean"}, "yes", "yes"),
            ({"type": "boolean"}, "1", "1"),
            # Any case of true/false (every peer reads "TRUE" so)
            ({"type": "boolean"}, "TRUE", True),
            ({"type": "boolean"}, "fAlSe", False),
            # object / array (Qwen3-Coder issue 480: nested values reached the tool as strings)
            ({"type": "object"}, '{"width": 10, \n "height": 20}', {"width": 10, "height": 20}),
            ({"type": "object"}, "[1]", "[1]"),
            ({"type": "object"}, "{'a': 1}", "{'a': 1}"),
            ({"type": "object"}, "{broken", "{broken"),
            (
                {"type": "array"},
                '[{"file_path": "/a", "ranges": [{"start": 1, "end": 50}]}]',
                [{"file_path": "/a", "ranges": [{"start": 1, "end": 50}]}],
            ),
            ({"type": "array"}, '{"a": 1}', '{"a": 1}'),
            # unions: the non-string reading wins when it parses
            ({"type": ["string", "integer"]}, "5", 5),
            ({"type": ["string", "integer"]}, "five", "five"),
            ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "5", 5),
            ({"oneOf": [{"type": "boolean"}, {"type": "string"}]}, "true", True),
            ({"type": ["number", "string"]}, "1.5", 1.5),
            ({"type": ["array", "string"]}, "[1]", [1]),
            ({"type": ["array", "string"]}, "not a list", "not a list"),
            # an unconstrained branch ($ref) means any JSON value
            ({"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/Shape"}]}, '{"r": 1}', {"r": 1}),
            # common non-JSON-Schema names
            ({"type": "int"}, "7", 7),
            ({"type": "float"}, "7.5", 7.5),
            ({"type": "bool"}, "false", False),
            ({"type": "str"}, "7", "7"),
            ({"type": "dict"}, '{"k": null}', {"k": None}),
            ({"type": "list"}, "[true]", [True]),
            ({"type": "Integer"}, "7", 7),
            # an unknown type name is some kind of string to whoever wrote it
            ({"type": "datetime"}, "2026-01-15", "2026-01-15"),
            ({"type": "datetime"}, "42", "42"),
            # types inferred from enum / const / properties
            ({"enum": [1, 2, 3]}, "2", 2),
            ({"enum": ["1", "2"]}, "2", "2"),
            ({"const": True}, "true", True),
            ({"properties": {"x": {"type": "integer"}}}, '{"x": 1}', {"x": 1}),
        ],
    )
    def test_the_schema_decides(self, schema: Any, raw: str, value: Any) -> None:
        assert same(one_value(raw, schema), value)

    def test_big_integers_are_exact(self) -> None:
        digits = "98765432109876543210987654321"
        assert one_value(digits, {"type": "integer"}) == int(digits)
        got = one_value(digits, {"type": "number"})
        assert isinstance(got, int) and got == int(digits)

    def test_typed_readings_ignore_surrounding_whitespace(self) -> None:
        assert one_value("  42 ", {"type": "integer"}) == 42
        assert one_value(" true\t", {"type": "boolean"}) is True

    def test_bare_tool_form_and_json_text_tools(self) -> None:
        bare = [{"name": "t", "parameters": {"properties": {"p": {"type": "integer"}}}}]
        assert answer(span("t", ("p", "4")), bare).tool_calls[0].arguments == {"p": 4}
        text = json.dumps([{"type": "function", "function": bare[0]}])
        assert answer(span("t", ("p", "4")), text).tool_calls[0].arguments == {"p": 4}

    def test_vllm_typed_params_example(self) -> None:
        # vLLM tests/tool_use/test_qwen3coder_tool_parser.py,
        # test_extract_tool_calls_type_conversion
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "test_types",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "int_param": {"type": "integer"},
                            "float_param": {"type": "float"},
                            "bool_param": {"type": "boolean"},
                            "str_param": {"type": "string"},
                            "obj_param": {"type": "object"},
                        },
                    },
                },
            }
        ]
        text = span(
            "test_types",
            ("int_param", "42"),
            ("float_param", "3.14"),
            ("bool_param", "true"),
            ("str_param", "hello world"),
            ("obj_param", '{"key": "value"}'),
        )
        assert answer(text, tools).tool_calls[0].arguments == {
            "int_param": 42,
            "float_param": 3.14,
            "bool_param": True,
            "str_param": "hello world",
            "obj_param": {"key": "value"},
        }


# ============================================================================================
# Reasoning


class TestReasoning:
    def test_reasoning_ends_at_the_first_think_close(self) -> None:
        c = parse_completion("Let me see.\n</think>\n\nIt is 4.")
        assert (c.reasoning, c.content, c.tool_calls) == ("Let me see.", "It is 4.", ())
        # A second </think> is content, verbatim: the template renders content as it is (checked
        # with apply_chat_template on an assistant message whose content holds the tag).
        c = parse_completion("a</think>b</think>c")
        assert (c.reasoning, c.content) == ("a", "b</think>c")

    def test_no_think_close_means_truncated_reasoning(self) -> None:
        c = parse_completion("I was thinking about <b>this</b> and")
        assert c == Completion(reasoning="I was thinking about <b>this</b> and")

    def test_call_without_think_close_ends_reasoning(self) -> None:
        # vLLM PR 35687 ("Treat <tool_call> as implicit reasoning end in Qwen3 parser"): Qwen3.5
        # emitted <tool_call> without closing </think>, the whole output was classed as reasoning
        # and the call was silently dropped.
        c = parse_completion("I need the weather.\n\n" + DALLAS + "\n")
        assert c.reasoning == "I need the weather."
        assert c.content is None
        assert c.tool_calls == (DALLAS_CALL,)

    def test_call_markup_in_a_closed_reasoning_span_is_never_dispatched(self) -> None:
        # QwenLM/Qwen3 issue 1459 ("If <tool_call> appears in think, it will be directly parsed")
        # and PrimeIntellect-ai/renderers PR 80 (in-think drafts became phantom duplicate calls).
        draft = "Draft:\n" + span("rm", ("path", "/"))
        c = parse_completion(draft + "\nNo, better:\n</think>\n\n" + DALLAS)
        assert c.reasoning == draft + "\nNo, better:"
        assert c.tool_calls == (DALLAS_CALL,)

    def test_tool_call_not_followed_by_function_stays_reasoning(self) -> None:
        text = "I will emit <tool_call> tags later"
        assert parse_completion(text) == Completion(reasoning=text)
        text = "Think <tool_call>\n</tool_call> more"
        assert parse_completion(text) == Completion(reasoning=text)

    def test_thinking_off_plain_answer_is_content(self) -> None:
        # vLLM issue 53284: with the think block already closed by the prompt, `--reasoning-parser
        # qwen3` returned the whole answer as reasoning.
        c = answer("Paris is the capital.")
        assert c == Completion(content="Paris is the capital.")

    def test_leading_think_opens_reasoning_even_when_thinking_is_off(self) -> None:
        c = answer("<think>\nhmm\n</think>\n\nyes")
        assert (c.reasoning, c.content) == ("hmm", "yes")
        c = answer("\n <think>hmm</think>yes")
        assert (c.reasoning, c.content) == ("hmm", "yes")
        c = answer("<think>\nstill thinking")
        assert (c.reasoning, c.content) == ("still thinking", None)

    def test_leading_think_with_thinking_on_is_not_reasoning_text(self) -> None:
        assert parse_completion("<think>\nx\n</think>y").reasoning == "x"

    def test_think_markers_elsewhere_are_text(self) -> None:
        c = answer("Use <think> and </think> tags.")
        assert c == Completion(content="Use <think> and </think> tags.")  # verbatim
        c = parse_completion("r</think>see <think> here")
        assert c.content == "see <think> here"

    def test_whitespace_only_parts_are_none(self) -> None:
        assert parse_completion(" \n </think>\n\n \t") == Completion()
        assert answer("<think>\n\n</think>\n\n") == Completion()
        assert parse_completion("") == Completion()
        assert answer("") == Completion()

    def test_qwen3_xml_does_not_swallow_think_close(self) -> None:
        # vLLM issue 51679: the qwen3_xml tool parser consumed </think> and merged reasoning into
        # content.
        c = parse_completion("plan\n</think>\n\nOK.\n\n" + DALLAS)
        assert (c.reasoning, c.content, c.tool_calls) == ("plan", "OK.", (DALLAS_CALL,))


# ============================================================================================
# Call spans


class TestCalls:
    def test_single_call(self) -> None:
        # vLLM test_extract_tool_calls[single_tool]
        assert answer(DALLAS, TOOLS) == Completion(tool_calls=(DALLAS_CALL,))

    def test_content_before_a_call(self) -> None:
        # vLLM test_extract_tool_calls[single_tool_with_content]; llama.cpp issue 20260 (the
        # peg-native parser failed when the model wrote text before <tool_call>).
        c = answer("Sure! Let me check the weather for you." + DALLAS, TOOLS)
        assert c == Completion(
            content="Sure! Let me check the weather for you.", tool_calls=(DALLAS_CALL,)
        )

    def test_parallel_calls(self) -> None:
        # vLLM test_extract_tool_calls[parallel_tools]; llama.cpp pwilkin/llama.cpp issue 9 and
        # ggml-org/llama.cpp issue 22878 ("Failed to parse input at pos …" on parallel calls).
        second = span("get_current_weather", ("city", "Orlando"), ("state", "FL"))
        c = answer(DALLAS + "\n" + second, TOOLS)
        assert c.tool_calls == (
            DALLAS_CALL,
            ToolCall("get_current_weather", {"city": "Orlando", "state": "FL"}),
        )
        assert c.content is None

    def test_multiline_object_parameter(self) -> None:
        # vLLM test_extract_tool_calls[single_tool_multiline_param]
        text = span(
            "calculate_area",
            ("shape", "rectangle"),
            ("dimensions", '{"width": 10, \n "height": 20}'),
            ("precision", "2"),
        )
        (call,) = answer(text, TOOLS).tool_calls
        assert call.arguments == {
            "shape": "rectangle",
            "dimensions": {"width": 10, "height": 20},
            "precision": 2,
        }

    def test_text_before_between_and_after_calls_is_content(self) -> None:
        # vLLM and SGLang return only the text before the first call as content; the rest is lost.
        text = "Before.\n\n" + span("a") + "\nBetween.\n" + span("b") + "\nAfter."
        c = answer(text)
        assert [call.name for call in c.tool_calls] == ["a", "b"]
        assert c.content == "Before.\n\n\nBetween.\n\nAfter."

    def test_several_function_blocks_in_one_span_are_several_calls(self) -> None:
        text = (
            "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n</function>\n"
            "<function=b>\n</function>\n</tool_call>"
        )
        assert answer(text).tool_calls == (ToolCall("a", {"x": 1}), ToolCall("b", {}))

    def test_function_without_tool_call_span_is_prose(self) -> None:
        # vLLM's qwen3_coder "back-off strategy" parses a bare <function=…> with no <tool_call>
        # (and SGLang's detect_and_parse falls back to the whole text): prose gets dispatched.
        text = "Example:\n<function=rm>\n<parameter=path>\n/\n</parameter>\n</function>"
        assert answer(text) == Completion(content=text)

    def test_bare_mention_is_text(self) -> None:
        # club-3090 issue 72 / vLLM issue 22975: a literal <tool_call> in prose switched the
        # streaming parser into tool mode for good. SGLang (per dynamo PR 9650, case 4.a) turns
        # "<tool_call>" without a function body and everything after it into "".
        for text in (
            "Wrap each call in <tool_call> tags.",
            "<tool_call>: that tag",
            "a <tool_call>b",
        ):
            assert answer(text) == Completion(content=text)

    def test_only_the_exact_function_tag_opens_a_span(self) -> None:
        for text in (
            "<tool_call><functional style>",
            "<tool_call>\n<function name='f'>",
            "<tool_call><func",
        ):
            assert answer(text + " is prose.") == Completion(content=text + " is prose.")
            assert parse_completion(text + " x") == Completion(reasoning=text + " x")

    def test_bare_mention_then_a_real_call(self) -> None:
        text = "I will use <tool_call> now.\n" + DALLAS
        c = answer(text, TOOLS)
        assert c == Completion(content="I will use <tool_call> now.", tool_calls=(DALLAS_CALL,))

    def test_whitespace_between_structural_tags_is_insignificant(self) -> None:
        text = (
            "<tool_call>  \n\t<function=f>   <parameter=a>\n1\n</parameter> \n\n "
            "<parameter=b>\nx\n</parameter>\t</function>   \n</tool_call>"
        )
        assert answer(text).tool_calls == (ToolCall("f", {"a": 1, "b": "x"}),)
        compact = "<tool_call><function=f><parameter=a>1</parameter></function></tool_call>"
        assert answer(compact).tool_calls == (ToolCall("f", {"a": 1}),)

    def test_names_are_trimmed(self) -> None:
        text = "<tool_call><function= f ><parameter= a >1</parameter></function></tool_call>"
        assert answer(text).tool_calls == (ToolCall("f", {"a": 1}),)

    def test_call_ids_are_not_invented(self) -> None:
        assert all(call.id is None for call in answer(DALLAS + DALLAS).tool_calls)


class TestUnterminated:
    @pytest.mark.parametrize(
        "tail",
        [
            "<tool_call>",
            "<tool_call>\n",
            "<tool_call>\n<func",
            "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDal",
            # complete inside, but the span never closed: still not dispatched
            DALLAS.removesuffix("</tool_call>"),
        ],
    )
    def test_a_span_that_never_closes_is_not_dispatched(self, tail: str) -> None:
        # SGLang's <tool_call>(.*?)</tool_call> regex drops an unterminated trailing call
        # (dynamo PR 9650, cases 5.d/5.e); here nothing is lost and nothing is raised.
        c = answer("Checking.\n" + DALLAS + "\n" + tail, TOOLS)
        assert c.content == "Checking."
        assert c.tool_calls == (DALLAS_CALL,)
        assert c.unterminated == tail

    def test_unterminated_call_after_unclosed_reasoning(self) -> None:
        c = parse_completion("thinking\n<tool_call>\n<function=f>\n<parameter=a>\n1")
        assert c == Completion(
            reasoning="thinking", unterminated="<tool_call>\n<function=f>\n<parameter=a>\n1"
        )

    def test_unterminated_is_not_in_the_turn(self) -> None:
        c = answer("Hi.\n<tool_call>\n<function=f>")
        assert c.unterminated == "<tool_call>\n<function=f>"
        assert c.to_turn() == Turn(role="assistant", content="Hi.")


class TestProtocolErrors:
    """A closed span that does not hold a call raises ParseError at the offending character."""

    @staticmethod
    def error(text: str, tools: Any = None, thinking: bool = False) -> ParseError:
        with pytest.raises(ParseError) as info:
            parse_completion(text, tools=tools, thinking=thinking)
        return info.value

    def test_empty_span(self) -> None:
        text = "ok <tool_call></tool_call>"
        error = self.error(text)
        assert error.offset == text.index("</tool_call>")
        assert "empty" in error.reason
        text = "ok <tool_call>\n  \n</tool_call>"
        assert self.error(text).offset == text.index("</tool_call>")

    def test_span_without_function(self) -> None:
        # Hermes-style JSON inside the span: the model used the wrong format.
        text = 'x <tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
        assert self.error(text).offset == text.index("{")
        text = "<tool_call> some words </tool_call>"
        assert self.error(text).offset == text.index("some")

    @pytest.mark.parametrize(
        ("text", "at"),
        [
            ("<tool_call>\n<function=>\n</function>\n</tool_call>", "<function="),
            ("<tool_call>\n<function=  >\n</function>\n</tool_call>", "<function="),
            (
                "<tool_call>\n<function=f\n<parameter=a>\n1\n</parameter>\n</tool_call>",
                "<function=",
            ),
            ("<tool_call>\n<function=f</function></tool_call>", "<function="),
        ],
    )
    def test_malformed_function_tag(self, text: str, at: str) -> None:
        assert self.error(text).offset == text.index(at)

    def test_malformed_parameter_tag(self) -> None:
        # vLLM issue 39771: str.index(">") on a parameter without '>' raised ValueError and the
        # whole extraction fell back to plain text, losing every call. Here: a ParseError that
        # says where.
        text = "<tool_call>\n<function=f>\n<parameter=city\nParis\n</function>\n</tool_call>"
        assert self.error(text).offset == text.index("<parameter=")

    def test_a_parameter_given_twice_with_different_values_is_refused(self) -> None:
        # Read as written, the call gives a twice; read as data, b holds the second a. A host
        # must run neither silently: ParseError naming both offsets and both values.
        text = span("f", ("a", "1"), ("b", "x"), ("a", "2"))
        error = self.error(text)
        assert error.offset == text.index("2\n</parameter>")
        assert str(text.index("1\n</parameter>")) in error.reason
        assert "'1'" in error.reason and "'2'" in error.reason

    def test_a_parameter_given_twice_with_the_same_value_is_one_key(self) -> None:
        text = span("f", ("a", "1"), ("b", "x"), ("a", "1"))
        assert answer(text).tool_calls == (ToolCall("f", {"a": 1, "b": "x"}),)

    def test_text_where_a_tag_belongs(self) -> None:
        text = "<tool_call>\n<function=f>\nplease\n</function>\n</tool_call>"
        assert self.error(text).offset == text.index("please")
        text = "<tool_call>\n<function=f>\n</function>\ntrailing\n</tool_call>"
        assert self.error(text).offset == text.index("trailing")

    def test_error_offset_counts_the_whole_output(self) -> None:
        prefix = "reasoning\n</think>\n\nSure.\n" + DALLAS + "\n"
        text = prefix + "<tool_call>\n<function=>\n</tool_call>"
        assert self.error(text, thinking=True).offset == text.index("<function=>")

    def test_bare_mention_closed_by_a_span_close(self) -> None:
        text = "Use <tool_call> and then </tool_call>."
        assert self.error(text).offset == text.index("and")

    def test_errors_inside_reasoning_are_not_raised(self) -> None:
        text = "<think>draft <tool_call>\n<function=>\n</tool_call></think>fine"
        assert answer(text) == Completion(
            reasoning="draft <tool_call>\n<function=>\n</tool_call>", content="fine"
        )


class TestRepairs:
    def test_missing_parameter_close_before_next_parameter(self) -> None:
        # vLLM PR 23099 ("robust tool call handling, such as missing </parameter> tags"); the
        # qwen3_coder regex ends a value at (?=<parameter=) too.
        text = (
            "<tool_call>\n<function=f>\n<parameter=a>\nx\n<parameter=b>\ny\n"
            "</function>\n</tool_call>"
        )
        assert answer(text).tool_calls == (ToolCall("f", {"a": "x", "b": "y"}),)

    def test_a_line_start_parameter_with_no_closer_before_it_ends_the_value(self) -> None:
        # The peers' repair (vLLM's test_extract_tool_calls_missing_closing_parameter_tag): the
        # structural reading comes first. format_tool_call("f", {"a": "x\n<parameter=b>\ny"})
        # writes this same text; the README lists it among the ambiguous renderings.
        text = (
            "<tool_call>\n<function=f>\n<parameter=a>\nx\n<parameter=b>\ny\n</parameter>\n"
            "</function>\n</tool_call>"
        )
        assert answer(text).tool_calls == (ToolCall("f", {"a": "x", "b": "y"}),)

    def test_missing_parameter_close_before_function_close(self) -> None:
        text = "<tool_call>\n<function=f>\n<parameter=a>\nx\n</function>\n</tool_call>"
        assert answer(text).tool_calls == (ToolCall("f", {"a": "x"}),)

    def test_missing_function_close(self) -> None:
        text = "<tool_call>\n<function=f>\n<parameter=a>\nx\n</parameter>\n</tool_call>"
        assert answer(text).tool_calls == (ToolCall("f", {"a": "x"}),)
        text = "<tool_call>\n<function=f>\n<parameter=a>\nx\n</tool_call>"
        assert answer(text).tool_calls == (ToolCall("f", {"a": "x"}),)
        text = "<tool_call>\n<function=f>\n</tool_call>"
        assert answer(text).tool_calls == (ToolCall("f", {}),)

    def test_missing_tool_call_close_before_next_tool_call(self) -> None:
        text = (
            "<tool_call>\n<function=a>\n</function>\n<tool_call>\n<function=b>\n</function>\n"
            "</tool_call>"
        )
        assert answer(text).tool_calls == (ToolCall("a", {}), ToolCall("b", {}))

    def test_tool_call_not_followed_by_function_inside_a_span_is_data(self) -> None:
        text = span("f", ("doc", "write <tool_call> around calls"))
        (call,) = answer(text).tool_calls
        assert call.arguments == {"doc": "write <tool_call> around calls"}


# ============================================================================================
# Values


class TestValueText:
    @pytest.mark.parametrize(
        "value",
        [
            # vLLM PR 48846 ("Preserve whitespace in parameter values") and vllm-mlx issue 808
            # ("DIRECT_OK\n" lost its newline: the parser stripped values).
            "DIRECT_OK\n",
            "\nleading newline",
            "  indented\n\tand tabbed  ",
            "\n\n",
            "",
            "line1\r\nline2\r\n",
            "    def f():\n        return 1\n",
            # vLLM PR 46047: a value containing '<' (HTML, code, x<5) was dropped while streaming.
            "x < 5 && y > 3",
            "<div class='a'>\n  <b>bold</b>\n</div>",
            # markup inside values is data, protocol markers included
            "a </think> b",
            "see <think>",
            "<function=nope> is not a call here",
            # vLLM PR 34919: the first </parameter> in a value truncated it.
            "<xml>\n</parameter>\n</xml>",
            "before </parameter> after",
            "ends with </parameter>",
        ],
    )
    def test_exactly_one_newline_each_side_is_layout(self, value: str) -> None:
        tools = [
            {
                "name": "w",
                "parameters": {
                    "properties": {"content": {"type": "string"}, "path": {"type": "string"}}
                },
            }
        ]
        text = span("w", ("content", value), ("path", "/tmp/x"))
        (call,) = answer(text, tools).tool_calls
        assert call.arguments == {"content": value, "path": "/tmp/x"}

    def test_value_without_layout_newlines(self) -> None:
        text = "<tool_call><function=f><parameter=a>x</parameter></function></tool_call>"
        assert answer(text).tool_calls[0].arguments == {"a": "x"}
        text = "<tool_call><function=f><parameter=a>\n\nx\n\n</parameter></function></tool_call>"
        assert answer(text).tool_calls[0].arguments == {"a": "\nx\n"}

    def test_parameter_close_without_its_newline(self) -> None:
        # llama.cpp issue 26763: the value suffix was derived as "\n</parameter>\n", so a bare
        # "value</parameter>" was not a terminator and swallowed the following calls.
        text = (
            "<tool_call>\n<function=read>\n<parameter=path>\n/a.md</parameter>\n</function>\n"
            "</tool_call>\n<tool_call>\n<function=read>\n<parameter=path>\n/b.md\n</parameter>\n"
            "</function>\n</tool_call>"
        )
        assert answer(text).tool_calls == (
            ToolCall("read", {"path": "/a.md"}),
            ToolCall("read", {"path": "/b.md"}),
        )

    def test_value_holding_a_whole_call_as_text(self) -> None:
        doc = "Example:\n<tool_call>\n<function=x>\n</tool_call>"
        tools = [{"name": "w", "parameters": {"properties": {"doc": {"type": "string"}}}}]
        # In a string completion <tool_call>/</tool_call> are markers wherever they appear, so a
        # value can only carry them when the output is token IDs (see TestTokenIds).
        text = (
            "<tool_call>\n<function=w>\n<parameter=doc>\n"
            + doc.replace("</tool_call>", "</tool_call_>")
            + "\n</parameter>\n</function>\n</tool_call>"
        )
        (call,) = answer(text, tools).tool_calls
        assert call.arguments["doc"] == doc.replace("</tool_call>", "</tool_call_>")


# ============================================================================================
# Token IDs


BYTES = ByteEncoder()


class TestTokenIds:
    def test_ids_parse_like_text(self) -> None:
        text = "plan\n</think>\n\nOK 日本語 🦜.\n\n" + DALLAS
        assert parse_completion(BYTES.encode(text), TOOLS, encoder=BYTES) == parse_completion(
            text, TOOLS
        )

    def test_marker_spelled_in_ordinary_tokens_is_prose(self) -> None:
        ids = (
            BYTES.text("I could write </think> here")
            + BYTES.marker(mk.THINK_CLOSE)
            + BYTES.text("Content mentions <tool_call>\n<function=f>\n</function>\n</tool_call>.")
        )
        c = parse_completion(ids, encoder=BYTES)
        assert c.reasoning == "I could write </think> here"
        assert c.content == "Content mentions <tool_call>\n<function=f>\n</function>\n</tool_call>."
        assert c.tool_calls == ()

    def test_markers_as_text_inside_a_value(self) -> None:
        doc = "Example:\n<tool_call>\n<function=x></function>\n</tool_call>\n</think>"
        ids = (
            BYTES.marker(mk.TOOL_CALL_OPEN)
            + BYTES.text(f"\n<function=w>\n<parameter=doc>\n{doc}\n</parameter>\n</function>\n")
            + BYTES.marker(mk.TOOL_CALL_CLOSE)
        )
        c = parse_completion(ids, thinking=False, encoder=BYTES)
        assert c.tool_calls == (ToolCall("w", {"doc": doc}),)

    def test_other_added_tokens_are_text(self) -> None:
        # Not at the end, <|im_end|> is text like any non-protocol marker (at the end it is
        # the stop: tests/test_parser_rules.py).
        ids = (
            BYTES.marker(mk.THINK_CLOSE)
            + BYTES.text("a")
            + BYTES.marker(mk.TURN_CLOSE)
            + BYTES.text("b")
        )
        assert parse_completion(ids, encoder=BYTES).content == "a" + mk.TURN_CLOSE + "b"

    def test_ids_need_an_encoder(self) -> None:
        with pytest.raises(PromptError, match="encoder"):
            parse_completion([1, 2, 3])
        with pytest.raises(PromptError, match="output"):
            parse_completion(b"bytes")  # type: ignore[arg-type]

    def test_split_characters_are_held_back(self) -> None:
        text = "</think>日本語 🦜 𝔘 ok"
        parser = StreamParser(encoder=BYTES)
        events: list[StreamEvent] = []
        for token in BYTES.encode(text):
            events += parser.feed([token])
        events += parser.flush()
        assert all("\ufffd" not in e.text for e in events if not isinstance(e, ToolCallEvent))
        assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "日本語 🦜 𝔘 ok"
        assert parser.finish().content == "日本語 🦜 𝔘 ok"

    def test_a_truncated_character_is_flushed_at_the_end(self) -> None:
        ids = BYTES.marker(mk.THINK_CLOSE) + BYTES.text("ab") + [0xE6 + 1000, 0x97 + 1000]
        parser = StreamParser(encoder=BYTES)
        assert parser.feed(ids) == [ContentDelta("ab")]
        assert parser.flush() == [ContentDelta("\ufffd")]
        assert parser.finish() == parse_completion(ids, encoder=BYTES)

    def test_invalid_bytes_are_not_held_forever(self) -> None:
        parser = StreamParser(thinking=False, encoder=BYTES)
        events: list[StreamEvent] = []
        for _ in range(20):
            events += parser.feed([0xFF + 1000])
        assert events, "a run of invalid bytes must flow through, not wait for a character"


@pytest.fixture(scope="module")
def qwen_encoder() -> Any:
    if not TOKENIZER.exists():
        pytest.skip(
            f"{TOKENIZER} is absent: the real checkpoint lives in ../shared beside the repo"
        )
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER))

    class QwenEncoder:
        def __init__(self) -> None:
            self.marker_ids = {m: tokenizer.token_to_id(m) for m in mk.ALL_ADDED_TOKENS}

        def decode(self, ids: Sequence[int]) -> str:
            return tokenizer.decode(list(ids), skip_special_tokens=False)

        def encode(self, text: str) -> list[int]:
            return tokenizer.encode(text, add_special_tokens=False).ids

        def spelled(self, text: str) -> list[int]:
            """``text`` as ordinary tokens, one character at a time: no marker ID."""
            return [i for ch in text for i in tokenizer.encode(ch, add_special_tokens=False).ids]

    return QwenEncoder()


class TestRealTokenizer:
    TEXT = (
        "用户想知道天气 🌦️. Let me call <the> tool.\n</think>\n\n好的 — checking 𝔘.\n\n"
        + span("get_current_weather", ("city", "São Paulo 🇧🇷"), ("state", "SP"))
        + "\n"
        + span("calculate_area", ("shape", "圆"), ("dimensions", '{"r": 1.5}'))
    )

    def test_ids_parse_like_text(self, qwen_encoder: Any) -> None:
        ids = qwen_encoder.encode(self.TEXT)
        assert qwen_encoder.marker_ids[mk.THINK_CLOSE] in ids
        got = parse_completion(ids, TOOLS, encoder=qwen_encoder)
        assert got == parse_completion(self.TEXT, TOOLS)
        assert got.tool_calls[0].arguments["city"] == "São Paulo 🇧🇷"

    def test_streaming_one_token_at_a_time(self, qwen_encoder: Any) -> None:
        ids = qwen_encoder.encode(self.TEXT)
        final, events = stream([[i] for i in ids], tools=TOOLS, encoder=qwen_encoder)
        assert final == parse_completion(self.TEXT, TOOLS)
        assert not any("\ufffd" in e.text for e in events if not isinstance(e, ToolCallEvent))
        check_events(final, events)

    def test_marker_spelled_in_ordinary_tokens_is_prose(self, qwen_encoder: Any) -> None:
        ids = [
            *qwen_encoder.spelled("Do not stop at </think> yet"),
            qwen_encoder.marker_ids[mk.THINK_CLOSE],
            *qwen_encoder.spelled("Say <tool_call>\n<function=f>\n</function>\n</tool_call>"),
        ]
        assert qwen_encoder.marker_ids[mk.TOOL_CALL_OPEN] not in ids
        c = parse_completion(ids, encoder=qwen_encoder)
        assert c == Completion(
            reasoning="Do not stop at </think> yet",
            content="Say <tool_call>\n<function=f>\n</function>\n</tool_call>",
        )


# ============================================================================================
# Streaming


def stream(chunks: Sequence[Any], **kwargs: Any) -> tuple[Completion, list[StreamEvent]]:
    parser = StreamParser(**kwargs)
    events: list[StreamEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.flush()
    return parser.finish(), events


def joined(events: Sequence[StreamEvent], kind: type) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


def check_events(final: Completion, events: Sequence[StreamEvent]) -> None:
    """The documented contract: deltas joined and trimmed are the fields, call events the calls."""
    assert (joined(events, ReasoningDelta).strip() or None) == final.reasoning
    assert (joined(events, ContentDelta).strip() or None) == final.content
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [e.index for e in calls] == list(range(len(final.tool_calls)))
    assert tuple(e.call for e in calls) == final.tool_calls


def cut(text: Sequence[Any], points: list[int]) -> list[Any]:
    bounds = sorted({p % (len(text) + 1) for p in points})
    edges = [0, *bounds, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(edges) if b > a]


CORPUS: list[tuple[str, bool]] = [
    (
        "Let me think.\n</think>\n\nSure.\n\n"
        + DALLAS
        + "\n"
        + span("calculate_area", ("shape", "sq"), ("precision", "3"))
        + "\nDone.",
        True,
    ),
    ("thinking only, truncated", True),
    ("I need it.\n" + DALLAS + "\ntrailing", True),
    ("draft " + DALLAS + " no </think> ok " + DALLAS, True),
    ("draft " + DALLAS + " then truncated <tool_call>\n<function=x>\n<par", True),
    ("<think>\nr\n</think>\n\nUse <tool_call> tags.\n" + DALLAS + "\n<tool_call>\n<fun", False),
    ("a <tool_call> b </tool_call>", False),
    ("x <tool_call>\n  \n</tool_call>", False),
    ("<tool_call>\n<function=a>\n</function>\n<tool_call>\n<function=b>\n<parameter=p>\nv", False),
    (
        "ok\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n"
        "</parameter>\n</function>\n</tool_call>",
        False,
    ),
    (
        "<tool_call>\n<function=f>\n<parameter=v>\na </parameter> b </think> <tool_call> c\n"
        "</parameter>\n</function>\n</tool_call>\n<tool_call><tool_call>\n<function=g></tool_call>",
        False,
    ),
    ("  \n <think>x</think>y</think>z<think>", False),
    ("  \n <think>x</think>y", True),
    ("</thi</think>nk><tool_cal<tool_call>l>", True),
    ("<tool_call>", False),
    ("<tool_call>\n", True),
    ("", True),
    ("   ", False),
    ("r<tool_call>\n<function=f>\n</function></tool_call>x</think>y" + DALLAS, True),
    ("r<tool_call>\n<function=>\n</tool_call>", True),
]


def batch_or_error(output: Any, **kwargs: Any) -> Completion | tuple[str, int]:
    try:
        return parse_completion(output, **kwargs)
    except ParseError as error:
        return (error.reason, error.offset)


def stream_or_error(chunks: Sequence[Any], **kwargs: Any) -> Any:
    try:
        final, events = stream(chunks, **kwargs)
    except ParseError as error:
        return (error.reason, error.offset), None
    return final, events


class TestStreaming:
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        case=st.sampled_from(CORPUS),
        points=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    )
    def test_any_chunking_matches_the_batch_parse(
        self, case: tuple[str, bool], points: list[int]
    ) -> None:
        text, thinking = case
        kwargs: dict[str, Any] = {"tools": TOOLS, "thinking": thinking}
        expected = batch_or_error(text, **kwargs)
        whole, whole_events = stream_or_error([text], **kwargs)
        got, events = stream_or_error(cut(text, points), **kwargs)
        assert got == expected == whole
        if events is not None:
            assert isinstance(got, Completion)
            check_events(got, events)
            # Not only the trimmed result: the raw deltas are the same whatever the chunking.
            for kind in (ReasoningDelta, ContentDelta):
                assert joined(events, kind) == joined(whole_events, kind)

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        case=st.sampled_from(CORPUS),
        points=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    )
    def test_any_chunking_of_token_ids_matches_the_batch_parse(
        self, case: tuple[str, bool], points: list[int]
    ) -> None:
        text, thinking = case
        text = text.replace("Sure.", "Sûre 日本 🦜.")  # multi-byte characters to split
        ids = BYTES.encode(text)
        kwargs: dict[str, Any] = {"tools": TOOLS, "thinking": thinking, "encoder": BYTES}
        expected = batch_or_error(ids, **kwargs)
        assert expected == batch_or_error(text, tools=TOOLS, thinking=thinking)
        got, events = stream_or_error(cut(ids, points), **kwargs)
        assert got == expected
        if events is not None:
            assert isinstance(got, Completion)
            check_events(got, events)
            assert not any("\ufffd" in e.text for e in events if not isinstance(e, ToolCallEvent))

    def test_partial_markers_are_held_back(self) -> None:
        parser = StreamParser()
        assert parser.feed("abc</thi") == [ReasoningDelta("abc")]
        assert parser.feed("nk>xy") == [ContentDelta("xy")]
        assert parser.feed("z <tool_") == [ContentDelta("z ")]
        assert parser.feed("call>") == []  # a <tool_call>: is <function= next?
        assert parser.feed("\n") == []
        assert parser.feed("<funct") == []
        assert parser.feed("ion=f>\n</function>\n") == []
        # A call is dispatched when the output ends (a later closer could still turn
        # this </tool_call> into data of the value).
        assert parser.feed("</tool_call>") == []
        assert parser.feed("</thi") == []
        assert parser.flush() == [ToolCallEvent(0, ToolCall("f", {})), ContentDelta("</thi")]
        assert parser.finish() == Completion(
            reasoning="abc", content="xyz </thi", tool_calls=(ToolCall("f", {}),)
        )

    def test_bare_mention_streams_without_waiting(self) -> None:
        # club-3090 issue 72 / vLLM issue 22975: after a literal <tool_call> in prose the stream
        # went silent until the end. The look-ahead is bounded: the first non-space character
        # after the marker decides.
        parser = StreamParser(thinking=False)
        assert parser.feed("The <tool_call>") == [ContentDelta("The ")]
        assert parser.feed(" tag") == [ContentDelta("<tool_call>"), ContentDelta(" tag")]
        assert parser.feed(" wraps calls.") == [ContentDelta(" wraps calls.")]

    def test_call_events_come_when_the_output_ends(self) -> None:
        # Until the output ends, a later </parameter></function></tool_call> could make
        # this </tool_call> data of the value, so the call is held back.
        parser = StreamParser(tools=TOOLS, thinking=False)
        assert not any(isinstance(e, ToolCallEvent) for e in parser.feed(DALLAS))
        assert parser.flush() == [ToolCallEvent(0, DALLAS_CALL)]

    def test_call_in_unclosed_reasoning_waits_for_the_verdict(self) -> None:
        parser = StreamParser()
        assert parser.feed("plan ") == [ReasoningDelta("plan ")]
        assert parser.feed(DALLAS) == []  # reasoning or a call: depends on a later </think>
        assert parser.feed(" more</think>") == [ReasoningDelta(DALLAS + " more")]
        parser = StreamParser()
        parser.feed("plan " + DALLAS)
        assert parser.flush() == [ToolCallEvent(0, DALLAS_CALL)]

    def test_parse_error_surfaces_at_the_batch_offset_and_sticks(self) -> None:
        text = "ok " + DALLAS + "<tool_call>\n<function=f>\nbad\n</function>\n</tool_call>"
        with pytest.raises(ParseError) as batch:
            answer(text)
        parser = StreamParser(thinking=False)
        with pytest.raises(ParseError) as streamed:
            for ch in text:
                parser.feed(ch)
            parser.flush()
        assert streamed.value.offset == batch.value.offset == text.index("bad")
        with pytest.raises(ParseError):
            parser.feed("more")
        with pytest.raises(ParseError):
            parser.finish()

    def test_finish_alone_flushes_and_the_stream_then_closes(self) -> None:
        parser = StreamParser()
        parser.feed("x</th")
        assert parser.finish() == Completion(reasoning="x</th")
        assert parser.flush() == []
        with pytest.raises(ValueError):
            parser.feed("y")

    def test_text_and_ids_do_not_mix(self) -> None:
        parser = StreamParser(encoder=BYTES)
        parser.feed("text")
        with pytest.raises(PromptError, match="delta"):
            parser.feed([1000])


# ============================================================================================
# Completion values and parse_tool_call


class TestCompletionValue:
    def test_to_turn_and_to_message(self) -> None:
        c = parse_completion("why\n</think>\n\nSure.\n\n" + DALLAS, TOOLS)
        assert c.to_turn() == Turn(
            role="assistant", content="Sure.", reasoning="why", tool_calls=(DALLAS_CALL,)
        )
        assert c.to_message() == {
            "role": "assistant",
            "content": "Sure.",
            "reasoning_content": "why",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "name": "get_current_weather",
                        "arguments": json.dumps(
                            {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}
                        ),
                    },
                }
            ],
        }

    def test_completion_is_frozen(self) -> None:
        with pytest.raises(AttributeError):
            Completion().content = "x"  # type: ignore[misc]


class TestParseToolCall:
    def test_first_complete_call(self) -> None:
        text = "Sure.\n" + DALLAS + "\n" + span("calculate_area", ("shape", "x"))
        assert parse_tool_call(text) == DALLAS_CALL
        assert parse_tool_call(text, tools=TOOLS) == DALLAS_CALL

    def test_none_without_a_complete_call(self) -> None:
        assert parse_tool_call("just text") is None
        assert parse_tool_call("<tool_call>\n<function=f>\n") is None
        assert parse_tool_call("<think>" + DALLAS + "</think>done") is None
        assert parse_tool_call("Use <tool_call> tags") is None

    def test_spans_after_the_first_call_are_not_parsed(self) -> None:
        text = DALLAS + "<tool_call>\n<function=>\n</tool_call>"
        assert parse_tool_call(text) == DALLAS_CALL
        with pytest.raises(ParseError):
            parse_tool_call("<tool_call>\n<function=>\n</tool_call>" + DALLAS)

    def test_token_ids(self) -> None:
        assert parse_tool_call(BYTES.encode("a " + DALLAS), encoder=BYTES) == DALLAS_CALL

    def test_thinking_output(self) -> None:
        draft = "draft " + span("rm", ("path", "/")) + "\n</think>\n\n"
        assert parse_tool_call(draft + DALLAS, thinking=True) == DALLAS_CALL
        assert parse_tool_call(draft, thinking=True) is None


# ============================================================================================
# Round trip: render an assistant turn with the protocol layer, parse the body back


def _protocol() -> Any:
    return pytest.importorskip("qwen_encode.protocol", reason="qwen_encode.protocol not available")


_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.:-]{0,15}", fullmatch=True)
_PIECES = [
    "<",
    ">",
    "/",
    "=",
    "\n",
    "\n\n",
    " ",
    "\t",
    "\r\n",
    "{",
    "}",
    '"',
    "'",
    "x",
    "é",
    "日",
    "🦜",
    "</parameter>",
    "<parameter=",
    "</function>",
    "<function=",
    "<b>",
    "null",
    "true",
    "42",
    "  ",
    "\\",
    *mk.PROTOCOL_MARKERS,
]


def _texts(markers: bool) -> st.SearchStrategy[str]:
    pieces = _PIECES if markers else [p for p in _PIECES if p not in mk.PROTOCOL_MARKERS]
    free = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
    text = st.lists(st.sampled_from(pieces) | free, max_size=10).map("".join)
    if not markers:
        text = text.filter(lambda t: not any(m in t for m in mk.PROTOCOL_MARKERS))
    return text


def _unambiguous(value: str) -> bool:
    """Whether a raw string value can be told from the markup around it. The template splices
    strings raw, so a value holding a line-start <parameter=/</function>, or a </parameter>
    followed by a tag, renders exactly like different arguments: no parser can get it back."""
    framed = "\n" + value + "\n"
    if "\n<parameter=" in framed or "\n</function>" in framed:
        return False
    at = value.find("</parameter>")
    while at >= 0:
        rest = value[at + len("</parameter>") :].lstrip()
        if rest.startswith(("<parameter=", "</function>", "<function=")):
            return False
        at = value.find("</parameter>", at + 1)
    return True


_JSON_LEAF = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)

_SCHEMA_OF: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


@st.composite
def _turns(draw: Callable[..., Any], markers: bool, with_schema: bool) -> tuple[Turn, list[Any]]:
    def part() -> str | None:
        text = draw(_texts(markers)).strip()
        return text or None

    reasoning, content = part(), part()
    calls, tools = [], []
    for index in range(draw(st.integers(min_value=0, max_value=3))):
        name = f"{draw(_NAME)}_{index}"  # unique, so each call has its own schema
        arguments: dict[str, Any] = {}
        for parameter in draw(st.lists(_NAME, max_size=4, unique=True)):
            strings = _texts(markers).filter(_unambiguous)
            if not with_schema:
                # Without a schema a string comes back as JSON when it parses as JSON.
                strings = strings.filter(lambda s: typed_parameter_value(s) == s)
            arguments[parameter] = draw(strings | _JSON)
        calls.append(ToolCall(name, arguments))
        properties = {p: {"type": _SCHEMA_OF[type(v)]} for p, v in arguments.items()}
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "parameters": {"type": "object", "properties": properties},
                },
            }
        )
    # A call after content that opens a code fence is quoted text (docs/guide/parsing.md): such
    # a turn cannot come back, whatever the parser does, so it is not drawn.
    assume(not (calls and _opens_fence(content)))
    turn = Turn("assistant", content=content, reasoning=reasoning, tool_calls=tuple(calls))
    return turn, (tools if with_schema else [])


def _opens_fence(text: str | None) -> bool:
    """Whether ``text`` has a line that could open a CommonMark code fence: ``` or ~~~ after at
    most three spaces (balanced or not: this errs on the side of leaving a turn out)."""
    for line in (text or "").split("\n"):
        code = line.lstrip(" ")
        if len(line) - len(code) <= 3 and code.startswith(("```", "~~~")):
            return True
    return False


def _nfc(turn: Turn) -> bool:
    texts = [turn.content or "", turn.reasoning or ""]
    for call in turn.tool_calls:
        texts += [call.name, *call.arguments, json.dumps(call.arguments, ensure_ascii=False)]
    return all(unicodedata.normalize("NFC", t) == t for t in texts)


@pytest.fixture(scope="module")
def qwen_encoder_ids() -> Any:
    """The library's Encoder for the real checkpoint (it has ``marker_ids`` and ``decode``)."""
    if not TOKENIZER.exists():
        pytest.skip(
            f"{TOKENIZER} is absent: the real checkpoint lives in ../shared beside the repo"
        )
    encoder_module = pytest.importorskip("qwen_encode.encoder", reason="qwen_encode.encoder absent")
    return encoder_module.Encoder.from_pretrained(TOKENIZER.parent, engine="tokenizers")


def _body_text(turn: Turn) -> str:
    text = _protocol().format_turn(turn).text
    head, tail = mk.TURN_OPEN + "assistant\n", mk.TURN_CLOSE + "\n"
    assert text.startswith(head) and text.endswith(tail)
    return text[len(head) : -len(tail)]


def _body_ids(turn: Turn) -> list[int]:
    protocol = _protocol()
    segments = protocol.format_turn(turn).segments
    # <|im_start|> "assistant\n" … <|im_end|> "\n": the body is what the model writes.
    assert segments[0] == protocol.Special(mk.TURN_OPEN, 0, False)
    assert segments[-2].marker == mk.TURN_CLOSE
    ids: list[int] = []
    for segment in segments[2:-2]:
        if isinstance(segment, protocol.Special):
            ids += BYTES.marker(segment.marker)
        else:
            ids += BYTES.text(segment.text)
    return ids


_ROUND_TRIP = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class TestRoundTrip:
    @_ROUND_TRIP
    @given(case=_turns(markers=False, with_schema=True))
    def test_text_with_schema(self, case: tuple[Turn, list[Any]]) -> None:
        turn, tools = case
        body = _body_text(turn)
        assert parse_completion(body, tools=tools, thinking=False).to_turn() == turn
        # thinking=True: the primer wrote "<think>\n", the model the rest.
        primed = body.removeprefix(mk.THINK_OPEN + "\n")
        assert parse_completion(primed, tools=tools, thinking=True).to_turn() == turn

    @_ROUND_TRIP
    @given(case=_turns(markers=False, with_schema=False))
    def test_text_without_schema(self, case: tuple[Turn, list[Any]]) -> None:
        turn, _ = case
        # Without a schema a string comes back as JSON when it parses as JSON ("false").
        assume(
            all(
                not isinstance(v, str) or typed_parameter_value(v) == v
                for call in turn.tool_calls
                for v in call.arguments.values()
            )
        )
        assert parse_completion(_body_text(turn), thinking=False).to_turn() == turn

    @_ROUND_TRIP
    @given(case=_turns(markers=True, with_schema=True), points=st.lists(st.integers(0, 10**6)))
    def test_token_ids_with_markers_spelled_in_text(
        self, case: tuple[Turn, list[Any]], points: list[int]
    ) -> None:
        turn, tools = case
        ids = _body_ids(turn)
        assert parse_completion(ids, tools=tools, thinking=False, encoder=BYTES).to_turn() == turn
        final, events = stream(cut(ids, points), tools=tools, thinking=False, encoder=BYTES)
        assert final.to_turn() == turn
        check_events(final, events)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=_turns(markers=True, with_schema=True))
    def test_real_encoder_ids(self, qwen_encoder_ids: Any, case: tuple[Turn, list[Any]]) -> None:
        """Through the library's own Encoder (literal mode: caller text spelling a marker is
        encoded as ordinary tokens) and back, one token at a time."""
        turn, tools = case
        assume(_nfc(turn))  # the tokenizer normalises text to NFC before encoding it
        encoder = qwen_encoder_ids
        ids = encoder.encode(_protocol().format_turn(turn)).input_ids.tolist()
        body = ids[ids.index(encoder.marker_ids[mk.THINK_OPEN]) : len(ids) - 2]
        assert ids[len(ids) - 2] == encoder.marker_ids[mk.TURN_CLOSE]
        assert parse_completion(body, tools, thinking=False, encoder=encoder).to_turn() == turn
        final, events = stream([[i] for i in body], tools=tools, thinking=False, encoder=encoder)
        assert final.to_turn() == turn
        check_events(final, events)

    def test_worked_example(self) -> None:
        turn = Turn(
            "assistant",
            content="Checking.",
            reasoning="The user wants weather.",
            tool_calls=(
                ToolCall("get_current_weather", {"city": "  New\nYork\n", "state": "NY"}),
                ToolCall(
                    "calculate_area",
                    {"shape": "42", "dimensions": {"w": [1, 2.5]}, "precision": 10**25},
                ),
            ),
        )
        assert parse_completion(_body_text(turn), TOOLS, thinking=False).to_turn() == turn


def test_random_soak_against_the_batch_parse() -> None:
    """Random completions assembled from the grammar's pieces: streaming by random chunks always
    agrees with the batch parse, errors included (a cheap fuzz beyond the fixed corpus)."""
    rng = random.Random(1234)
    pieces = [
        mk.THINK_OPEN,
        mk.THINK_CLOSE,
        mk.TOOL_CALL_OPEN,
        mk.TOOL_CALL_CLOSE,
        "<function=f>",
        "<function=",
        "</function>",
        "<parameter=a>",
        "</parameter>",
        "\n",
        " ",
        "x",
        "1",
        "<",
        "日",
    ]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 25)))
        thinking = rng.random() < 0.5
        expected = batch_or_error(text, thinking=thinking)
        points = [rng.randint(0, len(text)) for _ in range(rng.randint(0, 8))]
        got, events = stream_or_error(cut(text, points), thinking=thinking)
        assert got == expected, text
        if events is not None:
            check_events(got, events)
