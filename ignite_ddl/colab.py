"""Notebook set-up in one call, the same in Colab, local Jupyter and CI: what this kernel can run on.

A notebook's first cell installs ignite-ddl where it is missing and then calls :func:`prepare_runtime`. On a Colab
TPU runtime without torch_xla that installs a torch / torch_xla pair of one release (torch_xla is built against its
own torch; the ``tpu`` extra brings libtpu) and points PJRT at the TPU; everywhere else it installs nothing. It
returns (and prints) what the kernel has, so that hardware-specific cells can say plainly what they need.

Importing this module does not import torch (``ignite_ddl`` loads its public names lazily): a TPU runtime must get
its torch before the kernel first imports one.

Example:
    >>> runtime = prepare_runtime(install=False, show=False)
    >>> runtime.cpu_cores >= 1 and runtime.gpus >= 0
    True
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass

from ignite_ddl.launcher.tpu import tpu_attached, tpu_available

__all__ = ["COLAB_URL", "INSTALL_CELL", "TPU_PACKAGES", "Runtime", "on_colab", "prepare_runtime"]

# Where Colab opens the notebooks from (a fork replaces the owner and name).
COLAB_URL = "https://colab.research.google.com/github/ignite-ddl/ignite-ddl/blob/main/notebooks/"

# The first code cell of every notebook, word for word (a test holds them to it).
INSTALL_CELL = """\
# Setup (Colab, local Jupyter, CI alike): installs ignite-ddl where it is missing; a Colab TPU runtime also gets
# torch_xla. Where ignite-ddl is installed already it only says what this kernel can run on.
import importlib.util
import subprocess
import sys

IGNITE_DDL_SOURCE = "git+https://github.com/ignite-ddl/ignite-ddl.git"  # or your fork / branch: "...git@<branch>"
if importlib.util.find_spec("ignite_ddl") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", IGNITE_DDL_SOURCE], check=True)

runtime = importlib.import_module("ignite_ddl.colab").prepare_runtime()"""

# One release of each, known to work together on Colab's TPU runtime.
TPU_PACKAGES = ("torch==2.9.0", "torch_xla[tpu]==2.9.0", "torchvision==0.24.0")


@dataclass(frozen=True)
class Runtime:
    """What the kernel can train on."""

    colab: bool
    cpu_cores: int
    gpus: int
    gpu_name: str | None
    tpu: bool  # torch_xla can drive a TPU here (tpu.tpu_available: what --backend auto runs on)
    torch: str
    ignite: str

    def describe(self) -> str:
        where = "Colab" if self.colab else "this machine"
        devices = [f"{self.cpu_cores} CPU cores"]
        if self.gpus:
            devices.append(f"{self.gpus} x {self.gpu_name}")
        if self.tpu:
            devices.append("a TPU (PJRT)")
        return f"{where}: {', '.join(devices)}; torch {self.torch}, pytorch-ignite {self.ignite}"


def on_colab() -> bool:
    return "google.colab" in sys.modules


def prepare_runtime(install: bool = True, show: bool = True) -> Runtime:
    """Install what a Colab TPU runtime lacks (with ``install``), then describe the kernel's devices."""
    if on_colab() and tpu_attached():
        if importlib.util.find_spec("torch_xla") is None and install:
            if "torch" in sys.modules:
                raise RuntimeError("torch is already imported: restart the runtime and run this cell first")
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", *TPU_PACKAGES], check=True)
            importlib.invalidate_caches()
        os.environ.setdefault("PJRT_DEVICE", "TPU")
    import ignite
    import torch

    from ignite_ddl.core.environment import cpu_cores

    gpus = torch.cuda.device_count()  # does not initialise CUDA: the kernel can still fork ranks afterwards
    runtime = Runtime(
        colab=on_colab(),
        cpu_cores=cpu_cores(),
        gpus=gpus,
        gpu_name=_gpu_name() if gpus else None,
        tpu=tpu_available(),
        torch=torch.__version__,
        ignite=ignite.__version__,
    )
    if show:
        print(runtime.describe())
    return runtime


def _gpu_name() -> str | None:
    """The first GPU's name from nvidia-smi: asking torch would initialise CUDA in the kernel, after which no run
    started from it may fork its ranks."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = done.stdout.strip().splitlines()
    return names[0].strip() if done.returncode == 0 and names else None
