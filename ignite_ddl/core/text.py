"""Text for the console: tables, and the durations and sizes in their cells, as ranks, profilers and labs print them.

Example:
    >>> print(format_table(["rank", "ms"], [[0, milliseconds(0.0015)], [1, milliseconds(0.01225)]]))
    rank     ms
       0   1.50
       1  12.25
    >>> milliseconds(float("nan")), milliseconds("not triggered"), kib(27688)
    ('-', 'not triggered', '27.0 KiB')
"""

from __future__ import annotations

import math
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["all_reduce_wait", "fit_line", "format_bytes", "format_table", "kib", "milliseconds", "output_width"]

# The narrowest width text is fitted to: below it a wrapped line would hold a word or two.
MIN_WIDTH = 40


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns right-aligned to their widest cell, two spaces apart."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)


def output_width(stream: TextIO | None = None) -> int | None:
    """The columns a terminal shows ``stream`` (standard output by default) in: its width, or ``COLUMNS`` where the
    environment sets it (as for argparse's help), at least 40. None where the output goes to a file or a pipe, so
    that a log keeps each line whole."""
    stream = stream or sys.stdout
    if not (hasattr(stream, "isatty") and stream.isatty()):
        return None
    return max(MIN_WIDTH, shutil.get_terminal_size().columns)


def fit_line(line: str, width: int | None, indent: str = "    ") -> str:
    """``line`` wrapped at ``width`` columns between words, each further line indented by ``indent`` (as it is
    without a width, or when it fits). A word longer than the width (a path) stays whole, for copying.

    >>> print(fit_line("cfg001 batch_size=2048: predicted not to fit: 9.69 GiB > 1.95 GiB: not launched", 50))
    cfg001 batch_size=2048: predicted not to fit: 9.69
        GiB > 1.95 GiB: not launched
    """
    if width is None or len(line) <= width:
        return line
    return textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def milliseconds(seconds: Any, decimals: int = 2) -> str:
    """``seconds`` in milliseconds with ``decimals`` decimals, without a unit (the column header says ``ms``).

    ``-`` where nothing was measured (None, NaN); any other value that is not a number (Ignite's profilers report
    ``"not triggered"``) is shown as it is.
    """
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    if isinstance(seconds, (int, float)):
        return f"{1e3 * seconds:.{decimals}f}"
    return str(seconds)


def kib(nbytes: float) -> str:
    """Bytes as KiB with one decimal, e.g. ``kib(27688)`` is ``'27.0 KiB'``."""
    return f"{nbytes / 1024:.1f} KiB"


def all_reduce_wait(waiting: Sequence[int], wait_s: float, rank: int) -> str:
    """Who waits how long per step for which rank in the gradient all-reduce, in words (console and report).

    >>> all_reduce_wait([1], 0.0136, 0)
    'rank 1 waits 13.6 ms per step for rank 0 in the gradient all-reduce'
    >>> all_reduce_wait([0, 2, 3], 0.004, 1)
    'ranks 0, 2, 3 wait 4.0 ms per step for rank 1 in the gradient all-reduce'
    """
    who = f"rank {waiting[0]} waits" if len(waiting) == 1 else f"ranks {', '.join(map(str, waiting))} wait"
    return f"{who} {1e3 * wait_s:.1f} ms per step for rank {rank} in the gradient all-reduce"


def format_bytes(nbytes: float | None) -> str:
    """``1.2 GB``, ``35.0 MB``: decimal units, as memory sizes are read ("-" for nothing measured).

    >>> format_bytes(1_234_000_000), format_bytes(35e6), format_bytes(None)
    ('1.2 GB', '35.0 MB', '-')
    """
    if nbytes is None or math.isnan(nbytes):
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes:.0f} B"
