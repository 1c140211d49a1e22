"""A sweep's runs, planned from its spec: every configuration of the grid, each repeated, in the order the sweep runs
them, each a :class:`Run` with its own output folder and a key that finds it again after a restart.

**Run order.** Repeats are interleaved: every configuration's first repeat, then every configuration's second, with
the direction reversed each round (A B C, C B A, ...), so a slow minute of the machine, or a slow drift, is spread
over the configurations instead of landing on one. ``shuffled`` draws each round's order from ``seed``;
``grouped`` runs a configuration's repeats back to back.

Example:
    >>> from ignite_ddl.sweep.spec import parse_spec
    >>> spec = parse_spec({"name": "demo", "grid": {"nproc_per_node": [1, 2]}, "base": {"epochs": 1}, "repeats": 2})
    >>> [(run.index, run.repeat) for run in expand(spec)]
    [(0, 0), (1, 0), (1, 1), (0, 1)]
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import option_specs
from ignite_ddl.core.sweep_records import RunRecord
from ignite_ddl.sweep.spec import Spec, configurations, run_options, shown_grid

__all__ = [
    "Progress",
    "Recorded",
    "Run",
    "Where",
    "check_configurations",
    "contended_reruns",
    "expand",
    "make_run",
    "run_order",
    "sweep_dir",
]


@dataclass(frozen=True)
class Run:
    """One run of a sweep: a configuration, the index of its repeat, and its attempt (re-runs of a contended run)."""

    index: int  # position of the configuration in the grid
    repeat: int
    grid: dict[str, Any]  # this configuration's grid values
    config: TrainConfig
    attempt: int = 0
    position: int = field(default=0, compare=False)  # place in the sweep's run order

    @property
    def key(self) -> str:
        """Identifies the run across restarts: the configuration's content (its options that differ from their
        defaults, without its output folder, so that a release adding an option keeps the keys it had)."""
        defaults = {name: spec.default for name, spec in option_specs(TrainConfig).items()}
        options = {k: v for k, v in self.config.to_dict().items() if k != "output_dir" and v != _plain(defaults[k])}
        digest = hashlib.sha1(json.dumps(options, sort_keys=True).encode()).hexdigest()[:12]
        return f"{digest}-r{self.repeat}"

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.grid.items())


# What an executor is handed with a batch of runs (:class:`ignite_ddl.sweep.session.Executor`): called with each
# run's record as it ends (``recorded(record, run, number)``), with a progress line, and for a run's place in its
# batch (``where(run, number)``).
Recorded = Callable[[RunRecord, Run, int], None]
Progress = Callable[[str], None]
Where = Callable[[Run, int], str]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def run_order(spec: Spec, count: int) -> list[tuple[int, int]]:
    """(configuration index, repeat) of every run, in the order the sweep runs them (see the module docstring)."""
    if spec.order == "grouped":
        return [(index, repeat) for index in range(count) for repeat in range(spec.repeats)]
    rng = random.Random(spec.seed)
    order = []
    for repeat in range(spec.repeats):
        indices = list(range(count))
        if spec.order == "shuffled":
            rng.shuffle(indices)
        elif repeat % 2:
            indices.reverse()
        order += [(index, repeat) for index in indices]
    return order


def make_run(
    spec: Spec,
    index: int,
    grid: dict[str, Any],
    repeat: int,
    output_dir: str | Path,
    attempt: int = 0,
    position: int = 0,
) -> Run:
    suffix = f"-a{attempt}" if attempt else ""
    run_dir = Path(output_dir) / "runs" / f"cfg{index:03d}-r{repeat}{suffix}"
    # The run folder is the sweep's: a run re-run after an interruption replaces what it had begun.
    try:
        config = TrainConfig.from_dict({**run_options(spec, grid), "output_dir": str(run_dir), "overwrite": True})
    except ConfigError as e:
        raise ConfigError(f"configuration {shown_grid(grid)}: {e}") from None
    return Run(index, repeat, grid, config, attempt, position)


def expand(spec: Spec, output_dir: str | Path = ".") -> Iterator[Run]:
    """Every run of the sweep, in the order the sweep runs them."""
    grids = configurations(spec)
    for position, (index, repeat) in enumerate(run_order(spec, len(grids))):
        yield make_run(spec, index, grids[index], repeat, output_dir, position=position)


def check_configurations(spec: Spec, files: bool = True, grids: list[dict[str, Any]] | None = None) -> None:
    """Refuse (:class:`ConfigError`, naming the configuration) a sweep with a configuration whose run would be
    refused before it starts, as ``ignite-ddl train`` checks it (``trainer.run.check_training``): whatever the
    machine (``trainer.run.check_arrangement``: a batch that does not divide, FSDP with one process), an unknown model,
    a dataset whose files are missing (``files``: where the runs are local; a SLURM node may see other files), an
    unreachable tracker, a workload that does not import or returns what cannot be trained. Each distinct model,
    dataset, tracker and workload is checked once. The trainer's modules (torch) are imported here, when a sweep is
    about to run, not when a spec is read. ``grids``: the configurations to check (default: every configuration of
    the grid)."""
    from ignite_ddl.trainer.data import check_dataset
    from ignite_ddl.trainer.models import check_model
    from ignite_ddl.trainer.run import check_arrangement
    from ignite_ddl.trainer.tracking import check_tracker

    seen: set[tuple[Any, ...]] = set()
    for grid in configurations(spec) if grids is None else grids:
        config = TrainConfig.from_dict(run_options(spec, grid))
        checks: list[tuple[tuple[Any, ...], Callable[[], None]]] = [
            (("model", config.model), functools.partial(check_model, config.model))
        ]
        if files:
            dataset = ("dataset", config.dataset, config.data_dir, config.download)
            checks.append((dataset, functools.partial(check_dataset, config)))
        if config.workload is not None:
            world = (config.nproc_per_node or 1) * config.nnodes
            key: tuple[Any, ...] = ("workload", config.workload, repr(config.workload_args), config.workload_dir)
            key += (config.batch_size, world, config.activation_checkpointing, config.early_stopping)
            key += (config.accumulate, config.amp)  # refused with a workload's own process_function
            checks.append((key, functools.partial(_check_workload, config, world)))
        if config.tracker != "none":
            checks.append((("tracker", config.tracker, config.tracking_uri), functools.partial(check_tracker, config)))
        # Whatever the machine: the batch split, the strategy for this many processes, options that exclude each
        # other. Every configuration, before the first run: not one refused per run after others ran.
        # (A search's proposals are checked as they come: what it checks here are the parts of its space.)
        world = (config.nproc_per_node or 1) * config.nnodes
        if grids is None:
            checks.append((("arrangement", shown_grid(grid)), functools.partial(check_arrangement, config, world)))
        for key, check in checks:
            if key in seen:
                continue
            seen.add(key)
            try:
                check()
            except ConfigError as e:
                raise ConfigError(f"configuration {shown_grid(grid)}: {e}") from None


def _check_workload(config: TrainConfig, world: int) -> None:
    from ignite_ddl.trainer.workload import check_workload

    check_workload(config, world)


def sweep_dir(spec: Spec, output_dir: str | Path | None = None) -> Path:
    """Where a sweep writes: ``output_dir``, else the spec's, else ``runs/<name>``."""
    return Path(output_dir or spec.output_dir or Path("runs") / spec.name)


def contended_reruns(spec: Spec, records: list[dict[str, Any]], out: Path) -> list[Run]:
    """The next attempt of every repeat whose attempts so far all ran contended, up to ``rerun_contended`` re-runs."""
    attempts: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["status"] != "interrupted":
            attempts.setdefault(record["key"], []).append(record)
    reruns = []
    for found in attempts.values():
        last = max(found, key=lambda r: r.get("attempt", 0))
        done = last.get("attempt", 0)
        if all(r.get("contended") for r in found) and done < spec.rerun_contended:
            # The configuration as recorded: a search's configurations are not an enumerated grid's.
            grid = dict(last["grid"])
            reruns.append(make_run(spec, last["index"], grid, last["repeat"], out, done + 1, last["position"]))
    return sorted(reruns, key=lambda r: r.position)
