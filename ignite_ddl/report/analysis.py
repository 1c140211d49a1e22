"""What a sweep's results say: per configuration, throughput with its confidence interval over repeats, speed-up
and efficiency with theirs; per workload, a verdict that names a best configuration only when the data separates
it; and every reason to doubt a number. Plain data (dataclasses), for the report and for notebooks alike.

A **workload** is what fixes the work done per sample (by default: model, dataset, amp, optimizer, sync_bn;
a spec's ``workload`` key may name others). Configurations are ranked only against others of their workload, and
speed-up is always against the same configuration run with one process.

Example:
    >>> def run(index, repeat, procs, rate):
    ...     config = {"model": "cnn", "nproc_per_node": procs, "batch_size": 64}
    ...     summary = {"world_size": procs, "samples_per_s": rate, "threads_per_process": 2 // procs}
    ...     return {"key": f"k{index}-r{repeat}", "index": index, "repeat": repeat, "status": "completed",
    ...             "grid": {"nproc_per_node": procs}, "config": config, "summary": summary}
    >>> records = [run(0, r, 1, v) for r, v in enumerate([100, 102, 98])]
    >>> records += [run(1, r, 2, v) for r, v in enumerate([150, 153, 147])]
    >>> analysis = analyze(records)
    >>> verdict = analysis.verdicts[0]
    >>> verdict.best, round(analysis.configs[1].speedup.value, 2)
    ('cfg001', 1.5)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ignite_ddl.core.config import LAYOUT_OPTIONS, WORKLOAD_OPTIONS
from ignite_ddl.core.results import load_results, read_json
from ignite_ddl.core.text import all_reduce_wait
from ignite_ddl.measure.contention import CONTENTION_THRESHOLD
from ignite_ddl.report.stats import (
    CONFIDENCE,
    EQUIVALENCE_MARGIN,
    Estimate,
    equivalent,
    mean_interval,
    ratio_interval,
    repeats_to_separate,
    separated,
    welch_p,
)

__all__ = [
    "Analysis",
    "ConfigResult",
    "Flag",
    "RunResult",
    "Verdict",
    "analyze",
    "load",
    "notes",
    "superlinear",
    "workload_of",
]

MIB = float(1 << 20)
MIN_REPEATS = 3  # fewer repeats than this make a verdict provisional
SUPERLINEAR = 1.0  # efficiency above this is suspect: never printed without its flag
CV_HIGH = 0.10  # repeats disagreeing by more than this (standard deviation / mean) make a wide interval
FEW_ITERATIONS = 20  # measured iterations per rank below this make a short, transient-dominated window
DATA_WAIT_HIGH = 0.25
STRAGGLER_HIGH = 1.2
EXPOSED_COMM_HIGH = 0.25  # exposed communication above this share of the step is worth acting on
COMM_WAIT_HIGH = 0.10  # a rank waiting in the all-reduce more than this share of its step for another one
# Where a step's time goes, in the order it is spent; "handlers" is what other handlers add to each iteration.
STEP_PARTS = ("data", "forward", "backward_compute", "exposed_comm", "optimizer", "handlers")
EFFICIENCY_LOW = 0.7

FLAG_MEANINGS = {
    "contended": "other processes used the CPUs (or GPUs) while the run measured, so its timings include waiting "
    "for them; it is left out of the verdict (re-run it, or sweep with --rerun-contended N), unless the report "
    "counts contended runs (--include-contended): then every figure is marked as measured under contention",
    "superlinear": "more than N times the 1-process throughput on N processes is not how data parallelism "
    "scales: suspect noise, caching (a per-rank share that now fits in cache) or an unfair baseline",
    "high-variation": "repeats disagree by more than 10 % (standard deviation / mean): the machine was noisy or the "
    "runs too short; the interval is wide and comparisons involving it are weak",
    "diverged": "the training loss became NaN/infinite or exploded: the run did not train, and arithmetic on "
    "NaN can run at a different speed, so its throughput is not a training speed",
    "oversubscribed": "more processes x threads than CPU cores: ranks time-slice the cores and wait on each "
    "other, so the figures measure the scheduler more than the configuration",
    "few-iterations": f"fewer than {FEW_ITERATIONS} measured iterations per rank after warm-up: start-up "
    "transients weigh heavily; raise epochs or train_size, or lower warmup_iters",
    "unreadable": "lines of the results that are not run records (a write cut short, damage, foreign data) were "
    "skipped, and every record around them was read; a sweep's --resume moves them to results.jsonl.rejected",
    "out-of-memory": "a run ran out of memory (an allocation failed, or the rank was killed near its memory limit): "
    "the configuration does not fit this machine and is never recommended",
    "does-not-fit": "the configuration's peak memory per rank is above the sweep's memory_limit_mb: it is never "
    "recommended, however fast it is",
    "provisional": f"fewer than {MIN_REPEATS} usable repeats per configuration (completed, and not contended unless "
    "contended runs are counted): intervals are very wide (or missing) and the verdict may change with more runs",
}


@dataclass
class Flag:
    """One reason to doubt a figure: its kind (a key of :data:`FLAG_MEANINGS`), where, and the specifics."""

    kind: str
    config: str | None  # cfgNNN, or None for the whole sweep / a workload
    detail: str

    @property
    def meaning(self) -> str:
        return FLAG_MEANINGS[self.kind]


@dataclass
class RunResult:
    """One run as the analysis sees it."""

    repeat: int
    attempt: int
    position: int
    status: str
    samples_per_s: float | None
    contended: bool
    foreign_cpu_share: float | None
    diverged: str | None
    used: bool  # counts in the configuration's estimate and the verdict
    run_dir: str
    error: str | None
    measured_s: float | None
    elapsed_s: float | None
    train_time_s: float | None = None  # training epochs, evaluation excluded
    engine_s: float | None = None  # the whole Engine.run: training, evaluation, end-of-epoch handlers


@dataclass
class ConfigResult:
    """One configuration of a sweep, its repeats combined."""

    index: int
    grid: dict[str, Any]
    config: dict[str, Any]
    workload: str
    world_size: int
    runs: list[RunResult] = field(default_factory=list)
    throughput: Estimate = field(default_factory=lambda: Estimate(None))
    speedup: Estimate | None = None
    efficiency: Estimate | None = None
    baseline: str | None = None  # the 1-process configuration speed-up is measured against
    step_p50_s: float | None = None
    step_p90_s: float | None = None
    data_share: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # STEP_PARTS in seconds, mean over ranks and runs
    rank_phases: list[dict[str, float]] = field(default_factory=list)  # the same per rank
    comm_timed: bool = False  # exposed communication measured (else backward_compute includes the all-reduce)
    overlap: float | None = None  # share of the gradient communication hidden behind backward compute
    buckets_per_step: float | None = None  # DDP gradient buckets (all-reduce calls) per step
    exposed_share: float | None = None  # exposed communication / iteration time
    busbw_Bps: float | None = None  # achieved all-reduce bus bandwidth during training
    reference_busbw_Bps: float | None = None  # an isolated all-reduce of the same message size, same ranks
    comm_wait: dict[str, Any] | None = None  # {"rank": waited for, "waiting": rank, "wait_s", "share"}
    flops_per_sample: float | None = None  # model FLOPs, forward + backward
    achieved_flops_per_s: float | None = None  # per rank, mean over ranks and runs
    utilisation_attainable: float | None = None  # of the matmul rate measured on the machine
    utilisation_peak: float | None = None  # of the GPU's datasheet peak (None where no datasheet applies)
    straggler: dict[str, Any] | None = None
    val_accuracy: float | None = None
    threads_per_process: int | None = None
    cpu_cores: int | None = None
    device_type: str | None = None
    measured_iterations: int | None = None
    global_batch: int | None = None
    profiler: dict[str, Any] | None = None
    confusion_matrix: list[list[int]] | None = None  # validation, summed over the runs used
    strategy: str | None = None  # none / ddp / fsdp, as the runs resolved it
    peak_memory: Estimate = field(default_factory=lambda: Estimate(None))  # bytes: the largest rank's peak per run
    memory_kind: str | None = None  # what peak_memory is: "resident" (host) or "CUDA reserved"
    workers_memory: float | None = None  # bytes the largest rank's DataLoader workers hold of their own
    held_bytes: float | None = None  # parameters + gradients + optimizer state of the largest rank
    out_of_memory: int = 0  # runs that ran out of memory
    fits: bool = True  # within the spec's memory_limit_mb (and no run ran out of memory)

    @property
    def name(self) -> str:
        return f"cfg{self.index:03d}"

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.grid.items())

    @property
    def used_runs(self) -> list[RunResult]:
        return [r for r in self.runs if r.used]

    @property
    def samples_per_s(self) -> list[float]:
        return [r.samples_per_s for r in self.used_runs if r.samples_per_s is not None]


@dataclass
class Verdict:
    """What the data supports within one workload."""

    workload: str
    configs: list[str]  # every configuration of the workload, fastest mean first
    best: str | None  # named only when separated from every other configuration
    tied: list[str]  # when no best: the configurations that cannot be told apart from the fastest
    provisional: bool
    runner_up: str | None = None
    difference: float | None = None  # fastest over runner-up, minus 1
    welch_p: float | None = None  # Welch's t-test, fastest vs runner-up
    repeats_needed: dict[str, int | None] = field(default_factory=dict)  # tied config -> repeats to separate it
    reason: str = ""
    unmeasured: list[str] = field(default_factory=list)  # configurations of the workload with no usable run
    recommended: str | None = None  # the configuration to use: the best, or the cheapest of those tied with it
    recommendation: str = ""  # why, in words
    does_not_fit: list[str] = field(default_factory=list)  # above the memory limit, or ran out of memory
    equivalent: bool = False  # every tied configuration shown within ``margin`` of the fastest (two one-sided tests)
    margin: float = EQUIVALENCE_MARGIN


@dataclass
class Analysis:
    """Everything the report says, as data."""

    configs: list[ConfigResult]
    verdicts: list[Verdict]
    flags: list[Flag]
    workload_axes: list[str]
    confidence: float
    rule: str
    include_contended: bool
    contention_threshold: float
    measured_s: float
    runs_elapsed_s: float
    sweep_wall_s: float | None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def stopped(self) -> str | None:
        """Why the sweep's last session stopped early (the machine was too busy to compare), or None."""
        sessions = self.meta.get("sessions") or [{}]
        stop = sessions[-1].get("stopped") if isinstance(sessions[-1], dict) else None
        return str(stop.get("reason")) if isinstance(stop, dict) and stop.get("reason") else None

    @property
    def adaptive(self) -> dict[str, Any] | None:
        """Where adaptive repeats (``repeats: auto``) left the comparison: ``{"rounds", "outcome"}``, or None."""
        sessions = self.meta.get("sessions") or [{}]
        state = sessions[-1].get("adaptive") if isinstance(sessions[-1], dict) else None
        return state if isinstance(state, dict) else None

    @property
    def contended_used(self) -> int:
        """Runs counted in the figures that were contended (only with ``include_contended``)."""
        return sum(r.used and r.contended for c in self.configs for r in c.runs)

    @property
    def used_runs(self) -> int:
        return sum(r.used for c in self.configs for r in c.runs)

    @property
    def contention_note(self) -> str | None:
        """What every figure of a report that counts contended runs says beside it; None when none is counted."""
        if not self.contended_used:
            return None
        return f"MEASURED UNDER CONTENTION: {self.contended_used} of the {self.used_runs} runs counted were contended"

    @property
    def measured_share(self) -> float | None:
        """Share of the sweep's wall time spent inside measured windows."""
        return self.measured_s / self.sweep_wall_s if self.sweep_wall_s else None

    @property
    def measured_share_of_runs(self) -> float | None:
        """Share of the runs' own wall time (start-up to exit) spent inside measured windows."""
        return self.measured_s / self.runs_elapsed_s if self.runs_elapsed_s else None

    def time_breakdown(self) -> dict[str, float]:
        """Where the completed runs' wall time went, in seconds summed over runs: ``start-up and writing`` (process
        start, imports, data and model building, rendezvous; summary and CSV writing), ``warm-up and epoch
        boundaries`` (warm-up iterations, barriers, per-epoch gathering), ``evaluation`` (and end-of-epoch
        handlers such as checkpoints) and ``measured`` (the measured windows)."""
        parts = {"start-up and writing": 0.0, "warm-up and epoch boundaries": 0.0, "evaluation": 0.0, "measured": 0.0}
        for config in self.configs:
            for run in config.runs:
                times = (run.elapsed_s, run.engine_s, run.train_time_s, run.measured_s)
                if run.status != "completed" or any(t is None for t in times):
                    continue
                elapsed, engine, train, measured = (float(t) for t in times)  # type: ignore[arg-type]
                parts["start-up and writing"] += max(0.0, elapsed - engine)
                parts["evaluation"] += max(0.0, engine - train)
                parts["warm-up and epoch boundaries"] += max(0.0, train - measured)
                parts["measured"] += measured
        return parts

    def config(self, name: str) -> ConfigResult:
        return next(c for c in self.configs if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready), e.g. for a notebook's DataFrame."""
        data = dataclasses.asdict(self)
        for entry, config in zip(data["configs"], self.configs):
            entry["name"] = config.name
        data["measured_share"] = self.measured_share
        data["time_breakdown"] = self.time_breakdown()
        return data


RULE = (
    "Each configuration's throughput is the mean over its repeats (a run is one sample: steps within a run are not "
    "independent) with a {pct} % Student-t confidence interval. Speed-up = mean throughput / the mean of the same "
    "configuration with one process; its interval comes from the delta method on the log of the ratio with "
    "Welch-Satterthwaite degrees of freedom; efficiency = speed-up / processes. Verdict: within a workload, a "
    "configuration is named best only when its interval lies entirely above every other configuration's "
    "(non-overlapping intervals; conservative: between identical configurations it names a false winner in about "
    "0.5 % of sweeps, where a t-test at the same level would in 3-5 %). Otherwise the configurations whose "
    "intervals overlap the fastest one's are reported as statistically tied. Welch's t-test p-value (fastest vs "
    "runner-up) is shown beside it."
)


def _locate_run(record: dict[str, Any], out: Path) -> dict[str, Any]:
    """A record whose ``run_dir`` (written relative to where the sweep was started) is found from here: a report made
    from another folder looks for the run in the sweep's own ``runs/``."""
    run_dir = record.get("run_dir")
    if isinstance(run_dir, str) and run_dir and not Path(run_dir).is_dir():
        beside = out / "runs" / Path(run_dir).name
        if beside.is_dir():
            return {**record, "run_dir": str(beside)}
    return record


def load(results_dir: str | Path, include_contended: bool = False) -> Analysis:
    """Analyse a sweep's directory (``results.jsonl`` and ``sweep.json``); lines of the results that are not run
    records are skipped and flagged, never the records around them."""
    out = Path(results_dir)
    loaded, rejected = load_results(out / "results.jsonl")
    records = [_locate_run(record, out) for record, _ in loaded]
    if not records:
        skipped = f" ({len(rejected)} line(s) that are not run records)" if rejected else ""
        raise FileNotFoundError(f"no results in {out / 'results.jsonl'}{skipped}")
    meta: Any = {}
    problems = [f"results.jsonl line {r.line}: {r.reason}" for r in rejected]
    if (out / "sweep.json").exists():
        try:
            meta = read_json(out / "sweep.json")
        except (OSError, ValueError) as e:
            problems.append(f"sweep.json: cannot be read ({e}); the spec, host and timings it holds are missing")
        if not isinstance(meta, dict) or not all(isinstance(meta.get(k, {}), dict) for k in ("spec", "host")):
            problems.append("sweep.json: not a sweep's metadata; ignored")
            meta = {}
    analysis = analyze(records, meta, include_contended=include_contended)
    analysis.flags += [Flag("unreadable", None, problem) for problem in problems]
    return analysis


def analyze(
    records: Sequence[dict[str, Any]],
    meta: dict[str, Any] | None = None,
    include_contended: bool = False,
    confidence: float = CONFIDENCE,
) -> Analysis:
    """The analysis of a sweep's records (see the module docstring)."""
    meta = meta or {}
    spec = meta.get("spec", {})
    axes = list(spec.get("workload") or WORKLOAD_OPTIONS)
    threshold = spec.get("contention_threshold", CONTENTION_THRESHOLD)
    configs = _configs(records, axes, include_contended)
    limit_mb = spec.get("memory_limit_mb")
    limit = float(limit_mb) * MIB if _number(limit_mb) and limit_mb > 0 else None
    for config in configs:
        config.out_of_memory = sum(r.status == "out_of_memory" for r in config.runs)
        too_big = limit is not None and config.peak_memory.value is not None and config.peak_memory.value > limit
        config.fits = not too_big and not config.out_of_memory
    _speedups(configs, confidence)
    flags = _flags(configs, meta)
    flags += _memory_flags(configs, limit)
    margin = spec.get("equivalence_margin")
    margin = float(margin) if _number(margin) and 0 < margin < 1 else EQUIVALENCE_MARGIN
    verdicts = [_verdict(name, rows, confidence, margin) for name, rows in _by_workload(configs).items()]
    for verdict in verdicts:
        _recommend(verdict, [c for c in configs if c.workload == verdict.workload], limit)
    flags += [Flag("provisional", None, f"workload {v.workload}") for v in verdicts if v.provisional]
    measured = sum(r.measured_s or 0.0 for c in configs for r in c.runs if r.status == "completed")
    elapsed = sum(r.elapsed_s or 0.0 for c in configs for r in c.runs)
    sessions = meta.get("sessions") or []
    wall = sum(s.get("wall_s", 0.0) for s in sessions) or None
    return Analysis(
        configs,
        verdicts,
        flags,
        axes,
        confidence,
        RULE.format(pct=round(100 * confidence)),
        include_contended,
        threshold,
        measured,
        elapsed,
        wall,
        meta,
    )


def workload_of(config: dict[str, Any], axes: Sequence[str]) -> str:
    return ", ".join(f"{axis}={config.get(axis)}" for axis in axes)


def _configs(records: Sequence[dict[str, Any]], axes: Sequence[str], include_contended: bool) -> list[ConfigResult]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if record["status"] != "interrupted":  # stopped with the sweep: neither a result nor a failure
            grouped[record["key"].rsplit("-r", 1)[0]].append(record)
    configs = []
    for found in grouped.values():
        first = found[0]
        summaries = [r["summary"] for r in found if r["status"] == "completed" and r.get("summary")]
        world = summaries[0].get("world_size") if summaries else None
        world = world if isinstance(world, int) and world > 0 else _world(first["config"])
        config = ConfigResult(first["index"], first["grid"], first["config"], workload_of(first["config"], axes), world)
        config.runs = _runs(found, include_contended)
        _describe(config, [r for r in found if r["status"] == "completed" and r.get("summary")], include_contended)
        configs.append(config)
    return sorted(configs, key=lambda c: c.index)


def _world(config: dict[str, Any]) -> int:
    return (config.get("nproc_per_node") or 1) * (config.get("nnodes") or 1)


def _runs(records: list[dict[str, Any]], include_contended: bool) -> list[RunResult]:
    """Every run of a configuration; per repeat, the last completed attempt that was not contended is used (or,
    with ``include_contended``, the last completed attempt)."""
    by_repeat: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_repeat[record["repeat"]].append(record)
    runs = []
    for repeat, attempts in sorted(by_repeat.items()):
        attempts.sort(key=lambda r: r.get("attempt", 0))
        completed = [r for r in attempts if r["status"] == "completed" and r.get("summary")]
        eligible = [r for r in completed if include_contended or not r.get("contended")]
        chosen = eligible[-1] if eligible else None
        for record in attempts:
            summary = _dict(record.get("summary"))
            contention = _dict(summary.get("contention"))
            window = _dict(_dict(summary.get("steps")).get("global")).get("window_s")
            runs.append(
                RunResult(
                    repeat=repeat,
                    attempt=record.get("attempt", 0),
                    position=record.get("position", 0),
                    status=record["status"],
                    samples_per_s=_float(summary.get("samples_per_s")),
                    contended=bool(record.get("contended")),
                    foreign_cpu_share=_float(contention.get("foreign_cpu_share")),
                    diverged=str(summary["diverged"]) if summary.get("diverged") else None,
                    used=record is chosen,
                    run_dir=str(record.get("run_dir", "")),
                    error=None if record.get("error") is None else str(record["error"]),
                    measured_s=_float(window) if _number(window) else _float(summary.get("train_time_s")),
                    elapsed_s=_float(record.get("elapsed_s")),
                    train_time_s=_float(summary.get("train_time_s")),
                    engine_s=_float(summary.get("wall_time_s")),
                )
            )
    return runs


def superlinear(efficiency: Estimate | None) -> bool:
    """Whether an efficiency, as printed (two decimals), is above 1: more than N times one process on N."""
    return efficiency is not None and efficiency.value is not None and round(efficiency.value, 2) > SUPERLINEAR


def _dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a mapping, else an empty one: results files may hold foreign data."""
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _float(value: Any) -> float | None:
    return float(value) if _number(value) else None


def _mean(values: list[Any]) -> float | None:
    """Mean of the finite numbers among ``values`` (None if there are none)."""
    numbers = [float(v) for v in values if _number(v)]
    return statistics.fmean(numbers) if numbers else None


def _well_formed_steps(steps: Any) -> bool:
    return (
        isinstance(steps, dict)
        and isinstance(steps.get("global"), dict)
        and isinstance(steps.get("ranks"), list)
        and all(isinstance(r, dict) for r in steps["ranks"])
    )


def _describe(config: ConfigResult, completed: list[dict[str, Any]], include_contended: bool) -> None:
    """Fill a configuration's figures from the runs it uses (all completed runs if none is usable)."""
    used = {r.run_dir for r in config.used_runs}
    chosen = [r for r in completed if r.get("run_dir") in used] or completed
    summaries = [r["summary"] for r in chosen]
    config.throughput = mean_interval(config.samples_per_s)
    if not summaries:
        return
    steps = [s["steps"] for s in summaries if _well_formed_steps(s.get("steps"))]
    config.step_p50_s = _mean([s["global"].get("step_s_p50") for s in steps])
    config.step_p90_s = _mean([s["global"].get("step_s_p90") for s in steps])
    config.data_share = _mean([s["global"].get("data_share") for s in steps])
    _describe_steps(config, steps)
    stragglers = [
        s["straggler"] for s in steps if isinstance(s.get("straggler"), dict) and _number(s["straggler"].get("ratio"))
    ]
    config.straggler = max(stragglers, key=lambda s: s["ratio"]) if stragglers else None
    config.val_accuracy = _mean([s.get("val_accuracy") for s in summaries])
    first = summaries[0]
    config.threads_per_process = first.get("threads_per_process")
    config.cpu_cores = first.get("cpu_cores")
    config.device_type = (first.get("device") or {}).get("type")
    config.global_batch = (first.get("batch") or {}).get("global")
    iterations = [min(r.get("iterations", 0) for r in s["ranks"]) for s in steps if s["ranks"]]
    config.measured_iterations = min(iterations) if iterations else None
    config.profiler = next((s["profiler"] for s in summaries if s.get("profiler")), None)
    config.confusion_matrix = _summed_matrix([s.get("confusion_matrix") for s in summaries])
    config.strategy = first.get("strategy") if isinstance(first.get("strategy"), str) else None
    _describe_memory(config, summaries)
    flops = [_dict(s.get("flops")) for s in summaries]
    config.flops_per_sample = _mean([_dict(f.get("per_sample")).get("total") for f in flops])
    for key in ("achieved_flops_per_s", "utilisation_attainable", "utilisation_peak"):
        setattr(config, key, _mean([f.get(key) for f in flops]))


def _describe_memory(config: ConfigResult, summaries: list[dict[str, Any]]) -> None:
    """Peak memory per run (its largest rank: CUDA's peak reserved where there is one, else the resident set),
    with an interval over the runs used; what the workers and the held state take."""
    memories = [_dict(s.get("memory")) for s in summaries]
    tops = [_dict(m.get("max")) for m in memories]
    cuda = [t.get("cuda_max_reserved_bytes") for t in tops if _number(t.get("cuda_max_reserved_bytes"))]
    if cuda:
        config.peak_memory, config.memory_kind = mean_interval([float(cast(float, v)) for v in cuda]), "CUDA reserved"
    else:
        host = [float(t["peak_rss_bytes"]) for t in tops if _number(t.get("peak_rss_bytes"))]
        config.peak_memory, config.memory_kind = mean_interval(host), "resident" if host else None
    config.held_bytes = _mean([t.get("held_bytes") for t in tops])
    private = [
        max((r.get("workers_private_bytes") or 0 for r in m.get("ranks", []) if isinstance(r, dict)), default=None)
        for m in memories
    ]
    config.workers_memory = _mean(private)


def _step_parts(rank: dict[str, Any]) -> dict[str, float | None]:
    """One rank's mean step split into :data:`STEP_PARTS` (seconds); without communication timing, backward
    compute holds the whole backward, all-reduce included."""
    exposed = _float(rank.get("exposed_comm_s_mean"))
    backward = _float(rank.get("backward_s_mean"))
    return {
        "data": _float(rank.get("data_s_mean")),
        "forward": _float(rank.get("forward_s_mean")),
        "backward_compute": backward if exposed is None or backward is None else backward - exposed,
        "exposed_comm": exposed,
        "optimizer": _float(rank.get("optimizer_s_mean")),
        "handlers": _float(rank.get("handlers_s_mean")),
    }


def _describe_steps(config: ConfigResult, steps: list[dict[str, Any]]) -> None:
    """The step breakdown per rank and the communication figures, averaged over the runs used."""
    if not steps:
        return
    world = min(len(s["ranks"]) for s in steps)
    per_rank = [[_step_parts(s["ranks"][r]) for s in steps] for r in range(world)]
    config.rank_phases = [{p: _mean([run[p] for run in runs]) or 0.0 for p in STEP_PARTS} for runs in per_rank]
    config.phases = {p: _mean([r[p] for r in config.rank_phases]) or 0.0 for p in STEP_PARTS}
    config.comm_timed = any(_number(r.get("exposed_comm_s_mean")) for s in steps for r in s["ranks"])
    config.overlap = _mean([s["global"].get("overlap") for s in steps])
    config.buckets_per_step = _mean([r.get("buckets_per_step") for s in steps for r in s["ranks"]])
    config.busbw_Bps = _mean([s["global"].get("busbw_Bps") for s in steps])
    config.reference_busbw_Bps = _mean([_dict(s.get("comm_reference")).get("busbw_Bps") for s in steps])
    iteration = sum(config.phases.values())
    if config.comm_timed and iteration > 0:
        config.exposed_share = config.phases["exposed_comm"] / iteration
    waits = [
        s["comm_wait"]
        for s in steps
        if isinstance(s.get("comm_wait"), dict) and _number(s["comm_wait"].get("median_wait_s"))
    ]
    if waits and iteration > 0:
        worst = max(waits, key=lambda w: w["median_wait_s"])
        wait_s = _mean([w["median_wait_s"] for w in waits]) or 0.0
        others = [r for r in range(len(worst.get("wait_s") or [])) if r != worst.get("rank")]
        config.comm_wait = {"rank": worst.get("rank"), "waiting": others, "wait_s": wait_s, "share": wait_s / iteration}


def _summed_matrix(matrices: list[Any]) -> list[list[int]] | None:
    """The element-wise sum of the well-formed square matrices of one shape (None if there is none)."""
    square = [
        m
        for m in matrices
        if isinstance(m, list)
        and m
        and all(isinstance(row, list) and len(row) == len(m) for row in m)
        and all(isinstance(v, int) and not isinstance(v, bool) for row in m for v in row)
    ]
    square = [m for m in square if len(m) == len(square[0])] if square else []
    if not square:
        return None
    return [[sum(m[i][j] for m in square) for j in range(len(square[0]))] for i in range(len(square[0]))]


def _kind(config: ConfigResult) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in config.config.items() if k not in LAYOUT_OPTIONS))


def _speedups(configs: list[ConfigResult], confidence: float) -> None:
    by_kind: dict[tuple, list[ConfigResult]] = defaultdict(list)
    for config in configs:
        by_kind[_kind(config)].append(config)
    for group in by_kind.values():
        base = next((c for c in group if c.world_size == 1 and c.samples_per_s), None)
        if base is None:
            continue
        for config in group:
            if not config.samples_per_s:
                continue
            if config is base:
                config.speedup = Estimate(1.0, 1.0, 1.0, len(base.samples_per_s), 0.0)
            else:
                config.speedup = ratio_interval(config.samples_per_s, base.samples_per_s, confidence)
            config.efficiency = config.speedup.scaled(1.0 / config.world_size)
            config.baseline = base.name


def _by_workload(configs: list[ConfigResult]) -> dict[str, list[ConfigResult]]:
    groups: dict[str, list[ConfigResult]] = defaultdict(list)
    for config in configs:
        groups[config.workload].append(config)
    return dict(groups)


def _verdict(
    workload: str, configs: list[ConfigResult], confidence: float, margin: float = EQUIVALENCE_MARGIN
) -> Verdict:
    measured = sorted(
        (c for c in configs if c.throughput.value is not None),
        key=lambda c: cast(float, c.throughput.value),  # not None: the filter keeps the configurations with a value
        reverse=True,
    )
    names = [c.name for c in measured]
    unmeasured = [c.name for c in configs if c.throughput.value is None]
    # A configuration without a usable run (failed, or every run contended) might have been the fastest.
    provisional = bool(unmeasured) or any(len(c.samples_per_s) < MIN_REPEATS for c in configs)
    if not measured:
        return Verdict(
            workload,
            names,
            None,
            [],
            True,
            reason="no configuration of this workload has a usable run",
            unmeasured=unmeasured,
        )
    top = measured[0]
    if len(measured) == 1:
        reason = "the only configuration of its workload" if not unmeasured else "the only one with a usable run"
        return Verdict(workload, names, top.name, [], provisional, reason=reason, unmeasured=unmeasured)
    runner = measured[1]
    assert top.throughput.value is not None and runner.throughput.value is not None
    difference = top.throughput.value / runner.throughput.value - 1
    verdict = Verdict(
        workload,
        names,
        None,
        [],
        provisional,
        runner.name,
        difference,
        welch_p(top.samples_per_s, runner.samples_per_s),
        unmeasured=unmeasured,
    )
    if not top.throughput.has_interval:
        verdict.tied = names
        verdict.reason = "the fastest configuration has a single usable run, so no interval: nothing can be told apart"
        return verdict
    overlapping = [c for c in measured[1:] if not separated(top.throughput, c.throughput)]
    if not overlapping:
        verdict.best = top.name
        verdict.reason = (
            f"its {round(100 * confidence)} % interval lies above every other configuration's; "
            f"{100 * difference:.1f} % faster than the runner-up {runner.name}"
        )
        return verdict
    verdict.tied = [top.name] + [c.name for c in overlapping]
    verdict.repeats_needed = {
        c.name: repeats_to_separate(top.throughput, c.throughput, confidence) for c in overlapping
    }
    verdict.margin = margin
    verdict.equivalent = all(equivalent(top.samples_per_s, c.samples_per_s, margin) for c in overlapping)
    verdict.reason = "their intervals overlap the fastest configuration's"
    if verdict.equivalent:
        verdict.reason += (
            f"; each is shown within ±{100 * margin:g} % of it (two one-sided tests at 5 %): equivalent, any will do"
        )
    return verdict


def _memory_flags(configs: list[ConfigResult], limit: float | None) -> list[Flag]:
    flags = []
    for config in configs:
        if config.out_of_memory:
            flags.append(Flag("out-of-memory", config.name, f"{config.out_of_memory} run(s) ran out of memory"))
        elif not config.fits and limit is not None and config.peak_memory.value is not None:
            flags.append(
                Flag(
                    "does-not-fit",
                    config.name,
                    f"peak {config.memory_kind} memory {config.peak_memory.value / MIB:.0f} MiB per rank > the "
                    f"limit of {limit / MIB:.0f} MiB",
                )
            )
    return flags


def _cheaper(cheap: ConfigResult, than: ConfigResult) -> str:
    """What makes ``cheap`` cheaper than ``than``, in words."""
    reasons = []
    if cheap.world_size < than.world_size:
        reasons.append(
            f"uses {cheap.world_size} process{'es' if cheap.world_size > 1 else ''} instead of {than.world_size}"
        )
    mine, theirs = cheap.peak_memory.value, than.peak_memory.value
    if mine is not None and theirs:
        share = 1 - mine / theirs
        if share > 0:
            reasons.append(f"{100 * share:.0f} % less memory per rank")
    return " and ".join(reasons) or "is no more expensive"


def _recommend(verdict: Verdict, configs: list[ConfigResult], limit: float | None) -> None:
    """The configuration to use: the best where one is named; among configurations tied on speed, the cheapest
    (fewest processes, then the lowest peak memory per rank); never one that does not fit."""
    measured = sorted(
        (c for c in configs if c.throughput.value is not None), key=lambda c: -cast(float, c.throughput.value)
    )
    verdict.does_not_fit = [c.name for c in configs if not c.fits]
    fitting = [c for c in measured if c.fits]
    if not fitting:
        if measured:
            verdict.recommendation = "nothing measured fits within the memory limit (or every one ran out of memory)"
        return
    lead = fitting[0]
    if verdict.best is not None and verdict.best == lead.name:
        verdict.recommended = lead.name
        verdict.recommendation = f"{lead.name}: the fastest, separated from every other configuration"
        return
    peers = [lead]
    if lead.throughput.has_interval:
        peers += [c for c in fitting[1:] if not separated(lead.throughput, c.throughput)]
    infinite = float("inf")
    cheapest = min(
        peers, key=lambda c: (c.world_size, c.peak_memory.value or infinite, -cast(float, c.throughput.value))
    )
    verdict.recommended = cheapest.name
    slower = [c.name for c in measured if c not in fitting and measured.index(c) < measured.index(lead)]
    unfit = f" ({', '.join(slower)} faster but does not fit)" if slower else ""
    if len(peers) == 1:
        verdict.recommendation = f"{lead.name}: the fastest configuration that fits{unfit}"
    elif cheapest is lead:
        others = ", ".join(c.name for c in peers if c is not lead)
        verdict.recommendation = f"{lead.name}: tied on speed with {others}, and none of them is cheaper{unfit}"
    else:
        verdict.recommendation = (
            f"{cheapest.name}: tied on speed with {lead.name}; {cheapest.name} {_cheaper(cheapest, lead)}{unfit}"
        )


def _flags(configs: list[ConfigResult], meta: dict[str, Any]) -> list[Flag]:
    flags = []
    cores = (meta.get("host") or {}).get("cpu_cores")
    for config in configs:
        for run in config.runs:
            where = f"repeat {run.repeat + 1}" + (f", re-run {run.attempt}" if run.attempt else "")
            if run.contended:
                share = (
                    "" if run.foreign_cpu_share is None else f": others used {run.foreign_cpu_share:.0%} of the CPUs"
                )
                flags.append(Flag("contended", config.name, f"{where}{share}"))
            if run.diverged:
                flags.append(Flag("diverged", config.name, f"{where}: {run.diverged}"))
        if config.efficiency is not None and superlinear(config.efficiency):
            interval = config.efficiency
            detail = f"efficiency {interval.value:.2f}"
            if interval.has_interval:
                detail += f" ({interval.low:.2f}-{interval.high:.2f})"
            flags.append(Flag("superlinear", config.name, f"{detail} on {config.world_size} processes"))
        cv = config.throughput.cv
        if cv is not None and cv > CV_HIGH:
            flags.append(Flag("high-variation", config.name, f"repeats vary by {cv:.0%} (sd / mean)"))
        node_cores = config.cpu_cores or cores
        per_node = config.config.get("nproc_per_node") or 1
        threads = config.threads_per_process
        if config.device_type == "cpu" and node_cores and threads and per_node * threads > node_cores:
            flags.append(
                Flag("oversubscribed", config.name, f"{per_node} processes x {threads} threads on {node_cores} cores")
            )
        if config.measured_iterations is not None and config.measured_iterations < FEW_ITERATIONS:
            flags.append(Flag("few-iterations", config.name, f"{config.measured_iterations} measured iterations"))
    return flags


def notes(analysis: Analysis) -> list[str]:
    """Where time is lost, per configuration, and what to try."""
    found = []
    for config in analysis.configs:
        if config.data_share is not None and config.data_share > DATA_WAIT_HIGH:
            found.append(
                f"{config.name}: data wait {100 * config.data_share:.0f}% of each iteration -> raise "
                f"num_workers (now {config.config.get('num_workers', 0)}) or make loading cheaper"
            )
        if config.exposed_share is not None and config.exposed_share > EXPOSED_COMM_HIGH:
            overlap = f", {100 * config.overlap:.0f} % of it overlapped" if config.overlap is not None else ""
            found.append(
                f"{config.name}: exposed communication is {100 * config.exposed_share:.0f} % of the step{overlap} "
                f"-> larger buckets (--bucket-cap-mb, now {config.config.get('bucket_cap_mb', 25.0):g}), "
                "gradient accumulation, or a larger batch per rank so that compute hides the all-reduce"
            )
        wait = config.comm_wait
        if wait and wait["share"] > COMM_WAIT_HIGH:
            found.append(
                f"{config.name}: {all_reduce_wait(wait['waiting'], wait['wait_s'], wait['rank'])} "
                f"({100 * wait['share']:.0f} % of the step) -> look at what rank {wait['rank']} does "
                "differently before backward (its data, its device, other work on its cores)"
            )
        straggler = config.straggler
        if straggler and straggler["ratio"] > STRAGGLER_HIGH:
            found.append(
                f"{config.name}: rank {straggler['rank']} is a straggler (own time {straggler['ratio']:.2f}x "
                "the median rank's) -> look at its data loading, its device, or other work on its cores"
            )
        efficiency = config.efficiency
        if efficiency is None or efficiency.value is None or config.world_size < 2:
            continue
        if efficiency.value >= EFFICIENCY_LOW:
            continue
        cores = config.cpu_cores or (analysis.meta.get("host") or {}).get("cpu_cores")
        per_node = config.config.get("nproc_per_node") or 1
        threads = config.threads_per_process or 1
        base = analysis.config(config.baseline) if config.baseline else None
        base_threads = base.threads_per_process if base else None
        on_cpu = config.device_type == "cpu"
        if on_cpu and cores and per_node * threads > cores:
            found.append(
                f"{config.name}: {per_node} processes x {threads} threads on {cores} cores is "
                f"oversubscribed (efficiency {efficiency.value:.2f}) -> at most {cores} processes here"
            )
        elif on_cpu and cores and base_threads and base_threads >= cores:
            found.append(
                f"{config.name}: efficiency {efficiency.value:.2f}: the 1-process run already kept all "
                f"{cores} cores busy with {base_threads} intra-op threads, so more processes add "
                "communication, not compute"
            )
        else:
            found.append(
                f"{config.name}: scaling efficiency {efficiency.value:.2f} -> communication and "
                "per-process overhead dominate; try a larger batch per rank"
            )
    return found
