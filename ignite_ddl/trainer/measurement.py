"""What a training run measures besides training, attached to its engines and gathered from every rank at the end.

:func:`attach_measurement` attaches, first of all handlers (so that nothing attached later counts as step time):
the step recorder (:mod:`ignite_ddl.measure.recorder`), the contention monitor
(:mod:`ignite_ddl.measure.contention`), the chosen profiler (:mod:`ignite_ddl.measure.profilers`) and, with 2 or
more ranks, the stall watchdog (:mod:`ignite_ddl.launcher.watchdog`). :class:`FlopsProbe` counts the model's FLOPs
and finds its machine's matmul peak before training (:mod:`ignite_ddl.measure.flops`). After the run,
:meth:`Measuring.gather` (a collective) returns every rank's figures as plain data for the summary.

Example (one process; the trainer does the same on every rank):
    >>> import tempfile, torch
    >>> from ignite.engine import Engine
    >>> from ignite_ddl.core.config import TrainConfig
    >>> from ignite_ddl.measure.recorder import StepRecorder
    >>> trainer, evaluator = Engine(lambda e, b: None), Engine(lambda e, b: None)
    >>> recorder = StepRecorder(warmup=1)
    >>> config, log_dir = TrainConfig(warmup_iters=1), tempfile.mkdtemp()
    >>> measuring = attach_measurement(config, None, trainer, evaluator, recorder, torch.device("cpu"), log_dir)
    >>> _ = trainer.run([(torch.zeros(4, 3), torch.zeros(4))] * 3)
    >>> measuring.recorder.gather()["global"]["samples"]
    8
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import torch
from ignite.engine import Engine
from torch import nn

from ignite_ddl.core.collectives import allreduce_bus_factor
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.environment import cpu_cores
from ignite_ddl.core.outputs import writing
from ignite_ddl.core.schema import CommReference, DDPCrossCheck, Flops, ProfilerResult, StepStats
from ignite_ddl.launcher.settings import LaunchPlan
from ignite_ddl.launcher.watchdog import StallWatchdog
from ignite_ddl.measure.comm import CommTimer, time_allreduce
from ignite_ddl.measure.contention import ContentionMonitor
from ignite_ddl.measure.crosscheck import compare, ddp_runtime_stats
from ignite_ddl.measure.flops import FlopCount, Peak, count_flops, datasheet_peak, rank_share, utilisation_record
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.measure.memory import MemoryMonitor
from ignite_ddl.measure.peak import MatmulRate, matmul_precision, measured_peak
from ignite_ddl.measure.profile_text import format_profile
from ignite_ddl.measure.profilers import Profiler, TorchProfiler, attach_profiler
from ignite_ddl.measure.recorder import StepRecorder
from ignite_ddl.trainer.data import DatasetInfo
from ignite_ddl.trainer.strategies import unwrap

__all__ = ["FlopsProbe", "GradScaleLog", "Measuring", "attach_measurement"]


@dataclass(frozen=True)
class FlopsProbe:
    """What a run measures before training for its utilisation figures (:mod:`ignite_ddl.measure.flops`): the model's
    FLOPs per sample, its machine's matmul peak (:func:`~ignite_ddl.measure.peak.measured_peak`) and the share of it
    this rank is judged against."""

    count: FlopCount
    precision: str
    peak: Peak | None
    rate: MatmulRate | None
    share: float = 1.0
    from_cache: bool = False

    @classmethod
    def measure(
        cls,
        model: nn.Module,
        criterion: nn.Module,
        info: DatasetInfo,
        device: torch.device,
        amp: str,
        count: FlopCount | None = None,
        cache: str | Path | None = None,
    ) -> FlopsProbe | None:
        """Collective. None on XLA, where a step's time is a graph's and a matmul cannot be timed alone. ``count``:
        the FLOPs per sample already known (a workload's), else counted on ``model`` with image inputs of ``info``.
        ``cache``: the file keeping the machine's peak (read back where it holds this machine's; else measured by
        the first rank of each machine, on all its cores, while the others wait, and added)."""
        if device.type == "xla":
            return None
        if count is None:
            inputs = torch.randn(2, info.in_channels, info.image_size, info.image_size, generator=torch.Generator())
            count = count_flops(unwrap(model), inputs, torch.zeros(2, dtype=torch.long), criterion)
        precision = matmul_precision(device, amp)
        idist.barrier()  # every rank here before one measures: nothing else of the run computes meanwhile
        node, first = idist.get_node_rank(), idist.get_local_rank() == 0
        measured = measured_peak(device, precision, cache) if first else (None, False)
        found = {n: (rate, cached) for n, local, rate, cached in gather_objects((node, first, *measured)) if local}
        rate, cached = found.get(node, (None, False))
        share = rank_share(device, torch.get_num_threads(), cpu_cores(), idist.get_nproc_per_node())
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
        return cls(count, precision, datasheet_peak(name, precision), rate, share, cached)

    def record(self, steps: StepStats | None, world: int) -> Flops:
        """Collective: summary.json's ``flops``, each rank's achieved FLOP/s from its own measured throughput and
        the run's from its global one (the summary's ``samples_per_s``)."""
        ranks = gather_objects((self.rate, self.share))
        per_rank = [r["samples_per_s"] for r in steps["ranks"]] if steps is not None else [math.nan] * world
        measured = steps["global"] if steps is not None and steps["global"]["samples"] > 0 else None
        return utilisation_record(
            self.count,
            self.precision,
            self.peak,
            [rate for rate, _ in ranks],
            per_rank,
            shares=[share for _, share in ranks],
            samples_per_s=measured["samples_per_s"] if measured is not None else None,
            from_cache=self.from_cache,
        )


class GradScaleLog:
    """The fp16 ``GradScaler``'s loss scale after every optimizer step, for the summary's ``grad_scaler``.

    The scaler halves its scale and skips the step when it finds inf/NaN gradients (a *backoff*) and doubles it
    after ``growth_interval`` clean steps (a *growth*); how often each happened says whether fp16 trained or kept
    skipping. Each step keeps a copy of the scale tensor on the device (no ``.item()``: reading the value would
    synchronise the device every step); the copies are read once, at the end.
    """

    def __init__(self, scaler: torch.amp.GradScaler):
        self.scaler = scaler
        self.initial = float(scaler.get_scale()) if scaler.is_enabled() else None
        self._scales: list[torch.Tensor] = []

    def attach(self, engine: Engine) -> GradScaleLog:
        from ignite.engine import Events

        engine.add_event_handler(Events.ITERATION_COMPLETED, self._keep)
        return self

    def _keep(self) -> None:
        scale = getattr(self.scaler, "_scale", None)  # the scale tensor itself: get_scale() would synchronise
        if isinstance(scale, torch.Tensor):
            self._scales.append(scale.detach().clone())

    def record(self) -> dict[str, Any]:
        """summary.json's ``grad_scaler``: the scale before training and after the last step, and how many steps
        changed it (backoffs: steps skipped for inf/NaN gradients; growths)."""
        scales = [self.initial, *torch.stack(self._scales).float().tolist()] if self._scales else [self.initial]
        moves = [b - a for a, b in zip(scales, scales[1:]) if a is not None and b is not None]
        return {
            "initial_scale": self.initial,
            "final_scale": scales[-1],
            "steps": len(self._scales),
            "backoffs": sum(m < 0 for m in moves),
            "growths": sum(m > 0 for m in moves),
        }


@dataclass(frozen=True)
class Measuring:
    """The measuring handlers of one rank; :meth:`gather` collects what they measured, from every rank."""

    recorder: StepRecorder | None
    contention: ContentionMonitor
    memory: MemoryMonitor | None
    profiler: Profiler | None
    watchdog: StallWatchdog | None

    def gather(
        self,
        model: nn.Module,
        comm: CommTimer | None,
        probe: FlopsProbe | None,
        out: Path,
        log: logging.Logger,
        held: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """Collective: step statistics (with the all-reduce yardstick), profiler tables, FLOPs, contention and
        memory (``held``: the bytes this rank holds for parameters, gradients and optimizer state)."""
        rank, steps = idist.get_rank(), None
        if self.recorder is not None:
            steps = self.recorder.gather(steady=True)
            self.recorder.write_csv(out / f"steps_rank{rank}.csv")  # after: it flags the iterations cut
            steps["comm_reference"] = _reference_allreduce(steps, model, comm.device) if comm is not None else None
            steps["ddp_crosscheck"] = _ddp_crosscheck(self.recorder, model) if comm is not None else None
        return {
            "steps": steps,
            "profile": _finish_profiler(self.profiler, out, rank, log) if self.profiler is not None else None,
            "flops": probe.record(steps, idist.get_world_size()) if probe is not None else None,
            "contention": self.contention.gather(),
            "memory": self.memory.gather(held) if self.memory is not None else None,
        }


def attach_measurement(
    config: TrainConfig,
    plan: LaunchPlan | None,
    trainer: Engine,
    evaluator: Engine,
    recorder: StepRecorder | None,
    device: torch.device,
    out: str | Path,
) -> Measuring:
    """Attach the measuring handlers to ``trainer`` (before any other handler: nothing attached later counts as
    step time, and timers pause before evaluation). With 2+ ranks, the stall watchdog names a rank that stops
    making progress; a spawned rank leaves that report to its launcher, under torchrun / SLURM it reports itself."""
    out = Path(out)
    if recorder is not None:
        recorder.attach(trainer)
    # The recorder's warm-up (past PowerSGD's start where the run gets there): the same window for every figure.
    warmup = recorder.warmup if recorder is not None else config.measured_warmup(idist.get_world_size())
    contention = ContentionMonitor(warmup, device).attach(trainer)
    memory = None
    if config.measure_memory:
        log_dir = plan.log_dir if plan is not None and plan.log_dir else out / "logs"
        memory = MemoryMonitor(warmup, device, log_dir, idist.get_rank()).attach(trainer, evaluator)
        if recorder is not None:
            recorder.memory = memory.sample
    profiler = attach_profiler(
        config.profiler,
        trainer,
        output_dir=out,
        rank=idist.get_rank(),
        warmup=warmup,
        max_iters=config.max_iters,
    )
    watchdog = None
    if idist.get_world_size() > 1 and config.stall_seconds() > 0:
        spawned = plan is not None and plan.mode == "spawn"
        log_dir = plan.log_dir if plan is not None and plan.log_dir else out / "logs"
        watchdog = StallWatchdog(config.stall_seconds(), log_dir, recorder, report=not spawned)
        watchdog.attach(trainer, evaluator)
    return Measuring(recorder, contention, memory, profiler, watchdog)


def _reference_allreduce(steps: StepStats, model: nn.Module, device: torch.device) -> CommReference | None:
    """Collective: what one all-reduce of the run's mean bucket size achieves on these ranks when nobody is late
    (:func:`~ignite_ddl.measure.comm.time_allreduce`), the yardstick for the bandwidth the run achieved."""
    # The same figures on every rank; NaN (not None) where a rank timed none, until summary.json is written.
    timed = [r for r in steps["ranks"] if (r["buckets_per_step"] or 0.0) > 0 and r["comm_bytes_per_step"] is not None]
    if not timed:
        return None
    nbytes = round(cast(float, timed[0]["comm_bytes_per_step"]) / cast(float, timed[0]["buckets_per_step"]))
    dtype = next(p.dtype for p in model.parameters() if p.requires_grad)
    seconds = time_allreduce(nbytes, dtype, device)
    busbw = nbytes / seconds * allreduce_bus_factor(idist.get_world_size()) if seconds > 0 else math.nan
    return {"message_bytes": nbytes, "seconds": seconds, "busbw_Bps": busbw}


def _ddp_crosscheck(recorder: StepRecorder, model: nn.Module) -> list[DDPCrossCheck | None] | None:
    """Collective: each rank's communication timing against DDP's own statistics of the same iterations
    (:mod:`~ignite_ddl.measure.crosscheck`); None where DDP kept none, or with gradient accumulation (DDP times
    only the micro-batch that synchronises)."""
    rows = recorder.all_rows()
    ddp = ddp_runtime_stats(model)
    local = compare(rows, ddp) if ddp is not None and all(r["micro_steps"] == 1 for r in rows) else None
    ranks = gather_objects(local)
    return None if all(r is None for r in ranks) else ranks


def _finish_profiler(profiler: Profiler, out: Path, rank: int, log: logging.Logger) -> ProfilerResult:
    """Each rank writes its profiler CSV; every rank gets all ranks' results; rank 0 prints them. The torch
    profiler's trace is compared with our communication timing (``steps_rank<r>.csv``, written before)."""
    path = out / "profile" / f"rank{rank}_{profiler.kind}.csv"
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        profiler.write_csv(path)
    if isinstance(profiler, TorchProfiler):
        profiler.crosscheck(out / f"steps_rank{rank}.csv")
    ranks = gather_objects(profiler.results())
    if rank == 0:
        log.info(f"{profiler.kind} profiler, all ranks:\n" + format_profile(profiler.kind, ranks))
    # each kind's ranks are of its own type (schema.ProfilerResult); the summary's validator checks them by kind
    return cast(ProfilerResult, {"kind": profiler.kind, "ranks": ranks})
