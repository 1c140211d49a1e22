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

import dataclasses
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, EarlyStopping, ProgressBar, global_step_from_engine
from ignite.handlers.tensorboard_logger import TensorboardLogger
from torch import nn
from torch.utils.data import default_collate

from ignite_ddl.core.commands import PROG
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.environment import device_info, host, versions
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.folders import claim_run_folder, lock
from ignite_ddl.core.jsonfiles import write_json
from ignite_ddl.core.outputs import OutputFileHandler, output_errors, quiet_writer_threads
from ignite_ddl.core.runfiles import write_summary
from ignite_ddl.core.schema import SCHEMA_VERSION, Summary
from ignite_ddl.launcher.scratch import scratch_folder
from ignite_ddl.launcher.settings import LaunchPlan, plan_launch
from ignite_ddl.launcher.spawn import launch
from ignite_ddl.launcher.watchdog import StallWatchdog
from ignite_ddl.measure.comm import CommTimer
from ignite_ddl.measure.compilation import CompileWatch
from ignite_ddl.measure.contention import CONTENTION_THRESHOLD
from ignite_ddl.measure.flops import FlopCount, format_flops
from ignite_ddl.measure.memory import format_memory
from ignite_ddl.measure.recorder import StepRecorder, format_steps
from ignite_ddl.trainer.checkpoint import attach_best_model, attach_checkpoints, finished_problem, load_checkpoint
from ignite_ddl.trainer.checks import check_arrangement, check_training
from ignite_ddl.trainer.data import Loaders, build_loaders
from ignite_ddl.trainer.engines import (
    attach_early_stopping,
    create_evaluator,
    create_trainer,
    create_workload_evaluator,
    seed_everything,
)
from ignite_ddl.trainer.epochs import EpochEvaluation, EpochLog, EpochReport
from ignite_ddl.trainer.measurement import FlopsProbe, GradScaleLog, attach_measurement
from ignite_ddl.trainer.models import build_model
from ignite_ddl.trainer.recipe import (
    Schedule,
    attach_schedule,
    build_optimizer,
    clip_value,
    schedule_end,
    schedule_shape,
)
from ignite_ddl.trainer.strategies import FSDPStrategy, Strategy, strategy_for
from ignite_ddl.trainer.summary import build_summary, launch_facts, workload_facts
from ignite_ddl.trainer.tracking import MlflowTracker
from ignite_ddl.trainer.workload import Loaded, Workload, activation_checkpointing, count_workload_flops, load_workload

__all__ = [
    "Handlers",
    "Parts",
    "TrainingRun",
    "attach_handlers",
    "attach_schedule",
    "check_arrangement",
    "check_training",
    "initialize",
    "rank_logger",
    "resume",
    "train",
    "train_command",
    "training",
]


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
    loaded = load_workload(config) if config.workload is not None else None  # imported (and run) in every rank
    loaders = build_loaders(config, loaded.workload.data() if loaded is not None else None)
    parts = initialize(config, loaders, loaded.workload if loaded is not None else None)
    measuring = attach_measurement(config, plan, parts.trainer, parts.evaluator, parts.recorder, parts.device, out)
    scales = GradScaleLog(parts.scaler).attach(parts.trainer) if parts.scaler is not None else None
    handlers = attach_handlers(config, parts, loaders, measuring.recorder, out, log)
    if config.resume:
        resume(config, handlers, parts.trainer, log)
    if setup is not None:
        setup(TrainingRun(config, parts.trainer, parts.evaluator, parts.model, parts.optimizer, loaders))
    env = _record_config(config, plan, parts.device, out, loaded)
    micro = loaders.per_rank_batch // config.accumulate
    accumulation = ""
    if config.accumulate > 1:
        accumulation = f" per optimizer step, in {config.accumulate} micro-batches of {micro}"
    log.info(
        f"rank {idist.get_rank()}/{env['world_size']} on {env['device']['name']}, {torch.get_num_threads()} "
        f"threads, batch {loaders.per_rank_batch} per rank / {loaders.global_batch} global{accumulation}, "
        f"strategy {parts.strategy.name}"
    )
    probe = None
    if config.measure_flops:
        # The FLOPs of the module as built: a sharded model's forward would gather parameters (a collective).
        counted = parts.model
        if parts.strategy.info.shards_parameters and parts.flops is None:
            counted = _unplaced_model(config, loaders)
        criterion = cast(nn.Module, parts.criterion)  # counted only for the built-in models, whose loss is a Module
        device, cache = parts.device, config.peak_cache()
        probe = FlopsProbe.measure(counted, criterion, loaders.info, device, config.amp, parts.flops, cache)
    wall = _run(parts.trainer, loaders, config.epochs, handlers.tracker, measuring.watchdog)
    held = parts.strategy.held_bytes(parts.model, parts.optimizer)  # between steps, as the run left them
    figures = measuring.gather(parts.model, parts.comm, probe, out, log, held)
    figures["grad_scaler"] = scales.record() if scales is not None else None
    if handlers.tb is not None:
        _log_run_scalars(handlers.tb, figures, parts.trainer.state.iteration)
        handlers.tb.close()
    return _finish(config, env, loaders, parts.trainer, handlers, wall, figures, out, log, loaded)


@dataclass(frozen=True)
class Parts:
    """What one rank trains with: the strategy and the model it placed, its optimizer, loss and gradient scaler, and
    the engines."""

    strategy: Strategy
    device: torch.device
    model: nn.Module
    optimizer: torch.optim.Optimizer
    criterion: Callable[..., torch.Tensor]
    scaler: torch.amp.GradScaler | None
    recorder: StepRecorder | None
    comm: CommTimer | None
    trainer: Engine
    evaluator: Engine
    flops: FlopCount | None = None  # a workload's FLOPs per sample, known or counted before it was placed
    accuracy: bool = True  # the evaluator reports accuracy (not a workload's own step)


def initialize(config: TrainConfig, loaders: Loaders, workload: Workload | None = None) -> Parts:
    """Model (placed by the run's strategy), optimizer (``auto_optim``), loss, scaler and the two engines. The step
    recorder is built here because the train step reports its phases to it; ``attach_measurement`` attaches it.
    With a ``workload``, its model, loss or step, blocks (FSDP units, activation checkpointing) and sample count.
    """
    device, info = idist.device(), loaders.info
    if config.cuda_memory_fraction is not None and device.type == "cuda":
        # before the first allocation of the run: the allocator refuses anything above the cap from here on
        torch.cuda.set_per_process_memory_fraction(config.cuda_memory_fraction, device)
    strategy = strategy_for(config.strategy, idist.get_world_size())
    criterion: Callable[..., torch.Tensor]
    flops = None
    if workload is None:
        net = build_model(config.model, info.in_channels, info.image_size, info.num_classes)
        if config.channels_last:
            net = net.to(memory_format=torch.channels_last)  # 4-D weights only; other parameters stay as they are
        criterion = nn.CrossEntropyLoss().to(device)
    else:
        net, criterion = workload.model, workload.loss
        if config.measure_flops:  # counted before activation checkpointing: model FLOPs leave recomputation out
            sample = default_collate([loaders.train.dataset[i] for i in range(2)])
            flops = count_workload_flops(workload, sample)
        blocks = workload.block_names()
        if config.activation_checkpointing:
            activation_checkpointing(net, blocks)
        if isinstance(strategy, FSDPStrategy) and blocks:
            strategy.units = tuple(blocks)
    # Compiled before it is placed (see Strategy.compile); evaluation, checkpoints and FLOPs unwrap it, eager.
    if config.compile:
        # Each compiled run starts from a clean TorchDynamo, as in a fresh process: what an earlier run of this
        # process compiled, and which of its dimensions went dynamic (Dynamo's in-process profile of each code
        # object), would otherwise change this run's compilation and recompilations (seen on an H200: after a
        # run whose batch shrank once, the next run in the process compiled the batch dynamic from the start).
        from torch import _dynamo

        _dynamo.reset()
    model = strategy.place(strategy.compile(net, config) if config.compile else net, config)
    # The workload's optimizer, else the options': over the parameters as placed (FSDP2's sharded ones).
    factory = workload.optimizer if workload is not None else None
    optimizer = strategy.optimizer(model, build_optimizer(model, config, factory), config)
    process_function = None
    if workload is not None and workload.make_process_function is not None:
        # The workload's own step, given the model as placed (DDP still averages its gradients) and the optimizer.
        process_function = workload.make_process_function(model, optimizer, device)
    scaler = torch.amp.GradScaler("cuda") if config.amp == "fp16" else None
    comm = strategy.communication(model, config, device)  # the communication hook, timed where it can be
    watch = CompileWatch() if config.compile else None
    iterations = config.epochs * len(loaders.train)
    iterations = min(iterations, config.max_iters) if config.max_iters else iterations
    warmup = config.measured_warmup(idist.get_world_size(), iterations)  # past PowerSGD's start: steady phase only
    # A workload's batches may be mappings: its own count of samples, not the length of the batch's first entry.
    counted = _counter(workload.samples_in) if workload is not None else None
    changes_at = config.behaviour_changes_at(idist.get_world_size(), iterations)  # measured apart: its own phase
    recorder = (
        StepRecorder(warmup, device, counted, comm, compile_watch=watch, changes_at=changes_at)
        if config.record_steps
        else None
    )
    trainer = create_trainer(
        model,
        optimizer,
        criterion,
        device,
        config.amp,
        scaler,
        recorder,
        accumulate=config.accumulate,
        no_sync=lambda: strategy.no_sync(model),
        channels_last=config.channels_last,
        step=workload.step if workload is not None else None,
        samples_in=workload.samples_in if workload is not None else None,
        process_function=process_function,
        clip_grad_norm=clip_value(config, workload.clip_grad_norm if workload is not None else None),
    )
    if workload is None:
        evaluator = create_evaluator(model, criterion, device, config.amp, info.num_classes, config.channels_last)
    elif workload.accuracy and workload.training_step is None:
        evaluator = create_evaluator(model, criterion, device, config.amp)
    else:
        evaluator = create_workload_evaluator(model, workload.step, workload.samples_in, device, config.amp)
    # A sharded model gathers its parameters for the evaluator (ranks hold different numbers of batches).
    evaluator.add_event_handler(Events.STARTED, lambda _: strategy.begin_evaluation(model))
    evaluator.add_event_handler(Events.COMPLETED, lambda _: strategy.end_evaluation(model))
    accuracy = workload is None or (workload.accuracy and workload.training_step is None)
    return Parts(
        strategy, device, model, optimizer, criterion, scaler, recorder, comm, trainer, evaluator, flops, accuracy
    )


def _counter(samples_in: Callable[[Any], int]) -> Callable[[Engine], int]:
    """The step recorder's count of samples in an engine's current batch, by a workload's ``samples_in``."""
    return lambda engine: samples_in(engine.state.batch)


def _unplaced_model(config: TrainConfig, loaders: Loaders) -> nn.Module:
    info = loaders.info
    return build_model(config.model, info.in_channels, info.image_size, info.num_classes)


@dataclass(frozen=True)
class Handlers:
    """The training handlers of one rank: what is checkpointed, the schedule, the epoch log and evaluation, early
    stopping, checkpoints, TensorBoard and the tracker (rank 0)."""

    to_save: dict[str, Any]
    scheduler: Schedule | None
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
    saved_model, saved_optimizer = parts.strategy.saved(parts.model, parts.optimizer)
    to_save: dict[str, Any] = {"trainer": trainer, "model": saved_model, "optimizer": saved_optimizer}
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
    if config.best_model and parts.accuracy:  # the best model is the most accurate one
        attach_best_model(trainer, evaluator, saved_model, out)
    if config.max_iters:
        trainer.add_event_handler(Events.ITERATION_COMPLETED(once=config.max_iters), lambda e: e.terminate())
    if tb is not None:
        _attach_tensorboard(tb, trainer, evaluator, parts.optimizer, config.log_every, parts.accuracy)
    tracker = None
    if rank == 0 and config.tracker == "mlflow":
        facts = {"world_size": idist.get_world_size(), "backend": idist.backend() or "none"}
        tracker = MlflowTracker(config, trainer, facts)
        report.listeners.append(tracker.log_epoch)
    if rank == 0 and config.progress and _interactive():
        ProgressBar(persist=False).attach(trainer, output_transform=lambda o: {"loss": o["loss"]})
    return Handlers(to_save, scheduler, epochs, evaluation, early, checkpoint, tb, tracker)


def resume(config: TrainConfig, handlers: Handlers, trainer: Engine, log: logging.Logger) -> None:
    """Load ``config.resume`` into everything checkpointed; refuse a checkpoint whose LR schedule differs."""
    scheduler = handlers.scheduler
    planned = scheduler.state_dict() if scheduler is not None else None
    path = cast(str, config.resume)  # called only when config.resume names a checkpoint
    try:
        Checkpoint.load_objects(to_load=handlers.to_save, checkpoint=load_checkpoint(path))
    except (ValueError, KeyError) as e:  # torch's and Ignite's words on a state of another shape, in one line
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"cannot resume from {path}: {why}; resume with the options of the run that wrote it (--optimizer, "
            "--lr-schedule, the workload's optimizer)"
        ) from None
    if scheduler is not None and schedule_shape(scheduler.state_dict()) != schedule_shape(planned):
        # Ignite restores the saved schedule: this run's extra iterations would train at learning rate 0.
        saved, ours = schedule_end(scheduler.state_dict()), schedule_end(planned)
        how = f"ends at iteration {saved}, this run's at {ours}" if saved != ours else "is not this run's"
        raise ConfigError(
            f"cannot resume from {config.resume}: its learning-rate schedule {how}; resume with the --epochs, "
            "--warmup-epochs, --lr-schedule, --min-lr-ratio and --lr of the run that wrote it"
        )
    # A finished run's last checkpoint: Ignite would train its last epoch again (check_checkpoint refuses it first).
    finished = finished_problem(path, trainer.state.iteration, trainer.state.epoch_length, config)
    if finished:
        raise ConfigError(finished)
    log.info(f"resumed from {config.resume} at iteration {trainer.state.iteration}")


def _record_config(
    config: TrainConfig, plan: LaunchPlan | None, device: torch.device, out: Path, loaded: Loaded | None = None
) -> dict[str, Any]:
    """The run's facts (world, backend, device, launch); rank 0 writes them with the config to config.json (and
    which workload module and file ran)."""
    env = {"world_size": idist.get_world_size(), "backend": idist.backend() or "none", "device": device_info(device)}
    env.update(launch_facts(plan))
    if idist.get_rank() == 0:
        record = {"schema_version": SCHEMA_VERSION, "config": config.to_dict(), **env}
        if loaded is not None:
            record["workload"] = loaded.facts(config.workload_args)
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
    loaded: Loaded | None = None,
) -> Summary:
    """The summary, on every rank; rank 0 writes it, closes the tracker's run and prints the figures."""
    early, steps, flops = handlers.early, figures["steps"], figures["flops"]
    stopped_early = trainer.state.epoch if early is not None and early.counter >= early.patience else None
    if early is not None and stopped_early is not None:
        log.info(
            f"early stopping: no better validation accuracy for {early.patience} evaluations, "
            f"stopped after epoch {stopped_early}"
        )
    summary = build_summary(
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
            "memory": figures["memory"],
            "grad_scaler": figures["grad_scaler"],
            "workload": workload_facts(config, loaded, summary["samples_per_s"]),
        }
    )
    if loaded is not None:
        summary["model"] = summary["dataset"] = loaded.path
    if idist.get_rank() == 0:
        write_summary(out, summary)
        if handlers.tracker is not None:
            handlers.tracker.finish(summary)
        if steps is not None:
            log.info("\n" + format_steps(steps))
        if flops is not None and flops["achieved_flops_per_s"] is not None:
            log.info(format_flops(flops))
        if figures["memory"] is not None:
            log.info(format_memory(figures["memory"]))
        if summary["diverged"]:
            log.warning(f"the run diverged: {summary['diverged']}")
    units = summary["workload"]
    rate = f"{units['units_per_s']:.0f} {units['sample_unit']}/s" if units is not None else ""
    rate = f"{summary['samples_per_s']:.0f} samples/s" + (f" ({rate})" if rate else "")
    log.info(f"done in {wall:.1f} s: {rate}, val accuracy {summary['val_accuracy']}, val loss {summary['val_loss']}")
    return summary


def _start_epoch(engine: Engine, loaders: Loaders) -> None:
    loaders.train_sampler.set_epoch(engine.state.epoch - 1)
    epoch_length = cast(int, engine.state.epoch_length)  # set by Engine.run before the first epoch starts
    done = engine.state.iteration % epoch_length
    if done:  # resuming mid-epoch: skip the batches already trained on
        loaders.train_sampler.skip_next_epoch(done * loaders.per_rank_batch)


def _log_run_scalars(tb: TensorboardLogger, figures: dict[str, Any], iteration: int) -> None:
    """The run's global throughput (the measured window's, warm-up excluded) and, where measured, its utilisation
    of the matmul rate and every rank's memory, at its last step."""
    if figures["steps"] is not None:
        tb.writer.add_scalar("global/samples_per_s", figures["steps"]["global"]["samples_per_s"], iteration)
    flops = figures["flops"]
    if flops is not None and flops["utilisation_attainable"] is not None:
        tb.writer.add_scalar("global/utilisation_of_matmul_rate", flops["utilisation_attainable"], iteration)
    memory = figures["memory"]
    for rank in memory["ranks"] if memory is not None else []:
        tb.writer.add_scalar(f"rank{rank['rank']}/peak_memory_bytes", rank["peak_rss_bytes"], iteration)
        if rank["held_bytes"] is not None:
            tb.writer.add_scalar(f"rank{rank['rank']}/held_bytes", sum(rank["held_bytes"].values()), iteration)
        if rank["cuda"] is not None:
            tb.writer.add_scalar(
                f"rank{rank['rank']}/cuda_max_allocated_bytes", rank["cuda"]["max_allocated_bytes"], iteration
            )


def _attach_tensorboard(
    tb: TensorboardLogger,
    trainer: Engine,
    evaluator: Engine,
    optimizer: torch.optim.Optimizer,
    every: int,
    accuracy: bool = True,
) -> None:
    tb.attach_output_handler(
        trainer,
        Events.ITERATION_COMPLETED(every=every),
        tag="train",
        output_transform=lambda o: {k: o[k] for k in ("loss", "grad_norm") if k in o},  # the norm where it clips
    )
    tb.attach_opt_params_handler(trainer, Events.ITERATION_STARTED(every=every), optimizer, param_name="lr")
    tb.attach_output_handler(
        evaluator,
        Events.COMPLETED,
        tag="val",
        metric_names=["accuracy", "loss"] if accuracy else ["loss"],
        global_step_transform=global_step_from_engine(trainer, Events.EPOCH_COMPLETED),
    )


def _interactive() -> bool:
    """A terminal or a notebook is watching: piped or redirected output gets no progress-bar redraws."""
    return sys.stderr.isatty() or "ipykernel" in sys.modules


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
    # The console first: a message still reaches it when the log file cannot be written (a full disk). In a notebook
    # (an IPython kernel) stdout: Jupyter shows stderr in red, and these lines are not errors.
    console = sys.stdout if "ipykernel" in sys.modules else sys.stderr
    handlers: list[logging.Handler] = [logging.StreamHandler(console)] if rank == 0 else []
    handlers.append(OutputFileHandler(out / "logs" / f"rank{rank}.log"))
    for handler in handlers:
        handler.setFormatter(fmt)
        logger.addHandler(handler)
    return logger


def train(config: TrainConfig, setup: Callable[[TrainingRun], None] | None = None) -> Any:
    """Check ``config``, launch :func:`training` on every rank as it says, and return the run summary (as written
    to summary.json; None on the nodes other than the first of a multi-node run). ``setup`` is passed to
    :func:`training`."""
    plan = plan_launch(config)
    check_training(config, plan)
    if config.compile and plan.mode == "serial" and not torch.cuda.is_initialized():
        # One process, forked: torch.compile leaves the process that ran it unable to fork ranks that train. Where
        # CUDA is already initialised here, a forked child could not use it: the run stays in this process, which
        # could not fork ranks that use the GPU anyway.
        plan = dataclasses.replace(plan, apart=True)
    # One process owns the output folder: the first node's launcher, or global rank 0 under torchrun / SLURM. It
    # claims the folder before the rendezvous, so no other node or rank writes there before it has.
    environ = os.environ
    owner = plan.node_rank == 0 and (plan.mode != "env" or environ.get("RANK", environ.get("SLURM_PROCID")) == "0")
    if not owner:
        with scratch_folder():
            return launch(training, plan, config, plan, setup)
    with lock(config.output_dir, "run"):
        claim_run_folder(config.output_dir, resume=config.resume is not None, overwrite=config.overwrite)
        with scratch_folder():  # temporary files and Inductor's cache of every rank, removed at the end
            return launch(training, plan, config, plan, setup)


def train_command(config: TrainConfig) -> int:
    """``ignite-ddl train``: train as ``config`` says and print the run's one-line result (and warnings); the exit
    status. Errors propagate: :func:`~ignite_ddl.core.commands.run_command` turns them into one line and a status."""
    summary = train(config)
    if summary is None:  # a node other than the first of a multi-node run: its first node reports
        return 0
    accuracy, units = summary["val_accuracy"], summary.get("workload")
    rate = f"{summary['samples_per_s']:.0f} samples/s"
    if units is not None and units["units_per_sample"] > 1:
        rate = f"{units['units_per_s']:.0f} {units['sample_unit']}/s ({rate})"
    elif units is not None:
        rate = f"{units['units_per_s']:.0f} {units['sample_unit']}/s"
    flops = summary.get("flops") or {}
    mfu, mfu_text = flops.get("utilisation_attainable"), ""
    if flops.get("not_counted") and units is not None:  # no MFU at all rather than a low one
        mfu_text = f", FLOPs not counted: {', '.join(flops['not_counted'])} (no MFU)"
    elif mfu is not None and units is not None:  # a figure above the measured peak is flagged, never printed plain
        where = f"this machine's {flops['precision']} matmul peak"
        flagged = flops.get("above_measured_peak")
        mfu_text = f", MFU FLAGGED: above {where}" if flagged else f", MFU {mfu:.1%} of {where}"
    print(
        f"{PROG}: {summary['world_size']} process(es), {summary['backend']}: {rate}{mfu_text}, val accuracy "
        f"{'-' if accuracy is None else format(accuracy, '.4f')} -> {config.output_dir}/summary.json"
    )
    if summary.get("diverged"):
        print(f"{PROG}: warning: the run diverged: {summary['diverged']}", file=sys.stderr)
    share = (summary.get("contention") or {}).get("foreign_cpu_share")
    if share is not None and share > CONTENTION_THRESHOLD:
        print(
            f"{PROG}: warning: other processes used {share:.0%} of the CPUs while this run measured: "
            "its timings are not its own",
            file=sys.stderr,
        )
    return 0
