"""ignite-ddl: run, measure and compare data-parallel training with PyTorch-Ignite on CPU, GPU and TPU.

Example:
    >>> from ignite_ddl import TrainConfig, train
    >>> summary = train(TrainConfig(nproc_per_node=2, epochs=1, train_size=512, output_dir="/tmp/run", overwrite=True))
    >>> summary["world_size"], summary["backend"]
    (2, 'gloo')
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ConfigError",
    "Interrupted",
    "LaunchFailed",
    "LaunchPlan",
    "LaunchSettings",
    "RunFailed",
    "TrainConfig",
    "launch",
    "plan_launch",
    "train",
    "training",
]
__version__ = "0.1.0"

# The public names load on first use, so that `import ignite_ddl.colab` (run before torch may be imported, to set up
# a TPU runtime) and the CLI's refusals do not pay for importing torch and Ignite.
_HOMES = {
    "ConfigError": "core.config",
    "TrainConfig": "core.config",
    "Interrupted": "launcher.signals",
    "train": "trainer.run",
    "training": "trainer.run",
    **dict.fromkeys(
        ("LaunchFailed", "LaunchPlan", "LaunchSettings", "RunFailed", "launch", "plan_launch"), "launcher.spawn"
    ),
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"ignite_ddl.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'ignite_ddl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
