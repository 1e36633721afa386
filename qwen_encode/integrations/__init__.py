"""qwen-encode's parser inside inference servers, as plugins.

``qwen_encode.integrations.vllm`` and ``qwen_encode.integrations.sglang`` register a tool parser
and a reasoning parser named ``qwen_encode`` with their engine. Each imports its engine lazily
(only when it is itself imported) and raises ``ImportError`` naming the version it needs when
the engine is missing or too old. Nothing in the core imports this package.
"""

from __future__ import annotations

#: The name the parsers are registered under in both engines.
PARSER_NAME = "qwen_encode"

__all__ = ["PARSER_NAME"]
