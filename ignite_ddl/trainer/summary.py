"""A run's summary (summary.json) as the schema's :class:`~ignite_ddl.core.schema.Summary`: what it trained, on
what and how it was launched, its epochs and the figures its ranks measured."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import ignite.distributed as idist
import torch
from ignite.engine import Engine
from ignite.handlers import Checkpoint

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.environment import cpu_cores
from ignite_ddl.core.schema import SCHEMA_VERSION, Contention, ProfilerResult, StepStats, Summary, WorkloadInfo
from ignite_ddl.launcher.settings import LaunchPlan
from ignite_ddl.trainer.data import Loaders
from ignite_ddl.trainer.epochs import EpochLog, divergence
from ignite_ddl.trainer.strategies import strategy_for
from ignite_ddl.trainer.workload import Loaded

__all__ = ["build_summary", "launch_facts", "workload_facts"]


def launch_facts(plan: LaunchPlan | None) -> dict[str, Any]:
    """How the run was launched and what each rank had: intra-op threads, CPU cores, and the launch plan's mode,
    launcher and processes (None: a run started without one)."""
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


def workload_facts(config: TrainConfig, loaded: Loaded | None, samples_per_s: float) -> WorkloadInfo | None:
    """With ``--workload``: what ran, its unit and its throughput in it (None without one)."""
    if loaded is None:
        return None
    facts = loaded.facts(config.workload_args)
    return cast(WorkloadInfo, {**facts, "units_per_s": samples_per_s * facts["units_per_sample"]})


def build_summary(
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
    """The run's summary from what its ranks measured; ``env`` holds where it ran (device, versions, host,
    launch)."""
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
            "accumulate": config.accumulate,
            "micro": loaders.per_rank_batch // config.accumulate,
        },
        "strategy": strategy_for(config.strategy, idist.get_world_size()).name,
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
