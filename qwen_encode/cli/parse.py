"""``qwen-encode parse``: model completions (text or token IDs) -> assistant messages."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..batch import RecordError
from ..chat_request import json_type
from ..errors import TokenIdError
from ..json_text import JSONTextError, loads
from .common import (
    DEFAULT_MODEL,
    PROG,
    TINY_FIXTURE,
    UsageError,
    add_io,
    add_model,
    load_encoder,
)
from .lines import Tally, error_record, line_job
from .output import dump
from .types import CLISubcommand

if TYPE_CHECKING:
    from ..encoder import Encoder
    from ..parser import Completion

__all__ = ["cmd_init", "cmd_parse"]

PARSE_HELP = """\
Parse model completions into assistant messages in OpenAI shape.

INPUT is JSON Lines (default: stdin): a JSON string (the completion text), {"text": "..."}, or
{"output_ids": [...]} (token IDs as the engine returned them; decoded with --model). A trailing
<|im_end|> / <|endoftext|> (or stop token ID) is dropped. The prompt is assumed to end with the
generation primer, which leaves <think> open: pass --no-thinking when it was rendered with
enable_thinking false.

Output line i answers input line i:
  {"message": {"role": "assistant", "content": ..., "reasoning_content": ...,
               "tool_calls": [{"id": "call_<line>_<k>", "type": "function",
                               "function": {"name": ..., "arguments": "<JSON text>"}}]}}
  (+ "unterminated": "<tool_call>..." when the output was cut inside a call)
  {"error": {"type": ..., "message": ..., "line": i}}
Exit codes as for `encode`. --tools FILE (a JSON list of tools) types parameter values by
their schema; without it a value is JSON when it parses, else a string.
"""

PARSE_EXAMPLE = f"""\
examples:
  {PROG} parse examples/completions.jsonl --tools examples/tools.json
  {PROG} parse --model {TINY_FIXTURE} outputs.jsonl -o messages.jsonl
"""


def _load_tools(path: str | None) -> Any:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            tools = loads(handle.read())
    except OSError as error:
        raise UsageError(f"--tools: cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"--tools: {path} is not JSON: {error}") from None
    except JSONTextError as error:
        if error.kind == "depth":
            raise UsageError(f"--tools: {path}: JSON nested too deeply to read") from None
        if error.kind == "number":  # an integer past Python's 4300-digit limit
            raise UsageError(f"--tools: {path}: JSON that cannot be read: {error.detail}") from None
        raise UsageError(f"--tools: {path} is not JSON: {error.detail}") from None
    if isinstance(tools, dict) and isinstance(tools.get("tools"), list):
        tools = tools["tools"]  # a request body holding the tools list
    from ..parser import parse_completion

    try:
        parse_completion("", tools=tools)  # builds the schema lookup: rejects a malformed list
    except (TypeError, ValueError) as error:
        raise UsageError(f"--tools: {path}: {error}") from None
    except RecursionError:
        raise UsageError(f"--tools: {path}: schemas nested too deeply to use") from None
    return tools


class _Parser:
    """Parses completion lines; loads the vocabulary only when a line carries token IDs."""

    def __init__(self, args: argparse.Namespace, tools: Any) -> None:
        self.model = args.model
        self.tools = tools
        self.thinking = not args.no_thinking
        self._encoder: Encoder | None = None

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = load_encoder(self.model or DEFAULT_MODEL)
        return self._encoder

    def record(self, value: Any, line: int) -> dict[str, Any]:
        """The answer to one input line (a completion) or RecordError/QwenEncodeError."""
        completion = self._completion(value)
        message = completion.to_message()
        if "tool_calls" in message:
            # The protocol carries no call IDs; deterministic ones let tool results refer back.
            message["tool_calls"] = [
                {"id": f"call_{line}_{j}", **call} for j, call in enumerate(message["tool_calls"])
            ]
        record: dict[str, Any] = {"message": message}
        if completion.unterminated is not None:
            record["unterminated"] = completion.unterminated
        return record

    def _completion(self, value: Any) -> Completion:
        if isinstance(value, str):
            # A trailing <|im_end|> (engines report it with skip_special_tokens=False; a render
            # of a closed turn has it) ends the turn: the parser records it as the stop.
            return self._from_text(value)
        if not isinstance(value, dict):
            raise RecordError(
                "RequestError",
                'expected a JSON string (completion text) or an object with "text" or '
                f'"output_ids", got a JSON {json_type(value)}',
            )
        if ("text" in value) == ("output_ids" in value):
            raise RecordError(
                "RequestError", 'expected an object with either "text" or "output_ids"'
            )
        if "text" in value:
            text = value["text"]
            if not isinstance(text, str):
                raise RecordError("RequestError", f'"text" must be a string, got {json_type(text)}')
            return self._from_text(text)
        return self._from_ids(value["output_ids"])

    def _from_text(self, text: str) -> Completion:
        from ..parser import parse_completion

        return parse_completion(text, tools=self.tools, thinking=self.thinking)

    def _from_ids(self, ids: Any) -> Completion:
        from ..parser import parse_completion

        if not isinstance(ids, list):
            raise RecordError(
                "RequestError", f'"output_ids" must be a list of token IDs, got {json_type(ids)}'
            )
        encoder = self.encoder
        try:
            checked = encoder.check_ids(ids)
        except TokenIdError as error:
            message = f"output_ids[{error.position}]: {error.reason}"
            bad = ids[error.position]
            if isinstance(bad, int) and not isinstance(bad, bool):  # an integer, out of range
                message += ": is --model the model that generated them?"
            raise RecordError("TokenIdError", message) from None
        # vLLM's output token_ids end with the stop token that ended generation.
        return parse_completion(checked, tools=self.tools, thinking=self.thinking, encoder=encoder)


def cmd_parse(args: argparse.Namespace) -> int:
    tools = _load_tools(args.tools)
    parser = _Parser(args, tools)
    if args.model is not None:
        parser.encoder  # noqa: B018 - an explicit --model is checked before any output
    tally = Tally("parse")
    with line_job(args, "parse") as (chunks, output, progress):
        for chunk in chunks:
            for line in chunk:
                try:
                    if line.error is not None:
                        raise line.error
                    record = parser.record(line.value, line.number)
                except UsageError:
                    raise  # the vocabulary for output_ids cannot be loaded: nothing to do
                except Exception as error:
                    record = error_record(error, line.number)
                tally.record(record, line.number)
                output.write(dump(record))
            progress.lines_done(len(chunk))
            output.flush()
        output.commit()
    return tally.report()


def _add_arguments(parse: argparse.ArgumentParser) -> None:
    add_io(parse)
    add_model(parse, None, f"for output_ids lines; default {DEFAULT_MODEL}")
    parse.add_argument(
        "--tools", metavar="FILE", help="JSON list of tools: types parameter values by schema"
    )
    parse.add_argument(
        "--no-thinking",
        action="store_true",
        help="the prompt was rendered with enable_thinking false (no open <think>)",
    )


def cmd_init() -> list[CLISubcommand]:
    return [
        CLISubcommand(
            "parse",
            "completions -> assistant messages",
            PARSE_HELP,
            PARSE_EXAMPLE,
            add_arguments=_add_arguments,
            cmd=cmd_parse,
        )
    ]
