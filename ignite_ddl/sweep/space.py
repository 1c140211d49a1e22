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

__all__ = ["RANGE_KEYS", "Range", "is_range", "parse_range"]

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
