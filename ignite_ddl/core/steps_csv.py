"""``steps_rank<r>.csv``, one row per iteration of a rank (warm-up included, flagged): its columns, declared once,
and the one pair that writes and reads it. The step recorder writes it; the report's plots, the DDP diagram and the
profiler's cross-check read it back through :func:`read_steps`, which also turns the ``bucket_spans_ms`` cell into
(ready, done) seconds, the inverse of :func:`format_bucket_spans`.

Example:
    >>> spans = [(0.0211, 0.0234), (0.0225, 0.025)]
    >>> format_bucket_spans(spans)
    '21.100-23.400;22.500-25.000'
    >>> [(round(ready, 6), round(done, 6)) for ready, done in parse_bucket_spans("21.100-23.400;22.500-25.000")]
    [(0.0211, 0.0234), (0.0225, 0.025)]
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ignite_ddl.core.outputs import write_csv, writing

__all__ = ["STEP_COLUMNS", "format_bucket_spans", "parse_bucket_spans", "read_steps", "write_steps"]

PHASES = ("forward", "backward", "optimizer")
COMM_COLUMNS = ("comm_s", "exposed_comm_s", "comm_bytes", "buckets")
STEP_COLUMNS = (
    "iteration",
    "epoch",
    "warmup",
    "data_s",
    "step_s",
    *(f"{p}_s" for p in PHASES),
    "iter_s",
    "samples",
    *COMM_COLUMNS,
    "handlers_s",
    "micro_steps",
    "memory_bytes",
    "compiled",
    "bucket_spans_ms",  # last, so that a reader of the earlier columns by position still reads them
)
_WHOLE = ("iteration", "epoch", "warmup", "samples", "buckets", "micro_steps", "memory_bytes", "compiled")
_SPAN = re.compile(r"\s*(-?[0-9.]+)-(-?[0-9.]+)\s*")


def format_bucket_spans(spans: Sequence[tuple[float, float]]) -> str:
    """A step's buckets' (ready, done) seconds after its start as the ``bucket_spans_ms`` cell: ``ready-done`` in ms
    per bucket, ``;`` between buckets, in ready order; blank where nothing was timed."""
    return ";".join(f"{1e3 * ready:.3f}-{1e3 * done:.3f}" for ready, done in spans)


def parse_bucket_spans(cell: str | None) -> list[tuple[float, float]]:
    """A ``bucket_spans_ms`` cell as (ready, done) seconds; [] for a blank cell or a CSV written before the column
    existed."""
    spans = []
    for part in (cell or "").split(";"):
        if not part.strip():
            continue
        match = _SPAN.fullmatch(part)
        if match is None:
            raise ValueError(f"not a bucket's span in ms (ready-done): {part!r}")
        spans.append((float(match[1]) / 1e3, float(match[2]) / 1e3))
    return spans


def write_steps(path: str | Path, rows: Iterable[Sequence[Any]]) -> None:
    """Write a rank's rows (values in :data:`STEP_COLUMNS` order; a NaN, a figure not measured, left blank)."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    blank_nan = (("" if isinstance(v, float) and math.isnan(v) else v for v in row) for row in rows)
    write_csv(path, STEP_COLUMNS, blank_nan)


def read_steps(path: str | Path) -> list[dict[str, Any]]:
    """A rank's rows as :func:`write_steps` wrote them, by column: counts as int, warm-up and compiled as bool,
    figures as float (None where blank: not measured, or a column an older CSV lacks), ``bucket_spans_ms`` as the
    list of (ready, done) seconds of :func:`parse_bucket_spans`."""
    with open(path, newline="") as f:
        return [_row(row) for row in csv.DictReader(f)]


def _row(cells: dict[str, str | None]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for column in STEP_COLUMNS:
        cell = cells.get(column)
        if column == "bucket_spans_ms":
            row[column] = parse_bucket_spans(cell)
        elif cell in (None, ""):
            row[column] = None
        elif column in ("warmup", "compiled"):
            row[column] = cell not in ("0", "False", "false")
        elif column in _WHOLE:
            row[column] = int(float(cell))
        else:
            row[column] = float(cell)
    return row
