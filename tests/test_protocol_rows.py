"""The fused renderer of plain rows (``protocol_rows``) against the general path: the same
segments, runs, head and text, or the same error found first, on every plain shape, each error
the template raises, and hypothesis rows near the plain shapes with hostile text."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qwen_encode as qe
from tests.test_protocol import _call, _conversations
from tests.test_robustness import (
    ARGUMENTS,
    HOSTILE_TEXT,
    JSON_LIKE,
    MESSAGE,
    SCALAR,
    TEXT,
    TOOLS,
)

# -- the fused renderer of plain rows against the general path ------------------------------


def _general_only() -> contextlib.AbstractContextManager[object]:
    """format_prompt with the fused renderer of plain rows switched off."""
    from qwen_encode import protocol

    return mock.patch.object(protocol, "_render_plain", lambda *args: None)


def _outcome(render: Callable[[], qe.Prompt]) -> tuple[object, ...]:
    """Everything a prompt is (segments, runs, the shared head, text), or its error whole."""
    try:
        prompt = render()
    except qe.PromptError as error:
        return (type(error), error.reason, error.message_index, error.field)
    return (prompt.segments, list(prompt._layout()), prompt._head, prompt.text)


def _fused_and_general(messages: object, **options: Any) -> tuple[object, object]:
    fused = _outcome(lambda: qe.format_prompt(messages, **options))  # type: ignore[arg-type]
    with _general_only():
        general = _outcome(lambda: qe.format_prompt(messages, **options))  # type: ignore[arg-type]
    return fused, general


def _taken(messages: list[dict], **options: Any) -> bool:
    """Whether the fused renderer renders ``messages`` (rather than leaving them to the general
    path): the differential tests below must exercise it, not only the fallback."""
    from qwen_encode.protocol_rows import _render_plain

    values = {
        "tools": None,
        "enable_thinking": True,
        "reasoning_effort": None,
        "preserve_thinking": True,
        "add_generation_prompt": True,
        "add_vision_id": False,
        "continue_final_message": False,
        **options,
    }
    return _render_plain(messages, *values.values()) is not None


_ROW_TOOLS = [
    {"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}},
    {"type": "function", "function": {"name": "g", "parameters": {"n": 1, "x": [True, None]}}},
]


def _rows() -> list[tuple[list[dict], dict[str, Any]]]:
    """The plain shapes (and a few the fused renderer leaves to the general path) in
    conversations, with each option that changes what they render."""
    out: list[tuple[list[dict], dict[str, Any]]] = []
    for messages, preserve in _conversations():
        for options in (
            {"preserve_thinking": preserve, "add_generation_prompt": False},
            {"preserve_thinking": preserve, "tools": _ROW_TOOLS, "enable_thinking": False},
        ):
            out.append((messages, options))
    system = {"role": "system", "content": " s "}
    user, answer = {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}
    wrapper = {"role": "user", "content": " <tool_response>x</tool_response> "}
    for options in (
        {},
        {"tools": _ROW_TOOLS},
        {"tools": _ROW_TOOLS, "reasoning_effort": "low"},
        {"reasoning_effort": qe.ReasoningEffort.MEDIUM, "add_vision_id": True},
        {"enable_thinking": False, "reasoning_effort": "none"},
        {"tools": json.dumps(_ROW_TOOLS)},
        {"tools": []},
    ):
        out.append(([system, user], options))
        out.append(([{"role": "system"}, user, answer, wrapper], options))
        out.append(([user, {"role": "user"}, {"role": "assistant", "reasoning": " r "}], options))
        out.append(([{"role": "system", "content": ""}, user, answer, {"role": "tool"}], options))
    return out


@pytest.mark.parametrize("messages,options", _rows())
def test_fused_renderer_makes_what_the_general_path_makes(messages, options) -> None:
    fused, general = _fused_and_general(messages, **options)
    assert fused == general


def test_fused_renderer_takes_the_plain_rows() -> None:
    """The differential tests compare something: the plain rows are the fused renderer's."""
    taken = [messages for messages, options in _rows() if _taken(messages, **options)]
    assert len(taken) > len(_rows()) // 2
    user = {"role": "user", "content": "q"}
    assert not _taken([user, {"role": "user", "content": [{"type": "text", "text": "t"}]}])
    assert not _taken([qe.Turn("user", "q")])
    assert not _taken([user], continue_final_message=True)
    assert not _taken([user], enable_thinking=1)
    assert not _taken([user, {"role": "assistant", "content": "a\ud800"}])
    assert not _taken([user] * 257)


@pytest.mark.parametrize(
    "messages,options",
    [
        ([], {}),
        ([{"role": "system", "content": "s"}], {}),
        ([{"role": "user", "content": "<tool_response>x</tool_response>"}], {}),
        ([{"role": "user", "content": "q"}, {"role": "system", "content": "s"}], {}),
        ([{"role": "tool", "content": "t"}], {}),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], {}),
        ([{"role": "user", "content": "q"}], {"enable_thinking": 1}),
        ([{"role": "user", "content": "q"}], {"reasoning_effort": "high"}),
        ([{"role": "user", "content": "q"}], {"reasoning_effort": 5}),
        ([{"role": "user", "content": "q"}], {"tools": [5]}),
        ([{"role": "user", "content": "q"}], {"tools": {"name": "f"}}),
        ([{"role": "system", "content": "s\ud800"}, {"role": "user", "content": "q"}], {}),
        ([{"role": "user", "content": "q\ud800"}, {"role": "system", "content": "s"}], {}),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a\ud800", "reasoning_content": "r\udfff"},
                {"role": "user", "content": "q\ud800"},
            ],
            {"add_generation_prompt": False},
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "tool_calls": [_call("f", {"n": 10**5000, "s": "\ud800"})]},
            ],
            {"add_generation_prompt": False},
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "tool_calls": [_call("f", {"s": {1}})]},
                {"role": "tool", "content": "\udfff"},
            ],
            {},
        ),
    ],
)
def test_fused_renderer_leaves_every_error_to_the_general_path(messages, options) -> None:
    fused, general = _fused_and_general(messages, **options)
    assert isinstance(general[0], type) and issubclass(general[0], qe.PromptError)
    assert fused == general


_PLAIN_TEXT = st.none() | st.text(max_size=12) | TEXT | HOSTILE_TEXT
_ARGUMENT_NAMES = st.sampled_from(["a", "city", "n_1"])
_PLAIN_ARGUMENTS = st.dictionaries(_ARGUMENT_NAMES, JSON_LIKE, max_size=3)
_ARGUMENTS_TEXT = st.dictionaries(
    _ARGUMENT_NAMES, st.text(max_size=8) | st.integers() | st.lists(st.booleans()), max_size=3
).map(json.dumps)
_PLAIN_CALL = (
    st.fixed_dictionaries(
        {
            "function": st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["f", "get_weather"]),
                    "arguments": _PLAIN_ARGUMENTS | _ARGUMENTS_TEXT,
                }
            )
        }
    )
    | st.fixed_dictionaries({"name": st.just("f"), "arguments": st.dictionaries(TEXT, SCALAR)})
    | st.fixed_dictionaries({"name": st.sampled_from(["f", "a b"]), "arguments": ARGUMENTS})
)
_PLAIN_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "user", "assistant", "assistant", "tool"])},
    optional={
        "content": _PLAIN_TEXT,
        "reasoning_content": _PLAIN_TEXT,
        "tool_calls": st.lists(_PLAIN_CALL, max_size=2),
    },
)


@st.composite
def _plain_rows(draw: st.DrawFn) -> list[Any]:
    """A conversation in the template's order (a system message or not, exchanges of a user
    query, an assistant turn and the results of its calls), then up to two of its messages
    replaced by anything near or far from a plain message, or dropped."""
    text = st.builds(dict, content=_PLAIN_TEXT)
    messages: list[Any] = []
    if draw(st.booleans()):
        messages.append({"role": "system", **draw(text)})
    for _ in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", **draw(text)})
        calls = draw(st.lists(_PLAIN_CALL, max_size=2))
        answer = {"role": "assistant", "reasoning_content": draw(_PLAIN_TEXT), **draw(text)}
        messages.append({**answer, "tool_calls": calls} if calls else answer)
        messages += [{"role": "tool", **draw(text)} for _ in calls]
        if calls and draw(st.booleans()):
            messages.append({"role": "assistant", **draw(text)})
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(messages) - 1))
        other = draw(st.none() | _PLAIN_MESSAGE | MESSAGE)
        if other is None:
            del messages[at]
        else:
            messages[at] = other
        if not messages:
            break
    return messages


_ROW_OPTIONS = st.fixed_dictionaries(
    {
        "tools": st.sampled_from([None, _ROW_TOOLS]) | TOOLS,
        "enable_thinking": st.booleans(),
        "reasoning_effort": st.sampled_from([None, "low", "medium", "xhigh", "none"])
        | st.sampled_from(list(qe.ReasoningEffort)),
        "preserve_thinking": st.booleans(),
        "add_generation_prompt": st.booleans(),
        "add_vision_id": st.booleans(),
        "continue_final_message": st.sampled_from([False, False, False, True]),
    }
)


@settings(max_examples=400, deadline=None)
@given(_plain_rows(), _ROW_OPTIONS)
def test_fused_renderer_agrees_with_the_general_path_on_hostile_rows(messages, options) -> None:
    """Rows near the plain shapes (so that many are the fused renderer's), hostile text in every
    field, every option: the same prompt, or the same error found first."""
    fused, general = _fused_and_general(messages, **options)
    assert fused == general


def test_fused_renderer_shared_tuples_are_made_once_per_index_across_threads() -> None:
    import sys
    import threading

    from qwen_encode import protocol_rows

    saved, interval = list(protocol_rows._TABLE), sys.getswitchinterval()
    protocol_rows._TABLE.clear()
    start = threading.Barrier(8)

    def grow(count: int) -> None:
        start.wait()
        protocol_rows._share(count)

    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=grow, args=(40 + 10 * n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        table = protocol_rows._TABLE
        assert [entry.r_open[2] for entry in table] == list(range(110))
    finally:
        sys.setswitchinterval(interval)
        protocol_rows._TABLE[:] = saved


def test_fused_renderer_leaves_a_rows_tuples_out_of_the_collector_when_compiled() -> None:
    """Compiled, the tuples a row's text makes (a run each, and the calls' pieces), the
    prompt's runs, what makes its segments later, and the prompt are untracked when made, not
    walked by young collections first; anything the caller gave that the collector tracks (a
    str subclass's instance) keeps its tuple, and the prompt, tracked."""
    import gc

    from qwen_encode._accelerator import runs_compiled
    from qwen_encode.prompt import _LATER

    if not runs_compiled("protocol_rows"):
        pytest.skip("protocol_rows runs as Python: the collector untracks the tuples itself")
    call = {"type": "function", "function": {"name": "f", "arguments": {"a": "v", "n": 1}}}
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok", "reasoning_content": "r", "tool_calls": [call]},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "done"},
    ]
    first = qe.format_prompt(messages, add_generation_prompt=False)
    # The render cache's system turn made just now, still tracked, keeps nothing tracked.
    qe.protocol.clear_render_cache()
    prompt = qe.format_prompt(messages, add_generation_prompt=False)
    # Its segments are left for later (made by comparing it): what is made of them is only the
    # runs and the calls' pieces, none tracked.
    later = prompt._segs
    assert later[0] is _LATER and later[1] is prompt._runs
    assert not gc.is_tracked(prompt) and not gc.is_tracked(later)
    assert not gc.is_tracked(prompt._runs) and not gc.is_tracked(later[6])
    turns = prompt._layout()[later[3] : len(later[1]) - later[5]]
    assert [run for run in turns if gc.is_tracked(run)] == []
    gc.collect()  # the render cache's, left to the collector: at its first pass
    assert [run for run in prompt._layout() if gc.is_tracked(run)] == []
    assert prompt == first

    class Note(str):
        """A str whose instances have a __dict__: the collector tracks them."""

    value = Note("v")
    call["function"]["arguments"] = {"a": value}
    prompt = qe.format_prompt(messages, add_generation_prompt=False)
    assert value in prompt._segs[6] and gc.is_tracked(prompt._segs[6])
    assert not gc.is_tracked(prompt._runs)  # the value is copied into its run's text
    assert gc.is_tracked(prompt._segs)  # its text may hold anything: the collector sees it
    assert gc.is_tracked(prompt)
    assert [seg for seg in prompt._compact_segs() if seg[0] is value] != []
    assert prompt.segments == _fused_and_general_segments(messages)


def _fused_and_general_segments(messages: list[dict[str, Any]]) -> tuple[object, ...]:
    """The general path's segments of ``messages`` (the fused renderer switched off)."""
    with _general_only():
        return qe.format_prompt(messages, add_generation_prompt=False).segments


def test_fused_renderer_finds_a_lone_surrogate_in_text_of_every_width() -> None:
    """``_bad`` (a loop over code points compiled, UTF-8 encoding as Python) finds a lone
    surrogate wherever it is, in text of one, two or four bytes a character, and nothing
    else."""
    from qwen_encode.protocol_rows import _bad

    for base in ("caf\u00e9 au lait", "\u4f60\u597d\u4e16\u754c", "emoji \U0001f600 here"):
        assert not _bad(base)
        for lone in ("\ud800", "\udbff", "\udc00", "\udfff"):
            for at in (0, len(base) // 2, len(base)):
                assert _bad(base[:at] + lone + base[at:]), (base, lone, at)
    assert not _bad("\ud7ff\ue000\U0010ffff\u00ff")  # the code points around the surrogates
    # Long enough for the compiled loop's vector blocks, a surrogate in each lane's position.
    for base in ("\u4f60" * 67, "\U0001f600" * 67):
        assert not _bad(base)
        for at in range(0, 67, 5):
            assert _bad(base[:at] + "\udc01" + base[at:]), (len(base), at)


def test_fused_renderer_takes_a_call_argument_of_a_str_subclass_with_wide_text() -> None:
    """A call argument given as an instance of a str subclass renders as the same str would
    (json loaders and pydantic models hand such values over): compiled, the check for lone
    surrogates once refused it with a TypeError, when its text was not ASCII."""

    class Note(str):
        pass

    def messages(value: str) -> list[dict[str, Any]]:
        call = {"type": "function", "function": {"name": "f", "arguments": {"q": value}}}
        return [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
        ]

    for text in ("caf\u00e9", "\u65e5\u672c", "\U0001f600"):
        given = qe.format_prompt(messages(Note(text)), add_generation_prompt=False)
        assert given.text == qe.format_prompt(messages(text), add_generation_prompt=False).text
        assert given.segments == _fused_and_general_segments(messages(Note(text)))
    with pytest.raises(qe.PromptError):
        qe.format_prompt(messages(Note("\u65e5\ud800")), add_generation_prompt=False)
