"""ignite-ddl: run, measure and compare data-parallel training with PyTorch-Ignite on CPU, GPU and TPU.

The package is laid out by concern, in layers that import only downwards:

- ``core``: options (one declaration per option), the run configuration, errors, safe outputs, the results schema;
- ``launcher``: starting ranks (settings, backends, rendezvous, supervision, signals, watchdog, XLA);
- ``measure``: what a rank measures (steps, communication, FLOPs, memory, contention, profilers);
- ``trainer``: the Ignite engines and a run (strategies, data, models, checkpoints, tracking);
- ``report`` and ``predict``: what a sweep's results say; a configuration's memory and step time before it runs,
  and how a step would scale;
- ``sweep``: grids of runs, executed here or on SLURM;
- ``labs``: one experiment per idea of data-parallel training;
- ``cli`` and ``colab``: the command line and the notebooks' runtime set-up.

Example:
    >>> from ignite_ddl import TrainConfig, train
    >>> summary = train(TrainConfig(nproc_per_node=2, epochs=1, train_size=512, output_dir="/tmp/run", overwrite=True))
    >>> summary["world_size"], summary["backend"]
    (2, 'gloo')
"""

from __future__ import annotations

from ignite_ddl.core.commands import VERSION
from ignite_ddl.core.exports import lazy_exports

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
__version__ = VERSION

# The public names load on first use, so that `import ignite_ddl.colab` (run before torch may be imported, to set up
# a TPU runtime) and the CLI's refusals do not pay for importing torch and Ignite.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ConfigError": "core.errors",
        "Interrupted": "core.errors",
        "LaunchFailed": "core.errors",
        "RunFailed": "core.errors",
        "TrainConfig": "core.config",
        "LaunchPlan": "launcher.settings",
        "LaunchSettings": "launcher.settings",
        "plan_launch": "launcher.settings",
        "launch": "launcher.spawn",
        "train": "trainer.run",
        "training": "trainer.run",
    },
)
