"""Sweeps: a grid of training configurations, each repeated, one fresh launch per run, into one crash-safe results
file that the report reads.

- :mod:`~ignite_ddl.sweep.spec`: the spec (every key declared once), read from YAML or the command line;
- :mod:`~ignite_ddl.sweep.plan`: the runs of a spec, in the order they run;
- :mod:`~ignite_ddl.sweep.runner`: the loop; :mod:`~ignite_ddl.sweep.session`: the results file, each run recorded as
  it ends, re-runs of contended runs;
- :mod:`~ignite_ddl.sweep.search` and :mod:`~ignite_ddl.sweep.space`: ``search:`` in a spec, the grid (and its
  ranges) searched with Optuna instead of enumerated, ending with the same verdict; :mod:`~ignite_ddl.sweep.guide`:
  the plan's predictions steering the search;
- :mod:`~ignite_ddl.sweep.local` and :mod:`~ignite_ddl.sweep.slurm`: the executors (here, or SLURM jobs);
- :mod:`~ignite_ddl.sweep.records`: a run's record, however it was executed.
- :mod:`~ignite_ddl.sweep.busy`: a busy machine said before the first run, and a sweep stopped when contention persists.

Example:
    >>> from ignite_ddl.sweep import expand, parse_spec
    >>> spec = parse_spec({"name": "demo", "grid": {"batch_size": [32, 64]}, "repeats": 2})
    >>> [run.label for run in expand(spec)]
    ['batch_size=32', 'batch_size=64', 'batch_size=64', 'batch_size=32']
"""

from __future__ import annotations

from ignite_ddl.core.exports import lazy_exports

__all__ = ["Run", "Spec", "expand", "load_spec", "parse_spec", "run_one", "sweep", "sweep_dir"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Spec": "spec",
        "load_spec": "spec",
        "parse_spec": "spec",
        "Run": "plan",
        "expand": "plan",
        "sweep_dir": "plan",
        "sweep": "runner",
        "run_one": "local",
    },
)
