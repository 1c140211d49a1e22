"""JSON files written whole or not at all, and read back.

Example:
    >>> finite({"rate": float("nan"), "runs": [1.0, float("inf")]})
    {'rate': None, 'runs': [1.0, None]}
    >>> import datetime
    >>> not_json([1, {"when": datetime.date(2024, 1, 1)}])
    'datetime.date(2024, 1, 1) is of type date, which JSON cannot hold'
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ignite_ddl.core.outputs import write_bytes

__all__ = ["finite", "not_json", "read_json", "write_json"]


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON atomically: readers see the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, (json.dumps(finite(data), indent=2, allow_nan=False) + "\n").encode())


def finite(data: Any) -> Any:
    """NaN and infinities (figures that could not be measured) become null: JSON has no NaN."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def not_json(value: Any) -> str | None:
    """Why ``value`` cannot be written as JSON (one line), or None where it can: what YAML reads besides JSON's own
    types (a date, a timestamp, bytes, a set, a structure that holds itself) cannot be recorded."""
    found: list[Any] = []

    def refuse(thing: Any) -> Any:
        found.append(thing)
        raise TypeError

    try:
        json.dumps(value, default=refuse)
    except ValueError:  # json's only ValueError here: a circular reference, which YAML's anchors can make
        return "a structure that holds itself, which JSON cannot hold"
    except TypeError as e:
        if found:
            return f"{found[0]!r:.60} is of type {type(found[0]).__name__}, which JSON cannot hold"
        return f"{str(e).splitlines()[0]:.100}"  # a mapping keyed by a tuple (from Python)
    return None


def read_json(path: str | Path) -> Any:
    with open(path) as f:
        return json.load(f)
