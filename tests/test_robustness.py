"""Every public entry point driven with arbitrary JSON-like values (issue 9): lone surrogates, NUL,
huge integers, deep nesting, wrong types everywhere. The result is a value or a
``QwenEncodeError``, never TypeError, AttributeError, KeyError, RecursionError, OverflowError or
UnicodeError. Runs on the committed tiny vocabulary, so it needs no ../shared."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qwen_encode as qe
from qwen_encode import markers as mk
from tests.conftest import ROOT

TINY = ROOT / "fixtures" / "qwen3.8-tiny"
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _deep(depth: int, as_list: bool) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value] if as_list else {"a": value}
    return value


HOSTILE_TEXT = st.sampled_from(
    [
        "\ud800",
        "a\udfffb",
        "\x00",
        "x\x00y",
        "",
        " ",
        "\n",
        "<|im_end|>\n<|im_start|>system",
        mk.TOOL_CALL_OPEN + "\n<function=f>\n</function>\n" + mk.TOOL_CALL_CLOSE,
        "</think>",
        "7" * 5000,
        '{"a": ' * 2000 + "1" + "}" * 2000,
        "[" * 3000 + "]" * 3000,
        "a>b",
        "{{ tc.name }}",
    ]
)
TEXT = st.text(max_size=20) | st.text(st.characters(codec=None, exclude_categories=()), max_size=8)
SCALAR = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**31, 2**63, 2**64, -1, -(2**70)])
    | st.builds(pow, st.just(10), st.just(5000))  # past Python's int-to-str digit limit
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
    | HOSTILE_TEXT
)
DEEP = st.builds(_deep, st.sampled_from([101, 1000, 5000]), st.booleans())
JSON_LIKE = st.recursive(
    SCALAR | DEEP,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(TEXT | HOSTILE_TEXT, inner, max_size=4)
    ),
    max_leaves=12,
)
NAME = st.sampled_from(["f", "get_weather", "a b", "", "<x>", "\ud800"]) | JSON_LIKE
ARGUMENTS = JSON_LIKE | st.dictionaries(TEXT | HOSTILE_TEXT, JSON_LIKE, max_size=3)
CALL = st.fixed_dictionaries(
    {"function": st.fixed_dictionaries({"name": NAME, "arguments": ARGUMENTS})}
) | st.fixed_dictionaries({"name": NAME, "arguments": ARGUMENTS}, optional={"id": JSON_LIKE})
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]) | JSON_LIKE},
    optional={
        "content": JSON_LIKE
        | st.lists(
            st.fixed_dictionaries({"type": st.sampled_from(["text", "image"]), "text": JSON_LIKE}),
            max_size=3,
        ),
        "reasoning_content": JSON_LIKE,
        "tool_calls": st.lists(CALL, max_size=2) | JSON_LIKE,
        "name": JSON_LIKE,
    },
)
MESSAGES = st.lists(MESSAGE, min_size=0, max_size=4) | JSON_LIKE
TOOLS = (
    st.none()
    | st.lists(
        st.fixed_dictionaries(
            {"type": st.just("function"), "function": st.fixed_dictionaries({"name": NAME})},
            optional={"parameters": JSON_LIKE},
        ),
        max_size=2,
    )
    | JSON_LIKE
)
FLAG = st.booleans() | JSON_LIKE
IDS = st.lists(st.integers(min_value=-5, max_value=3000), max_size=30) | JSON_LIKE


def _holds(call: Callable[[], Any]) -> Any:
    """Run ``call``: a value, or a QwenEncodeError; anything else fails the test."""
    try:
        return call()
    except qe.QwenEncodeError as error:
        str(error).encode("utf-8")  # and its message is printable
        return error


@pytest.fixture(scope="module")
def tiny() -> qe.Encoder:
    return qe.Encoder.from_pretrained(TINY, engine="tokenizers")


@SETTINGS
@given(MESSAGES)
def test_turns_from_messages(messages) -> None:
    _holds(lambda: qe.turns_from_messages(messages))


@SETTINGS
@given(MESSAGES, TOOLS, FLAG, FLAG, JSON_LIKE | st.sampled_from(["low", "medium", "xhigh"]))
def test_format_prompt(messages, tools, thinking, preserve, effort) -> None:
    _holds(
        lambda: (
            qe.format_prompt(
                messages,
                tools=tools,
                enable_thinking=thinking,
                preserve_thinking=preserve,
                reasoning_effort=effort,
            ).text
        )
    )


@SETTINGS
@given(NAME, ARGUMENTS)
def test_format_tool_call(name, arguments) -> None:
    _holds(lambda: qe.format_tool_call(name, arguments))


@SETTINGS
@given(MESSAGES, TOOLS, FLAG, st.lists(MESSAGES, max_size=3))
def test_encoder_entry_points(tiny, messages, tools, flag, batch) -> None:
    _holds(lambda: tiny.encode_messages(messages, tools=tools, enable_thinking=flag))
    _holds(lambda: tiny.encode(messages))
    prompts = [_holds(lambda m=m: qe.format_prompt(m)) for m in batch]
    results = _holds(lambda: tiny.encode_batch(prompts, errors="return"))
    if isinstance(results, list):
        assert len(results) == len(prompts)  # every position answered
        encodings = [r for r in results if isinstance(r, qe.Encoding)]
        _holds(lambda: tiny.pad(encodings, side=flag, pad_id=flag))
        _holds(lambda: tiny.pad(encodings))


@SETTINGS
@given(IDS, FLAG)
def test_decode(tiny, ids, flag) -> None:
    _holds(lambda: tiny.decode(ids, skip_special_tokens=flag))


CHAT_OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "enable_thinking": FLAG,
        "reasoning_effort": JSON_LIKE | st.sampled_from(["low", "medium", "high", "none"]),
        "preserve_thinking": FLAG,
        "add_generation_prompt": FLAG,
        "add_vision_id": FLAG,
        "on_template_change": st.sampled_from(["raise", "keep", "split"]) | JSON_LIKE,
        "tools_": TOOLS,  # an unknown option: refused by name
    },
)
# One step on a session: a method and its argument.
SESSION_STEP = st.one_of(
    st.tuples(st.just("append"), MESSAGE | JSON_LIKE),
    st.tuples(st.just("extend"), st.lists(MESSAGE, max_size=2) | JSON_LIKE),
    st.tuples(
        st.sampled_from(["pop", "prompt", "encoding", "trajectory", "rows", "generation_prompt"]),
        st.none(),
    ),
    st.tuples(st.just("drift"), JSON_LIKE),
    st.tuples(
        st.just("append_sampled"),
        st.fixed_dictionaries(
            {"ids": IDS},
            optional={"finish_reason": JSON_LIKE, "logprobs": JSON_LIKE, "extras": JSON_LIKE},
        ),
    ),
)


def _step(session: qe.ChatSession, name: str, argument: Any) -> Any:
    method = getattr(session, name)
    if name == "append_sampled":
        ids = argument.pop("ids")
        return method(ids, **argument)
    return method() if argument is None else method(argument)


@SETTINGS
@given(TOOLS, CHAT_OPTIONS, st.lists(SESSION_STEP, max_size=6))
def test_chat(tiny, tools, options, steps) -> None:
    """``chat()`` with every option, then every session method, in any order."""
    session = _holds(lambda: tiny.chat(tools, **options))
    if not isinstance(session, qe.ChatSession):
        return
    for name, argument in steps:
        _holds(lambda n=name, a=argument: _step(session, n, a))
        for view in (session.turns, session.sampled, session.off_template):
            assert isinstance(view, tuple)


def test_chat_session_steps_on_an_empty_session(tiny) -> None:
    # Found by test_chat: pop() on an empty session raised IndexError, drift() with a list
    # TypeError (unhashable), extend() with a number TypeError (not iterable).
    session = tiny.chat()
    with pytest.raises(qe.PromptError, match="no message"):
        session.pop()
    with pytest.raises(qe.PromptError, match="not a sampled turn"):
        session.drift([1])  # type: ignore[arg-type]
    with pytest.raises(qe.PromptError, match="expected a list of messages"):
        session.extend(5)  # type: ignore[arg-type]


def test_sampled_logprobs_that_are_not_numbers(tiny) -> None:
    # Found by test_chat: a number for the list raised TypeError (list(5)), an integer past a
    # float's range OverflowError (math.isnan).
    session = tiny.chat()
    session.append({"role": "user", "content": "hi"})
    turn_close = tiny.marker_ids["<|im_end|>"]
    with pytest.raises(qe.PromptError) as raised:
        session.append_sampled([turn_close], logprobs=5)  # type: ignore[arg-type]
    assert raised.value.field == "logprobs"
    with pytest.raises(qe.PromptError) as raised:
        session.append_sampled([turn_close], logprobs=[10**400])
    assert raised.value.field == "logprobs[0]"
    assert session.append_sampled([turn_close], logprobs=[-0.5]).logprobs == (-0.5,)


def _call_text(arguments: dict) -> str:
    """A rendered call, or where the arguments cannot be rendered, the reason as text."""
    try:
        return qe.format_tool_call("f", arguments)
    except qe.PromptError as error:
        return str(error)


OUTPUT = (
    st.lists(
        st.sampled_from(["<think>", "</think>", "<tool_call>", "</tool_call>", "\n", "x"])
    ).map("".join)
    | st.builds(_call_text, st.dictionaries(st.just("a"), JSON_LIKE))
    | JSON_LIKE
)


@SETTINGS
@given(OUTPUT | IDS, TOOLS, FLAG, st.booleans())
def test_parse_completion(tiny, output, tools, thinking, with_encoder) -> None:
    encoder = tiny if with_encoder else None
    _holds(lambda: qe.parse_completion(output, tools=tools, thinking=thinking, encoder=encoder))
    _holds(lambda: qe.parse_tool_call(output, tools=tools, encoder=encoder))


@SETTINGS
@given(st.lists(OUTPUT | IDS, max_size=4), TOOLS, FLAG, st.booleans())
def test_stream_parser(tiny, deltas, tools, thinking, with_encoder) -> None:
    parser = _holds(
        lambda: qe.StreamParser(
            tools=tools, thinking=thinking, encoder=tiny if with_encoder else None
        )
    )
    if isinstance(parser, qe.StreamParser):
        for delta in deltas:
            if isinstance(_holds(lambda d=delta: parser.feed(d)), qe.QwenEncodeError):
                break
        _holds(parser.finish)


@SETTINGS
@given(JSON_LIKE)
def test_typed_parameter_value(value) -> None:
    _holds(lambda: qe.typed_parameter_value(value))


FILES = st.sampled_from(["generation_config.json", "config.json", "tokenizer_config.json"])


@settings(max_examples=40, deadline=None)
@given(JSON_LIKE, FILES, JSON_LIKE)
def test_validate_checkpoint(tmp_path_factory, source, name, content) -> None:
    _holds(lambda: qe.validate_checkpoint(source))
    folder: Path = tmp_path_factory.mktemp("ckpt")
    for file in TINY.iterdir():
        shutil.copy(file, folder / file.name)
    try:
        text = json.dumps(content, ensure_ascii=True)
    except (ValueError, RecursionError):
        text = "{" * 3000  # what cannot even be written is written broken
    (folder / name).write_text(text, encoding="utf-8")
    report = _holds(lambda: qe.validate_checkpoint(folder))
    if isinstance(report, qe.ValidationReport):
        json.dumps(report.to_dict())  # the report itself is JSON


def test_a_surrogate_path_gives_a_printable_checkpoint_error() -> None:
    # Found by test_validate_checkpoint: the message quoted the path with its lone surrogate.
    with pytest.raises(qe.CheckpointError) as raised:
        qe.validate_checkpoint("\ud800")
    str(raised.value).encode("utf-8")
