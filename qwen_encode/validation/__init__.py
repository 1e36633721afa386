"""What ``qwen-encode validate`` judges: structured problems, and the GGUF expectations."""

from .problems import Problem, Severity

__all__ = ["Problem", "Severity"]
