"""Figures: ``matplotlib.pyplot`` headless (unless a notebook chose a backend), and PNGs written whole or not at
all, as every other output is (rendered in memory, then written through a temporary file and renamed), so a full
disk leaves no empty image behind.

Example:
    >>> import tempfile, pathlib
    >>> plt = pyplot()
    >>> fig, ax = plt.subplots(figsize=(2, 2)); _ = ax.plot([0, 1], [1, 0])
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "line.png"
    >>> save_figure(fig, path)
    >>> path.read_bytes()[:4] == b"\\x89PNG"
    True
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path
from typing import Any

from ignite_ddl.core.outputs import write_bytes

__all__ = ["plain_text", "pyplot", "save_figure"]


def pyplot() -> Any:
    """``matplotlib.pyplot``, headless unless a backend was chosen (see below)."""
    import matplotlib

    # Headless by default, but never switch a backend someone chose: a notebook's inline backend (MPLBACKEND, or
    # pyplot already imported) keeps showing its own figures after a report was written.
    if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plain_text() -> contextlib.AbstractContextManager[Any]:
    """Inside it, every text matplotlib creates is shown as written: a pair of ``$`` is not read as mathtext. A
    grid value is the user's text (``$\\foo{$`` ended a report in matplotlib's ParseFatalException); tick labels
    made inside it are plain too, so a figure drawn in it must not rely on a formatter's mathtext (a log axis's
    powers: label its ticks)."""
    import matplotlib

    return matplotlib.rc_context({"text.parse_math": False})


def save_figure(fig: Any, path: str | Path, dpi: int = 110, close: bool = True) -> None:
    """Write ``fig`` as a PNG to ``path`` atomically; close it afterwards (unless ``close`` is False)."""
    try:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi)
        write_bytes(path, buffer.getvalue())
    finally:
        if close:
            pyplot().close(fig)
