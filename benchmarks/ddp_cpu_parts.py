"""What a DDP step on CPU ranks sharing one machine's cores is made of, against what the step-time model assumes.

The model (``ignite_ddl.predict.steptime``) predicts a configuration of N CPU processes from its one-process twin:
the N ranks' forward and backward together take as long as the twin's (each rank gets cores / N threads and 1 / N of
the batch), the optimizer is each rank's whole, and DDP adds its own copies plus the all-reduces measured alone. This
benchmark measures each of those terms apart on plain MLPs (``--depth`` blocks of ``--widths``, Adam, a global batch
of ``--batch``), so that what the model misses is seen term by term:

- **twin**: one process with every core's thread, the whole batch (what a sweep's first round measures);
- **layout, no communication**: N processes, cores / N threads each, 1 / N of the batch each, the same model, no
  collective at all (the compute a rank of the N-process run does, beside the others);
- **DDP**: the same N processes with the model wrapped in ``DistributedDataParallel`` (gloo);
- **all-reduce alone**: one all-reduce of the gradients' bytes on N idle processes (what the link is fitted to).

Each term is the median step of ``--steps`` steps after ``--warmup``; a rank's figure is the slowest rank's. Rounds
alternate the sides ``--rounds`` times; the table gives each term's median over rounds with its range.

Usage: python benchmarks/ddp_cpu_parts.py [--widths 512,1024,2048] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
import torch
import torch.distributed as dist
from bench_common import print_machine
from torch import nn

from ignite_ddl.core.environment import cpu_cores, cpu_name, versions
from ignite_ddl.launcher.settings import LaunchSettings
from ignite_ddl.launcher.spawn import launch
from ignite_ddl.measure.comm import time_allreduce
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.predict.projection.inputs import probe_grad_bytes, probe_mlp


def median_step(model: nn.Module, width: int, batch: int, steps: int, warmup: int) -> float:
    """Median seconds of a training step (forward, backward, Adam) on a fixed random batch."""
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))
    seconds = []
    for i in range(warmup + steps):
        began = time.perf_counter()
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if i >= warmup:
            seconds.append(time.perf_counter() - began)
    return statistics.median(seconds)


def _rank(local_rank: int, width: int, depth: int, batch: int, steps: int, warmup: int, ddp: bool) -> list[float]:
    """Every rank's median step (rank order)."""
    model = probe_mlp(width, depth)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model)
    dist.barrier()
    return gather_objects(median_step(model, width, batch, steps, warmup))


def _alone(local_rank: int, nbytes: int) -> list[float]:
    """Every rank's median all-reduce of ``nbytes`` in processes that did nothing else, as the plan's link probe."""
    return gather_objects(time_allreduce(nbytes, torch.float32, torch.device("cpu")))


def one_round(width: int, args: argparse.Namespace) -> dict[str, float]:
    cores, n = cpu_cores(), args.nproc
    torch.set_num_threads(cores)
    twin = median_step(probe_mlp(width, args.depth), width, args.batch, args.steps, args.warmup)
    settings = LaunchSettings(backend="gloo", nproc_per_node=n, threads=max(1, cores // n))
    per_rank = args.batch // n
    plain = launch(_rank, settings, width, args.depth, per_rank, args.steps, args.warmup, False)
    ddp = launch(_rank, settings, width, args.depth, per_rank, args.steps, args.warmup, True)
    alone = launch(_alone, settings, probe_grad_bytes(width, args.depth))
    return {
        "twin_ms": 1e3 * twin,
        "layout_no_comm_ms": 1e3 * max(plain),
        "ddp_ms": 1e3 * max(ddp),
        "allreduce_alone_ms": 1e3 * statistics.fmean(alone),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="512,1024,2048", help="comma-separated MLP widths")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32, help="the global batch")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",")]
    print_machine()
    rounds: dict[int, list[dict[str, float]]] = {w: [] for w in widths}
    for _ in range(args.rounds):
        for width in widths:
            rounds[width].append(one_round(width, args))
    rows = []
    print(
        f"\n{args.nproc} gloo processes vs one, MLP of {args.depth} blocks, global batch {args.batch}, Adam; "
        f"ms a step, median over {args.rounds} rounds (range)"
    )
    print(
        f"{'grads MiB':>9s} {'twin':>18s} {'layout, no comm':>18s} {'DDP':>18s} {'all-reduce alone':>18s} "
        f"{'no comm / twin':>14s} {'DDP - no comm':>13s}"
    )
    for width in widths:
        grads = probe_grad_bytes(width, args.depth)
        med = {k: statistics.median(r[k] for r in rounds[width]) for k in rounds[width][0]}
        span = {k: (min(r[k] for r in rounds[width]), max(r[k] for r in rounds[width])) for k in med}
        row = {"width": width, "grad_bytes": grads, "median": med, "range": span, "rounds": rounds[width]}
        rows.append(row)
        shown = " ".join(f"{med[k]:7.1f} ({span[k][0]:.1f}-{span[k][1]:.1f})".rjust(18) for k in med)
        print(
            f"{grads / 2**20:9.1f} {shown} {med['layout_no_comm_ms'] / med['twin_ms']:14.2f} "
            f"{med['ddp_ms'] - med['layout_no_comm_ms']:13.1f}"
        )
    report = {
        "benchmark": "ddp_cpu_parts",
        "machine": {"cpu": cpu_name(), "cores": cpu_cores(), **versions()},
        "load": os.getloadavg(),
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "rows": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
