"""ddp-sgd: N-process DDP takes exactly the SGD steps of one process with the same global batch.

What it teaches: mini-batch SGD moves the weights by the mean of the per-sample gradients of a batch B. Data
parallelism splits B into N local batches and averages the N local gradients (DDP all-reduces them), which is exactly
the gradient of B: N processes with global batch B take the steps of one process with batch B, up to float rounding.
BatchNorm is the known exception: each rank normalises with the statistics of its own local batch, not of B.
SyncBatchNorm computes the statistics over the global batch and restores the equality.

Every run goes the Ignite way (``idist.auto_model`` / ``auto_optim`` / ``auto_dataloader`` and the suite's trainer
step) with plain SGD on unshuffled data, so batch k holds the same samples whatever the number of processes.
On CPU, torch refuses SyncBatchNorm at three levels (DistributedDataParallel's constructor, SyncBatchNorm's
``forward``, and its kernels, which have no CPU implementation); the lab records each refusal and shows the claim
with :class:`GlobalBatchNorm2d`, a stand-in computing what SyncBatchNorm computes with a differentiable all-reduce.
On GPUs it uses the real SyncBatchNorm through ``idist.auto_model(model, sync_bn=True)``.

Example:
    ignite-ddl ddp-sgd --procs 1,2,4 --steps 5

or from Python: ``ddp_sgd.run(procs=[1, 2, 4], steps=5)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import ignite.distributed as idist
import torch
import torch.distributed as dist
from torch import nn
from typing_extensions import NotRequired  # typing's from Python 3.11

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.options import Role, option, option_like
from ignite_ddl.core.text import format_table
from ignite_ddl.labs import Check, LabLaunchOptions, LabResult, at_least, check, format_checks, launch_lab, split_evenly
from ignite_ddl.labs._weights import max_abs_diff, weights
from ignite_ddl.trainer.data import synthetic_images
from ignite_ddl.trainer.engines import create_trainer, seed_everything
from ignite_ddl.trainer.models import small_cnn
from ignite_ddl.trainer.strategies import place_model

__all__ = [
    "CLAIM",
    "HELP",
    "NAME",
    "SEED",
    "GlobalBatchNorm2d",
    "Options",
    "Refusal",
    "Result",
    "RunRow",
    "format_result",
    "run",
    "sync_bn_refusals",
]

NAME = "ddp-sgd"
HELP = "N-process DDP = one-process SGD with the same global batch; BatchNorm breaks it, SyncBatchNorm restores it"
CLAIM = (
    "N-process DDP reaches the weights of one process with the same global batch; BatchNorm breaks the equality "
    "and global-batch statistics restore it"
)

_IMAGE = (3, 16, 16)
SEED = 543


class Refusal(TypedDict):
    by: str  # who refused SyncBatchNorm: DDP, the layer, its kernel
    message: str  # the first sentence of its error


class _SyncBN(TypedDict):
    layer: str  # SyncBatchNorm, or the stand-in written with plain collectives
    refusals: list[Refusal]  # why SyncBatchNorm itself cannot run here (empty: it ran)


class _Variants(TypedDict):  # what rank 0 of a run returns
    moved: float  # the largest change training made to a weight (plain CNN)
    device: str
    sync_bn: _SyncBN | None  # None with one process
    final: NotRequired[dict[str, dict[str, torch.Tensor]]]  # the reference run: each variant's weights
    diff: NotRequired[dict[str, float]]  # the others: each variant's max |weight difference| from the reference


Variant = Literal["plain", "batchnorm", "sync_bn"]


class RunRow(TypedDict):
    """One process count against one process: each variant's max |weight difference|."""

    procs: int
    per_rank_batch: int
    plain: float  # the CNN without BatchNorm
    batchnorm: float  # with BatchNorm: each rank normalises with its own batch's statistics
    sync_bn: float  # with statistics of the global batch
    device: str
    sync_bn_layer: str
    sync_bn_refusals: list[Refusal]


class _Measured(TypedDict):
    lab: str
    steps: int
    global_batch: int
    lr: float
    tolerance: float
    device: str
    torch: str
    weights_moved: float
    runs: list[RunRow]


class Result(_Measured, LabResult):
    pass


@dataclass(frozen=True, kw_only=True)
class Options(LabLaunchOptions):
    # no nproc_per_node: one run per process count of procs
    procs: tuple[int, ...] = option((1, 2, 4), "process counts", role=Role.LAYOUT)
    steps: int = option(5, "SGD steps", role=Role.TRAINING)
    batch_size: int = option_like(TrainConfig, "batch_size", 32, "GLOBAL batch, divisible by every count")
    lr: float = option(0.1, "SGD learning rate", role=Role.TRAINING)
    tolerance: float = option(1e-5, "max |weight difference| allowed", role=Role.MEASUREMENT, low=0)

    def check(self) -> None:
        at_least(1, procs=self.procs, steps=self.steps, batch_size=self.batch_size)
        split_evenly(self.batch_size, self.procs)


class _SumOverRanks(torch.autograd.Function):
    """all_reduce(SUM) with a gradient: every rank's output depends on every rank's input, so the backward pass
    sums the incoming gradients over the ranks too."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class GlobalBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d normalising with the mean and variance of the global batch (all ranks' samples) in training:
    what SyncBatchNorm computes, written with plain collectives so that it also runs on CPU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or idist.get_world_size() == 1:
            return super().forward(x)
        dims, shape = [0, 2, 3], (1, -1, 1, 1)
        count = _SumOverRanks.apply(torch.tensor(float(x.numel() // x.shape[1]), device=x.device))
        mean = _SumOverRanks.apply(x.sum(dims)) / count
        centred = x - mean.view(shape)
        var = _SumOverRanks.apply(centred.pow(2).sum(dims)) / count
        tracked, running_mean, running_var = self.num_batches_tracked, self.running_mean, self.running_var
        if tracked is None or running_mean is None or running_var is None or self.momentum is None:
            raise ValueError("GlobalBatchNorm2d keeps running statistics with a momentum (BatchNorm2d's default)")
        with torch.no_grad():  # running statistics as BatchNorm keeps them: unbiased variance
            tracked.add_(1)
            running_mean.lerp_(mean, self.momentum)
            running_var.lerp_(var * count / (count - 1), self.momentum)
        return centred * torch.rsqrt(var + self.eps).view(shape) * self.weight.view(shape) + self.bias.view(shape)


def _bn_cnn(norm: type[nn.Module] = nn.BatchNorm2d) -> nn.Sequential:
    """A small CNN with a normalisation layer (``norm``) after each convolution."""
    return nn.Sequential(
        nn.Conv2d(_IMAGE[0], 16, 3, padding=1),
        norm(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        norm(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4, 10),
    )


def _first_sentence(error: BaseException) -> str:
    """The first sentence of an exception's message (torch's dispatcher errors run to several paragraphs)."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.split(". ")[0].rstrip(".")


def sync_bn_refusals(ddp_error: BaseException) -> list[Refusal]:
    """Why SyncBatchNorm cannot run on this device: DDP's refusal, then the layer's own and its kernel's."""
    reasons: list[Refusal] = [{"by": "DistributedDataParallel", "message": _first_sentence(ddp_error)}]
    x = torch.randn(4, 2, 3, 3)
    attempts = {
        "SyncBatchNorm.forward": lambda: nn.SyncBatchNorm(2)(x),  # refused before any collective: no rank waits
        "torch.batch_norm_stats": lambda: torch.batch_norm_stats(x, 1e-5),
    }
    for who, attempt in attempts.items():
        try:
            attempt()
        except (ValueError, NotImplementedError, RuntimeError) as e:
            reasons.append({"by": who, "message": _first_sentence(e)})
    return reasons


def _train(model: nn.Module, data: torch.utils.data.Dataset, batch_size: int, lr: float) -> dict[str, torch.Tensor]:
    # No shuffling: the sampler gives rank r samples r, r + N, ..., so batch k holds the same samples for any N.
    loader = idist.auto_dataloader(data, batch_size=batch_size, shuffle=False)
    optimizer = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=lr))
    create_trainer(model, optimizer, nn.CrossEntropyLoss(), idist.device()).run(loader, max_epochs=1)
    return weights(model)


def _train_variants(
    local_rank: int, steps: int, batch_size: int, lr: float, reference: dict[str, dict[str, torch.Tensor]] | None = None
) -> _Variants:
    """Train each model variant for ``steps`` steps on this rank and return the final weights of each.

    Given ``reference`` (the one-process run's weights), it returns each variant's max |weight difference| from
    the reference instead: a few numbers, not whole models, cross back to the parent process.
    """
    data = synthetic_images(steps * batch_size, 10, _IMAGE, SEED)
    seed_everything(SEED)
    model = small_cnn(_IMAGE[0], 10)
    start = weights(model)
    final = {"plain": _train(place_model(model), data, batch_size, lr)}
    seed_everything(SEED)
    final["batchnorm"] = _train(place_model(_bn_cnn()), data, batch_size, lr)
    result: _Variants = {"moved": max_abs_diff(final["plain"], start), "device": idist.device().type, "sync_bn": None}
    if idist.get_world_size() > 1:
        seed_everything(SEED)
        try:
            model = place_model(_bn_cnn(), sync_bn=True)
            result["sync_bn"] = {"layer": "SyncBatchNorm", "refusals": []}
        except ValueError as e:  # DDP refuses SyncBatchNorm in CPU modules
            seed_everything(SEED)
            model = place_model(_bn_cnn(GlobalBatchNorm2d))
            result["sync_bn"] = {"layer": "GlobalBatchNorm2d (stand-in)", "refusals": sync_bn_refusals(e)}
        # Synchronised statistics are those of the global batch: the one-process BatchNorm run is their reference.
        final["sync_bn"] = _train(model, data, batch_size, lr)
    if reference is None:
        return {**result, "final": final}
    ref = {**reference, "sync_bn": reference["batchnorm"]}
    return {**result, "diff": {variant: max_abs_diff(w, ref[variant]) for variant, w in final.items()}}


def run(**options: Any) -> Result:
    """Train one process, then each larger count, and compare their weights. ``options``: the fields of
    :class:`Options`."""
    opts = Options(**options)
    reference: _Variants = launch_lab(_train_variants, opts, 1, opts.steps, opts.batch_size, opts.lr)
    rows: list[RunRow] = []
    for n in sorted(set(opts.procs) - {1}):
        got: _Variants = launch_lab(_train_variants, opts, n, opts.steps, opts.batch_size, opts.lr, reference["final"])
        sync_bn, diff = got["sync_bn"], got["diff"]
        assert sync_bn is not None  # several processes: the global-statistics run was made
        rows.append(
            {
                "procs": n,
                "per_rank_batch": opts.batch_size // n,
                "plain": diff["plain"],
                "batchnorm": diff["batchnorm"],
                "sync_bn": diff["sync_bn"],
                "device": got["device"],
                "sync_bn_layer": sync_bn["layer"],
                "sync_bn_refusals": sync_bn["refusals"],
            }
        )
    result: _Measured = {
        "lab": NAME,
        "steps": opts.steps,
        "global_batch": opts.batch_size,
        "lr": opts.lr,
        "tolerance": opts.tolerance,
        "device": rows[-1]["device"] if rows else reference["device"],
        "torch": torch.__version__,
        "weights_moved": reference["moved"],
        "runs": rows,
    }
    return {**result, "checks": _checks(result)}


def _checks(result: _Measured) -> list[Check]:
    tol, rows = result["tolerance"], result["runs"]
    if not rows:
        return [check("at least one process count above 1 to compare with one process", False, "got only 1")]

    def diffs(variant: Variant) -> str:
        return ", ".join(f"{r['procs']} procs {r[variant]:.1e}" for r in rows)

    moved = result["weights_moved"]
    checks = [
        check(
            "without BatchNorm, N-process DDP reaches the weights of one process with the same global batch",
            all(r["plain"] <= tol for r in rows) and moved > 100 * tol,
            f"max |dw| {diffs('plain')} (tolerance {tol:g}; the steps moved weights by up to {moved:.1e})",
        ),
        check(
            "with BatchNorm the equality breaks (each rank normalises with its own batch's statistics)",
            all(r["batchnorm"] > 10 * tol for r in rows),
            f"max |dw| {diffs('batchnorm')}",
        ),
    ]
    refusals = rows[0]["sync_bn_refusals"]
    if refusals:
        checks.append(
            check(
                f"SyncBatchNorm cannot run on {result['device']} with torch {result['torch']} (refused by torch)",
                True,
                "refused by " + ", ".join(reason["by"] for reason in refusals),
            )
        )
    checks.append(
        check(
            f"statistics of the global batch restore the equality ({rows[0]['sync_bn_layer']})",
            all(r["sync_bn"] <= tol for r in rows),
            f"max |dw| {diffs('sync_bn')}",
        )
    )
    return checks


def format_result(result: Result) -> str:
    rows = [
        [r["procs"], r["per_rank_batch"], f"{r['plain']:.1e}", f"{r['batchnorm']:.1e}", f"{r['sync_bn']:.1e}"]
        for r in result["runs"]
    ]
    lines = [
        f"{NAME}: {result['steps']} plain-SGD steps (lr {result['lr']}), global batch {result['global_batch']}, "
        f"unshuffled {'x'.join(map(str, _IMAGE))} synthetic images; each run compared with 1 process",
        format_table(["procs", "batch/rank", "no BN max|dw|", "BatchNorm max|dw|", "global-stats BN max|dw|"], rows),
    ]
    if result["runs"]:
        lines.append(f"global-stats BN layer: {result['runs'][0]['sync_bn_layer']}")
        refusals = result["runs"][0]["sync_bn_refusals"]
        if refusals:
            lines.append(f"SyncBatchNorm is refused on {result['device']} (torch {result['torch']}):")
            lines += [f"  - {reason['by']}: {reason['message']}" for reason in refusals]
    lines.append(format_checks(result))
    return "\n".join(lines)
