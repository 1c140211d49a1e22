"""dp-vs-ddp: ``nn.DataParallel`` against DistributedDataParallel.

What it teaches: DataParallel is one line (``nn.DataParallel(model)``) and one process driving all GPUs of one machine
with threads: at every step it scatters the inputs, replicates the model onto every GPU and gathers the outputs on
GPU 0, which therefore holds more memory than the others, and the threads contend for Python's GIL. DDP runs one
process per device: the model is replicated once (rank 0's weights are broadcast when it is wrapped) and during
backward the gradients are all-reduced in buckets, each launched as soon as its gradients are ready, overlapping
the rest of the backward pass. No GPU is favoured, it spans machines and it is usually faster, at the price of more
code (the process group and a sampler; ``idist`` writes those). Advice: use DDP.

With two or more CUDA GPUs the lab measures both on the same model and global batch: peak memory per GPU
(``torch.cuda.max_memory_allocated`` of each device) and samples per second. With fewer it says so, measures
nothing of the sort, and shows what runs on CPU: DataParallel without GPUs is a pass-through wrapper, while DDP over
gloo runs one process per rank, broadcasts rank 0's weights at wrap time, all-reduces gradients in buckets during
backward (timed with a communication hook) and leaves every rank the same averaged gradient.

Example:
    ignite-ddl dp-vs-ddp

or from Python: ``dp_vs_ddp.run(backend="gloo")``.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, cast

import ignite.distributed as idist
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils import parameters_to_vector
from typing_extensions import NotRequired  # typing's from Python 3.11

from ignite_ddl.core.config import LaunchOptions, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import Role, option, option_like
from ignite_ddl.core.text import format_table
from ignite_ddl.labs import Check, LabLaunchOptions, LabResult, at_least, check, format_checks, lab_logs, launch_lab
from ignite_ddl.labs._weights import gradients
from ignite_ddl.launcher.settings import LaunchSettings
from ignite_ddl.launcher.spawn import launch
from ignite_ddl.measure.clock import now
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.trainer.data import synthetic_images
from ignite_ddl.trainer.engines import seed_everything
from ignite_ddl.trainer.models import build_model, mlp

__all__ = [
    "CLAIM",
    "HELP",
    "NAME",
    "SEED",
    "SHAPE",
    "DDPRank",
    "GPUMeasured",
    "GPUNotMeasured",
    "Options",
    "Result",
    "Structure",
    "format_result",
    "run",
]

NAME = "dp-vs-ddp"
HELP = "DataParallel vs DDP: peak memory per GPU and throughput on >= 2 GPUs; on CPU, what each one really does"
CLAIM = (
    "DDP runs one process per rank, replicates the model once and all-reduces gradients in buckets during "
    "backward; on 2+ GPUs DataParallel loads GPU 0 and DDP is balanced and faster"
)

SEED = 543
SHAPE = (1, 4, 8)  # the CPU demonstration's inputs: 32 features for its MLP
_FEATURES = SHAPE[0] * SHAPE[1] * SHAPE[2]
_BALANCED = 1.1  # DDP ranks' peak memory within 10 % of each other
_GPU_IMAGE = (3, 32, 32)


class DDPRank(TypedDict):
    """One DDP rank of the CPU demonstration (weights and gradients as fingerprints of their bytes)."""

    rank: int
    pid: int
    weights_before: str  # before wrapping: each rank seeded its own
    weights_after: str  # after wrapping: rank 0's, broadcast
    loss: float  # on its own samples
    grads: str  # after backward: averaged over the ranks
    bucket_numels: list[int]  # gradients in each bucket, in launch order
    buckets_before_first_layer_grad: int  # buckets launched before backward reached the first layer


class DataParallelHere(TypedDict):
    """nn.DataParallel with fewer than 2 GPUs."""

    device_ids: list[int]
    same_module: bool  # it runs the wrapped module itself
    same_output: bool  # as the bare module's


class Structure(TypedDict):
    ddp_ranks: list[DDPRank]
    dataparallel: NotRequired[DataParallelHere]  # with fewer than 2 GPUs


class WrapperRun(TypedDict):
    peak_bytes: list[int]  # per GPU
    samples_per_s: float


class GPUMeasured(TypedDict):
    measured: Literal[True]
    gpus: int
    model: str
    global_batch: int
    dp: WrapperRun
    ddp: WrapperRun


class GPUNotMeasured(TypedDict):
    measured: Literal[False]
    gpus: int
    reason: str


class _Measured(TypedDict):
    lab: str
    gpu: GPUMeasured | GPUNotMeasured
    structure: Structure
    parent_pid: int


class Result(_Measured, LabResult):
    pass


@dataclass(frozen=True, kw_only=True)
class Options(LabLaunchOptions):
    nproc_per_node: int = option_like(LaunchOptions, "nproc_per_node", 2, "processes to start")
    model: str = option("resnet18", "model measured on GPUs", role=Role.WORKLOAD)
    batch_size: int = option_like(TrainConfig, "batch_size", 256, "GLOBAL batch on GPUs")
    steps: int = option(30, "measured steps on GPUs", role=Role.TRAINING)
    warmup: int = option(5, "steps before measuring on GPUs", role=Role.MEASUREMENT)
    bucket_cap_mb: float = option(0.25, "DDP bucket size on CPU, MiB", role=Role.LAYOUT)

    def check(self) -> None:
        if self.nproc_per_node < 2:
            raise ConfigError("nproc_per_node must be >= 2: DDP with one process has nothing to all-reduce")
        at_least(1, batch_size=self.batch_size, steps=self.steps)
        at_least(0, warmup=self.warmup)
        if self.bucket_cap_mb <= 0:
            raise ConfigError(f"bucket_cap_mb must be > 0, got {self.bucket_cap_mb}")


def _digest(tensor: torch.Tensor) -> str:
    """A fingerprint of a tensor's exact bytes: equal fingerprints, bitwise-equal tensors."""
    return hashlib.sha1(tensor.detach().cpu().numpy().tobytes()).hexdigest()[:12]


# -- on any machine: what DDP and DataParallel do


def _ddp_structure(local_rank: int, bucket_cap_mb: float) -> list[DDPRank]:
    """One rank of a DDP model: pids, weights before and after wrapping, bucket launches during backward."""
    rank, device = idist.get_rank(), idist.device()
    seed_everything(SEED + rank)  # a different initial model on every rank, on purpose: DDP must replace it
    model = mlp(_FEATURES, 10, hidden=(256, 256, 256)).to(device)
    before = _digest(parameters_to_vector(model.parameters()))
    # DDP: auto_model wraps in it on a process group of 2 or more CPU ranks or GPUs
    ddp = cast(DistributedDataParallel, idist.auto_model(model, bucket_cap_mb=bucket_cap_mb))
    after = _digest(parameters_to_vector(model.parameters()))
    events: list[tuple[str, float, int]] = []

    # Typed in a comment: DDP checks a hook's annotations against its own classes, and here they would be strings.
    def timed(state, bucket):  # type: (Any, torch.distributed.GradBucket) -> torch.futures.Future[torch.Tensor]
        events.append(("bucket", time.perf_counter(), bucket.buffer().numel()))
        return allreduce_hook(state, bucket)  # DDP's own behaviour: all-reduce, then divide by the world size

    ddp.register_comm_hook(None, timed)
    first_layer = cast(nn.Linear, model[1]).weight  # the last gradient backward computes
    first_layer.register_post_accumulate_grad_hook(lambda p: events.append(("first layer", time.perf_counter(), 0)))
    x, y = synthetic_images(32, 10, SHAPE, SEED, split=rank).tensors  # every rank its own samples
    for _ in range(2):  # DDP rebuilds its buckets in gradient order after the first iteration: look at the second
        events.clear()
        ddp.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(ddp(x.to(device)), y.to(device))
        loss.backward()
    buckets = [(t, n) for kind, t, n in events if kind == "bucket"]
    first_layer_ready = next(t for kind, t, _ in events if kind == "first layer")
    return gather_objects(
        DDPRank(
            rank=rank,
            pid=os.getpid(),
            weights_before=before,
            weights_after=after,
            loss=loss.item(),
            grads=_digest(parameters_to_vector(gradients(model.parameters()))),
            bucket_numels=[n for _, n in buckets],
            buckets_before_first_layer_grad=sum(t < first_layer_ready for t, _ in buckets),
        )
    )


def _dataparallel_here() -> DataParallelHere:
    """What ``nn.DataParallel`` does with fewer than 2 GPUs, for a model's forward pass."""
    device = "cuda:0" if torch.cuda.is_available() else "cpu"  # DataParallel wants the model on its first GPU
    with torch.random.fork_rng():  # leaves the caller's random state alone
        torch.manual_seed(SEED)
        model, x = mlp(_FEATURES, 10, hidden=(64,)).to(device), torch.randn(8, _FEATURES, device=device)
        dp = nn.DataParallel(model)
        same = torch.equal(dp(x), model(x))
    return {"device_ids": list(dp.device_ids), "same_module": dp.module is model, "same_output": same}


# -- on >= 2 GPUs: peak memory per GPU and throughput


def _timed_steps(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, warmup: int, clock: Callable[[], float]
) -> float:
    """Seconds taken by ``steps`` SGD steps on one batch after ``warmup`` steps, read with ``clock``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    start = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            start = clock()
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return clock() - start


def _all_gpus_now() -> float:
    """``perf_counter`` once every GPU has finished its queued work (DataParallel runs on all of them)."""
    for d in range(torch.cuda.device_count()):
        torch.cuda.synchronize(d)
    return time.perf_counter()


def _batch(size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = synthetic_images(size, 10, _GPU_IMAGE, SEED).tensors
    return x.to(device), y.to(device)


def _dataparallel_gpus(model_name: str, batch_size: int, steps: int, warmup: int) -> WrapperRun:
    """DataParallel in this process over every visible GPU: peak memory of each GPU, samples per second."""
    gpus = torch.cuda.device_count()
    seed_everything(SEED)
    model = nn.DataParallel(build_model(model_name, _GPU_IMAGE[0], _GPU_IMAGE[1], 10).to("cuda:0"))
    for d in range(gpus):
        torch.cuda.reset_peak_memory_stats(d)
    seconds = _timed_steps(model, *_batch(batch_size, torch.device("cuda:0")), steps, warmup, _all_gpus_now)
    peaks = [torch.cuda.max_memory_allocated(d) for d in range(gpus)]
    return {"peak_bytes": peaks, "samples_per_s": batch_size * steps / seconds}


def _ddp_gpu_rank(local_rank: int, model_name: str, batch: int, steps: int, warmup: int) -> WrapperRun:
    """One DDP rank on its own GPU: its peak memory and time; rank 0 returns them all."""
    device = idist.device()
    seed_everything(SEED)
    model = idist.auto_model(build_model(model_name, _GPU_IMAGE[0], _GPU_IMAGE[1], 10))
    torch.cuda.reset_peak_memory_stats(device)
    x, y = _batch(batch // idist.get_world_size(), device)
    seconds = _timed_steps(model, x, y, steps, warmup, lambda: now(device))  # this rank's GPU only
    ranks = gather_objects({"peak_bytes": torch.cuda.max_memory_allocated(device), "seconds": seconds})
    slowest = max(r["seconds"] for r in ranks)
    return {"peak_bytes": [r["peak_bytes"] for r in ranks], "samples_per_s": batch * steps / slowest}


def _measure_gpus(opts: Options, gpus: int) -> GPUMeasured:
    # DDP ranks spawned, not forked: DataParallel initialises CUDA in this process (this run's or an earlier one's),
    # and forked children cannot use CUDA once their parent has.
    settings = LaunchSettings(
        backend="nccl", nproc_per_node=gpus, start_method="spawn", log_dir=lab_logs(opts.output_dir)
    )
    ddp: WrapperRun = launch(_ddp_gpu_rank, settings, opts.model, opts.batch_size, opts.steps, opts.warmup)
    dp = _dataparallel_gpus(opts.model, opts.batch_size, opts.steps, opts.warmup)
    return {"measured": True, "gpus": gpus, "model": opts.model, "global_batch": opts.batch_size, "dp": dp, "ddp": ddp}


def run(**options: Any) -> Result:
    """Show what DDP does on ``nproc_per_node`` ranks and, with 2 or more GPUs, measure both wrappers on them.
    ``options``: the fields of :class:`Options`."""
    opts = Options(**options)
    gpus = torch.cuda.device_count()  # counted without initialising CUDA
    # First, while this process has not touched CUDA, so that the launcher may fork the ranks.
    cpu: Structure = {"ddp_ranks": launch_lab(_ddp_structure, opts, opts.nproc_per_node, opts.bucket_cap_mb)}
    gpu: GPUMeasured | GPUNotMeasured
    if gpus >= 2:
        gpu = _measure_gpus(opts, gpus)
    else:
        gpu = {"measured": False, "gpus": gpus, "reason": f"needs 2 or more CUDA GPUs; {gpus} visible here"}
        cpu["dataparallel"] = _dataparallel_here()
    result: _Measured = {"lab": NAME, "gpu": gpu, "structure": cpu, "parent_pid": os.getpid()}
    return {**result, "checks": _gpu_checks(gpu) + _structure_checks(result)}


def _gpu_checks(gpu: GPUMeasured | GPUNotMeasured) -> list[Check]:
    if gpu["measured"] is False:
        return []
    dp, ddp = gpu["dp"], gpu["ddp"]
    dp_mib = ", ".join(f"{b / 2**20:.0f}" for b in dp["peak_bytes"])
    ddp_mib = ", ".join(f"{b / 2**20:.0f}" for b in ddp["peak_bytes"])
    return [
        check(
            "DataParallel holds more memory on GPU 0 than on any other GPU (outputs gathered, model replicated there)",
            dp["peak_bytes"][0] > max(dp["peak_bytes"][1:]),
            f"peak MiB per GPU: {dp_mib}",
        ),
        check(
            "DDP's peak memory is balanced across GPUs",
            max(ddp["peak_bytes"]) <= _BALANCED * min(ddp["peak_bytes"]),
            f"peak MiB per GPU: {ddp_mib}",
        ),
        check(
            "DDP trains faster than DataParallel",
            ddp["samples_per_s"] > dp["samples_per_s"],
            f"{ddp['samples_per_s']:.0f} vs {dp['samples_per_s']:.0f} samples/s",
        ),
    ]


def _structure_checks(result: _Measured) -> list[Check]:
    ranks, dp = result["structure"]["ddp_ranks"], result["structure"].get("dataparallel")
    n = len(ranks)
    pids = {r["pid"] for r in ranks}
    buckets = ranks[0]["bucket_numels"]
    overlapped = min(r["buckets_before_first_layer_grad"] for r in ranks)
    checks: list[Check] = []
    if dp is not None:
        checks.append(
            check(
                "with fewer than 2 GPUs nn.DataParallel is a pass-through: the module itself runs, unchanged",
                len(dp["device_ids"]) < 2 and dp["same_module"] and dp["same_output"],
                f"device_ids {dp['device_ids']}, output identical to the bare module's: {dp['same_output']}",
            )
        )
    return checks + [
        check(
            f"DDP runs one process per rank ({n} ranks), none of them this one",
            len(pids) == n and result["parent_pid"] not in pids,
            f"pids {sorted(pids)}",
        ),
        check(
            "DDP replicates the model once, when wrapping: rank 0's weights replace every rank's own",
            len({r["weights_before"] for r in ranks}) == n and len({r["weights_after"] for r in ranks}) == 1,
            "weights differ before wrapping (a different seed per rank), identical after",
        ),
        check(
            "DDP all-reduces gradients in buckets during backward, overlapping it",
            len(buckets) >= 2 and overlapped >= 1,
            f"{len(buckets)} buckets of {buckets} gradients; {overlapped} launched before backward reached "
            "the first layer",
        ),
        check(
            "after backward every rank holds the same averaged gradient, though each computed on its own samples",
            len({r["grads"] for r in ranks}) == 1 and len({round(r["loss"], 6) for r in ranks}) == n,
            "local losses " + ", ".join(f"{r['loss']:.4f}" for r in ranks),
        ),
    ]


def format_result(result: Result) -> str:
    gpu = result["gpu"]
    lines = [f"{NAME}: DataParallel vs DistributedDataParallel"]
    if gpu["measured"] is True:
        rows = [
            [name, *(f"{b / 2**20:.0f} MiB" for b in m["peak_bytes"]), f"{m['samples_per_s']:.0f}"]
            for name, m in (("DataParallel", gpu["dp"]), ("DDP (nccl)", gpu["ddp"]))
        ]
        header = ["", *(f"GPU {d} peak" for d in range(gpu["gpus"])), "samples/s"]
        lines += [
            f"{gpu['model']}, global batch {gpu['global_batch']}, {gpu['gpus']} GPUs:",
            format_table(header, rows),
        ]
    else:
        lines.append(f"peak memory per GPU and throughput: NOT MEASURED ({gpu['reason']}); what runs here instead:")
    ranks = result["structure"]["ddp_ranks"]
    rank_rows = [
        [
            r["rank"],
            r["pid"],
            r["weights_before"],
            r["weights_after"],
            f"{r['loss']:.4f}",
            r["grads"],
            len(r["bucket_numels"]),
            r["buckets_before_first_layer_grad"],
        ]
        for r in ranks
    ]
    lines.append(f"DDP over {len(ranks)} processes (parent pid {result['parent_pid']}):")
    header = ["rank", "pid", "weights before", "after wrap", "loss", "gradients", "buckets", "before 1st layer"]
    lines.append(format_table(header, rank_rows))
    dp = result["structure"].get("dataparallel")
    if dp is not None:
        lines.append(
            f"nn.DataParallel here: device_ids {dp['device_ids']}, runs the wrapped module itself: "
            f"{dp['same_module']}, same output as the bare module: {dp['same_output']}"
        )
    lines.append(format_checks(result))
    return "\n".join(lines)
