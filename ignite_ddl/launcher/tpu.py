"""Whether this machine has a TPU, told without importing torch or torch_xla.

The launcher resolves ``--backend auto`` to ``xla-tpu`` with :func:`tpu_available`; a notebook's set-up
(:mod:`ignite_ddl.colab`) asks :func:`tpu_attached` before torch is installed, so this module imports nothing heavy.
How many TPU devices there are is torch_xla's answer (``xla.local_device_count``).

Example:
    >>> import importlib.util
    >>> tpu_available({"PJRT_DEVICE": "TPU"}) == (importlib.util.find_spec("torch_xla") is not None)
    True
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["tpu_attached", "tpu_available"]


def tpu_attached() -> bool:
    """A TPU device node is present: /dev/accel* on TPU v2-v4, a VFIO device /dev/vfio/<n> on v5e and later."""
    return Path("/dev/accel0").exists() or any(Path("/dev/vfio").glob("[0-9]*"))


def tpu_available(environ: Mapping[str, str] = os.environ) -> bool:
    """torch_xla is installed and there is a TPU to drive: a device node, or an environment that names one
    (``PJRT_DEVICE=TPU``, or Colab's ``COLAB_TPU_ADDR``)."""
    if importlib.util.find_spec("torch_xla") is None:
        return False
    return environ.get("PJRT_DEVICE") == "TPU" or "COLAB_TPU_ADDR" in environ or tpu_attached()
