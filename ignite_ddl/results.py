"""Writing and reading the files every run leaves in its output directory (schema: docs/results.md)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON atomically: readers see the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(_finite(data), f, indent=2, allow_nan=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _finite(data: Any) -> Any:
    """NaN and infinities (figures that could not be measured) become null: JSON has no NaN."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def read_json(path: str | Path) -> Any:
    with open(path) as f:
        return json.load(f)
