"""A search's space: the spec's ``grid``, where an axis may also be a **range** of a numeric train option instead of a
list of values.

    grid:
      nproc_per_node: [1, 2]                                   # a list: one of these values
      batch_size: {low: 16, high: 512, log: true, step: 16}    # a range: any multiple of 16 from 16 to 512
      bucket_cap_mb: {low: 1, high: 100, log: true}            # a float range: any value in [1, 100]

**Which options allow a range.** A train option whose value is one number: an ``int`` or a ``float`` (not a flag,
not a list, not a name): ``batch_size``, ``accumulate``, ``threads``, ``bucket_cap_mb``, ``lr``, ``epochs``, ...
A range needs ``low`` and ``high`` (inclusive, each checked against the option's own bounds, ``low <= high``); ``log:
true`` draws on a log scale (both ends > 0); ``step`` keeps to ``low + k * step`` (an int option's step is an
integer, 1 unless given). Ranges are only read by a search: a grid sweep enumerates lists.

With ``log`` and ``step`` together (Optuna draws log-scaled integers only with step 1), a value is drawn on the log
scale and rounded to the nearest step, so ``{low: 16, high: 512, log: true, step: 16}`` favours small batches as
``log`` asks and proposes only multiples of 16.

:class:`Space` is the grid as Optuna's distributions: what a trial proposes (``suggest``), and the parameters that
propose given grid values (``params``: what a guided search enqueues).

Example:
    >>> batch = parse_range("batch_size", {"low": 16, "high": 512, "step": 16}, int)
    >>> batch.size(), batch.snap(100.0)
    (32, 96)
    >>> parse_range("lr", {"low": 0.1, "high": 0.01}, float)
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: grid range lr: low (0.1) is above high (0.01)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ignite_ddl.core.errors import ConfigError

__all__ = ["RANGE_KEYS", "Range", "Space", "is_range", "parse_range"]

RANGE_KEYS = ("low", "high", "log", "step")


def is_range(values: Any) -> bool:
    """Whether a grid axis is a range (a mapping) rather than a list of values."""
    return isinstance(values, dict)


@dataclass(frozen=True)
class Range:
    """A numeric axis of a search: ``low`` to ``high`` inclusive, on a log scale or not, in steps or not."""

    name: str
    low: float
    high: float
    log: bool = False
    step: float | None = None
    integer: bool = False

    def size(self) -> int | None:
        """How many values the range holds (None: a continuous range, without end)."""
        if self.step is None:
            return None if self.high > self.low else 1
        return int((self.high - self.low) // self.step) + 1

    def snap(self, value: float) -> int | float:
        """``value`` on the range's steps (nearest), within its ends, typed as the option is."""
        if self.step is not None:
            top = self.low + (self.size() or 1) * self.step - self.step
            value = min(top, max(self.low, self.low + round((value - self.low) / self.step) * self.step))
        value = min(self.high, max(self.low, value))
        return int(round(value)) if self.integer else float(value)

    def to_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "log": self.log, "step": self.step}


def parse_range(name: str, value: dict[str, Any], kind: type | None) -> Range:
    """A grid axis given as ``{low, high, log, step}`` for the train option ``name`` of type ``kind`` (None: the
    option is not one number, and a range is refused)."""
    where = f"grid range {name}"
    if kind not in (int, float):
        raise ConfigError(f"{where}: a range needs a numeric option (an int or a float); give a list of values")
    unknown = sorted(set(map(str, value)) - set(RANGE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (a range has: {', '.join(RANGE_KEYS)})")
    if "low" not in value or "high" not in value:
        raise ConfigError(f"{where}: needs both low and high")
    ends = {}
    for key in ("low", "high", "step"):
        got = value.get(key)
        if got is None and key == "step":
            continue
        allowed = (int,) if kind is int else (int, float)
        if isinstance(got, bool) or not isinstance(got, allowed) or not math.isfinite(got):
            raise ConfigError(f"{where}: {key} must be a finite {kind.__name__}, got {got!r:.40}")
        ends[key] = got
    low, high, step = ends["low"], ends["high"], ends.get("step")
    log = value.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{where}: log is true or false, got {log!r:.40}")
    if low > high:
        raise ConfigError(f"{where}: low ({low}) is above high ({high})")
    if step is not None and step <= 0:
        raise ConfigError(f"{where}: step must be > 0, got {step}")
    if log and low <= 0:
        raise ConfigError(f"{where}: a log range needs low > 0, got {low}")
    if kind is int and step is None:
        step = 1
    return Range(name, low, high, log, step, kind is int)


def _ordinal(values: list[Any]) -> bool:
    """A list of distinct numbers: proposed by position in sorted order, so the sampler sees their order."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return numbers and len(set(values)) == len(values)


class Space:
    """A search's grid as Optuna's distributions: a list of numbers an ordinal position, another list a category,
    a range an int or float distribution (``lists`` and ``ranges``: the axes, :func:`ignite_ddl.sweep.spec.
    search_axes`; ``order``: the grid's keys)."""

    def __init__(self, order: list[str], lists: dict[str, list[Any]], ranges: dict[str, Range]):
        self.order, self.lists, self.ranges = order, lists, ranges

    def suggest(self, trial: Any) -> dict[str, Any]:
        """The configuration ``trial`` proposes, as grid values."""
        grid: dict[str, Any] = {}
        for key in self.order:
            if key in self.lists:
                values = self.lists[key]
                if _ordinal(values):
                    ranked = sorted(values)
                    grid[key] = ranked[trial.suggest_int(key, 0, len(values) - 1)]
                else:
                    grid[key] = values[trial.suggest_categorical(key, list(range(len(values))))]
                continue
            r = self.ranges[key]
            if r.log and r.step is not None and r.step != 1:
                # Optuna draws log-scaled values only without a step: drawn on the log scale, snapped to the steps.
                grid[key] = r.snap(trial.suggest_float(key, r.low, r.high, log=True))
            elif r.integer:
                grid[key] = trial.suggest_int(key, int(r.low), int(r.high), step=int(r.step or 1), log=r.log)
            else:
                grid[key] = trial.suggest_float(key, r.low, r.high, step=r.step, log=r.log)
        return grid

    def params(self, grid: dict[str, Any]) -> dict[str, Any]:
        """The parameters under which :meth:`suggest` proposes ``grid`` (some of its axes or all): what Optuna's
        ``enqueue_trial`` is given to propose it."""
        params: dict[str, Any] = {}
        for key, value in grid.items():
            if key in self.lists:
                values = self.lists[key]
                listed = sorted(values) if _ordinal(values) else values
                # by type and value: True == 1 in Python, and a list may hold both
                params[key] = next(i for i, v in enumerate(listed) if type(v) is type(value) and v == value)
            elif key in self.ranges:
                r = self.ranges[key]
                params[key] = float(value) if (r.log and r.step not in (None, 1)) or not r.integer else int(value)
        return params
