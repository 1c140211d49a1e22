"""What several benchmark scripts share: the machine line they start with, and the end of a benchmark that timed its
runs beside :class:`ignite_ddl.measure.contention.ForeignLoad` (the largest share of the CPUs other processes took,
a warning where that may have skewed the times, the results written as JSON).

Not a benchmark itself: the scripts import it as a sibling module (``python benchmarks/NAME.py`` puts this folder
first on ``sys.path``), as they import :func:`overhead.machine`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
from overhead import machine


def print_machine() -> dict[str, Any]:
    """The machine (:func:`overhead.machine`), said on one line: CPU, cores, torch and ignite."""
    info = machine()
    print(f"machine: {info['cpu']}, {info['cpu_cores']} cores | torch {info['torch']}, ignite {info['ignite']}")
    return info


def finish(results: dict[str, Any], busiest: float, json_path: Path | None) -> dict[str, Any]:
    """``results`` with ``foreign_cpu_share_max``: ``busiest``, the largest share of the CPUs other processes took
    while the runs were timed; a warning where it is over 5 %; written to ``json_path`` where one is given."""
    results["foreign_cpu_share_max"] = busiest
    if busiest > 0.05:
        print(f"warning: other processes used up to {busiest:.0%} of the CPUs; rerun on an idle machine")
    if json_path:
        json_path.write_text(json.dumps(results, indent=2))
    return results
