"""Where a run ran, as a tuple of what makes runs comparable (versions, device, CPU, cores): from its record, else
from the ``config.json`` its run folder keeps; and the environments of a sweep, numbered and labelled where runs
differ, so that each has its own verdict."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ignite_ddl.report.model import Flag
from ignite_ddl.report.values import as_count, as_dict

__all__ = ["ENVIRONMENT_FIELDS", "Machine", "environments_of", "machine_of"]

# What makes runs comparable, besides intra-op threads (checked per configuration): a run's environment.
ENVIRONMENT_FIELDS = ("torch", "Ignite", "CUDA", "torch_xla", "device", "CPU", "CPU cores")
Machine = tuple[Any, ...]  # one value per ENVIRONMENT_FIELDS entry, None where the run does not say
CONFIG_JSON_LIMIT = 1 << 20  # a run's config.json is a few kB: more is not one


def machine_of(record: Mapping[str, Any], summary: dict[str, Any]) -> Machine:
    """What the run ran on, from its record (the first sweeps' records held ``versions`` and ``host``), else from
    the config.json its run folder keeps."""
    versions = as_dict(summary.get("versions")) or as_dict(record.get("versions"))
    host = as_dict(summary.get("host")) or as_dict(record.get("host"))
    if not versions or not host:
        written = _written_facts(str(record.get("run_dir") or ""))
        versions, host = versions or as_dict(written.get("versions")), host or as_dict(written.get("host"))
    device = as_dict(summary.get("device"))
    kind, name = _text(device.get("type")), _text(device.get("name"))

    def version(package: str) -> str | None:
        return (_text(versions.get(package)) or "") if versions else None

    return (
        version("torch"),
        version("ignite"),
        version("cuda"),
        version("torch_xla"),
        None if kind is None else (kind if kind == "cpu" or name is None else f"{kind} {name}"),
        _text(host.get("cpu")) or (name if kind == "cpu" else None),
        as_count(summary.get("cpu_cores")) or as_count(host.get("cpu_cores")),
    )


def environments_of(runs: Iterable[tuple[Machine, Any]]) -> tuple[dict[Machine, tuple[int, str | None]], Flag | None]:
    """Each environment seen among ``runs`` (what each ran on, where its record is), as (number, label): runs that
    agree on every field both of them know share one; numbered in the order they first appear in the results. One
    environment has no label and no flag; several are flagged, each to have its own verdict."""
    counts: dict[Machine, int] = {}
    first: dict[Machine, Any] = {}  # where its first run is in the results
    for machine, where in runs:
        counts[machine] = counts.get(machine, 0) + 1
        if machine not in first or where < first[machine]:
            first[machine] = where
    known: list[Machine] = []  # the most specific first: the others join the first they agree with
    joined: dict[Machine, int] = {}
    for machine in sorted(counts, key=lambda m: (sum(v is None for v in m), first[m])):
        home = next((i for i, env in enumerate(known) if _agree(machine, env)), None)
        if home is None:
            home = len(known)
            known.append(machine)
        joined[machine] = home
    if len(known) < 2:
        return {machine: (0, None) for machine in counts}, None
    runs_of = [0] * len(known)
    seen_first: list[Any] = [None] * len(known)
    for machine, home in joined.items():
        runs_of[home] += counts[machine]
        if seen_first[home] is None or first[machine] < seen_first[home]:
            seen_first[home] = first[machine]
    order = sorted(range(len(known)), key=lambda i: seen_first[i])
    number = {home: n for n, home in enumerate(order)}
    differ = [i for i in range(len(ENVIRONMENT_FIELDS)) if len({env[i] for env in known if env[i] is not None}) > 1]

    def label(env: Machine) -> str:
        return ", ".join(f"{ENVIRONMENT_FIELDS[i]} {_shown_value(env[i])}" for i in differ if env[i] is not None)

    labels = {home: f"env {number[home] + 1} ({label(known[home])})" for home in range(len(known))}
    described = "; ".join(f"{labels[home]}: {runs_of[home]} run(s)" for home in order)
    flag = Flag(
        "mixed-environments",
        None,
        f"{len(known)} environments that differ in {', '.join(ENVIRONMENT_FIELDS[i] for i in differ)}: "
        f"{described}; each has its own verdict",
    )
    return {machine: (number[home], labels[home]) for machine, home in joined.items()}, flag


def _agree(a: Machine, b: Machine) -> bool:
    return all(x is None or y is None or x == y for x, y in zip(a, b))


def _text(value: Any) -> str | None:
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def _shown_value(value: Any) -> str:
    return "none" if value == "" else str(value)


def _written_facts(run_dir: str) -> dict[str, Any]:
    """The run's config.json (its versions and host), or nothing where it cannot be read."""
    if not run_dir:
        return {}
    try:
        with open(Path(run_dir) / "config.json", "rb") as f:
            return as_dict(json.loads(f.read(CONFIG_JSON_LIMIT)))
    except (OSError, ValueError):
        return {}
