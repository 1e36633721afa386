"""Every public entry point driven with arbitrary JSON-like values: lone surrogates, NUL, huge
integers, deep nesting, wrong types everywhere; and with hostile files (checkpoints, templates,
Parquet). The result is a value or a ``QwenEncodeError``, never TypeError, AttributeError,
KeyError, RecursionError, OverflowError or UnicodeError; a batch job answers every row, none with
an error qwen-encode did not raise on purpose.

Covered: conversations, prompts and tool calls; the encoder and chat sessions (every option and
method); parsing, batch and streaming; checkpoints, reports and comparisons; the data functions
(encode_table, encode_dataset, encode_parquet, and encode_ray where Ray is installed); the engine
plugins' parsing core (the engines' classes: tests/integrations/test_engine_robustness.py).
Runs offline on the committed tiny vocabulary, so it needs no ../shared."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

import qwen_encode as qe
from qwen_encode import markers as mk
from qwen_encode.data import REQUEST_FIELDS
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
        result = call()
    except qe.QwenEncodeError as error:
        str(error).encode("utf-8")  # and its message is printable
        _event(f"raised {type(error).__name__} ({getattr(error, 'field', None)})")
        return error
    _event("returned")
    return result


def _event(text: str) -> None:
    """Counted in --hypothesis-show-statistics (how often each outcome was reached)."""
    if currently_in_test_context():
        event(text)


def _options(valid: dict[str, Any], hostile: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments, each drawn from ``valid`` except for up to two drawn from ``hostile``:
    a call whose every argument may be bad almost never gets past the first check."""

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        values = {name: draw(strategy) for name, strategy in valid.items()}
        for name in draw(st.lists(st.sampled_from(sorted(hostile)), max_size=2, unique=True)):
            values[name] = draw(hostile[name])
        return values

    return build()


@pytest.fixture(scope="module", autouse=True)
def offline() -> Iterator[None]:
    """A hostile string is also a hub repo id ("org/name"): no test reaches for the network."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


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


CHAT_OPTIONS = _options(
    {
        "enable_thinking": st.booleans(),
        "reasoning_effort": st.sampled_from([None, "low", "medium", "xhigh", "none"]),
        "preserve_thinking": st.booleans(),
        "add_generation_prompt": st.booleans(),
        "add_vision_id": st.booleans(),
        "on_template_change": st.sampled_from(["raise", "keep", "split"]),
    },
    {
        "enable_thinking": JSON_LIKE,
        "reasoning_effort": JSON_LIKE,
        "preserve_thinking": JSON_LIKE,
        "add_generation_prompt": JSON_LIKE,
        "add_vision_id": JSON_LIKE,
        "on_template_change": JSON_LIKE,
        "tools_": TOOLS,  # an unknown option: refused by name
    },
)
# One step on a session: a method and its argument.
SESSION_STEP = st.one_of(
    st.tuples(st.just("append"), st.tuples(MESSAGE | JSON_LIKE)),
    st.tuples(st.just("extend"), st.tuples(st.lists(MESSAGE, max_size=2) | JSON_LIKE)),
    st.tuples(
        st.sampled_from(["pop", "prompt", "encoding", "trajectory", "rows", "generation_prompt"]),
        st.just(()),
    ),
    st.tuples(st.just("drift"), st.tuples(JSON_LIKE | st.integers(0, 4))),
    st.tuples(
        st.just("append_sampled"),
        st.fixed_dictionaries(
            {"ids": IDS},
            optional={"finish_reason": JSON_LIKE, "logprobs": JSON_LIKE, "extras": JSON_LIKE},
        ),
    ),
)


def _step(session: qe.ChatSession, name: str, arguments: Any) -> Any:
    """``arguments``: a tuple of positional arguments, or append_sampled's keywords."""
    method = getattr(session, name)
    if name == "append_sampled":
        keywords = dict(arguments)
        return method(keywords.pop("ids"), **keywords)
    return method(*arguments)


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


def _json_text(value: Any) -> Any:
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        return "[" * 3000  # what cannot be written as JSON is written broken


# -- the engine plugins' parsing core --------------------------------------------------------------

# What an engine hands its parser: the model's text (any string: marker soup, half a call, a call
# whose arguments do not fit the schema), or token IDs of the vocabulary, in chunks; the request's
# tools (any JSON inside a list of objects) and chat_template_kwargs (any JSON object).
MODEL_TEXT = OUTPUT.filter(lambda v: isinstance(v, str)) | TEXT | HOSTILE_TEXT
REQUEST_TOOLS = st.none() | st.lists(
    st.fixed_dictionaries(
        {"type": st.just("function"), "function": st.fixed_dictionaries({"name": NAME})},
        optional={"parameters": JSON_LIKE},
    )
    | st.dictionaries(TEXT, JSON_LIKE, max_size=2),
    max_size=2,
)


class _TinyTokenizer:
    """The tiny vocabulary as an engine's tokenizer (get_vocab, decode): what the plugins wrap in
    ``TokenizerMarkers``."""

    def __init__(self, encoder: qe.Encoder) -> None:
        self._tokenizer = encoder.vocabulary.tokenizer

    def get_vocab(self) -> dict[str, int]:
        return dict(self._tokenizer.get_vocab(with_added_tokens=True))

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))


@SETTINGS
@given(
    st.lists(MODEL_TEXT, max_size=4),
    st.lists(st.lists(st.integers(0, 2080), max_size=8), max_size=4),
    REQUEST_TOOLS,
    st.booleans(),
    JSON_LIKE | st.dictionaries(st.just("enable_thinking"), JSON_LIKE),
)
def test_engine_parser_core(tiny, texts, id_chunks, tools, thinking, kwargs) -> None:
    """What the vLLM and SGLang parser classes run (integrations._common), driven as they drive
    it: the engines themselves are tested in tests/integrations/test_engine_robustness.py."""
    from qwen_encode.integrations import _common as core

    _holds(lambda: core.chat_thinking(kwargs))
    dicts = _holds(lambda: core.tool_dicts(tools))
    whole = "".join(texts)
    _holds(lambda: core.answer_of(whole, dicts))
    _holds(lambda: core.split_reasoning_text(whole, thinking))
    reasoning = core.ReasoningText(thinking)
    for text in texts:
        _holds(lambda t=text: reasoning.feed(t))
    _holds(reasoning.finish)
    markers = core.TokenizerMarkers(_TinyTokenizer(tiny))
    for chunks, encoder in ((texts, None), (id_chunks, markers)):
        stream = _holds(lambda e=encoder: core.AnswerStream(tools=dicts, encoder=e))
        if isinstance(stream, core.AnswerStream):
            for chunk in chunks:
                _holds(lambda c=chunk, s=stream: s.feed(c))
            _holds(stream.finish)


# -- checkpoint reports ----------------------------------------------------------------------------

# Templates that run: each returns in bounded time. (A template that loops 10**10 times or builds
# a 100 MB string is not refused in bounded time yet: the sandbox limits range(), nothing else.)
TEMPLATE = st.sampled_from(
    [
        "{{ raise_exception('refused') }}",
        "{{ messages",
        "{{ foo.bar.baz }}",
        "",
        "\ud800",
        "\x00{{ messages[0].content }}",
        "{% for m in messages %}{{ m.role }}{% endfor %}",
        "{{ messages | tojson }}{{ tools | tojson }}",
        "{% generation %}{{ messages[-1].content }}{% endgeneration %}",
        (TINY / "chat_template.jinja").read_text(encoding="utf-8") + "\n",
    ]
)
CONFIG_KEYS = st.sampled_from(
    [
        "chat_template",
        "eos_token_id",
        "eos_token",
        "pad_token",
        "bos_token",
        "added_tokens_decoder",
        "vocab_size",
        "tie_word_embeddings",
        "model_type",
        "added_tokens",
        "model",
    ]
)
# A side file's content: an object with the keys the reports read, holding anything (a template
# where one is read), or any JSON value, or bytes that are not JSON.
SIDE_FILE = (
    st.dictionaries(CONFIG_KEYS, JSON_LIKE | TEMPLATE, max_size=4).map(_json_text)
    | JSON_LIKE.map(_json_text)
    | st.sampled_from(["", "{", "\udcff", '{"eos_token_id": ' + "9" * 5000 + "}", "[" * 3000])
)
CHECKPOINT_FILES = st.sampled_from(
    [
        "generation_config.json",
        "config.json",
        "tokenizer_config.json",
        "tokenizer.json",
        "chat_template.jinja",
    ]
)


def _hostile_copy(root: Path, edits: dict[str, str]) -> Path:
    """The tiny checkpoint with ``edits`` written over its files (bytes that are not UTF-8 as
    they come: a lone surrogate written as its three bytes)."""
    root.mkdir(exist_ok=True)
    for file in TINY.iterdir():
        shutil.copy(file, root / file.name)
    for name, text in edits.items():
        (root / name).write_bytes(text.encode("utf-8", "surrogatepass"))
    return root


EDITS = st.dictionaries(CHECKPOINT_FILES, SIDE_FILE | TEMPLATE, max_size=2)


@settings(max_examples=40, deadline=None)
@given(EDITS, st.sampled_from(["copy", "copy", "tiny"]) | JSON_LIKE)
# Found by this test once in a full run: tokenizers' token_to_id raised UnicodeEncodeError on
# a special token spelled as a lone surrogate.
@example(edits={"tokenizer_config.json": '{"eos_token": "\\ud800"}'}, against="copy")
def test_checkpoint_report(tmp_path_factory, edits, against) -> None:
    folder = _hostile_copy(tmp_path_factory.mktemp("ckpt"), edits)
    if isinstance(against, str):
        against = {"copy": folder, "tiny": TINY}.get(against, against)
    for call in (
        lambda: qe.checkpoint_report(folder),
        lambda: qe.checkpoint_report(TINY, against=against),
        lambda: qe.validate_checkpoint(folder),
    ):
        report = _holds(call)
        if not isinstance(report, qe.QwenEncodeError):
            json.dumps(report.to_dict())  # the report itself is JSON


@settings(max_examples=25, deadline=None)
@given(EDITS, st.booleans(), JSON_LIKE)
def test_compare_checkpoints(tmp_path_factory, edits, base_first, source) -> None:
    folder = _hostile_copy(tmp_path_factory.mktemp("ckpt"), edits)
    pair = (TINY, folder) if base_first else (folder, TINY)
    comparison = _holds(lambda: qe.compare_checkpoints(*pair))
    if isinstance(comparison, qe.Comparison):
        json.dumps(comparison.to_dict())
    _holds(lambda: qe.compare_checkpoints(source, TINY))
    _holds(lambda: qe.compare_checkpoints(TINY, source))


@pytest.mark.parametrize(
    "template",
    [
        "{{ 'a' * 100000000 }}",
        "{{ ([1] * 100000000) | length }}",
        "{{ 7 ** 10000000 }}",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    ],
    ids=["repeated string", "repeated list", "power", "nested ranges"],
)
def test_a_template_that_would_not_end_is_refused_in_bounded_time(tmp_path, template) -> None:
    # Found while driving checkpoint_report with hostile templates: the sandbox capped one
    # range() but not repetition (112 s for the string) nor nested loops (days). Each probe now
    # reports the template raising SecurityError, and the report comes back at once.
    folder = _hostile_copy(tmp_path, {"chat_template.jinja": template})
    started = time.monotonic()
    report = qe.checkpoint_report(folder)
    assert time.monotonic() - started < 30
    behaviour = report.to_dict()["template_behaviour"]
    assert "SecurityError" in json.dumps(behaviour)


def test_checkpoint_files_that_broke_the_reports(tmp_path: Path) -> None:
    # Found by test_checkpoint_report: a tokenizer_config.json chat_template holding a lone
    # surrogate ("\ud800" in JSON) raised UnicodeEncodeError while hashing it, and a
    # tokenizer.json holding an integer past Python's 4300-digit limit ValueError while the
    # load failure was being explained.
    surrogate = _hostile_copy(
        tmp_path / "a", {"tokenizer_config.json": '{"chat_template": "\\ud800"}'}
    )
    report = qe.checkpoint_report(surrogate)
    json.dumps(report.to_dict())
    digits = _hostile_copy(tmp_path / "b", {"tokenizer.json": '{"x": ' + "9" * 5000 + "}"})
    with pytest.raises(qe.CheckpointError, match="cannot be read"):
        qe.validate_checkpoint(digits)


# -- the data functions --------------------------------------------------------------------------


def _subclasses(cls: type) -> set[str]:
    return {cls.__name__}.union(*(_subclasses(sub) for sub in cls.__subclasses__()))


# The kinds of error a row may carry: a request of the wrong shape, or an error raised on purpose.
ROW_ERRORS = _subclasses(qe.QwenEncodeError) | {"RequestError"}
# The request fields the row function reads (chat_template among them: refused), and one it ignores.
REQUEST_KEYS = st.sampled_from(sorted(REQUEST_FIELDS | {"model"}))
# A request value as it reaches a row: JSON text in a string column, or the value itself.
CELL = MESSAGES.map(_json_text) | MESSAGES | JSON_LIKE | TOOLS
COLUMN_SET = st.sampled_from(["trl", "axolotl", "all"])
# Where a count is valid, 1 or 2 rows; never num_proc > 1, which starts worker processes
# (test_data covers it; datasets clips a huge one to the row count).
COUNT = st.integers(min_value=1, max_value=2)
BAD_COUNT = (
    st.integers(max_value=0)
    | st.just(2**63)
    | JSON_LIKE.filter(lambda v: isinstance(v, bool) or not isinstance(v, int) or v < 1)
)
ENGINE_VALID = {"markers_in_text": st.sampled_from(["literal", "reject", "atomic"])}
ENGINE_HOSTILE = {"markers_in_text": JSON_LIKE, "engine": JSON_LIKE}


@st.composite
def _batches(draw: st.DrawFn) -> Any:
    """A dict of columns (as datasets.map passes it), mostly of equal length, or any value."""
    rows = draw(st.integers(min_value=0, max_value=3))
    keys = draw(st.lists(REQUEST_KEYS | TEXT, max_size=4, unique=True))
    column = st.lists(CELL, min_size=rows, max_size=rows)
    batch = {key: draw(column | column | JSON_LIKE) for key in keys}
    return draw(st.just(batch) | st.just(batch) | JSON_LIKE)


def _answered(table: Any, rows: int | None) -> None:
    """Every row answered, none by an error qwen-encode did not raise on purpose."""
    import pyarrow as pa

    assert isinstance(table, pa.Table)
    if rows is not None:
        assert table.num_rows == rows
    for error in table.column("error").to_pylist():
        assert error is None or error.split(":", 1)[0] in ROW_ERRORS, error


@SETTINGS
@given(st.integers(0, 5), _batches(), COLUMN_SET | JSON_LIKE)
def test_encode_table(tiny, encoder_kind, batch, columns) -> None:
    pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install -e .[data]")
    from qwen_encode import data

    encoder = batch if encoder_kind == 0 else tiny  # mostly the real one
    table = _holds(lambda: data.encode_table(encoder, batch, columns))
    if not isinstance(table, qe.QwenEncodeError):
        lengths = {len(v) for v in batch.values()} if isinstance(batch, dict) else set()
        _answered(table, lengths.pop() if len(lengths) == 1 else None)


def test_encode_table_refuses_what_is_not_a_batch(tiny) -> None:
    # Found by test_encode_table: a column that is a number raised TypeError, columns of
    # different lengths ValueError, and an encoder that is not one was answered in every row
    # as an "unexpected AttributeError".
    pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install -e .[data]")
    from qwen_encode import data

    hi = [{"role": "user", "content": "hi"}]
    with pytest.raises(qe.PromptError) as raised:
        data.encode_table(tiny, {"messages": 5})
    assert raised.value.field == "batch['messages']"
    with pytest.raises(qe.PromptError, match="different lengths"):
        data.encode_table(tiny, {"messages": [hi, hi], "tools": [None]})
    with pytest.raises(qe.PromptError) as raised:
        data.encode_table("tiny", {"messages": [hi]})  # type: ignore[arg-type]
    assert raised.value.field == "encoder"


DATASET_OPTIONS = _options(
    {
        "num_proc": st.none() | st.just(1),
        "batch_size": COUNT,
        "columns": COLUMN_SET,
        "keep_columns": st.booleans(),
        **ENGINE_VALID,
    },
    {
        "num_proc": BAD_COUNT,
        "batch_size": BAD_COUNT,
        "columns": JSON_LIKE,
        "keep_columns": JSON_LIKE,
        **ENGINE_HOSTILE,
    },
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(CELL.map(_json_text), max_size=3) | st.tuples(JSON_LIKE),
    st.sampled_from(["encoder", "encoder", "path"]) | JSON_LIKE,
    DATASET_OPTIONS,
)
def test_encode_dataset(tiny, messages, source, options) -> None:
    datasets = pytest.importorskip(
        "datasets", reason="datasets is not installed: pip install -e .[data]"
    )
    from qwen_encode import data

    # A list: the rows' messages column, as JSON text; a 1-tuple: any value in the dataset's place.
    dataset = (
        datasets.Dataset.from_dict({"messages": messages})
        if isinstance(messages, list)
        else messages[0]
    )
    if isinstance(source, str):
        source = {"encoder": tiny, "path": TINY}.get(source, source)
    encoded = _holds(lambda: data.encode_dataset(dataset, source, **options))
    if isinstance(encoded, datasets.Dataset):
        _answered(encoded.data.table, len(messages))


def test_encode_dataset_of_no_rows_has_the_columns(tiny) -> None:
    # Found by test_encode_dataset: datasets.map never calls the row function on an empty
    # dataset, so the result had no columns at all and a filter on "error" raised KeyError.
    datasets = pytest.importorskip(
        "datasets", reason="datasets is not installed: pip install -e .[data]"
    )
    from qwen_encode import data

    empty = datasets.Dataset.from_dict({"messages": []})
    assert data.encode_dataset(empty, tiny).column_names == list(data.COLUMNS["trl"])
    kept = data.encode_dataset(empty, tiny, keep_columns=True)
    assert kept.column_names == ["messages", *data.COLUMNS["trl"]]
    with pytest.raises(qe.PromptError) as raised:
        data.encode_dataset(empty, tiny, batch_size=2**63)
    assert raised.value.field == "batch_size"  # datasets raised OverflowError for it


# A path argument that is not one; a string is a path, and only named ones are written to.
NOT_A_PATH = st.sampled_from(["", " "]) | JSON_LIKE.filter(lambda v: not isinstance(v, str))


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


INPUT_KINDS = ("file", "folder", "file", "folder", "not parquet", "missing", "empty folder")
PARQUET_OPTIONS = _options(
    {
        "inputs": st.sampled_from(INPUT_KINDS),
        "output": st.sampled_from(["new", "new", "existing folder", "nested"]),
        "num_proc": st.none() | st.just(1),
        "batch_size": COUNT,
        "columns": COLUMN_SET,
        "drop_errors": st.booleans(),
        "resume": st.booleans(),
        **ENGINE_VALID,
    },
    {
        "inputs": NOT_A_PATH,
        "output": NOT_A_PATH,
        "num_proc": BAD_COUNT,
        "batch_size": BAD_COUNT,
        "columns": JSON_LIKE,
        "drop_errors": JSON_LIKE,
        "resume": JSON_LIKE,
        "progress": JSON_LIKE,
        **ENGINE_HOSTILE,
    },
)


def _parquet_input(root: Path, kind: str, cells: list[Any]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"messages": pa.array([_json_text(c) for c in cells], type=pa.string())})
    if kind == "file":
        pq.write_table(table, root / "in.parquet")
        return root / "in.parquet"
    folder = root / "in"
    folder.mkdir()
    if kind == "folder":
        pq.write_table(table, folder / "a.parquet")
        pq.write_table(table.slice(0, 1), folder / "b.parquet")
    elif kind == "not parquet":
        (folder / "a.parquet").write_bytes(b"PAR1 not really")
    return folder / "missing" if kind == "missing" else folder


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(CELL, max_size=3), PARQUET_OPTIONS)
def test_encode_parquet(tiny, tmp_path_factory, cells, options) -> None:
    pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install -e .[data]")
    from qwen_encode import data

    root: Path = tmp_path_factory.mktemp("parquet")
    inputs, output = options.pop("inputs"), options.pop("output")
    if isinstance(inputs, str) and inputs in INPUT_KINDS:
        inputs = _parquet_input(root, inputs, cells)
    if isinstance(output, str):
        named = {"new": root / "out", "existing folder": root, "nested": root / "a" / "b" / "out"}
        output = named.get(output, output)
    options.setdefault("progress", [].append)
    with _inside(root):  # a relative path lands there, whatever it is
        summary = _holds(lambda: data.encode_parquet(tiny, inputs, output, **options))
    if isinstance(summary, data.Summary):
        assert summary.rows >= summary.error_rows
        assert set(summary.errors) <= ROW_ERRORS, summary.errors


def test_encode_parquet_refuses_bad_arguments_and_files(tiny, tmp_path: Path) -> None:
    # Found by test_encode_parquet: a path that is no path, a batch_size or num_proc that is no
    # count and a progress that is not callable raised TypeError or ValueError, a file that is
    # not Parquet pyarrow's ArrowInvalid, an output in a folder not yet made FileNotFoundError.
    pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install -e .[data]")
    from qwen_encode import data

    good = _parquet_input(tmp_path, "file", [[{"role": "user", "content": "hi"}]])
    out = tmp_path / "out.parquet"
    for keywords, field in [
        ({"inputs": 5}, "input"),
        ({"output": 5}, "output"),
        ({"output": ""}, "output"),  # Path("") would be the current directory
        ({"batch_size": "x"}, "batch_size"),
        ({"batch_size": 0}, "batch_size"),
        ({"num_proc": "x"}, "num_proc"),
        ({"progress": 5}, "progress"),
        ({"resume": "yes"}, "resume"),
    ]:
        arguments: dict[str, Any] = {"inputs": good, "output": out, **keywords}
        with pytest.raises(qe.PromptError) as raised:
            data.encode_parquet(tiny, **arguments)
        assert raised.value.field == field, keywords
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(qe.PromptError, match="not a readable Parquet file"):
        data.encode_parquet(tiny, tmp_path / "bad.parquet", out)
    assert not out.exists()
    summary = data.encode_parquet(tiny, good, tmp_path / "new" / "folder" / "out.parquet")
    assert summary.rows == 1 and summary.error_rows == 0


def test_encode_ray(tiny, tmp_path: Path) -> None:
    """``encode_ray``'s arguments, each bad in turn, are refused before a cluster is started;
    then one good run. Run where Ray is installed (scripts/integration_env.sh train)."""
    pytest.importorskip(
        "ray", reason="Ray is not installed: scripts/integration_env.sh train builds a venv with it"
    )
    from qwen_encode import data

    good = _parquet_input(tmp_path, "file", [[{"role": "user", "content": "hi"}], 5])
    out = tmp_path / "out"
    for keywords, field in [
        ({"inputs": 5}, "inputs"),
        ({"inputs": [good, None]}, "inputs[1]"),
        ({"output": 5}, "output"),
        ({"actors": 0}, "actors"),
        ({"actors": "2"}, "actors"),
        ({"batch_size": 2**63}, "batch_size"),
        ({"drop_errors": "yes"}, "drop_errors"),
        ({"columns": ["trl"]}, "columns"),
        ({"address": 5}, "address"),
    ]:
        arguments: dict[str, Any] = {"inputs": good, "output": out, **keywords}
        with pytest.raises(qe.PromptError) as raised:
            data.encode_ray(tiny, **arguments)
        assert raised.value.field == field, keywords
    summary = data.encode_ray(tiny, good, out, actors=1)
    assert (summary.rows, summary.error_rows) == (2, 1)
    assert set(summary.errors) <= ROW_ERRORS


# -- the rest of what qwen_encode exports ----------------------------------------------------------

PATHISH = st.sampled_from(["tiny", "tiny", "org/name"]) | JSON_LIKE
HUB_OPTIONS = st.fixed_dictionaries(
    {},
    optional={"revision": JSON_LIKE, "cache_dir": JSON_LIKE, "local_files_only": FLAG},
)


def _source(value: Any) -> Any:
    return TINY if value == "tiny" else value


@SETTINGS
@given(PATHISH, HUB_OPTIONS, JSON_LIKE, _options({}, ENGINE_HOSTILE))
def test_checkpoint_entry_points(source, hub, cache_bytes, engine) -> None:
    files = _holds(lambda: qe.resolve_checkpoint(_source(source), **hub))
    _holds(lambda: qe.load_vocabulary(files if isinstance(files, qe.CheckpointFiles) else source))
    _holds(lambda: qe.validate_gguf(_source(source)))
    _holds(lambda: qe.validate_gguf(TINY, against=_source(source)))
    _holds(
        lambda: qe.Encoder.from_pretrained(
            _source(source), cache_bytes=cache_bytes, **hub, **engine
        )
    )


def test_checkpoint_arguments_that_are_not_what_they_must_be() -> None:
    # Found by test_checkpoint_entry_points: a cache_dir that is no path raised TypeError inside
    # huggingface_hub and one with a lone surrogate UnicodeEncodeError; load_vocabulary with no
    # CheckpointFiles AttributeError; validate_gguf with a number TypeError.
    for options, field in [
        ({"cache_dir": 5}, "cache_dir"),
        ({"cache_dir": "\ud800"}, "cache_dir"),
        ({"revision": 5}, "revision"),
        ({"local_files_only": "yes"}, "local_files_only"),
    ]:
        with pytest.raises(qe.PromptError) as raised:
            qe.resolve_checkpoint("org/name", **options)
        assert raised.value.field == field
    with pytest.raises(qe.PromptError) as raised:
        qe.load_vocabulary(str(TINY))  # type: ignore[arg-type]
    assert raised.value.field == "files"
    with pytest.raises(qe.CheckpointError, match="expected a path"):
        qe.validate_gguf(5)  # type: ignore[arg-type]


@SETTINGS
@given(MESSAGE | JSON_LIKE, JSON_LIKE | st.integers(-2, 5), FLAG, FLAG, JSON_LIKE)
def test_protocol_entry_points(message, number, keep, vision, value) -> None:
    _holds(lambda: qe.format_turn(message, index=number, keep_reasoning=keep, add_vision_id=vision))
    _holds(lambda: qe.reasoning_effort_from_scale(number))
    _holds(lambda: qe.reasoning_instruction(value))
    _holds(lambda: qe.ReasoningEffort.parse(value))
    _holds(lambda: qe.serialize_tool_signatures(value))
    _holds(lambda: qe.Turn(role=value, content=value))
    _holds(lambda: qe.ToolCall(name=value, arguments=value))
    _holds(lambda: qe.TextBlock(value))
    turns = _holds(lambda: qe.turns_from_messages([message]))
    if isinstance(turns, list):
        plan = _holds(lambda: qe.plan_prompt(turns, enable_thinking=keep, add_vision_id=vision))
        if isinstance(plan, qe.PromptPlan):
            _holds(lambda: qe.render_turn(turns[0], 0, plan.layouts[0], add_vision_id=vision))


@SETTINGS
@given(IDS, JSON_LIKE, JSON_LIKE)
def test_encoder_arguments(tiny, ids, side, errors) -> None:
    _holds(lambda: tiny.check_ids(ids))
    _holds(lambda: tiny.pad([], side=side, pad_id=ids))
    _holds(lambda: tiny.encode_batch([], errors=errors))


# Wrong-typed arguments of the prompt-building and encoding entry points: each once raised
# TypeError, AttributeError or ValueError from deep inside instead of naming the argument.
HI = {"role": "user", "content": "hi"}
_WRONG_TYPES = [  # (case, call, where the error must say the problem is)
    ("plan_prompt with a number for turns", lambda e: qe.plan_prompt(5), "turns"),
    ("plan_prompt with a string in turns", lambda e: qe.plan_prompt(["x"]), "messages[0]"),
    (
        "plan_prompt with previous that is no plan",
        lambda e: qe.plan_prompt(qe.turns_from_messages([HI]), previous=5),
        "previous",
    ),
    (
        "render_turn with a layout that is no layout",
        lambda e: qe.render_turn(qe.turns_from_messages([{"role": "user"}])[0], 0, 5),
        "layout",
    ),
    (
        "render_turn with a number for the turn",
        lambda e: qe.render_turn(5, 0, qe.plan_prompt(qe.turns_from_messages([HI])).layouts[0]),
        "turn",
    ),
    (
        "tools_section with a 5000-digit integer",
        lambda e: qe.tools_section(10**5000),
        "signatures",
    ),
    ("encode of Prompt(5)", lambda e: e.encode(qe.Prompt(5)), "segments"),
    (
        "encode of a Text holding a list",
        lambda e: e.encode(qe.Prompt((qe.Special("<|im_start|>"), qe.Text([1])))),
        "prompt.segments[1]",
    ),
    (
        "encode of a Special holding a list",
        lambda e: e.encode(qe.Prompt((qe.Special([1]),))),
        "prompt.segments[0]",
    ),
    (
        "encode of a Text with a string for its turn",
        lambda e: e.encode(qe.Prompt((qe.Text("hi", turn="0"),))),
        "prompt.segments[0]",
    ),
    ("Encoder with no Vocabulary", lambda e: qe.Encoder(5), "vocabulary"),
]


@pytest.mark.parametrize(
    ("call", "where"),
    [(call, where) for _, call, where in _WRONG_TYPES],
    ids=[name for name, _, _ in _WRONG_TYPES],
)
def test_wrong_typed_arguments_of_prompt_and_encoder_entry_points_raise_typed_errors(
    tiny, call, where
) -> None:
    error = _holds(lambda: call(tiny))
    assert isinstance(error, qe.PromptError)
    assert str(error).startswith(f"{where}: "), str(error)
