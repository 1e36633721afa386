"""The documentation builds strictly, and every code block in README.md and docs/ is executed.

Each fenced block is one test, named by its file and line:

- ``python`` blocks run in order, one namespace per page, in a temporary working directory
  holding the repository's ``fixtures/``, ``examples/`` and ``scripts/`` (and ``../shared``
  beside it, as from a checkout). A block that reads ``../shared/`` skips, saying so, when the
  real checkpoints are absent.
- ``bash`` blocks run with ``bash -e`` in the page's directory, ``qwen-encode`` and ``python``
  those of this interpreter, and must exit 0, or the code an ``<!-- exit: N -->`` comment
  before the block states.
- ``json`` blocks must parse.
- a ``text`` block after ``<!-- output -->`` is what the block before it printed: its lines must
  appear in the real output, in order (a line ``…`` stands for lines left out).
- ``<!-- requires: NAME, ... -->`` before a block names what it needs beyond ``.[test]`` (an
  engine, a GPU, the network, a running server); it runs where all of them are present and
  skips, naming the missing ones, elsewhere. ``<!-- not-run: REASON -->`` marks a block that is
  not code to run (a file's shape, a grammar); it is reported as a skip with its reason.

Any other block fails: a block is executed, or it says why not.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
README_LIMIT = 15 * 1024

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
MARK = re.compile(r"^<!--\s*(?P<key>requires|exit|output|not-run)\s*(?::\s*(?P<value>.*?))?\s*-->$")
RUNNABLE = {"python", "bash", "json"}


def _module(name: str) -> Callable[[], bool]:
    return lambda: importlib.util.find_spec(name) is not None


def _never() -> bool:
    return False


# What a ``requires`` comment may name, with how to tell it is present and why it may not be.
REQUIREMENTS: dict[str, tuple[Callable[[], bool], str]] = {
    "vllm": (_module("vllm"), "vLLM is not installed (scripts/integration_env.sh vllm)"),
    "sglang": (_module("sglang"), "SGLang is not installed (scripts/integration_env.sh sglang)"),
    "trl": (
        lambda: _module("trl")() and _module("torch")(),
        "torch and TRL are not installed (scripts/integration_env.sh train)",
    ),
    "ray": (_module("ray"), "Ray is not installed (pip install 'qwen-encode[ray]')"),
    "llama-cpp-python": (
        _module("llama_cpp"),
        "llama-cpp-python is not installed (scripts/integration_env.sh llama)",
    ),
    "gpu": (lambda: shutil.which("nvidia-smi") is not None, "no GPU on this machine"),
    "network": (
        lambda: os.environ.get("QWEN_ENCODE_DOCS_NETWORK") == "1",
        "needs the network (PyPI, the Hugging Face hub, object storage); tests run offline",
    ),
    "server": (_never, "starts or talks to a long-running server: run it by hand"),
    "weights": (_never, "needs a model's weights, which the tests never load"),
    "checkpoints": (
        lambda: (SHARED / "checkpoints").is_dir(),
        "the real checkpoints (../shared/checkpoints) are absent",
    ),
}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marks: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def mark(self, key: str) -> str | None:
        return next((value for k, value in self.marks if k == key), None)


def _marks_before(lines: list[str], start: int) -> tuple[tuple[str, str], ...]:
    """The marker comments right above line ``start`` (blank lines between are allowed)."""
    marks: list[tuple[str, str]] = []
    i = start - 1
    while i >= 0 and (not lines[i].strip() or MARK.match(lines[i].strip())):
        found = MARK.match(lines[i].strip())
        if found:
            marks.append((found["key"], found["value"] or ""))
        i -= 1
    return tuple(reversed(marks))


def blocks_of(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, lang = opening["fence"], opening["info"].strip().split(" ")[0].lower()
        end = i + 1
        closing = re.compile(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$")
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = "\n".join(line[len(opening["indent"]) :] for line in lines[i + 1 : end])
        found.append(Block(page, i + 1, lang, body + "\n", _marks_before(lines, i)))
        i = end + 1
    return found


BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def _missing(block: Block) -> list[str]:
    names = [n.strip() for n in (block.mark("requires") or "").split(",") if n.strip()]
    if "../shared/" in block.code and "checkpoints" not in names:
        names.append("checkpoints")
    unknown = [n for n in names if n not in REQUIREMENTS]
    assert not unknown, f"{block.name}: unknown requirement(s) {unknown}; known: {[*REQUIREMENTS]}"
    return [REQUIREMENTS[n][1] for n in names if not REQUIREMENTS[n][0]()]


@dataclass
class PageRun:
    """One page's blocks run in order, sharing a namespace and a working directory."""

    workdir: Path
    namespace: dict[str, Any] = field(default_factory=dict)
    outputs: dict[int, str] = field(default_factory=dict)  # block line -> what it printed
    done: dict[int, BaseException | None] = field(default_factory=dict)


_RUNS: dict[Path, PageRun] = {}


def _workdir(tmp: Path) -> Path:
    """``tmp/repo`` (the working directory) with the repository's data, and ``tmp/shared``."""
    repo = tmp / "repo"
    repo.mkdir()
    for name in ("fixtures", "examples", "scripts"):
        (repo / name).symlink_to(ROOT / name)
    if SHARED.is_dir():
        (tmp / "shared").symlink_to(SHARED)
    return repo


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _run_python(block: Block, run: PageRun) -> str:
    out = io.StringIO()
    with _cwd(run.workdir), contextlib.redirect_stdout(out):
        exec(compile(block.code, block.name, "exec"), run.namespace)
    return out.getvalue()


def _run_bash(block: Block, run: PageRun) -> str:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(COLUMNS="100", NO_COLOR="1", PYTHONIOENCODING="utf-8")
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.code],
        cwd=run.workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    expected = int(block.mark("exit") or 0)
    assert done.returncode == expected, (
        f"{block.name} exited {done.returncode}, expected {expected}\n"
        f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    )
    return done.stdout


def _source_of(block: Block) -> Block | None:
    """The block whose output an output block shows: the last python or bash block before it."""
    before = [
        b
        for b in BLOCKS
        if b.page == block.page and b.line < block.line and b.lang in {"python", "bash"}
    ]
    return before[-1] if before else None


def _check_output(block: Block, run: PageRun) -> None:
    source = _source_of(block)
    assert source is not None, f"{block.name}: an output block with no block before it"
    assert source.line in run.outputs, f"{block.name}: {source.name} did not run"
    actual = [line.rstrip() for line in run.outputs[source.line].split("\n")]
    position = 0
    for shown in (line.rstrip() for line in block.code.strip("\n").split("\n")):
        if shown.strip() in {"…", "..."}:
            continue
        while position < len(actual) and actual[position] != shown:
            position += 1
        assert position < len(actual), (
            f"{block.name}: the line {shown!r} is not in what {source.name} printed "
            f"(in order):\n" + "\n".join(actual)
        )
        position += 1


def _execute(block: Block, run: PageRun) -> None:
    if block.lang == "python":
        run.outputs[block.line] = _run_python(block, run)
    elif block.lang == "bash":
        run.outputs[block.line] = _run_bash(block, run)
    elif block.lang == "json":
        json.loads(block.code)
    elif block.mark("output") is not None:
        _check_output(block, run)
    else:  # pragma: no cover - ruled out by the checks in test_block
        raise AssertionError(block.name)


def _skip_reason(block: Block) -> str | None:
    reason = block.mark("not-run")
    if reason is not None:
        assert reason, f"{block.name}: not-run needs a reason"
        return f"not run: {reason}"
    missing = _missing(block)
    return f"{block.name} needs what is absent: {'; '.join(missing)}" if missing else None


def _page_run(page: Path, tmp_path_factory: pytest.TempPathFactory) -> PageRun:
    if page not in _RUNS:
        _RUNS[page] = PageRun(_workdir(tmp_path_factory.mktemp(page.stem)))
    return _RUNS[page]


def _run_through(block: Block, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Run the page's blocks up to and including ``block`` (each once), raising its failure."""
    page_blocks = [b for b in BLOCKS if b.page == block.page]
    run = _page_run(block.page, tmp_path_factory)
    for earlier in page_blocks:
        if earlier.line in run.done:
            error = run.done[earlier.line]
        elif _skip_reason(earlier) is not None:
            error = None
        else:
            try:
                _execute(earlier, run)
                error = None
            except BaseException as exc:
                error = exc
            run.done[earlier.line] = error
        if earlier == block:
            if error is not None:
                raise error
            return
        if error is not None and earlier.lang == "python":
            raise AssertionError(f"{earlier.name}, which this block follows, failed") from error


def test_blocks_were_found() -> None:
    # The collector must see the README's two commands; if it ever finds nothing, nothing runs.
    names = {b.code.strip() for b in BLOCKS if b.page == README}
    assert "qwen-encode encode --model fixtures/qwen3.8-tiny examples/chat.jsonl" in names
    assert len(BLOCKS) > 40


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_block(block: Block, tmp_path_factory: pytest.TempPathFactory) -> None:
    if block.mark("output") is not None:
        assert block.lang == "text", f"{block.name}: an output block is ```text"
    elif block.mark("not-run") is None:
        assert block.lang in RUNNABLE, (
            f"{block.name}: a ```{block.lang or '(no language)'} block is neither executed nor "
            "marked: give it a language that runs (python, bash, json), or an <!-- output --> "
            "or <!-- not-run: REASON --> comment"
        )
    reason = _skip_reason(block)
    if reason is None and block.mark("output") is not None:
        source = _source_of(block)
        if source is not None and _skip_reason(source) is not None:
            reason = f"shows the output of {source.name}, which is skipped"
    if reason is not None:
        pytest.skip(reason)
    _run_through(block, tmp_path_factory)


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-5000:]
    cli = (tmp_path / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    # Generated from the parser, one section per command, never a pasted copy.
    assert "<!-- cli-reference -->" in (ROOT / "docs/reference/cli.md").read_text(encoding="utf-8")
    for command in ("encode", "render", "validate", "parse"):
        assert f"qwen-encode {command} --help" in cli, command
    api = (tmp_path / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    import qwen_encode

    for name in qwen_encode.__all__:  # every public name, documented or not
        assert f'id="qwen_encode.{name}"' in api, name
    for page, name in (("parser", "parser.StreamParser"), ("data", "data.encode_table")):
        html = (tmp_path / "reference" / page / "index.html").read_text(encoding="utf-8")
        assert f'id="qwen_encode.{name}"' in html, name


def test_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size:,} bytes, the limit is {README_LIMIT:,}"


def _section_block(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    block = next(b for b in blocks_of(README) if b.code.strip() in section and b.lang == "bash")
    return block.code


def test_ci_runs_the_readme_install_and_test_commands() -> None:
    """.ci/run installs as README "Install" says and runs README "Test"; its comments say so."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = [line.strip() for line in ci.split("\n")]
    install = [
        c.strip()
        for line in _section_block("Install").strip().split("\n")
        for c in line.split("&&")
        if c.strip().startswith("pip ")
    ]
    assert install, "README Install shows no pip command"
    for command in install:
        assert command in ci_lines, f".ci/run does not run {command!r}"
        assert ci_lines[ci_lines.index(command) - 1] == '# README "Install":'
    test = _section_block("Test").strip()
    assert test in ci_lines
    assert ci_lines[ci_lines.index(test) - 1] == '# README "Test":'


# A tracker number ("issue 12", "#12") means nothing to a reader without our tracker; a peer's
# public issue named with its project ("vLLM issue 57541") is evidence and stays.
TRACKER = re.compile(
    r"(?<!vLLM )(?<!SGLang )(?<!llama\.cpp )(?<!TRL )\b[Ii]ssues? #?\d+|(?<![\w/&])#\d+\b"
)


def test_docs_cite_no_tracker_numbers() -> None:
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1):
            assert not TRACKER.search(line), f"{page.relative_to(ROOT)}:{number}: {line}"


def test_readme_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to a missing {target}"
