"""Starting the ranks of a distributed run: serially, as spawned processes on one node or several, or as processes
already started by torchrun / SLURM, with timeouts, signal handling and failures named by rank.

- :mod:`~ignite_ddl.launcher.settings`: what a launch is asked for and what it resolves to here;
- :mod:`~ignite_ddl.launcher.backends`: one set of rules per backend (gloo, nccl, xla);
- :mod:`~ignite_ddl.launcher.spawn`: :func:`launch` and the supervision of the ranks;
- :mod:`~ignite_ddl.launcher.rendezvous`, :mod:`~ignite_ddl.launcher.processes`,
  :mod:`~ignite_ddl.launcher.signals`, :mod:`~ignite_ddl.launcher.watchdog`: the rendezvous store, the process
  tree, stopping on signals, naming a stuck rank;
- :mod:`~ignite_ddl.launcher.xla`, :mod:`~ignite_ddl.launcher.tpu`: torch_xla's PJRT runtime.

Example:
    >>> from ignite_ddl.launcher import LaunchSettings, plan_launch
    >>> plan_launch(LaunchSettings(nproc_per_node=2, backend="gloo")).world_size
    2
"""

from __future__ import annotations

from ignite_ddl.core.exports import lazy_exports

__all__ = [
    "LaunchPlan",
    "LaunchSettings",
    "free_port",
    "in_fresh_thread",
    "launch",
    "launched_externally",
    "plan_launch",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "LaunchPlan": "settings",
        "LaunchSettings": "settings",
        "launched_externally": "settings",
        "plan_launch": "settings",
        "free_port": "rendezvous",
        "in_fresh_thread": "spawn",
        "launch": "spawn",
    },
)
