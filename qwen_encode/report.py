"""The import path ``qwen_encode.report`` of the checkpoint reports, kept for callers: the reports
live in ``qwen_encode.validation`` (``templates``: rendering, behaviour and prefix stability;
``dead``: dead tokens; ``compare``: a checkpoint against its base; ``report``: everything
``qwen-encode validate`` prints)."""

from __future__ import annotations

from .validation.compare import (
    Comparison,
    Difference,
    compare_checkpoints,
    compare_loaded,
    probe_corpus,
)
from .validation.dead import (
    DEAD_KINDS,
    DeadKind,
    DeadToken,
    DeadTokens,
    cached_dead_tokens,
    dead_tokens,
)
from .validation.report import (
    CheckpointReport,
    checkpoint_report,
)
from .validation.templates import (
    FEATURES,
    KNOWN_TEMPLATES,
    PROBES,
    BehaviourReport,
    FeatureResult,
    PrefixBreak,
    PrefixResult,
    Probe,
    Renderer,
    prefix_stability,
    render_template,
    template_behaviour,
    template_name,
)

__all__ = [
    "DEAD_KINDS",
    "FEATURES",
    "KNOWN_TEMPLATES",
    "PROBES",
    "BehaviourReport",
    "CheckpointReport",
    "Comparison",
    "DeadKind",
    "DeadToken",
    "DeadTokens",
    "Difference",
    "FeatureResult",
    "PrefixBreak",
    "PrefixResult",
    "Probe",
    "Renderer",
    "cached_dead_tokens",
    "checkpoint_report",
    "compare_checkpoints",
    "compare_loaded",
    "dead_tokens",
    "prefix_stability",
    "probe_corpus",
    "render_template",
    "template_behaviour",
    "template_name",
]
