"""RL trajectories in, rows for RL trainers out: every sampled token exactly as it was sampled,
and a mask that trains exactly those.

A trajectory (one JSONL line, or one Parquet row) is::

    {"id": "ep-17",                              # optional, carried to the rows
     "tools": [...],                             # OpenAI tools list (or its JSON text), optional
     "chat_template_kwargs": {...},              # ChatSession options, optional
     "steps": [                                  # in order (or the JSON text of the list)
        {"role": "user", "content": "..."},      # a message: any role, as format_prompt reads it
        {"role": "assistant", "sampled_ids": [...],        # a sampled turn: the engine's IDs
         "logprobs": [...], "finish_reason": "stop"},      # optional, one logprob per ID
        {"role": "tool", "content": "..."}, ...],
     "reward": 1.0}                              # optional float

Each step is added to a ``ChatSession`` (a sampled step with ``append_sampled``), so the row is
the prompt each turn was sampled from plus what was sampled, token for token. The row columns
(``ROW_COLUMNS``; lists are per token):

- ``input_ids`` list<int32>, ``sampled_mask`` list<int8> (what trains), ``logprobs``
  list<float32> (the engine's, NaN where not sampled), ``turn_index`` list<int32> (the step),
  ``provenance`` list<int8> (``qwen_encode.provenance`` codes)
- the prompt/completion split RL trainers take, at the first sampled token:
  ``prompt_ids``, ``completion_ids`` list<int32>, ``completion_mask`` list<int8> (1 on sampled
  tokens, 0 on tool results, user turns, primers and synthesized closers),
  ``completion_logprobs`` list<float32> (0.0 where not sampled, as both trainers pad)
- ``reward`` float64, ``num_turns`` int32, ``id`` string, ``row`` int32 (0, or more when
  ``on_template_change="split"`` cut the trajectory), ``error`` string (null on a good row)

TRL's ``GRPOTrainer(rollout_func=...)`` reads ``prompt_ids``, ``completion_ids`` and ``logprobs``
(per completion token) and an optional ``env_mask`` (1 on model tokens): ``trl_rollout_output``
maps the rows onto those keys. verl's ``AgentLoopOutput`` reads ``prompt_ids``,
``response_ids``, ``response_mask`` (1 for LLM-generated tokens), ``response_logprobs``,
``reward_score`` and ``num_turns``: ``verl_agent_loop_output`` maps one row onto those.

A trajectory that cannot be encoded keeps its place: one row with empty lists and ``error``
naming the step and field (``steps[3].sampled_ids: token IDs[5]: ...``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from .batch import error_parts
from .errors import PromptError, QwenEncodeError, TokenIdError, shown
from .json_text import JSONTextError, loads
from .provenance import ASSISTANT, SAMPLED

if TYPE_CHECKING:
    import pyarrow as pa

    from .encoder import Encoder, Encoding

__all__ = [
    "ROW_COLUMNS",
    "inference_boundary_encoding",
    "read_trajectories",
    "trajectory_rows",
    "trajectory_table",
    "trl_rollout_output",
    "verl_agent_loop_output",
    "write_trajectory_rows",
]

ROW_COLUMNS: Final = (
    "id",
    "row",
    "input_ids",
    "sampled_mask",
    "logprobs",
    "turn_index",
    "provenance",
    "prompt_ids",
    "completion_ids",
    "completion_mask",
    "completion_logprobs",
    "reward",
    "num_turns",
    "error",
)
_SAMPLED_KEYS: Final = frozenset({"role", "sampled_ids", "logprobs", "finish_reason", "extras"})


class _StepError(Exception):
    def __init__(self, where: str, error: BaseException) -> None:
        super().__init__(where)
        self.where = where
        self.error = error

    def text(self) -> str:
        return f"{type(self.error).__name__}: {self.where}: {self.error}"


def _json_field(value: Any, field: str) -> Any:
    if isinstance(value, str):
        try:
            return loads(value)
        except JSONTextError as error:
            raise _StepError(field, PromptError(error.reason)) from None
    return value


def _session(encoder: Encoder, trajectory: Mapping[str, Any], policy: str) -> Any:
    tools = _json_field(trajectory.get("tools"), "tools")
    options = _json_field(trajectory.get("chat_template_kwargs"), "chat_template_kwargs") or {}
    if not isinstance(options, Mapping):
        raise _StepError(
            "chat_template_kwargs", PromptError(f"must be an object: {shown(options)}")
        )
    try:
        return encoder.chat(tools, **{"on_template_change": policy, **options})
    except QwenEncodeError as error:
        raise _StepError("chat_template_kwargs", error) from None


def _add_step(session: Any, step: Any, index: int) -> None:
    where = f"steps[{index}]"
    if not isinstance(step, Mapping):
        raise _StepError(where, PromptError(f"must be an object, got {shown(step)}"))
    if "sampled_ids" not in step:
        try:
            session.append(step)
        except QwenEncodeError as error:
            raise _StepError(where, error) from None
        return
    unknown = sorted(set(step) - _SAMPLED_KEYS)
    if unknown or step.get("role", "assistant") != "assistant":
        field = f"{where}.{unknown[0]}" if unknown else f"{where}.role"
        problem = "is not a field of a sampled step" if unknown else "a sampled step is assistant"
        raise _StepError(field, PromptError(problem))
    try:
        session.append_sampled(
            step["sampled_ids"],
            finish_reason=step.get("finish_reason"),
            logprobs=step.get("logprobs"),
            extras=step.get("extras"),
        )
    except TokenIdError as error:
        raise _StepError(f"{where}.sampled_ids", error) from None
    except PromptError as error:
        field = f"{where}.{error.field}" if error.field else where
        raise _StepError(field, error) from None
    except QwenEncodeError as error:
        raise _StepError(where, error) from None


def _row(encoding: Encoding, trajectory: Mapping[str, Any], row: int, turns: int) -> dict[str, Any]:
    sampled = encoding.sampled_mask
    first = int(np.argmax(sampled)) if sampled.any() else len(encoding)
    logprobs = encoding.logprobs
    completion_logprobs = np.where(sampled[first:], logprobs[first:], np.float32(0.0))
    return {
        "id": trajectory.get("id"),
        "row": row,
        "input_ids": encoding.input_ids.astype(np.int32),
        "sampled_mask": sampled.astype(np.int8),
        "logprobs": logprobs.astype(np.float32),
        "turn_index": encoding.turn_index.astype(np.int32),
        "provenance": encoding.provenance.astype(np.int8),
        "prompt_ids": encoding.input_ids[:first].astype(np.int32),
        "completion_ids": encoding.input_ids[first:].astype(np.int32),
        "completion_mask": sampled[first:].astype(np.int8),
        "completion_logprobs": completion_logprobs.astype(np.float32),
        "reward": trajectory.get("reward"),
        "num_turns": turns,
        "error": None,
    }


def _error_row(trajectory: Any, text: str) -> dict[str, Any]:
    empty_i32, empty_i8 = np.zeros(0, np.int32), np.zeros(0, np.int8)
    return {
        "id": trajectory.get("id") if isinstance(trajectory, Mapping) else None,
        "row": 0,
        **{c: empty_i32 for c in ("input_ids", "turn_index", "prompt_ids", "completion_ids")},
        **{c: empty_i8 for c in ("sampled_mask", "provenance", "completion_mask")},
        "logprobs": np.zeros(0, np.float32),
        "completion_logprobs": np.zeros(0, np.float32),
        "reward": None,
        "num_turns": 0,
        "error": text,
    }


def trajectory_rows(
    encoder: Encoder, trajectories: Iterable[Any], *, on_template_change: str = "raise"
) -> list[dict[str, Any]]:
    """The rows of each trajectory, in order (numpy arrays in the list columns). A trajectory
    gives one row, or several with ``on_template_change="split"``; a bad one gives one row
    with its ``error``."""
    out: list[dict[str, Any]] = []
    for trajectory in trajectories:
        try:
            if not isinstance(trajectory, Mapping):
                raise _StepError(
                    "trajectory", PromptError(f"must be an object: {shown(trajectory)}")
                )
            session = _session(encoder, trajectory, on_template_change)
            steps = _json_field(trajectory.get("steps"), "steps")
            if not isinstance(steps, Sequence) or isinstance(steps, str) or not steps:
                raise _StepError("steps", PromptError("must be a non-empty list of steps"))
            for index, step in enumerate(steps):
                _add_step(session, step, index)
            reward = trajectory.get("reward")
            if reward is not None and (
                isinstance(reward, bool) or not isinstance(reward, int | float)
            ):
                raise _StepError("reward", PromptError(f"must be a number: {shown(reward)}"))
            try:
                rows = session.rows()
            except QwenEncodeError as error:  # TemplateDivergence names the turn
                where = getattr(error, "message_index", None)
                raise _StepError("steps" if where is None else f"steps[{where}]", error) from None
        except _StepError as problem:
            out.append(_error_row(trajectory, problem.text()))
            continue
        except Exception as error:
            # A bug met on this trajectory: answered in its place like any bad one (as the
            # command line and the data functions answer a line or a row), so one trajectory
            # never costs the others their rows.
            kind, message = error_parts(error)
            out.append(_error_row(trajectory, f"{kind}: {message}"))
            continue
        out.extend(_row(row, trajectory, i, len(steps)) for i, row in enumerate(rows))
    return out


def trajectory_table(
    encoder: Encoder, trajectories: Iterable[Any], *, on_template_change: str = "raise"
) -> pa.Table:
    """``trajectory_rows`` as a pyarrow Table with explicit column types."""
    import pyarrow as pa

    rows = trajectory_rows(encoder, trajectories, on_template_change=on_template_change)

    def lists(name: str, kind: pa.DataType) -> pa.Array:
        return pa.array([r[name].tolist() for r in rows], type=pa.list_(kind))

    return pa.table(
        {
            "id": pa.array([r["id"] for r in rows], type=pa.string()),
            "row": pa.array([r["row"] for r in rows], type=pa.int32()),
            "input_ids": lists("input_ids", pa.int32()),
            "sampled_mask": lists("sampled_mask", pa.int8()),
            "logprobs": lists("logprobs", pa.float32()),
            "turn_index": lists("turn_index", pa.int32()),
            "provenance": lists("provenance", pa.int8()),
            "prompt_ids": lists("prompt_ids", pa.int32()),
            "completion_ids": lists("completion_ids", pa.int32()),
            "completion_mask": lists("completion_mask", pa.int8()),
            "completion_logprobs": lists("completion_logprobs", pa.float32()),
            "reward": pa.array([r["reward"] for r in rows], type=pa.float64()),
            "num_turns": pa.array([r["num_turns"] for r in rows], type=pa.int32()),
            "error": pa.array([r["error"] for r in rows], type=pa.string()),
        }
    )


def read_trajectories(path: str | os.PathLike[str]) -> list[Any]:
    """Trajectories from a ``.jsonl`` file (one per line; a bad line keeps its place as the
    text it holds, reported by ``trajectory_rows``) or a Parquet file."""
    source = Path(path)
    if source.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows: list[Any] = pq.read_table(source).to_pylist()
        return rows
    out: list[Any] = []
    with open(source, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            try:
                out.append(loads(line))
            except JSONTextError as error:
                out.append(f"line {number}: {error.reason}")
    return out


def write_trajectory_rows(
    encoder: Encoder,
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    on_template_change: str = "raise",
) -> pa.Table:
    """Read trajectories (JSONL or Parquet), write their rows to Parquet atomically."""
    from .data import write_parquet

    table = trajectory_table(
        encoder, read_trajectories(source), on_template_change=on_template_change
    )
    write_parquet(table, target)
    return table


def trl_rollout_output(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """What TRL's ``GRPOTrainer(rollout_func=...)`` takes back: ``prompt_ids``,
    ``completion_ids``, ``logprobs`` (per completion token) and ``env_mask`` (1 on sampled
    tokens, 0 on tool results and everything else the model did not sample)."""
    good = [row for row in rows if row.get("error") is None]
    return {
        "prompt_ids": [list(map(int, r["prompt_ids"])) for r in good],
        "completion_ids": [list(map(int, r["completion_ids"])) for r in good],
        "logprobs": [list(map(float, r["completion_logprobs"])) for r in good],
        "env_mask": [list(map(int, r["completion_mask"])) for r in good],
    }


def verl_agent_loop_output(row: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of verl's ``AgentLoopOutput`` for one row (metrics are the caller's)."""
    return {
        "prompt_ids": list(map(int, row["prompt_ids"])),
        "response_ids": list(map(int, row["completion_ids"])),
        "response_mask": list(map(int, row["completion_mask"])),
        "response_logprobs": list(map(float, row["completion_logprobs"])),
        "reward_score": row.get("reward"),
        "num_turns": int(row["num_turns"]),
    }


# --------------------------------------------------------------------------------------------
# SFT at the inference boundary (opt-in)


def _after_primer(segments: Sequence[Any], primer: str) -> tuple[Any, ...] | None:
    """A turn's segments from where the generation primer ends, without the '\\n' the template
    writes after ``<|im_end|>``; None when the turn does not begin with the primer (reasoning
    dropped, or reasoning while thinking is off: not what a model writes after it)."""
    from .protocol import Special, Text

    text = "".join(s.marker if isinstance(s, Special) else s.text for s in segments)
    if not text.startswith(primer) or not text.endswith("<|im_end|>\n"):
        return None
    skip, out = len(primer), []
    for segment in segments:
        size = len(segment.marker if isinstance(segment, Special) else segment.text)
        if skip >= size:
            skip -= size
            continue
        if skip:  # the primer ends inside a text segment (never inside a marker)
            segment = Text(segment.text[skip:], segment.turn, segment.trained, segment.field)
            skip = 0
        out.append(segment)
    if out and isinstance(out[-1], Text) and out[-1].text == "\n":
        out.pop()
    return tuple(out)


def inference_boundary_encoding(
    encoder: Encoder,
    messages: Sequence[Mapping[str, Any]],
    tools: Any = None,
    **options: Any,
) -> Encoding:
    """An SFT row whose assistant turns are encoded as a model emits them after the generation
    prompt: each such turn is the primer's IDs plus its own completion encoded on its own, so
    the generation prompt before it is a token prefix of the row, and only the completion is
    trained (``assistant_mask``), never the primer. The prompts are those a ``ChatSession``
    rollout sends (earlier turns as emitted); the first equals ``apply_chat_template``'s, later
    ones differ from a server that re-renders history wherever an earlier turn does.

    This changes IDs against ``apply_chat_template``: an empty reasoning span after the primer
    is ``\\n`` ``</think>`` (two tokens), where the template's string gives one ``\\n\\n``. It is
    therefore opt-in, never what the SFT rows of ``encode_table`` hold. Assistant turns that do
    not follow the primer (reasoning dropped by ``preserve_thinking=False``, two in a row) are
    rendered as the template renders them. ``options`` are ``ChatSession``'s."""
    from .conversation import turns_from_messages
    from .protocol import Prompt, TurnLayout, render_turn

    session = encoder.chat(tools, **options)
    turns = turns_from_messages(messages)
    for index, turn in enumerate(turns):
        follows = index > 0 and turns[index - 1].role != "assistant"
        if turn.role != "assistant" or not follows:
            session.append(turn)
            continue
        primer = encoder.decode(session.generation_prompt().input_ids)
        completion = _after_primer(render_turn(turn, index, TurnLayout()), primer)
        if completion is None:
            session.append(turn)
            continue
        session.append_sampled(encoder.encode(Prompt(completion)).input_ids)
    row = session.trajectory()
    # Written, not sampled: history provenance, nothing in sampled_mask or logprobs.
    provenance = row.provenance.copy()
    provenance[provenance == SAMPLED] = ASSISTANT
    return type(row)(row.input_ids, row.assistant_mask, row.turn_index, provenance)
