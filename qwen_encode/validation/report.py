"""Everything ``qwen-encode validate`` prints for a checkpoint folder or hub id: the marker and
file checks of ``vocabulary``, the template reports, dead tokens and the comparison with a base."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from ..checkpoint import resolve_checkpoint
from ..vocabulary import (
    ValidationReport,
    chat_template_text,
    inspect_checkpoint,
    tokenizer_config_template,
)
from .compare import Comparison, compare_loaded
from .dead import DeadTokens, cached_dead_tokens
from .rules import QWEN38_TEMPLATE_SHA256
from .templates import (
    PROBES,
    BehaviourReport,
    PrefixResult,
    prefix_stability,
    template_behaviour,
    template_name,
)

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
        comparison = compare_loaded(
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
        cached_dead_tokens(tokenizer, files.tokenizer_json),
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
    if (
        hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest()
        == QWEN38_TEMPLATE_SHA256
    ):
        return True
    behaviour = template_behaviour(template)
    return behaviour.available and _behaves_as_official(behaviour, prefix_stability(template))
