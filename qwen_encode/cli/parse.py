"""``qwen-encode parse``: model completions (text or token IDs) -> assistant messages."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ..batch import RecordError
from ..chat_request import json_type
from .common import (
    DEFAULT_MODEL,
    PROG,
    TINY_FIXTURE,
    UsageError,
    add_command,
    add_io,
    add_model,
    load_encoder,
)
from .lines import Tally, error_record, line_job
from .output import dump
from .types import CLISubcommand

if TYPE_CHECKING:
    from ..encoder import Encoder

__all__ = ["ParseCommand", "cmd_init"]

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
            tools = json.load(handle)
    except OSError as error:
        raise UsageError(f"--tools: cannot read {path}: {error.strerror or error}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"--tools: {path} is not JSON: {error}") from None
    except RecursionError:
        raise UsageError(f"--tools: {path}: JSON nested too deeply to read") from None
    except ValueError as error:  # an integer past Python's 4300-digit limit
        raise UsageError(f"--tools: {path}: JSON that cannot be read: {error}") from None
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
        from ..parser import parse_completion

        if isinstance(value, str):
            # A trailing <|im_end|> (engines report it with skip_special_tokens=False; a render
            # of a closed turn has it) ends the turn: the parser records it as the stop.
            completion = parse_completion(value, tools=self.tools, thinking=self.thinking)
        elif isinstance(value, dict):
            has_text, has_ids = "text" in value, "output_ids" in value
            if has_text == has_ids:
                raise RecordError(
                    "RequestError", 'expected an object with either "text" or "output_ids"'
                )
            if has_text:
                text = value["text"]
                if not isinstance(text, str):
                    raise RecordError(
                        "RequestError", f'"text" must be a string, got {json_type(text)}'
                    )
                completion = parse_completion(text, tools=self.tools, thinking=self.thinking)
            else:
                ids = value["output_ids"]
                if not isinstance(ids, list) or not all(
                    isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
                ):
                    raise RecordError(
                        "RequestError", '"output_ids" must be a list of non-negative integers'
                    )
                encoder = self.encoder
                size = encoder.vocabulary.tokenizer.get_vocab_size(with_added_tokens=True)
                to_token = encoder.vocabulary.tokenizer.id_to_token
                # id_to_token takes a u32: a larger ID would raise OverflowError, not answer None.
                unknown = [i for i in ids if i >= 2**32 or to_token(i) is None]
                if unknown:
                    raise RecordError(
                        "RequestError",
                        f"output_ids {unknown[:5]} are not tokens of this vocabulary "
                        f"({size:,} tokens): is --model the model that generated them?",
                    )
                # vLLM's output token_ids end with the stop token that ended generation.
                completion = parse_completion(
                    ids,
                    tools=self.tools,
                    thinking=self.thinking,
                    encoder=encoder,
                )
        else:
            raise RecordError(
                "RequestError",
                'expected a JSON string (completion text) or an object with "text" or '
                f'"output_ids", got a JSON {json_type(value)}',
            )
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


class ParseCommand(CLISubcommand):
    name = "parse"

    def cmd(self, args: argparse.Namespace) -> int:
        return cmd_parse(args)

    def subparser_init(self, subparsers: Any) -> argparse.ArgumentParser:
        summary = "completions -> assistant messages"
        parse = add_command(subparsers, self.name, summary, PARSE_HELP, PARSE_EXAMPLE)
        _add_arguments(parse)
        return parse


def cmd_init() -> list[CLISubcommand]:
    return [ParseCommand()]
