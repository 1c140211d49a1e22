"""Facts about the machine and software a run used, recorded beside every result."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import socket
import sys

import ignite
import torch
import torchvision

__all__ = ["cpu_cores", "cpu_name", "device_info", "host", "versions"]


def cpu_cores() -> int:
    """CPU cores this process may run on (respects affinity masks and container CPU sets)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def versions() -> dict[str, str]:
    found = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "ignite": ignite.__version__,
        "cuda": torch.version.cuda or "",
    }
    if importlib.util.find_spec("torch_xla") is not None:
        found["torch_xla"] = importlib.metadata.version("torch_xla")
    return found


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device: torch.device) -> dict[str, object]:
    """The device this rank computes on, by type and name."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    elif device.type == "xla":
        name = "XLA " + os.environ.get("PJRT_DEVICE", "")
    else:
        name = cpu_name()
    return {"type": device.type, "name": name}


def host() -> dict[str, object]:
    return {"hostname": socket.gethostname(), "platform": sys.platform, "cpu": cpu_name(), "cpu_cores": cpu_cores()}
