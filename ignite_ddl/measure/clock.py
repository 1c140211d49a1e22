"""Clock readings that include the device's work: GPU kernels and XLA graphs run asynchronously, so the host's clock
alone would time their launch, not their execution.

Example:
    >>> import torch
    >>> device_synchronizer(torch.device("cpu")) is None  # CPU work is done when the call returns
    True
    >>> start = now(torch.device("cpu"))
    >>> now(torch.device("cpu")) >= start
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

__all__ = ["device_synchronizer", "now"]


def device_synchronizer(device: torch.device, launch: bool = False) -> Callable[[], None] | None:
    """What makes the host wait until ``device`` has finished the work queued so far (None: nothing to wait for).

    On XLA, work is queued when its lazy graph is launched: ``launch`` launches the pending one first (which ends
    the graph there, so only where a step ends).
    """
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    if device.type == "xla":
        from ignite_ddl.core.xla_sync import wait

        return lambda: wait(device, launch=launch)
    return None


def now(device: torch.device) -> float:
    """``time.perf_counter()`` once ``device`` has finished its queued work."""
    sync = device_synchronizer(device)
    if sync is not None:
        sync()
    return time.perf_counter()
