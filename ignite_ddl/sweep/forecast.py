"""A sweep's plan: every configuration's predicted peak memory per rank, before any of its runs starts, and whether
it fits the spec's ``memory_limit_mb`` (``ignite-ddl plan SPEC``; a sweep records each prediction beside what its
runs measure, and does not launch a configuration predicted not to fit unless ``run_unfit`` is set).

The model's part of each prediction is a trace on fake tensors (:mod:`ignite_ddl.predict.memory`). The rest is
the **runtime**: what a rank of this launch holds before the model (Python, PyTorch, Ignite, the process group, the
loaders and their DataLoader workers' hand-over). It depends on the machine and on how the ranks are launched, not on
the model, so it is measured: one short run of the tiny ``toy`` model per launch layout (processes, strategy, AMP,
loader workers, dataset, compile; the options in :data:`RUNTIME_OPTIONS`), started as the sweep starts its runs, its
peak less its own model and data. Each is measured once per machine and kept in ``<output_dir>/plan/runtime.json``
(with the host and the versions it was measured on: another machine's or release's entry is measured again), so that
``ignite-ddl plan`` and the sweep that follows share it.

Example:
    >>> from ignite_ddl.core.config import TrainConfig
    >>> probe = runtime_probe(TrainConfig(model="resnet18", nproc_per_node=2, batch_size=256, num_workers=2), "out")
    >>> probe.model, probe.nproc_per_node, probe.num_workers, probe.batch_size
    ('toy', 2, 2, 8)
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.environment import host, versions
from ignite_ddl.core.jsonfiles import read_json, write_json
from ignite_ddl.core.strategies import resolve_strategy
from ignite_ddl.core.sweep_records import MemoryPlan, RunRecord, StepModel
from ignite_ddl.core.text import fit_line, format_table
from ignite_ddl.sweep.plan import Refused, make_run
from ignite_ddl.sweep.probes import failure, remember_failure, run_probe
from ignite_ddl.sweep.spec import Spec, configurations, shown_grid

if TYPE_CHECKING:  # the plan's tracing imports torch: only when it runs
    from ignite_ddl.predict.memory import Prediction

__all__ = [
    "RUNTIME_OPTIONS",
    "Planned",
    "Planner",
    "fit_step_model",
    "format_plan",
    "measured_layouts",
    "measured_link",
    "plan_memory",
    "plan_record",
    "runtime_probe",
    "unfit_reason",
    "write_plan",
]

MIB = 2**20
# The options that shape a rank's runtime (everything but the model's own tensors): a probe keeps them.
RUNTIME_OPTIONS = (
    "backend",
    "nproc_per_node",
    "nnodes",
    "start_method",
    "threads",
    "num_workers",
    "pin_memory",
    "strategy",
    "amp",
    "compile",
    "compile_mode",
    "dataset",
    "data_dir",
    "checkpoints",
    "record_steps",
    "comm_timing",
    "measure_flops",
)
_PROBE_STEPS = 8  # iterations of the probe run: past its warm-up (2), as a sweep's run measures after its own


@dataclass(frozen=True)
class Planned:
    """One configuration of the plan and its prediction."""

    index: int
    grid: dict[str, Any]
    config: TrainConfig
    prediction: Prediction

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.grid.items())


def runtime_probe(config: TrainConfig, folder: str | Path) -> TrainConfig:
    """The run that measures ``config``'s runtime: its launch layout (:data:`RUNTIME_OPTIONS`), the tiny ``toy``
    model, 4 samples per rank, 8 steps, one epoch."""
    world = (config.nproc_per_node or 1) * config.nnodes
    kept = {name: getattr(config, name) for name in RUNTIME_OPTIONS}
    options = {
        **kept,
        "model": "toy",
        "batch_size": 4 * world,
        "train_size": 4 * world * _PROBE_STEPS,
        "val_size": 4 * world,
        "epochs": 1,
        "warmup_iters": 2,
        "progress": False,
        "overwrite": True,
    }
    digest = hashlib.sha1(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()[:12]
    # the sweep's matmul peak, read back rather than measured again by each probe
    where = {"output_dir": str(Path(folder) / "runtime" / digest), "matmul_peak_cache": config.matmul_peak_cache}
    return TrainConfig.from_dict({**options, **where})


def _key(probe: TrainConfig) -> str:
    return Path(probe.output_dir).name


class _Cache:
    """Figures measured on this machine, kept in ``plan/<name>.json`` of an output folder: entries measured on
    another host or with other versions are not read (they are measured again). A probe's failure (an entry with
    an ``error``) is not written: it is kept until the next sweep starts (:mod:`ignite_ddl.sweep.probes`)."""

    def __init__(self, folder: Path, name: str):
        self.path = folder / f"{name}.json"
        self.where = {"host": host(), "versions": versions()}
        saved: Any = {}
        if self.path.is_file():
            try:
                saved = read_json(self.path)
            except (OSError, ValueError):
                saved = {}  # a damaged cache is measured again
        same = isinstance(saved, dict) and all(saved.get(k) == v for k, v in self.where.items())
        self.entries: dict[str, Any] = dict(saved.get("entries") or {}) if same else {}

    def get(self, key: str) -> Any:
        kept = self.entries.get(key)
        if isinstance(kept, dict) and "error" in kept:  # a failure an earlier version wrote: tried again
            kept = None
        return kept if kept is not None else failure(str(self.path), key)

    def current(self, key: str, revision: int, kept_only: bool = False) -> tuple[dict[str, Any] | None, bool]:
        """The entry kept for ``key`` (None: none) and whether it is to be measured (again): none kept, or one an
        earlier ``revision`` of its probe wrote (it means something else; a failure this sweep met stands). With
        ``kept_only`` nothing is measured and an entry of any revision is read (a finished sweep read back)."""
        entry = self.get(key)
        if not isinstance(entry, dict):
            return None, not kept_only
        return entry, not kept_only and "error" not in entry and entry.get("revision") != revision

    def put(self, key: str, entry: dict[str, Any]) -> None:
        if "error" in entry:
            remember_failure(str(self.path), key, entry)
            return
        self.entries[key] = entry
        write_json(self.path, {**self.where, "entries": self.entries})


def _measure_runtime(probe: TrainConfig, spec: Spec) -> tuple[int | None, dict[str, Any]]:
    """Run ``probe`` as the sweep starts its runs; its runtime (its largest rank's peak less its own model and
    data), or None and why."""
    from ignite_ddl.predict.memory import data_bytes, not_traceable_reason, trace_step

    summary, entry = run_probe(probe, spec)
    if summary is None:
        return None, entry
    peak = ((summary.get("memory") or {}).get("max") or {}).get("peak_rss_bytes")
    if not isinstance(peak, int):
        return None, {"error": "no peak recorded"}
    try:
        own = data_bytes(probe) + sum(trace_step(probe).values())
    except Exception as e:  # the runtime goes unmeasured, with why; the plan and the sweep go on
        return None, {"error": f"the probe's own model could not be traced: {not_traceable_reason(e)}"}
    probed = {name: getattr(probe, name) for name in (*RUNTIME_OPTIONS, "model", "batch_size", "train_size")}
    return peak - own, {"bytes": peak - own, "peak_bytes": peak, **entry, "probe": probed}


class Planner:
    """Plans configurations one at a time, each as asked (a search's, as they are proposed): ``plan(index, grid)``
    is its predicted peak per rank, the runtime of its launch layout read from ``<out>/plan/runtime.json`` or, with
    ``measure``, measured by a probe run the first time that layout is met and kept there."""

    def __init__(self, spec: Spec, out: str | Path, measure: bool = True, progress: Callable[[str], None] = print):
        self.spec, self.out, self.measure, self.progress = spec, out, measure, progress
        self.folder = Path(out) / "plan"
        self.runtimes = _Cache(self.folder, "runtime")
        self.libraries = _Cache(self.folder, "libraries")

    def plan(self, index: int, grid: dict[str, Any]) -> Planned:
        from ignite_ddl.predict.memory import predict

        config = make_run(self.spec, index, grid, 0, self.out).config
        probe = runtime_probe(config, self.folder)
        entry = self.runtimes.get(_key(probe))
        runtime = int(entry["bytes"]) if isinstance(entry, dict) and isinstance(entry.get("bytes"), int) else None
        if entry is None and self.measure:
            self.progress(f"plan: measuring the runtime's own memory for {shown_grid(grid)} (a run of the toy model)")
            runtime, measured = _measure_runtime(probe, self.spec)
            self.runtimes.put(_key(probe), measured)
            if runtime is None:
                self.progress(f"plan: the runtime could not be measured: {measured['error']}")
        # the heap replayed in a process started as the sweep's runs start (its fork server's child, or spawned)
        replay_start = _start_method(self.spec.start)
        return Planned(index, grid, config, predict(config, runtime, self._libraries(config), replay_start))

    def _libraries(self, config: TrainConfig) -> int | None:
        """What ``config``'s model's own modules hold (0 for the suite's own models), measured the first time that
        model is met and kept in ``<out>/plan/libraries.json``; None where it is not known."""
        from ignite_ddl.core.apart import ChildFailed
        from ignite_ddl.predict.memory import library_parts, needs_libraries

        if not needs_libraries(config):
            return 0
        # "file": the shared objects' pages are counted too (an entry without them, measured before, is not read)
        key = json.dumps([config.workload, config.workload_dir, config.model, "file"])
        entry = self.libraries.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("bytes"), int):
            return int(entry["bytes"])
        if not self.measure:
            return None
        named = config.workload or config.model
        self.progress(f"plan: measuring what {named}'s modules hold (imported in a fresh interpreter)")
        try:
            parts = library_parts(config)
        except ChildFailed as e:  # unmeasured, with why; the plan and the sweep go on
            self.progress(f"plan: what {named}'s modules hold could not be measured: {e.text.splitlines()[0]}")
            return None
        when = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        measured = sum(parts.values())
        self.libraries.put(key, {"bytes": measured, **parts, "measured": when})
        return measured


def plan_memory(
    spec: Spec,
    out: str | Path,
    measure: bool = True,
    progress: Callable[[str], None] = print,
    refused: Collection[int] = (),
) -> list[Planned]:
    """Every configuration of ``spec`` with its predicted peak per rank, but the ``refused`` (their indices:
    :func:`~ignite_ddl.sweep.plan.refused_configurations`). ``measure``: run the probes of runtimes not yet measured
    (else those configurations' peaks are not predicted, their parts still are)."""
    planner = Planner(spec, out, measure, progress)
    return [planner.plan(i, grid) for i, grid in enumerate(configurations(spec)) if i not in refused]


def unfit_reason(planned: Planned, limit_mb: float | None) -> str | None:
    """``predicted not to fit: 9.4 GiB > 8 GiB`` for a configuration predicted above the limit; None otherwise."""
    peak = planned.prediction.peak_bytes
    if limit_mb is None or planned.prediction.fits(limit_mb * MIB) is not False:
        return None
    if peak is None:  # the runtime not measured: what was traced is already over the limit
        traced = _gib(sum(planned.prediction.parts.values()))
        return f"predicted not to fit: at least {traced} without the runtime > {_gib(limit_mb * MIB)}"
    return f"predicted not to fit: {_gib(peak)} > {_gib(limit_mb * MIB)}"


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB" if nbytes >= 2**30 else f"{nbytes / MIB:.0f} MiB"


def format_plan(
    planned: list[Planned], limit_mb: float | None, refused: Sequence[Refused] = (), width: int | None = None
) -> str:
    """The plan as a table: each configuration's parts, its predicted peak per rank and whether it fits (a
    configuration ``refused`` before the sweep: "refused"); then what could not be predicted, and why each refused
    one is.

    Within ``width`` columns (None: no limit) where the whole table is wider: the answer first (config, peak, fits),
    then as many parts as fit, each configuration's grid in a list below the table, every line wrapped."""
    from ignite_ddl.predict.memory import PARTS

    def mib(value: int | None) -> str:
        return "-" if not value else f"{value / MIB:.1f}"

    rows: list[list[str]] = []  # config, grid, parts..., peak, fits
    notes = []
    refusals = {r.index: r for r in refused}
    shown: list[Planned | Refused] = [*planned, *refused]
    for p in sorted(shown, key=lambda p: p.index):
        if isinstance(p, Refused):
            rows.append([f"cfg{p.index:03d}", p.label, *("-" for _ in PARTS), "-", "refused"])
            continue
        pred = p.prediction
        fits = pred.fits(limit_mb * MIB if limit_mb is not None else None)
        said = "NO" if fits is False else {None: "-", True: "yes"}[fits] if not pred.problem else "?"
        rows.append([f"cfg{p.index:03d}", p.label, *(mib(pred.parts.get(part)) for part in PARTS)])
        rows[-1] += [mib(pred.peak_bytes) if pred.peak_bytes else "?", said]
        if pred.problem:
            notes.append(f"cfg{p.index:03d}: {pred.problem}")
        for what in pred.unpredicted:
            notes.append(f"cfg{p.index:03d}: not predicted: {what}")
        reason = unfit_reason(p, limit_mb)
        if reason:
            notes.append(f"cfg{p.index:03d}: {reason}: a sweep does not launch it (run_unfit: true runs it anyway)")
    for index, found in sorted(refusals.items()):
        notes.append(f"cfg{index:03d}: refused: {found.reason}: a sweep records it as refused and runs the others")
    limit = f"memory_limit_mb {limit_mb:g}" if limit_mb is not None else "no memory_limit_mb"
    head = ["config", "grid", *PARTS, "peak", "fits"]
    lines = [f"predicted peak memory per rank, MiB ({limit}); parts at the traced peak of one step"]
    table = format_table(head, rows)
    if width is None or max(map(len, table.splitlines())) <= width:
        lines += table.splitlines()
    else:
        lines += _narrow_plan(head, rows, width)
    return "\n".join(fit_line(line, width) for line in lines + notes)


def _narrow_plan(head: list[str], rows: list[list[str]], width: int) -> list[str]:
    """The plan's table within ``width`` columns: config, peak and fits, then the parts while they fit (those left
    out said), then each configuration's grid."""
    order = [0, len(head) - 2, len(head) - 1, *range(2, len(head) - 2)]  # config, peak, fits, the parts
    while True:
        table = format_table([head[i] for i in order], [[row[i] for i in order] for row in rows])
        if max(map(len, table.splitlines())) <= width or len(order) == 3:
            break
        order.pop()
    lines = table.splitlines()
    left_out = [head[i] for i in range(2, len(head) - 2) if i not in order]
    if left_out:
        lines.append(f"not shown in {width} columns: {', '.join(left_out)} (plan/plan.json has every part)")
    labels = max(len(row[0]) for row in rows)
    return lines + [f"{row[0]:<{labels}}  {row[1]}" for row in rows]


def plan_record(planned: list[Planned], limit_mb: float | None) -> MemoryPlan:
    """The plan as kept in ``plan/plan.json`` and in ``sweep.json``: each configuration's prediction and fit."""
    return {
        "memory_limit_mb": limit_mb,
        "configurations": [
            {
                "index": p.index,
                "grid": p.grid,
                "prediction": p.prediction.to_dict(),
                "unfit": unfit_reason(p, limit_mb),
            }
            for p in planned
        ],
    }


def write_plan(planned: list[Planned], out: str | Path, limit_mb: float | None) -> Path:
    path = Path(out) / "plan" / "plan.json"
    write_json(path, plan_record(planned, limit_mb))
    return path


def measured_link(out: str | Path, progress: Callable[[str], None] = print) -> Any:
    """This machine's all-reduce link (alpha, beta) fitted to all-reduces of 2 gloo processes
    (:func:`~ignite_ddl.predict.projection.inputs.measure_allreduce`), measured once and kept in
    ``plan/link.json``; None where it could not be measured."""
    from ignite_ddl.predict.projection import fit_alpha_beta, measure_allreduce
    from ignite_ddl.predict.projection.model import Link

    folder = Path(out) / "plan"
    cache = _Cache(folder, "link")
    entry = cache.get("gloo-2")
    if not isinstance(entry, dict):
        progress("plan: measuring this machine's all-reduce (2 gloo processes) for the step-time model")
        try:
            sizes, times = measure_allreduce(2, log_dir=str(folder / "link-logs"))
            link = fit_alpha_beta(sizes, times, 2)
        except Exception as e:  # a failed measurement leaves the model without communication, said, not fatal
            progress(f"plan: the all-reduce could not be measured: {type(e).__name__}: {e}")
            return None
        entry = {"alpha_s": link.alpha_s, "beta_Bps": link.beta_Bps, "residual": link.residual, "source": link.source}
        cache.put("gloo-2", entry)
    return Link("fitted (this machine)", float(entry["alpha_s"]), float(entry["beta_Bps"]), str(entry["source"]))


def measured_busy(
    out: str | Path, link: Any, fsdp: bool, progress: Callable[[str], None] = print, kept_only: bool = False
) -> Any:
    """How much more the collectives cost a training step on CPU ranks sharing this machine's cores than ``link``
    says they cost alone (:class:`~ignite_ddl.predict.steptime.Busy`): DDP's
    (:func:`~ignite_ddl.predict.projection.inputs.measure_busy_factor`) and, with ``fsdp``, FSDP's
    (``measure_fsdp_factor``), 2 gloo processes each, measured once and kept in ``plan/link.json``; a factor that
    could not be measured is None (said). ``kept_only``: the kept figures whatever their revision, none measured
    (one not kept is None)."""
    from ignite_ddl.predict.projection import measure_busy_factor, measure_fsdp_factor
    from ignite_ddl.predict.projection.inputs import PROBE_REVISIONS
    from ignite_ddl.predict.steptime import Busy

    folder = Path(out) / "plan"
    cache = _Cache(folder, "link")
    probes = {"busy-gloo-2": ("DDP's", "ddp", measure_busy_factor)}
    if fsdp:
        probes["fsdp-busy-gloo-2"] = ("FSDP's", "fsdp", measure_fsdp_factor)
    factors: dict[str, float | None] = {}
    kept: dict[str, dict[str, Any]] = {}
    for key, (whose, kind, measure) in probes.items():
        entry, measure_again = cache.current(key, PROBE_REVISIONS[kind], kept_only)
        if measure_again:
            progress(f"plan: measuring {whose} step beside the cores' compute (2 gloo processes), for the step model")
            try:
                entry = measure(link, 2, log_dir=str(folder / "link-logs"))
            except Exception as e:  # the model goes on with the collectives at the link alone, said
                progress(f"plan: {whose} step could not be measured: {type(e).__name__}: {e}".splitlines()[0])
                factors[key] = None
                continue
            cache.put(key, entry)
        if entry is None:  # read back, never measured
            factors[key] = None
            continue
        factors[key], kept[key] = float(entry["factor"]), entry
    sharded = kept.get("fsdp-busy-gloo-2", {})  # what FSDP's probe measured beside its factor
    return Busy(
        factors["busy-gloo-2"],
        factors.get("fsdp-busy-gloo-2"),
        sharded.get("large_factor"),
        sharded.get("collective_s"),
        sharded.get("optimizer_per_tensor_s"),
    )


def measured_layouts(
    spec: Spec, out: str | Path, observed: list[Any], progress: Callable[[str], None] = print, kept_only: bool = False
) -> list[Any]:
    """``observed`` (:class:`~ignite_ddl.predict.steptime.Observed`) with each configuration of several CPU
    processes on one node whose one-process twin was measured given its layout probe's step
    (:func:`~ignite_ddl.sweep.layout_probe.measure_layout`), measured once per layout and kept in
    ``plan/layout.json``; a probe that fails leaves its configurations to the twin's rule, said. ``kept_only``:
    nothing is measured, every kept probe is used whatever its revision (a finished sweep read back as it ran)."""
    from ignite_ddl.predict.steptime import twins
    from ignite_ddl.sweep.layout_probe import LAYOUT_REVISION, layout_probe, measure_layout, probe_iterations

    folder = Path(out) / "plan"
    cache = _Cache(folder, "layout")
    measured = twins(observed)
    found = []
    for o in observed:
        twin = measured.get(o.index)
        one_node = int(o.config.get("nnodes") or 1) == 1
        if twin is None or twin.device_type != "cpu" or o.device_type not in (None, "cpu") or not one_node:
            found.append(o)
            continue
        iterations = probe_iterations(twin.step_s)  # about a second of the twin's steps
        probe = layout_probe(TrainConfig.from_dict(o.config), folder, iterations)
        key = Path(probe.output_dir).name
        # an entry of an earlier revision (one probe, one twin) was read at one minute's speed: measured again
        entry, measure_again = cache.current(key, LAYOUT_REVISION, kept_only)
        if measure_again:
            progress(
                f"plan: measuring cfg{o.index:03d}'s compute at its layout ({o.world_size} processes, no "
                "communication) for the step model"
            )
            # the twin probed beside it, alternating: the compute is the median round's ratio of the two
            entry = measure_layout(probe, spec, layout_probe(TrainConfig.from_dict(twin.config), folder, iterations))
            cache.put(key, entry)
            if "error" in entry:
                progress(f"plan: the layout probe failed, the twin's rule stands: {entry['error']}")
        if entry is None:  # read back, never probed: the twin's rule
            found.append(o)
            continue
        step, optimizer, beside = entry.get("step_s"), entry.get("optimizer_s"), entry.get("twin_step_s")
        probed = {"layout_s": step, "layout_optimizer_s": optimizer, "layout_twin_s": beside}
        found.append(dataclasses.replace(o, **probed) if step else o)
    return found


def _start_method(start: str) -> str:
    """How a plan's probe process starts for a sweep whose runs start ``start`` (a spec's ``start``)."""
    if start != "preloaded":
        return "spawn"
    from ignite_ddl.sweep.local import preloaded_context

    preloaded_context()  # the server that starts, or started, imports what a run imports
    return "forkserver"


def fit_step_model(
    spec: Spec,
    out: str | Path,
    records: list[RunRecord],
    progress: Callable[[str], None] = print,
    refused: Collection[int] = (),
    grids: Mapping[int, dict[str, Any]] | None = None,
    hooks_measured: dict[str, Any] | None = None,
    probe_layouts: bool = True,
    kept_only: bool = False,
) -> StepModel:
    """The step-time model (:mod:`ignite_ddl.predict.steptime`) fitted to the one-process runs recorded so far and to
    this machine's all-reduce: every configuration's prediction (but the ``refused``'s), as kept in ``sweep.json``
    (``step_model``). ``grids``: the configurations by index (default: the grid's, enumerated; a search gives those
    it measured and those it asks about); ``hooks_measured``: DDP's measured work per gradient layout, kept across
    fits (measured again on every fit without it); ``probe_layouts``: the compute of CPU processes sharing the
    cores measured by a layout probe per layout (:mod:`ignite_ddl.sweep.layout_probe`), else the twin's rule;
    ``kept_only``: the layout and busy probes kept in ``plan/`` as they are, none measured (a finished sweep
    refitted)."""
    from ignite_ddl.predict.memory import gradient_layout, not_traceable_reason, on_cuda, world_size
    from ignite_ddl.predict.steptime import (
        Observed,
        StepPrediction,
        bucket_work_in_factor,
        predict_steps,
        step_model,
    )
    from ignite_ddl.report.analysis import analyze

    # Contended runs count here: on a shared machine a first round may have no other, and a prediction from them
    # is still one (the report judges the measurements with its own rules).
    measured = {c.index: c for c in analyze(records, {"spec": spec.to_dict()}, include_contended=True).configs}
    observed, grads, tensors = [], {}, {}
    units: dict[int, Sequence[int]] = {}  # the bytes of each FSDP unit
    untraced: dict[int, str] = {}  # configurations whose gradients could not be counted, and why
    hooks: dict[int, Any] = {}
    bucketed: dict[int, TrainConfig] = {}  # DDP's configurations: its work on the buckets, measured where needed
    # configurations of one gradient layout share one measurement
    measured_hooks: dict[str, Any] = {} if hooks_measured is None else hooks_measured
    listed = dict(enumerate(configurations(spec))) if grids is None else grids
    for index, grid in listed.items():
        if index in refused:
            continue
        config = make_run(spec, index, grid, 0, out).config
        c = measured.get(index)
        step = low = high = share = optimizer = None
        if c is not None and c.throughput.value and c.global_batch:
            step = c.global_batch / c.throughput.value
            low = c.global_batch / c.throughput.high if c.throughput.high else None
            high = c.global_batch / c.throughput.low if c.throughput.low else None
            total = sum(c.phases.values())
            share = c.phases.get("backward_compute", 0.0) / total if total else None
            optimizer = c.phases.get("optimizer", 0.0) / total if total else None
        world = world_size(config)
        device = c.device_type if c is not None else None
        observed.append(Observed(index, config.to_dict(), world, device, step, low, high, share, optimizer))
        if world > 1:
            try:
                layout = gradient_layout(config)
            except Exception as e:  # a model the plan cannot build (a workload of one's own): run, not predicted
                untraced[index] = not_traceable_reason(e)
                continue
            grads[index], tensors[index], units[index] = layout.bytes, layout.tensors, layout.units
            if resolve_strategy(config.strategy, world).gradient_buckets:  # DDP's bucket work, hook or none
                bucketed[index] = config
    if probe_layouts:
        observed = measured_layouts(spec, out, observed, progress, kept_only)
    link = measured_link(out, progress) if grads else None
    # CPU ranks sharing the cores (a CPU twin measured): the collectives beside their compute, measured once.
    shared = any(o.world_size == 1 and o.device_type == "cpu" for o in observed) and bool(grads)
    sharded = any(o.world_size > 1 and resolve_strategy(str(o.config.get("strategy", "auto")), o.world_size)
                  .shards_parameters for o in observed)  # fmt: skip
    busy = measured_busy(out, link, sharded, progress, kept_only) if link is not None and shared else None
    for index, config in bucketed.items():
        # On CPU ranks sharing the cores the busy factor, measured with DDP's own copies and division, prices them
        # (steptime._comm_s): only a hook's work of its own is measured then.
        if on_cuda(config) or not bucket_work_in_factor(config.comm_hook, busy):
            hooks[index] = _hook_cost(config, measured_hooks, progress, spec.start)
    predictions = predict_steps(observed, link, grads, hooks, busy, tensors, units)
    by_reason: dict[str, list[str]] = {}
    for index, why in untraced.items():
        predictions[index] = StepPrediction.unpredicted(index, why)
        by_reason.setdefault(why, []).append(f"cfg{index:03d}")
    for why, names in by_reason.items():
        progress(f"plan: {', '.join(names)}: step time not predicted: {why}")
    return step_model(predictions, link, busy)


def _hook_cost(config: TrainConfig, seen: dict[str, Any], progress: Callable[[str], None], start: str) -> Any:
    """DDP's and its communication hook's own work per bucket for ``config``, measured in a fresh process
    (:func:`~ignite_ddl.predict.hook_cost.hook_cost`; a child of the sweep's fork server where its runs start
    ``preloaded``) once per hook, gradient layout and thread count; or why it is not measured."""
    from ignite_ddl.launcher.settings import rank_threads
    from ignite_ddl.predict.hook_cost import hook_cost
    from ignite_ddl.predict.memory import on_cuda

    if on_cuda(config):
        return "its buckets would be reduced on a GPU, and DDP's and the hook's work is measured on CPU tensors here"
    threads = rank_threads(config.threads, config.nproc_per_node or 1)
    # What sets the buckets' shapes and the hook's work (compile and the batch do not: the hook sees gradients).
    key = repr([config.model, config.workload, config.workload_args, config.dataset, config.comm_hook])
    key += repr([config.bucket_cap_mb, config.powersgd_rank, config.gradient_as_bucket_view, threads])
    if key not in seen:
        progress(
            f"plan: measuring DDP's own work on the gradients a step, {config.comm_hook} hook ({threads} thread(s), "
            "no communication)"
        )
        try:
            seen[key] = hook_cost(config, threads, start_method=_start_method(start))
        except Exception as e:  # the configuration goes unpredicted, with why; the sweep goes on
            seen[key] = f"{type(e).__name__}: {e}"
    return seen[key]
