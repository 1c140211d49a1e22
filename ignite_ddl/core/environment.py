"""Facts about the machine and software a run used, recorded beside every result; and torchvision, imported here
for the whole package: a torchvision built for another torch fails as it is imported (``operator torchvision::nms
does not exist``), and is refused in one line that names both versions and the fix (:func:`torchvision_mismatch`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import socket
import sys

import ignite
import torch

from ignite_ddl.core.errors import ConfigError

__all__ = ["cpu_cores", "cpu_name", "device_info", "host", "torchvision", "torchvision_mismatch", "versions"]


def torchvision_mismatch(error: BaseException) -> str:
    """The one line that says torchvision does not work with this torch, and how to install one that does: pip
    picks the torchvision whose wheel requires this torch, from the index this torch's build came from.

    Example:
        >>> "pip install 'torch==" in torchvision_mismatch(RuntimeError("operator torchvision::nms does not exist"))
        True
    """
    try:
        found = importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        found = "(not installed)"
    release, _, build = torch.__version__.partition("+")  # 2.15.0+cpu: the CPU build, from PyTorch's cpu index
    index = f" --index-url https://download.pytorch.org/whl/{build}" if build else ""
    why = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return (
        f"torchvision {found} does not work with torch {torch.__version__} ({why[:120]}): install the torchvision "
        f"built for this torch: pip install 'torch=={release}' torchvision{index}"
    )


try:
    import torchvision
except (ImportError, OSError, RuntimeError) as e:  # its compiled operators are another torch's
    raise ConfigError(torchvision_mismatch(e)) from None


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
