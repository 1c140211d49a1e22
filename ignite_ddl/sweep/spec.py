"""A sweep's spec: what to run and how, every key declared once (as every option of the suite is), read from YAML or
from the command line (``ignite-ddl sweep`` has a flag per key).

    name: quickstart            # the sweep's name (default output directory: runs/<name>)
    base:                       # TrainConfig options shared by every configuration
      epochs: 2
    grid:                       # every combination of these values is one configuration
      nproc_per_node: [1, 2]
      batch_size: [32, 128]
    repeats: 3                  # runs per configuration: the unit of replication of every comparison
    order: interleaved          # interleaved (default) | shuffled | grouped
    timeout_s: 600              # wall-time limit of one run
    search:                     # optional: search the grid instead of running all of it (sweep.search)
      sampler: tpe              # tpe | gp | random (Optuna's)
      budget_runs: 60           # at most this many runs in all (and/or budget_s: seconds)

**Search.** With ``search:`` the grid is a space to search (:mod:`ignite_ddl.sweep.search`): an axis may then also be
a range of a numeric option (``batch_size: {low: 16, high: 512, log: true, step: 16}``, :mod:`ignite_ddl.sweep.space`),
and the space may be larger than a grid sweep may enumerate.

**Your own workload.** ``base: {workload: my_project.bench:make}`` (or a top-level ``workload:`` that is one import
path, moved there) trains what that function returns (:mod:`ignite_ddl.trainer.workload`); its module is looked for
in the spec's folder first (``workload_dir``, set when the spec is read from a file), then the working folder. Each
of its arguments is a key of its own, ``workload_args.d_model: 128`` in ``base``, ``workload_args.d_model: [64, 128]``
in ``grid``: a sweep axis, a column of the report and an HParams hyperparameter.

**Bounds.** A grid has at most :data:`MAX_CONFIGURATIONS` (10,000) configurations and a sweep plans at most
:data:`MAX_RUNS` (100,000) runs (configurations x repeats, or x max_repeats when adaptive): both are counted from
the lengths of the grid's axes before any configuration is built, and a spec past them is refused in one line.

Example:
    >>> spec = parse_spec({"name": "demo", "grid": {"nproc_per_node": [1, 2]}, "repeats": 2})
    >>> spec.repeats, spec.order, spec.workload
    (2, 'interleaved', ('model', 'dataset', 'amp', 'optimizer', 'sync_bn', 'workload', 'workload_args'))
    >>> parse_spec({"grid": {"nproc_per_node": [1, 2]}, "repeats": 0})
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: repeats must be >= 1, got 0
"""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ignite_ddl.core.config import MAX_TIMEOUT_S, WORKLOAD_OPTIONS, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.jsonfiles import not_json
from ignite_ddl.core.options import Options, Role, option, option_flag, option_specs
from ignite_ddl.measure.contention import CONTENTION_THRESHOLD
from ignite_ddl.report.model import QUALITY_MARGIN, QUALITY_MARGIN_LOSS
from ignite_ddl.report.stats import EQUIVALENCE_MARGIN
from ignite_ddl.sweep.busy import BUSY_POLICIES
from ignite_ddl.sweep.grid import (
    MAX_CONFIGURATIONS,
    SWEEP_DEFAULTS,
    WORKLOAD_ARG,
    all_refused,
    check_values,
    configurations,
    excluded,
    options_refusal,
    run_options,
    shown_grid,
)
from ignite_ddl.sweep.space import Range, is_range, parse_range

# The grid's names (sweep.grid) stay importable from here, where the sweep's modules and tests import them.
__all__ = [
    "EXECUTORS",
    "MAX_CONFIGURATIONS",
    "MAX_RUNS",
    "ORDERS",
    "SAMPLERS",
    "SearchOptions",
    "STARTS",
    "SWEEP_DEFAULTS",
    "SlurmOptions",
    "Spec",
    "configurations",
    "excluded",
    "search_axes",
    "space_size",
    "load_spec",
    "parse_spec",
    "run_options",
    "shown_grid",
]

ORDERS = ("interleaved", "shuffled", "grouped")
STARTS = ("preloaded", "fresh")
EXECUTORS = ("local", "slurm")
SAMPLERS = ("tpe", "gp", "random")


def _env_int(name: str, default: int) -> Any:
    """An integer default from the environment; a value that is not one is refused when a spec is checked."""
    value = os.environ.get(name, str(default))
    return int(value) if value.strip().lstrip("-").isdigit() else value


def _env_flag(name: str, default: bool) -> Any:
    """A yes/no default from the environment (1/0, true/false, yes/no); another value is refused when a spec is
    checked."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    return {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}.get(value, value)


MAX_REPEATS = 10_000
# The most runs a sweep may plan (configurations x repeats, or x max_repeats when adaptive): each run is planned
# before the first starts. The most configurations, MAX_CONFIGURATIONS, is the grid's (sweep.grid).
MAX_RUNS = 100_000


def _repeats_text(text: str) -> int | str:
    """``--repeats``: a count, or ``auto``."""
    if text.strip() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {text!r}") from None


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # a folder name under runs/, never a path


@dataclass(frozen=True, kw_only=True)
class SlurmOptions(Options):
    """What every job of a sweep asks SLURM for, beyond its nodes and tasks (None: the cluster's default)."""

    partition: str | None = option(None, "the partition (default: the cluster's default)", role=Role.SWEEP)
    time_limit_min: int | None = option(
        None,
        "each job's time limit in minutes (default: timeout_s in whole minutes)",
        role=Role.SWEEP,
        low=1,
        high=366 * 24 * 60,
    )
    gpus_per_node: int | None = option(
        None, "GPUs per node (default: nproc_per_node for nccl runs)", role=Role.SWEEP, low=1, high=1024
    )
    cpus_per_task: int | None = option(None, "CPUs per task (rank)", role=Role.SWEEP, low=1, high=65536)
    poll_s: float = option(
        5.0, "how often the sweep asks SLURM about its jobs, seconds", role=Role.SWEEP, low=0.1, high=3600
    )

    def check(self) -> None:
        if self.partition is not None and not re.fullmatch(r"[\w.-]+", self.partition):
            raise ConfigError(f"slurm 'partition' must be a partition name, got {self.partition!r:.80}")


@dataclass(frozen=True, kw_only=True)
class SearchOptions(Options):
    """A search of the spec's grid (:mod:`ignite_ddl.sweep.search`): Optuna's sampler, and the budget."""

    sampler: str = option(
        "tpe",
        "Optuna's sampler: tpe (tree-structured Parzen estimator), gp (Gaussian process, fits the runs' noise) or "
        "random",
        role=Role.SWEEP,
        choices=SAMPLERS,
    )
    budget_runs: int | None = option(
        None, "the most runs the search may start, its final repeats included", role=Role.SWEEP, low=1, high=MAX_RUNS
    )
    budget_s: float | None = option(
        None,
        "no run is started that would end the search past this many seconds",
        role=Role.SWEEP,
        low=0,
        low_open=True,
        high=MAX_TIMEOUT_S * MAX_REPEATS,
    )
    seed: int = option(0, "the sampler's seed", role=Role.SWEEP, low=0, high=2**32 - 1)
    max_parallel: int = option(
        1, "configurations measured at once (the slurm executor; a local search runs one)", role=Role.SWEEP, low=1
    )
    guided: bool | None = option(
        None,
        "steer the sampler with the plan's predictions: never run what is predicted not to fit memory_limit_mb, "
        "one process first, then whatever is predicted to match the leader, the fastest first (default: true "
        "where the spec predicts and the runs are local; false: the sampler alone)",
        role=Role.SWEEP,
    )

    def check(self) -> None:
        if self.budget_runs is None and self.budget_s is None:
            raise ConfigError("search needs a budget: budget_runs (runs) or budget_s (seconds), or both")


@dataclass(frozen=True, kw_only=True)
class Spec(Options):
    """A sweep: the grid of configurations, how many runs each, in what order, where, and on what executor."""

    name: str = option("sweep", "the sweep's name: its folder is runs/<name>", role=Role.SWEEP)
    base: dict[str, Any] = option(factory=dict, help="train options shared by every configuration", role=Role.SWEEP)
    grid: dict[str, Any] = option(
        factory=dict, help="train option -> list of values; every combination is a configuration", role=Role.SWEEP
    )
    exclude: list[dict[str, Any]] = option(
        factory=list,
        help="combinations of the grid not to run: each a mapping of grid options to values, e.g. "
        "[{strategy: fsdp, nproc_per_node: 1}]",
        role=Role.SWEEP,
    )
    repeats: int = option(
        1,
        "runs per configuration: the unit of replication of every comparison; 'auto': adaptive repeats",
        role=Role.SWEEP,
        low=1,
        high=MAX_REPEATS,
        parse=_repeats_text,
        metavar="INT|auto",
    )
    adaptive: bool = option(
        False,
        "adaptive repeats (what 'repeats: auto' sets): after min_repeats rounds, more rounds only for the "
        "configurations that can still be the best, until a best is separated, the contenders are equivalent "
        "within equivalence_margin, max_repeats rounds were run, or budget_s is spent",
        role=Role.SWEEP,
    )
    min_repeats: int = option(
        3,
        "the fewest usable runs (completed, settled, not contended) a configuration needs to be judged (named best "
        "or recommended); with adaptive repeats, the rounds every configuration gets",
        role=Role.SWEEP,
        low=2,
        high=MAX_REPEATS,
    )
    max_repeats: int = option(
        15, "adaptive repeats: the most rounds a configuration gets", role=Role.SWEEP, low=2, high=MAX_REPEATS
    )
    budget_s: float | None = option(
        None,
        "adaptive repeats: no round is started that would end the sweep past this many seconds",
        role=Role.SWEEP,
        low=0,
        low_open=True,
        high=MAX_TIMEOUT_S * MAX_REPEATS,
    )
    equivalence_margin: float = option(
        EQUIVALENCE_MARGIN,
        "adaptive repeats and the verdict: configurations whose mean throughputs are shown within this share of "
        "each other (two one-sided tests, each at the 5 percent level) are equivalent",
        role=Role.SWEEP,
        low=0,
        low_open=True,
        high=0.5,
    )
    quality_margin: float = option(
        QUALITY_MARGIN,
        "the verdict: a configuration whose validation accuracy is below its workload's reference configuration's "
        "(the first without gradient compression) by more than this (a share: 0.01 is one point), the whole interval "
        "of the difference over repeats, learns worse and is never recommended",
        role=Role.SWEEP,
        low=0,
        high=1,
    )
    quality_margin_loss: float = option(
        QUALITY_MARGIN_LOSS,
        "the verdict, where a workload is judged by validation loss (it reports no accuracy, or it is a language "
        "model): a configuration whose validation loss is above its workload's reference configuration's by more "
        "than this share of the reference's mean loss (0.02: 2 percent), the whole interval of the difference over "
        "repeats, learns worse and is never recommended",
        role=Role.SWEEP,
        low=0,
        high=1,
    )
    timeout_s: float = option(
        600.0, "wall-time limit of one run, seconds", role=Role.SWEEP, low=0, low_open=True, high=MAX_TIMEOUT_S
    )
    output_dir: str | None = option(
        None, "where results.jsonl, runs/ and the report go (default runs/<name>)", role=Role.SWEEP, path=True
    )
    order: str = option(
        "interleaved",
        "run order of the repeats: interleaved (every configuration once per round) | shuffled | grouped",
        role=Role.SWEEP,
        choices=ORDERS,
    )
    seed: int = option(0, "seed of the shuffled order", role=Role.SWEEP, low=0, high=2**32 - 1)
    start: str = option(
        "preloaded",
        "start runs from a fork server with torch imported (preloaded) or a fresh interpreter",
        role=Role.SWEEP,
        choices=STARTS,
    )
    workload: tuple[str, ...] = option(
        WORKLOAD_OPTIONS,
        "train options that fix the work per sample: configurations are ranked only within one workload",
        role=Role.SWEEP,
    )
    contention_threshold: float = option(
        CONTENTION_THRESHOLD,
        "share of the machine other processes may use before a run counts as contended",
        role=Role.SWEEP,
        low=0,
        low_open=True,
        high=1,
    )
    rerun_contended: int = option(
        0, "re-run a run up to N times while other processes contend for the machine", role=Role.SWEEP, low=0, high=100
    )
    # The busy-machine defaults may come from the environment: a CI runner or a test suite that must run on a
    # shared machine sets IGNITE_DDL_ON_BUSY=run and IGNITE_DDL_BUSY_STOP_AFTER=0 (runs are still flagged).
    on_busy: str = option(
        os.environ.get("IGNITE_DDL_ON_BUSY", "wait"),
        "when other processes keep the machine busy before the sweep starts: wait for it to quieten (up to "
        "wait_quiet seconds), run anyway (runs are flagged contended), or stop (default: $IGNITE_DDL_ON_BUSY, "
        "else wait)",
        role=Role.SWEEP,
        choices=BUSY_POLICIES,
    )
    wait_quiet: float = option(
        60.0,
        "how long to wait for a busy machine to quieten before the sweep, seconds",
        role=Role.SWEEP,
        low=0,
        high=MAX_TIMEOUT_S,
    )
    busy_stop_after: int = option(
        _env_int("IGNITE_DDL_BUSY_STOP_AFTER", 3),
        "stop a local sweep when this many runs in a row were contended: the contention is not passing and "
        "re-runs cannot help (0: never; default: $IGNITE_DDL_BUSY_STOP_AFTER, else 3)",
        role=Role.SWEEP,
        low=0,
        high=10_000,
    )
    memory_limit_mb: float | None = option(
        None,
        "the memory one rank may use, MiB: configurations whose peak is above it are marked 'does not fit' and "
        "never recommended",
        role=Role.SWEEP,
        low=0,
        low_open=True,
        high=1 << 40,
    )
    predict: bool = option(
        _env_flag("IGNITE_DDL_PREDICT", True),
        "predict each configuration's peak memory per rank before the sweep (ignite-ddl plan) and record it beside "
        "what its runs measure; the runtime's own memory is measured once per machine by a short run of a tiny "
        "model, kept in <output_dir>/plan/ (default: $IGNITE_DDL_PREDICT, else true)",
        role=Role.SWEEP,
    )
    run_unfit: bool = option(
        False,
        "launch configurations predicted not to fit memory_limit_mb anyway (they are skipped otherwise; a run that "
        "then runs out of memory is recorded as out_of_memory)",
        role=Role.SWEEP,
    )
    executor: str = option(
        "local",
        "run configurations here, one after another (local), or as SLURM jobs via submitit (slurm)",
        role=Role.SWEEP,
        choices=EXECUTORS,
    )
    slurm: dict[str, Any] = option(factory=dict, help="the slurm executor's options", role=Role.SWEEP)
    search: dict[str, Any] = option(
        factory=dict,
        help="search the grid instead of running all of it: {sampler: tpe|gp|random, budget_runs, budget_s, seed, "
        "max_parallel, guided}; grid axes may then be ranges {low, high, log, step}",
        role=Role.SWEEP,
    )

    def check(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"a sweep's name is a folder name (letters, digits, '.', '_', '-'; at most 100), got {self.name!r:.80}"
            )
        if not all(isinstance(key, str) for key in self.base):
            raise ConfigError("spec 'base' must be a mapping of train options")
        if not self.grid:
            raise ConfigError("spec 'grid' must map at least one train option to a list of values")
        for key, values in self.grid.items():
            if is_range(values) and self.search:
                continue
            if is_range(values):
                raise ConfigError(f"grid option {key}: a range is searched, not enumerated (add search:)")
            if not isinstance(values, list) or not values:
                raise ConfigError(f"grid option {key} needs a non-empty list of values, got {values!r:.80}")
        self._check_recordable()
        if not self.search:
            self._check_size()
        if "output_dir" in self.base or "output_dir" in self.grid:
            raise ConfigError("output_dir is set per run by the sweep; use the spec's top-level output_dir")
        entries: list[Any] = list(self.exclude)  # from YAML: a list of anything
        for entry in entries:
            if not isinstance(entry, dict) or not entry or not set(entry) <= set(self.grid):
                raise ConfigError(f"spec 'exclude' holds mappings of grid options to values, got {entry!r:.80}")
        known = option_specs(TrainConfig)
        keys = {str(k) for k in (*self.base, *self.grid, *self.workload)}
        unknown = sorted(k for k in keys - set(known) if not k.startswith(WORKLOAD_ARG))
        if unknown:
            raise ConfigError(f"unknown train option(s) in the spec: {', '.join(unknown)}")
        SlurmOptions.from_dict(self.slurm)
        if self.min_repeats > self.max_repeats:
            raise ConfigError(f"min_repeats ({self.min_repeats}) is above max_repeats ({self.max_repeats})")
        if self.search:
            self._check_search()

    def _check_recordable(self) -> None:
        """Refuse a value the sweep's records cannot hold (sweep.json holds the spec, each record its configuration):
        YAML reads ``2024-01-01`` as a date, which JSON cannot write; an option's own type check refuses it where the
        option is declared, but a workload's argument and an exclusion take any value."""
        places = [*((f"base {k}", v) for k, v in self.base.items()), *((f"grid {k}", v) for k, v in self.grid.items())]
        for where, value in [*places, ("exclude", self.exclude)]:
            if (problem := not_json(value)) is not None:
                raise ConfigError(f"spec {where}: {problem} (a sweep records it); give it as a quoted string")

    def _check_search(self) -> None:
        """A search's own checks: its options, its ranges, a space of more than one configuration."""
        try:
            options = SearchOptions.from_dict(self.search)
        except ConfigError as e:
            raise ConfigError(f"search: {e}") from None
        if options.guided and not (self.predict and self.executor == "local"):
            raise ConfigError(
                "search guided: true needs the plan's predictions of this machine: predict: true and the local executor"
            )
        if options.max_parallel > 1 and self.executor != "slurm":
            raise ConfigError("search max_parallel > 1 needs the slurm executor: a local search measures one at a time")
        if options.budget_runs is not None and options.budget_runs < 2 * self.min_repeats:
            raise ConfigError(
                f"search budget_runs ({options.budget_runs}) leaves no room for two configurations of min_repeats "
                f"({self.min_repeats}) runs each: at least {2 * self.min_repeats}"
            )
        varied = [key for key in self.grid if key in self.workload]
        if varied:
            raise ConfigError(
                f"search: grid option {varied[0]} changes the workload (the work per sample), and samples/s of "
                "different workloads are not one objective: put it in base, one search per value"
            )
        known = option_specs(TrainConfig)
        for key, values in self.grid.items():
            declared = known.get(key)
            if declared is None:  # a workload's argument: its function checks it (a range needs a train option)
                if is_range(values):
                    parse_range(key, values, None)
                continue
            if is_range(values):
                found = parse_range(key, values, _numeric(key))
                for end in (found.low, found.high):
                    try:
                        declared.coerce(key, int(end) if found.integer else end)
                    except ConfigError as e:
                        raise ConfigError(f"grid range {key}: {e}") from None
            else:
                for value in values:
                    try:
                        declared.coerce(key, value)
                    except ConfigError as e:
                        raise ConfigError(f"grid option {key}: {e}") from None
        if len(self.exclude) > MAX_CONFIGURATIONS:
            raise ConfigError(f"spec 'exclude' has {len(self.exclude)} entries: at most {MAX_CONFIGURATIONS}")
        if space_size(self) == 1:
            raise ConfigError("search over a grid of one configuration: nothing to search (run it as a sweep)")

    def search_options(self) -> SearchOptions | None:
        """The search's options, or None for a grid sweep."""
        return SearchOptions.from_dict(self.search) if self.search else None

    def _check_size(self) -> None:
        """Refuse a grid of more than MAX_CONFIGURATIONS, or a sweep of more than MAX_RUNS runs, counted from the
        lengths of its axes before a single configuration is built."""
        count = math.prod(len(values) for values in self.grid.values())
        if count > MAX_CONFIGURATIONS:
            axes = " x ".join(str(len(values)) for values in self.grid.values())
            raise ConfigError(
                f"the grid has {count:.3g} configurations ({axes}): at most {MAX_CONFIGURATIONS} per sweep; "
                "split it into several sweeps"
            )
        if len(self.exclude) > MAX_CONFIGURATIONS:
            raise ConfigError(f"spec 'exclude' has {len(self.exclude)} entries: at most {MAX_CONFIGURATIONS}")
        repeats = self.max_repeats if self.adaptive else self.repeats
        if count * repeats > MAX_RUNS:
            raise ConfigError(
                f"the sweep would plan {count * repeats:.3g} runs ({count} configurations x {repeats} "
                f"{'max_repeats' if self.adaptive else 'repeats'}): at most {MAX_RUNS}; split it into several sweeps"
            )

    def to_dict(self) -> dict[str, Any]:
        """As plain data that :func:`parse_spec` reads back as this spec: no search is no ``search`` key (an empty
        ``search: {}`` asks for one)."""
        values = super().to_dict()
        if not values.get("search"):
            values.pop("search", None)
        return values

    def slurm_options(self) -> SlurmOptions:
        return SlurmOptions.from_dict(self.slurm)


def load_spec(path: str | Path) -> Spec:
    """Read and validate a YAML spec; :class:`ConfigError` on anything wrong."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"cannot read spec {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"spec {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    spec = parse_spec(data, default_name=Path(path).stem)
    if ("workload" in spec.base or "workload" in spec.grid) and "workload_dir" not in spec.base:
        # A workload's module is found beside its spec first, wherever the sweep is started from (and its runs).
        base = {**spec.base, "workload_dir": str(Path(path).resolve().parent)}
        spec = parse_spec({**spec.to_dict(), "base": base}, default_name=Path(path).stem)
    return spec


# Spec keys whose default comes from an environment variable (see Spec.on_busy).
_FROM_ENVIRONMENT = {"on_busy": "IGNITE_DDL_ON_BUSY", "busy_stop_after": "IGNITE_DDL_BUSY_STOP_AFTER"}


def parse_spec(data: Any, default_name: str = "sweep") -> Spec:
    """Validate plain data as a spec: known keys of the right types, a non-empty grid of lists, every value one its
    option accepts, and at least one configuration whose options go together (the others are refused
    configurations: see :mod:`ignite_ddl.sweep.grid`)."""
    if not isinstance(data, dict):
        raise ConfigError("a sweep spec is a mapping with keys: " + ", ".join(option_specs(Spec)))
    unknown = sorted(set(map(str, data)) - set(option_specs(Spec)))
    if unknown:
        raise ConfigError(f"unknown spec key(s): {', '.join(unknown)} (allowed: {', '.join(option_specs(Spec))})")
    values = {**data, "name": data.get("name", default_name), "base": data.get("base") or {}}
    if isinstance(values.get("workload"), str):  # a workload's import path, not the list of workload axes
        values["base"] = {**values["base"], "workload": values.pop("workload")}
    values["slurm"] = data.get("slurm") or {}
    # 'search: {}' still asks for a search (and is told it needs a budget); absent or null, the grid is enumerated.
    search = data.get("search")
    if search is not None and not isinstance(search, dict):
        raise ConfigError(f"search is a mapping (sampler, budget_runs, budget_s, seed), got {search!r:.40}")
    values["search"] = {"sampler": "tpe", **search} if isinstance(search, dict) else {}
    specs = option_specs(Spec)
    repeats = values.get("repeats")
    # adaptive: the first rounds are the minimum, the rest are decided as they go ('auto ' as --repeats reads it)
    if isinstance(repeats, str) and repeats.strip() == "auto":
        values["adaptive"] = True
    if values.get("search"):  # a search measures each configuration min_repeats times, then repeats adaptively
        values["adaptive"] = True
    if values.get("adaptive"):
        least = values.get("min_repeats", specs["min_repeats"].default)
        specs["min_repeats"].coerce("min_repeats", least)  # refused under its own name, not as repeats
        values["repeats"] = least
    for key, variable in _FROM_ENVIRONMENT.items():  # a default taken from the environment: name the variable
        if key not in values and variable in os.environ:
            try:
                specs[key].coerce(key, specs[key].default)
            except ConfigError as e:
                raise ConfigError(f"{e}, from ${variable} (fix or unset it, or pass {option_flag(key)})") from None
    if isinstance(values["name"], (int, float)) and not isinstance(values["name"], bool):
        values["name"] = str(values["name"])  # a YAML name like 2024 reads as a number
    spec = Spec.from_dict(values)
    if spec.search:  # a space too large to enumerate: each proposal is checked as it comes, and skipped if refused
        return spec
    grids = configurations(spec)
    if not grids:
        raise ConfigError("spec 'exclude' leaves no configuration of the grid to run")
    check_values(spec)  # a value wrong on its own: the spec is wrong, before anything runs
    # A combination of options that cannot go together is one refused configuration (the sweep records it and runs
    # the others); a spec of nothing but those is refused whole.
    refused = [(grid, reason) for grid in grids if (reason := options_refusal(spec, grid)) is not None]
    if len(refused) == len(grids):
        raise ConfigError(all_refused(refused))
    return spec


def _numeric(name: str) -> type | None:
    """The type of a train option that holds one number (int or float), or None: a range is allowed on it."""
    declared = option_specs(TrainConfig).get(name)
    return declared.kind if declared is not None and declared.kind in (int, float) and not declared.many else None


def search_axes(spec: Spec) -> tuple[dict[str, list[Any]], dict[str, Range]]:
    """A search's axes: (the lists of values, the ranges), each in grid order."""
    lists = {k: v for k, v in spec.grid.items() if not is_range(v)}
    ranges = {k: parse_range(k, v, _numeric(k)) for k, v in spec.grid.items() if is_range(v)}
    return lists, ranges


def space_size(spec: Spec) -> int | None:
    """How many configurations the grid holds (None: a continuous range, without end). Exact, exclusions
    counted, where the grid is lists small enough to enumerate; else the product of the axes' sizes."""
    lists, ranges = search_axes(spec)
    sizes = [r.size() for r in ranges.values()]
    if any(size is None for size in sizes):
        return None
    count = math.prod(len(v) for v in lists.values()) * math.prod(s for s in sizes if s is not None)
    if not ranges and count <= MAX_CONFIGURATIONS:
        return len(configurations(spec))
    return count
