"""Progress on stderr while a command runs."""

from __future__ import annotations

import sys

__all__ = ["Progress"]


class Progress:
    """Progress on stderr, drawn by tqdm: only on a terminal, and only once a run has lasted
    half a second (a short run prints nothing). The bar counts input bytes when the size is
    known (``advance``); rows/s and tokens/s stand beside it (``lines_done``)."""

    def __init__(self, label: str, total: int | None, enabled: bool, unit: str = "B") -> None:
        from tqdm import tqdm

        self.rows = 0
        self.tokens = 0
        self.unit = unit
        self.bar = tqdm(
            total=total or None,
            desc=label,
            unit=unit,
            unit_scale=unit == "B",
            disable=not enabled,
            delay=0.5,
            leave=False,
            file=sys.stderr,
            dynamic_ncols=True,
        )

    def advance(self, size: int) -> None:
        self.bar.update(size)

    def lines_done(self, count: int, tokens: int = 0) -> None:
        self.rows += count
        self.tokens += tokens
        elapsed = max(self.bar.format_dict.get("elapsed", 0.0), 1e-9)
        rates = f"{self.rows:,} rows, {self.rows / elapsed:,.0f} rows/s"
        if self.tokens:
            rates += f", {self.tokens / elapsed:,.0f} tokens/s"
        self.bar.set_postfix_str(rates, refresh=False)
        if self.unit == "rows":  # counting rows: the rows are the bar
            self.bar.update(count)

    def close(self) -> None:
        self.bar.close()
