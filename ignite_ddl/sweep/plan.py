"""A sweep's runs, planned from its spec: every configuration of the grid, each repeated, in the order the sweep runs
them, each a :class:`Run` with its own output folder and a key that finds it again after a restart.

**Run order.** Repeats are interleaved: every configuration's first repeat, then every configuration's second, with
the direction reversed each round (A B C, C B A, ...), so a slow minute of the machine, or a slow drift, is spread
over the configurations instead of landing on one. ``shuffled`` draws each round's order from ``seed``;
``grouped`` runs a configuration's repeats back to back.

**Refused configurations.** A configuration whose run would be refused before it starts, whatever the machine (its
options cannot go together, its strategy cannot run on that many processes, its batch does not split, ...) or on
this one (its dataset's files are missing, its tracker cannot be reached), is found before the first run
(:func:`refused_configurations`): the sweep records it as refused, with the one-line reason, and runs the others.
A spec whose every configuration is refused is refused whole, before anything starts.

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
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ignite_ddl.core.config import MATMUL_PEAK_FILE, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import option_specs
from ignite_ddl.core.sweep_records import RunRecord
from ignite_ddl.sweep.grid import all_refused, one_line, options_refusal
from ignite_ddl.sweep.spec import Spec, configurations, run_options, shown_grid

__all__ = [
    "Progress",
    "Recorded",
    "Refused",
    "Run",
    "Where",
    "check_configurations",
    "contended_reruns",
    "expand",
    "launched",
    "make_run",
    "options_key",
    "refused_configurations",
    "run_dir",
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
        """Identifies the run across restarts: the configuration's content (:func:`options_key`) and its repeat."""
        return f"{options_key(self.config.to_dict())}-r{self.repeat}"

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.grid.items())


# What an executor is handed with a batch of runs (:class:`ignite_ddl.sweep.session.Executor`): called with each
# run's record as it ends (``recorded(record, run, number)``), with a progress line, and for a run's place in its
# batch (``where(run, number)``).
Recorded = Callable[[RunRecord, Run, int], None]
Progress = Callable[[str], None]
Where = Callable[[Run, int], str]


@dataclass(frozen=True)
class Refused:
    """A configuration refused before the sweep starts: its place in the grid, its grid values, why (one line), and
    its options as plain data (every train option, as a run's record holds them)."""

    index: int
    grid: dict[str, Any]
    reason: str
    config: dict[str, Any]

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.grid.items())

    @property
    def said(self) -> str:
        """The progress line that says it: ``cfg001 strategy=fsdp nproc_per_node=1: refused, not run: ...``."""
        return f"cfg{self.index:03d} {self.label}: refused, not run: {self.reason}"


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# Where a run's files go, which a sweep sets for each run: not part of what the run is.
_WHERE = ("output_dir", "matmul_peak_cache")


def options_key(options: dict[str, Any]) -> str:
    """A configuration's identity across restarts, from its train options as plain data: a digest of those that
    differ from their defaults, without where its files go (its output folder, the sweep's matmul peak: a sweep
    moved elsewhere keeps its keys; and a release adding an option keeps the keys it had)."""
    defaults = {name: spec.default for name, spec in option_specs(TrainConfig).items()}
    kept = {k: v for k, v in options.items() if k not in _WHERE and v != _plain(defaults.get(k))}
    return hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


def run_dir(output_dir: str | Path, index: int, repeat: int, attempt: int = 0) -> Path:
    """A run's folder in the sweep's: ``runs/cfg<index>-r<repeat>`` (``-a<attempt>`` for a re-run)."""
    suffix = f"-a{attempt}" if attempt else ""
    return Path(output_dir) / "runs" / f"cfg{index:03d}-r{repeat}{suffix}"


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
    options = _run_options(spec, grid, run_dir(output_dir, index, repeat, attempt))
    # One matmul peak for the whole sweep: the first run on a machine measures it, every later one reads it back.
    options.setdefault("matmul_peak_cache", str(Path(output_dir) / "plan" / MATMUL_PEAK_FILE))
    try:
        config = TrainConfig.from_dict(options)
    except ConfigError as e:
        raise ConfigError(f"configuration {shown_grid(grid)}: {e}") from None
    return Run(index, repeat, grid, config, attempt, position)


def _run_options(spec: Spec, grid: dict[str, Any], folder: Path) -> dict[str, Any]:
    # The run folder is the sweep's: a run re-run after an interruption replaces what it had begun.
    return {**run_options(spec, grid), "output_dir": str(folder), "overwrite": True}


def expand(spec: Spec, output_dir: str | Path = ".", refused: Collection[int] = ()) -> Iterator[Run]:
    """Every run of the sweep, in the order the sweep runs them; none of the configurations ``refused`` (their
    indices: :func:`refused_configurations`)."""
    grids = configurations(spec)
    for position, (index, repeat) in enumerate(run_order(spec, len(grids))):
        if index not in refused:
            yield make_run(spec, index, grids[index], repeat, output_dir, position=position)


def refused_configurations(spec: Spec, files: bool = True, output_dir: str | Path = ".") -> list[Refused]:
    """Every configuration of the grid whose run would be refused before it starts, as ``ignite-ddl train`` checks
    it (``trainer.checks.check_training``), with why: options that cannot go together; whatever the machine
    (``trainer.checks.check_arrangement``: a batch that does not divide, a strategy this many processes cannot run,
    options of another strategy); a dataset whose files are missing (``files``: where the runs are local; a SLURM
    node may see other files), an unreachable tracker, a workload that does not import or returns what cannot be
    trained. Each distinct model, dataset, tracker and workload is checked once. The trainer's modules (torch) are
    imported here, when a sweep is about to run, not when a spec is read.

    Refuses (:class:`ConfigError`, one line) what is wrong whatever the combination, an unknown model, and a spec
    whose every configuration is refused: nothing would run. ``output_dir``: the sweep's folder (where a refused
    configuration's run would have gone, as its record says)."""
    refused = []
    seen: dict[tuple[Any, ...], str | None] = {}
    grids = configurations(spec)
    for index, grid in enumerate(grids):
        reason = options_refusal(spec, grid)
        if reason is None:
            reason = _refusal(TrainConfig.from_dict(run_options(spec, grid)), grid, files, seen, arrangement=True)
        if reason is not None:
            refused.append(Refused(index, grid, reason, _refused_options(spec, grid, run_dir(output_dir, index, 0))))
    if len(refused) == len(grids):
        raise ConfigError(all_refused([(r.grid, r.reason) for r in refused]))
    return refused


def check_configurations(spec: Spec, files: bool = True, grids: list[dict[str, Any]] | None = None) -> None:
    """Refuse (:class:`ConfigError`, naming the configuration) the first of ``grids`` (default: every configuration
    of the grid) whose run would be refused before it starts, as :func:`refused_configurations` finds it; with
    ``grids`` given (a search's: the parts of its space that decide what a run refuses, each checked before it
    starts), the checks that hold whatever the machine are left to each proposal."""
    seen: dict[tuple[Any, ...], str | None] = {}
    for grid in configurations(spec) if grids is None else grids:
        config = TrainConfig.from_dict(run_options(spec, grid))
        reason = _refusal(config, grid, files, seen, arrangement=grids is None)
        if reason is not None:
            raise ConfigError(f"configuration {shown_grid(grid)}: {reason}")


def _refusal(
    config: TrainConfig, grid: dict[str, Any], files: bool, seen: dict[tuple[Any, ...], str | None], arrangement: bool
) -> str | None:
    """Why this configuration's run would be refused before it starts (None: it would start); ``seen``: what was
    found of each model, dataset, tracker and workload checked before. An unknown model is no configuration's to
    refuse: a name no run can train is a mistake in the spec (:class:`ConfigError`)."""
    from ignite_ddl.trainer.data import check_dataset
    from ignite_ddl.trainer.models import check_model
    from ignite_ddl.trainer.run import check_arrangement
    from ignite_ddl.trainer.tracking import check_tracker

    if ("model", config.model) not in seen:
        seen["model", config.model] = None
        try:
            check_model(config.model)
        except ConfigError as e:
            raise ConfigError(f"configuration {shown_grid(grid)}: {e}") from None
    world = (config.nproc_per_node or 1) * config.nnodes
    checks: list[tuple[tuple[Any, ...], Callable[[], None]]] = []
    if files:
        dataset = ("dataset", config.dataset, config.data_dir, config.download)
        checks.append((dataset, functools.partial(check_dataset, config)))
    if config.workload is not None:
        key: tuple[Any, ...] = ("workload", config.workload, repr(config.workload_args), config.workload_dir)
        key += (config.batch_size, world, config.activation_checkpointing, config.early_stopping)
        key += (config.accumulate, config.amp)  # refused with a workload's own process_function
        checks.append((key, functools.partial(_check_workload, config, world)))
    if config.tracker != "none":
        checks.append((("tracker", config.tracker, config.tracking_uri), functools.partial(check_tracker, config)))
    # Whatever the machine: the batch split, the strategy for this many processes, options that exclude each
    # other. Every configuration, before the first run: not one refused per run after others ran.
    if arrangement:
        checks.append((("arrangement", repr(config.to_dict())), functools.partial(check_arrangement, config, world)))
    for key, check in checks:
        if key not in seen:
            try:
                check()
                seen[key] = None
            except ConfigError as e:
                seen[key] = one_line(str(e))
        if seen[key] is not None:
            return seen[key]
    return None


def _refused_options(spec: Spec, grid: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A refused configuration's options as plain data: every train option, as a run's record holds them (each
    value as its option reads it, where the options cannot make one configuration together)."""
    options = _run_options(spec, grid, folder)
    try:
        return cast(dict[str, Any], TrainConfig.from_dict(options).to_dict())
    except ConfigError:
        declared = option_specs(TrainConfig)
        full = {name: _plain(option.default) for name, option in declared.items()}
        return {**full, **{k: _plain(declared[k].coerce(k, v)) for k, v in options.items()}}


def _check_workload(config: TrainConfig, world: int) -> None:
    from ignite_ddl.trainer.workload import check_workload

    check_workload(config, world)


def launched(record: RunRecord) -> bool:
    """Whether a record is a run's, launched (False: a configuration refused before the sweep started: status
    ``refused`` and no exit status)."""
    return not (record.get("status") == "refused" and record.get("exit_code") is None)


def sweep_dir(spec: Spec, output_dir: str | Path | None = None) -> Path:
    """Where a sweep writes: ``output_dir``, else the spec's, else ``runs/<name>``."""
    return Path(output_dir or spec.output_dir or Path("runs") / spec.name)


def contended_reruns(spec: Spec, records: list[RunRecord], out: Path) -> list[Run]:
    """The next attempt of every repeat whose attempts so far all ran contended, up to ``rerun_contended`` re-runs."""
    attempts: dict[str, list[RunRecord]] = {}
    for record in records:
        if record["status"] != "interrupted" and launched(record):
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
