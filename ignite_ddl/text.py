"""Plain-text tables for the console: what ranks, profilers and labs print.

Example:
    >>> print(format_table(["rank", "ms"], [[0, "1.50"], [1, "12.25"]]))
    rank     ms
       0   1.50
       1  12.25
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns right-aligned to their widest cell, two spaces apart."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)
