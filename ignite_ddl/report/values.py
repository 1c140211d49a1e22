"""Values a results file holds, checked before use: a summary may hold foreign data, so each field is taken only
when it is what the report expects (a finite number, a mapping, a positive count)."""

from __future__ import annotations

import math
from typing import Any, cast

from ignite_ddl.core.schema import Summary

__all__ = ["as_count", "as_dict", "as_float", "as_summary", "is_number"]


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a mapping, else an empty one: results files may hold foreign data."""
    return value if isinstance(value, dict) else {}


def as_summary(value: Any) -> Summary:
    """``value`` as a run's summary.json, typed as the schema declares it so that every key read is checked
    against the schema (mypy); what is read must still be tested, for a file of an older release may lack a key or
    hold another shape."""
    return cast(Summary, as_dict(value))


def is_number(value: Any) -> bool:
    """A finite int or float (a bool is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def as_float(value: Any) -> float | None:
    return float(value) if is_number(value) else None


def as_count(value: Any) -> int | None:
    """A count a run can report (threads, cores): a positive integer, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
