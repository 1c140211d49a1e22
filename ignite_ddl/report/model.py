"""What an analysis is, as data: the thresholds a report judges by, the limits on what it lists and draws, and the
dataclasses it is made of (:class:`RunResult`, :class:`ConfigResult`, :class:`Verdict`, :class:`Flag`,
:class:`Analysis`). Kept apart from reading the records and from judging them, so that the renderers, the plots and
a notebook can hold the results' types without the code that computes them."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ignite_ddl.core.config import declared_default
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.strategies import resolve_strategy
from ignite_ddl.report.stats import EQUIVALENCE_MARGIN, Estimate

__all__ = ["Analysis", "ConfigResult", "Flag", "RunResult", "Verdict", "strategy_label"]

MIB = float(1 << 20)
MIN_REPEATS = 3  # fewer usable runs than this (or the spec's min_repeats): a configuration is not judged
QUALITY_MARGIN = 0.01  # validation accuracy (a share) below the reference's by more than this: "learns worse"
# Where a workload is judged by validation loss (it reports no accuracy, or it is a language model): a mean loss above
# the reference's by more than this share of the reference's mean loss, "learns worse". Relative, as a loss has no
# scale of its own (cross-entropy in nats, a regression's squared error in its data's units).
QUALITY_MARGIN_LOSS = 0.02
QUALITY_MIN_EPOCHS = 2  # runs shorter than this have not learnt enough for their accuracy to be compared
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
# One colour per phase, in every plot that draws phases (the step breakdown, notebook 01's DDP diagram).
PHASE_COLOURS = {
    "data": "tab:gray",
    "forward": "tab:blue",
    "backward_compute": "tab:orange",
    "exposed_comm": "tab:red",
    "optimizer": "tab:green",
    "handlers": "tab:purple",
}
EFFICIENCY_LOW = 0.7

FLAG_MEANINGS = {
    "contended": "other processes used the CPUs (or GPUs) while the run measured, so its timings include waiting "
    "for them; it is left out of the verdict (re-run it, or sweep with --rerun-contended N), unless the report "
    "counts contended runs (--include-contended): then every figure is marked as measured under contention, and a "
    "configuration with a contended run counted is not judged (never best nor recommended)",
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
    "provisional": "some configuration of the workload is not judged (fewer usable runs than min_repeats, "
    "unsettled, contended) or has no usable run: it might have been the fastest, and the verdict may change with "
    "more runs",
    "learns-worse": "the configuration's validation accuracy is below its workload's reference configuration's by "
    "more than quality_margin, or, where the workload is judged by validation loss (no accuracy, or a language "
    "model), its validation loss is above the reference's by more than quality_margin_loss of it (the whole interval "
    "of the difference over repeats): it is never recommended, however fast it is",
    "recompiled": "torch.compile compiled the model again during training (a guard failed: a new input shape, "
    "dtype, ...): each recompilation costs compilation time, which is counted in compile_s and left out of the "
    "throughput, and a run that recompiles often never reaches its compiled speed",
    "above-measured-peak": "the run's model FLOP/s are above its reference, its ranks' share of its machine's "
    "measured matmul peak (for runs before schema 3, the largest matmul rate measured on its device), which no "
    "training step can truly reach: the FLOP count (a model whose arithmetic FlopCounterMode miscounts) or one of "
    "the two timings is off; its utilisation is not a figure to read",
    "flops-not-counted": "a layer of the model holds a weight matrix, yet the FLOP counter counted nothing for it (a "
    "fused kernel or an extension's op it has no formula for): its FLOPs are unknown, so no MFU is given rather "
    "than a low one; a workload can give its own count (Workload.flops)",
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


def strategy_label(asked: Any, ran: str | None, world: int) -> str | None:
    """The strategy of a configuration as every table of the report labels it: the one it asked for where it ran with
    that one, else both, so that a grid's ``ddp`` and the ``none`` its one process ran are one label everywhere:
    ``ddp -> none (one process)`` (one process has nothing to average), ``auto -> ddp``. ``ran``: as its runs
    resolved it (None without a summary: resolved here, where the strategy is described; else what it asked for).

    Example:
        >>> strategy_label("ddp", "none", 1), strategy_label("auto", "ddp", 2), strategy_label("fsdp", "fsdp", 2)
        ('ddp -> none (one process)', 'auto -> ddp', 'fsdp')
        >>> strategy_label("ddp", None, 1), strategy_label("fsdp", None, 1), strategy_label(None, "ddp", 2)
        ('ddp -> none (one process)', 'fsdp', 'ddp')
    """
    if not isinstance(asked, str):
        return ran
    if ran is None:
        try:
            ran = resolve_strategy(asked, world).name
        except ConfigError:  # refused with this many processes, or a strategy not described in this process
            return asked
    if ran == asked:
        return asked
    why = " (one process)" if world == 1 and asked != "auto" else ""
    return f"{asked} -> {ran}{why}"


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
    val_accuracy: float | None = None  # after the last epoch
    epochs: int | None = None  # epochs trained
    val_loss: float | None = None  # after the last epoch


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
    utilisation_attainable: float | None = None  # MFU: of each rank's share of its machine's peak, mean over runs
    machine_peak: float | None = None  # its runs' machine's matmul peak (FLOP/s), the reference of their shares
    machine_peak_stable: bool = True  # every run's peak was stable within 3 %
    flops_by_formula: list[str] = field(default_factory=list)  # module types counted by formula (recurrent layers)
    flops_not_counted: list[str] = field(default_factory=list)  # module types whose FLOPs nothing counted: no MFU
    # Runs before schema 3, each of whose ranks measured its own rate: one reference per device for every row.
    matmul_rate: float | None = None  # the highest matmul rate (FLOP/s) its runs' ranks measured
    matmul_reference: float | None = None  # the device's reference: the highest any run of the sweep measured there
    utilisation_peak: float | None = None  # of the GPU's datasheet peak (None where no datasheet applies)
    straggler: dict[str, Any] | None = None
    val_accuracy: float | None = None
    val_loss: float | None = None  # after the last epoch, mean over the runs
    threads_per_process: int | None = None
    cpu_cores: int | None = None
    device_type: str | None = None
    measured_iterations: int | None = None
    global_batch: int | None = None
    profiler: dict[str, Any] | None = None
    confusion_matrix: list[list[int]] | None = None  # validation, summed over the runs used
    strategy: str | None = None  # none / ddp / fsdp, as the runs resolved it
    workload_info: dict[str, Any] | None = None  # a --workload's summary facts: module, file, sample unit
    peak_memory: Estimate = field(default_factory=lambda: Estimate(None))  # bytes: the largest rank's peak per run
    memory_kind: str | None = None  # what peak_memory is: "resident" (host) or "CUDA reserved"
    workers_memory: float | None = None  # bytes the largest rank's DataLoader workers hold of their own
    held_bytes: float | None = None  # parameters + gradients + optimizer state of the largest rank
    predicted_memory: float | None = None  # bytes: the peak per rank predicted before the sweep (its records')
    predicted_leaves_out: tuple[str, ...] = ()  # what that prediction says it does not predict
    out_of_memory: int = 0  # runs that ran out of memory
    fits: bool = True  # within the spec's memory_limit_mb (and no run ran out of memory)
    environment: str | None = None  # where its runs were made, when a sweep's runs were not all made alike
    suffix: str = ""  # tells it apart from the same grid point run elsewhere: "@env2", "@threads=1"
    compile_s: Estimate | None = None  # torch.compile: compilation time beyond a steady iteration, over the runs
    recompilations: int = 0  # the most recompilations of any run
    recompile_reasons: list[str] = field(default_factory=list)
    comm_bytes_per_step: float | None = None  # bytes a rank puts on the wire per step (a hook may compress them)
    # The iterations before an option changes the run's behaviour (PowerSGD's start, the first compilation),
    # measured apart: {"cause", "first_iteration", "last_iteration" (the first run's), "samples_per_s",
    # "step_s_p50", "comm_bytes_per_step" (means over the runs)}; every other figure is the steady phase's.
    warmup_phase: dict[str, Any] | None = None
    unsettled_runs: int = 0  # runs whose step times never settled (MSER-5)
    ddp_crosscheck: dict[str, float] | None = None  # ours / DDP's own statistics: "comm" and "backward", mean ratios
    versus: list[dict[str, Any]] = field(default_factory=list)  # against the same configuration without compile/hook
    # Why the verdict passes it over (fewer usable runs than min_repeats, unsettled, contended), or None: judged.
    not_judged: str | None = None
    # What it learnt against its workload's reference configuration: "reference", "no worse", "learns worse",
    # "diverged" or "not judged"; quality_note says why in words.
    quality: str | None = None
    quality_note: str = ""
    quality_reference: str | None = None
    # What its workload's quality is judged by: "accuracy", or "loss" where the workload reports no validation
    # accuracy or is a language model (sample_unit tokens: its loss and perplexity are its quality).
    quality_by: str = "accuracy"
    accuracy_difference: Estimate | None = None  # mean validation accuracy minus the reference's, over repeats
    loss_difference: Estimate | None = None  # mean validation loss minus the reference's, over repeats
    # The figures the schema marks Shown (core.schema.shown_figures): column -> mean over the runs used (scaled).
    shown: dict[str, float | None] = field(default_factory=dict)

    def option(self, name: str) -> Any:
        """The run option ``name`` as this configuration's runs had it: its recorded value, or the declared default
        for records written before the option existed (never a default typed again here)."""
        return self.config.get(name, declared_default(name))

    @property
    def val_accuracies(self) -> list[float]:
        """The validation accuracy of each run used."""
        return [r.val_accuracy for r in self.used_runs if r.val_accuracy is not None]

    @property
    def val_losses(self) -> list[float]:
        """The validation loss of each run used."""
        return [r.val_loss for r in self.used_runs if r.val_loss is not None]

    @property
    def tokens(self) -> bool:
        """Whether its workload counts tokens (a language model: the GPT workload, or one of its own so declared)."""
        return (self.workload_info or {}).get("sample_unit") == "tokens"

    @property
    def perplexity(self) -> float | None:
        """exp(mean validation loss) of a language model (a token workload), the geometric mean of its runs'
        perplexities; None for another workload or where no loss was recorded (or it overflows)."""
        if not self.tokens or self.val_loss is None or self.val_loss > 700:
            return None
        return math.exp(self.val_loss)

    @property
    def learns_worse(self) -> bool:
        return self.quality in ("learns worse", "diverged")

    @property
    def name(self) -> str:
        return f"cfg{self.index:03d}{self.suffix}"

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.grid_shown.items())

    @property
    def strategy_label(self) -> str | None:
        """Its strategy as every table labels it (:func:`strategy_label`): ``ddp -> none (one process)``."""
        return strategy_label(self.config.get("strategy"), self.strategy, self.world_size)

    @property
    def grid_shown(self) -> dict[str, Any]:
        """Its grid values as the report shows them: a strategy axis as :attr:`strategy_label` labels it."""
        if "strategy" not in self.grid:
            return self.grid
        return {k: self.strategy_label if k == "strategy" else v for k, v in self.grid.items()}

    @property
    def refusal(self) -> str | None:
        """Why it never ran, where every run of it was refused (before the sweep, or by its own checks at its
        start); None otherwise."""
        if not self.runs or any(r.status != "refused" for r in self.runs):
            return None
        return self.runs[0].error or "refused"

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
    # one-sided t-test, fastest vs runner-up ("the fastest is no faster"): Welch's, or on the pooled spread (pooled)
    welch_p: float | None = None
    repeats_needed: dict[str, int | None] = field(default_factory=dict)  # tied config -> repeats to separate it
    reason: str = ""
    unmeasured: list[str] = field(default_factory=list)  # configurations of the workload with no usable run
    recommended: str | None = None  # the configuration to use: the best, or the cheapest of those tied with it
    recommendation: str = ""  # why, in words
    does_not_fit: list[str] = field(default_factory=list)  # above the memory limit, or ran out of memory
    equivalent: bool = False  # every tied configuration shown within ``margin`` of the fastest (two one-sided tests)
    margin: float = EQUIVALENCE_MARGIN
    welch_threshold: float | None = None  # what welch_p (one-sided) is compared with: alpha / (k - 1), Bonferroni
    not_judged: dict[str, str] = field(default_factory=dict)  # configuration -> why the verdict passes it over
    rule: str = ""  # the rule that chose the recommended configuration, in words
    evidence: str = ""  # the recommended configuration's figures: runs, mean, interval
    passed_over: dict[str, str] = field(default_factory=dict)  # faster configurations not recommended -> why
    pooled: bool = False  # the intervals and tests use the workload's pooled spread (log scale), not each its own

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
    # Configurations every run of which was refused (before the sweep started, or by their own checks): never run,
    # never compared; each with why (:attr:`ConfigResult.refusal`). Not among ``configs``.
    refused: list[ConfigResult] = field(default_factory=list)

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
