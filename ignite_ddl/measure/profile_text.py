"""What a profiler measured, as a table a person reads (one row per rank): torch-free, so that the report can show
a sweep's profiles without importing torch.

Example:
    >>> print(format_profile("timer", [{"iteration_mean_s": 0.0125, "epoch_mean_s": 1.5}]))
    rank  iteration ms  epoch s
       0         12.50    1.500
"""

from __future__ import annotations

from typing import Any

from ignite_ddl.core.text import format_table, milliseconds
from ignite_ddl.measure.traces import format_trace_comm

__all__ = ["format_profile"]


def format_profile(kind: str, ranks: list[Any], with_comm: bool = True) -> str:
    """A table with a row per rank of what profiler ``kind`` measured (times in milliseconds); for ``torch``, with
    ``with_comm``, the trace's communication beside ours below it (the report shows that one as a table of its
    own)."""
    header: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    if kind == "timer":
        header = ("rank", "iteration ms", "epoch s")
        rows = [(i, milliseconds(r["iteration_mean_s"]), f"{r['epoch_mean_s']:.3f}") for i, r in enumerate(ranks)]
    elif kind == "basic":
        header = ("rank", "processing ms", "dataflow ms", "handlers total s")
        rows = [
            (
                i,
                milliseconds(r["processing_stats"].get("mean"), 3),
                milliseconds(r["dataflow_stats"].get("mean"), 3),
                f"{r['event_handlers_stats']['total_time']:.3f}",
            )
            for i, r in enumerate(ranks)
        ]
    elif kind == "torch":
        header = ("rank", "op", "calls", "self CPU ms", "CPU ms", "device ms")
        rows = []
        for i, r in enumerate(ranks):
            rows += [
                (i, op["name"], op["calls"], *(f"{op[c]:.3f}" for c in ("self_cpu_ms", "cpu_ms", "device_ms")))
                for op in r["top_ops"]
            ] or [(i, "(nothing recorded)", "", "", "", "")]
        comm = format_trace_comm(ranks) if with_comm else None
        if comm is not None:
            return format_table(header, rows) + "\n\ngradient all-reduce per step, the trace's vs ours:\n" + comm
    else:
        header = ("rank", "handler", "event", "total s", "mean ms")
        rows = [
            (i, row["handler"], row["event"], row["total_s"], milliseconds(row["mean_s"], 3))
            for i, r in enumerate(ranks)
            for row in r
            if isinstance(row["total_s"], float) and row["handler"] != "Total"
        ]
    return format_table(header, rows)
