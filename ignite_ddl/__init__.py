"""ignite-ddl: run, measure and compare data-parallel training with PyTorch-Ignite on CPU, GPU and TPU.

Example:
    >>> from ignite_ddl import TrainConfig, train
    >>> summary = train(TrainConfig(nproc_per_node=2, epochs=1, train_size=512, output_dir="/tmp/run"))
    >>> summary["world_size"], summary["backend"]
    (2, 'gloo')
"""

from ignite_ddl.config import ConfigError, TrainConfig
from ignite_ddl.launcher import LaunchFailed, LaunchPlan, LaunchSettings, RunFailed, launch, plan_launch
from ignite_ddl.signals import Interrupted
from ignite_ddl.trainer import train, training

__all__ = ["ConfigError", "Interrupted", "LaunchFailed", "LaunchPlan", "LaunchSettings", "RunFailed", "TrainConfig",
           "launch", "plan_launch", "train", "training"]  # fmt: skip
__version__ = "0.1.0"
