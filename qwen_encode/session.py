"""``ChatSession``: a conversation that grows one message at a time, re-encoding only what
changed, and that takes assistant turns as the token IDs an engine sampled (rollouts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import numpy as np

from . import markers as mk
from .conversation import Turn, turns_from_messages
from .errors import PromptError, TemplateDivergence, shown
from .protocol import (
    Prompt,
    PromptPlan,
    ReasoningEffort,
    TurnLayout,
    format_prompt,
    plan_prompt,
    render_turn,
)
from .rollout import (
    Drift,
    SampledTurn,
    check_sampled,
    closing_segments,
    drift_report,
    parse_sampled,
    sampled_piece,
    split_stop,
)

if TYPE_CHECKING:
    from .encoder import Encoder, Encoding

__all__ = ["ChatSession", "OnTemplateChange"]

OnTemplateChange: TypeAlias = Literal["raise", "keep", "split"]
_POLICIES: Final = ("raise", "keep", "split")


class _Verbatim:
    """The key of a sampled turn whose encoding is its sampled piece, not a rendering."""

    def __repr__(self) -> str:
        return "VERBATIM"


_VERBATIM: Final = _Verbatim()


def _concatenate(parts: Sequence[Encoding]) -> Encoding:
    from .encoder import Encoding

    return Encoding(
        input_ids=np.concatenate([p.input_ids for p in parts]),
        assistant_mask=np.concatenate([p.assistant_mask for p in parts]),
        turn_index=np.concatenate([p.turn_index for p in parts]),
        provenance=np.concatenate([p.provenance for p in parts]),
        sampled_mask=np.concatenate([p.sampled_mask for p in parts]),
        logprobs=np.concatenate([p.logprobs for p in parts]),
    )


class ChatSession:
    """A conversation that grows one message at a time, for servers that need input_ids after
    every turn, and for RL rollouts that feed back the IDs an engine sampled.

    ``encoding()`` costs what the new turn costs: every earlier turn keeps its IDs unless the new
    one changes how it renders, and then only that turn is encoded again. Two things do: with
    ``preserve_thinking=False`` a new real user query drops the reasoning of the assistant turns
    before it, and a tool result that follows another moves the ``<|im_end|>`` of their shared
    user turn. The result is the same as ``encoder.encode(format_prompt(turns, ...))``: turns
    always begin and end on a marker, so no text run spans two of them, and each turn's layout
    is recomputed from the whole conversation every time.

    ``append_sampled`` adds an assistant turn as the IDs the engine sampled after the last
    ``encoding()``; the next ``encoding()`` begins with that prompt plus those IDs, then only what
    the template puts between turns. ``on_template_change`` decides what happens when the
    template would render a turn that a sampled turn was conditioned on (or the sampled turn
    itself) differently later (``preserve_thinking=False`` and a new real user query):
    ``"raise"`` ``TemplateDivergence`` naming the turn (the default), ``"keep"`` the IDs as sent
    (the turns are listed in ``off_template``), ``"split"`` follow the template and start a new
    row (``rows()``).
    """

    def __init__(
        self,
        encoder: Encoder,
        tools: Sequence[Mapping[str, Any] | str] | str | None = None,
        *,
        enable_thinking: bool = True,
        reasoning_effort: ReasoningEffort | str | None = None,
        preserve_thinking: bool = True,
        add_generation_prompt: bool = True,
        add_vision_id: bool = False,
        on_template_change: OnTemplateChange = "raise",
    ):
        if not isinstance(on_template_change, str) or on_template_change not in _POLICIES:
            raise PromptError(
                f"must be one of {_POLICIES}, got {shown(on_template_change)}",
                field="on_template_change",
            )
        self._encoder = encoder
        self._options: dict[str, Any] = {
            "tools": tools,
            "enable_thinking": enable_thinking,
            "reasoning_effort": reasoning_effort,
            "preserve_thinking": preserve_thinking,
            "add_generation_prompt": add_generation_prompt,
            "add_vision_id": add_vision_id,
        }
        self._policy: OnTemplateChange = on_template_change
        self._turns: list[Turn] = []
        # Per turn: the layout it was encoded with (or _VERBATIM), and its arrays.
        self._encoded: list[tuple[TurnLayout | _Verbatim, Encoding]] = []
        self._edges: dict[tuple[Any, ...], Encoding] = {}  # head and tail, by their segments
        # The last plan, so the next one plans only what the new turns change; and the head plus
        # the first `_joined_turns` turns already concatenated, so a new turn appends to them.
        # Both keep a turn's cost independent of the history before it (bar one copy of its IDs).
        self._plan: PromptPlan | None = None
        self._joined: Encoding | None = None
        self._joined_head: Encoding | None = None
        self._joined_turns = 0
        self._last: Encoding | None = None  # encoding() until the conversation changes
        # Rollouts: each sampled turn by its index, with the piece it puts in every prompt.
        self._sampled: dict[int, tuple[SampledTurn, Encoding]] = {}
        self._off_template: set[int] = set()
        self._rows: list[Encoding] = []

    @property
    def turns(self) -> tuple[Turn, ...]:
        return tuple(self._turns)

    @property
    def sampled(self) -> tuple[SampledTurn, ...]:
        """The sampled turns, in order."""
        return tuple(turn for _, (turn, _) in sorted(self._sampled.items()))

    @property
    def off_template(self) -> tuple[int, ...]:
        """Turns kept as they were sent although the template now renders them otherwise
        (``on_template_change="keep"``)."""
        return tuple(sorted(self._off_template))

    def append(self, message: Turn | Mapping[str, Any]) -> None:
        """Add one message (checked as ``turns_from_messages`` checks it). Rules that depend on
        the whole conversation are checked by ``encoding()``."""
        try:
            (turn,) = turns_from_messages([message])
        except PromptError as error:
            raise PromptError(
                error.reason, message_index=len(self._turns), field=error.field
            ) from None
        self._turns.append(turn)
        self._last = None

    def extend(self, messages: Iterable[Turn | Mapping[str, Any]]) -> None:
        if isinstance(messages, str | bytes | Mapping | Turn) or not isinstance(messages, Iterable):
            raise PromptError(
                f"expected a list of messages, got {type(messages).__name__}", field="messages"
            )
        for message in messages:
            self.append(message)

    def pop(self) -> Turn:
        """Remove and return the last message (e.g. after ``encoding()`` refused it)."""
        if not self._turns:
            raise PromptError("the session has no message to remove", field="messages")
        turn = self._turns.pop()
        kept = len(self._turns)
        self._sampled.pop(kept, None)
        self._off_template.discard(kept)
        self._last = None
        del self._encoded[kept:]
        if self._plan is not None and len(self._plan.layouts) > kept:
            self._plan = None  # planned with the popped turn: the next plan starts afresh
        if self._joined_turns > kept:
            self._joined, self._joined_turns = None, 0
        return turn

    def prompt(self) -> Prompt:
        """The template's rendering of the conversation (sampled turns as their parse)."""
        return format_prompt(self._turns, **self._options)

    # -- rollouts ------------------------------------------------------------------------------

    def append_sampled(
        self,
        ids: Sequence[int] | np.ndarray,
        *,
        finish_reason: str | None = None,
        logprobs: Sequence[float] | np.ndarray | None = None,
        extras: Mapping[str, Any] | None = None,
    ) -> SampledTurn:
        """Add the assistant turn an engine sampled after this session's ``encoding()``, as the
        IDs it returned (ending in ``<|im_end|>``, ``<|im_end|><|endoftext|>``, or with no stop
        marker when cut off). The IDs are kept verbatim; ``SampledTurn.completion`` is their
        parse, for the environment to act on.

        A trailing ``<|endoftext|>`` is dropped from the conversation (the template never writes
        one between turns; it stays in ``SampledTurn.ids``). A turn without ``<|im_end|>`` is
        closed with the template's own closers, marked synthesized: never trained, no logprob.
        Raises ``TokenIdError`` (with the position) for an ID outside the vocabulary, an
        ``<|im_start|>``, or tokens after a stop marker; ``PromptError`` for bad ``logprobs``.
        """
        if self._options["add_generation_prompt"] is not True:
            raise PromptError(
                "a sampled turn follows the generation prompt: the session needs "
                "add_generation_prompt=True",
                field="add_generation_prompt",
            )
        checked = check_sampled(self._encoder, ids, logprobs, finish_reason)
        if extras is not None and not isinstance(extras, Mapping):
            raise PromptError(f"must be a mapping or None, got {shown(extras)}", field="extras")
        prompt = self.encoding()  # the prompt the IDs were sampled after
        assert self._plan is not None
        primer = self._edge(self._plan.tail)
        encoder, marker_ids = self._encoder, self._encoder.marker_ids
        thinking = bool(self._options["enable_thinking"])
        kept, stop = split_stop(checked, marker_ids)
        body = checked[:kept]
        completion, error = parse_sampled(encoder, body, self._options["tools"], thinking)
        closers: tuple[int, ...] = ()
        if stop != mk.TURN_CLOSE:
            segments = closing_segments(body, marker_ids, thinking, encoder.decode)
            closers = tuple(encoder.encode(Prompt(segments)).input_ids.tolist())
        index = len(self._turns)
        sampled = SampledTurn(
            index=index,
            ids=tuple(checked),
            kept=kept,
            closers=closers,
            primer=tuple(primer.input_ids.tolist()),
            prompt_length=len(prompt),
            stop=stop,
            finish_reason=finish_reason,
            logprobs=None if logprobs is None else tuple(float(v) for v in logprobs),
            completion=completion,
            parse_error=error,
            thinking=thinking,
            extras=MappingProxyType(dict(extras or {})),
        )
        piece, _ = sampled_piece(encoder, sampled, primer, index)
        if completion is not None:
            turn = completion.to_turn()
        else:  # for the plan (and a "split" re-rendering): the text as it was sampled
            turn = Turn(role="assistant", content=encoder.decode(body))
        self._turns.append(turn)
        self._encoded.append((_VERBATIM, piece))
        self._sampled[index] = (sampled, piece)
        self._last = None
        return sampled

    def generation_prompt(self) -> Encoding:
        """The IDs the generation prompt adds at the end of ``encoding()``: the primer the next
        sampled turn follows (``<|im_start|>assistant\\n<think>\\n`` while thinking)."""
        self.encoding()
        assert self._plan is not None
        return self._edge(self._plan.tail)

    def drift(self, index: int) -> Drift:
        """Whether re-rendering sampled turn ``index``'s parse gives its IDs; if not, where
        and why (``rollout.DRIFT_KINDS``)."""
        if isinstance(index, bool) or not isinstance(index, int) or index not in self._sampled:
            raise PromptError(f"turn {shown(index)} is not a sampled turn", field="index")
        turn, piece = self._sampled[index]
        layout = None
        if self._plan is not None and index < len(self._plan.layouts):
            layout = self._plan.layouts[index]
        return drift_report(self._encoder, turn, piece, layout)

    def trajectory(self) -> Encoding:
        """The conversation so far without the generation prompt: the row an RL trainer scores
        (``sampled_mask`` is what trains)."""
        return self._build(generation=False)

    def rows(self) -> list[Encoding]:
        """The trajectory as rows that each extend token for token: one, unless
        ``on_template_change="split"`` started new ones."""
        last = self.trajectory()  # first: building it may close a row
        return [*self._rows, last]

    # -- encoding --------------------------------------------------------------------------------

    def encoding(self) -> Encoding:
        """The conversation so far, encoded (with the generation primer when asked for)."""
        if self._last is None:
            self._last = self._build(generation=bool(self._options["add_generation_prompt"]))
        return self._last

    def _build(self, generation: bool) -> Encoding:
        options = {**self._options, "add_generation_prompt": generation}
        plan = plan_prompt(self._turns, **options, previous=self._plan)
        head = self._edge(plan.head)
        if self._joined is not None and self._joined_head is not head:
            self._joined, self._joined_turns = None, 0
        frozen = self._diverged(plan)
        # Layouts before `unchanged` are the previous plan's, so those turns' IDs stand.
        changed = len(self._turns)
        for index in range(plan.unchanged, len(self._turns)):
            layout = plan.layouts[index]
            if index < len(self._encoded):
                key = self._encoded[index][0]
                if key == layout or (key is _VERBATIM and layout.keep_reasoning):
                    continue
                if index < frozen:  # "keep": the IDs as they were sent
                    self._off_template.add(index)
                    continue
            encoded = self._encoder.encode(
                Prompt(render_turn(self._turns[index], index, layout, plan.add_vision_id))
            )
            if index < len(self._encoded):
                self._encoded[index] = (layout, encoded)
            else:
                self._encoded.append((layout, encoded))
            changed = min(changed, index)
        if generation or self._plan is None:
            self._plan = plan
        if self._joined_turns > changed:
            self._joined, self._joined_turns = None, 0
        parts = [head] if self._joined is None else [self._joined]
        parts += [encoded for _, encoded in self._encoded[self._joined_turns :]]
        joined = _concatenate(parts)
        self._joined, self._joined_head, self._joined_turns = joined, head, len(self._turns)
        return _concatenate([joined, self._edge(plan.tail)])

    def _anchor(self) -> int:
        """1 + the last sampled turn still verbatim: the turns before it are what sampled IDs
        were conditioned on (or are), so they must keep their IDs."""
        # A split re-renders every sampled turn up to the new real query, so when the last
        # sampled turn is not verbatim none is: the last one decides, O(1) per turn.
        if self._sampled:
            last = next(reversed(self._sampled))
            if self._encoded[last][0] is _VERBATIM:
                return last + 1
        return 0

    def _diverged(self, plan: PromptPlan) -> int:
        """Apply ``on_template_change`` when ``plan`` would change a turn before the anchor;
        return how many leading turns keep their IDs whatever the plan says."""
        anchor = self._anchor()
        first = None
        for index in range(plan.unchanged, min(anchor, len(self._encoded))):
            key, layout = self._encoded[index][0], plan.layouts[index]
            if (key is _VERBATIM and not layout.keep_reasoning) or (
                key is not _VERBATIM and key != layout
            ):
                first = index
                break
        if first is None:
            return 0
        if self._policy == "raise":
            raise TemplateDivergence(
                f"the template now renders this turn otherwise (preserve_thinking=False drops "
                f"reasoning before the real user query at messages[{plan.last_query}]), and a "
                f"sampled turn was conditioned on it or is it; pop() that query, or use "
                f'on_template_change="keep" or "split"',
                message_index=first,
                cause=plan.last_query,
            )
        if self._policy == "keep":
            return anchor
        # "split": the row so far ends here, as it was sampled; the template takes over.
        head = self._edge(plan.head)
        self._rows.append(_concatenate([head, *(e for _, e in self._encoded[:anchor])]))
        return 0

    def _edge(self, segments: tuple[Any, ...]) -> Encoding:
        if segments not in self._edges:
            if len(self._edges) > 8:  # the head changes only if the first message does
                self._edges.clear()
            self._edges[segments] = self._encoder.encode(Prompt(segments))
        return self._edges[segments]
