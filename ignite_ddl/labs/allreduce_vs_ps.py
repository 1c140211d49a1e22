"""allreduce-vs-ps: two ways to aggregate gradients, written with ``torch.distributed`` primitives and compared.

What it teaches: in data-parallel SGD every worker computes the gradient of its shard of the global batch, and the
mean of those gradients is the gradient of the whole batch. A *parameter server* holds the parameters: workers pull
them, compute, and push their gradients; the server averages, updates and serves the new parameters. It is simple
and elastic, but every byte goes through the server's link, whose traffic grows with the number of workers N. With
*all-reduce* every worker keeps a replica and the workers average their gradients among themselves (DDP does this);
a ring all-reduce makes each worker send and receive 2(N-1)/N times the gradient size, whatever N.

Here rank 0 is a pure server, not a worker: the parameter-server runs use N + 1 processes for N workers, all-reduce
runs N. Both schemes give the same plain-SGD trajectory for the same data and seed (checked: losses and final
weights). Parameter-server bytes are counted exactly at every send and receive (flat float32 tensors, one message
per worker and direction per step). All-reduce bytes on the wire cannot be observed with gloo: the lab counts the
payload each rank hands to ``all_reduce`` (one gradient per step) and reports the ring algorithm's 2(N-1)/N times
it, labelled as theoretical. Step times are the slowest rank's, median over the steps after warm-up.

Example:
    ignite-ddl allreduce-vs-ps --workers 2,4 --sizes 64,512

or from Python: ``allreduce_vs_ps.run(workers=[2, 4], sizes=[64, 512])``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, TypedDict

import ignite.distributed as idist
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters
from typing_extensions import NotRequired  # typing's from Python 3.11

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import Role, option, option_like
from ignite_ddl.core.text import format_table, kib
from ignite_ddl.labs import Check, LabLaunchOptions, LabResult, at_least, check, format_checks, launch_lab, split_evenly
from ignite_ddl.labs._steps import batch_share, median_step_s
from ignite_ddl.labs._weights import gradients
from ignite_ddl.measure.clock import now
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.trainer.data import synthetic_images
from ignite_ddl.trainer.engines import seed_everything
from ignite_ddl.trainer.models import mlp

__all__ = [
    "CLAIM",
    "HELP",
    "NAME",
    "SEED",
    "SHAPE",
    "Options",
    "Pair",
    "Replica",
    "Result",
    "SchemeRow",
    "Traffic",
    "TrafficCounts",
    "format_result",
    "run",
    "train",
]

NAME = "allreduce-vs-ps"
HELP = "gradient all-reduce vs a parameter server: same SGD trajectory; step time and bytes through the busiest rank"
CLAIM = (
    "a parameter server and all-reduce take the same SGD steps; the server's traffic grows with the workers, an "
    "all-reduce rank's stays below 2x the model"
)

SHAPE = (1, 4, 8)  # 32 input features
SEED = 543
_SCHEMES = ("ps", "all-reduce")


class TrafficCounts(TypedDict):
    """Bytes a rank sent and received point-to-point, and handed to all_reduce."""

    sent: int
    received: int
    all_reduced: int


class _RankRun(TrafficCounts):
    losses: list[float | None]  # per step (None on the parameter server: it computes no loss)
    times: list[float]  # seconds per step


class _WidthRun(TypedDict):  # what rank 0 returns for one width
    ranks: list[_RankRun]
    params: int
    model_bytes: int
    moved: float  # the largest change training made to a weight
    final: list[float]  # the final weights, flat


class SchemeRow(TypedDict):
    """One scheme, worker count and width: its step time and the bytes through its busiest rank."""

    scheme: str  # ps or all-reduce
    workers: int
    processes: int
    width: int
    params: int
    model_bytes: int
    moved: float
    final: NotRequired[list[float]]  # the final weights, until the two schemes are compared
    losses: list[float]  # per step, mean over the workers
    step_s: float  # median step of the slowest rank, warm-up left out
    busiest_rank: int | None  # the server (0); None with all-reduce: every rank moves the same
    sends_per_step: float
    receives_per_step: float
    bytes_source: str  # counted, or the ring's share of the payload (theory)
    all_reduce_payload_per_step: float


class Pair(TypedDict):
    """The two schemes' trajectories, side by side, for one worker count and width."""

    workers: int
    width: int
    moved: float
    loss_first: float
    loss_last: float
    loss_diff: float  # the largest |loss difference| of a step
    weight_diff: float  # the largest |final weight difference|


class _Measured(TypedDict):
    lab: str
    steps: int
    global_batch: int
    lr: float
    tolerance: float
    server: str
    rows: list[SchemeRow]
    pairs: list[Pair]


class Result(_Measured, LabResult):
    pass


@dataclass(frozen=True, kw_only=True)
class Options(LabLaunchOptions):
    # no nproc_per_node: N workers are N processes with all-reduce, N + 1 with a parameter server
    workers: tuple[int, ...] = option((2, 4), "worker counts, each >= 2", role=Role.LAYOUT)
    sizes: tuple[int, ...] = option((64, 512), "MLP widths: model sizes", role=Role.WORKLOAD)
    steps: int = option(20, "SGD steps", role=Role.TRAINING)
    warmup: int = option(3, "first steps left out of step times", role=Role.MEASUREMENT)
    batch_size: int = option_like(TrainConfig, "batch_size", 64, "GLOBAL batch, split over the workers")
    lr: float = option(0.2, "SGD learning rate", role=Role.TRAINING)
    tolerance: float = option(1e-5, "max |difference| of losses and weights", role=Role.MEASUREMENT, low=0)

    def check(self) -> None:
        if not self.workers or min(self.workers) < 2:
            raise ConfigError("workers: each count must be >= 2 (one worker has nothing to aggregate)")
        at_least(1, sizes=self.sizes, steps=self.steps, batch_size=self.batch_size)
        at_least(0, warmup=self.warmup)
        split_evenly(self.batch_size, self.workers, "workers")


class Traffic:
    """Bytes this rank sends and receives point-to-point, and hands to all_reduce, counted at each call."""

    def __init__(self) -> None:
        self.sent = self.received = self.all_reduced = 0

    def counts(self) -> TrafficCounts:
        return {"sent": self.sent, "received": self.received, "all_reduced": self.all_reduced}

    def isend(self, tensor: torch.Tensor, dst: int) -> dist.Work:
        self.sent += tensor.numel() * tensor.element_size()
        return _started(dist.isend(tensor, dst))

    def irecv(self, tensor: torch.Tensor, src: int) -> dist.Work:
        self.received += tensor.numel() * tensor.element_size()
        return _started(dist.irecv(tensor, src))

    def all_reduce(self, tensor: torch.Tensor) -> None:
        self.all_reduced += tensor.numel() * tensor.element_size()  # the payload: gloo's wire bytes are not seen
        dist.all_reduce(tensor)


def _started(work: dist.Work | None) -> dist.Work:
    if work is None:  # what torch returns to a rank outside the group: every rank of this lab is in it
        raise RuntimeError("this rank is not in the process group")
    return work


def _grads(params: list[nn.Parameter]) -> torch.Tensor:
    return parameters_to_vector(gradients(params))


def _set_grads(params: list[nn.Parameter], flat: torch.Tensor) -> None:
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()


class Replica:
    """One rank's model and optimizer, and the local step of a worker on its shard of each global batch."""

    def __init__(self, width: int, steps: int, batch_size: int, lr: float):
        self.device = idist.device()
        seed_everything(SEED)  # the same initial weights on every rank
        self.model = mlp(SHAPE[0] * SHAPE[1] * SHAPE[2], 10, hidden=(width, width)).to(self.device)
        self.params = list(self.model.parameters())
        self.optimizer = torch.optim.SGD(self.params, lr=lr)
        self.data = synthetic_images(steps * batch_size, 10, SHAPE, SEED).tensors
        self.batch_size = batch_size

    def gradient(self, step: int, worker: int, workers: int) -> tuple[torch.Tensor, float]:
        """Flat gradient of this worker's contiguous share of global batch ``step``, and its loss."""
        x, y = batch_share(self.data, step, self.batch_size, worker, workers, self.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        return _grads(self.params), loss.item()

    def update(self, mean_gradient: torch.Tensor) -> None:
        _set_grads(self.params, mean_gradient)
        self.optimizer.step()

    def weights(self) -> torch.Tensor:
        return parameters_to_vector(self.params).detach()


def _ps_step(replica: Replica, traffic: Traffic, step: int) -> float | None:
    """One step with rank 0 as the server: pull parameters, compute, push gradients, average and update."""
    rank, workers = idist.get_rank(), idist.get_world_size() - 1
    flat = replica.weights()
    if rank == 0:
        for work in [traffic.isend(flat, w) for w in range(1, workers + 1)]:
            work.wait()
        grads = [torch.empty_like(flat) for _ in range(workers)]
        for work in [traffic.irecv(g, w) for w, g in enumerate(grads, 1)]:
            work.wait()
        replica.update(torch.stack(grads).mean(0))
        return None
    traffic.irecv(flat, 0).wait()
    vector_to_parameters(flat, replica.params)
    grad, loss = replica.gradient(step, rank - 1, workers)
    traffic.isend(grad, 0).wait()
    return loss


def _all_reduce_step(replica: Replica, traffic: Traffic, step: int) -> float:
    """One step where every rank is a worker: all-reduce the gradients and update the own replica."""
    workers = idist.get_world_size()
    grad, loss = replica.gradient(step, idist.get_rank(), workers)
    traffic.all_reduce(grad)
    replica.update(grad / workers)
    return loss


def train(
    local_rank: int, scheme: str, widths: list[int], steps: int, batch_size: int, lr: float
) -> dict[int, _WidthRun]:
    """Train with ``scheme`` once per width; rank 0 returns, per width, every rank's losses, step times and bytes."""
    step_fn = _ps_step if scheme == "ps" else _all_reduce_step
    out: dict[int, _WidthRun] = {}
    for width in widths:
        replica, traffic = Replica(width, steps, batch_size, lr), Traffic()
        initial = replica.weights().clone()
        losses: list[float | None] = []
        times: list[float] = []
        for step in range(steps):
            start = now(replica.device)
            losses.append(step_fn(replica, traffic, step))
            times.append(now(replica.device) - start)
        ranks: list[_RankRun] = gather_objects({"losses": losses, "times": times, **traffic.counts()})
        final = replica.weights()
        out[width] = {
            "ranks": ranks,
            "params": final.numel(),
            "model_bytes": final.numel() * final.element_size(),
            "moved": (final - initial).abs().max().item(),
            "final": final.cpu().tolist(),  # a list of floats: plain data crosses back to the parent process
        }
    return out


def _summary(scheme: str, workers: int, width: int, run: _WidthRun, steps: int, warmup: int) -> SchemeRow:
    """One run's figures: mean loss over the workers per step, slowest rank's median step, bytes per step."""
    ranks = run["ranks"]
    worker_ranks = ranks[1:] if scheme == "ps" else ranks
    if scheme == "ps":  # counted at every send and receive
        busiest = max(range(len(ranks)), key=lambda i: ranks[i]["sent"] + ranks[i]["received"])
        sends, receives = ranks[busiest]["sent"] / steps, ranks[busiest]["received"] / steps
        source = "counted"
    else:  # every rank moves the same; the ring algorithm's share of the payload, as no byte on the wire is seen
        busiest = None
        sends = receives = 2 * (workers - 1) / workers * max(r["all_reduced"] for r in ranks) / steps
        source = "2(N-1)/N x payload (theory)"
    return {
        "scheme": scheme,
        "workers": workers,
        "processes": len(ranks),
        "width": width,
        "params": run["params"],
        "model_bytes": run["model_bytes"],
        "moved": run["moved"],
        "final": run["final"],
        "losses": [statistics.fmean(_worker_losses(worker_ranks, k)) for k in range(steps)],
        "step_s": median_step_s([r["times"] for r in ranks], warmup),
        "busiest_rank": busiest,
        "sends_per_step": sends,
        "receives_per_step": receives,
        "bytes_source": source,
        "all_reduce_payload_per_step": max(r["all_reduced"] for r in ranks) / steps,
    }


def _worker_losses(ranks: list[_RankRun], step: int) -> list[float]:
    return [loss for r in ranks if (loss := r["losses"][step]) is not None]


def _compare(ps: SchemeRow, ar: SchemeRow) -> Pair:
    """How far apart the two schemes' trajectories end (takes the final weights out of both rows)."""
    ps_final, ar_final = torch.tensor(ps.pop("final")), torch.tensor(ar.pop("final"))
    return {
        "workers": ps["workers"],
        "width": ps["width"],
        "moved": ar["moved"],
        "loss_first": ar["losses"][0],
        "loss_last": ar["losses"][-1],
        "loss_diff": max(abs(a - b) for a, b in zip(ps["losses"], ar["losses"])),
        "weight_diff": (ps_final - ar_final).abs().max().item(),
    }


def run(**options: Any) -> Result:
    """Train with both schemes for every worker count and width. ``options``: the fields of :class:`Options`."""
    opts = Options(**options)
    widths = sorted(set(opts.sizes))
    rows: list[SchemeRow] = []
    pairs: list[Pair] = []
    for workers in sorted(set(opts.workers)):
        got: dict[str, dict[int, SchemeRow]] = {}
        for scheme in _SCHEMES:
            procs = workers + 1 if scheme == "ps" else workers  # the server is a process of its own
            runs = launch_lab(train, opts, procs, scheme, widths, opts.steps, opts.batch_size, opts.lr)
            got[scheme] = {w: _summary(scheme, workers, w, runs[w], opts.steps, opts.warmup) for w in widths}
        for w in widths:
            rows += [got["ps"][w], got["all-reduce"][w]]
            pairs.append(_compare(got["ps"][w], got["all-reduce"][w]))
    result: _Measured = {
        "lab": NAME,
        "steps": opts.steps,
        "global_batch": opts.batch_size,
        "lr": opts.lr,
        "tolerance": opts.tolerance,
        "server": "rank 0 is a pure server (N workers: N + 1 processes)",
        "rows": rows,
        "pairs": pairs,
    }
    return {**result, "checks": _checks(result)}


def _checks(result: _Measured) -> list[Check]:
    tol, rows, pairs = result["tolerance"], result["rows"], result["pairs"]
    ps = [r for r in rows if r["scheme"] == "ps"]
    ar = [r for r in rows if r["scheme"] == "all-reduce"]
    worst = max(pairs, key=lambda p: max(p["loss_diff"], p["weight_diff"]))
    exact_ps = all(r["sends_per_step"] == r["receives_per_step"] == r["workers"] * r["model_bytes"] for r in ps)
    grows = all(
        a["sends_per_step"] < b["sends_per_step"]
        for a in ps
        for b in ps
        if a["width"] == b["width"] and a["workers"] < b["workers"]
    )
    one_payload = all(r["all_reduce_payload_per_step"] == r["model_bytes"] for r in ar)
    return [
        check(
            "parameter server and all-reduce follow the same SGD trajectory (losses and final weights)",
            all(p["loss_diff"] <= tol and p["weight_diff"] <= tol and p["moved"] > 100 * tol for p in pairs),
            f"worst: {worst['workers']} workers, width {worst['width']}: max |dloss| {worst['loss_diff']:.1e}, "
            f"max |dw| {worst['weight_diff']:.1e} (tolerance {tol:g}; each run moved some weight by "
            f"{min(p['moved'] for p in pairs):.1e} or more)",
        ),
        check(
            "the server's traffic grows with the workers: N x model size each way per step (counted)",
            exact_ps and grows,
            ", ".join(f"N={r['workers']} width {r['width']}: {kib(r['sends_per_step'])}" for r in ps),
        ),
        check(
            "all-reduce: each rank hands one model-size gradient per step to all_reduce, whatever N (counted); "
            "a ring moves 2(N-1)/N x that each way (theoretical, below 2x model size)",
            one_payload and all(r["sends_per_step"] < 2 * r["model_bytes"] for r in ar),
            ", ".join(f"N={r['workers']} width {r['width']}: {kib(r['sends_per_step'])}" for r in ar),
        ),
    ]


def format_result(result: Result) -> str:
    rows = [
        [
            r["scheme"],
            r["workers"],
            r["processes"],
            r["width"],
            r["params"],
            kib(r["model_bytes"]),
            f"{r['step_s'] * 1e3:.2f}",
            "server (0)" if r["busiest_rank"] == 0 else "each",
            kib(r["sends_per_step"]),
            kib(r["receives_per_step"]),
            r["bytes_source"],
        ]
        for r in result["rows"]
    ]
    pairs = [
        [
            p["workers"],
            p["width"],
            f"{p['loss_first']:.4f} -> {p['loss_last']:.4f}",
            f"{p['loss_diff']:.1e}",
            f"{p['weight_diff']:.1e}",
        ]
        for p in result["pairs"]
    ]
    return "\n".join(
        [
            f"{NAME}: plain SGD, {result['steps']} steps, global batch {result['global_batch']}, "
            f"MLP of 3 Linear layers (width below); {result['server']}",
            format_table(
                [
                    "scheme",
                    "workers",
                    "procs",
                    "width",
                    "params",
                    "model",
                    "step ms",
                    "busiest rank",
                    "sends/step",
                    "receives/step",
                    "bytes",
                ],
                rows,
            ),
            "",
            format_table(["workers", "width", "loss (all-reduce)", "max|dloss| PS-AR", "max|dw| PS-AR"], pairs),
            format_checks(result),
        ]
    )
