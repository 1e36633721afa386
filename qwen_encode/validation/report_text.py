"""A ``CheckpointReport`` as the text ``qwen-encode validate`` prints, section by section (the
``--json`` form is ``CheckpointReport.to_dict``)."""

from __future__ import annotations

from collections.abc import Sequence

from ..vocabulary import ValidationReport
from .compare import Comparison
from .dead import _DEAD_MEANING, DEAD_KINDS, DeadTokens
from .report import CheckpointReport
from .templates import BehaviourReport, PrefixResult

__all__ = ["render_text"]


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def _columns(rows: Sequence[tuple[str, ...]], indent: str = "  ") -> list[str]:
    """Rows as left-aligned columns (the last one unpadded)."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        (
            indent
            + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[-1]
        ).rstrip()
        for row in rows
    ]


def _marker_lines(report: ValidationReport) -> tuple[list[str], dict[int, str]]:
    """The marker table, and each found marker's name by ID (for the stop tokens)."""
    width = max(len(entry.marker) for entry in report.markers) if report.markers else 6
    out = [f"  {'marker':<{width}}  {'id':>8}  special  atomic"]
    names: dict[int, str] = {}
    for entry in report.markers:
        shown = "missing" if entry.id is None else str(entry.id)
        special = "-" if entry.special is None else ("yes" if entry.special else "no")
        out.append(f"  {entry.marker:<{width}}  {shown:>8}  {special:<7}  {_yes_no(entry.atomic)}")
        if entry.id is not None:
            names[entry.id] = entry.marker
    return out, names


def _stops(report: ValidationReport, names: dict[int, str]) -> str:
    if report.stop_token_ids is None:
        return "unknown"
    return ", ".join(f"{i} {names[i]}" if i in names else str(i) for i in report.stop_token_ids)


def _embedding(report: ValidationReport) -> str:
    if report.embedding_size is None:
        return "unknown"
    covers = report.embedding_size > report.max_token_id
    embedding = f"{report.embedding_size:,} rows ({'covers' if covers else 'does NOT cover'}"
    return embedding + f" the largest ID {report.max_token_id:,})"


def _template(full: CheckpointReport) -> str:
    report = full.validation
    template = full.template_name if report.template != "absent" else "MISSING"
    if report.template_sha256:
        template += f" (sha256 {report.template_sha256[:12]}…)"
    if full.template_equivalent:
        template += ": modified, behaviour identical to the official one on all probes"
    return template


def _summary_lines(full: CheckpointReport, names: dict[int, str]) -> list[str]:
    report = full.validation
    tied = {None: "unknown", True: "yes", False: "no"}[report.tie_word_embeddings]
    rows = [
        ("vocabulary", f"{report.vocab_size:,} tokens (largest ID {report.max_token_id:,})"),
        ("normalizer", report.normalizer),
        ("pre-tokenizer", report.pre_tokenizer),
        ("BOS", report.bos),
        ("stop tokens", _stops(report, names)),
        ("embedding", _embedding(report)),
        ("tied embeddings", tied),
        ("chat template", _template(full)),
    ]
    label = max(len(name) for name, _ in rows)
    return [f"{name:<{label}}  {value}" for name, value in rows]


def _special_token_lines(report: ValidationReport) -> list[str]:
    out = ["", "stop and special tokens"]
    out += _columns(
        [("field", "tokens", "verdict")]
        + [(e.field, e.tokens, e.verdict) for e in report.special_tokens]
    )
    return out + [f"  {e.field}: {e.rule}" for e in report.special_tokens if e.verdict != "ok"]


def _template_rows(behaviour: BehaviourReport) -> list[str]:
    rows = [("feature", "result", "probe")]
    details = []
    for result in behaviour.features:
        probe = "" if result.probe is None else result.probe.name
        rows.append((result.feature, result.status, probe))
        if result.status == "differs" and result.line_number is None:
            details.append(
                f"  {result.feature} ({probe}): template {result.template_line}, expected "
                f"{result.reference_line}"
            )
        elif result.status == "differs":
            details.append(
                f"  {result.feature} ({probe}), line {result.line_number}: template "
                f"{result.template_line!r}, expected {result.reference_line!r}"
            )
        elif result.status == "raises":
            details.append(f"  {result.feature} ({probe}): the template raises {result.error}")
    return _columns(rows) + details


def _behaviour_lines(behaviour: BehaviourReport | None) -> list[str]:
    if behaviour is None:
        return []
    out = ["", f"template behaviour (compared with {behaviour.reference})"]
    if not behaviour.available:
        return [*out, f"  not checked: {behaviour.note}"]
    return out + _template_rows(behaviour)


def _prefix_verdict(result: PrefixResult) -> str:
    if result.error:
        return f"template raises: {result.error}"
    if not result.breaks:
        return f"stable ({result.steps} steps)"
    return "; ".join(
        f"breaks adding message {b.length} ({b.role})"
        + (" after the primer" if b.primer else "")
        + f" at char {b.offset}: {b.before[:24]!r} -> {b.after[:24]!r}"
        for b in result.breaks
    )


def _prefix_lines(prefix: Sequence[PrefixResult]) -> list[str]:
    if not prefix:
        return []
    rows = [("preserve_thinking", "thinking", "result")]
    for result in prefix:
        options = result.options
        rows.append(
            (
                "on" if options["preserve_thinking"] else "off",
                "on" if options["enable_thinking"] else "off",
                _prefix_verdict(result),
            )
        )
    heading = "prefix stability (is the rendering after each message a prefix of the next?)"
    return ["", heading, *_columns(rows)]


def _dead_lines(dead: DeadTokens) -> list[str]:
    out = ["", f"dead tokens (of {dead.checked:,} checked; --json lists them all)"]
    for kind in DEAD_KINDS:
        tokens = dead.of(kind)
        examples = ", ".join(
            f"{t.id} {t.text!r}" if t.text is not None else f"{t.id} {t.raw!r}" for t in tokens[:3]
        )
        out.append(
            f"  {len(tokens):>7,}  {_DEAD_MEANING[kind]}" + (f": {examples}, …" if tokens else "")
        )
    return out


def _comparison_lines(comparison: Comparison | None) -> list[str]:
    if comparison is None:
        return []
    verdict = "tokenizer-compatible" if comparison.compatible else "NOT tokenizer-compatible"
    out = ["", f"compared with {comparison.base}: {verdict}"]
    if not comparison.differences:
        out.append("  no difference")
    out += [
        f"  - [{d.kind}{', breaking' if d.breaking else ''}] {d.message}"
        for d in comparison.differences
    ]
    if comparison.template is not None and comparison.template.available:
        out += ["  template behaviour compared with the base's template:"]
        out += ["  " + line for line in _template_rows(comparison.template)]
    return out


def _verdict_lines(full: CheckpointReport) -> list[str]:
    out = [""]
    if full.warnings:
        out.append(f"{len(full.warnings)} warning(s):")
        out.extend(f"  - {warning}" for warning in full.warnings)
    if full.ok:
        return [*out, "OK: this checkpoint carries the Qwen 3.8 protocol."]
    problems = list(full.problems)
    comparison = full.comparison
    if comparison is not None and not comparison.compatible:
        problems.append(f"not tokenizer-compatible with {comparison.base} (see above)")
    out.append(f"NOT OK: {len(problems)} problem(s):")
    return out + [f"  - {problem}" for problem in problems]


def render_text(full: CheckpointReport) -> str:
    """The report as ``qwen-encode validate`` prints it: markers, the vocabulary's facts, stop
    and special tokens, template behaviour, prefix stability, dead tokens, the comparison with a
    base, then the verdict."""
    markers, names = _marker_lines(full.validation)
    out = [f"checkpoint  {full.validation.source}", "", *markers, ""]
    out += _summary_lines(full, names)
    out += _special_token_lines(full.validation)
    out += _behaviour_lines(full.behaviour)
    out += _prefix_lines(full.prefix)
    out += _dead_lines(full.dead)
    out += _comparison_lines(full.comparison)
    out += _verdict_lines(full)
    return "\n".join(out) + "\n"
