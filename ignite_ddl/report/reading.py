"""Reading a sweep's records into configurations: a first pass keeps a few figures per run, adding each summary to
its configuration's figures as it is read, so that memory grows with the runs and configurations, not with the size
of the results; a second reads again only the summaries of runs a later attempt superseded. Runs made in different
environments, or with different thread counts, become configurations of their own. A summary may hold foreign
data: each of its fields is checked before it is used."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ignite_ddl.core.sweep_records import RunRecord
from ignite_ddl.report.environments import Machine, environments_of, machine_of
from ignite_ddl.report.model import ConfigResult, Flag, RunResult
from ignite_ddl.report.summaries import Figures
from ignite_ddl.report.values import as_count, as_dict, as_float, as_summary, is_number

__all__ = ["Reader", "workload_of"]


class _Bucket:
    """The runs of one configuration made in one environment with one thread count: the figures of those the
    verdict may use (completed, and not contended unless contended runs are counted) and of the other completed
    ones, accumulated as they are read. ``stale``: one of the first was superseded by a later attempt of its
    repeat, so the configuration's figures are read again from the runs it uses."""

    __slots__ = ("eligible", "others", "stale")

    def __init__(self) -> None:
        self.eligible = Figures()
        self.others: Figures | None = None
        self.stale = False


@dataclass(slots=True)
class _Seen:
    """A run as the first pass keeps it: its result, where its record is, what it ran on and in which bucket its
    figures were counted (None without a summary)."""

    run: RunResult
    where: Any
    world: Any
    machine: Machine | None
    threads: int | None
    bucket: _Bucket | None


@dataclass
class _Group:
    """A configuration's first record and its runs, per repeat, in the order read."""

    index: int
    grid: dict[str, Any]
    config: dict[str, Any]
    repeats: dict[int, list[_Seen]] = field(default_factory=dict)
    predicted: float | None = None  # bytes: the peak per rank its records say was predicted
    unpredicted: tuple[str, ...] = ()  # what that prediction says it leaves out


class Reader:
    """Reads records one at a time (:meth:`add`), keeping per run only what the verdict and the flags need, and
    adding its summary's figures to its configuration's as it goes; then builds the configurations
    (:meth:`configs`). ``fetch`` gives a record again from where it was read: needed only where a run counted in a
    configuration's figures turned out to be superseded by a later attempt."""

    def __init__(self, axes: Sequence[str], include_contended: bool) -> None:
        self.axes, self.include_contended = list(axes), include_contended
        self.groups: dict[str, _Group] = {}
        self.buckets: dict[tuple[str, Machine | None, int | None], _Bucket] = {}
        self.records = 0
        self.flags: list[Flag] = []
        self._machines: dict[Machine, Machine] = {}  # one tuple per distinct environment: thousands of runs share it

    def add(self, record: RunRecord, where: Any) -> None:
        self.records += 1
        if record["status"] == "interrupted":  # stopped with the sweep: neither a result nor a failure
            return
        key = record["key"].rsplit("-r", 1)[0]
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(record["index"], record["grid"], record["config"])
        prediction = as_dict(record.get("prediction"))
        predicted = prediction.get("peak_bytes")
        if is_number(predicted):
            group.predicted = as_float(predicted)
            left_out = prediction.get("unpredicted")
            group.unpredicted = tuple(str(u) for u in left_out) if isinstance(left_out, list) else ()
        summary = as_summary(record.get("summary"))
        contention = as_dict(summary.get("contention"))
        window = as_dict(as_dict(summary.get("steps")).get("global")).get("window_s")
        run = RunResult(
            repeat=record["repeat"],
            attempt=record.get("attempt", 0),
            position=record.get("position", 0),
            status=sys.intern(str(record["status"])),
            samples_per_s=as_float(summary.get("samples_per_s")),
            contended=bool(record.get("contended")),
            foreign_cpu_share=as_float(contention.get("foreign_cpu_share")),
            diverged=str(summary["diverged"]) if summary.get("diverged") else None,
            used=False,
            run_dir=str(record.get("run_dir", "")),
            error=None if record.get("error") is None else str(record["error"]),
            measured_s=as_float(window) if is_number(window) else as_float(summary.get("train_time_s")),
            elapsed_s=as_float(record.get("elapsed_s")),
            train_time_s=as_float(summary.get("train_time_s")),
            engine_s=as_float(summary.get("wall_time_s")),
            val_accuracy=as_float(summary.get("val_accuracy")),
            epochs=as_count(summary.get("epochs")),
            val_loss=as_float(summary.get("val_loss")),
        )
        seen = _Seen(run, None, None, None, None, None)
        if record["status"] == "completed" and record.get("summary"):
            seen.where, seen.world = where, summary.get("world_size")
            machine = machine_of(record, cast(dict[str, Any], summary))
            seen.machine = self._machines.setdefault(machine, machine)
            seen.threads = as_count(summary.get("threads_per_process"))
            bucket = self.buckets.get((key, seen.machine, seen.threads))
            if bucket is None:
                bucket = self.buckets[key, seen.machine, seen.threads] = _Bucket()
            seen.bucket = bucket
            if self.include_contended or not run.contended:
                bucket.eligible.add(summary, where)
            else:
                bucket.others = bucket.others or Figures()
                bucket.others.add(summary, where)
        group.repeats.setdefault(record["repeat"], []).append(seen)

    def configs(self, fetch: Callable[[Any], RunRecord]) -> list[ConfigResult]:
        environments, flag = environments_of(
            (seen.machine, seen.where)
            for group in self.groups.values()
            for attempts in group.repeats.values()
            for seen in attempts
            if seen.machine is not None
        )
        self.flags += [flag] if flag is not None else []
        configs: list[ConfigResult] = []
        parts: list[list[_Seen]] = []
        for group in self.groups.values():
            for config, members in self._split(group, self._choose(group), environments):
                configs.append(config)
                parts.append(members)
        again: list[tuple[Any, int]] = []  # (where, configuration) of the runs to read again
        figures = []
        for i, members in enumerate(parts):
            found = Figures()
            buckets = list({id(s.bucket): s.bucket for s in members if s.bucket is not None}.values())
            if not any(s.run.used for s in members):  # nothing usable: the figures of every completed run
                for bucket in buckets:
                    found.merge(bucket.eligible)
                    if bucket.others is not None:
                        found.merge(bucket.others)
            elif any(bucket.stale for bucket in buckets):
                again += [(s.where, i) for s in members if s.run.used]
            else:
                for bucket in buckets:
                    found.merge(bucket.eligible)
            figures.append(found)
        for where, i in sorted(again):
            figures[i].add(as_summary(fetch(where).get("summary")), where)
        by_index = {g.index: g for g in self.groups.values()}
        for config, found in zip(configs, figures):
            found.fill(config)
            if (planned := by_index.get(config.index)) is not None:
                config.predicted_memory, config.predicted_leaves_out = planned.predicted, planned.unpredicted
        order = sorted(range(len(configs)), key=lambda i: configs[i].index)  # stable: environments keep their order
        return [configs[i] for i in order]

    def _choose(self, group: _Group) -> list[_Seen]:
        """Every run of a configuration; per repeat, the last completed attempt that was not contended is used (or,
        with ``include_contended``, the last completed attempt)."""
        runs = []
        for _, attempts in sorted(group.repeats.items()):
            attempts.sort(key=lambda seen: seen.run.attempt)
            eligible = [s for s in attempts if s.where is not None and (self.include_contended or not s.run.contended)]
            if eligible:
                eligible[-1].run.used = True
                for superseded in eligible[:-1]:
                    cast(_Bucket, superseded.bucket).stale = True
            runs += attempts
        return runs

    def _split(
        self, group: _Group, runs: list[_Seen], environments: dict[Machine, tuple[int, str | None]]
    ) -> list[tuple[ConfigResult, list[_Seen]]]:
        """A configuration's runs as one result per environment, and within one, per intra-op thread count where
        its runs used several; runs without a summary go with its most common environment and thread count."""
        envs = [environments[s.machine] if s.machine is not None else None for s in runs]
        present = Counter(e for e in envs if e is not None)
        home = min(present, key=lambda e: (-present[e], e[0])) if present else (0, None)
        parts: dict[tuple[int, str | None], list[_Seen]] = defaultdict(list)
        for seen, env in zip(runs, envs):
            parts[env or home].append(seen)
        results = []
        for env in sorted(parts, key=lambda e: e[0]):
            members = parts[env]
            threads = Counter(s.threads for s in members if s.threads is not None)
            usual = max(threads, key=lambda t: threads[t]) if threads else None  # the most runs; the first on a tie
            by_threads: dict[Any, list[_Seen]] = {usual: []}
            for seen in members:
                by_threads.setdefault(seen.threads if seen.threads in threads else usual, []).append(seen)
            suffix = f"@env{env[0] + 1}" if env[0] else ""
            for count, runs_of in by_threads.items():
                result = self._result(group, runs_of, env[1], suffix)
                if count != usual:
                    result.suffix += f"@threads={count}"
                results.append((result, runs_of))
            if len(by_threads) > 1:
                name = f"cfg{group.index:03d}{suffix}"
                shown = ", ".join(f"{t} ({len(runs_of)} run(s))" for t, runs_of in by_threads.items())
                self.flags.append(
                    Flag(
                        "mixed-environments",
                        name,
                        f"its runs used different intra-op thread counts per process: {shown}; each count is "
                        f"reported as a configuration of its own ({name}, {name}@threads=...)",
                    )
                )
        return results

    def _result(self, group: _Group, members: list[_Seen], environment: str | None, suffix: str) -> ConfigResult:
        written = [s for s in members if s.where is not None]
        world = min(written, key=lambda s: s.where).world if written else None  # the first one written
        world = world if isinstance(world, int) and world > 0 else _world(group.config)
        workload = workload_of(group.config, self.axes) + (f"; {environment}" if environment else "")
        config = ConfigResult(group.index, group.grid, group.config, workload, world)
        config.environment, config.suffix = environment, suffix
        config.runs = [s.run for s in members]
        return config


def workload_of(config: dict[str, Any], axes: Sequence[str]) -> str:
    """The workload's label: its axes' values, "model=mlp, dataset=synthetic, amp=none, optimizer=sgd". An axis
    that is off (None, False, empty: no --workload, no arguments, no sync_bn) is left out, not printed as noise; each
    axis only ever takes one of those values, so two workloads never share a label."""
    # A --workload brings its own model and data: model and dataset are then unused defaults, not worth a word.
    unused = {"model", "dataset"} if config.get("workload") else set()
    shown = [(axis, config.get(axis)) for axis in axes if axis not in unused]
    return ", ".join(f"{axis}={_label_value(value)}" for axis, value in shown if _on(value)) or "all"


def _on(value: Any) -> bool:
    """Whether an option's value says something (0 and "none" do: they are chosen values, not absences)."""
    return value is not None and value is not False and value != {} and value != [] and value != ""


def _label_value(value: Any) -> str:
    """A value as a label shows it: workload arguments as ``{n_layer=2}`` (each value's repr: 2 and "2" differ)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={v!r}" for k, v in value.items()) + "}"
    return str(value)


def _world(config: dict[str, Any]) -> int:
    return (config.get("nproc_per_node") or 1) * (config.get("nnodes") or 1)
