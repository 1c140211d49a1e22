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

import contextlib
import dataclasses
import gc
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard, cast

from ignite_ddl.core.config import LAYOUT_OPTIONS, WORKLOAD_OPTIONS, TrainConfig
from ignite_ddl.core.options import Role, names_with_role
from ignite_ddl.core.results import RejectedLine, iter_results, read_json
from ignite_ddl.core.text import all_reduce_wait
from ignite_ddl.measure.contention import CONTENTION_THRESHOLD
from ignite_ddl.report.stats import (
    CONFIDENCE,
    EQUIVALENCE_MARGIN,
    Estimate,
    equivalent,
    leads,
    mean_interval,
    ratio_interval,
    repeats_to_separate,
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
    "recompile_text",
    "superlinear",
    "versus_text",
    "workload_of",
]

MIB = float(1 << 20)
MIN_REPEATS = 3  # fewer repeats than this make a verdict provisional
MEMORY_MATERIAL = 0.05  # without intervals, this much less peak memory makes a configuration cheaper
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
    "recompiled": "torch.compile compiled the model again during training (a guard failed: a new input shape, "
    "dtype, ...): each recompilation costs compilation time, which is counted in compile_s and left out of the "
    "throughput, and a run that recompiles often never reaches its compiled speed",
    "unsettled": "a run's step times never settled (MSER-5 finds the calmest stretch in the run's second half): its "
    "throughput is not a steady state; run longer, or look for what keeps changing (caches, the machine)",
    "mixed-environments": "the runs were not all made alike (torch / Ignite / CUDA versions, CPU or GPU model, CPU "
    "cores, intra-op threads), e.g. a sweep resumed on another machine: a speed difference between them may come "
    "from the machine, not the configuration, so each environment is judged on its own (its configurations' figures "
    "and its own verdict, never averaged across), and runs of a configuration made with other thread counts are "
    "reported as configurations of their own",
}
MAX_UNREADABLE = 100  # lines of the results that are not records, listed one by one (the rest are counted)
# A sweep of thousands of configurations: what the report lists and draws of them (the verdicts count every one).
TABLE_ROWS = 100
PLOTTED = 32
TIED_LISTED = 12
FLAGS_LISTED = 30  # of each kind


@dataclass
class Flag:
    """One reason to doubt a figure: its kind (a key of :data:`FLAG_MEANINGS`), where, and the specifics."""

    kind: str
    config: str | None  # cfgNNN, or None for the whole sweep / a workload
    detail: str

    @property
    def meaning(self) -> str:
        return FLAG_MEANINGS[self.kind]


@dataclass(slots=True)  # one per record: a sweep may hold tens of thousands
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
    environment: str | None = None  # where its runs were made, when a sweep's runs were not all made alike
    suffix: str = ""  # tells it apart from the same grid point run elsewhere: "@env2", "@threads=1"
    compile_s: Estimate | None = None  # torch.compile: compilation time beyond a steady iteration, over the runs
    recompilations: int = 0  # the most recompilations of any run
    recompile_reasons: list[str] = field(default_factory=list)
    comm_bytes_per_step: float | None = None  # bytes a rank puts on the wire per step (a hook may compress them)
    unsettled_runs: int = 0  # runs whose step times never settled (MSER-5)
    ddp_crosscheck: dict[str, float] | None = None  # ours / DDP's own statistics: "comm" and "backward", mean ratios
    versus: list[dict[str, Any]] = field(default_factory=list)  # against the same configuration without compile/hook

    @property
    def name(self) -> str:
        return f"cfg{self.index:03d}{self.suffix}"

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

    @property
    def tied_listed(self) -> list[str]:
        """The tied configurations a report names one by one: the fastest :data:`TIED_LISTED`."""
        return self.tied[:TIED_LISTED]

    @property
    def tied_shown(self) -> str:
        """The tied configurations in words: every name, or the fastest ones and how many more."""
        more = len(self.tied) - len(self.tied_listed)
        return ", ".join(self.tied_listed) + (f" and {more} more" if more > 0 else "")


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
    omitted: int = 0  # configurations left out of this view of the analysis (see :meth:`shown`)

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
        """Runs counted in the figures that were contended (only with ``include_contended``), of the whole sweep."""
        configs = self._whole.configs
        return sum(r.used and r.contended for c in configs for r in c.runs)

    @property
    def used_runs(self) -> int:
        return sum(r.used for c in self._whole.configs for r in c.runs)

    @property
    def _whole(self) -> Analysis:
        """The analysis this one is a view of (:meth:`shown`), or itself."""
        whole = self.__dict__.get("_shown_from")
        return whole if isinstance(whole, Analysis) else self

    def shown(self, limit: int) -> Analysis:
        """A view of at most about ``limit`` configurations for tables and plots, so that a sweep of thousands stays
        readable: per workload (taken in turn), the configurations its verdict names, then the fastest, each with
        the 1-process configuration its speed-up is measured against; itself when every configuration fits.
        Verdicts, flags and contention counts stay those of the whole sweep; :attr:`shown_note` says what is left
        out."""
        if len(self.configs) <= limit:
            return self
        verdicts = {v.workload: v for v in self.verdicts}
        groups: dict[str, list[ConfigResult]] = defaultdict(list)
        for config in self.configs:
            groups[config.workload].append(config)
        queues = []
        order = {workload: i for i, workload in enumerate(verdicts)}
        for workload in sorted(groups, key=lambda w: order.get(w, len(order))):
            verdict = verdicts.get(workload)
            named = ([verdict.best] if verdict.best else verdict.tied) if verdict else []
            rank = {name: i for i, name in enumerate(named)}
            queues.append(
                sorted(
                    groups[workload],
                    key=lambda c: (rank.get(c.name, len(rank)), -(c.throughput.value or -math.inf), c.index),
                )
            )
        chosen: dict[int, ConfigResult] = {}
        while len(chosen) < limit and any(queues):
            for queue in queues:
                if queue and len(chosen) < limit:
                    config = queue.pop(0)
                    chosen[id(config)] = config
        for config in list(chosen.values()):
            if config.baseline is not None:
                base = self.config(config.baseline)
                chosen.setdefault(id(base), base)
        configs = [c for c in self.configs if id(c) in chosen]
        view = dataclasses.replace(self, configs=configs, omitted=self.omitted + len(self.configs) - len(configs))
        view.__dict__["_shown_from"] = self._whole
        return view

    def for_tables(self) -> Analysis:
        """The view (:meth:`shown`) the report's tables list: at most about :data:`TABLE_ROWS` configurations."""
        return self.shown(TABLE_ROWS)

    def for_plots(self) -> Analysis:
        """The view (:meth:`shown`) the report's plots draw: at most about :data:`PLOTTED` configurations."""
        return self.shown(PLOTTED)

    @property
    def shown_note(self) -> str | None:
        """What a view (:meth:`shown`) leaves out, in one sentence; None when it shows every configuration."""
        if not self.omitted:
            return None
        total = len(self.configs) + self.omitted
        return (
            f"Shown: {len(self.configs)} of the {total} configurations (per workload, those the verdict names, then "
            f"the fastest, with the 1-process configurations their speed-ups are measured against); the other "
            f"{self.omitted} are counted in the verdicts and flags but not drawn or listed here. Every configuration "
            "is in `ignite_ddl.report.load(...)` of this folder."
        )

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
        names = self.__dict__.get("_names")
        if names is None or len(names) != len(self.configs):
            names = self.__dict__["_names"] = {c.name: c for c in self.configs}
        found = names.get(name)
        if found is None or found.name != name:  # the list was changed since: look again
            return next(c for c in self.configs if c.name == name)
        return found

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
    "runner-up) is shown beside it. "
)
MULTIPLE_COMPARISONS = (
    "Multiple comparisons: with k configurations in a workload, the best must also be shown faster than each of the "
    "other k - 1 by a one-sided Welch t-test at {alpha:g} % / (k - 1) (Bonferroni over the comparisons with the "
    "leader: simultaneous one-sided bounds), so the chance of naming a wrong best stays at most {alpha:g} % however "
    "many configurations are compared (non-overlapping intervals alone let it grow with k); a configuration not "
    "shown slower that way stays tied with the fastest. Equivalence needs every tied configuration shown within the "
    "margin (an intersection-union test, which needs no correction). Adaptive repeats stop on this same rule."
)
COMPARABLE = (
    "Runs are compared only when they share torch, Ignite and CUDA versions, CPU or GPU model, CPU cores and "
    "intra-op threads; a sweep whose runs differ is judged per environment, never averaged across."
)


def rule_text(confidence: float = CONFIDENCE) -> str:
    """The report's method paragraph: how figures are computed and how a verdict is reached."""
    pct = round(100 * confidence)
    return RULE.format(pct=pct) + MULTIPLE_COMPARISONS.format(alpha=100 - pct) + " " + COMPARABLE


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
    records are skipped and flagged, never the records around them.

    The records are read as a stream, each validated against the results schema, and each run's summary is added
    to its configuration's figures as it is read: per run only what the verdict and the flags need is kept (a few
    hundred bytes), so memory grows with the number of runs and configurations, not with the size of the results. A
    summary is read a second time only where a run already counted is superseded by a later attempt of its
    repeat."""
    out = Path(results_dir)
    problems: list[str] = []
    meta: Any = {}
    if (out / "sweep.json").exists():
        try:
            meta = read_json(out / "sweep.json")
        except (OSError, ValueError) as e:
            problems.append(f"sweep.json: cannot be read ({e}); the spec, host and timings it holds are missing")
        if not isinstance(meta, dict) or not all(isinstance(meta.get(k, {}), dict) for k in ("spec", "host")):
            problems.append("sweep.json: not a sweep's metadata; ignored")
            meta = {}
    spec = meta.get("spec", {})
    reader = _Reader(list(spec.get("workload") or WORKLOAD_OPTIONS), include_contended)
    path = out / "results.jsonl"
    rejected: list[str] = []
    skipped = 0
    configs: list[ConfigResult] = []
    if path.exists():
        with open(path, "rb") as f, _collection_paused():
            for number, offset, line, found in iter_results(f):
                if isinstance(found, RejectedLine):
                    skipped += 1
                    if len(rejected) < MAX_UNREADABLE:
                        rejected.append(f"results.jsonl line {number}: {found.reason}")
                    continue
                reader.add(_locate_run(found, out), (offset, len(line)))

            def fetch(where: tuple[int, int]) -> dict[str, Any]:
                f.seek(where[0])  # the same open file: a sweep appending meanwhile, or repairing, changes nothing
                return cast(dict[str, Any], json.loads(f.read(where[1])))

            if reader.records:
                configs = reader.configs(fetch)
    if not reader.records:
        lines = f" ({skipped} line(s) that are not run records)" if skipped else ""
        raise FileNotFoundError(f"no results in {path}{lines}")
    if skipped > len(rejected):
        rejected.append(f"results.jsonl: {skipped - len(rejected)} more line(s) that are not run records")
    analysis = _analysis(configs, reader.flags, meta, include_contended, CONFIDENCE)
    analysis.flags += [Flag("unreadable", None, problem) for problem in problems + rejected]
    return analysis


def analyze(
    records: Sequence[dict[str, Any]],
    meta: dict[str, Any] | None = None,
    include_contended: bool = False,
    confidence: float = CONFIDENCE,
) -> Analysis:
    """The analysis of a sweep's records (see the module docstring)."""
    meta = meta or {}
    reader = _Reader(list(meta.get("spec", {}).get("workload") or WORKLOAD_OPTIONS), include_contended)
    for number, record in enumerate(records):
        reader.add(record, number)
    configs = reader.configs(lambda number: records[number])
    return _analysis(configs, reader.flags, meta, include_contended, confidence)


def _analysis(
    configs: list[ConfigResult], flags: list[Flag], meta: dict[str, Any], include_contended: bool, confidence: float
) -> Analysis:
    spec = meta.get("spec", {})
    axes = list(spec.get("workload") or WORKLOAD_OPTIONS)
    threshold = spec.get("contention_threshold", CONTENTION_THRESHOLD)
    limit_mb = spec.get("memory_limit_mb")
    limit = float(limit_mb) * MIB if _number(limit_mb) and limit_mb > 0 else None
    for config in configs:
        config.out_of_memory = sum(r.status == "out_of_memory" for r in config.runs)
        too_big = limit is not None and config.peak_memory.value is not None and config.peak_memory.value > limit
        config.fits = not too_big and not config.out_of_memory
    _speedups(configs, confidence)
    _versus(configs, confidence)
    flags = flags + _flags(configs, meta)
    flags += _memory_flags(configs, limit)
    margin = spec.get("equivalence_margin")
    margin = float(margin) if _number(margin) and 0 < margin < 1 else EQUIVALENCE_MARGIN
    groups = _by_workload(configs)
    verdicts = [_verdict(name, rows, confidence, margin) for name, rows in groups.items()]
    for verdict in verdicts:
        _recommend(verdict, groups[verdict.workload], limit, confidence)
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
        rule_text(confidence),
        include_contended,
        threshold,
        measured,
        elapsed,
        wall,
        meta,
    )


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """The cyclic garbage collector off while records are read: they make no cycles, and each of its passes over the
    millions of objects a large sweep's runs hold would cost more than the reading itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def workload_of(config: dict[str, Any], axes: Sequence[str]) -> str:
    return ", ".join(f"{axis}={config.get(axis)}" for axis in axes)


def _world(config: dict[str, Any]) -> int:
    return (config.get("nproc_per_node") or 1) * (config.get("nnodes") or 1)


# -- reading the records: a first pass keeps a few figures per run, a second reads the summaries the figures use


# What makes runs comparable, besides intra-op threads (checked per configuration): a run's environment.
ENVIRONMENT_FIELDS = ("torch", "Ignite", "CUDA", "torch_xla", "device", "CPU", "CPU cores")
_Machine = tuple[Any, ...]  # one value per ENVIRONMENT_FIELDS entry, None where the run does not say
CONFIG_JSON_LIMIT = 1 << 20  # a run's config.json is a few kB: more is not one


class _Figures:
    """The figures of a set of runs (:meth:`add` a summary at a time, :meth:`merge` two sets), what a
    configuration's figures are made from; ``where`` orders the runs as they were written (ties, firsts)."""

    def __init__(self) -> None:
        self.summaries = 0
        self.first: tuple[Any, dict[str, Any]] | None = None  # (where, scalars of the first summary written)
        self.p50, self.p90, self.data_share = _Mean(), _Mean(), _Mean()
        self.steps = 0
        self.world: int | None = None  # the fewest ranks of any run's steps
        self.rank_parts: list[dict[str, _Mean]] = []
        self.comm_timed = False
        self.overlap, self.busbw, self.reference, self.buckets = _Mean(), _Mean(), _Mean(), _Mean()
        self.worst_wait: tuple[float, Any, dict[str, Any]] | None = None  # (median wait, where, comm_wait)
        self.wait = _Mean()
        self.straggler: tuple[float, Any, dict[str, Any]] | None = None  # (ratio, where, straggler)
        self.val_accuracy = _Mean()
        self.iterations: int | None = None
        self.profiler: tuple[Any, Any] | None = None  # (where, profiler) of the first run written with one
        self.matrices: dict[int, tuple[Any, list[list[int]]]] = {}  # size -> (where of the first, sum)
        self.cuda: list[float] = []
        self.host: list[float] = []
        self.held, self.private = _Mean(), _Mean()
        self.flops = {key: _Mean() for key in ("total", *FLOPS_FIGURES)}
        self.compile_s: list[float] = []
        self.recompilations = 0
        self.reasons: list[str] = []
        self.comm_bytes, self.cross_comm, self.cross_backward = _Mean(), _Mean(), _Mean()
        self.unsettled = 0

    def add(self, summary: dict[str, Any], where: Any) -> None:
        self.summaries += 1
        if self.first is None or where < self.first[0]:
            self.first = (
                where,
                {
                    "threads_per_process": summary.get("threads_per_process"),
                    "cpu_cores": summary.get("cpu_cores"),
                    "device_type": (summary.get("device") or {}).get("type"),
                    "global_batch": (summary.get("batch") or {}).get("global"),
                    "strategy": summary.get("strategy") if isinstance(summary.get("strategy"), str) else None,
                },
            )
        steps = summary.get("steps")
        if _well_formed_steps(steps):
            self._add_steps(cast(dict[str, Any], steps), where)
        self.val_accuracy.add(summary.get("val_accuracy"))
        if summary.get("profiler") and (self.profiler is None or where < self.profiler[0]):
            self.profiler = (where, summary["profiler"])
        matrix = summary.get("confusion_matrix")
        if _square(matrix):
            self._add_matrix(len(matrix), where, matrix)
        memory = _dict(summary.get("memory"))
        top = _dict(memory.get("max"))
        if _number(top.get("cuda_max_reserved_bytes")):
            self.cuda.append(float(top["cuda_max_reserved_bytes"]))
        if _number(top.get("peak_rss_bytes")):
            self.host.append(float(top["peak_rss_bytes"]))
        self.held.add(top.get("held_bytes"))
        ranks = memory.get("ranks", [])
        self.private.add(max((r.get("workers_private_bytes") or 0 for r in ranks if isinstance(r, dict)), default=None))
        flops = _dict(summary.get("flops"))
        self.flops["total"].add(_dict(flops.get("per_sample")).get("total"))
        for key in FLOPS_FIGURES:
            self.flops[key].add(flops.get(key))

    def _add_step_extras(self, steps: dict[str, Any]) -> None:
        """Compilation, bytes on the wire, steady state and the DDP cross-check of one run's steps."""
        compiled = _dict(steps.get("compile"))
        if _number(compiled.get("compile_s")):
            self.compile_s.append(float(compiled["compile_s"]))
        if _count(compiled.get("recompilations")):
            self.recompilations = max(self.recompilations, int(compiled["recompilations"]))
            reasons = compiled.get("reasons")
            if not self.reasons and isinstance(reasons, list):
                self.reasons = [str(r)[:200] for r in reasons[:3]]
        if _dict(steps.get("steady")).get("settled") is False:
            self.unsettled += 1
        for rank in steps["ranks"]:
            if isinstance(rank, dict):
                self.comm_bytes.add(rank.get("comm_bytes_per_step"))
        checks = steps.get("ddp_crosscheck")
        for check in checks if isinstance(checks, list) else []:
            ratio = _dict(_dict(check).get("ratio"))
            self.cross_comm.add(ratio.get("comm"))
            self.cross_backward.add(ratio.get("backward"))

    def _add_steps(self, steps: dict[str, Any], where: Any) -> None:
        self.steps += 1
        self._add_step_extras(steps)
        figures, ranks = steps["global"], steps["ranks"]
        self.p50.add(figures.get("step_s_p50"))
        self.p90.add(figures.get("step_s_p90"))
        self.data_share.add(figures.get("data_share"))
        self.world = len(ranks) if self.world is None else min(self.world, len(ranks))
        for number, rank in enumerate(ranks):
            if number == len(self.rank_parts):
                self.rank_parts.append({part: _Mean() for part in STEP_PARTS})
            parts = self.rank_parts[number]
            for part, value in _step_parts(rank).items():
                parts[part].add(value)
            self.comm_timed = self.comm_timed or _number(rank.get("exposed_comm_s_mean"))
            self.buckets.add(rank.get("buckets_per_step"))
        self.overlap.add(figures.get("overlap"))
        self.busbw.add(figures.get("busbw_Bps"))
        self.reference.add(_dict(steps.get("comm_reference")).get("busbw_Bps"))
        wait = steps.get("comm_wait")
        if isinstance(wait, dict) and _number(wait.get("median_wait_s")):
            self.worst_wait = _larger(self.worst_wait, (wait["median_wait_s"], where, wait))
            self.wait.add(wait["median_wait_s"])
        straggler = steps.get("straggler")
        if isinstance(straggler, dict) and _number(straggler.get("ratio")):
            self.straggler = _larger(self.straggler, (straggler["ratio"], where, straggler))
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

    def merge(self, other: _Figures) -> None:
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
            (self.held, other.held),
            (self.private, other.private),
            *((self.flops[key], other.flops[key]) for key in self.flops),
            (self.comm_bytes, other.comm_bytes),
            (self.cross_comm, other.cross_comm),
            (self.cross_backward, other.cross_backward),
        ):
            mine.merge(theirs)
        self.compile_s += other.compile_s
        self.recompilations = max(self.recompilations, other.recompilations)
        self.reasons = self.reasons or other.reasons
        self.unsettled += other.unsettled
        self.steps += other.steps
        if other.world is not None:
            self.world = other.world if self.world is None else min(self.world, other.world)
        for number, parts in enumerate(other.rank_parts):
            if number == len(self.rank_parts):
                self.rank_parts.append({part: _Mean() for part in STEP_PARTS})
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
        config.val_accuracy = self.val_accuracy.value
        first = self.first[1] if self.first is not None else {}
        config.threads_per_process, config.cpu_cores = first["threads_per_process"], first["cpu_cores"]
        config.device_type, config.global_batch = first["device_type"], first["global_batch"]
        config.strategy = first["strategy"]
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
        config.compile_s = mean_interval(self.compile_s) if self.compile_s else None
        config.recompilations, config.recompile_reasons = self.recompilations, self.reasons
        config.comm_bytes_per_step, config.unsettled_runs = self.comm_bytes.value, self.unsettled
        if self.cross_comm.value is not None:
            config.ddp_crosscheck = {"comm": self.cross_comm.value, "backward": self.cross_backward.value or math.nan}


def _larger(
    a: tuple[float, Any, dict[str, Any]] | None, b: tuple[float, Any, dict[str, Any]]
) -> tuple[float, Any, dict[str, Any]]:
    """The larger figure of two ``(figure, where, record)``; on a tie, the one written first."""
    if a is None or b[0] > a[0] or (b[0] == a[0] and b[1] < a[1]):
        return b
    return a


class _Bucket:
    """The runs of one configuration made in one environment with one thread count: the figures of those the
    verdict may use (completed, and not contended unless contended runs are counted) and of the other completed
    ones, accumulated as they are read. ``stale``: one of the first was superseded by a later attempt of its
    repeat, so the configuration's figures are read again from the runs it uses."""

    __slots__ = ("eligible", "others", "stale")

    def __init__(self) -> None:
        self.eligible = _Figures()
        self.others: _Figures | None = None
        self.stale = False


@dataclass(slots=True)
class _Seen:
    """A run as the first pass keeps it: its result, where its record is, what it ran on and in which bucket its
    figures were counted (None without a summary)."""

    run: RunResult
    where: Any
    world: Any
    machine: _Machine | None
    threads: int | None
    bucket: _Bucket | None


@dataclass
class _Group:
    """A configuration's first record and its runs, per repeat, in the order read."""

    index: int
    grid: dict[str, Any]
    config: dict[str, Any]
    repeats: dict[int, list[_Seen]] = field(default_factory=dict)


class _Reader:
    """Reads records one at a time (:meth:`add`), keeping per run only what the verdict and the flags need, and
    adding its summary's figures to its configuration's as it goes; then builds the configurations
    (:meth:`configs`). ``fetch`` gives a record again from where it was read: needed only where a run counted in a
    configuration's figures turned out to be superseded by a later attempt."""

    def __init__(self, axes: Sequence[str], include_contended: bool) -> None:
        self.axes, self.include_contended = list(axes), include_contended
        self.groups: dict[str, _Group] = {}
        self.buckets: dict[tuple[str, _Machine | None, int | None], _Bucket] = {}
        self.records = 0
        self.flags: list[Flag] = []
        self._machines: dict[_Machine, _Machine] = {}  # one tuple per distinct environment: thousands of runs share it

    def add(self, record: dict[str, Any], where: Any) -> None:
        self.records += 1
        if record["status"] == "interrupted":  # stopped with the sweep: neither a result nor a failure
            return
        key = record["key"].rsplit("-r", 1)[0]
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(record["index"], record["grid"], record["config"])
        summary = _dict(record.get("summary"))
        contention = _dict(summary.get("contention"))
        window = _dict(_dict(summary.get("steps")).get("global")).get("window_s")
        run = RunResult(
            repeat=record["repeat"],
            attempt=record.get("attempt", 0),
            position=record.get("position", 0),
            status=sys.intern(str(record["status"])),
            samples_per_s=_float(summary.get("samples_per_s")),
            contended=bool(record.get("contended")),
            foreign_cpu_share=_float(contention.get("foreign_cpu_share")),
            diverged=str(summary["diverged"]) if summary.get("diverged") else None,
            used=False,
            run_dir=str(record.get("run_dir", "")),
            error=None if record.get("error") is None else str(record["error"]),
            measured_s=_float(window) if _number(window) else _float(summary.get("train_time_s")),
            elapsed_s=_float(record.get("elapsed_s")),
            train_time_s=_float(summary.get("train_time_s")),
            engine_s=_float(summary.get("wall_time_s")),
        )
        seen = _Seen(run, None, None, None, None, None)
        if record["status"] == "completed" and record.get("summary"):
            seen.where, seen.world = where, summary.get("world_size")
            seen.machine, seen.threads = self._machine(record, summary), _count(summary.get("threads_per_process"))
            bucket = self.buckets.get((key, seen.machine, seen.threads))
            if bucket is None:
                bucket = self.buckets[key, seen.machine, seen.threads] = _Bucket()
            seen.bucket = bucket
            if self.include_contended or not run.contended:
                bucket.eligible.add(summary, where)
            else:
                bucket.others = bucket.others or _Figures()
                bucket.others.add(summary, where)
        group.repeats.setdefault(record["repeat"], []).append(seen)

    def _machine(self, record: dict[str, Any], summary: dict[str, Any]) -> _Machine:
        """What the run ran on, from its record, else from the config.json its run folder keeps."""
        versions = _dict(summary.get("versions")) or _dict(record.get("versions"))
        host = _dict(summary.get("host")) or _dict(record.get("host"))
        if not versions or not host:
            written = _written_facts(str(record.get("run_dir") or ""))
            versions, host = versions or _dict(written.get("versions")), host or _dict(written.get("host"))
        device = _dict(summary.get("device"))
        kind, name = _text(device.get("type")), _text(device.get("name"))

        def version(package: str) -> str | None:
            return (_text(versions.get(package)) or "") if versions else None

        machine = (
            version("torch"),
            version("ignite"),
            version("cuda"),
            version("torch_xla"),
            None if kind is None else (kind if kind == "cpu" or name is None else f"{kind} {name}"),
            _text(host.get("cpu")) or (name if kind == "cpu" else None),
            _count(summary.get("cpu_cores")) or _count(host.get("cpu_cores")),
        )
        return self._machines.setdefault(machine, machine)

    def configs(self, fetch: Callable[[Any], dict[str, Any]]) -> list[ConfigResult]:
        environments = self._environments()
        configs: list[ConfigResult] = []
        parts: list[list[_Seen]] = []
        for group in self.groups.values():
            for config, members in self._split(group, self._choose(group), environments):
                configs.append(config)
                parts.append(members)
        again: list[tuple[Any, int]] = []  # (where, configuration) of the runs to read again
        figures = []
        for i, members in enumerate(parts):
            found = _Figures()
            buckets = list({id(s.bucket): s.bucket for s in members if s.bucket is not None}.values())
            if not any(s.run.used for s in members):  # nothing usable: the figures of every completed run
                for bucket in buckets:
                    found.merge(bucket.eligible)
                    if bucket.others is not None:
                        found.merge(bucket.others)
            elif any(bucket.stale for bucket in buckets):
                again += [(s.where, i) for s in members if s.run.used]
            else:
                for bucket in buckets:
                    found.merge(bucket.eligible)
            figures.append(found)
        for where, i in sorted(again):
            figures[i].add(_dict(fetch(where).get("summary")), where)
        for config, found in zip(configs, figures):
            found.fill(config)
        order = sorted(range(len(configs)), key=lambda i: configs[i].index)  # stable: environments keep their order
        return [configs[i] for i in order]

    def _choose(self, group: _Group) -> list[_Seen]:
        """Every run of a configuration; per repeat, the last completed attempt that was not contended is used (or,
        with ``include_contended``, the last completed attempt)."""
        runs = []
        for _, attempts in sorted(group.repeats.items()):
            attempts.sort(key=lambda seen: seen.run.attempt)
            eligible = [s for s in attempts if s.where is not None and (self.include_contended or not s.run.contended)]
            if eligible:
                eligible[-1].run.used = True
                for superseded in eligible[:-1]:
                    cast(_Bucket, superseded.bucket).stale = True
            runs += attempts
        return runs

    def _environments(self) -> dict[_Machine, tuple[int, str | None]]:
        """Each environment seen (number, label): runs that agree on every field both of them know share one;
        numbered in the order they first appear in the results. One environment has no label."""
        counts: dict[_Machine, int] = {}
        first: dict[_Machine, Any] = {}  # where its first run is in the results
        for group in self.groups.values():
            for attempts in group.repeats.values():
                for seen in attempts:
                    if seen.machine is not None:
                        counts[seen.machine] = counts.get(seen.machine, 0) + 1
                        if seen.machine not in first or seen.where < first[seen.machine]:
                            first[seen.machine] = seen.where
        known: list[_Machine] = []  # the most specific first: the others join the first they agree with
        joined: dict[_Machine, int] = {}
        for machine in sorted(counts, key=lambda m: (sum(v is None for v in m), first[m])):
            home = next((i for i, env in enumerate(known) if _agree(machine, env)), None)
            if home is None:
                home = len(known)
                known.append(machine)
            joined[machine] = home
        if len(known) < 2:
            return {machine: (0, None) for machine in counts}
        runs = [0] * len(known)
        seen_first: list[Any] = [None] * len(known)
        for machine, home in joined.items():
            runs[home] += counts[machine]
            if seen_first[home] is None or first[machine] < seen_first[home]:
                seen_first[home] = first[machine]
        order = sorted(range(len(known)), key=lambda i: seen_first[i])
        number = {home: n for n, home in enumerate(order)}
        differ = [i for i in range(len(ENVIRONMENT_FIELDS)) if len({env[i] for env in known if env[i] is not None}) > 1]

        def label(env: _Machine) -> str:
            return ", ".join(f"{ENVIRONMENT_FIELDS[i]} {_shown_value(env[i])}" for i in differ if env[i] is not None)

        labels = {home: f"env {number[home] + 1} ({label(known[home])})" for home in range(len(known))}
        described = "; ".join(f"{labels[home]}: {runs[home]} run(s)" for home in order)
        self.flags.append(
            Flag(
                "mixed-environments",
                None,
                f"{len(known)} environments that differ in {', '.join(ENVIRONMENT_FIELDS[i] for i in differ)}: "
                f"{described}; each has its own verdict",
            )
        )
        return {machine: (number[home], labels[home]) for machine, home in joined.items()}

    def _split(
        self, group: _Group, runs: list[_Seen], environments: dict[_Machine, tuple[int, str | None]]
    ) -> list[tuple[ConfigResult, list[_Seen]]]:
        """A configuration's runs as one result per environment, and within one, per intra-op thread count where
        its runs used several; runs without a summary go with its most common environment and thread count."""
        envs = [environments[s.machine] if s.machine is not None else None for s in runs]
        present = Counter(e for e in envs if e is not None)
        home = min(present, key=lambda e: (-present[e], e[0])) if present else (0, None)
        parts: dict[tuple[int, str | None], list[_Seen]] = defaultdict(list)
        for seen, env in zip(runs, envs):
            parts[env or home].append(seen)
        results = []
        for env in sorted(parts, key=lambda e: e[0]):
            members = parts[env]
            threads = Counter(s.threads for s in members if s.threads is not None)
            usual = max(threads, key=lambda t: threads[t]) if threads else None  # the most runs; the first on a tie
            by_threads: dict[Any, list[_Seen]] = {usual: []}
            for seen in members:
                by_threads.setdefault(seen.threads if seen.threads in threads else usual, []).append(seen)
            suffix = f"@env{env[0] + 1}" if env[0] else ""
            for count, runs_of in by_threads.items():
                result = self._result(group, runs_of, env[1], suffix)
                if count != usual:
                    result.suffix += f"@threads={count}"
                results.append((result, runs_of))
            if len(by_threads) > 1:
                name = f"cfg{group.index:03d}{suffix}"
                shown = ", ".join(f"{t} ({len(runs_of)} run(s))" for t, runs_of in by_threads.items())
                self.flags.append(
                    Flag(
                        "mixed-environments",
                        name,
                        f"its runs used different intra-op thread counts per process: {shown}; each count is "
                        f"reported as a configuration of its own ({name}, {name}@threads=...)",
                    )
                )
        return results

    def _result(self, group: _Group, members: list[_Seen], environment: str | None, suffix: str) -> ConfigResult:
        written = [s for s in members if s.where is not None]
        world = min(written, key=lambda s: s.where).world if written else None  # the first one written
        world = world if isinstance(world, int) and world > 0 else _world(group.config)
        workload = workload_of(group.config, self.axes) + (f"; {environment}" if environment else "")
        config = ConfigResult(group.index, group.grid, group.config, workload, world)
        config.environment, config.suffix = environment, suffix
        config.runs = [s.run for s in members]
        return config


def _count(value: Any) -> int | None:
    """A count a run can report (threads, cores): a positive integer, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _agree(a: _Machine, b: _Machine) -> bool:
    return all(x is None or y is None or x == y for x, y in zip(a, b))


def _text(value: Any) -> str | None:
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def _shown_value(value: Any) -> str:
    return "none" if value == "" else str(value)


def _written_facts(run_dir: str) -> dict[str, Any]:
    """The run's config.json (its versions and host), or nothing where it cannot be read."""
    if not run_dir:
        return {}
    try:
        with open(Path(run_dir) / "config.json", "rb") as f:
            return _dict(json.loads(f.read(CONFIG_JSON_LIMIT)))
    except (OSError, ValueError):
        return {}


class _Mean:
    """The mean of the finite numbers added, one at a time: what :func:`statistics.fmean` gives for all of them
    (Shewchuk's exact partial sums, summed with :func:`math.fsum`), without keeping them."""

    __slots__ = ("n", "partials")

    def __init__(self) -> None:
        self.n = 0
        self.partials: list[float] = []

    def add(self, value: Any) -> None:
        if not _number(value):
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

    def merge(self, other: _Mean) -> None:
        for x in other.partials:  # exact: the partials sum to the other's values exactly
            self._add(x)
        self.n += other.n

    @property
    def value(self) -> float | None:
        return math.fsum(self.partials) / self.n if self.n else None


FLOPS_FIGURES = ("achieved_flops_per_s", "utilisation_attainable", "utilisation_peak")


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


def _square(matrix: Any) -> TypeGuard[list[list[int]]]:
    """A non-empty square matrix of integers."""
    return (
        isinstance(matrix, list)
        and bool(matrix)
        and all(isinstance(row, list) and len(row) == len(matrix) for row in matrix)
        and all(isinstance(v, int) and not isinstance(v, bool) for row in matrix for v in row)
    )


def _kind(config: ConfigResult) -> tuple:
    """What a configuration's speed-up baseline must share with it: every option but the layout, and where it ran."""
    options = sorted((k, repr(v)) for k, v in config.config.items() if k not in LAYOUT_OPTIONS)
    return (config.environment, *options)


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


# What makes a step faster, each against the configuration equal to it but for that option's plain value: the
# options it is compared on, and the options that only tune it (ignored when looking for the plain twin).
VERSUS = {
    "compile": (False, ("compile_mode",)),
    "comm_hook": ("none", ("powersgd_rank", "powersgd_start_iter")),
    "static_graph": (False, ()),
    "gradient_as_bucket_view": (False, ()),
}


def _versus(configs: list[ConfigResult], confidence: float) -> None:
    """Each configuration that compiles or changes DDP's communication, against its plain twin: the speed-up with its
    interval, and for a compiled one the iterations after which its compilation has paid for itself."""
    by_options = {}
    for config in configs:
        by_options[(config.environment, _plain_key(config.config))] = config
    for config in configs:
        for option, (plain, tuning) in VERSUS.items():
            value = config.config.get(option, plain)
            if value == plain or not config.samples_per_s:
                continue
            twin_options = {k: v for k, v in config.config.items() if k not in tuning}
            twin_options[option] = plain
            twin = by_options.get((config.environment, _plain_key(twin_options)))
            if twin is None or not twin.samples_per_s:
                continue
            found: dict[str, Any] = {"option": option, "value": value, "plain": twin.name}
            found["speedup"] = ratio_interval(config.samples_per_s, twin.samples_per_s, confidence)
            if option == "compile" and config.compile_s is not None and config.global_batch:
                fast, slow = config.throughput.value, twin.throughput.value
                saved = config.global_batch / slow - config.global_batch / fast if fast and slow else 0.0
                cost = config.compile_s.value or 0.0
                found["compile_s"] = cost
                found["payback_iterations"] = cost / saved if saved > 0 else None
            if option == "comm_hook":
                found["bytes"] = (twin.comm_bytes_per_step, config.comm_bytes_per_step)
                exposed = [1e3 * c.phases["exposed_comm"] if c.comm_timed else None for c in (twin, config)]
                found["exposed_ms"] = tuple(exposed)
                found["val_accuracy"] = (twin.val_accuracy, config.val_accuracy)
            config.versus.append(found)


_RUNS_OWN = set(names_with_role(TrainConfig, Role.OUTPUT, Role.MEASUREMENT))


def _plain_key(options: dict[str, Any]) -> tuple:
    """A configuration's options as a key, leaving out where its files went and what it measured (a run's own), and
    the options that only tune another (compile_mode, ...)."""
    left_out = {t for _, ts in VERSUS.values() for t in ts} | _RUNS_OWN
    plain = {k: value for k, (value, _) in VERSUS.items()}  # a plain value is the same as none given (older records)
    return tuple(
        sorted((k, repr(v)) for k, v in options.items() if k not in left_out and not (k in plain and v == plain[k]))
    )


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
    others = len(measured) - 1  # the leader is compared with each: the family the correction is over
    overlapping = [c for c in measured[1:] if not leads(top.throughput, c.throughput, others, confidence)]
    pct, alpha = round(100 * confidence), 100 - round(100 * confidence)
    test = f"a one-sided Welch t-test at {alpha:g} %" + (f" / {others} (Bonferroni)" if others > 1 else "")
    if not overlapping:
        verdict.best = top.name
        each = "the other configuration" if others == 1 else f"each of the {others} others"
        verdict.reason = (
            f"its {pct} % interval lies above every other configuration's and it is shown faster than {each} by "
            f"{test}; {100 * difference:.1f} % faster than the runner-up {runner.name}"
        )
        return verdict
    verdict.tied = [top.name] + [c.name for c in overlapping]
    verdict.repeats_needed = {
        c.name: repeats_to_separate(top.throughput, c.throughput, confidence, comparisons=others) for c in overlapping
    }
    verdict.margin = margin
    verdict.equivalent = all(equivalent(top.samples_per_s, c.samples_per_s, margin) for c in overlapping)
    apart = [c.name for c in overlapping if _intervals_apart(top, c)]
    if not apart:
        verdict.reason = "their intervals overlap the fastest configuration's"
    else:
        near = len(overlapping) - len(apart)
        listed = ", ".join(apart[:TIED_LISTED]) + (
            f" and {len(apart) - TIED_LISTED} more" if len(apart) > TIED_LISTED else ""
        )
        verdict.reason = (
            (f"{near} of their intervals overlap the fastest configuration's; " if near else "")
            + f"the fastest's interval lies above that of {listed}, but with {others + 1} configurations compared "
            f"{test} does not show it faster"
        )
    if verdict.equivalent:
        verdict.reason += (
            f"; each is shown within ±{100 * margin:g} % of it (two one-sided tests at 5 %): equivalent, any will do"
        )
    return verdict


def _intervals_apart(top: ConfigResult, other: ConfigResult) -> bool:
    low, high = top.throughput.low, other.throughput.high
    return low is not None and high is not None and low > high


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


def _less_memory(a: ConfigResult, b: ConfigResult) -> bool:
    """Whether ``a`` needs less peak memory per rank than ``b`` beyond the noise: their intervals apart where both
    have one, else at least MEMORY_MATERIAL less (a difference inside the runs' spread is no reason to choose)."""
    mine, theirs = a.peak_memory, b.peak_memory
    if mine.value is None or not theirs.value:
        return False
    if mine.has_interval and theirs.has_interval:
        return cast(float, mine.high) < cast(float, theirs.low)
    return mine.value <= (1 - MEMORY_MATERIAL) * theirs.value


def _cheaper(cheap: ConfigResult, than: ConfigResult) -> str:
    """What makes ``cheap`` cheaper than ``than``, in words."""
    reasons = []
    if cheap.world_size < than.world_size:
        reasons.append(
            f"uses {cheap.world_size} process{'es' if cheap.world_size > 1 else ''} instead of {than.world_size}"
        )
    if _less_memory(cheap, than):
        share = 1 - cast(float, cheap.peak_memory.value) / cast(float, than.peak_memory.value)
        reasons.append(f"{100 * share:.0f} % less memory per rank")
    return " and ".join(reasons) or "is no more expensive"


def _recommend(
    verdict: Verdict, configs: list[ConfigResult], limit: float | None, confidence: float = CONFIDENCE
) -> None:
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
    if lead.throughput.has_interval:  # tied with the lead by the verdict's own rule
        rivals = len(measured) - 1
        peers += [c for c in fitting[1:] if not leads(lead.throughput, c.throughput, rivals, confidence)]
    infinite = float("inf")
    cheapest = min(
        peers, key=lambda c: (c.world_size, c.peak_memory.value or infinite, -cast(float, c.throughput.value))
    )
    if cheapest.world_size == lead.world_size and not _less_memory(cheapest, lead):
        cheapest = lead  # cheaper only inside the noise: the fastest is as cheap
    verdict.recommended = cheapest.name
    ahead = measured[: next(i for i, c in enumerate(measured) if c is lead)]  # faster than the lead
    slower = [c.name for c in ahead if not c.fits]
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
        if config.recompilations:
            flags.append(Flag("recompiled", config.name, recompile_text(config)))
        if config.unsettled_runs:
            flags.append(Flag("unsettled", config.name, f"{config.unsettled_runs} run(s) never settled"))
    return flags


def recompile_text(config: ConfigResult) -> str:
    """ "recompiled 3 time(s): shapes changed (...)" for a configuration whose runs recompiled."""
    from ignite_ddl.measure.compilation import recompile_hint  # torch-free module-level code, imported lazily

    hint = recompile_hint(config.recompile_reasons)
    reason = config.recompile_reasons[0] if config.recompile_reasons else "reason not recorded"
    return f"recompiled {config.recompilations} time(s): {hint or reason}" + (f" ({reason})" if hint else "")


def versus_text(config: ConfigResult, found: dict[str, Any]) -> str:
    """One comparison of :attr:`ConfigResult.versus` in words."""
    speedup: Estimate = found["speedup"]
    change = f"{100 * (speedup.value - 1):+.0f} % samples/s" if speedup.value is not None else "samples/s unknown"
    if speedup.low is not None and speedup.high is not None:
        change += f" (95 % interval {100 * (speedup.low - 1):+.0f} to {100 * (speedup.high - 1):+.0f} %)"
    head = f"{config.name} ({found['option']}={found['value']}) vs {found['plain']}: {change}"
    if found["option"] == "compile" and "compile_s" in found:
        payback = found["payback_iterations"]
        if payback is None:
            return f"{head}; its {found['compile_s']:.0f} s of compilation never pay back (not faster per step)"
        return f"{head}; pays its {found['compile_s']:.0f} s of compilation back after {payback:.0f} iterations"
    if found["option"] == "comm_hook":
        parts = []
        before, after = found["bytes"]
        if before and after:
            parts.append(f"bytes per step {before / 1e6:.3g} -> {after / 1e6:.3g} MB")
        before, after = found["exposed_ms"]
        if before is not None and after is not None:
            parts.append(f"exposed communication {before:.1f} -> {after:.1f} ms")
        before, after = found["val_accuracy"]
        if before is not None and after is not None:
            parts.append(f"val accuracy {before:.3f} -> {after:.3f}")
        return head + ("; " + ", ".join(parts) if parts else "")
    return head


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
