"""Our communication timing against the ``torch.profiler`` trace of the same iterations: a second, independent clock.

:class:`~ignite_ddl.measure.comm.CommTimer` times each gradient bucket from the inside (a DDP communication hook:
the bucket is *ready* when the hook is called, *done* when the all-reduce's future completes). The Chrome trace that
``--profiler torch`` writes on every rank (``profile/rank<r>_torch.json``) sees the same all-reduces from the
outside, as the profiler recorded them. Per ``ProfilerStep#N`` span of the trace's main thread (the thread that
ran the training loop; step N is one iteration, see :mod:`~ignite_ddl.measure.profilers`), :func:`trace_comm`
computes:

- **communication**: the union of the intervals of the collective's events inside the step: on CPU (gloo) the
  ``gloo:all_reduce`` events, which gloo's worker threads (``pt_gloo_runloop``) record around each bucket's
  all-reduce, waiting for the other ranks included; on CUDA (NCCL) the all-reduce kernels, named ``nccl...Kernel``,
  attributed to the step that launched them. A gloo event belongs to the step it started in, clipped to the step's
  end (its end can be recorded late, see below);
- **overlap**: the part of it during which backward compute ran: on CPU the autograd engine's
  ``autograd::engine::evaluate_function: ...`` events on the main thread (autograd runs CPU backward on the thread
  that called ``backward()``), except ``AccumulateGrad``'s: DDP's reducer runs in its post hook and launches the
  bucket's all-reduce there, which is not gradient compute; on CUDA every other kernel of the step (what HTA counts
  as computation);
- **exposed**: communication - overlap, the communication no compute hid.

The CUDA path follows the trace format kineto writes for GPU runs (kernels with ``cat`` ``kernel`` and a
``correlation`` to their ``cudaLaunchKernel``); it has not been run on this project's CPU-only machines.

Why the two clocks differ, bucket by bucket (measured by recording our instants on the trace's clock, 2 ranks on
2 cores, gloo): ours runs from the hook's call to the completion callback; gloo's event from its worker thread
starting the all-reduce to that thread closing the event, which it does after running the completion callbacks
(``finishWorkGloo``: the future first, then the profiler's end). So ours starts 0.05-0.2 ms earlier (the hook
divides the bucket and enqueues it) and the trace ends 0.02-0.03 ms later; and where the worker thread is not
scheduled at once, ours also holds the wait for it to start (seen up to 2 ms), the trace the wait for it to close
the event after our callback (seen up to 4 ms). Per iteration the two differ by a few ms either way on a busy
machine; over the traced iterations ours is a little longer. Exposed communication is defined differently too:
ours is last bucket ready -> last bucket done; the trace's also counts instants before the last bucket at which a
bucket was in flight and no autograd function ran, and a late-closed last event, so it is the larger.

:func:`compare_with_steps` puts the trace's figures beside ours (``steps_rank<r>.csv``) for exactly the traced
iterations; :func:`hta_reading` records what Holistic Trace Analysis (an optional extra: ``pip install
'ignite-ddl[hta]'``) reads from the same traces. HTA 0.5 keeps only GPU rows for its communication, computation and
idle analyses and finds communication by the kernel name ``nccl...Kernel``, so on CPU-only gloo traces it finds
the ranks and the profiler steps but no communication: its temporal breakdown fails, its overlap is NaN.

Example (one step of a hand-made trace; times in microseconds):
    >>> events = [
    ...     {"ph": "X", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    ...     {"ph": "X", "name": "autograd::engine::evaluate_function: AddmmBackward0", "pid": 1, "tid": 1,
    ...      "ts": 10, "dur": 40},
    ...     {"ph": "X", "name": "gloo:all_reduce", "pid": 1, "tid": 7, "ts": 30, "dur": 30},
    ... ]
    >>> step = trace_comm({"traceEvents": events}).steps[0]
    >>> step.step, step.comm_us, step.overlap_us, step.exposed_us
    (3, 30.0, 20.0, 10.0)
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ignite_ddl.core.schema import TraceCommCheck
from ignite_ddl.core.steps_csv import read_steps
from ignite_ddl.core.text import format_table

__all__ = [
    "GLOO_COLLECTIVE",
    "NCCL_KERNEL",
    "TRACE_COMM_HEADER",
    "TraceComm",
    "TraceStep",
    "compare_with_steps",
    "format_trace_comm",
    "hta_reading",
    "intersection",
    "load_trace",
    "read_step_rows",
    "trace_comm",
    "trace_comm_rows",
    "union",
]

GLOO_COLLECTIVE = "gloo:all_reduce"  # gloo's worker thread, around one all-reduce (a DDP bucket)
NCCL_KERNEL = re.compile(r"nccl.*Kernel")  # HTA's test for a communication kernel (anchored at the start)
BACKWARD = "autograd::engine::evaluate_function:"  # one autograd function's evaluation, on the calling thread
ACCUMULATE_GRAD = "AccumulateGrad"  # the evaluation that runs DDP's reducer (its post hook): not counted as compute
_STEP = re.compile(r"ProfilerStep#(\d+)$")

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """``intervals`` merged into sorted, disjoint ones: time covered by several counts once (empty ones dropped).

    >>> union([(5, 8), (0, 2), (1, 3), (4, 4)])
    [(0, 3), (5, 8)]
    """
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def intersection(a: list[Interval], b: list[Interval]) -> float:
    """Total length of the time two disjoint sorted lists (:func:`union`'s output) have in common.

    >>> intersection([(0, 3), (5, 8)], [(2, 6)])
    2.0
    """
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _length(intervals: list[Interval]) -> float:
    return float(sum(end - start for start, end in intervals))


def _clip(intervals: Iterable[Interval], start: float, end: float) -> list[Interval]:
    return union((max(s, start), min(e, end)) for s, e in intervals)


@dataclass(frozen=True)
class TraceStep:
    """One ``ProfilerStep#N`` of a trace (microseconds, the trace's unit)."""

    step: int  # N
    start_us: float
    dur_us: float
    comm_us: float
    overlap_us: float
    collectives: int  # the collective's events (gloo) or kernels (NCCL) counted in it

    @property
    def exposed_us(self) -> float:
        """Communication that no backward compute hid."""
        return self.comm_us - self.overlap_us


@dataclass(frozen=True)
class TraceComm:
    """A rank's trace read for communication: which events counted as the collective, and each step's figures."""

    rank: int | None  # from the trace's distributedInfo
    collective: str | None  # GLOO_COLLECTIVE, "nccl kernels", or None: no collective in the trace
    steps: list[TraceStep]

    def mean_ms(self) -> dict[str, float]:
        """Mean communication, overlap and exposed communication per step, in milliseconds (NaN without steps)."""
        n = len(self.steps)
        figures = {"comm": "comm_us", "overlap": "overlap_us", "exposed": "exposed_us"}
        return {k: sum(getattr(s, a) for s in self.steps) / n / 1e3 if n else math.nan for k, a in figures.items()}


def load_trace(path: str | Path) -> dict[str, Any]:
    """A Chrome trace as torch writes it (``.json``, or ``.json.gz`` as kineto's tensorboard handler does)."""
    path = Path(path)
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        trace: dict[str, Any] = json.load(f)
    return trace


def _complete(events: Iterable[Any]) -> list[dict[str, Any]]:
    """The trace's complete events ("ph": "X"): the only ones with a duration."""
    return [
        e
        for e in events
        if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) and "dur" in e
    ]


def _span(event: dict[str, Any]) -> Interval:
    return float(event["ts"]), float(event["ts"]) + float(event["dur"])


def trace_comm(trace: dict[str, Any] | str | Path) -> TraceComm:
    """Each ``ProfilerStep#N`` of ``trace`` (a loaded trace or its path): communication, its overlap with backward
    compute, exposed communication; see the module docstring. Steps are in the order of N."""
    if not isinstance(trace, dict):
        trace = load_trace(trace)
    events = _complete(trace.get("traceEvents", []))
    info = trace.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) and isinstance(info.get("rank"), int) else None
    # The CPU step markers; a CUDA trace also has them on the GPU timeline (cat gpu_user_annotation).
    markers = [e for e in events if _STEP.match(str(e.get("name"))) and not str(e.get("cat", "")).startswith("gpu_")]
    if not markers:
        return TraceComm(rank, None, [])
    main = (markers[0].get("pid"), markers[0].get("tid"))  # the thread that ran the training loop
    steps: dict[int, Interval] = {}
    for e in markers:
        match = _STEP.match(str(e["name"]))
        assert match is not None
        steps.setdefault(int(match.group(1)), _span(e))
    kernels = [e for e in events if e.get("cat") == "kernel"]
    if any(NCCL_KERNEL.match(str(e.get("name"))) for e in kernels):
        return TraceComm(rank, "nccl kernels", _cuda_steps(events, kernels, steps))
    gloo = [_span(e) for e in events if e.get("name") == GLOO_COLLECTIVE]
    backward = [
        _span(e)
        for e in events
        if (e.get("pid"), e.get("tid")) == main
        and str(e.get("name")).startswith(BACKWARD)
        and not str(e.get("name")).endswith(ACCUMULATE_GRAD)
    ]
    result = []
    for n, (start, end) in sorted(steps.items()):
        # A collective belongs to the step it started in; its end is clipped to the step's (see the docstring).
        launched = [(s, e) for s, e in gloo if start <= s < end]
        comm = _clip(launched, start, end)
        overlap = intersection(comm, _clip(backward, start, end))
        result.append(TraceStep(n, start, end - start, _length(comm), float(overlap), len(launched)))
    return TraceComm(rank, GLOO_COLLECTIVE if gloo else None, result)


def _cuda_steps(
    events: list[dict[str, Any]], kernels: list[dict[str, Any]], steps: dict[int, Interval]
) -> list[TraceStep]:
    """The NCCL path (not run on this project's CPU machines): a kernel belongs to the step whose CPU span holds its
    launch (the runtime event with the same ``correlation``; the kernel itself runs later, on the GPU's clock as
    kineto aligns it); communication is the union of the step's NCCL kernels, overlap its intersection with the
    step's other kernels."""
    launches = {
        e["args"]["correlation"]: float(e["ts"])
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and isinstance(e.get("args"), dict)
        and "correlation" in e["args"]
    }
    ordered = sorted(steps.items())
    comm: dict[int, list[Interval]] = {n: [] for n in steps}
    compute: dict[int, list[Interval]] = {n: [] for n in steps}
    for kernel in kernels:
        args: dict[str, Any] = kernel["args"] if isinstance(kernel.get("args"), dict) else {}
        launched = launches.get(args.get("correlation"), float(kernel["ts"]))
        owner = next((n for n, (start, end) in ordered if start <= launched < end), None)
        if owner is not None:
            (comm if NCCL_KERNEL.match(str(kernel.get("name"))) else compute)[owner].append(_span(kernel))
    result = []
    for n, (start, end) in ordered:
        merged = union(comm[n])
        overlap = intersection(merged, union(compute[n]))
        result.append(TraceStep(n, start, end - start, _length(merged), float(overlap), len(comm[n])))
    return result


def read_step_rows(path: str | Path) -> list[dict[str, float]]:
    """``steps_rank<r>.csv`` as the comparison needs it (:func:`~ignite_ddl.core.steps_csv.read_steps`): iteration,
    comm_s and exposed_comm_s of each row as numbers (a blank cell, a figure not measured, as NaN)."""
    return [
        {
            "iteration": r["iteration"],
            "comm_s": math.nan if r["comm_s"] is None else r["comm_s"],
            "exposed_comm_s": math.nan if r["exposed_comm_s"] is None else r["exposed_comm_s"],
        }
        for r in read_steps(path)
    ]


def compare_with_steps(
    trace: TraceComm, rows: list[dict[str, Any]], iterations: dict[int, int]
) -> TraceCommCheck | None:
    """The trace's communication and ours on the same iterations: ``iterations`` maps a trace's step number N to
    the engine iteration it recorded; ``rows`` are our per-iteration figures (:func:`read_step_rows`). Means in ms,
    ours / the trace's (ratio), and each iteration's figures; None when no traced iteration has ours timed (one
    process, ``--no-comm-timing``) or the trace holds no collective."""
    if trace.collective is None:
        return None
    ours = {r["iteration"]: r for r in rows if not math.isnan(r["comm_s"])}
    pairs = [(s, ours[iterations[s.step]]) for s in trace.steps if iterations.get(s.step) in ours]
    if not pairs:
        return None
    per_iteration: list[dict[str, float]] = [
        {
            "iteration": row["iteration"],
            "trace_comm_ms": step.comm_us / 1e3,
            "ours_comm_ms": row["comm_s"] * 1e3,
            "trace_exposed_ms": step.exposed_us / 1e3,
            "ours_exposed_ms": row["exposed_comm_s"] * 1e3,
        }
        for step, row in pairs
    ]

    def mean(key: str) -> float:
        return sum(p[key] for p in per_iteration) / len(per_iteration)

    trace_ms = {k: mean(f"trace_{k}_ms") for k in ("comm", "exposed")}
    trace_ms["overlap"] = sum(s.overlap_us for s, _ in pairs) / len(pairs) / 1e3
    ours_ms = {k: mean(f"ours_{k}_ms") for k in ("comm", "exposed")}
    ratio: dict[str, float | None] = {k: ours_ms[k] / trace_ms[k] if trace_ms[k] > 0 else math.nan for k in ours_ms}
    return {
        "collective": trace.collective,
        "iterations": [row["iteration"] for _, row in pairs],
        "trace_ms": trace_ms,
        "ours_ms": ours_ms,
        "ratio": ratio,
        "per_iteration": per_iteration,
    }


TRACE_COMM_HEADER = (
    "rank",
    "iterations",
    "comm ms trace",
    "comm ms ours",
    "ours / trace",
    "exposed ms trace",
    "exposed ms ours",
    "ours / trace",
)


def trace_comm_rows(ranks: list[Any]) -> list[list[str]]:
    """Rows of :data:`TRACE_COMM_HEADER`, one per rank that has the comparison (``trace_comm`` of a torch
    profiler's results); empty when none has."""

    def ms(value: float | None) -> str:
        return "-" if value is None or math.isnan(value) else f"{value:.2f}"

    def ratio(value: float | None) -> str:
        return "-" if value is None or math.isnan(value) else f"{value:.3f}"

    rows = []
    for rank, result in enumerate(ranks):
        check = result.get("trace_comm") if isinstance(result, dict) else None
        if not check:
            continue
        its = check["iterations"]
        rows.append(
            [
                str(rank),
                f"{its[0]}-{its[-1]}" if len(its) > 1 else str(its[0]),
                ms(check["trace_ms"]["comm"]),
                ms(check["ours_ms"]["comm"]),
                ratio(check["ratio"]["comm"]),
                ms(check["trace_ms"]["exposed"]),
                ms(check["ours_ms"]["exposed"]),
                ratio(check["ratio"]["exposed"]),
            ]
        )
    return rows


def format_trace_comm(ranks: list[Any]) -> str | None:
    """:func:`trace_comm_rows` as a text table (None when no rank has the comparison)."""
    rows = trace_comm_rows(ranks)
    return format_table(TRACE_COMM_HEADER, rows) if rows else None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _plain(value: Any) -> Any:
    """What HTA returned, as JSON-ready data: a DataFrame as its records, numpy scalars as numbers."""
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # a pandas DataFrame
        return [_plain(r) for r in value.to_dict(orient="records")]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return value.item()
    return value


def hta_reading(profile_dir: str | Path) -> dict[str, Any]:
    """What Holistic Trace Analysis reads from the traces in ``profile_dir`` (every ``*.json`` there, one per rank),
    exactly as it returns it: the ranks, and the result of its ``get_profiler_steps``, ``get_temporal_breakdown`` and
    ``get_comm_comp_overlap``, or the exception each raised (type and first line). Without HTA
    importable, says so. Why: the issue asks for HTA's figures beside ours, and where HTA cannot read CPU-only
    gloo traces, for exactly what it does read."""
    try:
        from hta.trace_analysis import TraceAnalysis  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError as e:
        return {
            "available": False,
            "reason": f"HTA is not importable ({_first_line(e)}): pip install 'ignite-ddl[hta]'",
        }
    reading: dict[str, Any] = {"available": True}
    try:
        from importlib.metadata import version

        reading["version"] = version("HolisticTraceAnalysis")
    except Exception:  # the version is a label only
        reading["version"] = None
    try:
        analyzer = TraceAnalysis(trace_dir=str(profile_dir))
    except Exception as e:
        reading["load"] = {"error": type(e).__name__, "message": _first_line(e)}
        return reading
    reading["ranks"] = _plain(analyzer.t.get_ranks())
    for name in ("get_profiler_steps", "get_temporal_breakdown", "get_comm_comp_overlap"):
        options = {} if name == "get_profiler_steps" else {"visualize": False}
        try:
            reading[name] = {"result": _plain(getattr(analyzer, name)(**options))}
        except Exception as e:
            reading[name] = {"error": type(e).__name__, "message": _first_line(e)}
    return reading
