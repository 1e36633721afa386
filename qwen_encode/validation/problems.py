"""The structured problem type of every validation (defined in ``qwen_encode.problems``, below
the loading layer, which reports marker problems with it too)."""

from ..problems import Findings, Problem, Severity, listed

__all__ = ["Findings", "Problem", "Severity", "listed"]
