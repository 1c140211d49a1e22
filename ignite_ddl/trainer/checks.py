"""What is refused before a training run's processes start (:class:`~ignite_ddl.core.errors.ConfigError`, one line
each): its dataset, model, tracker, workload and checkpoint, the options the machine cannot give, how the global batch
splits over the processes, whether the measured window would straddle an option's change of behaviour, and whether
the output directory can be written. A sweep makes the checks that hold whatever the machine for every configuration
before its first run (:func:`check_arrangement`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

import torch

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.launcher.settings import LaunchPlan
from ignite_ddl.trainer.checkpoint import check_checkpoint
from ignite_ddl.trainer.data import check_dataset, planned_iterations
from ignite_ddl.trainer.models import check_model
from ignite_ddl.trainer.recipe import build_optimizer, clip_value
from ignite_ddl.trainer.strategies import check_compile, strategy_for
from ignite_ddl.trainer.tracking import check_tracker
from ignite_ddl.trainer.workload import Workload, check_workload

__all__ = ["check_arrangement", "check_training"]


def _check_steady_window(config: TrainConfig, world_size: int) -> None:
    """Refuse a run whose measured window would straddle an option's change of behaviour (PowerSGD compressing
    from ``powersgd_start_iter`` on), where its length is known before it starts: it would measure a blend of
    both phases, or nothing."""
    iterations = planned_iterations(config, world_size)
    start = config.behaviour_changes_at(world_size, iterations)
    if iterations is None or not start or iterations > start + config.warmup_iters:
        return
    raise ConfigError(
        f"comm_hook powersgd compresses only after iteration {start} (powersgd_start_iter) and the measured window "
        f"starts {config.warmup_iters} iterations later (warmup_iters), but this run has {iterations} iterations: "
        "it would measure no compressed step; raise epochs or train_size, or lower powersgd_start_iter"
    )


def check_training(config: TrainConfig, plan: LaunchPlan) -> None:
    """Every check of a training run that can be made before its processes start (:class:`ConfigError`);
    creates the output directory last."""
    check_dataset(config)
    check_model(config.model)
    check_tracker(config)
    # A workload's function runs here once, so that what it gets wrong is one line before any rank starts.
    loaded = check_workload(config, plan.world_size) if config.workload is not None else None
    if loaded is not None:
        _check_recipe(config, loaded.workload)
    if config.activation_checkpointing and loaded is None:
        raise ConfigError("--activation-checkpointing is for workloads that mark their blocks (--workload gpt)")
    if config.resume is not None:
        check_checkpoint(config.resume, config, loaded.workload.model if loaded is not None else None)
    if config.amp == "fp16" and plan.cuda_devices == 0:
        raise ConfigError("amp fp16 needs a CUDA GPU (use --amp bf16 on CPU)")
    if config.cuda_memory_fraction is not None and plan.cuda_devices == 0:
        raise ConfigError("cuda_memory_fraction caps a GPU's memory: this run has no CUDA GPU")
    check_arrangement(config, plan.world_size, plan.backend)
    if config.compile:
        check_compile(plan.backend, plan.cuda_devices)
    _check_writable(Path(config.output_dir))


def _check_recipe(config: TrainConfig, workload: Workload) -> None:
    """Refuse a workload's clipping value that is not a norm, clipping given to a workload's own process function
    (its step, not the suite's), and an ``optimizer(model)`` that raises or makes neither an optimizer nor parameter
    groups (called once, on a copy of the model)."""
    path, declared = config.workload, cast(Any, workload.clip_grad_norm)  # whatever the user's function gave
    if isinstance(declared, bool) or (declared is not None and declared < 0):
        raise ConfigError(f"workload {path}: clip_grad_norm must be a number >= 0 or None, got {declared!r}")
    clip = clip_value(config, declared)
    if clip and workload.make_process_function is not None:
        raise ConfigError(
            f"workload {path}: clipping to {clip:g} is done in the suite's own step; its process_function runs its "
            "own (clip inside it, or give a training_step instead)"
        )
    if workload.optimizer is None:
        return
    model = copy.deepcopy(workload.model)
    try:
        with torch.random.fork_rng(devices=[]):
            optimizer = build_optimizer(model, config, workload.optimizer)
    except Exception as e:
        text = str(e).strip().splitlines()
        raise ConfigError(
            f"workload {path}: its optimizer(model) failed: {text[0] if text else type(e).__name__}"
        ) from None
    if not any(p.requires_grad for group in optimizer.param_groups for p in group["params"]):
        raise ConfigError(f"workload {path}: its optimizer(model) holds no parameter to train")


def check_arrangement(config: TrainConfig, world_size: int, backend: str | None = None) -> None:
    """The checks of a run that hold whatever the machine (:class:`ConfigError`): how the global batch splits over
    ``world_size`` processes and micro-batches, whether the strategy runs on that many and takes its options (on
    ``backend`` too, where known), which options go together. A sweep makes them for every configuration before its
    first run."""
    if config.batch_size < world_size:
        raise ConfigError(
            f"batch_size is the global batch: {config.batch_size} cannot be split over {world_size} processes"
        )
    strategy = strategy_for(config.strategy, world_size)  # refuses a strategy this world size cannot run
    strategy.check_options(config, backend)
    if config.static_graph and config.accumulate > 1:
        # DDP's static graph expects every backward to reduce gradients; accumulation skips that in all but the
        # last micro-batch, and torch then stops every run with "expect_autograd_hooks_ INTERNAL ASSERT FAILED".
        raise ConfigError(
            f"--static-graph cannot be combined with --accumulate {config.accumulate}: DDP's static graph needs "
            "every backward to synchronise gradients (leave one of them out)"
        )
    micro = world_size * config.accumulate
    if config.accumulate > 1 and config.batch_size % micro:
        raise ConfigError(
            f"batch_size is the global batch per optimizer step: {config.batch_size} cannot be split into "
            f"{world_size} process(es) x {config.accumulate} micro-batches (make it a multiple of {micro})"
        )
    _check_steady_window(config, world_size)


def _check_writable(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"output directory '{path}' is not writable: {e.strerror or e}") from None
