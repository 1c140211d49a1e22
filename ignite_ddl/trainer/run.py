"""The training job run on every rank: Ignite engines built with ``auto_model`` / ``auto_optim`` /
``auto_dataloader``, in the spirit of Ignite's CIFAR10 example.

``training(local_rank, config)`` is what the launcher runs; ``create_trainer`` / ``create_evaluator`` are the
engines on their own, for notebooks that want to attach handlers of their own.

Example:
    >>> from ignite_ddl import TrainConfig
    >>> from ignite_ddl.trainer.run import train
    >>> summary = train(TrainConfig(nproc_per_node=2, epochs=1, train_size=512, output_dir="/tmp/run", overwrite=True))
    >>> summary["world_size"]
    2
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import numpy as np
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, EarlyStopping, PiecewiseLinear, ProgressBar, global_step_from_engine
from ignite.handlers.tensorboard_logger import TensorboardLogger
from ignite.metrics import Accuracy, ConfusionMatrix, Loss
from ignite.utils import manual_seed
from torch import nn

from ignite_ddl.core.config import ConfigError, TrainConfig
from ignite_ddl.core.environment import cpu_cores, device_info, host, versions
from ignite_ddl.core.folders import claim_run_folder, lock
from ignite_ddl.core.outputs import OutputFileHandler, output_errors, quiet_writer_threads
from ignite_ddl.core.results import (
    SCHEMA_VERSION,
    Contention,
    EpochRecord,
    ProfilerResult,
    StepStats,
    Summary,
    write_json,
)
from ignite_ddl.launcher import spawn as launcher
from ignite_ddl.launcher.spawn import LaunchPlan
from ignite_ddl.launcher.watchdog import StallWatchdog
from ignite_ddl.measure.comm import CommTimer
from ignite_ddl.measure.flops import format_flops
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.measure.recorder import StepRecorder, format_steps
from ignite_ddl.trainer.checkpoint import attach_best_model, attach_checkpoints, check_checkpoint, load_checkpoint
from ignite_ddl.trainer.data import Loaders, build_loaders, check_dataset
from ignite_ddl.trainer.measurement import FlopsProbe, attach_measurement
from ignite_ddl.trainer.models import build_model, check_model, unwrap
from ignite_ddl.trainer.tracking import MlflowTracker, check_tracker

__all__ = [
    "AMP_DTYPES",
    "EXPLODING_FACTOR",
    "EpochEvaluation",
    "EpochLog",
    "EpochReport",
    "Handlers",
    "Parts",
    "TrainingRun",
    "attach_early_stopping",
    "attach_handlers",
    "attach_schedule",
    "autocast",
    "build_optimizer",
    "check_training",
    "create_evaluator",
    "create_trainer",
    "divergence",
    "initialize",
    "place_model",
    "rank_logger",
    "resume",
    "seed_everything",
    "train",
    "training",
]

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch; XLA's generator only on XLA ranks.

    Ignite's ``manual_seed`` also seeds XLA wherever torch_xla is installed, which starts the XLA runtime (and takes
    the TPU) in every process, gloo ranks included.
    """
    if idist.backend() == "xla-tpu":
        manual_seed(seed)
        return
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def autocast(device: torch.device, amp: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for ``amp`` ("bf16" or "fp16"); a no-op context for "none"."""
    if amp == "none":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AMP_DTYPES[amp])


def create_trainer(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    criterion: nn.Module,
    device: torch.device,
    amp: str = "none",
    scaler: torch.amp.GradScaler | None = None,
    recorder: StepRecorder | None = None,
) -> Engine:
    """An engine whose step is forward, backward (DDP all-reduces gradients here) and optimizer step.

    Its output is ``{"loss": float, "samples": int}`` for this rank's batch. With a ``recorder``, the step
    reports the end of each phase to it (attach the recorder to the returned engine).
    """
    mark = recorder.mark if recorder is not None else lambda phase: None

    def train_step(engine: Engine, batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, Any]:
        model.train()
        x, y = batch[0].to(device, non_blocking=True), batch[1].to(device, non_blocking=True)
        with autocast(device, amp):
            loss = criterion(model(x), y)
        mark("forward")
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            mark("backward")
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            mark("backward")
            optimizer.step()
        mark("optimizer")
        return {"loss": loss.item(), "samples": x.shape[0]}

    return Engine(train_step)


def create_evaluator(
    model: nn.Module, criterion: nn.Module, device: torch.device, amp: str = "none", num_classes: int | None = None
) -> Engine:
    """An engine computing accuracy, loss and (given ``num_classes``) the confusion matrix; Ignite's metrics sum
    their counts over all ranks, so every rank holds the same figures."""
    # Evaluate the wrapped module: no DDP hooks, so ranks may hold different numbers of validation batches.
    net = unwrap(model)

    @torch.no_grad()
    def eval_step(engine: Engine, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        net.eval()
        x, y = batch[0].to(device, non_blocking=True), batch[1].to(device, non_blocking=True)
        with autocast(device, amp):
            y_pred = net(x)
        return y_pred.float(), y

    evaluator = Engine(eval_step)
    Accuracy().attach(evaluator, "accuracy")
    Loss(criterion).attach(evaluator, "loss")
    if num_classes is not None:
        ConfusionMatrix(num_classes).attach(evaluator, "confusion_matrix")
    return evaluator


def attach_early_stopping(trainer: Engine, evaluator: Engine, patience: int) -> EarlyStopping:
    """Ignite's ``EarlyStopping`` on validation accuracy: stop ``trainer`` after ``patience`` evaluations without
    improvement. Every rank stops at the same epoch with no extra collective: the accuracy it compares is already
    summed over all ranks, so every rank's handler sees the same scores and decides alike."""
    early = EarlyStopping(patience, score_function=lambda engine: engine.state.metrics["accuracy"], trainer=trainer)
    evaluator.add_event_handler(Events.COMPLETED, early)
    return early


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.SGD(
        model.parameters(),
        lr=config.lr,
        momentum=config.momentum,
        nesterov=config.nesterov,
        weight_decay=config.weight_decay,
    )


def place_model(model: nn.Module, sync_bn: bool = False, bucket_cap_mb: float | None = None) -> nn.Module:
    """``auto_model``, except with a single process: there it would wrap DataParallel when several GPUs are
    visible (ignite#2447), which is not what a one-process run asked for. ``bucket_cap_mb`` goes to DDP."""
    if idist.get_world_size() == 1:
        return model.to(idist.device())
    ddp_options = {} if bucket_cap_mb is None or idist.backend() == "xla-tpu" else {"bucket_cap_mb": bucket_cap_mb}
    return idist.auto_model(model, sync_bn=sync_bn, **ddp_options)


@dataclass(frozen=True)
class TrainingRun:
    """One rank's run, built but not started: what a ``setup`` function receives."""

    config: TrainConfig
    trainer: Engine
    evaluator: Engine
    model: nn.Module
    optimizer: torch.optim.Optimizer
    loaders: Loaders


def training(
    local_rank: int,
    config: TrainConfig,
    plan: LaunchPlan | None = None,
    setup: Callable[[TrainingRun], None] | None = None,
) -> Summary:
    """Train as ``config`` says on this rank and return the run summary (rank 0 also writes it to disk).

    ``plan`` is how the ranks were launched (recorded in config.json and the summary); ``setup(run)``, if given, is
    called on every rank before the run starts, with the :class:`TrainingRun`, to attach handlers of one's own to
    ``run.trainer`` / ``run.evaluator`` or hooks to ``run.model``.
    """
    # A failed write anywhere (full disk, file-size limit) ends the run with one line naming the path.
    with output_errors(config.output_dir):
        return _training(config, plan, setup)


def _training(config: TrainConfig, plan: LaunchPlan | None, setup: Callable[[TrainingRun], None] | None) -> Summary:
    out = Path(config.output_dir)
    log = rank_logger(out, idist.get_rank())
    seed_everything(config.seed)  # same initial weights everywhere (DDP also broadcasts rank 0's at wrap time)
    loaders = build_loaders(config)
    parts = initialize(config, loaders)
    measuring = attach_measurement(config, plan, parts.trainer, parts.evaluator, parts.recorder, parts.device, out)
    handlers = attach_handlers(config, parts, loaders, measuring.recorder, out, log)
    if config.resume:
        resume(config, handlers, parts.trainer, log)
    if setup is not None:
        setup(TrainingRun(config, parts.trainer, parts.evaluator, parts.model, parts.optimizer, loaders))
    env = _record_config(config, plan, parts.device, out)
    log.info(
        f"rank {idist.get_rank()}/{env['world_size']} on {env['device']['name']}, {torch.get_num_threads()} "
        f"threads, batch {loaders.per_rank_batch} per rank / {loaders.global_batch} global"
    )
    probe = None
    if config.measure_flops:
        probe = FlopsProbe.measure(parts.model, parts.criterion, loaders.info, parts.device, config.amp)
    wall = _run(parts.trainer, loaders, config.epochs, handlers.tracker, measuring.watchdog)
    figures = measuring.gather(parts.model, parts.comm, probe, out, log)
    if handlers.tb is not None:
        _log_run_scalars(handlers.tb, figures, parts.trainer.state.iteration)
        handlers.tb.close()
    return _finish(config, env, loaders, parts.trainer, handlers, wall, figures, out, log)


@dataclass(frozen=True)
class Parts:
    """What one rank trains with: the placed model, its optimizer, loss and gradient scaler, and the engines."""

    device: torch.device
    model: nn.Module
    optimizer: torch.optim.Optimizer
    criterion: nn.Module
    scaler: torch.amp.GradScaler | None
    recorder: StepRecorder | None
    comm: CommTimer | None
    trainer: Engine
    evaluator: Engine


def initialize(config: TrainConfig, loaders: Loaders) -> Parts:
    """Model (placed with ``auto_model``), optimizer (``auto_optim``), loss, scaler and the two engines. The step
    recorder is built here because the train step reports its phases to it; ``attach_measurement`` attaches it.
    """
    device, info = idist.device(), loaders.info
    net = build_model(config.model, info.in_channels, info.image_size, info.num_classes)
    model = place_model(net, config.sync_bn, config.bucket_cap_mb)
    optimizer = idist.auto_optim(build_optimizer(model, config))
    criterion = nn.CrossEntropyLoss().to(device)
    scaler = torch.amp.GradScaler("cuda") if config.amp == "fp16" else None
    comm = None
    if config.record_steps and config.comm_timing and isinstance(model, nn.parallel.DistributedDataParallel):
        comm = CommTimer(device).attach(model)
    recorder = StepRecorder(config.warmup_iters, device, comm=comm) if config.record_steps else None
    trainer = create_trainer(model, optimizer, criterion, device, config.amp, scaler, recorder)
    evaluator = create_evaluator(model, criterion, device, config.amp, info.num_classes)
    return Parts(device, model, optimizer, criterion, scaler, recorder, comm, trainer, evaluator)


@dataclass(frozen=True)
class Handlers:
    """The training handlers of one rank: what is checkpointed, the schedule, the epoch log and evaluation, early
    stopping, checkpoints, TensorBoard and the tracker (rank 0)."""

    to_save: dict[str, Any]
    scheduler: PiecewiseLinear | None
    epochs: EpochLog
    evaluation: EpochEvaluation
    early: EarlyStopping | None
    checkpoint: Checkpoint | None
    tb: TensorboardLogger | None
    tracker: MlflowTracker | None


def attach_handlers(
    config: TrainConfig, parts: Parts, loaders: Loaders, recorder: StepRecorder | None, out: Path, log: logging.Logger
) -> Handlers:
    trainer, evaluator, rank = parts.trainer, parts.evaluator, idist.get_rank()
    to_save: dict[str, Any] = {"trainer": trainer, "model": parts.model, "optimizer": parts.optimizer}
    if parts.scaler is not None:
        to_save["scaler"] = parts.scaler
    scheduler = attach_schedule(trainer, parts.optimizer, config, len(loaders.train))
    if scheduler is not None:
        to_save["lr_scheduler"] = scheduler
    trainer.add_event_handler(Events.EPOCH_STARTED, _start_epoch, loaders)
    tb = None
    if rank == 0:
        quiet_writer_threads()  # its write errors come back at the next call, as one line
        tb = TensorboardLogger(log_dir=str(out / "tb"))
    # In this order at each epoch's end: the record, its validation, then its report.
    epochs = EpochLog(recorder)
    epochs.attach(trainer)
    evaluation = EpochEvaluation(evaluator, loaders.val, epochs, config.eval_every)
    evaluation.attach(trainer)
    report = EpochReport(epochs, tb, log)
    report.attach(trainer)
    early = attach_early_stopping(trainer, evaluator, config.early_stopping) if config.early_stopping else None
    if early is not None:
        to_save["early_stopping"] = early  # a resumed run goes on counting evaluations without improvement
    checkpoint = attach_checkpoints(trainer, to_save, out, config.checkpoint_every) if config.checkpoints else None
    if config.best_model:
        attach_best_model(trainer, evaluator, parts.model, out)
    if config.max_iters:
        trainer.add_event_handler(Events.ITERATION_COMPLETED(once=config.max_iters), lambda e: e.terminate())
    if tb is not None:
        _attach_tensorboard(tb, trainer, evaluator, parts.optimizer, config.log_every)
    tracker = None
    if rank == 0 and config.tracker == "mlflow":
        facts = {"world_size": idist.get_world_size(), "backend": idist.backend() or "none"}
        tracker = MlflowTracker(config, trainer, facts)
        report.listeners.append(tracker.log_epoch)
    if rank == 0 and config.progress and _interactive():
        ProgressBar(persist=False).attach(trainer, output_transform=lambda o: {"loss": o["loss"]})
    return Handlers(to_save, scheduler, epochs, evaluation, early, checkpoint, tb, tracker)


def attach_schedule(
    trainer: Engine, optimizer: torch.optim.Optimizer, config: TrainConfig, epoch_length: int
) -> PiecewiseLinear | None:
    """Linear warm-up over ``warmup_epochs``, then linear decay to 0 at the last iteration (None: constant LR)."""
    if config.warmup_epochs <= 0:
        return None
    total = config.epochs * epoch_length
    warmup = min(total - 1, max(1, round(config.warmup_epochs * epoch_length)))
    milestones = [(0, 0.0), (warmup, config.lr), (total, 0.0)]
    scheduler = PiecewiseLinear(optimizer, "lr", milestones_values=milestones)
    trainer.add_event_handler(Events.ITERATION_STARTED, scheduler)
    return scheduler


def resume(config: TrainConfig, handlers: Handlers, trainer: Engine, log: logging.Logger) -> None:
    """Load ``config.resume`` into everything checkpointed; refuse a checkpoint whose LR schedule differs."""
    scheduler = handlers.scheduler
    planned = (list(scheduler.milestones), list(scheduler.values)) if scheduler is not None else None
    path = cast(str, config.resume)  # called only when config.resume names a checkpoint
    Checkpoint.load_objects(to_load=handlers.to_save, checkpoint=load_checkpoint(path))
    if (
        scheduler is not None
        and planned is not None
        and (list(scheduler.milestones), list(scheduler.values)) != planned
    ):
        # Ignite restores the saved schedule: this run's extra iterations would train at learning rate 0.
        raise ConfigError(
            f"cannot resume from {config.resume}: its learning-rate schedule ends at iteration "
            f"{scheduler.milestones[-1]}, this run's at {planned[0][-1]}; resume with the --epochs, "
            "--warmup-epochs and --lr of the run that wrote it"
        )
    log.info(f"resumed from {config.resume} at iteration {trainer.state.iteration}")


def _record_config(config: TrainConfig, plan: LaunchPlan | None, device: torch.device, out: Path) -> dict[str, Any]:
    """The run's facts (world, backend, device, launch); rank 0 writes them with the config to config.json."""
    env = {"world_size": idist.get_world_size(), "backend": idist.backend() or "none", "device": device_info(device)}
    env.update(_launch_facts(plan))
    if idist.get_rank() == 0:
        record = {"schema_version": SCHEMA_VERSION, "config": config.to_dict(), **env}
        write_json(out / "config.json", {**record, "versions": versions(), "host": host()})
    return env


def _run(
    trainer: Engine, loaders: Loaders, epochs: int, tracker: MlflowTracker | None, watchdog: StallWatchdog | None
) -> float:
    """Run the trainer; the slowest rank's wall time. A failed run closes the tracker's run as failed."""
    start = time.perf_counter()
    try:
        trainer.run(loaders.train, max_epochs=epochs)
    except BaseException:
        if tracker is not None:
            tracker.finish(None)
        raise
    finally:
        if watchdog is not None:
            watchdog.stop()
    return cast(float, idist.all_reduce(time.perf_counter() - start, op="MAX"))  # a number reduces to a number


def _finish(
    config: TrainConfig,
    env: dict[str, Any],
    loaders: Loaders,
    trainer: Engine,
    handlers: Handlers,
    wall: float,
    figures: dict[str, Any],
    out: Path,
    log: logging.Logger,
) -> Summary:
    """The summary, on every rank; rank 0 writes it, closes the tracker's run and prints the figures."""
    early, steps, flops = handlers.early, figures["steps"], figures["flops"]
    stopped_early = trainer.state.epoch if early is not None and early.counter >= early.patience else None
    if early is not None and stopped_early is not None:
        log.info(
            f"early stopping: no better validation accuracy for {early.patience} evaluations, "
            f"stopped after epoch {stopped_early}"
        )
    summary = _summary(
        config,
        env,
        loaders,
        trainer,
        handlers.epochs,
        wall,
        handlers.checkpoint,
        steps,
        figures["profile"],
        figures["contention"],
    )
    summary.update(
        {
            "stopped_early_at_epoch": stopped_early,
            "confusion_matrix": handlers.evaluation.confusion_matrix,
            "flops": flops,
        }
    )
    if idist.get_rank() == 0:
        write_json(out / "summary.json", summary)
        if handlers.tracker is not None:
            handlers.tracker.finish(summary)
        if steps is not None:
            log.info("\n" + format_steps(steps))
        if flops is not None and flops["achieved_flops_per_s"] is not None:
            log.info(format_flops(flops))
        if summary["diverged"]:
            log.warning(f"the run diverged: {summary['diverged']}")
    log.info(f"done in {wall:.1f} s: {summary['samples_per_s']:.0f} samples/s, val accuracy {summary['val_accuracy']}")
    return summary


def _start_epoch(engine: Engine, loaders: Loaders) -> None:
    loaders.train_sampler.set_epoch(engine.state.epoch - 1)
    epoch_length = cast(int, engine.state.epoch_length)  # set by Engine.run before the first epoch starts
    done = engine.state.iteration % epoch_length
    if done:  # resuming mid-epoch: skip the batches already trained on
        loaders.train_sampler.skip_next_epoch(done * loaders.per_rank_batch)


class EpochLog:
    """Per-epoch record on every rank: train loss and global throughput over all ranks, in ``history``.

    Training time runs from the epoch's start to its end, before evaluation; throughput is all ranks' samples
    divided by the slowest rank's time. The loss of the first iteration, computed before any update, is kept to
    tell a diverging run (:func:`divergence`). :class:`EpochEvaluation` adds validation to a record and
    :class:`EpochReport` writes it out; attached in that order, after this.
    """

    INITIAL_ITERATIONS = 1

    def __init__(self, recorder: StepRecorder | None = None):
        self.recorder = recorder
        self.epoch_start_iteration = 0
        self.history: list[EpochRecord] = []
        self.steps: list[dict[str, Any] | None] = []  # each epoch's per-rank step statistics (with a recorder)
        self.start, self.loss_sum, self.samples = 0.0, 0.0, 0
        self.initial_losses: list[float] = []

    def attach(self, trainer: Engine) -> None:
        trainer.add_event_handler(Events.EPOCH_STARTED, self._start)
        trainer.add_event_handler(Events.ITERATION_COMPLETED, self._step)
        trainer.add_event_handler(Events.EPOCH_COMPLETED, self._close)
        trainer.add_event_handler(Events.COMPLETED, self._close)  # a run cut short by max_iters ends mid-epoch

    def _start(self, engine: Engine) -> None:
        # Ranks leave evaluation at different times; aligning them here keeps a rank's wait for the others out of
        # the epoch it measures, so the slowest rank's time is the epoch's wall time.
        idist.barrier()
        self.start, self.loss_sum, self.samples = time.perf_counter(), 0.0, 0
        self.epoch_start_iteration = engine.state.iteration

    def _step(self, engine: Engine) -> None:
        # The train step's output (Ignite annotates State.output as int | None).
        output = cast(dict[str, Any], engine.state.output)
        self.loss_sum += output["loss"] * output["samples"]
        self.samples += output["samples"]
        if len(self.initial_losses) < self.INITIAL_ITERATIONS:
            self.initial_losses.append(output["loss"])

    def initial_loss(self) -> float | None:
        """Collective: the loss of the run's first iteration, averaged over all ranks."""
        local = sum(self.initial_losses) / len(self.initial_losses) if self.initial_losses else math.nan
        values = [v for v in gather_objects(local) if not math.isnan(v)]
        return sum(values) / len(values) if values else None

    def _close(self, engine: Engine) -> None:
        if self.history and self.history[-1]["iteration"] == engine.state.iteration:
            return  # closed at EPOCH_COMPLETED already: COMPLETED at the same iteration adds nothing
        # Ignite types all_reduce's result as tensor or number: it is what was reduced.
        seconds = cast(float, idist.all_reduce(time.perf_counter() - self.start, op="MAX"))
        totals = cast(torch.Tensor, idist.all_reduce(torch.tensor([float(self.samples), self.loss_sum])))
        samples, loss_sum = totals.tolist()
        self.steps.append(self.recorder.gather(since_iteration=self.epoch_start_iteration) if self.recorder else None)
        self.history.append(
            {
                "epoch": engine.state.epoch,
                "iteration": engine.state.iteration,
                "train_loss": loss_sum / max(samples, 1.0),
                "train_samples": int(samples),
                "train_time_s": seconds,
                "samples_per_s": samples / seconds if seconds > 0 else 0.0,
                "val_accuracy": None,
                "val_loss": None,
            }
        )


class EpochEvaluation:
    """Validation of the model every ``eval_every`` epochs (0: only at the end; the last epoch always), written
    into that epoch's record of :class:`EpochLog`; the confusion matrix of the last evaluation is kept."""

    def __init__(self, evaluator: Engine, loader: Iterable, epochs: EpochLog, eval_every: int = 1):
        self.evaluator, self.loader, self.epochs, self.eval_every = evaluator, loader, epochs, eval_every
        self.confusion_matrix: list[list[int]] | None = None

    def attach(self, trainer: Engine) -> None:
        trainer.add_event_handler(Events.EPOCH_COMPLETED, self._run, False)
        # A run stopped at an epoch's end by max_iters still gets its final evaluation here.
        trainer.add_event_handler(Events.COMPLETED, self._run, True)

    def _due(self, engine: Engine, final: bool) -> bool:
        final = final or engine.state.epoch == engine.state.max_epochs
        return final or (self.eval_every > 0 and engine.state.epoch % self.eval_every == 0)

    def _run(self, engine: Engine, final: bool) -> None:
        record = self.epochs.history[-1]
        if record["val_accuracy"] is not None or not self._due(engine, final):
            return
        self.evaluator.run(self.loader)
        metrics = self.evaluator.state.metrics
        record.update({"val_accuracy": float(metrics["accuracy"]), "val_loss": float(metrics["loss"])})
        if "confusion_matrix" in metrics:
            self.confusion_matrix = metrics["confusion_matrix"].long().tolist()


class EpochReport:
    """Each epoch's record, once, when it is complete: a log line, TensorBoard scalars (rank 0, global and per
    rank) and every listener (the MLflow tracker)."""

    def __init__(self, epochs: EpochLog, tb: TensorboardLogger | None, log: logging.Logger):
        self.epochs, self.tb, self.log = epochs, tb, log
        self.listeners: list[Callable[[EpochRecord], None]] = []  # called with each epoch's record
        self.reported = 0

    def attach(self, trainer: Engine) -> None:
        trainer.add_event_handler(Events.EPOCH_COMPLETED, self._report)
        trainer.add_event_handler(Events.COMPLETED, self._report)

    def _report(self, engine: Engine) -> None:
        for record, steps in zip(self.epochs.history[self.reported :], self.epochs.steps[self.reported :]):
            self._write(record, steps)
        self.reported = len(self.epochs.history)

    def _write(self, record: EpochRecord, steps: dict[str, Any] | None) -> None:
        if self.tb is not None:
            self.tb.writer.add_scalar("throughput/samples_per_s", record["samples_per_s"], record["epoch"])
            self.tb.writer.add_scalar("train/epoch_loss", record["train_loss"], record["epoch"])
            if steps is not None:
                _log_rank_scalars(self.tb, steps, record["epoch"])
        validation = (
            f"val accuracy {record['val_accuracy']:.4f}, val loss {record['val_loss']:.4f}, "
            if record["val_accuracy"] is not None
            else ""
        )
        self.log.info(
            f"epoch {record['epoch']}: train loss {record['train_loss']:.4f}, {validation}"
            f"{record['samples_per_s']:.0f} samples/s (all ranks)"
        )
        for listener in self.listeners:
            listener(record)


EXPLODING_FACTOR = 2.0  # a last-epoch loss this many times the first iteration's (and 0.5 above it) has exploded


def divergence(initial_loss: float | None, history: list[EpochRecord]) -> str | None:
    """Why a run's training loss says it diverged (NaN / infinite, or exploding), or None."""
    for record in history:
        loss = record["train_loss"]
        if loss is None or not math.isfinite(loss):
            return f"the training loss became NaN or infinite in epoch {record['epoch']} (learning rate too high?)"
    if initial_loss is None or not math.isfinite(initial_loss) or not history:
        return None
    last = cast(float, history[-1]["train_loss"])  # every loss is a number: checked above
    if last > EXPLODING_FACTOR * initial_loss and last - initial_loss > 0.5:
        return f"the training loss grew from {initial_loss:.3g} (first iteration) to {last:.3g} (last epoch)"
    return None


def _log_run_scalars(tb: TensorboardLogger, figures: dict[str, Any], iteration: int) -> None:
    """The run's global throughput and, where measured, its utilisation of the matmul rate, at its last step."""
    if figures["steps"] is not None:
        tb.writer.add_scalar("global/samples_per_s", figures["steps"]["global"]["samples_per_s"], iteration)
    flops = figures["flops"]
    if flops is not None and flops["utilisation_attainable"] is not None:
        tb.writer.add_scalar("global/utilisation_of_matmul_rate", flops["utilisation_attainable"], iteration)


def _log_rank_scalars(tb: TensorboardLogger, steps: dict[str, Any], epoch: int) -> None:
    """Per-rank step time, throughput and data-wait share of one epoch (warm-up excluded), and the global figure."""
    for r in steps["ranks"]:
        if r["iterations"]:
            tb.writer.add_scalar(f"rank{r['rank']}/step_time_s", r["step_s_mean"], epoch)
            tb.writer.add_scalar(f"rank{r['rank']}/samples_per_s", r["samples_per_s"], epoch)
            tb.writer.add_scalar(f"rank{r['rank']}/data_wait_share", r["data_share"], epoch)
            if not math.isnan(r.get("comm_s_mean", math.nan)):
                tb.writer.add_scalar(f"rank{r['rank']}/comm_time_s", r["comm_s_mean"], epoch)
                tb.writer.add_scalar(f"rank{r['rank']}/exposed_comm_time_s", r["exposed_comm_s_mean"], epoch)
                tb.writer.add_scalar(f"rank{r['rank']}/comm_overlap", r["overlap"], epoch)
    if steps["global"]["samples"]:
        tb.writer.add_scalar("global/epoch_samples_per_s", steps["global"]["samples_per_s"], epoch)


def _attach_tensorboard(
    tb: TensorboardLogger, trainer: Engine, evaluator: Engine, optimizer: torch.optim.Optimizer, every: int
) -> None:
    tb.attach_output_handler(
        trainer, Events.ITERATION_COMPLETED(every=every), tag="train", output_transform=lambda o: {"loss": o["loss"]}
    )
    tb.attach_opt_params_handler(trainer, Events.ITERATION_STARTED(every=every), optimizer, param_name="lr")
    tb.attach_output_handler(
        evaluator,
        Events.COMPLETED,
        tag="val",
        metric_names=["accuracy", "loss"],
        global_step_transform=global_step_from_engine(trainer, Events.EPOCH_COMPLETED),
    )


def _interactive() -> bool:
    """A terminal or a notebook is watching: piped or redirected output gets no progress-bar redraws."""
    return sys.stderr.isatty() or "ipykernel" in sys.modules


def _launch_facts(plan: LaunchPlan | None) -> dict[str, Any]:
    facts: dict[str, Any] = {"threads_per_process": torch.get_num_threads(), "cpu_cores": cpu_cores()}
    if plan is not None:
        facts.update(
            launch_mode=plan.mode,
            launcher=plan.launcher,
            nproc_per_node=plan.nproc_per_node,
            nnodes=plan.nnodes,
            start_method=plan.start_method if plan.mode == "spawn" else None,
        )
    return facts


def rank_logger(out: Path, rank: int) -> logging.Logger:
    """A logger writing to ``logs/rank<r>.log`` on every rank, and to the console on rank 0."""
    logger = logging.getLogger(f"ignite_ddl.rank{rank}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter(f"%(asctime)s rank{rank} %(levelname)s: %(message)s")
    # The console first: a message still reaches it when the log file cannot be written (a full disk).
    handlers: list[logging.Handler] = [logging.StreamHandler()] if rank == 0 else []
    handlers.append(OutputFileHandler(out / "logs" / f"rank{rank}.log"))
    for handler in handlers:
        handler.setFormatter(fmt)
        logger.addHandler(handler)
    return logger


def _summary(
    config: TrainConfig,
    env: dict,
    loaders: Loaders,
    trainer: Engine,
    epochs: EpochLog,
    wall: float,
    checkpoint: Checkpoint | None,
    steps: StepStats | None,
    profile: ProfilerResult | None,
    contention: Contention | None,
) -> Summary:
    history = epochs.history
    initial_loss = epochs.initial_loss()
    train_time = sum(r["train_time_s"] for r in history)
    train_samples = sum(r["train_samples"] for r in history)
    last: Mapping[str, Any] = history[-1] if history else {}
    measured = steps["global"] if steps is not None and steps["global"]["samples"] > 0 else None
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "completed",
        **env,
        "dataset": config.dataset,
        "model": config.model,
        "amp": config.amp,
        "batch": {
            "requested_global": config.batch_size,
            "per_rank": loaders.per_rank_batch,
            "global": loaders.global_batch,
        },
        "epochs": trainer.state.epoch,
        "iterations": trainer.state.iteration,
        "epoch_length": cast(int, trainer.state.epoch_length),  # set by Engine.run
        "wall_time_s": wall,
        "train_time_s": train_time,
        "train_samples": train_samples,
        # The step recorder's figure (warm-up excluded) where it measured something, else the epochs' figure.
        "samples_per_s": measured["samples_per_s"] if measured is not None else train_samples / max(train_time, 1e-9),
        "samples_per_s_source": "steps" if measured is not None else "epochs",
        "final_train_loss": last.get("train_loss"),
        "initial_train_loss": initial_loss,
        "diverged": divergence(initial_loss, history),
        "val_accuracy": last.get("val_accuracy"),
        "val_loss": last.get("val_loss"),
        "best_val_accuracy": max((r["val_accuracy"] for r in history if r["val_accuracy"] is not None), default=None),
        "last_checkpoint": str(checkpoint.last_checkpoint) if checkpoint and checkpoint.last_checkpoint else None,
        "resumed_from": config.resume,
        "history": history,
        "steps": steps,
        "contention": contention,
        "profiler": profile,
    }


def check_training(config: TrainConfig, plan: LaunchPlan) -> None:
    """Every check of a training run that can be made before its processes start (:class:`ConfigError`);
    creates the output directory last."""
    check_dataset(config)
    check_model(config.model)
    check_tracker(config)
    if config.resume is not None:
        check_checkpoint(config.resume, config)
    if config.batch_size < plan.world_size:
        raise ConfigError(
            f"batch_size is the global batch: {config.batch_size} cannot be split over {plan.world_size} processes"
        )
    if config.amp == "fp16" and plan.cuda_devices == 0:
        raise ConfigError("amp fp16 needs a CUDA GPU (use --amp bf16 on CPU)")
    _check_writable(Path(config.output_dir))


def _check_writable(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"output directory '{path}' is not writable: {e.strerror or e}") from None


def train(config: TrainConfig, setup: Callable[[TrainingRun], None] | None = None) -> dict:
    """Check ``config``, launch :func:`training` on every rank as it says, and return the run summary (as written
    to summary.json). ``setup`` is passed to :func:`training`."""
    config.check()
    plan = launcher.plan_launch(config.launch_settings())
    check_training(config, plan)
    # One process owns the output folder: the first node's launcher, or global rank 0 under torchrun / SLURM. It
    # claims the folder before the rendezvous, so no other node or rank writes there before it has.
    environ = os.environ
    owner = plan.node_rank == 0 and (plan.mode != "env" or environ.get("RANK", environ.get("SLURM_PROCID")) == "0")
    if not owner:
        return launcher.launch(training, plan, config, plan, setup)
    with lock(config.output_dir, "run"):
        claim_run_folder(config.output_dir, resume=config.resume is not None, overwrite=config.overwrite)
        return launcher.launch(training, plan, config, plan, setup)
