"""qwen_encode.json_text: the one JSON loader refuses the same text the same way everywhere."""

from __future__ import annotations

import json

import pytest

import qwen_encode as qe
from qwen_encode.conversation import load_json
from qwen_encode.json_text import MAX_JSON_DEPTH, JSONTextError, json_depth_problem, loads
from qwen_encode.parser import MAX_DEPTH, typed_parameter_value


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_the_depth_limit_is_exact() -> None:
    assert loads(_nested(MAX_JSON_DEPTH)) is not None
    with pytest.raises(JSONTextError) as raised:
        loads(_nested(MAX_JSON_DEPTH + 1))
    assert raised.value.kind == "depth"
    assert raised.value.reason == f"nests more than {MAX_JSON_DEPTH} objects or arrays deep"


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"code": "[" * 5000 + "{" * 5000})
    assert loads(text) == json.loads(text)


def test_far_past_the_decoders_own_limit_is_still_a_depth_error() -> None:
    with pytest.raises(JSONTextError) as raised:
        loads('{"a": ' * 100_000 + "1" + "}" * 100_000)
    assert raised.value.kind == "depth"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('{"a": [', "syntax"),
        ("", "syntax"),
        ("9" * 5000, "number"),  # past Python's 4,300-digit conversion limit
        (_nested(MAX_JSON_DEPTH + 1), "depth"),
    ],
)
def test_every_failure_is_typed(text: str, kind: str) -> None:
    with pytest.raises(JSONTextError) as raised:
        loads(text)
    assert raised.value.kind == kind
    assert isinstance(raised.value, ValueError)  # callers catching ValueError still work


def test_strict_refuses_what_json_does_not_have() -> None:
    for text in ("NaN", "[Infinity]", "-Infinity", "1e400"):
        loads(text)  # Python's decoder takes them
        with pytest.raises(JSONTextError, match="not valid JSON"):
            loads(text, strict=True)
    assert loads('{"a": 1.5, "b": [1, 2]}', strict=True) == {"a": 1.5, "b": [1, 2]}


def test_one_limit_for_every_reader() -> None:
    # The parser follows JSON values and schemas to the same depth the prompt side accepts.
    assert MAX_DEPTH == MAX_JSON_DEPTH
    assert typed_parameter_value(_nested(MAX_JSON_DEPTH)) == json.loads(_nested(MAX_JSON_DEPTH))
    deeper = _nested(MAX_JSON_DEPTH + 1)
    assert typed_parameter_value(deeper) == deeper  # too deep to read: it stays the string
    with pytest.raises(qe.PromptError, match=f"nests more than {MAX_JSON_DEPTH}") as raised:
        load_json(deeper, "tools")
    assert raised.value.field == "tools"
    with pytest.raises(qe.PromptError, match=f"nests more than {MAX_JSON_DEPTH}"):
        qe.parse_completion("", tools=deeper)


def test_depth_of_decoded_values() -> None:
    value: list[object] = []
    for _ in range(MAX_JSON_DEPTH):
        value = [value]
    assert json_depth_problem(value) is not None
    assert json_depth_problem(value[0]) is None
    looped: list[object] = []
    looped.append(looped)
    assert json_depth_problem(looped) is not None  # a self-containing value is too deep
