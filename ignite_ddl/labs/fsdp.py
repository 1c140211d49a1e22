"""fsdp: DDP vs fully sharded data parallel (torch's FSDP2, ``torch.distributed.fsdp.fully_shard``).

What it teaches: DDP keeps a full replica on every rank (parameters, gradients and optimizer state), so the model
must fit on one device. Sharded data parallelism (ZeRO-3, FSDP) gives each of the N ranks a 1/N shard of all three;
before a layer computes, its parameters are all-gathered and freed again after use, and gradients are reduce-scattered
so that each rank only keeps (and updates) its own shard. It trades memory for communication: the advice is to try
DDP first, and FSDP when the model does not fit.

The lab trains the same MLP (several Linear layers, Adam, whose two moments per parameter make the optimizer state
twice the parameters) with DDP (``idist.auto_model``, gradients as views of DDP's buckets so they are not held twice)
and with FSDP2 (each Linear layer and the whole model passed to ``fully_shard``), on the same data and seed. It
counts the bytes each rank holds between steps for parameters, gradients and optimizer state (the local shard of
every DTensor), times the steps, and checks the loss trajectories agree. FSDP2 and the classic
``FullyShardedDataParallel`` both run on CPU with gloo in torch 2.15; FSDP2 is used because its parameters are
DTensors, whose local shards can be counted directly (classic FSDP flattens them). The figures are what a rank keeps:
while a layer runs, FSDP also holds that layer's gathered parameters (``largest_layer_bytes``).

Example:
    ignite-ddl fsdp --nproc-per-node 2

or from Python: ``fsdp.run(nproc_per_node=2)``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, TypedDict, cast

import ignite.distributed as idist
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from ignite_ddl.core.config import LaunchOptions, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import Role, option, option_like
from ignite_ddl.core.text import format_table, kib
from ignite_ddl.labs import Check, LabLaunchOptions, LabResult, at_least, check, format_checks, launch_lab, split_evenly
from ignite_ddl.labs._steps import batch_share, median_step_s
from ignite_ddl.measure.clock import now
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.measure.memory import HELD_PARTS, held_bytes, local_bytes
from ignite_ddl.trainer.data import synthetic_images
from ignite_ddl.trainer.engines import seed_everything
from ignite_ddl.trainer.models import mlp

__all__ = [
    "CLAIM",
    "HELP",
    "NAME",
    "PARTS",
    "SEED",
    "SHAPE",
    "ModeSummary",
    "Options",
    "RankRun",
    "Result",
    "Trained",
    "format_result",
    "run",
    "train",
]

NAME = "fsdp"
HELP = "DDP vs FSDP (fully_shard): bytes per rank for parameters, gradients, optimizer state; step time; same losses"
CLAIM = (
    "FSDP holds about 1/N of DDP's bytes per rank for parameters, gradients and optimizer state, and follows "
    "the same loss trajectory"
)

SHAPE = (1, 4, 8)  # 32 input features
SEED = 543
_MODES = ("ddp", "fsdp")
PARTS = HELD_PARTS
_SHARD_SLACK = 1.1  # shards are cut along rows: a layer whose rows do not divide by N leaves one rank a little more


class RankRun(TypedDict):
    losses: list[float]  # per step
    times: list[float]  # seconds per step
    bytes: dict[str, int]  # held after the last step: params, grads, optimizer


class Trained(TypedDict):
    """A mode's run, as rank 0 returns it."""

    ranks: list[RankRun]
    largest_layer_bytes: int  # one layer's parameters, unsharded: what FSDP gathers while it runs


class ModeSummary(TypedDict):
    mode: str
    bytes_per_rank: list[dict[str, int]]  # each rank's params, grads, optimizer, and their total
    max_rank_bytes: dict[str, int]  # the busiest rank's, per part
    losses: list[float]  # per step, mean over the ranks
    step_s: float  # median step of the slowest rank, warm-up left out
    largest_layer_bytes: int


class _Measured(TypedDict):
    lab: str
    processes: int
    width: int
    layers: int
    steps: int
    global_batch: int
    tolerance: float
    api: str
    modes: dict[str, ModeSummary]  # ddp, fsdp
    loss_diff: float  # the largest |loss difference| of a step
    ratio: dict[str, float]  # FSDP's bytes / DDP's, busiest rank, per part


class Result(_Measured, LabResult):
    pass


@dataclass(frozen=True, kw_only=True)
class Options(LabLaunchOptions):
    nproc_per_node: int = option_like(LaunchOptions, "nproc_per_node", 2, "processes to start")
    width: int = option(512, "MLP width", role=Role.WORKLOAD)
    layers: int = option(4, "Linear layers, at least 2", role=Role.WORKLOAD)
    steps: int = option(8, "Adam steps", role=Role.TRAINING)
    warmup: int = option(2, "first steps left out of step times", role=Role.MEASUREMENT)
    batch_size: int = option_like(TrainConfig, "batch_size", 64, "GLOBAL batch")
    lr: float = option(1e-3, "Adam learning rate", role=Role.TRAINING)
    tolerance: float = option(1e-5, "max |loss difference| allowed", role=Role.MEASUREMENT, low=0)

    def check(self) -> None:
        if self.nproc_per_node < 2:
            raise ConfigError("nproc_per_node must be >= 2: one process has nothing to shard")
        at_least(2, layers=self.layers)
        at_least(1, width=self.width, steps=self.steps)
        at_least(0, warmup=self.warmup)
        split_evenly(self.batch_size, [self.nproc_per_node])


def _wrap(model: nn.Sequential, mode: str) -> nn.Module:
    if mode == "ddp":
        return idist.auto_model(model, gradient_as_bucket_view=True)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)  # one unit per layer: only the running layer's parameters are gathered at a time
    return cast(nn.Module, fully_shard(model))  # the model itself, its class now an FSDP subclass of its own


def train(local_rank: int, mode: str, width: int, layers: int, steps: int, batch_size: int, lr: float) -> Trained:
    """Train with ``mode`` (ddp | fsdp); rank 0 returns every rank's losses, step times and bytes held."""
    rank, world, device = idist.get_rank(), idist.get_world_size(), idist.device()
    seed_everything(SEED)
    model = mlp(SHAPE[0] * SHAPE[1] * SHAPE[2], 10, hidden=(width,) * (layers - 1)).to(device)
    largest_layer = max(local_bytes(m.parameters()) for m in model if isinstance(m, nn.Linear))
    wrapped = _wrap(model, mode)
    optimizer = torch.optim.Adam(wrapped.parameters(), lr=lr)
    data = synthetic_images(steps * batch_size, 10, SHAPE, SEED).tensors
    losses, times = [], []
    for step in range(steps):
        start = now(device)
        x, y = batch_share(data, step, batch_size, rank, world, device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(wrapped(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        times.append(now(device) - start)
    held = held_bytes(wrapped, optimizer)  # after the last step, as they stay until the next one
    ranks: list[RankRun] = gather_objects(RankRun(losses=losses, times=times, bytes=held))
    return {"ranks": ranks, "largest_layer_bytes": largest_layer}


def _summary(mode: str, run: Trained, steps: int, warmup: int) -> ModeSummary:
    ranks = run["ranks"]
    per_rank = [{**r["bytes"], "total": sum(r["bytes"].values())} for r in ranks]
    return {
        "mode": mode,
        "bytes_per_rank": per_rank,
        "max_rank_bytes": {part: max(r[part] for r in per_rank) for part in (*PARTS, "total")},
        "losses": [statistics.fmean(r["losses"][k] for r in ranks) for k in range(steps)],
        "step_s": median_step_s([r["times"] for r in ranks], warmup),
        "largest_layer_bytes": run["largest_layer_bytes"],
    }


def run(**options: Any) -> Result:
    """Train the MLP with DDP, then with FSDP, on ``nproc_per_node`` ranks and compare what each rank holds.
    ``options``: the fields of :class:`Options`."""
    opts = Options(**options)
    n = opts.nproc_per_node
    modes = {
        mode: _summary(
            mode,
            launch_lab(train, opts, n, mode, opts.width, opts.layers, opts.steps, opts.batch_size, opts.lr),
            opts.steps,
            opts.warmup,
        )
        for mode in _MODES
    }
    ddp, fsdp = modes["ddp"], modes["fsdp"]
    result: _Measured = {
        "lab": NAME,
        "processes": n,
        "width": opts.width,
        "layers": opts.layers,
        "steps": opts.steps,
        "global_batch": opts.batch_size,
        "tolerance": opts.tolerance,
        "api": "torch.distributed.fsdp.fully_shard",
        "modes": modes,
        "loss_diff": max(abs(a - b) for a, b in zip(ddp["losses"], fsdp["losses"])),
        "ratio": {part: fsdp["max_rank_bytes"][part] / ddp["max_rank_bytes"][part] for part in (*PARTS, "total")},
    }
    return {**result, "checks": _checks(result)}


def _checks(result: _Measured) -> list[Check]:
    n, ddp, fsdp = result["processes"], result["modes"]["ddp"], result["modes"]["fsdp"]
    shards_add_up = all(
        sum(r[part] for r in fsdp["bytes_per_rank"]) == ddp["max_rank_bytes"][part] for part in ("params", "grads")
    )
    about_1_over_n = all(result["ratio"][part] <= _SHARD_SLACK / n for part in PARTS)
    ratios = ", ".join(f"{part} {result['ratio'][part]:.3f}" for part in (*PARTS, "total"))
    return [
        check(
            f"FSDP holds about 1/{n} of DDP's bytes per rank for parameters, gradients and optimizer state",
            about_1_over_n and shards_add_up,
            f"FSDP / DDP, busiest rank: {ratios} (1/{n} = {1 / n:.3f}); parameter and gradient shards add up to "
            f"the model: {shards_add_up}",
        ),
        check(
            "DDP and FSDP follow the same loss trajectory",
            result["loss_diff"] <= result["tolerance"],
            f"max |dloss| {result['loss_diff']:.1e} over {result['steps']} steps (tolerance {result['tolerance']:g})",
        ),
    ]


def format_result(result: Result) -> str:
    rows = []
    for mode, m in result["modes"].items():
        for rank, b in enumerate(m["bytes_per_rank"]):
            rows.append([mode, rank, *(kib(b[part]) for part in (*PARTS, "total")), f"{m['step_s'] * 1e3:.2f}"])
    ddp, fsdp = result["modes"]["ddp"], result["modes"]["fsdp"]
    return "\n".join(
        [
            f"{NAME}: MLP of {result['layers']} Linear layers, width {result['width']}, Adam, {result['steps']} steps, "
            f"global batch {result['global_batch']}, {result['processes']} processes; FSDP = {result['api']}",
            format_table(["mode", "rank", "params", "grads", "optimizer", "total", "step ms"], rows),
            f"held between steps; while a layer runs FSDP also holds its gathered parameters "
            f"(largest layer {kib(fsdp['largest_layer_bytes'])})",
            f"losses: DDP {ddp['losses'][0]:.4f} -> {ddp['losses'][-1]:.4f}, FSDP {fsdp['losses'][0]:.4f} -> "
            f"{fsdp['losses'][-1]:.4f}",
            format_checks(result),
        ]
    )
