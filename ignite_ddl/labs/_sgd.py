"""Shared pieces of the data-parallel labs (ddp-sgd, raw-vs-ignite, allreduce-vs-ps, dp-vs-ddp, fsdp): options,
launching a lab's rank function on real process groups, models, byte counts and clocks.

Example:
    >>> int_list("1,2,4")
    [1, 2, 4]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from ignite_ddl.labs import lab_logs
from ignite_ddl.launcher import LaunchSettings, launch
from ignite_ddl.recorder import device_synchronizer


def int_list(text: str) -> list[int]:
    """``argparse`` type for comma-separated positive integers such as ``1,2,4``."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """``--backend`` and ``--output-dir``, for labs whose process counts come from an option of their own."""
    parser.add_argument("--backend", default="auto", help="gloo | nccl | auto (default auto: nccl on GPUs, else gloo)")
    parser.add_argument("--output-dir", default="runs/lab", help="where the ranks write their logs (default runs/lab)")


def launch_lab(fn: Callable[..., Any], args: argparse.Namespace, nproc: int, *fn_args: Any) -> Any:
    """``fn(local_rank, *fn_args)`` on ``nproc`` processes with the lab's backend; rank 0's return value.

    One process runs here, without a process group: plain single-process training, the reference of the labs.
    """
    backend = "none" if nproc == 1 else args.backend
    settings = LaunchSettings(backend=backend, nproc_per_node=nproc, log_dir=lab_logs(args.output_dir))
    return launch(fn, settings, *fn_args)


def mlp(in_features: int, width: int, linears: int, num_classes: int = 10) -> nn.Sequential:
    """``linears`` Linear layers (``width`` wide, ReLU between them) on flattened inputs."""
    sizes = [in_features] + [width] * (linears - 1) + [num_classes]
    layers: list[nn.Module] = [nn.Flatten()]
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        layers += [nn.Linear(fan_in, fan_out)] + ([nn.ReLU()] if i < linears - 1 else [])
    return nn.Sequential(*layers)


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel / DataParallel wrapper (the model itself otherwise)."""
    return model.module if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) else model


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the parameters, named as in the unwrapped model."""
    return {name: p.detach().cpu().clone() for name, p in unwrap(model).named_parameters()}


def batch_share(
    data: Sequence[torch.Tensor], step: int, batch_size: int, part: int, parts: int, device: torch.device
) -> list[torch.Tensor]:
    """Share ``part`` of ``parts`` (equal and contiguous) of global batch ``step`` of ``data``, on ``device``."""
    local = batch_size // parts
    start = step * batch_size + part * local
    return [t[start : start + local].to(device) for t in data]


def median_step_s(times: Sequence[Sequence[float]], warmup: int) -> float:
    """Median over the steps after ``warmup`` of the slowest rank's time; ``times[rank][step]`` in seconds."""
    steps = len(times[0])
    return statistics.median(max(rank[k] for rank in times) for k in range(min(warmup, steps - 1), steps))


def max_abs_diff(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """Largest absolute difference between two sets of tensors with the same names and shapes."""
    if a.keys() != b.keys():
        raise ValueError(f"different tensors: {sorted(a)} vs {sorted(b)}")
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def local_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes this rank holds for ``tensors``: the local shard of a DTensor, the whole tensor otherwise."""
    return sum(
        (t.to_local() if isinstance(t, DTensor) else t).numel() * t.element_size() for t in tensors if t is not None
    )


def now(device: torch.device) -> float:
    """``perf_counter`` once ``device`` has finished its queued work (GPU kernels run asynchronously)."""
    sync = device_synchronizer(device)
    if sync is not None:
        sync()
    return time.perf_counter()


def first_sentence(error: BaseException) -> str:
    """The first sentence of an exception's message (torch's dispatcher errors run to several paragraphs)."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.split(". ")[0].rstrip(".")


def kib(nbytes: float) -> str:
    """Bytes as KiB with one decimal, e.g. ``kib(27688)`` is ``'27.0 KiB'``."""
    return f"{nbytes / 1024:.1f} KiB"
