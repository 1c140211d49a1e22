"""Launching an XLA replica's pending lazy graph and waiting for it to run: what a replica's collectives and a clock
read on XLA both need (the launcher starts replicas, the measurements time them), with the one lock that keeps two
replica threads of XLA:CPU from compiling at once. torch_xla is imported only when called: only on XLA.

Example:
    >>> threaded_cpu({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2"}), threaded_cpu({"PJRT_DEVICE": "TPU"})
    (True, False)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["compile_lock", "sync", "threaded_cpu", "wait"]

# Two replica threads of one process compiling at once (their first .item(), their graphs) can crash torch_xla
# (its op counters): they take this lock.
compile_lock = threading.Lock()


def threaded_cpu(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether replicas are threads of one process on XLA:CPU (see :mod:`ignite_ddl.launcher.xla`)."""
    return environ.get("PJRT_DEVICE") == "CPU" and int(environ.get("CPU_NUM_DEVICES", "1")) > 1


def _launch_graph() -> None:
    import torch_xla

    if hasattr(torch_xla, "sync"):
        torch_xla.sync()
    else:  # torch_xla < 2.6
        import torch_xla.core.xla_model as xm

        xm.mark_step()


def sync() -> None:
    """Launch this replica's pending lazy graph (``torch_xla.sync``): its collectives reach the other replicas."""
    if not threaded_cpu():
        _launch_graph()
        return
    with compile_lock:
        _launch_graph()
    wait()


def wait(device: torch.device | None = None, launch: bool = False) -> None:
    """Block until the XLA work launched on ``device`` (default: this replica's) has run; ``launch`` launches the
    pending graph first, so that a clock read afterwards includes the whole step."""
    import ignite.distributed as idist
    import torch_xla.core.xla_model as xm

    if launch:
        sync()
    xm.wait_device_ops(xm.xla_real_devices([device if device is not None else idist.device()]))
