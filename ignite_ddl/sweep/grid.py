"""A spec's grid as configurations: every combination of its values but those it excludes, each one's train
options (the sweep's defaults, the spec's base, its grid values), and a configuration as a message shows it.

**Refused values, refused configurations.** A value its option refuses on its own (a wrong type, out of range, not
among its choices) is a mistake in the spec: the whole spec is refused (:func:`check_values`). A combination the
options refuse together (``early_stopping`` without evaluations, ...) refuses that configuration only
(:func:`options_refusal`): the sweep records it as refused and runs the others; a spec whose every configuration is
refused is refused whole (:func:`all_refused`).
"""

from __future__ import annotations

import itertools
import math
import reprlib
from typing import TYPE_CHECKING, Any

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import option_specs
from ignite_ddl.sweep.space import is_range

if TYPE_CHECKING:
    from ignite_ddl.sweep.spec import Spec

__all__ = [
    "MAX_CONFIGURATIONS",
    "SWEEP_DEFAULTS",
    "WORKLOAD_ARG",
    "all_refused",
    "check_values",
    "configurations",
    "excluded",
    "options_refusal",
    "run_options",
    "shown_grid",
]

# The most configurations a grid may have: each configuration is checked (and, with predictions, planned) before
# the first run, so a grid of 10^6 would take minutes and gigabytes before anything happened (a search of a larger
# space proposes its configurations one at a time and never lists them). A few thousand runs is a large SLURM sweep;
# beyond this, split the sweep (one spec per part of the grid).
MAX_CONFIGURATIONS = 10_000
WORKLOAD_ARG = "workload_args."  # a spec key naming one argument of the workload's function
# What a sweep's runs do unless its spec says otherwise: measure, and spend no time on what a comparison of
# throughput does not need: no checkpoints, no best model, one evaluation after the last epoch.
SWEEP_DEFAULTS: dict[str, Any] = {"checkpoints": False, "best_model": False, "eval_every": 0, "progress": False}


# A configuration as a message shows it: a grid value may be a YAML alias bomb (10^7 strings in 0.5 kB of spec), and
# an error message naming it must stay one short line.
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxstring, _SHORT.maxother = 2, 8, 6, 6, 60, 60


def shown_grid(grid: dict[str, Any]) -> str:
    """A configuration's grid values for a message: ``{'seed': 1}``, cut short where a value is large."""
    text = _SHORT.repr(dict(grid)).replace("\n", "\\n")
    return text if len(text) <= 120 else text[:117] + "..."


def run_options(spec: Spec, grid: dict[str, Any]) -> dict[str, Any]:
    """A configuration's train options: the sweep's defaults, then the spec's base, then its grid values.

    A spec that sets ``checkpoint_every`` asks for checkpoints.
    """
    options = {**spec.base, **grid}
    # workload_args.KEY entries (each a column of the report, and a sweep axis) are the workload's arguments.
    arguments = {k.removeprefix(WORKLOAD_ARG): options.pop(k) for k in sorted(options) if k.startswith(WORKLOAD_ARG)}
    if arguments:
        options["workload_args"] = {**options.get("workload_args", {}), **arguments}
    defaults = dict(SWEEP_DEFAULTS)
    if options.get("checkpoint_every"):
        defaults["checkpoints"] = True
    return {**defaults, **options}


def configurations(spec: Spec) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in grid order, but those the spec excludes. Refused
    (:class:`ConfigError`, one line) before a single one is built where there would be more than
    :data:`MAX_CONFIGURATIONS` (counted from the lengths of the axes), or where an axis is a range."""
    if any(is_range(values) for values in spec.grid.values()):
        raise ConfigError("a grid with ranges is searched, not enumerated (each configuration is planned as proposed)")
    count = math.prod(len(values) for values in spec.grid.values())
    if count > MAX_CONFIGURATIONS:
        axes = " x ".join(str(len(values)) for values in spec.grid.values())
        raise ConfigError(
            f"the grid has {count:.3g} configurations ({axes}): at most {MAX_CONFIGURATIONS} are listed, checked or "
            "planned at once; split it into several specs (or search it: a search plans each configuration it "
            "proposes)"
        )
    keys = list(spec.grid)
    combinations = [dict(zip(keys, values)) for values in itertools.product(*(spec.grid[k] for k in keys))]
    return [c for c in combinations if not excluded(spec, c)]


def excluded(spec: Spec, grid: dict[str, Any]) -> bool:
    """Whether the spec's ``exclude`` names this configuration."""
    return any(all(k in grid and grid[k] == v for k, v in e.items()) for e in spec.exclude)


def check_values(spec: Spec) -> None:
    """Refuse (:class:`ConfigError`) a spec with a value its option refuses on its own, whatever it is combined with:
    a base option's, or a grid value of a configuration the spec does not exclude."""
    declared = option_specs(TrainConfig)
    for key, value in spec.base.items():
        if key in declared:  # a workload's argument (workload_args.KEY) is its function's to check
            declared[key].coerce(key, value)
    checked: set[tuple[str, str]] = set()
    for grid in configurations(spec):
        for key, value in grid.items():
            if key not in declared or (key, repr(value)) in checked:
                continue
            checked.add((key, repr(value)))
            try:
                declared[key].coerce(key, value)
            except ConfigError as e:
                raise ConfigError(f"grid option {key}: {e}") from None


def options_refusal(spec: Spec, grid: dict[str, Any]) -> str | None:
    """Why the options of this configuration cannot go together (one line), or None where they can."""
    try:
        TrainConfig.from_dict(run_options(spec, grid))
    except ConfigError as e:
        return one_line(str(e))
    return None


def one_line(text: str) -> str:
    """A reason as a record and a report show it: its first line."""
    return (text.strip().splitlines() or [""])[0]


def all_refused(refused: list[tuple[dict[str, Any], str]]) -> str:
    """The one line that refuses a spec whose every configuration is refused: the first one's reason (``refused``:
    each configuration's grid values and reason, in grid order)."""
    grid, reason = refused[0]
    first = f"configuration {shown_grid(grid)}: {reason}"
    if len(refused) == 1:
        return first
    return f"all {len(refused)} configurations of the grid are refused, nothing to run; the first, {first}"
