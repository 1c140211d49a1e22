"""Bucket size: how DDP's gradient buckets decide how much of the all-reduce hides behind backward compute.

What it teaches: DDP does not wait for the whole backward pass to reduce gradients. It packs them into buckets of
about ``--bucket-cap-mb`` MiB (in reverse layer order, the order backward produces them) and starts a bucket's
all-reduce as soon as its last gradient is ready, while backward goes on computing the earlier layers' gradients.
With one big bucket nothing can start before the last gradient exists: all communication is *exposed* (overlap 0).
A bucket closes once it holds at least the cap, and a tensor is never split: a model whose gradients sit mostly in
one big tensor (the ``mlp``: 3 MB of its 3.3 MB in the first layer) stays one bucket at any cap below that tensor's
size, which is why the default workload is the ``cnn``, whose gradients are spread over its layers.
Smaller buckets start earlier and overlap more, but each is one more collective call with its own latency, and on
a CPU the all-reduce competes with backward for the same cores. The lab trains the same workload with several
bucket sizes through the real trainer and reads the communication timing hook's figures
(:mod:`ignite_ddl.measure.comm`): buckets per step, bytes per step, communication, exposed communication,
overlap and step time.

The checked claims are the ones that must hold on any machine: the bytes per step are the model's gradient bytes
whatever the bucket size, smaller buckets mean more all-reduce calls, a single bucket overlaps nothing, and several
buckets overlap some. Which size is *fastest* depends on the machine: see the table (and sweep ``bucket_cap_mb``
with repeats for a verdict with confidence intervals).

Example:
    >>> Options(caps=[25, 0.01]).caps  # MiB, as floats
    (25.0, 0.01)
    >>> run(nproc_per_node=1)
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: bucket-size needs at least 2 processes: one process has no gradients to ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from ignite_ddl.core.config import LaunchOptions, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import Role, option, option_like
from ignite_ddl.core.text import format_table
from ignite_ddl.labs import LabLaunchOptions, LabResult, at_least, check, format_checks
from ignite_ddl.launcher.backends import device_of

__all__ = ["CLAIM", "HELP", "NAME", "BucketRow", "Options", "Result", "format_result", "run"]

NAME = "bucket-size"
HELP = "train one workload with several DDP bucket sizes: buckets, exposed communication and overlap per size"
CLAIM = (
    "whatever the bucket size, each step all-reduces the model's gradient bytes; smaller buckets mean more "
    "all-reduce calls, and only several buckets overlap backward compute"
)


class BucketRow(TypedDict):
    """One bucket size's run: the trainer's communication figures (timed: DDP on 2 or more processes), mean over
    the ranks."""

    cap_mb: float  # DDP's bucket_cap_mb
    buckets_per_step: float
    bytes_per_step: float  # gradient bytes all-reduced per step (rank 0)
    comm_ms: float
    exposed_ms: float
    overlap: float
    step_ms: float  # median step
    samples_per_s: float


class Result(LabResult):
    model: str
    world_size: int
    rows: list[BucketRow]  # one per bucket size, smallest first


@dataclass(frozen=True, kw_only=True)
class Options(LabLaunchOptions):
    nproc_per_node: int = option_like(LaunchOptions, "nproc_per_node", 2, "processes to start")
    caps: tuple[float, ...] = option((0.01, 0.04, 25.0), "bucket sizes in MiB to compare", role=Role.LAYOUT)
    model: str = option("cnn", "model to train (cnn: 119 kB of gradients in 6 tensors)", role=Role.WORKLOAD)
    batch_size: int = option_like(TrainConfig, "batch_size", 128, "global batch")
    train_size: int = option(4096, "synthetic training samples", role=Role.TRAINING)

    def check(self) -> None:
        if self.nproc_per_node < 2:
            raise ConfigError("bucket-size needs at least 2 processes: one process has no gradients to all-reduce")
        if device_of(self.backend) == "xla":
            raise ConfigError("bucket-size measures DDP's buckets; on XLA gradients are reduced by the compiled graph")
        if not self.caps or any(not math.isfinite(c) or c <= 0 for c in self.caps):
            raise ConfigError(f"caps: bucket sizes must be positive MiB, got {self.caps}")
        at_least(1, batch_size=self.batch_size, train_size=self.train_size)


def _train(opts: Options, cap: float) -> BucketRow:
    from ignite_ddl.trainer.run import train  # imports torch and the trainer: only when the lab runs

    config = TrainConfig(
        backend=opts.backend,
        nproc_per_node=opts.nproc_per_node,
        model=opts.model,
        batch_size=opts.batch_size,
        train_size=opts.train_size,
        val_size=128,
        epochs=1,
        bucket_cap_mb=cap,
        checkpoints=False,
        best_model=False,
        progress=False,
        measure_flops=False,
        output_dir=str(Path(opts.output_dir) / f"bucket_{cap:g}MiB"),
        overwrite=True,
    )
    steps = train(config)["steps"]
    ranks = steps["ranks"]

    def mean(key: str) -> float:
        return sum(r[key] for r in ranks) / len(ranks)

    return {
        "cap_mb": cap,
        "buckets_per_step": mean("buckets_per_step"),
        "bytes_per_step": ranks[0]["comm_bytes_per_step"],
        "comm_ms": 1e3 * mean("comm_s_mean"),
        "exposed_ms": 1e3 * mean("exposed_comm_s_mean"),
        "overlap": steps["global"]["overlap"],
        "step_ms": 1e3 * steps["global"]["step_s_p50"],
        "samples_per_s": steps["global"]["samples_per_s"],
    }


def run(**options: Any) -> Result:
    """Train the workload once per bucket size, smallest first. ``options``: the fields of :class:`Options`."""
    opts = Options(**options)
    rows = [_train(opts, cap) for cap in sorted(set(opts.caps))]
    fewest, most = rows[-1], rows[0]
    same_bytes = len({r["bytes_per_step"] for r in rows}) == 1
    checks = [
        check(
            "every bucket size all-reduces the same bytes per step (the model's gradients)",
            same_bytes,
            ", ".join(f"{r['cap_mb']:g} MiB: {r['bytes_per_step'] / 1e6:.3f} MB" for r in rows),
        ),
        check(
            "smaller buckets mean more all-reduce calls per step",
            all(a["buckets_per_step"] >= b["buckets_per_step"] for a, b in zip(rows, rows[1:]))
            and most["buckets_per_step"] > fewest["buckets_per_step"],
            ", ".join(f"{r['cap_mb']:g} MiB: {r['buckets_per_step']:.0f}" for r in rows),
        ),
        check(
            "with a single bucket nothing overlaps: its all-reduce starts when the last gradient is ready",
            fewest["buckets_per_step"] != 1 or fewest["overlap"] == 0,
            f"{fewest['cap_mb']:g} MiB: {fewest['buckets_per_step']:.0f} bucket(s), overlap "
            f"{100 * fewest['overlap']:.0f} %",
        ),
        check(
            "with several buckets part of the communication overlaps backward compute",
            most["buckets_per_step"] < 2 or most["overlap"] > 0,
            f"{most['cap_mb']:g} MiB: {most['buckets_per_step']:.0f} buckets, overlap {100 * most['overlap']:.0f} %",
        ),
    ]
    return {"model": opts.model, "world_size": opts.nproc_per_node, "rows": rows, "checks": checks}


def format_result(result: Result) -> str:
    header = ("bucket MiB", "buckets", "MB/step", "comm ms", "exposed ms", "overlap %", "step p50 ms", "samples/s")
    rows = [
        (
            f"{r['cap_mb']:g}",
            f"{r['buckets_per_step']:.0f}",
            f"{r['bytes_per_step'] / 1e6:.3f}",
            f"{r['comm_ms']:.2f}",
            f"{r['exposed_ms']:.2f}",
            f"{100 * r['overlap']:.0f}",
            f"{r['step_ms']:.2f}",
            f"{r['samples_per_s']:.0f}",
        )
        for r in result["rows"]
    ]
    title = f"DDP bucket size, {result['model']} on {result['world_size']} processes (one run per size)"
    return f"{title}\n{format_table(header, rows)}\n{format_checks(result)}"
