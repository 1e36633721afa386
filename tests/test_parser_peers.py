"""The peers' own Qwen3-Coder / Qwen 3.5+ XML tool-call cases, run against this parser.

Each case names its source file and test; its input and its expected value are the peer's own
(only the inputs and expectations are taken, never their code). Where our rules differ on
purpose, the case says ``differs=`` with our reading, and the docs' "Parsing completions:
differences from the peers" (docs/guide/parsing.md) lists it with the peer's behaviour and ours.
Every case is run in batch, streamed by text one character at a time, and streamed by byte IDs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from qwen_encode.conversation import ToolCall
from qwen_encode.errors import ParseError
from qwen_encode.parser import Completion, StreamParser, parse_completion
from tests.test_parser import BYTES

VLLM = "vllm-project/vllm tests/tool_parsers/test_qwen3coder_tool_parser.py"
VLLM_SHARED = "vllm-project/vllm tests/tool_parsers/test_qwen3_xml_coder_shared.py"
VLLM_XML = "vllm-project/vllm tests/tool_parsers/test_qwen3xml_tool_parser.py"
SGLANG = "sgl-project/sglang test/registered/function_call/test_qwen3_coder_detector/test_cases.py"
SGLANG_UNIT = "sglang test_qwen3_coder_detector (TestQwen3CoderDetector, unit tests)"
SGLANG_SRT = "sgl-project/sglang test/srt/test_function_call_parser.py (TestQwen3CoderDetector)"
SGLANG_END = "sglang TestQwen3CoderDetectorMalformedParameterEnd"
OLLAMA = "ollama/ollama model/parsers/qwen3coder_test.go"
LLAMA_UP = "ggml-org/llama.cpp tests/test-chat.cpp (test_template_output_peg_parsers, Qwen3.5-4B)"
LLAMA_QC = "ggml-org/llama.cpp tests/test-chat.cpp (test_template_output_peg_parsers, Qwen3-Coder)"
LLAMA = "llama.cpp tests/chat-parsers/test-qwen3-coder-xml.cpp (test-chat split, ochafik/llama.cpp)"


def tool(function: str, /, **schemas: Any) -> dict[str, Any]:
    properties = {p: s if isinstance(s, dict) else {"type": s} for p, s in schemas.items()}
    parameters = {"type": "object", "properties": properties}
    return {"type": "function", "function": {"name": function, "parameters": parameters}}


VLLM_TOOLS = [
    tool("get_current_weather", city="string", state="string", unit="string"),
    tool("calculate_area", shape="string", dimensions="object", precision="integer"),
]
SGLANG_TOOLS = [
    tool("get_current_weather", location="string", unit="string", days="integer"),
    tool("sql_interpreter", query="string", dry_run="boolean"),
    tool("TodoWrite", todos="array"),
    tool("get_current_time", cities={"anyOf": [{"type": "array"}, {"type": "null"}]}),
    tool("get_weather", city="string", days="integer"),
]
LLAMA_TOOLS = [
    tool("special_function", arg1="integer"),
    tool("complex_function", name="string", age="integer", active="boolean", score="number"),
    tool("code_function", code="string"),
    tool("json_function", config="object"),
    tool("array_function", items="array"),
    tool("boolean_function", enabled="boolean", debug="boolean"),
    tool("null_function", optional_param="null"),
    tool("math_function", negative="integer", decimal="number", scientific="number"),
]

LLAMA_UP_TOOLS = [
    tool("special_function", arg1="integer"),
    tool("special_function_with_opt", arg1="integer", arg2="integer"),
    tool("python", code="string"),
    tool("edit", filename="string", oldString="string", newString="string"),
    tool("run_in_terminal", command="string"),
    tool("manage_todo_list", todos="array"),
    tool("empty_args"),
    {
        "type": "function",
        "function": {"name": "empty_args_no_props", "parameters": {"type": "object"}},
    },
]
LLAMA_QC_TOOLS = [
    *LLAMA_UP_TOOLS,
    tool("html", markup="string"),
    tool("todo_list", todos="array"),
    tool(
        "tool_2req_4opt",
        req1="string",
        req2="integer",
        opt1="string",
        opt2="integer",
        opt3="string",
        opt4="integer",
    ),
    tool(
        "tool_2req_5opt",
        req1="string",
        req2="integer",
        opt1="string",
        opt2="integer",
        opt3="string",
        opt4="integer",
        opt5="string",
    ),
    tool("set_nullable_str", name={"type": ["string", "null"]}),
    tool("set_nullable_str_nf", name={"type": ["null", "string"]}),
    tool("set_nullable_int", count={"type": ["integer", "null"]}),
    tool("set_union", value={"type": ["string", "object"]}, amount={"type": ["string", "integer"]}),
    tool("set_unit", unit={"enum": ["celsius", "fahrenheit"]}),
]
LLAMA_SPECIAL_CALL = (
    "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n"
    "</tool_call>"
)
LLAMA_PARALLEL = (
    LLAMA_SPECIAL_CALL + "\n<tool_call>\n<function=special_function_with_opt>\n"
    "<parameter=arg1>\n1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n</function>\n"
    "</tool_call>"
)
LLAMA_SPECIAL = ToolCall("special_function", {"arg1": 1})
LLAMA_PWD = ToolCall("run_in_terminal", {"command": "pwd"})
LLAMA_PARALLEL_CALLS = (
    LLAMA_SPECIAL,
    ToolCall("special_function_with_opt", {"arg1": 1, "arg2": 2}),
)
LLAMA_PYTHON = (
    "<tool_call>\n<function=python>\n<parameter=code>\ndef hello():\n"
    '    print("Hello, world!")\n\nhello()\n</parameter>\n</function>\n</tool_call>'
)
LLAMA_PYTHON_CALL = ToolCall(
    "python", {"code": 'def hello():\n    print("Hello, world!")\n\nhello()'}
)
LLAMA_PWD_CALL = (
    "<tool_call>\n<function=run_in_terminal>\n<parameter=command>\npwd\n</parameter>\n"
    "</function>\n</tool_call>"
)

WEATHER_DALLAS = (
    "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n"
    "<parameter=state>\nTX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n"
    "</function>\n</tool_call>"
)
DALLAS = ToolCall("get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"})
RECTANGLE = ToolCall(
    "calculate_area",
    {"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2},
)
WEATHER_PARALLEL = (
    WEATHER_DALLAS + "\n" + WEATHER_DALLAS.replace("Dallas", "Orlando").replace("TX", "FL")
)
ORLANDO = ToolCall("get_current_weather", {"city": "Orlando", "state": "FL", "unit": "fahrenheit"})
WEATHER_DALLAS_TX = (
    "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n"
    "<parameter=state>\nTX\n</parameter>\n</function>\n</tool_call>"
)
DALLAS_TX = ToolCall("get_current_weather", {"city": "Dallas", "state": "TX"})
# vLLM's type-conversion case, which SGLang's older class copies
TYPES_TEXT = (
    "<tool_call>\n<function=test_types>\n<parameter=int_param>\n42\n</parameter>\n"
    "<parameter=float_param>\n3.14\n</parameter>\n<parameter=bool_param>\ntrue\n"
    "</parameter>\n<parameter=str_param>\nhello world\n</parameter>\n"
    '<parameter=obj_param>\n{"key": "value"}\n</parameter>\n</function>\n</tool_call>'
)
TYPES_CALL = ToolCall(
    "test_types",
    {
        "int_param": 42,
        "float_param": 3.14,
        "bool_param": True,
        "str_param": "hello world",
        "obj_param": {"key": "value"},
    },
)
TYPES_TOOLS = [
    tool(
        "test_types",
        int_param="integer",
        float_param="float",
        bool_param="boolean",
        str_param="string",
        obj_param="object",
    )
]

# vLLM test_qwen3_xml_coder_shared.py: values that quote the call format
VLLM_XML_TAGS_IN_CONTENT = (
    "char_deltas = [\n"
    '    "<tool_call>\\n",\n'
    '    "<parameter=query>\\n",\n'
    '    "\\n</parameter>\\n",\n'
    '    "</function>\\n",\n'
    "]\n"
)
VLLM_FULL_NESTED_CALL = (
    'doc = """\n<tool_call>\n<function=write_file>\n<parameter=path>\nliteral/value.txt\n'
    "</parameter>\n<parameter=content>\nhello\n</parameter>\n</function>\n</tool_call>\n"
    '"""\n'
)
VLLM_OUT_OF_SCHEMA_NESTED = (
    'template = """\n<tool_call>\n<function=foo>\n<parameter=bar>baz</parameter>\n'
    '</function>\n</tool_call>\n"""\n'
)
VLLM_TWO_CALLS = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nLondon\n</parameter>\n</function>\n</tool_call>"
)
WRITE_FILE_TOOLS = [tool("write_file", path="string", content="string")]


@dataclass(frozen=True)
class Case:
    source: str
    test: str
    text: str
    calls: tuple[ToolCall, ...] | type[ParseError]
    content: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    differs: str = ""  # our reading where it differs from the peer's (the docs list it)
    thinking: bool = False  # the prompt's primer left the reasoning span open
    reasoning: str | None = None


CASES = [
    # ---- vLLM
    Case(
        VLLM,
        "test_extract_tool_calls_no_tools",
        "This is a test response without any tool calls",
        (),
        "This is a test response without any tool calls",
        VLLM_TOOLS,
    ),
    Case(VLLM, "test_extract_tool_calls[single_tool]", WEATHER_DALLAS, (DALLAS,), None, VLLM_TOOLS),
    Case(
        VLLM,
        "test_extract_tool_calls[single_tool_with_content]",
        "Sure! Let me check the weather for you." + WEATHER_DALLAS,
        (DALLAS,),
        "Sure! Let me check the weather for you.",
        VLLM_TOOLS,
    ),
    Case(
        VLLM,
        "test_extract_tool_calls[single_tool_multiline_param]",
        "<tool_call>\n<function=calculate_area>\n<parameter=shape>\nrectangle\n</parameter>\n"
        '<parameter=dimensions>\n{"width": 10, \n "height": 20}\n</parameter>\n'
        "<parameter=precision>\n2\n</parameter>\n</function>\n</tool_call>",
        (RECTANGLE,),
        None,
        VLLM_TOOLS,
    ),
    Case(
        VLLM,
        "test_extract_tool_calls[parallel_tools]",
        WEATHER_PARALLEL,
        (DALLAS, ORLANDO),
        None,
        VLLM_TOOLS,
    ),
    Case(
        VLLM,
        "test_extract_tool_calls[tool_with_typed_params]",
        "Let me calculate that area for you.<tool_call>\n<function=calculate_area>\n"
        "<parameter=shape>\ncircle\n</parameter>\n<parameter=dimensions>\n"
        '{"radius": 15.5}\n</parameter>\n<parameter=precision>\n3\n</parameter>\n'
        "</function>\n</tool_call>",
        (
            ToolCall(
                "calculate_area",
                {"shape": "circle", "dimensions": {"radius": 15.5}, "precision": 3},
            ),
        ),
        "Let me calculate that area for you.",
        VLLM_TOOLS,
    ),
    Case(
        VLLM,
        "test_extract_tool_calls_fallback_no_tags",
        "<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n"
        "<parameter=state>\nTX\n</parameter>\n</function>",
        (ToolCall("get_current_weather", {"city": "Dallas", "state": "TX"}),),
        None,
        VLLM_TOOLS,
    ),
    Case(
        VLLM,
        "test_extract_tool_calls_type_conversion",
        TYPES_TEXT,
        (TYPES_CALL,),
        None,
        TYPES_TOOLS,
    ),
    Case(
        VLLM,
        "test_extract_tool_calls_anyof_type_conversion",
        "<tool_call>\n<function=test_anyof>\n<parameter=anyof_int>\n5\n</parameter>\n"
        "<parameter=anyof_str>\nhello\n</parameter>\n<parameter=anyof_array>\n"
        '["a", "b", "c"]\n</parameter>\n<parameter=anyof_obj>\n{"key": "value"}\n'
        "</parameter>\n<parameter=type_as_array>\n42\n</parameter>\n"
        "<parameter=multi_non_null>\nsome text\n</parameter>\n</function>\n</tool_call>",
        (
            ToolCall(
                "test_anyof",
                {
                    "anyof_int": 5,
                    "anyof_str": "hello",
                    "anyof_array": ["a", "b", "c"],
                    "anyof_obj": {"key": "value"},
                    "type_as_array": 42,
                    "multi_non_null": "some text",
                },
            ),
        ),
        None,
        [
            tool(
                "test_anyof",
                anyof_int={"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 5},
                anyof_str={"anyOf": [{"type": "string"}, {"type": "null"}]},
                anyof_array={
                    "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
                },
                anyof_obj={"anyOf": [{"type": "object"}, {"type": "null"}]},
                type_as_array={"type": ["integer", "null"]},
                multi_non_null={
                    "anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]
                },
            )
        ],
    ),
    Case(
        VLLM,
        "test_extract_tool_calls_missing_closing_parameter_tag",
        "Let me check the weather for you:\n<tool_call>\n<function=get_current_weather>\n"
        "<parameter=city>\nDallas\n<parameter=state>\nTX\n</parameter>\n"
        "<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>",
        (DALLAS,),
        "Let me check the weather for you:",
        VLLM_TOOLS,
    ),
    Case(
        VLLM,
        "test_extract_tool_calls_streaming_missing_opening_tag",
        "I'll check the weather for you.\n\n<function=get_current_weather>\n"
        "<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n</parameter>\n"
        "<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>",
        (DALLAS,),
        "I'll check the weather for you.",
        VLLM_TOOLS,
    ),
    Case(
        VLLM,
        "test_malformed_xml_no_gt_delimiter",
        "<tool_call>\n<function=get_current_weather\n<parameter=city>Dallas</parameter>\n"
        "</function>\n</tool_call>",
        ParseError,
        None,
        VLLM_TOOLS,
        differs="vLLM returns no call for the malformed span (must not crash); we raise "
        "ParseError naming the offset of the tag",
    ),
    Case(
        VLLM,
        "test_none_tool_calls_filtered",
        "<tool_call>\n<function=bad_func_no_gt\n</function>\n</tool_call>\n<tool_call>\n"
        "<function=get_current_weather>\n<parameter=city>Dallas</parameter>\n"
        "<parameter=state>TX</parameter>\n</function>\n</tool_call>",
        ParseError,
        None,
        VLLM_TOOLS,
        differs="vLLM drops the malformed call and dispatches the good one; we raise "
        "ParseError for the whole turn (a host decides; nothing is dropped silently)",
    ),
    Case(
        VLLM,
        "test_anyof_parameter_not_double_encoded",
        "<tool_call>\n<function=update_record>\n"
        '<parameter=data>{"key": "value", "count": 42}</parameter>\n</function>\n</tool_call>',
        (ToolCall("update_record", {"data": {"key": "value", "count": 42}}),),
        None,
        [tool("update_record", data={"anyOf": [{"type": "object"}, {"type": "null"}]})],
    ),
    Case(
        VLLM,
        "test_streaming_multi_param_single_chunk",
        "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>"
        "\n<parameter=state>\nTX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>"
        "\n</function>\n</tool_call>",
        (DALLAS,),
        None,
        VLLM_TOOLS,
    ),
    Case(
        VLLM,
        "test_no_double_serialization_string_args",
        "<tool_call>\n<function=greet>\n<parameter=message>hello world</parameter>\n"
        "</function>\n</tool_call>",
        (ToolCall("greet", {"message": "hello world"}),),
        None,
        [tool("greet", message="string")],
    ),
    Case(
        VLLM,
        "test_extract_tool_calls_anyof_type_conversion_streaming",
        "<tool_call>\n<function=search_web>\n<parameter=query>\nvllm tool parser\n</parameter>\n"
        "<parameter=count>\n10\n</parameter>\n<parameter=verbose>\ntrue\n</parameter>\n"
        "</function>\n</tool_call>",
        (ToolCall("search_web", {"query": "vllm tool parser", "count": 10, "verbose": True}),),
        None,
        [
            tool(
                "search_web",
                query={"anyOf": [{"type": "string"}, {"type": "null"}]},
                count={"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 5},
                verbose={"anyOf": [{"type": "boolean"}, {"type": "null"}]},
            )
        ],
    ),
    Case(
        VLLM,
        "test_extract_tool_calls_streaming[no_tools]",
        "This is a test without tools",
        (),
        "This is a test without tools",
        VLLM_TOOLS,
    ),
    Case(
        VLLM,
        "test_extract_tool_calls_streaming[parallel_tools]",
        WEATHER_DALLAS
        + "\n"
        + WEATHER_DALLAS.replace("Dallas", "Orlando")
        .replace("TX", "FL")
        .replace("fahrenheit", "celsius"),
        (
            DALLAS,
            ToolCall("get_current_weather", {"city": "Orlando", "state": "FL", "unit": "celsius"}),
        ),
        None,
        VLLM_TOOLS,
    ),
    Case(
        VLLM,
        "test_extract_tool_calls_streaming_incremental",
        "I'll check the weather." + WEATHER_DALLAS_TX,
        (DALLAS_TX,),
        "I'll check the weather.",
        VLLM_TOOLS,
    ),
    # ---- vLLM, the cases both of its Qwen3 XML parsers must pass
    Case(
        VLLM_SHARED,
        "test_extract_tool_calls_complex_type_with_single_quote",
        "<tool_call>\n<function=test_types>\n<parameter=obj_param>\n{'key': 'value'}\n"
        "</parameter>\n</function>\n</tool_call>",
        (ToolCall("test_types", {"obj_param": "{'key': 'value'}"}),),
        None,
        TYPES_TOOLS,
        differs="vLLM reads the single-quoted object as a Python literal ({'key': 'value'}); "
        "we accept only JSON for an object schema, so the value stays the string",
    ),
    Case(
        VLLM_SHARED,
        "test_extract_tool_calls_streaming_speculative_decode_loss",
        "<tool_call>\n<function=test>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
        "</tool_call>",
        (ToolCall("test", {"city": "Paris"}),),
        None,
        VLLM_TOOLS,
    ),
    Case(
        VLLM_SHARED,
        "test_string_null_value_preserved",
        "<tool_call>\n<function=search>\n<parameter=query>null</parameter>\n</function>\n"
        "</tool_call>",
        (ToolCall("search", {"query": "null"}),),
        None,
        [tool("search", query="string")],
    ),
    Case(
        VLLM_SHARED,
        "test_anyof_string_null_keeps_value_as_string",
        "<tool_call>\n<function=set_code>\n<parameter=code>42</parameter>\n</function>\n"
        "</tool_call>",
        (ToolCall("set_code", {"code": "42"}),),
        None,
        [tool("set_code", code={"anyOf": [{"type": "string"}, {"type": "null"}]})],
    ),
    Case(
        VLLM_SHARED,
        "test_anyof_integer_null_parses_as_int",
        "<tool_call>\n<function=set_count>\n<parameter=count>42</parameter>\n</function>\n"
        "</tool_call>",
        (ToolCall("set_count", {"count": 42}),),
        None,
        [tool("set_count", count={"anyOf": [{"type": "integer"}, {"type": "null"}]})],
    ),
    Case(
        VLLM_SHARED,
        "test_double_encoded_object_param_nonstreaming",
        "<tool_call>\n<function=process>\n<parameter=name>\nhello\n</parameter>\n"
        "<parameter=data>\n\"{'key': 'value', 'n': 1}\"\n</parameter>\n</function>\n"
        "</tool_call>\n",
        (ToolCall("process", {"name": "hello", "data": "\"{'key': 'value', 'n': 1}\""}),),
        None,
        [tool("process", name="string", data="object")],
        differs="vLLM decodes a JSON string holding a Python repr twice into the object "
        "{'key': 'value', 'n': 1}; we read the value once, as JSON, so it stays the string the "
        "model wrote (the Qwen 3.8 template writes objects with tojson, never so)",
    ),
    Case(
        VLLM_SHARED,
        "test_content_with_xml_structural_tags_nonstreaming",
        "<tool_call>\n<function=write_file>\n<parameter=path>\ntest.py\n</parameter>\n"
        "<parameter=content>\n" + VLLM_XML_TAGS_IN_CONTENT + "</parameter>\n</function>\n"
        "</tool_call>\n",
        (
            ToolCall(
                "write_file",
                {"path": "test.py", "content": VLLM_XML_TAGS_IN_CONTENT.rstrip("\n")},
            ),
        ),
        None,
        WRITE_FILE_TOOLS,
    ),
    Case(
        VLLM_SHARED,
        "test_content_with_param_like_lines_nonstreaming",
        "<tool_call>\n<function=write_file>\n<parameter=path>\ntest_template.py\n</parameter>\n"
        '<parameter=content>\nTOOL_CALL_TEMPLATE = """\n</parameter>\n<parameter=new_string>\n'
        '#!/usr/bin/env python3\n</parameter>\n"""\n</parameter>\n</function>\n</tool_call>\n',
        (
            ToolCall(
                "write_file",
                {
                    "path": "test_template.py",
                    "content": 'TOOL_CALL_TEMPLATE = """',
                    "new_string": '#!/usr/bin/env python3\n</parameter>\n"""',
                },
            ),
        ),
        None,
        WRITE_FILE_TOOLS,
        differs="vLLM keeps the line-start </parameter> + <parameter=new_string> inside "
        "content because write_file declares no new_string; we read the structure first, "
        "whatever the name: content ends there and new_string is an undeclared parameter "
        "(ToolCall.undeclared names it, so a host can refuse the call)",
    ),
    Case(
        VLLM_SHARED,
        "test_content_with_real_param_name_literal_nonstreaming",
        "<tool_call>\n<function=write_file>\n<parameter=path>\nfixture.py\n</parameter>\n"
        '<parameter=content>\ndoc = """\n<parameter=path>\nliteral/value\n</parameter>\n'
        '"""\n</parameter>\n</function>\n</tool_call>',
        ParseError,
        None,
        WRITE_FILE_TOOLS,
        differs="vLLM keeps the embedded <parameter=path> … </parameter> inside content; read "
        "as structure it gives path a second, different value, so we raise ParseError "
        "naming both (never a silent pick)",
    ),
    Case(
        VLLM_SHARED,
        "test_content_with_full_nested_tool_call_nonstreaming",
        "<tool_call>\n<function=write_file>\n<parameter=path>\nfixture.py\n</parameter>\n"
        "<parameter=content>\n" + VLLM_FULL_NESTED_CALL + "</parameter>\n</function>\n"
        "</tool_call>",
        (
            ToolCall(
                "write_file",
                {"path": "fixture.py", "content": VLLM_FULL_NESTED_CALL.rstrip("\n")},
            ),
        ),
        None,
        WRITE_FILE_TOOLS,
    ),
    Case(
        VLLM_SHARED,
        "test_two_tools_second_with_out_of_schema_nested_literal_nonstreaming",
        "<tool_call>\n<function=foo>\n<parameter=bar>baz</parameter>\n</function>\n"
        "</tool_call>\n\n<tool_call>\n<function=write_file>\n<parameter=path>\nfixture.py\n"
        "</parameter>\n<parameter=content>\n"
        + VLLM_OUT_OF_SCHEMA_NESTED
        + "</parameter>\n</function>\n</tool_call>",
        (
            ToolCall("foo", {"bar": "baz"}),
            ToolCall(
                "write_file",
                {"path": "fixture.py", "content": VLLM_OUT_OF_SCHEMA_NESTED.rstrip("\n")},
            ),
        ),
        None,
        WRITE_FILE_TOOLS,
    ),
    Case(
        VLLM_SHARED,
        "test_array_with_json_bool",
        '<tool_call>\n<function=pick>\n<parameter=items>\n["a", "b", 1, true]\n</parameter>\n'
        "</function>\n</tool_call>",
        (ToolCall("pick", {"items": ["a", "b", 1, True]}),),
        None,
        [tool("pick", items="array")],
    ),
    Case(
        VLLM_SHARED,
        "test_two_tool_calls_in_one_streaming_chunk",
        VLLM_TWO_CALLS,
        (ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "London"})),
        None,
        [tool("get_weather", city="string")],
    ),
    Case(
        VLLM_SHARED,
        "test_streaming_two_tool_calls_plus_trailing_text_one_delta",
        VLLM_TWO_CALLS + "\nAll done!",
        (ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "London"})),
        "All done!",
        [tool("get_weather", city="string")],
    ),
    Case(
        VLLM_SHARED,
        "test_streaming_trailing_text_with_final_close_in_same_delta",
        "<tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>"
        "\n</tool_call>\nI hope this helps!",
        (ToolCall("get_weather", {"city": "Paris"}),),
        "I hope this helps!",
        [tool("get_weather", city="string")],
    ),
    Case(
        VLLM_SHARED,
        "test_python_none_value_for_nullable_int",
        "<tool_call>\n<function=set_count>\n<parameter=count>None</parameter>\n</function>\n"
        "</tool_call>",
        (ToolCall("set_count", {"count": "None"}),),
        None,
        [tool("set_count", count={"anyOf": [{"type": "integer"}, {"type": "null"}]})],
        differs="vLLM reads Python's None as null (the Qwen 3.5 template wrote null arguments "
        "so); the Qwen 3.8 template writes them with tojson as null, so we keep the "
        "string 'None' the model wrote",
    ),
    Case(
        VLLM_SHARED,
        "test_jinja_template_phantom_tool_call_is_rejected_nonstreaming",
        "<tool_call>\n<function={{ tc.name }}>\n<parameter={{ k }}>\n{{ v }}\n</parameter>\n"
        "</function>\n</tool_call>\n\n<tool_call>\n<function=write_file>\n"
        "<parameter=path>\nout.txt\n</parameter>\n<parameter=content>\nhello\n</parameter>\n"
        "</function>\n</tool_call>",
        ParseError,
        None,
        WRITE_FILE_TOOLS,
        differs="vLLM drops the call named '{{ tc.name }}' and dispatches write_file; a name "
        "the format cannot carry makes the turn a ParseError here (nothing dropped silently)",
    ),
    Case(
        VLLM_SHARED,
        "test_inline_empty_tool_call_preserves_content_before_real_call",
        "I'll show: <tool_call>example</tool_call>. Now real:\n<tool_call>\n<function=log>\n"
        "<parameter=msg>\nhi\n</parameter>\n</function>\n</tool_call>",
        ParseError,
        None,
        [tool("log", msg="string")],
        differs="vLLM keeps the text around the empty span as content and runs log; a closed "
        "<tool_call> span that holds no call is a ParseError here",
    ),
    *[
        Case(
            VLLM_SHARED,
            f"test_anyof_string_null_with_null_literal_returns_none[{literal}]",
            f"<tool_call>\n<function=set_value>\n<parameter=optional>{literal}</parameter>\n"
            "</function>\n</tool_call>",
            (ToolCall("set_value", {"optional": ours}),),
            None,
            [tool("set_value", optional={"anyOf": [{"type": "string"}, {"type": "null"}]})],
            differs=differs,
        )
        for literal, ours, differs in (
            ("null", None, ""),
            (
                "None",
                "None",
                "vLLM reads Python's None as null; the Qwen 3.8 template writes null "
                "arguments with tojson as null, so for a string-or-null schema we keep the "
                "string 'None' the model wrote",
            ),
        )
    ],
    # ---- vLLM's Qwen3 XML parser (its ToolParserTestConfig)
    Case(
        VLLM_XML,
        "no_tool_calls_output",
        "This is a regular response without any tool calls.",
        (),
        "This is a regular response without any tool calls.",
    ),
    Case(
        VLLM_XML,
        "single_tool_call_output",
        "<tool_call>\n<function=get_weather>\n<parameter=city>Tokyo</parameter>\n</function>\n"
        "</tool_call>",
        (ToolCall("get_weather", {"city": "Tokyo"}),),
    ),
    # ---- SGLang
    Case(
        SGLANG, "plain_text", "This is plain text test", (), "This is plain text test", SGLANG_TOOLS
    ),
    Case(
        SGLANG,
        "single_tool_call",
        "<function=get_current_weather>\n<parameter=location>Boston</parameter>\n"
        "<parameter=unit>celsius</parameter>\n<parameter=days>3</parameter>\n</function>",
        (ToolCall("get_current_weather", {"location": "Boston", "unit": "celsius", "days": 3}),),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG,
        "double_tool_call",
        "Text prefix + double tool call test\n\n<function=get_current_weather>\n"
        "<parameter=location>New York</parameter>\n</function>\n<function=sql_interpreter>\n"
        "<parameter=query>SELECT * FROM users</parameter>\n<parameter=dry_run>True</parameter>"
        "\n</function>\n",
        (
            ToolCall("get_current_weather", {"location": "New York"}),
            ToolCall("sql_interpreter", {"query": "SELECT * FROM users", "dry_run": True}),
        ),
        "Text prefix + double tool call test",
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG,
        "implicit_parameter_close",
        "Text prefix + implicit parameter close test\n\n<function=get_current_weather>\n"
        "<parameter=location>Paris\n<parameter=unit>celsius\n<parameter=days>3\n</function>",
        (ToolCall("get_current_weather", {"location": "Paris", "unit": "celsius", "days": 3}),),
        "Text prefix + implicit parameter close test",
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG,
        "complex_schema",
        "Text prefix + complex schema tool call test\n\n<function=TodoWrite>\n"
        "<parameter=todos>\n[\n"
        ' {"content": "Buy a new car", "status": \'pending\'},\n'
        ' {"content": "Buy a new house", "status": "completed"}\n]\n</parameter>\n'
        "</function>\n\n",
        (
            ToolCall(
                "TodoWrite",
                {
                    "todos": '[\n {"content": "Buy a new car", "status": '
                    '\'pending\'},\n {"content": "Buy a new house", '
                    '"status": "completed"}\n]'
                },
            ),
        ),
        "Text prefix + complex schema tool call test",
        SGLANG_TOOLS,
        differs="SGLang reads the single-quoted 'pending' as a Python literal and returns the "
        "array; we accept only JSON for an array schema, so the value stays the string",
    ),
    Case(
        SGLANG_UNIT,
        "test_multiple_tool_calls",
        "<tool_call>\n<function=get_current_weather>\n<parameter=location>New York</parameter>"
        "\n</function>\n</tool_call>\n<tool_call>\n<function=sql_interpreter>\n"
        "<parameter=query>SELECT * FROM users</parameter>\n<parameter=dry_run>True</parameter>"
        "\n</function>\n</tool_call>",
        (
            ToolCall("get_current_weather", {"location": "New York"}),
            ToolCall("sql_interpreter", {"query": "SELECT * FROM users", "dry_run": True}),
        ),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_anyof_array_parameter_conversion_null",
        "<tool_call>\n<function=get_current_time>\n<parameter=cities>\nnull\n</parameter>\n"
        "</function>\n</tool_call>",
        (ToolCall("get_current_time", {"cities": None}),),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_empty_parameter_value",
        "<tool_call>\n<function=get_current_weather>\n<parameter=location></parameter>\n"
        "</function>\n</tool_call>",
        (ToolCall("get_current_weather", {"location": ""}),),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_incomplete_tool_call",
        "<tool_call>\n<function=get_current_weather>\n<parameter=location>London",
        (),
        None,
        SGLANG_TOOLS,
    ),
    *[
        Case(
            SGLANG_END,
            f"test_non_streaming_strips_drifted_end_marker[{marker}]",
            f"<tool_call>\n<function=get_weather>\n<parameter=city>\nShanghai\n{marker}\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
            (ToolCall("get_weather", {"city": "Shanghai", "days": 3}),),
            None,
            SGLANG_TOOLS,
        )
        for marker in ("</parameter1>", "</parameter_function>", "</parameter")
    ],
    Case(
        SGLANG_END,
        "test_angle_brackets_inside_value_are_kept",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\na <b>tag</b> city\n"
        "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        (ToolCall("get_weather", {"city": "a <b>tag</b> city", "days": 3}),),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG,
        "single_tool_call_with_text",
        "Text prefix + tool call test\n\n<function=get_current_weather>\n"
        "<parameter=location>Boston</parameter>\n<parameter=unit>celsius</parameter>\n"
        "<parameter=days>3</parameter>\n</function>",
        (ToolCall("get_current_weather", {"location": "Boston", "unit": "celsius", "days": 3}),),
        "Text prefix + tool call test",
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG,
        "random_fragmentation",
        "Text prefix + random fragmentation stress test\n\n<function=get_current_weather>\n"
        "<parameter=location>San Francisco</parameter>\n</function>",
        (ToolCall("get_current_weather", {"location": "San Francisco"}),),
        "Text prefix + random fragmentation stress test",
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_plain_text_only",
        "This is plain text without any tool calls.",
        (),
        "This is plain text without any tool calls.",
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_single_tool_call",
        "<tool_call>\n<function=get_current_weather>\n<parameter=location>Boston</parameter>\n"
        "<parameter=unit>celsius</parameter>\n<parameter=days>3</parameter>\n</function>\n"
        "</tool_call>",
        (ToolCall("get_current_weather", {"location": "Boston", "unit": "celsius", "days": 3}),),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_single_tool_call_with_text_prefix",
        "Let me check the weather for you.\n\n<tool_call>\n<function=get_current_weather>\n"
        "<parameter=location>New York</parameter>\n</function>\n</tool_call>",
        (ToolCall("get_current_weather", {"location": "New York"}),),
        "Let me check the weather for you.",
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_streaming_single_tool_call",
        "<tool_call><function=get_current_weather><parameter=location>Boston</parameter>"
        "<parameter=unit>celsius</parameter></function></tool_call>",
        (ToolCall("get_current_weather", {"location": "Boston", "unit": "celsius"}),),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_streaming_with_text_and_tool",
        "Let me help you.\n\n<tool_call><function=get_current_weather>"
        "<parameter=location>Paris</parameter></function></tool_call>",
        (ToolCall("get_current_weather", {"location": "Paris"}),),
        "Let me help you.",
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_integer_parameter_conversion",
        "<tool_call>\n<function=get_current_weather>\n<parameter=location>Tokyo</parameter>\n"
        "<parameter=days>5</parameter>\n</function>\n</tool_call>",
        (ToolCall("get_current_weather", {"location": "Tokyo", "days": 5}),),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_boolean_parameter_conversion",
        "<tool_call>\n<function=sql_interpreter>\n<parameter=query>SELECT 1</parameter>\n"
        "<parameter=dry_run>True</parameter>\n</function>\n</tool_call>",
        (ToolCall("sql_interpreter", {"query": "SELECT 1", "dry_run": True}),),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_complex_array_parameter",
        "<tool_call>\n<function=TodoWrite>\n<parameter=todos>\n[\n"
        '  {"content": "Buy groceries", "status": "pending"},\n'
        '  {"content": "Finish report", "status": "completed"}\n]\n</parameter>\n'
        "</function>\n</tool_call>",
        (
            ToolCall(
                "TodoWrite",
                {
                    "todos": [
                        {"content": "Buy groceries", "status": "pending"},
                        {"content": "Finish report", "status": "completed"},
                    ]
                },
            ),
        ),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_anyof_array_parameter_conversion",
        '<tool_call>\n<function=get_current_time>\n<parameter=cities>\n["NYC"]\n</parameter>\n'
        "</function>\n</tool_call>",
        (ToolCall("get_current_time", {"cities": ["NYC"]}),),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_streaming_anyof_array_parameter_conversion",
        '<tool_call><function=get_current_time><parameter=cities>["NYC"]</parameter>'
        "</function></tool_call>",
        (ToolCall("get_current_time", {"cities": ["NYC"]}),),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_parameter_with_special_characters",
        "<tool_call>\n<function=sql_interpreter>\n"
        "<parameter=query>SELECT * FROM users WHERE name = 'John \"Doe\"'</parameter>\n"
        "</function>\n</tool_call>",
        (
            ToolCall(
                "sql_interpreter", {"query": "SELECT * FROM users WHERE name = 'John \"Doe\"'"}
            ),
        ),
        None,
        SGLANG_TOOLS,
    ),
    Case(
        SGLANG_UNIT,
        "test_nested_anyof_array_with_multiple_types_parameter_conversion",
        "<tool_call>\n<function=process_optional_list>\n"
        '<parameter=optional_items_to_process>\n[true, null, {"enabled": false}]\n'
        "</parameter>\n</function>\n</tool_call>",
        (
            ToolCall(
                "process_optional_list",
                {"optional_items_to_process": [True, None, {"enabled": False}]},
            ),
        ),
        None,
        [
            tool(
                "process_optional_list",
                optional_items_to_process={
                    "anyOf": [
                        {
                            "anyOf": [
                                {"type": "null"},
                                {"anyOf": [{"type": "array", "items": {}}, {"type": "null"}]},
                            ]
                        },
                        {"type": "null"},
                    ],
                    "default": None,
                },
            )
        ],
    ),
    # ---- SGLang's older Qwen3-Coder class (test/srt), written on vLLM's cases
    Case(
        SGLANG_SRT,
        "test_detect_and_parse_no_tools",
        "This is a test response without any tool calls",
        (),
        "This is a test response without any tool calls",
    ),
    Case(
        SGLANG_SRT, "test_detect_and_parse_single_tool", WEATHER_DALLAS, (DALLAS,), None, VLLM_TOOLS
    ),
    Case(
        SGLANG_SRT,
        "test_detect_and_parse_with_content",
        "Sure! Let me check the weather for you." + WEATHER_DALLAS,
        (DALLAS,),
        "Sure! Let me check the weather for you.",
        VLLM_TOOLS,
    ),
    Case(
        SGLANG_SRT,
        "test_detect_and_parse_multiline_param",
        "<tool_call>\n<function=calculate_area>\n<parameter=shape>\nrectangle\n</parameter>\n"
        '<parameter=dimensions>\n{"width": 10,\n "height": 20}\n</parameter>\n'
        "<parameter=precision>\n2\n</parameter>\n</function>\n</tool_call>",
        (RECTANGLE,),
        None,
        VLLM_TOOLS,
    ),
    Case(
        SGLANG_SRT,
        "test_detect_and_parse_parallel_tools",
        WEATHER_PARALLEL,
        (DALLAS, ORLANDO),
        None,
        VLLM_TOOLS,
        differs="SGLang returns the newline between the two calls as normal_text ('\\n'); "
        "content here is trimmed, so whitespace alone between calls is no content (None)",
    ),
    Case(
        SGLANG_SRT,
        "test_parse_streaming_simple",
        "Sure! Let me check the weather." + WEATHER_DALLAS_TX,
        (DALLAS_TX,),
        "Sure! Let me check the weather.",
        VLLM_TOOLS,
    ),
    Case(
        SGLANG_SRT,
        "test_parse_streaming_incomplete (completed)",
        WEATHER_DALLAS_TX,
        (DALLAS_TX,),
        None,
        VLLM_TOOLS,
    ),
    Case(
        SGLANG_SRT,
        "test_edge_case_no_parameters",
        "<tool_call>\n<function=get_current_weather>\n</function>\n</tool_call>",
        (ToolCall("get_current_weather", {}),),
        None,
        VLLM_TOOLS,
    ),
    Case(
        SGLANG_SRT,
        "test_edge_case_special_chars_in_value",
        "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas->TX\n"
        "</parameter>\n</function>\n</tool_call>",
        (ToolCall("get_current_weather", {"city": "Dallas->TX"}),),
        None,
        VLLM_TOOLS,
    ),
    Case(
        SGLANG_SRT,
        "test_extract_tool_calls_type_conversion",
        TYPES_TEXT,
        (TYPES_CALL,),
        None,
        TYPES_TOOLS,
    ),
    Case(
        SGLANG_SRT,
        "test_parse_streaming_incremental",
        "I'll check the weather." + WEATHER_DALLAS_TX,
        (DALLAS_TX,),
        "I'll check the weather.",
        VLLM_TOOLS,
    ),
    Case(
        SGLANG_SRT,
        "test_parse_streaming_multiple_tools",
        "<tool_call>\n        <function=get_current_weather>\n        <parameter=city>\n"
        "        Dallas\n        </parameter>\n        <parameter=state>\n        TX\n"
        "        </parameter>\n        </function>\n        </tool_call>\n"
        "        Some text in between.\n        <tool_call>\n        <function=calculate_area>\n"
        "        <parameter=shape>\n        circle\n        </parameter>\n"
        '        <parameter=dimensions>\n        {"radius": 5}\n        </parameter>\n'
        "        </function>\n        </tool_call>",
        (
            ToolCall(
                "get_current_weather",
                {"city": "        Dallas\n        ", "state": "        TX\n        "},
            ),
            ToolCall(
                "calculate_area", {"shape": "        circle\n        ", "dimensions": {"radius": 5}}
            ),
        ),
        "Some text in between.",
        VLLM_TOOLS,
        differs="SGLang trims all whitespace around a value (city = 'Dallas', shape = 'circle'); "
        "we strip exactly the template's one leading and one trailing newline, so a string "
        "keeps the indentation the model wrote (typed values are read with it trimmed)",
    ),
    # ---- Ollama (TestQwenToolParser: raw calls, here wrapped in their <tool_call>)
    Case(
        OLLAMA,
        "TestQwenToolParser/simple tool call",
        "<tool_call>\n<function=get_current_temperature>\n<parameter=location>\n"
        "San Francisco\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n"
        "</tool_call>",
        (ToolCall("get_current_temperature", {"location": "San Francisco", "unit": "celsius"}),),
    ),
    Case(
        OLLAMA,
        "TestQwenToolParser/names with spaces",
        "<tool_call>\n<function=get current temperature>\n<parameter=location with spaces>\n"
        "San Francisco\n</parameter>\n</function>\n</tool_call>",
        ParseError,
        differs="Ollama keeps names with spaces; the template writes names raw into the tags "
        "and a name with whitespace cannot be a tool, so we raise ParseError",
    ),
    Case(
        OLLAMA,
        "TestQwenToolParser/names with quotes",
        '<tool_call>\n<function="get current temperature">\n'
        '<parameter="location with spaces">\nSan Francisco\n</parameter>\n</function>\n'
        "</tool_call>",
        ParseError,
        differs="Ollama keeps the quotes in the names; we raise ParseError (a name the format "
        "cannot carry)",
    ),
    Case(
        OLLAMA,
        "TestQwenToolParser/tool call with typed parameters",
        "<tool_call>\n<function=calculate>\n<parameter=x>\n3.14\n</parameter>\n"
        "<parameter=y>\n42\n</parameter>\n<parameter=enabled>\ntrue\n</parameter>\n"
        '<parameter=items>\n["a", "b", "c"]\n</parameter>\n</function>\n</tool_call>',
        (ToolCall("calculate", {"x": 3.14, "y": 42, "enabled": True, "items": ["a", "b", "c"]}),),
        None,
        [tool("calculate", x="number", y="integer", enabled="boolean", items="array")],
    ),
    Case(
        OLLAMA,
        "TestQwenToolParser/ampersands in parameter values",
        '<tool_call>\n<function=exec>\n<parameter=command>\nls && echo "done"\n</parameter>\n'
        "</function>\n</tool_call>",
        (ToolCall("exec", {"command": 'ls && echo "done"'}),),
    ),
    Case(
        OLLAMA,
        "TestQwenToolParser/angle brackets in parameter values",
        '<tool_call>\n<function=exec>\n<parameter=command>\nls && echo "a > b and a < b"\n'
        "</parameter>\n</function>\n</tool_call>",
        (ToolCall("exec", {"command": 'ls && echo "a > b and a < b"'}),),
    ),
    Case(
        OLLAMA,
        "TestQwenToolParser/unicode in function names and parameters",
        "<tool_call>\n<function=获取天气>\n<parameter=城市>\n北京\n</parameter>\n"
        "<parameter=message>\nHello! 你好! 🌟 مرحبا\n</parameter>\n</function>\n</tool_call>",
        (ToolCall("获取天气", {"城市": "北京", "message": "Hello! 你好! 🌟 مرحبا"}),),
    ),
    Case(
        OLLAMA,
        "TestQwenParserStreaming/unicode content",
        "你好 🌍<tool_call>\n<function=f>\n</function>\n</tool_call>مرحبا",
        (ToolCall("f", {}),),
        "你好 🌍مرحبا",
    ),
    Case(
        OLLAMA,
        "TestQwenParserStreaming/partial tool open tag fakeout",
        "abc\n<tool_call fakeout",
        (),
        "abc\n<tool_call fakeout",
    ),
    # ---- llama.cpp
    Case(
        LLAMA,
        "special_function, spaces around the tags",
        " <tool_call>\n<function=special_function> <parameter=arg1>1\n</parameter>\n"
        "</function> </tool_call>\n\n\n",
        (ToolCall("special_function", {"arg1": 1}),),
        None,
        LLAMA_TOOLS,
    ),
    Case(
        LLAMA,
        "Basic XML tool call parsing (indented)",
        "<tool_call>\n  <function=special_function>\n    <parameter=arg1>\n      1\n"
        "    </parameter>\n  </function>\n</tool_call>",
        (ToolCall("special_function", {"arg1": 1}),),
        None,
        LLAMA_TOOLS,
    ),
    Case(
        LLAMA,
        "Multiple parameters with different types (indented)",
        "<tool_call>\n  <function=complex_function>\n    <parameter=name>\n      John Doe\n"
        "    </parameter>\n    <parameter=age>\n      30\n    </parameter>\n"
        "    <parameter=active>\n      true\n    </parameter>\n    <parameter=score>\n"
        "      95.5\n    </parameter>\n  </function>\n</tool_call>",
        (
            ToolCall(
                "complex_function",
                {"name": "      John Doe\n    ", "age": 30, "active": True, "score": 95.5},
            ),
        ),
        None,
        LLAMA_TOOLS,
        differs="llama.cpp trims all whitespace around a value (name = 'John Doe'); we strip "
        "exactly the template's one leading and one trailing newline, so a string keeps the "
        "indentation the model wrote (typed values are read with it trimmed)",
    ),
    Case(
        LLAMA,
        "Multiline content with newlines and indentation",
        "<tool_call>\n  <function=code_function>\n    <parameter=code>\ndef hello():\n"
        '    print("Hello, World!")\n    return True\n    </parameter>\n  </function>\n'
        "</tool_call>",
        (
            ToolCall(
                "code_function",
                {"code": 'def hello():\n    print("Hello, World!")\n    return True\n    '},
            ),
        ),
        None,
        LLAMA_TOOLS,
        differs="llama.cpp trims the trailing indentation before </parameter>; we keep it "
        "(only one newline is the template's)",
    ),
    Case(
        LLAMA,
        "JSON object as parameter value",
        "<tool_call>\n  <function=json_function>\n    <parameter=config>\n"
        '      {"host": "localhost", "port": 8080, "ssl": false}\n    </parameter>\n'
        "  </function>\n</tool_call>",
        (ToolCall("json_function", {"config": {"host": "localhost", "port": 8080, "ssl": False}}),),
        None,
        LLAMA_TOOLS,
    ),
    Case(
        LLAMA,
        "Boolean values (true/false)",
        "<tool_call>\n  <function=boolean_function>\n    <parameter=enabled>\n      true\n"
        "    </parameter>\n    <parameter=debug>\n      false\n    </parameter>\n"
        "  </function>\n</tool_call>",
        (ToolCall("boolean_function", {"enabled": True, "debug": False}),),
        None,
        LLAMA_TOOLS,
    ),
    Case(
        LLAMA,
        "Null value",
        "<tool_call>\n  <function=null_function>\n    <parameter=optional_param>\n"
        "      null\n    </parameter>\n  </function>\n</tool_call>",
        (ToolCall("null_function", {"optional_param": None}),),
        None,
        LLAMA_TOOLS,
    ),
    Case(
        LLAMA,
        "Negative numbers and scientific notation",
        "<tool_call>\n  <function=math_function>\n    <parameter=negative>\n      -42\n"
        "    </parameter>\n    <parameter=decimal>\n      -3.14\n    </parameter>\n"
        "    <parameter=scientific>\n      1.23e-4\n    </parameter>\n  </function>\n"
        "</tool_call>",
        (ToolCall("math_function", {"negative": -42, "decimal": -3.14, "scientific": 1.23e-4}),),
        None,
        LLAMA_TOOLS,
    ),
    # ---- llama.cpp upstream: the Qwen3.5-4B template's cases (the Qwen 3.5+ XML format)
    Case(
        LLAMA_UP,
        "Qwen3.5: reasoning and content (AUTO, thinking)",
        "I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?",
        (),
        "Hello, world!\nWhat's up?",
        LLAMA_UP_TOOLS,
        thinking=True,
        reasoning="I'm\nthinking",
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: message_assist_call (thinking off)",
        LLAMA_SPECIAL_CALL,
        (LLAMA_SPECIAL,),
        None,
        LLAMA_UP_TOOLS,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: message_assist_call_thoughts",
        "I'm\nthinking\n</think>\n\n" + LLAMA_SPECIAL_CALL,
        (LLAMA_SPECIAL,),
        None,
        LLAMA_UP_TOOLS,
        thinking=True,
        reasoning="I'm\nthinking",
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: parallel special_function, special_function_with_opt",
        LLAMA_PARALLEL,
        LLAMA_PARALLEL_CALLS,
        None,
        LLAMA_UP_TOOLS,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: python code with a blank line",
        LLAMA_PYTHON,
        (LLAMA_PYTHON_CALL,),
        None,
        LLAMA_UP_TOOLS,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: edit (filename, oldString, newString)",
        "<tool_call>\n<function=edit>\n<parameter=filename>\nfoo.c\n</parameter>\n"
        "<parameter=oldString>\n#iclunde\n</parameter>\n<parameter=newString>\n#include\n"
        "</parameter>\n</function>\n</tool_call>",
        (
            ToolCall(
                "edit", {"filename": "foo.c", "oldString": "#iclunde", "newString": "#include"}
            ),
        ),
        None,
        LLAMA_UP_TOOLS,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: a value that ends in a newline keeps it",
        "<tool_call>\n<function=edit>\n<parameter=filename>\nfoo.c\n</parameter>\n"
        "<parameter=oldString>\n#iclunde\n</parameter>\n<parameter=newString>\n#include\n\n"
        "</parameter>\n</function>\n</tool_call>",
        (
            ToolCall(
                "edit", {"filename": "foo.c", "oldString": "#iclunde", "newString": "#include\n"}
            ),
        ),
        None,
        LLAMA_UP_TOOLS,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: code that starts with indent",
        "<tool_call>\n<function=python>\n<parameter=code>\n"
        '    print("Hello, world!")\n</parameter>\n</function>\n</tool_call>',
        (ToolCall("python", {"code": '    print("Hello, world!")'}),),
        None,
        LLAMA_UP_TOOLS,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: json_schema output after reasoning",
        'I need to output the invoice details in JSON\n</think>\n\n{"amount": 123.45, '
        '"date": "2025-12-03"}',
        (),
        '{"amount": 123.45, "date": "2025-12-03"}',
        thinking=True,
        reasoning="I need to output the invoice details in JSON",
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: a tool call ends the prefilled thinking block",
        LLAMA_PWD_CALL,
        (LLAMA_PWD,),
        None,
        LLAMA_UP_TOOLS,
        thinking=True,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: ...including after the model has thought about it",
        "Need to inspect the current directory.\n" + LLAMA_PWD_CALL,
        (LLAMA_PWD,),
        None,
        LLAMA_UP_TOOLS,
        thinking=True,
        reasoning="Need to inspect the current directory.",
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: no args tool",
        "<tool_call>\n<function=empty_args>\n</function>\n</tool_call>",
        (ToolCall("empty_args", {}),),
        None,
        LLAMA_UP_TOOLS,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: no args tool with no properties defined",
        "<tool_call>\n<function=empty_args_no_props>\n</function>\n</tool_call>",
        (ToolCall("empty_args_no_props", {}),),
        None,
        LLAMA_UP_TOOLS,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: <think> written again after the primer",
        "<think>\n\n</think>\n\n" + LLAMA_SPECIAL_CALL,
        (LLAMA_SPECIAL,),
        None,
        LLAMA_UP_TOOLS,
        differs="llama.cpp keeps the repeated <think> as reasoning text ('<think>\\n\\n'); "
        "we read a leading <think> as the marker, so the reasoning is empty (None)",
        thinking=True,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: </think> alone, then a call",
        "</think>\n\n" + LLAMA_SPECIAL_CALL,
        (LLAMA_SPECIAL,),
        None,
        LLAMA_UP_TOOLS,
        thinking=True,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: </think> alone, then a run_in_terminal call",
        "</think>\n\n" + LLAMA_PWD_CALL,
        (LLAMA_PWD,),
        None,
        LLAMA_UP_TOOLS,
        thinking=True,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: </think>, content, then a call",
        "</think>\n\nLet me inspect the current directory.\n" + LLAMA_PWD_CALL,
        (LLAMA_PWD,),
        "Let me inspect the current directory.",
        LLAMA_UP_TOOLS,
        differs="llama.cpp keeps the newline before <tool_call> in content "
        "('Let me inspect the current directory.\\n'); content here is trimmed",
        thinking=True,
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: reasoning, content, then a call",
        "I should inspect the directory.\n</think>\n\nLet me inspect it now.\n" + LLAMA_PWD_CALL,
        (LLAMA_PWD,),
        "Let me inspect it now.",
        LLAMA_UP_TOOLS,
        differs="llama.cpp keeps the newline before <tool_call> in content "
        "('Let me inspect it now.\\n'); content here is trimmed",
        thinking=True,
        reasoning="I should inspect the directory.",
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: after a todo-list turn, reasoning then a call",
        "I need to run a terminal command.\n</think>\n\n" + LLAMA_PWD_CALL,
        (LLAMA_PWD,),
        None,
        LLAMA_UP_TOOLS,
        thinking=True,
        reasoning="I need to run a terminal command.",
    ),
    Case(
        LLAMA_UP,
        "Qwen3.5: after a todo-list turn, reasoning, content, then a call",
        "I need to run a terminal command.\n</think>\n\nLet me inspect the current directory.\n"
        + LLAMA_PWD_CALL,
        (LLAMA_PWD,),
        "Let me inspect the current directory.",
        LLAMA_UP_TOOLS,
        differs="llama.cpp keeps the newline before <tool_call> in content "
        "('Let me inspect the current directory.\\n'); content here is trimmed",
        thinking=True,
        reasoning="I need to run a terminal command.",
    ),
    # ---- llama.cpp upstream: the Qwen3-Coder template's cases
    Case(
        LLAMA_QC,
        "Qwen3-Coder: content",
        "Hello, world!\nWhat's up?",
        (),
        "Hello, world!\nWhat's up?",
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: message_assist_call",
        LLAMA_SPECIAL_CALL,
        (LLAMA_SPECIAL,),
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: the opening <tool_call> skipped",
        "<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>",
        (LLAMA_SPECIAL,),
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: content, then a call without <tool_call>",
        "Let me call it.\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n"
        "</function>\n</tool_call>",
        (LLAMA_SPECIAL,),
        "Let me call it.",
        LLAMA_QC_TOOLS,
        differs="llama.cpp keeps the newline before the call in content ('Let me call it.\\n'); "
        "content here is trimmed",
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: only the first call omits <tool_call>",
        "<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n"
        "</tool_call>\n<tool_call>\n<function=special_function_with_opt>\n<parameter=arg1>\n1\n"
        "</parameter>\n<parameter=arg2>\n2\n</parameter>\n</function>\n</tool_call>",
        LLAMA_PARALLEL_CALLS,
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: parallel calls",
        LLAMA_PARALLEL,
        LLAMA_PARALLEL_CALLS,
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: code content (multiline)",
        LLAMA_PYTHON,
        (LLAMA_PYTHON_CALL,),
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: code content (asian unicode chars)",
        "<tool_call>\n<function=python>\n<parameter=code>\n格\n</parameter>\n</function>\n</tool_call>",
        (ToolCall("python", {"code": "格"}),),
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: HTML tag content",
        "<tool_call>\n<function=html>\n<parameter=markup>\n<html>\n <head>\n"
        "  <title>Hello!</title>\n </head>\n</html>\n</parameter>\n</function>\n</tool_call>",
        (
            ToolCall(
                "html", {"markup": "<html>\n <head>\n  <title>Hello!</title>\n </head>\n</html>"}
            ),
        ),
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: TODO list (array of objects)",
        "<tool_call>\n<function=todo_list>\n<parameter=todos>\n"
        '[{"item": "Check stuff", "selected": false}, {"item": "Prepare stuff", "selected": true}]'
        "\n</parameter>\n</function>\n</tool_call>",
        (
            ToolCall(
                "todo_list",
                {
                    "todos": [
                        {"item": "Check stuff", "selected": False},
                        {"item": "Prepare stuff", "selected": True},
                    ]
                },
            ),
        ),
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: required arguments in any order",
        "<tool_call>\n<function=edit>\n<parameter=newString>\n#include\n</parameter>\n"
        "<parameter=filename>\nfoo.c\n</parameter>\n<parameter=oldString>\n#iclunde\n"
        "</parameter>\n</function>\n</tool_call>",
        (
            ToolCall(
                "edit", {"newString": "#include", "filename": "foo.c", "oldString": "#iclunde"}
            ),
        ),
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: tool_2req_4opt, req2 first",
        "<tool_call>\n<function=tool_2req_4opt>\n<parameter=req2>\n42\n</parameter>\n"
        "<parameter=req1>\nhello\n</parameter>\n<parameter=opt2>\n200\n</parameter>\n"
        "</function>\n</tool_call>",
        (ToolCall("tool_2req_4opt", {"req2": 42, "req1": "hello", "opt2": 200}),),
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: tool_2req_4opt, optional arguments reversed",
        "<tool_call>\n<function=tool_2req_4opt>\n<parameter=req1>\nhello\n</parameter>\n"
        "<parameter=req2>\n42\n</parameter>\n<parameter=opt4>\n100\n</parameter>\n"
        "<parameter=opt2>\n200\n</parameter>\n</function>\n</tool_call>",
        (ToolCall("tool_2req_4opt", {"req1": "hello", "req2": 42, "opt4": 100, "opt2": 200}),),
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: tool_2req_5opt, optional arguments reversed",
        "<tool_call>\n<function=tool_2req_5opt>\n<parameter=req1>\nworld\n</parameter>\n"
        "<parameter=req2>\n7\n</parameter>\n<parameter=opt5>\nlast\n</parameter>\n"
        "<parameter=opt3>\nmiddle\n</parameter>\n<parameter=opt1>\nfirst\n</parameter>\n"
        "</function>\n</tool_call>",
        (
            ToolCall(
                "tool_2req_5opt",
                {"req1": "world", "req2": 7, "opt5": "last", "opt3": "middle", "opt1": "first"},
            ),
        ),
        None,
        LLAMA_QC_TOOLS,
    ),
    Case(
        LLAMA_QC,
        "Qwen3-Coder: tool_2req_5opt, all optional arguments shuffled",
        "<tool_call>\n<function=tool_2req_5opt>\n<parameter=req1>\ntest\n</parameter>\n"
        "<parameter=req2>\n99\n</parameter>\n<parameter=opt3>\nc\n</parameter>\n"
        "<parameter=opt1>\na\n</parameter>\n<parameter=opt5>\ne\n</parameter>\n"
        "<parameter=opt4>\n4\n</parameter>\n<parameter=opt2>\n2\n</parameter>\n</function>\n"
        "</tool_call>",
        (
            ToolCall(
                "tool_2req_5opt",
                {
                    "req1": "test",
                    "req2": 99,
                    "opt3": "c",
                    "opt1": "a",
                    "opt5": "e",
                    "opt4": 4,
                    "opt2": 2,
                },
            ),
        ),
        None,
        LLAMA_QC_TOOLS,
    ),
    *[
        Case(
            LLAMA_QC,
            f"Qwen3-Coder: {desc}",
            f"<tool_call>\n<function={function}>\n{body}</function>\n</tool_call>",
            (ToolCall(function, arguments),),
            None,
            LLAMA_QC_TOOLS,
        )
        for desc, function, body, arguments in (
            (
                'nullable string ["string", "null"]',
                "set_nullable_str",
                "<parameter=name>\nhello world\n</parameter>\n",
                {"name": "hello world"},
            ),
            (
                'nullable string, null first ["null", "string"]',
                "set_nullable_str_nf",
                "<parameter=name>\nhello world\n</parameter>\n",
                {"name": "hello world"},
            ),
            (
                'nullable integer ["integer", "null"]',
                "set_nullable_int",
                "<parameter=count>\n42\n</parameter>\n",
                {"count": 42},
            ),
            (
                "nullable string given null",
                "set_nullable_str",
                "<parameter=name>\nnull\n</parameter>\n",
                {"name": None},
            ),
            (
                "unions with string, a JSON object and a plain string",
                "set_union",
                '<parameter=value>\n{"a": 1}\n</parameter>\n<parameter=amount>\n2 dollars\n'
                "</parameter>\n",
                {"value": {"a": 1}, "amount": "2 dollars"},
            ),
            (
                "unions with string, invalid JSON and an integer",
                "set_union",
                "<parameter=value>\n{not valid json\n</parameter>\n<parameter=amount>\n42\n"
                "</parameter>\n",
                {"value": "{not valid json", "amount": 42},
            ),
            (
                "enum without a type key",
                "set_unit",
                "<parameter=unit>\ncelsius\n</parameter>\n",
                {"unit": "celsius"},
            ),
        )
    ],
]


def _outcome(run: Any) -> Completion | type[ParseError]:
    try:
        return run()
    except ParseError:
        return ParseError


def _streamed(chunks: list[Any], **kwargs: Any) -> Completion:
    parser = StreamParser(**kwargs)
    for chunk in chunks:
        parser.feed(chunk)
    return parser.finish()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.source.split()[0]}::{c.test}" for c in CASES])
def test_peer_case(case: Case) -> None:
    kwargs: dict[str, Any] = {"tools": case.tools or None, "thinking": case.thinking}
    runs = {
        "batch": _outcome(lambda: parse_completion(case.text, **kwargs)),
        "chars": _outcome(lambda: _streamed(list(case.text), **kwargs)),
        "byte ids": _outcome(
            lambda: _streamed([[i] for i in BYTES.encode(case.text)], encoder=BYTES, **kwargs)
        ),
    }
    for how, got in runs.items():
        if case.calls is ParseError:
            assert got is ParseError, (how, got)
            continue
        assert isinstance(got, Completion), (how, case.source, case.test)
        assert got.tool_calls == case.calls, (how, case.source, case.test)
        assert got.content == case.content, (how, case.source, case.test)
        assert got.reasoning == case.reasoning, (how, case.source, case.test)


# Where the docs list every deliberate difference from a peer ("Differences from the peers").
PARSING_PAGE = "docs/guide/parsing.md"


def test_every_difference_is_in_the_docs() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / PARSING_PAGE).read_text(encoding="utf-8")
    for case in CASES:
        if case.differs:
            assert case.test in page, f"{PARSING_PAGE} does not list {case.source} {case.test}"


OLLAMA_VALUES = "ollama/ollama model/parsers/qwen3coder_test.go TestQwenToolCallValueParsing"
# (desc, the parameter's types, raw text between the tags, the peer's value, our value where
# it differs on purpose). Values are compared as JSON text, so 100 and 100.0 differ.
VALUE_CASES: list[tuple[str, list[str], str, Any, Any]] = [
    ("default string value (no type specified)", [], "some-string", "some-string", None),
    ("trim a single leading and trailing newline", [], "\nsome-string\n", "some-string", None),
    (
        "trim at most one leading and trailing newline",
        [],
        "\n\nsome-string\n\n",
        "\nsome-string\n",
        None,
    ),
    (
        "newline really has to be the first character to be trimmed",
        [],
        " \nsome-string\n ",
        " \nsome-string\n ",
        None,
    ),
    ("numeric type", ["number"], "123", 123, None),
    ("integer type", ["integer"], "42", 42, None),
    ("negative integer", ["integer"], "-100", -100, None),
    ("zero integer", ["integer"], "0", 0, None),
    ("integer with leading zeros", ["integer"], "007", 7, None),
    ("large integer", ["integer"], "2147483648", 2147483648, None),
    ("float type", ["number"], "3.14", 3.14, None),
    ("negative float", ["number"], "-273.15", -273.15, None),
    ("float without decimal part", ["number"], "100.0", 100, 100.0),
    ("scientific notation positive", ["number"], "1.23e5", 123000, 123000.0),
    ("scientific notation negative", ["number"], "1.5e-3", 0.0015, None),
    ("explicit string type", ["string"], "hello world", "hello world", None),
    ("string with quotes", ["string"], 'He said "hello" to me', 'He said "hello" to me', None),
    (
        "multiline string",
        ["string"],
        "line one\nline two\nline three",
        "line one\nline two\nline three",
        None,
    ),
    ("empty string", ["string"], "", "", None),
    ("string that looks like a number", ["string"], "12345", "12345", None),
    ("boolean true", ["boolean"], "true", True, None),
    ("boolean false", ["boolean"], "false", False, None),
    ("boolean case insensitive true", ["boolean"], "True", True, None),
    ("boolean case insensitive false", ["boolean"], "FALSE", False, None),
    ("null value lowercase", ["string"], "null", None, "null"),
    ("null value case insensitive", ["integer"], "NULL", None, "NULL"),
    ("array of strings", ["array"], '["foo", "bar", "baz"]', ["foo", "bar", "baz"], None),
    (
        "array of mixed types",
        ["array"],
        '["string", 123, true, null]',
        ["string", 123, True, None],
        None,
    ),
    ("empty array", ["array"], "[]", [], None),
    (
        "simple object",
        ["object"],
        '{"key": "value", "number": 42}',
        {"key": "value", "number": 42},
        None,
    ),
    ("empty object", ["object"], "{}", {}, None),
    ("invalid integer falls back to string", ["integer"], "not-a-number", "not-a-number", None),
    ("invalid float falls back to string", ["number"], "3.14.159", "3.14.159", None),
    ("invalid boolean falls back to false", ["boolean"], "yes", False, "yes"),
    (
        "invalid JSON array falls back to string",
        ["array"],
        "[1, 2, unclosed",
        "[1, 2, unclosed",
        None,
    ),
    (
        "string with JSON-like content",
        ["string"],
        '{"this": "is", "just": "a string"}',
        '{"this": "is", "just": "a string"}',
        None,
    ),
    ("whitespace-only string", ["string"], "   ", "   ", None),
    ("string or number union - valid number", ["string", "number"], "42.5", 42.5, None),
    ("string or number union - non-numeric string", ["string", "number"], "hello", "hello", None),
    ("integer or null union - null value", ["integer", "null"], "null", None, None),
    (
        "boolean or string union - non-boolean becomes string",
        ["boolean", "string"],
        "yes",
        "yes",
        None,
    ),
    (
        "string or boolean union - valid boolean (precedence test)",
        ["string", "boolean"],
        "false",
        False,
        None,
    ),
    ("integer or number union - float value", ["integer", "number"], "42.5", 42.5, None),
    (
        "number or integer union - integer value (precedence test)",
        ["number", "integer"],
        "42",
        42,
        None,
    ),
    (
        "array or object union - valid object",
        ["array", "object"],
        '{"key": "value"}',
        {"key": "value"},
        None,
    ),
    (
        "string integer union - integer string becomes integer (precedence)",
        ["string", "integer"],
        "123",
        123,
        None,
    ),
    (
        "anyOf array or string - with plain string",
        ["array", "string"],
        "Error: could not load data",
        "Error: could not load data",
        None,
    ),
]


@pytest.mark.parametrize(
    ("desc", "types", "raw", "peer", "ours"), VALUE_CASES, ids=[c[0] for c in VALUE_CASES]
)
def test_ollama_value_parsing(desc: str, types: list[str], raw: str, peer: Any, ours: Any) -> None:
    import json

    schema: dict[str, Any] = {"type": types} if types else {}
    tools = [tool("f", p=schema)] if types else None
    text = f"<tool_call>\n<function=f>\n<parameter=p>{raw}</parameter>\n</function>\n</tool_call>"
    (call,) = parse_completion(text, tools=tools, thinking=False).tool_calls
    expected = peer if ours is None else ours
    assert json.dumps(call.arguments["p"]) == json.dumps(expected), (OLLAMA_VALUES, desc)


OLLAMA_PARSER = "ollama/ollama model/parsers/qwen3coder_test.go"
OLLAMA_CASES = [
    Case(
        OLLAMA_PARSER,
        "TestQwen3CoderParserTruncatedToolCallNoCloseTag",
        "<tool_call><function=write_file><parameter=path>/tmp/test.py</parameter>"
        "<parameter=content>print('hel",
        (),
        None,
        differs="Ollama returns the cut-off call's text as content; we keep it out of content "
        "and report it as Completion.unterminated (never dispatched either way)",
    ),
    Case(
        OLLAMA_PARSER,
        "TestQwen3CoderParserInvalidToolCallXML",
        "<tool_call>this is not valid xml at all</tool_call>",
        ParseError,
        differs="Ollama returns the span's inner text as content; a closed <tool_call> span "
        "that holds no call is a ParseError here",
    ),
    Case(
        OLLAMA_PARSER,
        "TestQwen3CoderParserValidToolCallAfterInvalid",
        "<tool_call>invalid content</tool_call>\n<tool_call><function=get_weather>"
        "<parameter=location>SF</parameter></function></tool_call>",
        ParseError,
        differs="Ollama keeps the invalid span's text as content and runs the valid call; a "
        "closed <tool_call> span that holds no call is a ParseError here",
    ),
    Case(
        OLLAMA_PARSER, "TestQwen3CoderParserContentDrainOnDone", "Hello world\n", (), "Hello world"
    ),
    Case(
        OLLAMA_PARSER,
        "TestQwen3CoderParserToolCallIndexing",
        "<tool_call><function=first><parameter=a>1</parameter></function></tool_call>\n"
        "<tool_call><function=second><parameter=b>2</parameter></function></tool_call>\n"
        "<tool_call><function=third><parameter=c>3</parameter></function></tool_call>",
        (ToolCall("first", {"a": 1}), ToolCall("second", {"b": 2}), ToolCall("third", {"c": 3})),
        None,
        differs="Ollama keeps '1' a string without a schema; we read a value without a schema "
        "as JSON when it parses, so 1",
    ),
]


@pytest.mark.parametrize("case", OLLAMA_CASES, ids=[c.test for c in OLLAMA_CASES])
def test_ollama_parser_case(case: Case) -> None:
    test_peer_case(case)


def test_every_ollama_difference_is_in_the_docs() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / PARSING_PAGE).read_text(encoding="utf-8")
    for case in OLLAMA_CASES:
        if case.differs:
            assert case.test in page, f"{PARSING_PAGE} does not list {case.source} {case.test}"
    for desc, *_, ours in VALUE_CASES:
        if ours is not None:
            assert desc in page, f"{PARSING_PAGE} does not list {OLLAMA_VALUES} {desc}"
