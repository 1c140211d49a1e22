"""The labs' hand-written training steps (allreduce-vs-ps, fsdp): the samples each rank takes at a step, and the
step time of a run.

Example:
    >>> import torch
    >>> data, cpu = [torch.arange(16)], torch.device("cpu")
    >>> [batch_share(data, step=1, batch_size=8, part=p, parts=2, device=cpu)[0].tolist() for p in (0, 1)]
    [[8, 9, 10, 11], [12, 13, 14, 15]]
    >>> median_step_s([[9.0, 1.0, 2.0, 1.0], [9.0, 3.0, 1.0, 1.0]], warmup=1)  # the slowest rank's 3.0, 2.0, 1.0
    2.0
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch

__all__ = ["batch_share", "median_step_s"]


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
