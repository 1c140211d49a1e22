"""A probe: a short run the plan makes, as the sweep makes its own runs, to measure what it cannot trace (the
runtime's own memory, a layout's compute). One way to run it and one rule for a probe that fails, for every probe.

A probe that fails is not run again by the same sweep (a failure is usually the configuration's own: running it
once per configuration asked about would cost the sweep a failed run each time), but it is not kept in the plan's
files either, so the next sweep of the same folder (``--resume``, or another call of ``sweep()``) tries again; a
figure a probe measured is kept in the plan's files.

Example:
    >>> remember_failure("out/plan/layout.json", "3f2a", {"error": "out of memory"})
    >>> failure("out/plan/layout.json", "3f2a")
    {'error': 'out of memory'}
    >>> forget_failures()  # a sweep starts
    >>> failure("out/plan/layout.json", "3f2a") is None
    True
"""

from __future__ import annotations

import datetime
from typing import Any

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.sweep.plan import Run
from ignite_ddl.sweep.spec import Spec

__all__ = ["failure", "forget_failures", "remember_failure", "run_probe"]

_failures: dict[tuple[str, str], dict[str, Any]] = {}  # (the plan's file, the probe's key) -> its failure


def run_probe(probe: TrainConfig, spec: Spec) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Run ``probe`` as ``spec`` starts its runs (its start method, timeout and contention threshold): its summary
    and what to keep beside a figure read from it (whether it was contended, when), or None and ``{"error": ...}``
    (its first line) where it did not complete."""
    from ignite_ddl.sweep.local import run_one

    record = run_one(Run(-1, 0, {}, probe), spec.timeout_s, spec.start, spec.contention_threshold)
    if record["status"] != "completed":
        return None, {"error": (record.get("error") or "the probe did not complete").splitlines()[0]}
    when = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return dict(record.get("summary") or {}), {"contended": record["contended"], "measured": when}


def remember_failure(where: str, key: str, entry: dict[str, Any]) -> None:
    """Keep a probe's failure (``{"error": ...}``) until the next sweep starts: ``where``, the plan's file its figure
    would have been kept in; ``key``, the probe's key there."""
    _failures[(where, key)] = entry


def failure(where: str, key: str) -> dict[str, Any] | None:
    """The failure :func:`remember_failure` kept for this probe, if this sweep already ran it and it failed."""
    return _failures.get((where, key))


def forget_failures() -> None:
    """A sweep starts: every probe that failed before is tried again."""
    _failures.clear()
