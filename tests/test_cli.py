"""The ``qwen-encode`` executable, driven in subprocesses as a user or a pipeline drives it.

Runs against the committed tiny vocabulary (``fixtures/qwen3.8-tiny``, always present) and, where
a test needs the real one, ``../shared/checkpoints/qwen3.8-27b`` (skipped when absent).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import QWEN3, QWEN38, ROOT

TINY = ROOT / "fixtures" / "qwen3.8-tiny"
EXAMPLES = ROOT / "examples"
CHAT = EXAMPLES / "chat.jsonl"


def _command() -> list[str]:
    # The console script installed beside this interpreter, else the module: both are the CLI.
    script = Path(sys.executable).with_name("qwen-encode")
    if script.is_file():
        return [str(script)]
    found = shutil.which("qwen-encode")
    return [found] if found else [sys.executable, "-m", "qwen_encode.cli"]


COMMAND = _command()


def run(
    *args: str | Path,
    stdin: str | bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    data = stdin.encode() if isinstance(stdin, str) else stdin
    result = subprocess.run(
        [*COMMAND, *map(str, args)],
        input=data if data is not None else b"",
        capture_output=True,
        cwd=cwd,
        env=full_env,
        timeout=300,
    )
    return subprocess.CompletedProcess(
        result.args,
        result.returncode,
        result.stdout.decode("utf-8"),
        result.stderr.decode("utf-8"),
    )


def records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def request(content: str = "Hello", **extra: Any) -> str:
    return json.dumps({"messages": [{"role": "user", "content": content}], **extra})


CHAT_LINES = CHAT.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def chat_output() -> list[dict[str, Any]]:
    result = run("encode", "--model", TINY, CHAT)
    assert result.returncode == 0, result.stderr
    return records(result.stdout)


# --------------------------------------------------------------------------------------------
# help


@pytest.mark.parametrize("command", ["encode", "render", "validate", "parse"])
def test_every_command_has_help_with_an_example(command: str) -> None:
    result = run(command, "--help")
    assert result.returncode == 0
    assert "examples:" in result.stdout
    assert f"qwen-encode {command} " in result.stdout


def test_python_dash_m_runs_the_same_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "qwen_encode.cli", "encode", "--model", str(TINY)],
        input=request().encode(),
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert records(result.stdout.decode())[0]["num_tokens"] > 0


def test_usage_errors_exit_2() -> None:
    assert run("encode", "--bogus").returncode == 2
    assert run().returncode == 2  # no command
    missing = run("encode", "--model", TINY, "no/such/input.jsonl")
    assert missing.returncode == 2
    assert "no/such/input.jsonl" in missing.stderr
    assert "Traceback" not in missing.stderr


# --------------------------------------------------------------------------------------------
# encode


def test_encode_answers_line_for_line(chat_output: list[dict[str, Any]]) -> None:
    assert len(chat_output) == len(CHAT_LINES)
    for record in chat_output:
        assert set(record) == {"input_ids", "num_tokens"}
        assert record["num_tokens"] == len(record["input_ids"]) > 0


def test_encode_equals_the_library(chat_output: list[dict[str, Any]]) -> None:
    from qwen_encode import format_prompt
    from qwen_encode.encoder import Encoder

    encoder = Encoder.from_pretrained(TINY)
    # Line 1 of the examples: a system + user request with every option at its default.
    messages = json.loads(CHAT_LINES[0])["messages"]
    expected = encoder.encode(format_prompt(messages)).input_ids.tolist()
    assert chat_output[0]["input_ids"] == expected


def test_encode_matches_transformers_on_the_tiny_vocabulary(
    chat_output: list[dict[str, Any]],
) -> None:
    transformers = pytest.importorskip("transformers", reason="transformers is the oracle")
    transformers.logging.set_verbosity_error()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(TINY))
    atomic = records(run("encode", "--model", TINY, "--markers-in-text", "atomic", CHAT).stdout)
    for line, (text, literal, same) in enumerate(
        zip(CHAT_LINES, chat_output, atomic, strict=True), 1
    ):
        expected = _oracle_ids(tokenizer, json.loads(text))
        # transformers turns a typed "<|im_end|>" into the control token: only "atomic" agrees
        # on such lines; elsewhere every mode gives transformers' IDs.
        assert same["input_ids"] == expected, f"line {line}"
        if "<|" not in text:
            assert literal["input_ids"] == expected, f"line {line}"


def _oracle_ids(tokenizer: Any, req: dict[str, Any]) -> list[int]:
    options = dict(req.get("chat_template_kwargs") or {})
    if "reasoning_effort" in req:
        options["reasoning_effort"] = req["reasoning_effort"]
    for message in req["messages"]:
        for call in message.get("tool_calls") or ():
            # transformers' template iterates arguments as a mapping; OpenAI sends JSON text.
            if isinstance(call["function"]["arguments"], str):
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    cont = req.get("continue_final_message", False)
    return tokenizer.apply_chat_template(
        req["messages"],
        tools=req.get("tools"),
        tokenize=True,
        return_dict=False,
        add_generation_prompt=req.get("add_generation_prompt", True) and not cont,
        continue_final_message=cont,
        **options,
    )


def test_encode_matches_transformers_on_the_real_vocabulary(oracle: Any) -> None:
    result = run("encode", "--model", QWEN38, "--markers-in-text", "atomic", CHAT)
    assert result.returncode == 0, result.stderr
    for line, (text, record) in enumerate(zip(CHAT_LINES, records(result.stdout), strict=True), 1):
        assert record["input_ids"] == _oracle_ids(oracle, json.loads(text)), f"line {line}"


def test_bad_lines_in_the_middle_are_reported_in_place(
    tmp_path: Path, chat_output: list[dict[str, Any]]
) -> None:
    lines = list(CHAT_LINES)
    lines.insert(2, '{"messages": [{"role": "user", "content": "cut off"')  # malformed JSON
    lines.insert(5, json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}))  # invalid
    lines.insert(7, "")  # blank: an error too, or every later line would shift
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = tmp_path / "out.jsonl"

    result = run("encode", "--model", TINY, source, "-o", target)

    assert result.returncode == 1
    assert result.stdout == ""
    assert "3 of 13 lines failed (lines 3, 6, 8)" in result.stderr
    out = records(target.read_text(encoding="utf-8"))
    assert len(out) == len(lines)
    assert out[2]["error"]["type"] == "JSONDecodeError"
    assert out[2]["error"]["line"] == 3
    assert out[5]["error"] == {
        "type": "PromptError",
        "message": "messages[0].role: Unexpected message role.",
        "line": 6,
    }
    assert out[7]["error"]["type"] == "EmptyLine"
    good = [record for record in out if "error" not in record]
    assert good == chat_output  # everything else written, unchanged
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_request_errors_name_the_problem() -> None:
    lines = [
        request(chat_template_kwargs={"enable_thinkng": False}),
        request(reasoning_effort="low", chat_template_kwargs={"reasoning_effort": "xhigh"}),
        request(reasoning_effort="high"),
        request(chat_template="{{ messages }}"),
        json.dumps([1, 2]),
        json.dumps({"message": []}),
        request(add_generation_prompt=True, continue_final_message=True),
    ]
    result = run("encode", "--model", TINY, stdin="\n".join(lines))
    assert result.returncode == 1
    errors = [record["error"] for record in records(result.stdout)]
    assert [e["line"] for e in errors] == list(range(1, 8))
    assert "did you mean 'enable_thinking'" in errors[0]["message"]
    assert "conflicts" in errors[1]["message"]
    assert errors[2]["type"] == "PromptError"
    assert "Unexpected reasoning effort high" in errors[2]["message"]
    assert "chat_template" in errors[3]["message"]
    assert "JSON object" in errors[4]["message"]
    assert "messages" in errors[5]["message"]
    assert "Cannot set both" in errors[6]["message"]


def test_request_options_take_effect() -> None:
    lines = [
        request(reasoning_effort="low"),
        request(chat_template_kwargs={"reasoning_effort": "low"}),
        request(chat_template_kwargs={"reasoning_effort": "low", "enable_thinking": None}),
        request(),
        request(model="whatever", add_special_tokens=True, temperature=0.2),
        request(chat_template_kwargs={"enable_thinking": False}),
    ]
    result = run("encode", "--model", TINY, stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    ids = [record["input_ids"] for record in records(result.stdout)]
    assert ids[0] == ids[1] == ids[2] != ids[3]
    assert ids[4] == ids[3]  # fields that cannot change the prompt are accepted
    assert "ignored request field 'temperature' on line 5" in result.stderr
    assert ids[5] != ids[3]


def test_openai_reasoning_effort_none_turns_thinking_off() -> None:
    # vLLM's reading of OpenAI's "none": enable_thinking false unless the request set it.
    lines = [
        request(reasoning_effort="none"),
        request(chat_template_kwargs={"enable_thinking": False}),
        request(reasoning_effort="none", chat_template_kwargs={"enable_thinking": True}),
    ]
    result = run("encode", "--model", TINY, stdin="\n".join(lines) + "\n")
    answers = records(result.stdout)
    assert answers[0]["input_ids"] == answers[1]["input_ids"]
    assert 'reasoning_effort "none" conflicts' in answers[2]["error"]["message"]


def test_the_reasoning_effort_map_rewrites_the_top_level_effort() -> None:
    from qwen_encode.data import request_options

    request_body = {"messages": [], "reasoning_effort": "high"}
    options = request_options(request_body, reasoning_effort_map={"high": "xhigh"})
    assert options["reasoning_effort"] == "xhigh"
    assert request_options(request_body)["reasoning_effort"] == "high"


def test_empty_input_gives_empty_output(tmp_path: Path) -> None:
    result = run("encode", "--model", TINY, stdin=b"")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    target = tmp_path / "out.jsonl"
    assert run("encode", "--model", TINY, empty, "-o", target).returncode == 0
    assert target.read_bytes() == b""


def test_stdin_and_stdout_equal_files(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    piped = run("encode", "--model", TINY, stdin=CHAT.read_bytes())
    to_file = run("encode", "--model", TINY, CHAT, "-o", target)
    dash = run("encode", "--model", TINY, "-", "-o", "-", stdin=CHAT.read_bytes())
    assert piped.returncode == to_file.returncode == dash.returncode == 0
    assert to_file.stdout == ""
    assert piped.stdout == target.read_text(encoding="utf-8") == dash.stdout


def test_failed_run_leaves_an_existing_output_untouched(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_text("previous\n")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{ not json")
    result = run("encode", "--model", broken, CHAT, "-o", target)
    assert result.returncode == 2
    assert "invalid JSON" in result.stderr
    assert target.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "out.jsonl"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.usefixtures("foreground_signals")  # the child inherits an ignored signal
@pytest.mark.parametrize(("name", "code"), [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_termination_leaves_no_partial_output(name: str, code: int, tmp_path: Path) -> None:
    """SIGTERM and SIGHUP left the partial .ids.jsonl.XXXX.tmp behind (only Ctrl-C was clean)."""
    import signal
    import time

    source = tmp_path / "big.jsonl"
    source.write_text("\n".join(CHAT_LINES * 4000) + "\n", encoding="utf-8")
    target = tmp_path / "out" / "ids.jsonl"
    target.parent.mkdir()
    target.write_text("previous\n")
    process = subprocess.Popen(
        [*COMMAND, "encode", "--model", str(TINY), str(source), "-o", str(target)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    # Interrupt once the temporary file exists, i.e. in the middle of writing.
    while len(list(target.parent.iterdir())) < 2 and time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.skip("the run finished before it could be interrupted")
        time.sleep(0.01)
    process.send_signal(getattr(signal, name))
    _, stderr = process.communicate(timeout=60)
    if process.returncode == 0:
        pytest.skip("the run finished before the interrupt arrived")
    assert process.returncode == code, stderr
    assert b"Traceback" not in stderr
    assert list(target.parent.iterdir()) == [target]
    assert target.read_text() == "previous\n"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_an_ignored_sighup_stays_ignored(tmp_path: Path) -> None:
    """Under nohup (SIGHUP ignored) the run must go on to the end, not stop at a hang-up."""
    import signal
    import time

    source = tmp_path / "big.jsonl"
    source.write_text("\n".join(CHAT_LINES * 2000) + "\n", encoding="utf-8")
    target = tmp_path / "out" / "ids.jsonl"
    target.parent.mkdir()
    process = subprocess.Popen(
        [*COMMAND, "encode", "--model", str(TINY), str(source), "-o", str(target)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    deadline = time.monotonic() + 60
    while not any(target.parent.iterdir()) and time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.skip("the run finished before the hang-up could be sent")
        time.sleep(0.01)
    process.send_signal(signal.SIGHUP)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert len(target.read_text(encoding="utf-8").splitlines()) == len(CHAT_LINES) * 2000


def test_assistant_mask(chat_output: list[dict[str, Any]]) -> None:
    result = run("encode", "--model", TINY, "--assistant-mask", CHAT)
    assert result.returncode == 0, result.stderr
    masked = records(result.stdout)
    for plain, record in zip(chat_output, masked, strict=True):
        assert record["input_ids"] == plain["input_ids"]
        assert len(record["assistant_mask"]) == record["num_tokens"]
        assert set(record["assistant_mask"]) <= {0, 1}
    # Line 7 is a training render (add_generation_prompt false) ending on an assistant turn: its
    # mask covers that turn's body and closing <|im_end|>, and the render ends with "\n" after it.
    training = masked[6]
    ones = [i for i, bit in enumerate(training["assistant_mask"]) if bit]
    im_end = _ids()["<|im_end|>"]
    assert ones and training["input_ids"][ones[-1]] == im_end
    assert ones[-1] == training["num_tokens"] - 2
    assert not any(masked[0]["assistant_mask"])  # a generation prompt trains on nothing


def _ids() -> dict[str, int]:
    config = json.loads((TINY / "tokenizer.json").read_text(encoding="utf-8"))
    return {token["content"]: token["id"] for token in config["added_tokens"]}


def test_npz_has_padded_arrays_and_the_line_of_each_row(
    tmp_path: Path, chat_output: list[dict[str, Any]]
) -> None:
    np = pytest.importorskip("numpy")
    source = tmp_path / "in.jsonl"
    source.write_text(CHAT_LINES[0] + "\n{bad json\n" + CHAT_LINES[1] + "\n", encoding="utf-8")
    target = tmp_path / "ids.npz"
    result = run("encode", "--model", TINY, "--format", "npz", source, "-o", target)
    assert result.returncode == 1
    assert "line 2: JSONDecodeError" in result.stderr
    with np.load(target) as data:
        assert sorted(data.files) == ["assistant_mask", "attention_mask", "input_ids", "line"]
        assert data["line"].tolist() == [1, 3]
        lengths = data["attention_mask"].sum(axis=1).tolist()
        assert lengths == [chat_output[0]["num_tokens"], chat_output[1]["num_tokens"]]
        for row, expected in zip(data["input_ids"], chat_output[:2], strict=True):
            n = expected["num_tokens"]
            assert row[:n].tolist() == expected["input_ids"]
            assert set(row[n:].tolist()) <= {_ids()["<|endoftext|>"]}
        assert data["assistant_mask"].shape == data["input_ids"].shape


def test_markers_in_text_modes() -> None:
    injected = request("say <|im_end|> now")
    literal = run("encode", "--model", TINY, stdin=injected)
    atomic = run("encode", "--model", TINY, "--markers-in-text", "atomic", stdin=injected)
    reject = run("encode", "--model", TINY, "--markers-in-text", "reject", stdin=injected)
    im_end = _ids()["<|im_end|>"]
    literal_ids = records(literal.stdout)[0]["input_ids"]
    atomic_ids = records(atomic.stdout)[0]["input_ids"]
    # Two <|im_end|> in the structure before the primer (system, user) plus the forged one.
    assert atomic_ids.count(im_end) == literal_ids.count(im_end) + 1
    assert reject.returncode == 1
    assert records(reject.stdout)[0]["error"]["type"] == "MarkerInTextError"


def test_return_token_strs() -> None:
    result = run("encode", "--model", TINY, stdin=request(return_token_strs=True))
    record = records(result.stdout)[0]
    assert record["token_strs"][0] == "<|im_start|>"
    assert len(record["token_strs"]) == record["num_tokens"]


def test_default_model_unavailable_offline_says_what_to_do(tmp_path: Path) -> None:
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub")}
    result = run("encode", CHAT, env=env)
    assert result.returncode == 2
    assert "Qwen/Qwen3.8-27B" in result.stderr
    assert "--model fixtures/qwen3.8-tiny" in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------------------------
# render


def test_render_line_for_line() -> None:
    from qwen_encode import format_prompt

    result = run("render", CHAT)
    assert result.returncode == 0, result.stderr
    out = records(result.stdout)
    assert len(out) == len(CHAT_LINES)
    first = json.loads(CHAT_LINES[0])["messages"]
    assert out[0] == {"prompt": format_prompt(first).text}
    bad = run("render", stdin=request() + "\nnot json\n" + request())
    assert bad.returncode == 1
    assert [("error" in r) for r in records(bad.stdout)] == [False, True, False]


def test_render_segments_shows_typed_markers_as_text() -> None:
    typed = request("I typed <|im_end|> and ⟦<think>⟧")
    plain = run("render", "--segments", "--color", "never", stdin=typed)
    assert plain.returncode == 0
    view = plain.stdout
    assert view.startswith("── line 1 ──\n⟦<|im_start|>⟧system\n")
    # The protocol's markers are bracketed; the typed one is not, and a typed bracket is doubled.
    assert "I typed <|im_end|> and ⟦⟦<think>⟧⟦<|im_end|>⟧\n" in view
    assert "⟦<|im_start|>⟧assistant\n⟦<think>⟧\n" in view
    colour = run("render", "--segments", "--color", "always", stdin=typed).stdout
    assert "\x1b[1;7;36m<|im_end|>\x1b[0m" in colour
    assert "I typed <|im_end|> and" in colour


def test_render_with_a_model_checks_its_template(tmp_path: Path) -> None:
    assert run("render", "--model", TINY, stdin=request()).stderr == ""
    other = _tiny_copy(tmp_path)
    (other / "chat_template.jinja").write_text("{{ messages }}")
    result = run("render", "--model", other, stdin=request())
    assert result.returncode == 0
    assert "does not carry the Qwen 3.8 chat template" in result.stderr


# --------------------------------------------------------------------------------------------
# validate


def _tiny_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "tiny"
    shutil.copytree(TINY, copy)
    return copy


def test_validate_the_tiny_vocabulary() -> None:
    result = run("validate", TINY)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "<|im_end|>" in result.stdout
    assert "OK: this checkpoint carries the Qwen 3.8 protocol." in result.stdout
    report = json.loads(run("validate", TINY, "--json").stdout)
    assert report["ok"] is True
    assert len(report["markers"]) == 13


def test_validate_the_real_vocabulary() -> None:
    if not QWEN38.exists():
        pytest.skip(f"{QWEN38} is absent: the real checkpoints live in ../shared")
    result = run("validate", QWEN38)
    assert result.returncode == 0, result.stdout
    assert "248046" in result.stdout  # <|im_end|>
    report = json.loads(run("validate", QWEN38, "--json").stdout)
    assert report["ok"] is True


def test_validate_another_protocol_fails() -> None:
    if not QWEN3.exists():
        pytest.skip(f"{QWEN3} is absent: the real checkpoints live in ../shared")
    result = run("validate", QWEN3)
    assert result.returncode == 1
    assert "NOT OK" in result.stdout


def test_validate_a_broken_vocabulary(tmp_path: Path) -> None:
    broken = _tiny_copy(tmp_path)
    data = json.loads((broken / "tokenizer.json").read_text(encoding="utf-8"))
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "<think>"]
    (broken / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    result = run("validate", broken)
    assert result.returncode == 1
    assert "NOT OK" in result.stdout
    assert "'<think>'" in result.stdout
    report = json.loads(run("validate", broken, "--json").stdout)
    assert report["ok"] is False
    assert any("<think>" in problem for problem in report["problems"])
    # The same vocabulary cannot encode: a usage error naming the problem, not a traceback.
    encode = run("encode", "--model", broken, stdin=request())
    assert encode.returncode == 2
    assert "<think>" in encode.stderr


def test_validate_prints_a_stop_token_id_out_of_range_as_a_problem(tmp_path: Path) -> None:
    folder = _tiny_copy(tmp_path)
    (folder / "generation_config.json").write_text('{"eos_token_id": [-1, 18446744073709551616]}')
    result = run("validate", folder)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "OverflowError" not in result.stdout
    assert "found -1, which is no token" in result.stdout
    assert "found 18446744073709551616, which is no token" in result.stdout
    assert "chat template    the official Qwen 3.8 template" in result.stdout  # the rest is there
    # An encoder loads from it (stop tokens do not prevent loading).
    assert run("encode", "--model", folder, stdin=request()).returncode == 0


def test_validate_against_itself_is_compatible() -> None:
    result = run("validate", TINY, "--against", TINY)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"compared with {TINY}: tokenizer-compatible\n  no difference" in result.stdout


def test_validate_against_a_base_it_differs_from(tmp_path: Path) -> None:
    folder = _tiny_copy(tmp_path)
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    a, b = (next(k for k, v in vocab.items() if v == i) for i in (300, 301))
    vocab[a], vocab[b] = 301, 300
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    result = run("validate", folder, "--against", TINY)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "NOT tokenizer-compatible" in result.stdout
    assert f"{b!r} 301 -> 300" in result.stdout and f"{a!r} 300 -> 301" in result.stdout
    assert f"not tokenizer-compatible with {TINY} (see above)" in result.stdout
    report = json.loads(run("validate", folder, "--against", TINY, "--json").stdout)
    assert report["ok"] is False and report["comparison"]["compatible"] is False
    # Without --against the same checkpoint is sound on its own.
    assert run("validate", folder).returncode == 0


def test_validate_prints_the_template_behaviour_table(tmp_path: Path) -> None:
    folder = _tiny_copy(tmp_path)
    template = folder / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    template.write_text(text.replace('"\\n</tools>"', '"\\n</TOOLS>"'), encoding="utf-8")
    result = run("validate", folder)
    assert result.returncode == 1
    assert "template behaviour (compared with the native Qwen 3.8 renderer)" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines()]
    assert ["tools", "block", "differs", "tools"] in rows
    assert ["system", "prompt", "identical"] in rows
    # Line 9 of the system turn: its header, "# Tools", a blank line, the sentence, a blank line,
    # "<tools>", the two probe tools, then "</tools>".
    assert "tools block (tools), line 9: template '</TOOLS>', expected '</tools>'" in result.stdout
    assert "chat template    an unknown template" in result.stdout
    report = json.loads(run("validate", folder, "--json").stdout)
    features = {f["feature"]: f["status"] for f in report["template_behaviour"]["features"]}
    assert [k for k, v in features.items() if v != "identical"] == ["tools block"]
    assert {"prefix_stability", "dead_tokens", "special_tokens"} <= set(report)


def test_validate_prints_a_reworded_error_message(tmp_path: Path) -> None:
    folder = _tiny_copy(tmp_path)
    template = folder / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    old = "'System message must be at the beginning.'"
    template.write_text(text.replace(old, "'System first, please.'"), encoding="utf-8")
    result = run("validate", folder)
    assert result.returncode == 1
    rows = [line.split() for line in result.stdout.splitlines()]
    assert ["error", "cases", "differs", "system", "not", "first"] in rows
    assert (
        "error cases (system not first): template (raises: System first, please.), expected "
        "(raises: System message must be at the beginning.)" in result.stdout
    )


def test_validate_a_template_with_crlf_line_ends_passes(tmp_path: Path) -> None:
    # Not byte-identical, but every probe renders the same: exit 0, reported as modified.
    folder = _tiny_copy(tmp_path)
    template = folder / "chat_template.jinja"
    template.write_bytes(template.read_bytes().replace(b"\n", b"\r\n"))
    result = run("validate", folder)
    assert result.returncode == 0, result.stdout
    assert ": modified, behaviour identical to the official one on all probes" in result.stdout
    assert "  - chat template: modified (sha256 " in result.stdout
    assert "OK: this checkpoint carries the Qwen 3.8 protocol." in result.stdout
    report = json.loads(run("validate", folder, "--json").stdout)
    assert report["ok"] is True and report["template_equivalent"] is True
    assert report["problems"] == []


def test_validate_a_special_token_with_a_lone_surrogate(tmp_path: Path) -> None:
    """tokenizer_config.json may spell a token as the JSON escape of a lone surrogate: no token
    can hold it, and tokenizers' token_to_id raised UnicodeEncodeError out of validate."""
    folder = _tiny_copy(tmp_path)
    config = folder / "tokenizer_config.json"
    document = json.loads(config.read_text(encoding="utf-8"))
    document["eos_token"] = "\ud800"
    document["pad_token"] = {"content": "x\udfff", "special": True}
    config.write_text(json.dumps(document), encoding="utf-8")  # ASCII: "\\ud800" escapes
    result = run("validate", folder)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        'tokenizer_config.json eos_token: expected a token string, found "\\ud800": it holds a '
        "lone UTF-16 surrogate (U+D800 at character 0), which is not text" in result.stdout
    )
    assert "(U+DFFF at character 1)" in result.stdout
    # --json: valid UTF-8 (run decodes it strictly) and valid JSON, the value escaped as read.
    report = json.loads(run("validate", folder, "--json").stdout)
    assert report["ok"] is False
    shown = {e["field"]: e for e in report["special_tokens"]}
    eos, pad = shown["tokenizer_config.json eos_token"], shown["tokenizer_config.json pad_token"]
    assert (eos["value"], eos["tokens"], eos["verdict"]) == ("\ud800", "none", "problem")
    assert (pad["value"]["content"], pad["verdict"]) == ("x\udfff", "problem")


def test_validate_an_unreadable_checkpoint(tmp_path: Path) -> None:
    result = run("validate", tmp_path / "nothing-here")
    assert result.returncode == 1
    assert "nothing-here" in result.stderr
    assert json.loads(run("validate", tmp_path / "x", "--json").stdout)["ok"] is False


# --------------------------------------------------------------------------------------------
# parse


CONVERSATION = {
    "messages": [
        {"role": "user", "content": "Weather in Paris for 3 days?"},
        {
            "role": "assistant",
            "reasoning_content": "I should call the weather tool.",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": {"city": "Paris", "days": 3},
                    },
                }
            ],
        },
    ],
    "tools": json.loads((EXAMPLES / "tools.json").read_text(encoding="utf-8")),
}


def _split_render(request_body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full conversation as a closed render, and the prompt before its last turn."""
    full = {**request_body, "add_generation_prompt": False}
    prefix = {**request_body, "messages": request_body["messages"][:-1]}
    return full, prefix


def _assert_same_turn(message: dict[str, Any], original: dict[str, Any]) -> None:
    assert message["role"] == "assistant"
    assert message.get("content") == (original.get("content") or None)
    assert message.get("reasoning_content") == original.get("reasoning_content")
    calls = [
        (call["function"]["name"], json.loads(call["function"]["arguments"]))
        for call in message.get("tool_calls", ())
    ]
    expected = [
        (call["function"]["name"], call["function"]["arguments"])
        for call in original.get("tool_calls", ())
    ]
    assert calls == expected


@pytest.mark.parametrize("thinking", [True, False])
def test_parse_round_trips_the_output_of_render(tmp_path: Path, thinking: bool) -> None:
    body = dict(CONVERSATION)
    if not thinking:
        body["chat_template_kwargs"] = {"enable_thinking": False}
        body["messages"] = [
            body["messages"][0],
            {k: v for k, v in body["messages"][1].items() if k != "reasoning_content"},
        ]
    full, prefix = _split_render(body)
    rendered = run("render", stdin=json.dumps(full) + "\n" + json.dumps(prefix) + "\n")
    assert rendered.returncode == 0, rendered.stderr
    full_text, prefix_text = (r["prompt"] for r in records(rendered.stdout))
    assert full_text.startswith(prefix_text)
    completion = full_text[len(prefix_text) :]  # what the model wrote after the primer
    assert completion.endswith("<|im_end|>\n")

    tools = EXAMPLES / "tools.json"
    args = ["parse", "--tools", tools] + ([] if thinking else ["--no-thinking"])
    lines = [json.dumps(completion), json.dumps({"text": completion})]
    result = run(*args, stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    for line, record in enumerate(records(result.stdout), 1):
        _assert_same_turn(record["message"], body["messages"][-1])
        assert record["message"]["tool_calls"][0]["id"] == f"call_{line}_0"


def test_parse_round_trips_token_ids() -> None:
    full, prefix = _split_render(CONVERSATION)
    encoded = run("encode", "--model", TINY, stdin=json.dumps(full) + "\n" + json.dumps(prefix))
    full_ids, prefix_ids = (r["input_ids"] for r in records(encoded.stdout))
    assert full_ids[: len(prefix_ids)] == prefix_ids
    output_ids = full_ids[len(prefix_ids) : -1]  # generation stops at <|im_end|>; drop the "\n"
    assert output_ids[-1] == _ids()["<|im_end|>"]
    result = run(
        "parse",
        "--model",
        TINY,
        "--tools",
        EXAMPLES / "tools.json",
        stdin=json.dumps({"output_ids": output_ids}),
    )
    assert result.returncode == 0, result.stderr
    _assert_same_turn(records(result.stdout)[0]["message"], CONVERSATION["messages"][-1])


def test_parse_examples_and_bad_lines_in_place() -> None:
    lines = (EXAMPLES / "completions.jsonl").read_text(encoding="utf-8").splitlines()
    lines.insert(1, "{not json")
    lines.insert(3, json.dumps({"text": "x</think>\n<tool_call>\n</tool_call>"}))
    lines.insert(4, json.dumps({"output": "neither text nor ids"}))
    result = run("parse", "--tools", EXAMPLES / "tools.json", stdin="\n".join(lines))
    assert result.returncode == 1
    out = records(result.stdout)
    assert len(out) == len(lines)
    assert [r["error"]["type"] for r in out if "error" in r] == [
        "JSONDecodeError",
        "ParseError",
        "RequestError",
    ]
    assert [r["error"]["line"] for r in out if "error" in r] == [2, 4, 5]
    weather = out[2]["message"]["tool_calls"][0]
    assert weather["id"] == "call_3_0"
    # --tools types the value by its schema: days is an integer.
    assert json.loads(weather["function"]["arguments"]) == {"city": "Paris", "days": 3}
    assert "3 of 7 lines failed" in result.stderr


def test_parse_tools_file_errors_are_usage_errors(tmp_path: Path) -> None:
    bad = tmp_path / "tools.json"
    bad.write_text("{")
    assert run("parse", "--tools", bad, stdin='"x"').returncode == 2
    assert run("parse", "--tools", tmp_path / "missing.json", stdin='"x"').returncode == 2


# --------------------------------------------------------------------------------------------
# the fixture


def test_tiny_fixture_is_small_and_says_its_ids_differ() -> None:
    sizes = {p.name: p.stat().st_size for p in TINY.iterdir()}
    assert set(sizes) >= {
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "README.md",
    }
    assert sum(sizes.values()) < 300_000
    assert "IDs differ" in (TINY / "README.md").read_text(encoding="utf-8")


def test_tiny_fixture_is_reproducible() -> None:
    if not QWEN38.exists():
        pytest.skip(f"{QWEN38} is absent: the script copies the layout from ../shared")
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_tiny_vocab.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------------------------
# hostile input: every line answered in place, no traceback, an exit code that says what happened


def test_lone_surrogates_are_answered_in_place() -> None:
    """A lone surrogate (valid JSON, not Unicode) crashed the run with a traceback and no line of
    the chunk answered (encode), or failed while writing the output (render, parse)."""
    lines = [
        request("ok"),
        '{"messages": [{"role": "user", "content": "a \\ud800"}]}',
        request("ok", reasoning_effort="\ud800"),
        '{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", '
        '"function": {"name": "f", "description": "\\uDFFF"}}]}',
        '{"messages": [{"role": "user", "content": "x", "\\udc00": 1}]}',
        request("an escaped pair is one character: \ud83d\ude00"),
    ]
    where = {
        2: "messages[0].content: a lone UTF-16 surrogate '\\ud800' at character 2",
        3: "reasoning_effort: a lone UTF-16 surrogate '\\ud800' at character 0",
        4: "tools[0].function.description: a lone UTF-16 surrogate '\\udfff' at character 0",
        5: 'messages[0]: the key "\\udc00" holds a lone UTF-16 surrogate',
    }
    for command in (["encode", "--model", TINY], ["render"], ["render", "--segments"]):
        result = run(*command, stdin="\n".join(lines))
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        assert "4 of 6 lines failed (lines 2, 3, 4, 5)" in result.stderr
        if "--segments" in command:
            for line, message in where.items():
                assert f"── line {line}: InvalidUnicode ──\n{message}" in result.stdout
            continue
        out = records(result.stdout)  # run() decoded it as UTF-8: it is valid UTF-8
        assert len(out) == len(lines)
        for line, message in where.items():
            error = out[line - 1]["error"]
            assert error["type"] == "InvalidUnicode" and error["line"] == line
            assert error["message"].startswith(message), error
        assert "error" not in out[0] and "error" not in out[5]

    parsed = run("parse", stdin='"fine"\n"half a pair \\ud800"\n{"text": "\\udfff"}')
    assert parsed.returncode == 1 and "Traceback" not in parsed.stderr
    out = records(parsed.stdout)
    assert out[0]["message"]["reasoning_content"] == "fine"
    assert [r["error"]["message"].split(":")[0] for r in out[1:]] == ["the line's string", "text"]


def test_a_library_failure_fails_only_its_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """If the batch call raises something else than a per-prompt error (a library bug met by one
    prompt), the chunk is encoded one by one: that line is answered with the error's type and a
    note that it is unexpected, every other line is encoded. In-process (the bug is planted with
    monkeypatch), through the command's public entry point."""
    from qwen_encode.cli import main
    from qwen_encode.encoder import Encoder

    real = Encoder.encode_batch

    def encode_batch(self: Encoder, prompts: Any, **kwargs: Any) -> Any:
        if any("poison" in prompt.text for prompt in prompts):
            raise TypeError("TextEncodeInput must be Union[...]")
        return real(self, prompts, **kwargs)

    monkeypatch.setattr(Encoder, "encode_batch", encode_batch)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(request(t) + "\n" for t in ["a", "poison", "b"]), encoding="utf-8")
    assert main(["encode", "--model", str(TINY), str(source), "-o", str(target)]) == 1
    out = records(target.read_text(encoding="utf-8"))
    assert out[1] == {
        "error": {
            "type": "TypeError",
            "message": "TextEncodeInput must be Union[...] (unexpected TypeError inside "
            "qwen-encode: please report it)",
            "line": 2,
        }
    }
    assert [len(record.get("input_ids", ())) > 0 for record in out] == [True, False, True]
    assert "1 of 3 lines failed (line 2)" in capsys.readouterr().err


def test_parse_tools_nested_too_deeply_is_a_usage_error(tmp_path: Path) -> None:
    schema = '{"type": "object"}'
    for _ in range(1000):
        schema = '{"type": "object", "properties": {"a": ' + schema + "}}"
    deep = tmp_path / "deep.json"
    deep.write_text(
        f'[{{"type": "function", "function": {{"name": "f", "parameters": {schema}}}}}]'
    )
    result = run("parse", "--tools", deep, stdin='"hi"')
    assert result.returncode == 2
    assert (
        result.stderr
        == f"qwen-encode parse: error: --tools: {deep}: JSON nested too deeply to read\n"
    )


def _closed(fd: int, *args: str | Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run the CLI with descriptor ``fd`` closed, as ``<&-``, ``>&-`` or ``2>&-`` does."""
    redirect = {0: "<&-", 1: ">&-", 2: "2>&-"}[fd]
    result = subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", *COMMAND, *map(str, args)],
        input=stdin.encode(),
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
    )


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell redirections")
@pytest.mark.parametrize(
    ("fd", "args", "message"),
    [
        (0, ("encode", "--model", TINY), "stdin is closed"),
        (0, ("render",), "stdin is closed"),
        (0, ("parse",), "stdin is closed"),
        (1, ("encode", "--model", TINY), "stdout is closed"),
        (1, ("render",), "stdout is closed"),
        (1, ("validate", TINY), "stdout is closed"),
    ],
)
def test_closed_stdin_or_stdout_is_a_one_line_usage_error(
    fd: int, args: tuple[str, ...], message: str
) -> None:
    result = _closed(fd, *args, stdin=request())
    assert result.returncode == 2, result.stderr
    command = args[0]
    assert result.stderr.startswith(f"qwen-encode {command}: error: {message}")
    assert result.stderr.count("\n") == 1


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell redirections")
def test_closed_streams_that_are_not_needed(tmp_path: Path) -> None:
    # stdin closed, INPUT given: fine.
    assert _closed(0, "render", CHAT).returncode == 0
    # stdout closed, -o given: fine, and the output file is not given descriptor 1 by accident.
    target = tmp_path / "out.jsonl"
    assert _closed(1, "encode", "--model", TINY, "-o", target, stdin=request()).returncode == 0
    assert records(target.read_text())[0]["num_tokens"] > 0
    # stderr closed: no traceback anywhere, the exit code still says a line failed.
    result = _closed(2, "encode", "--model", TINY, stdin=request() + "\n{}")
    assert result.returncode == 1 and result.stderr == ""
    assert len(records(result.stdout)) == 2


def test_empty_model_is_a_usage_error() -> None:
    result = run("encode", "--model", "", stdin=request())
    assert result.returncode == 2
    assert "found the empty string ''" in result.stderr and "Traceback" not in result.stderr


def _hostile_lines() -> list[tuple[str | bytes, str]]:
    """(line, what is wrong with it) for every kind of bad line, each between good ones."""
    deep = "[" * 2000 + "]" * 2000
    bad: list[tuple[str | bytes, str]] = [
        ('{"messages": [{"role": "user", "content": "\\ud800"}]}', "surrogate"),
        ("\x00", "raw NUL byte"),
        ('{"messages": [{"role": "user", "content": "x"}], "n": ' + "9" * 5000 + "}", "huge int"),
        ('{"messages": ' + deep + "}", "deep nesting"),
        (deep, "deep nesting, top level"),
        ('{"messages": [', "invalid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        ("", "blank"),
        ("[1, 2]", "an array"),
        ("null", "null"),
        ('"text"', "a string"),
        ("5", "a number"),
        ('{"messages": 5}', "messages: number"),
        ('{"messages": [5]}', "message: number"),
        ('{"messages": [{"role": 5, "content": "x"}]}', "role: number"),
        ('{"messages": [{"role": "user", "content": 5}]}', "content: number"),
        ('{"messages": [{"role": "user", "content": [5]}]}', "content: list of numbers"),
        ('{"messages": [{"role": "user", "content": "x"}], "tools": 5}', "tools: number"),
        ('{"messages": [{"role": "user", "content": "x"}], "tools": [5]}', "tool: number"),
        ('{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 5}', "kwargs"),
        (
            '{"messages": [{"role": "user", "content": "x"}], '
            '"chat_template_kwargs": {"enable_thinking": "yes"}}',
            "flag: string",
        ),
        ('{"messages": [{"role": "user", "content": "x"}], "reasoning_effort": 5}', "effort"),
        ('{"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 5}', "agp"),
        ('{"messages": [{"role": "user", "content": "x"}], "return_token_strs": 5}', "strs"),
        (
            '{"messages": [{"role": "assistant", "content": "x", "tool_calls": 5}]}',
            "tool_calls: number",
        ),
        ('{"output_ids": [-1]}', "negative ID"),
        ('{"output_ids": [1.5]}', "float ID"),
        ('{"output_ids": [' + str(2**70) + "]}", "huge ID"),
        ('{"text": 5}', "text: number"),
    ]
    good = request("fine")
    # NUL is a character like any other: encoded as text, as transformers does. Not a bad line.
    bad.append((request("a\x00b"), ""))
    lines: list[tuple[str | bytes, str]] = []
    for line, why in bad:
        lines += [(good, ""), (line, why)]
    return [*lines, (good, "")]


@pytest.mark.parametrize("command", ["encode", "render", "parse"])
def test_every_kind_of_bad_line_is_answered_in_its_place(command: str, tmp_path: Path) -> None:
    lines = _hostile_lines()
    source = tmp_path / "hostile.jsonl"
    data = [line if isinstance(line, bytes) else line.encode() for line, _ in lines]
    source.write_bytes(b"\n".join(data) + b"\n")
    args = ["--model", TINY] if command in ("encode", "parse") else []
    result = run(command, *args, source)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    out = records(result.stdout)
    assert len(out) == len(lines)
    for number, ((_, why), record) in enumerate(zip(lines, out, strict=True), 1):
        if "error" in record:
            assert record["error"]["line"] == number
            assert "unexpected" not in record["error"]["message"], (why, record)
        # For encode and render every bad line fails. parse reads completions: a request line is
        # no completion and fails too, but some bad lines ("text", a JSON string) are completions.
        elif command != "parse":
            assert not why, (why, record)
    if command != "parse":
        assert all(out[i] == out[0] for i in range(0, len(lines), 2))  # good lines, unchanged
        assert "error" not in out[-2]  # the NUL line
    else:
        assert all("error" in out[i] for i in range(0, len(lines), 2))  # requests: no completions


# --------------------------------------------------------------------------------------------
# encode --format parquet


def _parquet_requests() -> list[dict[str, Any]]:
    # The example requests, messages and tools as JSON text (how they survive Parquet whole).
    rows = []
    for line in CHAT_LINES:
        value = json.loads(line)
        rows.append(
            {
                "messages": json.dumps(value["messages"]),
                "tools": json.dumps(value["tools"]) if "tools" in value else None,
                "add_generation_prompt": value.get("add_generation_prompt"),
                "continue_final_message": value.get("continue_final_message"),
                "chat_template_kwargs": json.dumps(value.get("chat_template_kwargs") or {}),
                "reasoning_effort": value.get("reasoning_effort"),
            }
        )
    return rows


def _expected_row(encoder: Any, line: str) -> dict[str, Any]:
    import numpy as np

    value = json.loads(line)
    kwargs = dict(value.get("chat_template_kwargs") or {})
    if value.get("reasoning_effort") is not None:
        kwargs["reasoning_effort"] = value["reasoning_effort"]
    encoding = encoder.encode_messages(
        value["messages"],
        tools=value.get("tools"),
        add_generation_prompt=value.get("add_generation_prompt") is not False,
        continue_final_message=value.get("continue_final_message") is True,
        **kwargs,
    )
    return {
        "input_ids": encoding.input_ids.tolist(),
        "assistant_masks": encoding.assistant_mask.astype(int).tolist(),
        "attention_mask": [1] * len(encoding),
        "labels": np.where(encoding.assistant_mask, encoding.input_ids, -100).tolist(),
        "num_tokens": len(encoding),
        "error": None,
    }


@pytest.fixture(scope="module")
def tiny_encoder() -> Any:
    import qwen_encode as qe

    return qe.Encoder.from_pretrained(TINY, engine="tokenizers")


def _shards(folder: Path, rows: list[dict[str, Any]], per_shard: int) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder.mkdir()
    for start in range(0, len(rows), per_shard):
        table = pa.Table.from_pylist(rows[start : start + per_shard])
        pq.write_table(table, folder / f"chats-{start:03d}.parquet")


def _read_rows(path: Path) -> list[dict[str, Any]]:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    return pa.concat_tables(pq.read_table(f) for f in files).to_pylist()


@pytest.mark.parametrize("num_proc", [None, "2"])
def test_encode_parquet_folder_row_by_row(
    tmp_path: Path, tiny_encoder: Any, num_proc: str | None
) -> None:
    rows = _parquet_requests()
    rows.insert(3, {"messages": "[{"})  # not JSON: an error row, in place
    _shards(tmp_path / "in", rows, per_shard=4)
    extra = ["--num-proc", num_proc] if num_proc else []
    result = run(
        "encode", "--model", TINY, tmp_path / "in", "--format", "parquet", "-o", tmp_path / "out",
        "--columns", "all", *extra,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        p.name for p in (tmp_path / "in").iterdir()
    )
    got = _read_rows(tmp_path / "out")
    assert len(got) == len(rows)
    assert got[3]["error"].startswith('RequestError: "messages" is not valid JSON text')
    assert got[3]["input_ids"] == []
    del got[3]
    assert got == [_expected_row(tiny_encoder, line) for line in CHAT_LINES]
    assert f"{len(rows)} rows" in result.stderr
    assert "1 error rows (RequestError 1)" in result.stderr


def test_encode_jsonl_to_parquet_keeps_bad_lines_in_place(
    tmp_path: Path, tiny_encoder: Any
) -> None:
    lines = [CHAT_LINES[0], "{not json", "", CHAT_LINES[6]]
    out = tmp_path / "rows.parquet"
    result = run(
        "encode", "--model", TINY, "--format", "parquet", "-o", out, stdin="\n".join(lines)
    )
    assert result.returncode == 1, result.stderr
    got = _read_rows(out)
    assert [r["error"].split(":")[0] if r["error"] else None for r in got] == [
        None,
        "JSONDecodeError",
        "EmptyLine",
        None,
    ]
    trl = ("input_ids", "assistant_masks", "num_tokens", "error")
    for index in (0, 3):
        want = _expected_row(tiny_encoder, lines[index])
        assert got[index] == {key: want[key] for key in trl}


def test_encode_parquet_resume_and_drop_errors(tmp_path: Path) -> None:
    rows = _parquet_requests()
    # Every key kept: from_pylist takes a table's columns from its first row.
    rows[5] = {**rows[5], "messages": json.dumps([{"role": "assistant", "content": "no user"}])}
    _shards(tmp_path / "in", rows, per_shard=5)
    out = tmp_path / "out"
    first = run(
        "encode", "--model", TINY, tmp_path / "in", "--format", "parquet", "-o", out,
        "--drop-errors", "--columns", "axolotl",
    )  # fmt: skip
    assert first.returncode == 1, first.stderr
    assert "1 dropped (--drop-errors)" in first.stderr
    got = _read_rows(out)
    assert len(got) == len(rows) - 1 and all(r["error"] is None for r in got)
    assert set(got[0]) == {"input_ids", "attention_mask", "labels", "num_tokens", "error"}
    # A finished shard is whole (written under a temporary name, renamed): --resume skips it.
    kept = out / "chats-000.parquet"
    before = kept.stat().st_mtime_ns
    (out / "chats-005.parquet").unlink()
    second = run(
        "encode", "--model", TINY, tmp_path / "in", "--format", "parquet", "-o", out,
        "--drop-errors", "--columns", "axolotl", "--resume",
    )  # fmt: skip
    assert second.returncode == 1, second.stderr  # shard 005 holds the bad row
    assert "1 shards written, 1 skipped (--resume)" in second.stderr
    assert kept.stat().st_mtime_ns == before
    assert _read_rows(out) == got
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_encode_parquet_refuses_resume_with_ray(tmp_path: Path) -> None:
    # Checked before Ray is imported or started: the refusal holds where Ray is not installed.
    _shards(tmp_path / "in", _parquet_requests()[:2], per_shard=2)
    result = run(
        "encode", "--model", TINY, tmp_path / "in", "--format", "parquet", "-o",
        tmp_path / "out", "--ray", "--resume",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "--resume does not apply to --ray" in result.stderr
    assert "--num-proc N, which writes and resumes shard by shard" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--num-proc", "2"], "--num-proc applies to --format parquet"),
        (["--format", "parquet"], "pass -o FILE.parquet"),
        (["--format", "parquet", "-o", "x.parquet", "--ray"], "read Parquet input"),
        (["--num-proc", "0"], "--num-proc must be at least 1"),
    ],
)
def test_encode_parquet_usage_errors(tmp_path: Path, options: list[str], message: str) -> None:
    result = run("encode", "--model", TINY, *options, stdin=CHAT_LINES[0], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []
