"""A configuration's figures, made from the summaries of its runs added one at a time (:class:`Figures`): what is
kept grows with the runs and configurations, not with the size of the results; two sets of runs merge, and the
figures fill a :class:`~ignite_ddl.report.model.ConfigResult`."""

from __future__ import annotations

import math
import statistics
import sys
from typing import Any, TypeGuard, cast

from ignite_ddl.core.schema import RankStats, StepStats, Summary, shown_figures
from ignite_ddl.report.model import STEP_PARTS, ConfigResult
from ignite_ddl.report.stats import mean_interval
from ignite_ddl.report.values import as_count, as_dict, as_float, is_number

__all__ = ["FLOPS_FIGURES", "SHOWN", "Figures", "Mean"]

SHOWN = shown_figures()  # (path, how) of each figure the report shows without code of its own
FLOPS_FIGURES = ("achieved_flops_per_s", "utilisation_attainable", "utilisation_peak")
PHASE_FIGURES = ("samples_per_s", "step_s_p50", "comm_bytes_per_step")  # of the warm-up phase, averaged over runs


class Figures:
    """The figures of a set of runs (:meth:`add` a summary at a time, :meth:`merge` two sets), what a
    configuration's figures are made from; ``where`` orders the runs as they were written (ties, firsts)."""

    def __init__(self) -> None:
        self.summaries = 0
        self.first: tuple[Any, dict[str, Any]] | None = None  # (where, scalars of the first summary written)
        self.p50, self.p90, self.data_share = Mean(), Mean(), Mean()
        self.steps = 0
        self.world: int | None = None  # the fewest ranks of any run's steps
        self.rank_parts: list[dict[str, Mean]] = []
        self.comm_timed = False
        self.overlap, self.busbw, self.reference, self.buckets = Mean(), Mean(), Mean(), Mean()
        self.worst_wait: tuple[float, Any, dict[str, Any]] | None = None  # (median wait, where, comm_wait)
        self.wait = Mean()
        self.straggler: tuple[float, Any, dict[str, Any]] | None = None  # (ratio, where, straggler)
        self.val_accuracy, self.val_loss = Mean(), Mean()
        self.iterations: int | None = None
        self.profiler: tuple[Any, Any] | None = None  # (where, profiler) of the first run written with one
        self.matrices: dict[int, tuple[Any, list[list[int]]]] = {}  # size -> (where of the first, sum)
        self.cuda: list[float] = []
        self.host: list[float] = []
        self.held, self.private = Mean(), Mean()
        self.flops = {key: Mean() for key in ("total", *FLOPS_FIGURES)}
        self.matmul_rates: list[float] = []  # the matmul rate each rank of each run measured (before schema 3)
        self.machine_peaks: list[tuple[float, bool]] = []  # (peak, stable) of each run's machine (schema 3)
        self.uncounted: dict[str, set[str]] = {"by_formula": set(), "not_counted": set()}  # module types
        self.compile_s: list[float] = []
        self.recompilations = 0
        self.reasons: list[str] = []
        self.comm_bytes, self.cross_comm, self.cross_backward = Mean(), Mean(), Mean()
        self.unsettled = 0
        self.phase_span: tuple[Any, str, int, int] | None = None  # (where, cause, first, last) of the first run
        self.phase = {key: Mean() for key in PHASE_FIGURES}  # the warm-up phase's figures (an option's change)
        self.shown = {path: Mean() for path, _ in SHOWN}  # every figure the schema marks Shown, read alike

    def add(self, summary: Summary, where: Any) -> None:
        # Typed as the schema's Summary so that every key read here is checked against it (mypy); each value is
        # still tested before use: a results file from an older version may lack it or hold another shape.
        self.summaries += 1
        for path, mean in self.shown.items():
            value: Any = summary
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            mean.add(value)
        if self.first is None or where < self.first[0]:
            self.first = (
                where,
                {
                    "threads_per_process": summary.get("threads_per_process"),
                    "cpu_cores": summary.get("cpu_cores"),
                    "device_type": as_dict(summary.get("device")).get("type"),
                    "global_batch": as_dict(summary.get("batch")).get("global"),
                    "strategy": summary.get("strategy") if isinstance(summary.get("strategy"), str) else None,
                    "workload": summary.get("workload") if isinstance(summary.get("workload"), dict) else None,
                },
            )
        steps = summary.get("steps")
        if _well_formed_steps(steps):
            self._add_steps(cast(StepStats, steps), where)
        self.val_accuracy.add(summary.get("val_accuracy"))
        self.val_loss.add(summary.get("val_loss"))
        if summary.get("profiler") and (self.profiler is None or where < self.profiler[0]):
            self.profiler = (where, summary["profiler"])
        matrix = summary.get("confusion_matrix")
        if _square(matrix):
            self._add_matrix(len(matrix), where, matrix)
        memory = as_dict(summary.get("memory"))
        top = as_dict(memory.get("max"))
        if is_number(top.get("cuda_max_reserved_bytes")):
            self.cuda.append(float(top["cuda_max_reserved_bytes"]))
        if is_number(top.get("peak_rss_bytes")):
            self.host.append(float(top["peak_rss_bytes"]))
        self.held.add(top.get("held_bytes"))
        ranks = memory.get("ranks", [])
        self.private.add(max((r.get("workers_private_bytes") or 0 for r in ranks if isinstance(r, dict)), default=None))
        flops = as_dict(summary.get("flops"))
        self.flops["total"].add(as_dict(flops.get("per_sample")).get("total"))
        for key in FLOPS_FIGURES:
            self.flops[key].add(flops.get(key))
        flops_ranks = flops.get("ranks")
        flops_ranks = flops_ranks if isinstance(flops_ranks, list) else []
        rates = [as_float(as_dict(r).get("attainable_flops_per_s")) for r in flops_ranks]
        machine = as_dict(flops.get("machine_peak"))
        peak = as_float(machine.get("flops_per_s"))
        if peak is not None and peak > 0:  # each rank against its share of it: the run's own figures stand
            self.machine_peaks.append((peak, machine.get("stable") is not False))
        else:  # an older run measured its own rate per rank: the report judges it against one reference
            self.matmul_rates += [r for r in rates if r is not None and r > 0]
        for key, found in self.uncounted.items():
            names = flops.get(key)
            found.update(str(n)[:80] for n in (names if isinstance(names, list) else [])[:8])

    def _add_step_extras(self, steps: StepStats, where: Any) -> None:
        """Compilation, bytes on the wire, steady state and the DDP cross-check of one run's steps."""
        compiled = as_dict(steps.get("compile"))
        if is_number(compiled.get("compile_s")):
            self.compile_s.append(float(compiled["compile_s"]))
        if as_count(compiled.get("recompilations")):
            self.recompilations = max(self.recompilations, int(compiled["recompilations"]))
            reasons = compiled.get("reasons")
            if not self.reasons and isinstance(reasons, list):
                self.reasons = [str(r)[:200] for r in reasons[:3]]
        if as_dict(steps.get("steady")).get("settled") is False:
            self.unsettled += 1
        phase = as_dict(steps.get("warmup_phase"))
        if isinstance(phase.get("cause"), str) and as_count(phase.get("first_iteration")):
            for key, mean in self.phase.items():
                mean.add(phase.get(key))
            last = as_count(phase.get("last_iteration")) or phase["first_iteration"]
            if self.phase_span is None or where < self.phase_span[0]:
                self.phase_span = (where, sys.intern(phase["cause"][:40]), phase["first_iteration"], last)
        for rank in steps["ranks"]:
            if isinstance(rank, dict):
                self.comm_bytes.add(rank.get("comm_bytes_per_step"))
        checks = steps.get("ddp_crosscheck")
        for check in checks if isinstance(checks, list) else []:
            ratio = as_dict(as_dict(check).get("ratio"))
            self.cross_comm.add(ratio.get("comm"))
            self.cross_backward.add(ratio.get("backward"))

    def _add_steps(self, steps: StepStats, where: Any) -> None:
        self.steps += 1
        self._add_step_extras(steps, where)
        figures, ranks = steps["global"], steps["ranks"]
        self.p50.add(figures.get("step_s_p50"))
        self.p90.add(figures.get("step_s_p90"))
        self.data_share.add(figures.get("data_share"))
        self.world = len(ranks) if self.world is None else min(self.world, len(ranks))
        for number, rank in enumerate(ranks):
            if number == len(self.rank_parts):
                self.rank_parts.append({part: Mean() for part in STEP_PARTS})
            parts = self.rank_parts[number]
            for part, value in _step_parts(rank).items():
                parts[part].add(value)
            self.comm_timed = self.comm_timed or is_number(rank.get("exposed_comm_s_mean"))
            self.buckets.add(rank.get("buckets_per_step"))
        self.overlap.add(figures.get("overlap"))
        self.busbw.add(figures.get("busbw_Bps"))
        self.reference.add(as_dict(steps.get("comm_reference")).get("busbw_Bps"))
        wait = steps.get("comm_wait")
        if isinstance(wait, dict) and is_number(wait.get("median_wait_s")):
            self.worst_wait = _larger(self.worst_wait, (wait["median_wait_s"], where, dict(wait)))
            self.wait.add(wait["median_wait_s"])
        straggler = steps.get("straggler")
        if isinstance(straggler, dict) and is_number(straggler.get("ratio")):
            self.straggler = _larger(self.straggler, (cast(float, straggler["ratio"]), where, dict(straggler)))
        if ranks:
            fewest = min(r.get("iterations", 0) for r in ranks)
            self.iterations = fewest if self.iterations is None else min(self.iterations, fewest)

    def _add_matrix(self, size: int, where: Any, matrix: list[list[int]]) -> None:
        found = self.matrices.get(size)
        if found is None:
            self.matrices[size] = (where, [list(row) for row in matrix])
            return
        for total, row in zip(found[1], matrix):
            for j, v in enumerate(row):
                total[j] += v
        if where < found[0]:
            self.matrices[size] = (where, found[1])

    def merge(self, other: Figures) -> None:
        """Add the runs of ``other`` (disjoint from these) to these."""
        self.summaries += other.summaries
        if other.first is not None and (self.first is None or other.first[0] < self.first[0]):
            self.first = other.first
        for mine, theirs in (
            (self.p50, other.p50),
            (self.p90, other.p90),
            (self.data_share, other.data_share),
            (self.overlap, other.overlap),
            (self.busbw, other.busbw),
            (self.reference, other.reference),
            (self.buckets, other.buckets),
            (self.wait, other.wait),
            (self.val_accuracy, other.val_accuracy),
            (self.val_loss, other.val_loss),
            (self.held, other.held),
            (self.private, other.private),
            *((self.flops[key], other.flops[key]) for key in self.flops),
            *((self.shown[path], other.shown[path]) for path in self.shown),
            (self.comm_bytes, other.comm_bytes),
            (self.cross_comm, other.cross_comm),
            (self.cross_backward, other.cross_backward),
            *((self.phase[key], other.phase[key]) for key in self.phase),
        ):
            mine.merge(theirs)
        self.compile_s += other.compile_s
        self.matmul_rates += other.matmul_rates
        self.machine_peaks += other.machine_peaks
        for key, found in self.uncounted.items():
            found.update(other.uncounted[key])
        self.recompilations = max(self.recompilations, other.recompilations)
        self.reasons = self.reasons or other.reasons
        self.unsettled += other.unsettled
        if other.phase_span is not None and (self.phase_span is None or other.phase_span[0] < self.phase_span[0]):
            self.phase_span = other.phase_span
        self.steps += other.steps
        if other.world is not None:
            self.world = other.world if self.world is None else min(self.world, other.world)
        for number, parts in enumerate(other.rank_parts):
            if number == len(self.rank_parts):
                self.rank_parts.append({part: Mean() for part in STEP_PARTS})
            for part, mean in parts.items():
                self.rank_parts[number][part].merge(mean)
        self.comm_timed = self.comm_timed or other.comm_timed
        if other.worst_wait is not None:
            self.worst_wait = _larger(self.worst_wait, other.worst_wait)
        if other.straggler is not None:
            self.straggler = _larger(self.straggler, other.straggler)
        if other.iterations is not None:
            self.iterations = other.iterations if self.iterations is None else min(self.iterations, other.iterations)
        if other.profiler is not None and (self.profiler is None or other.profiler[0] < self.profiler[0]):
            self.profiler = other.profiler
        for size, (where, total) in other.matrices.items():
            self._add_matrix(size, where, total)
        self.cuda += other.cuda
        self.host += other.host

    def fill(self, config: ConfigResult) -> None:
        config.throughput = mean_interval(config.samples_per_s)
        if not self.summaries:
            return
        config.step_p50_s, config.step_p90_s = self.p50.value, self.p90.value
        for path, shown in SHOWN:
            value = self.shown[path].value
            config.shown[shown.column] = None if value is None else value * shown.scale
        config.data_share = self.data_share.value
        if self.steps:
            parts = self.rank_parts[: self.world or 0]
            config.rank_phases = [{p: rank[p].value or 0.0 for p in STEP_PARTS} for rank in parts]
            config.phases = {p: _mean([r[p] for r in config.rank_phases]) or 0.0 for p in STEP_PARTS}
            config.comm_timed = self.comm_timed
            config.overlap, config.buckets_per_step = self.overlap.value, self.buckets.value
            config.busbw_Bps, config.reference_busbw_Bps = self.busbw.value, self.reference.value
            iteration = sum(config.phases.values())
            if config.comm_timed and iteration > 0:
                config.exposed_share = config.phases["exposed_comm"] / iteration
            if self.worst_wait is not None and iteration > 0:
                worst = self.worst_wait[2]
                wait_s = self.wait.value or 0.0
                others = [r for r in range(len(worst.get("wait_s") or [])) if r != worst.get("rank")]
                share = wait_s / iteration
                config.comm_wait = {"rank": worst.get("rank"), "waiting": others, "wait_s": wait_s, "share": share}
        config.straggler = self.straggler[2] if self.straggler is not None else None
        config.val_accuracy, config.val_loss = self.val_accuracy.value, self.val_loss.value
        first = self.first[1] if self.first is not None else {}
        config.threads_per_process, config.cpu_cores = first["threads_per_process"], first["cpu_cores"]
        config.device_type, config.global_batch = first["device_type"], first["global_batch"]
        config.strategy = first["strategy"]
        config.workload_info = first.get("workload")
        config.measured_iterations = self.iterations
        config.profiler = self.profiler[1] if self.profiler is not None else None
        if self.matrices:
            config.confusion_matrix = min(self.matrices.values(), key=lambda found: found[0])[1]
        if self.cuda:
            config.peak_memory, config.memory_kind = mean_interval(self.cuda), "CUDA reserved"
        else:
            config.peak_memory, config.memory_kind = mean_interval(self.host), "resident" if self.host else None
        config.held_bytes, config.workers_memory = self.held.value, self.private.value
        config.flops_per_sample = self.flops["total"].value
        for key in FLOPS_FIGURES:
            setattr(config, key, self.flops[key].value)
        config.matmul_rate = max(self.matmul_rates, default=None)
        if self.machine_peaks:
            config.machine_peak = max(peak for peak, _ in self.machine_peaks)
            config.machine_peak_stable = all(stable for _, stable in self.machine_peaks)
        config.flops_by_formula = sorted(self.uncounted["by_formula"])
        config.flops_not_counted = sorted(self.uncounted["not_counted"])
        config.compile_s = mean_interval(self.compile_s) if self.compile_s else None
        config.recompilations, config.recompile_reasons = self.recompilations, self.reasons
        config.comm_bytes_per_step, config.unsettled_runs = self.comm_bytes.value, self.unsettled
        if self.phase_span is not None:
            _, cause, start, end = self.phase_span
            figures = {key: mean.value for key, mean in self.phase.items()}
            config.warmup_phase = {"cause": cause, "first_iteration": start, "last_iteration": end, **figures}
        if self.cross_comm.value is not None:
            config.ddp_crosscheck = {"comm": self.cross_comm.value, "backward": self.cross_backward.value or math.nan}


def _larger(
    a: tuple[float, Any, dict[str, Any]] | None, b: tuple[float, Any, dict[str, Any]]
) -> tuple[float, Any, dict[str, Any]]:
    """The larger figure of two ``(figure, where, record)``; on a tie, the one written first."""
    if a is None or b[0] > a[0] or (b[0] == a[0] and b[1] < a[1]):
        return b
    return a


class Mean:
    """The mean of the finite numbers added, one at a time: what :func:`statistics.fmean` gives for all of them
    (Shewchuk's exact partial sums, summed with :func:`math.fsum`), without keeping them."""

    __slots__ = ("n", "partials")

    def __init__(self) -> None:
        self.n = 0
        self.partials: list[float] = []

    def add(self, value: Any) -> None:
        if not is_number(value):
            return
        self._add(float(value))
        self.n += 1

    def _add(self, x: float) -> None:
        partials, i = self.partials, 0
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            high = x + y
            low = y - (high - x)
            if low:
                partials[i] = low
                i += 1
            x = high
        partials[i:] = [x]

    def merge(self, other: Mean) -> None:
        for x in other.partials:  # exact: the partials sum to the other's values exactly
            self._add(x)
        self.n += other.n

    @property
    def value(self) -> float | None:
        return math.fsum(self.partials) / self.n if self.n else None


def _mean(values: list[Any]) -> float | None:
    """Mean of the finite numbers among ``values`` (None if there are none)."""
    numbers = [float(v) for v in values if is_number(v)]
    return statistics.fmean(numbers) if numbers else None


def _well_formed_steps(steps: Any) -> bool:
    return (
        isinstance(steps, dict)
        and isinstance(steps.get("global"), dict)
        and isinstance(steps.get("ranks"), list)
        and all(isinstance(r, dict) for r in steps["ranks"])
    )


def _step_parts(rank: RankStats) -> dict[str, float | None]:
    """One rank's mean step split into :data:`STEP_PARTS` (seconds); without communication timing, backward
    compute holds the whole backward, all-reduce included."""
    exposed = as_float(rank.get("exposed_comm_s_mean"))
    backward = as_float(rank.get("backward_s_mean"))
    return {
        "data": as_float(rank.get("data_s_mean")),
        "forward": as_float(rank.get("forward_s_mean")),
        "backward_compute": backward if exposed is None or backward is None else backward - exposed,
        "exposed_comm": exposed,
        "optimizer": as_float(rank.get("optimizer_s_mean")),
        "handlers": as_float(rank.get("handlers_s_mean")),
    }


def _square(matrix: Any) -> TypeGuard[list[list[int]]]:
    """A non-empty square matrix of integers."""
    return (
        isinstance(matrix, list)
        and bool(matrix)
        and all(isinstance(row, list) and len(row) == len(matrix) for row in matrix)
        and all(isinstance(v, int) and not isinstance(v, bool) for row in matrix for v in row)
    )
