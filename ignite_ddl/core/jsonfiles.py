"""JSON files written whole or not at all, and read back.

Example:
    >>> finite({"rate": float("nan"), "runs": [1.0, float("inf")]})
    {'rate': None, 'runs': [1.0, None]}
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ignite_ddl.core.outputs import write_bytes

__all__ = ["finite", "read_json", "write_json"]


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


def read_json(path: str | Path) -> Any:
    with open(path) as f:
        return json.load(f)
