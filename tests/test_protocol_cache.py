"""The render cache's tools lists (``protocol_cache._tool_lines``): remembered by content and
only by content, never by what marshal cannot read back, not keyed where every row has its
own; and the tools block's lines are what json.dumps writes."""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qwen_encode as qe
from tests.test_robustness import HOSTILE_TEXT, JSON_LIKE, TEXT


def _lines_of(tools: Any) -> tuple[str, ...]:
    """The tools block's JSON lines as the template writes them (json.dumps of each tool,
    transformers' tojson), read from a rendered prompt."""
    prompt = qe.format_prompt([{"role": "user", "content": "q"}], tools=tools)
    system = [s for s in prompt.segments if isinstance(s, qe.Text) and s.turn < 0]
    return tuple(s.text for s in system if s.field)


def test_tools_lines_are_remembered_by_content_and_only_by_content() -> None:
    from qwen_encode import protocol

    def tool(parameters: Any) -> dict[str, Any]:
        return {"type": "function", "function": {"name": "f", "parameters": parameters}}

    protocol.clear_render_cache()
    try:
        tools = [tool({"n": 1, "s": "x"})]
        first = _lines_of(json.loads(json.dumps(tools)))
        assert first == (json.dumps(tools[0], ensure_ascii=False),)
        again = _lines_of(json.loads(json.dumps(tools)))  # equal content, other objects
        info = protocol.render_cache_info()
        assert again == first and (info["tools_entries"], info["tools_hits"]) == (1, 1)
        # The same list mutated in place, and values that compare equal but are written
        # differently (True == 1 == 1.0; key order), each get their own lines.
        tools[0]["function"]["parameters"]["n"] = 2
        variants = [
            tools,
            [tool({"n": True, "s": "x"})],
            [tool({"n": 1.0, "s": "x"})],
            [tool({"s": "x", "n": 1})],
            [tool({"n": "1", "s": "x"})],
        ]
        for variant in variants:
            assert _lines_of(variant) == (json.dumps(variant[0], ensure_ascii=False),)
        assert protocol.render_cache_info()["tools_entries"] == 1 + len(variants)
        # A tuple is written as a list: the same lines (another entry, the same block).
        assert _lines_of([tool({"n": (1, 2)})]) == _lines_of([tool({"n": [1, 2]})])
    finally:
        protocol.clear_render_cache()


def test_tools_lines_of_lists_that_share_objects_otherwise_are_their_own() -> None:
    """marshal's back-references follow how a list shares its objects: equal content shared
    otherwise is another key (a miss, the same lines), rows parsed alike share one entry, and a
    list that holds itself is refused every time, never remembered."""
    from qwen_encode import protocol

    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    shared = [
        {"type": "function", "function": {"name": "a", "parameters": schema}},
        {"type": "function", "function": {"name": "b", "parameters": schema}},
    ]
    protocol.clear_render_cache()
    try:
        expected = tuple(json.dumps(tool) for tool in shared)
        assert _lines_of(shared) == expected
        parsed = json.dumps(shared)
        assert _lines_of(json.loads(parsed)) == expected  # the same content, nothing shared
        assert _lines_of(json.loads(parsed)) == expected  # parsed alike: a hit
        info = protocol.render_cache_info()
        assert (info["tools_entries"], info["tools_hits"]) == (2, 1)
        looped: list[Any] = [{"type": "function", "function": {"name": "f"}}]
        looped[0]["function"]["parameters"] = looped
        for _ in range(2):
            with pytest.raises(qe.PromptError) as raised:
                qe.format_prompt([{"role": "user", "content": "q"}], tools=looped)
            assert raised.value.field == "tools[0]"
        assert protocol.render_cache_info()["tools_entries"] == 2
    finally:
        protocol.clear_render_cache()


def test_tools_lines_of_values_marshal_reads_back_otherwise_are_not_remembered() -> None:
    """marshal writes anything with the buffer protocol as bytes: such a list is encoded every
    time, and refused as JSON refuses it."""
    from qwen_encode import protocol

    protocol.clear_render_cache()
    try:
        for value in (b"ab", bytearray(b"ab"), memoryview(b"ab")):
            tools = [{"type": "function", "function": {"name": "f", "x": value}}]
            with pytest.raises(qe.PromptError, match="not JSON-serialisable") as raised:
                qe.format_prompt([{"role": "user", "content": "q"}], tools=tools)
            assert raised.value.field == "tools[0]"

        class Schema(dict):  # type: ignore[type-arg]
            pass

        subclassed = [Schema(type="function", function={"name": "f"})]
        assert _lines_of(subclassed) == (json.dumps(subclassed[0]),)
        # Where what marshal reads back would not give the same lines (a buffer that is also
        # JSON-encodable; none is in Python 3.11, so made here), the entry is never used: the
        # first hit finds it out and drops it.
        document = json.dumps([{"type": "function", "function": {"name": "f"}}])
        other = [{"type": "function", "function": {"name": "g"}}]
        with mock.patch("qwen_encode.protocol_cache.marshal.loads", lambda data: other):
            assert _lines_of(json.loads(document)) == (json.dumps(json.loads(document)[0]),)
            assert protocol.render_cache_info()["tools_entries"] == 1
            assert _lines_of(json.loads(document)) == (json.dumps(json.loads(document)[0]),)
            assert protocol.render_cache_info()["tools_entries"] == 0
    finally:
        protocol.clear_render_cache()


def test_tools_lists_stop_being_keyed_where_every_row_has_its_own_and_resume_on_a_hit() -> None:
    from qwen_encode import protocol
    from qwen_encode.protocol_cache import _TOOL_MISSES

    def tools(n: int) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": f"f{n}"}}]

    run, probe = _TOOL_MISSES.run, _TOOL_MISSES.probe
    protocol.clear_render_cache()
    try:
        for n in range(run + 2 * probe):
            assert _lines_of(tools(n)) == (json.dumps(tools(n)[0]),)
        info = protocol.render_cache_info()
        assert (info["tools_misses"], info["tools_hits"]) == (run + 2, 0)  # two probes
        # The last probe's list again: found at the next probe, then looked up every time.
        last = tools(run + 2 * probe - 1)
        for _ in range(probe + 4):
            assert _lines_of(last) == (json.dumps(last[0]),)
        assert protocol.render_cache_info()["tools_hits"] == 5
    finally:
        protocol.clear_render_cache()


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(TEXT | HOSTILE_TEXT, JSON_LIKE, max_size=4))
def test_tool_lines_are_what_json_dumps_writes_or_its_refusal(tool) -> None:
    """The tools block's lines come from one C encoder built once (no circular-reference
    markers): the same text as json.dumps(tool, ensure_ascii=False), transformers' tojson, and
    where that refuses a tool, the same error as before."""
    from qwen_encode.json_text import json_depth_problem
    from qwen_encode.protocol_texts import _tool_signature_lines

    try:
        expected: object = [json.dumps(tool, ensure_ascii=False)]
    except (TypeError, ValueError, RecursionError) as error:
        expected = error
    if json_depth_problem(tool) is not None:
        expected = "deep"
    try:
        lines: object = _tool_signature_lines([tool])
    except qe.PromptError as error:
        assert not isinstance(expected, list)
        assert ("nests more than" in error.reason) == (expected == "deep")
        return
    assert lines == expected
