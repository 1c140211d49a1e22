"""Per-step timings on every rank, gathered into one honest picture of a distributed run.

:class:`StepRecorder` is an Ignite handler: attached to a trainer it records, for each iteration on its rank, the
time spent waiting for the batch (``GET_BATCH_STARTED`` -> ``GET_BATCH_COMPLETED``), the time in the step
(``ITERATION_STARTED`` -> ``ITERATION_COMPLETED``) and the samples in the batch. A train step that calls
:meth:`StepRecorder.mark` also gets its step split into forward, backward (where DDP all-reduces gradients) and
optimizer time. On CUDA the device is synchronised before each clock reading, so asynchronous execution is not
hidden. On XLA a clock reading waits for the work launched so far and the step's end launches the pending graph
first, so the step time includes its execution; forward and backward are then the time to trace them, and the
optimizer phase (whose ``auto_optim`` step launches the graph) holds the device time of the whole step.

Every iteration is recorded (``steps_rank<r>.csv``); the statistics leave out the **warm-up**: the first
``warmup`` iterations, then, for a compiled model, every iteration until compilation has ended
(:mod:`~ignite_ddl.measure.compilation`), then as many more as the run's own step times show were still settling
(MSER-5, :mod:`~ignite_ddl.measure.steady`: the run-level figures only, the latest cut over the ranks applying to
all of them). An iteration that compiled again later (a recompilation) is left out too; its time counts as
compilation (``compile.compile_s``).

:meth:`StepRecorder.gather` (a collective: every rank calls it) returns plain data: per-rank statistics, global
throughput (all ranks' samples over the measured window's wall time, never one rank's figure times the world
size) and the straggler.

Finding the straggler: DDP's all-reduce makes every rank's backward end together, so step time alone cannot say
who is slow; the fast ranks spend the difference waiting inside backward. What a rank does *on its own* is
data wait + forward + optimizer step (no collective in any of them for models without buffers to broadcast), so
the straggler is the rank whose own time is largest; its figure is that time over the median rank's.

With a communication timer (:class:`~ignite_ddl.measure.comm.CommTimer`, DDP only) each row also holds the step's
gradient communication and each bucket's all-reduce as a span from its gradients being ready to its reduction being
done, in ms after the step's start on the same clock as the step's phases (``bucket_spans_ms``, see
:func:`~ignite_ddl.core.steps_csv.format_bucket_spans`).

Example:
    >>> import torch
    >>> from ignite.engine import Engine
    >>> engine = Engine(lambda engine, batch: None)
    >>> recorder = StepRecorder(warmup=1).attach(engine)
    >>> _ = engine.run([(torch.zeros(4, 3), torch.zeros(4))] * 5)
    >>> recorder.gather()["global"]["samples"]  # 4 measured iterations of 4 samples
    16
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypedDict

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events

from ignite_ddl.core.collectives import allreduce_bus_factor
from ignite_ddl.core.schema import (
    CommWait,
    CompileStats,
    GlobalStats,
    PhaseStats,
    RankStats,
    SteadyState,
    StepStats,
    Straggler,
)
from ignite_ddl.core.steps_csv import PHASES, STEP_COLUMNS, format_bucket_spans, write_steps
from ignite_ddl.core.text import all_reduce_wait, format_table, milliseconds
from ignite_ddl.measure.clock import device_synchronizer
from ignite_ddl.measure.comm import NO_COMM, CommTimer, waits
from ignite_ddl.measure.compilation import CompileWatch, distinct
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.measure.steady import mser5

__all__ = [
    "COLUMNS",
    "StepRecorder",
    "format_steps",
    "wait_sentence",
]

_PHASES = PHASES
COLUMNS = STEP_COLUMNS  # the CSV's columns, declared with its reader and writer (core.steps_csv)
_WARMUP, _ITER_S, _COMPILED = COLUMNS.index("warmup"), COLUMNS.index("iter_s"), COLUMNS.index("compiled")


def _batch_samples(engine: Engine) -> int:
    """Samples in the current batch: the length of its first element (inputs of an (x, y) batch)."""
    batch: Any = engine.state.batch  # the loader's batch (Ignite annotates State.batch as int | None)
    return len(batch[0] if isinstance(batch, (list, tuple)) else batch)


class StepRecorder:
    """Records per-iteration timings of a trainer on this rank; see the module docstring."""

    def __init__(
        self,
        warmup: int = 5,
        device: torch.device | None = None,
        samples: Callable[[Engine], int] | None = None,
        comm: CommTimer | None = None,
        memory: Callable[[], int] | None = None,
        compile_watch: CompileWatch | None = None,
        changes_at: int = 0,
    ):
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {warmup}")
        if not 0 <= changes_at <= warmup:
            raise ValueError(f"changes_at must be within the warm-up (0 to {warmup}), got {changes_at}")
        self.warmup = warmup
        # The iteration up to which an option makes the run behave otherwise (PowerSGD's start, inside ``warmup``):
        # those iterations are measured apart, as the warm-up phase beside the steady one.
        self.changes_at = changes_at
        device = device if device is not None else idist.device()
        self._sync, self._sync_end = device_synchronizer(device), device_synchronizer(device, launch=True)
        self._samples = samples if samples is not None else _batch_samples  # a workload counts its own batches
        self.comm = comm
        self.memory = memory  # a reading of memory in use, taken at each step's end (memory_bytes)
        self.micro_steps = 1  # micro-batches per iteration (an iteration is one optimizer step)
        self.compile_watch = compile_watch
        self._compiling = compile_watch is not None  # the run's first compilation has not ended yet
        self._compile_events = self._guard_failures = 0
        self.recompile_reasons: list[str] = []  # why the model compiled again during training
        self.recompiled: list[int] = []  # the iterations in which it did
        self._first_compiled: int | None = None  # the first iteration that compiled
        self.rows: list[tuple] = []
        self._batch_start = self._batch_end = self._step_start = self._last_mark = 0.0
        self._last_end: tuple[int, float] | None = None  # (epoch, time) the previous iteration ended
        self._gap = math.nan
        self._phases: dict[str, float] = {}

    def attach(self, engine: Engine) -> StepRecorder:
        """Attach to ``engine``; attach it before other handlers so their cost is not counted as step time."""
        engine.add_event_handler(Events.GET_BATCH_STARTED, self._on_batch_started)
        engine.add_event_handler(Events.GET_BATCH_COMPLETED, self._on_batch_completed)
        engine.add_event_handler(Events.ITERATION_STARTED, self._on_iteration_started)
        engine.add_event_handler(Events.ITERATION_COMPLETED, self._on_iteration_completed)
        return self

    def mark(self, phase: str) -> None:
        """Called by a train step at the end of ``phase`` (one of :data:`_PHASES`); a phase marked again in the same
        iteration (one per micro-batch of an accumulated step) adds up."""
        now = self._now(self._sync)
        self._phases[phase] = self._phases.get(phase, 0.0) + now - self._last_mark
        self._last_mark = now

    def phases_done(self) -> tuple[str, ...]:
        """The phases of the iteration under way that have ended so far (read from other threads too)."""
        try:
            return tuple(self._phases)
        except RuntimeError:  # changed while being read: the iteration moved on
            return ()

    def _now(self, sync: Callable[[], None] | None) -> float:
        if sync is not None:
            sync()
        return time.perf_counter()

    def _on_batch_started(self, engine: Engine) -> None:
        self._batch_start = time.perf_counter()
        # The handlers of the previous iteration ran since it ended; across an epoch boundary the gap also holds
        # evaluation and checkpoints, which are not per-step costs.
        last = self._last_end
        self._gap = self._batch_start - last[1] if last is not None and last[0] == engine.state.epoch else math.nan

    def _on_batch_completed(self) -> None:
        self._batch_end = time.perf_counter()

    def _on_iteration_started(self) -> None:
        self._phases = {}
        if self.compile_watch is not None:
            self._compile_events = self.compile_watch.events()
            self._guard_failures = self.compile_watch.failures()
        self._step_start = self._last_mark = time.perf_counter()
        if self.comm is not None:  # the buckets' spans count from the step's start, this very clock reading
            self.comm.begin(self._step_start)

    def _on_iteration_completed(self, engine: Engine) -> None:
        end = self._now(self._sync_end)
        state = engine.state
        phases = tuple(self._phases.get(p, math.nan) for p in _PHASES)
        compiled = self.compile_watch is not None and self.compile_watch.events() != self._compile_events
        self._compiling = self._compiling and compiled  # the first iteration that compiled nothing ends it
        if compiled and self.compile_watch is not None:
            # Anything compiled after the first compilation ended is a recompilation; so is a guard that failed in a
            # later iteration of that first stretch (Inductor's counters can move for several iterations in a row).
            # Guards failing within the first compiled iteration are its own (FSDP's units compile the same code
            # one after the other, each failing the last one's identity guard).
            first = self._first_compiled is None or self._first_compiled == state.iteration
            reasons = self.compile_watch.reasons_since(self._guard_failures)
            if self._first_compiled is None:
                self._first_compiled = state.iteration
            if not self._compiling or (reasons and not first):
                self.recompiled.append(state.iteration)
                self.recompile_reasons += reasons
        warmup = int(len(self.rows) < self.warmup or self._compiling)
        step = end - self._step_start
        comm = self.comm.take() if self.comm is not None else NO_COMM
        # Time in the iteration that is neither data, nor a phase: handlers (of ITERATION_STARTED inside the step,
        # of ITERATION_COMPLETED in the gap before the next batch).
        inside = step - sum(phases) if not any(math.isnan(p) for p in phases) else 0.0
        handlers = inside + (0.0 if math.isnan(self._gap) else self._gap)
        self.rows.append(
            (
                state.iteration,
                state.epoch,
                warmup,
                self._batch_end - self._batch_start,
                step,
                *phases,
                end - self._batch_start,
                self._samples(engine),
                comm.comm_s,
                comm.exposed_s,
                comm.bytes,
                comm.buckets,
                handlers,
                self.micro_steps,
                self.memory() if self.memory is not None else "",
                int(compiled),
                format_bucket_spans(comm.spans),
            )
        )
        self._last_end = (state.epoch, time.perf_counter())

    def all_rows(self) -> list[dict[str, Any]]:
        """Every iteration recorded, warm-up included, as dicts keyed by :data:`COLUMNS`."""
        return [dict(zip(COLUMNS, r)) for r in self.rows]

    def measured(self, since_iteration: int = 0) -> list[dict[str, Any]]:
        """Rows after warm-up (and after ``since_iteration``) that did not compile, as dicts keyed by
        :data:`COLUMNS`."""
        return [
            dict(zip(COLUMNS, r)) for r in self.rows if not r[_WARMUP] and not r[_COMPILED] and r[0] > since_iteration
        ]

    def local_stats(self, since_iteration: int = 0) -> RankStats:
        """Statistics of this rank's measured iterations."""
        return _rank_stats(self.measured(since_iteration), idist.get_rank(), idist.get_world_size())

    def settled_after(self) -> tuple[int, dict[str, Any]]:
        """The iteration after which this rank's step times are steady (MSER-5 over the iterations after warm-up
        and compilation; 0 when nothing more is cut) and what the detection found."""
        kept = self.measured()
        cut = mser5([r["iter_s"] for r in kept])
        after = kept[cut.drop - 1]["iteration"] if cut.drop else 0
        return after, {"dropped": cut.drop, "settled": cut.settled, "tested": cut.tested}

    def gather(self, since_iteration: int = 0, steady: bool = False) -> StepStats:
        """Collective: every rank's statistics, global throughput and the straggler, on every rank. With
        ``steady`` (the run's figures), the iterations still settling on any rank are left out of every rank's
        statistics (see the module docstring)."""
        detection, start = None, since_iteration
        if steady:
            cuts = gather_objects(self.settled_after())
            since_iteration = max([since_iteration, *(after for after, _ in cuts)])
            detection = [found for _, found in cuts]
            # The iterations cut are warm-up in steps_rank<r>.csv too (written after this).
            self.rows = [(*r[:_WARMUP], 1, *r[_WARMUP + 1 :]) if r[0] <= since_iteration else r for r in self.rows]
        rows = self.measured(since_iteration)
        # Each rank's step times travel with its statistics only to make the global percentiles: the raw times stay
        # in steps_rank<r>.csv, not in the statistics.
        parts = gather_objects(
            (_rank_stats(rows, idist.get_rank(), idist.get_world_size()), [r["step_s"] for r in rows])
        )
        ranks = [stats for stats, _ in parts]
        combined = _combine(ranks, [t for _, times in parts for t in times])
        excluded = self._excluded(start, since_iteration)
        gathered: StepStats = {
            "warmup_iterations": excluded,
            "ranks": ranks,
            "global": combined["global"],
            "straggler": combined["straggler"],
            "comm_wait": combined["comm_wait"],
            "comm_reference": None,  # measured afterwards, on every rank together, by the trainer
        }
        if steady:
            gathered["steady"] = _steady_record(self.warmup, detection or [], excluded)
            gathered["compile"] = self._compile_record()
            gathered["warmup_phase"] = self._warmup_phase()
        return gathered

    def _warmup_phase(self) -> PhaseStats | None:
        """Collective: the figures of the iterations before an option changes the run's behaviour, PowerSGD's plain
        all-reduces (after the fixed warm-up where any are left) or the first compilation; None when no option
        does. Every rank has the same ``changes_at`` and compile setting: all of them gather, or none."""
        rows = self.all_rows()
        if self.changes_at:
            fixed = self.warmup - self.changes_at  # the fixed warm-up counts from the change
            first = fixed if self.changes_at > fixed else 0  # cold first iterations left out where some are left
            cause, phase = "powersgd_start_iter", [r for r in rows if first < r["iteration"] <= self.changes_at]
        elif self.compile_watch is not None:
            ends = next((i for i, r in enumerate(rows) if not r["compiled"]), len(rows))
            cause, phase = "compile", rows[:ends]
        else:
            return None
        local = (_rank_stats(phase, idist.get_rank(), idist.get_world_size()), [r["step_s"] for r in phase])
        parts = gather_objects(local if phase else None)
        if any(p is None for p in parts):
            return None
        ranks = [stats for stats, _ in parts]
        figures = _combine(ranks, [t for _, times in parts for t in times])["global"]
        comm = _mean([r["comm_bytes_per_step"] for r in ranks])
        return {
            "cause": cause,
            "first_iteration": phase[0]["iteration"],
            "last_iteration": phase[-1]["iteration"],
            "samples_per_s": figures["samples_per_s"],
            "step_s_p50": figures["step_s_p50"],
            "comm_bytes_per_step": None if math.isnan(comm) else comm,
        }

    def _excluded(self, start: int, since_iteration: int) -> int:
        """Iterations after ``start`` left out before the first measured one: warm-up, the first compilation, then
        any cut (all of them when none is measured)."""
        first = next((r[0] for r in self.rows if not r[_WARMUP] and not r[_COMPILED] and r[0] > since_iteration), None)
        return sum(1 for r in self.rows if start < r[0] and (first is None or r[0] < first))

    def _compile_record(self) -> CompileStats | None:
        """Collective: what compilation cost (None for a model not compiled): the iterations that compiled, the
        time they took beyond a steady iteration (the slowest rank's), the recompilations and their reasons."""
        if self.compile_watch is None:
            return None
        compiled = [r for r in self.rows if r[_COMPILED]]
        steady = statistics.median([r["iter_s"] for r in self.measured()] or [math.nan])
        extra = sum(r[_ITER_S] - (0.0 if math.isnan(steady) else steady) for r in compiled)
        local = {
            "compile_s": extra,
            "iterations": [r[0] for r in compiled],
            "recompilations": len(self.recompiled),
            "reasons": distinct(self.recompile_reasons),
        }
        parts = gather_objects(local)
        record: CompileStats = {
            "compile_s": max(p["compile_s"] for p in parts),
            "compile_s_per_rank": [p["compile_s"] for p in parts],
            "iterations": sorted({i for p in parts for i in p["iterations"]}),
            "recompilations": max(p["recompilations"] for p in parts),
            "reasons": next((p["reasons"] for p in parts if p["reasons"]), []),
        }
        return record

    def write_csv(self, path: str | Path) -> None:
        """All iterations of this rank, warm-up included (flagged), one row each (:func:`write_steps`)."""
        write_steps(path, self.rows)


def _steady_record(fixed: int, detection: list[dict[str, Any]], excluded: int) -> SteadyState:
    """How the measured window was found: the fixed warm-up, what MSER-5 cut on each rank, and whether every rank
    settled."""
    return {
        "method": "MSER-5",
        "fixed_warmup_iterations": fixed,
        "detected_warmup_iterations": [d["dropped"] for d in detection],
        "settled": all(d["settled"] for d in detection),
        "tested": any(d["tested"] for d in detection),
        "first_measured_iteration": excluded + 1,
    }


def _quantiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    if not values:
        return [math.nan] * len(qs)
    return torch.tensor(values, dtype=torch.float64).quantile(torch.tensor(qs, dtype=torch.float64)).tolist()


def _nan_if_none(value: float | None) -> float:
    """A figure the schema allows to be null (not measured) as the NaN a rank's statistics hold until written."""
    return math.nan if value is None else value


def _mean(values: Sequence[float | None]) -> float:
    """The mean of the measured values: NaN and None are not measured (a rank's figure is NaN until written)."""
    measured = [v for v in values if v is not None and not math.isnan(v)]
    return sum(measured) / len(measured) if measured else math.nan


def _rank_stats(rows: list[dict[str, Any]], rank: int, world_size: int = 1) -> RankStats:
    """One rank's statistics over its measured rows (times in seconds, NaN where not measured)."""
    steps = [r["step_s"] for r in rows]
    p50, p90, p99 = _quantiles(steps, (0.5, 0.9, 0.99))
    window = sum(r["iter_s"] for r in rows)
    data = sum(r["data_s"] for r in rows)
    samples = sum(r["samples"] for r in rows)
    forward, backward, optimizer = (_mean([r[f"{p}_s"] for r in rows]) for p in _PHASES)
    data_mean = data / len(rows) if rows else math.nan
    # What this rank does without waiting for others: see the module docstring.
    own = data_mean + _mean(steps) if math.isnan(forward) else data_mean + forward + optimizer
    return {
        "rank": rank,
        "iterations": len(rows),
        "samples": samples,
        "window_s": window,
        "samples_per_s": samples / window if window > 0 else math.nan,
        "step_s_mean": _mean(steps),
        "step_s_p50": p50,
        "step_s_p90": p90,
        "step_s_p99": p99,
        "data_s_mean": data_mean,
        "data_share": data / window if window > 0 else math.nan,
        "forward_s_mean": forward,
        "backward_s_mean": backward,
        "optimizer_s_mean": optimizer,
        "own_s_mean": own,
        **_comm_stats(rows, backward, world_size),
        "handlers_s_mean": _mean([r.get("handlers_s", math.nan) for r in rows]),
    }


class _CommStats(TypedDict):
    """The part of :class:`~ignite_ddl.core.schema.RankStats` on gradient communication."""

    comm_s_mean: float
    exposed_comm_s_mean: float
    backward_compute_s_mean: float
    overlap: float
    comm_bytes_per_step: float
    buckets_per_step: float
    busbw_Bps: float


def _comm_stats(rows: list[dict[str, Any]], backward_s_mean: float, world_size: int) -> _CommStats:
    """Gradient communication over a rank's measured rows (see :mod:`ignite_ddl.measure.comm`); NaN where not timed."""
    timed = [r for r in rows if not math.isnan(r.get("comm_s", math.nan))]
    comm, exposed = sum(r["comm_s"] for r in timed), sum(r["exposed_comm_s"] for r in timed)
    nbytes = sum(r["comm_bytes"] for r in timed)
    exposed_mean = exposed / len(timed) if timed else math.nan
    return {
        "comm_s_mean": comm / len(timed) if timed else math.nan,
        "exposed_comm_s_mean": exposed_mean,
        # Backward minus the all-reduce no gradient compute hid: the gradient compute (and its overlapped part).
        "backward_compute_s_mean": backward_s_mean - exposed_mean if timed else math.nan,
        "overlap": 1 - exposed / comm if comm > 0 else math.nan,
        "comm_bytes_per_step": nbytes / len(timed) if timed else math.nan,
        "buckets_per_step": _mean([r["buckets"] for r in timed]),
        "busbw_Bps": nbytes / comm * allreduce_bus_factor(world_size) if comm > 0 else math.nan,
    }


# The figures over all ranks, as StepStats holds them ("global" is a keyword: the functional form).
_Combined = TypedDict("_Combined", {"global": GlobalStats, "straggler": Straggler | None, "comm_wait": CommWait | None})


def _combine(ranks: list[RankStats], all_steps: list[float]) -> _Combined:
    """Global figures from all ranks' statistics and every rank's measured step times."""
    samples = sum(r["samples"] for r in ranks)
    window = max((r["window_s"] for r in ranks), default=0.0)
    p50, p90, p99 = _quantiles(all_steps, (0.5, 0.9, 0.99))
    own = [r["own_s_mean"] for r in ranks]
    straggler: Straggler | None = None
    if len(own) > 1 and not any(math.isnan(o) for o in own):
        slowest = max(range(len(ranks)), key=lambda i: own[i])
        median = statistics.median(own)
        straggler = {
            "rank": ranks[slowest]["rank"],
            "own_s_mean": own[slowest],
            "median_own_s_mean": median,
            "ratio": own[slowest] / median if median > 0 else math.nan,
        }
    figures: GlobalStats = {
        "samples": samples,
        "window_s": window,
        "samples_per_s": samples / window if window > 0 else math.nan,
        # every rank takes the same optimizer steps: the fewest measured, over the slowest rank's window
        "optimizer_steps_per_s": min(r["iterations"] for r in ranks) / window if window > 0 else math.nan,
        "step_s_p50": p50,
        "step_s_p90": p90,
        "step_s_p99": p99,
        "data_share": _mean([r["data_share"] for r in ranks]),
        "comm_s_mean": _mean([r["comm_s_mean"] for r in ranks]),
        "exposed_comm_s_mean": _mean([r["exposed_comm_s_mean"] for r in ranks]),
        "overlap": _mean([r["overlap"] for r in ranks]),
        "busbw_Bps": _mean([r["busbw_Bps"] for r in ranks]),
    }
    return {
        "global": figures,
        "straggler": straggler,
        # Who waits for whom inside the all-reduce: the fast ranks' extra exposed communication (measure.comm).
        "comm_wait": waits([_nan_if_none(r["exposed_comm_s_mean"]) for r in ranks]),
    }


def format_steps(steps: StepStats) -> str:
    """The gathered step statistics as a table with a row per rank, then the global figures."""
    timed = any(not math.isnan(_nan_if_none(r["comm_s_mean"])) for r in steps["ranks"])
    header = ("rank", "iters", "samples/s", "step p50 ms", "p90 ms", "data %", "fwd ms", "bwd ms", "opt ms", "own ms")
    comm_header = ("comm ms", "exposed ms", "overlap %", "busbw GB/s")
    rows = []
    for r in steps["ranks"]:
        phases_ms = [milliseconds(r[phase]) for phase in ("forward_s_mean", "backward_s_mean", "optimizer_s_mean")]
        phases_ms.append(milliseconds(r["own_s_mean"]))
        row = [
            r["rank"],
            r["iterations"],
            "-" if math.isnan(r["samples_per_s"]) else f"{r['samples_per_s']:.0f}",  # nan: no measured iteration
            milliseconds(r["step_s_p50"]),
            milliseconds(r["step_s_p90"]),
            "-" if math.isnan(r["data_share"]) else f"{100 * r['data_share']:.1f}",
            *phases_ms,
        ]
        if timed:
            row += [
                milliseconds(r["comm_s_mean"]),
                milliseconds(r["exposed_comm_s_mean"]),
                _pct(r["overlap"]),
                _gb(r["busbw_Bps"]),
            ]
        rows.append(row)
    lines = format_table(header + comm_header if timed else header, rows).splitlines()
    g, straggler = steps["global"], steps["straggler"]
    if not g["samples"]:
        lines.append(
            f"global: no measured iterations: all {steps['warmup_iterations']} were warm-up (run more iterations, "
            "or lower --warmup-iters); throughput is the epochs' figure"
        )
    else:
        lines.append(
            f"global: {g['samples_per_s']:.0f} samples/s over {g['window_s']:.2f} s "
            f"(warm-up of {_warmup_text(steps)} excluded), step p50 {milliseconds(g['step_s_p50'])} ms"
        )
    steady = steps.get("steady")
    if steady is not None and not steady["settled"]:
        lines.append(
            "warning: step times never settled (MSER-5 finds the calmest stretch in the second half of the run): "
            "these figures are not a steady state; run longer"
        )
    compiled = steps.get("compile")
    if compiled is not None:
        lines.append(_compile_sentence(compiled))
    if straggler is not None:
        lines.append(f"straggler: rank {straggler['rank']}, own time {straggler['ratio']:.2f}x the median rank's")
    wait = steps.get("comm_wait")
    if wait is not None:
        lines.append(wait_sentence(wait))
    return "\n".join(lines)


def _warmup_text(steps: StepStats) -> str:
    """How many iterations the warm-up was, and why when it was more than the fixed count."""
    total, steady = steps["warmup_iterations"], steps.get("steady")
    if steady is None or total <= steady["fixed_warmup_iterations"]:
        return f"{total} iterations"
    detected = max(steady["detected_warmup_iterations"], default=0)
    parts = [f"{steady['fixed_warmup_iterations']} fixed"]
    compiled = steps.get("compile")
    if compiled is not None and total - detected > steady["fixed_warmup_iterations"]:
        parts.append("until compilation ended")
    if detected:
        parts.append(f"{detected} more while step times settled (MSER-5)")
    return f"{total} iterations: {', '.join(parts)}"


def _compile_sentence(compiled: CompileStats) -> str:
    """What compilation cost in a run, and its recompilations with what they suggest."""
    from ignite_ddl.measure.compilation import recompile_hint

    first = len(compiled["iterations"]) - compiled["recompilations"]
    text = (
        f"torch.compile: {compiled['compile_s']:.1f} s of compilation (beyond a steady iteration) in "
        f"{first} iteration(s), left out of the throughput"
    )
    if compiled["recompilations"]:
        hint = recompile_hint(compiled["reasons"])
        reason = compiled["reasons"][0] if compiled["reasons"] else "reason not recorded"
        text += f"; recompiled {compiled['recompilations']} time(s): {hint or reason}" + (
            f" ({reason})" if hint and compiled["reasons"] else ""
        )
    return text


def wait_sentence(wait: CommWait) -> str:
    """``comm_wait`` in words: who waits how long per step, for which rank, inside the all-reduce."""
    others = [r for r in range(len(wait["wait_s"])) if r != wait["rank"]]
    return all_reduce_wait(others, wait["median_wait_s"], wait["rank"])


def _pct(share: float | None) -> str:
    return "-" if share is None or math.isnan(share) else f"{100 * share:.0f}"


def _gb(bytes_per_s: float | None) -> str:
    return "-" if bytes_per_s is None or math.isnan(bytes_per_s) else f"{bytes_per_s / 1e9:.3f}"
