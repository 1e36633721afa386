"""The tasks the A/B scripts time on rows (``scripts/ab.py`` in one process,
``scripts/ab_processes.py`` in fresh ones). Imports no ``qwen_encode``: each caller passes the
package it times."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def row_tasks(pkg: Any, encoder: Any, rows: list[dict[str, Any]]) -> dict[str, Callable[[], Any]]:
    """What an A/B times on rows: ``format_prompt`` of them all, ``encode_batch`` of prompts
    rendered before, and end to end batched and per row, each from empty caches. ``pkg`` is a
    ``qwen_encode`` package, this checkout's or a base's, and ``encoder`` one of its encoders."""
    clear_render = getattr(pkg.protocol, "clear_render_cache", lambda: None)

    def render() -> list[Any]:
        return [
            pkg.format_prompt(r["messages"], tools=r["tools"], add_generation_prompt=False)
            for r in rows
        ]

    ready = render()

    def format_prompt() -> Any:
        clear_render()
        return render()

    def encode_batch() -> Any:
        encoder.clear_cache()
        return encoder.encode_batch(ready)

    def batched() -> Any:
        encoder.clear_cache()
        clear_render()
        return encoder.encode_batch(render())

    def per_row() -> Any:
        encoder.clear_cache()
        clear_render()
        return [
            encoder.encode_messages(r["messages"], tools=r["tools"], add_generation_prompt=False)
            for r in rows
        ]

    return {
        "format_prompt": format_prompt,
        "encode_batch (rendered before)": encode_batch,
        "end to end, batched": batched,
        "end to end, per row": per_row,
    }
