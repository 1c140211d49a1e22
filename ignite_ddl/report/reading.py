"""Reading a sweep's records into configurations: a first pass keeps a few figures per run, adding each summary to
its configuration's figures as it is read, so that memory grows with the runs and configurations, not with the size
of the results; a second reads again only the summaries of runs a later attempt superseded. Runs made in different
environments, or with different thread counts, become configurations of their own. A summary may hold foreign
data: each of its fields is checked before it is used."""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard, cast

from ignite_ddl.core.schema import shown_figures
from ignite_ddl.report.model import STEP_PARTS, ConfigResult, Flag, RunResult
from ignite_ddl.report.stats import mean_interval

__all__ = ["Reader", "is_number", "workload_of"]


# -- reading the records: a first pass keeps a few figures per run, a second reads the summaries the figures use


# What makes runs comparable, besides intra-op threads (checked per configuration): a run's environment.
ENVIRONMENT_FIELDS = ("torch", "Ignite", "CUDA", "torch_xla", "device", "CPU", "CPU cores")
_Machine = tuple[Any, ...]  # one value per ENVIRONMENT_FIELDS entry, None where the run does not say
CONFIG_JSON_LIMIT = 1 << 20  # a run's config.json is a few kB: more is not one


SHOWN = shown_figures()  # (path, how) of each figure the report shows without code of its own


class _Figures:
    """The figures of a set of runs (:meth:`add` a summary at a time, :meth:`merge` two sets), what a
    configuration's figures are made from; ``where`` orders the runs as they were written (ties, firsts)."""

    def __init__(self) -> None:
        self.summaries = 0
        self.first: tuple[Any, dict[str, Any]] | None = None  # (where, scalars of the first summary written)
        self.p50, self.p90, self.data_share = _Mean(), _Mean(), _Mean()
        self.steps = 0
        self.world: int | None = None  # the fewest ranks of any run's steps
        self.rank_parts: list[dict[str, _Mean]] = []
        self.comm_timed = False
        self.overlap, self.busbw, self.reference, self.buckets = _Mean(), _Mean(), _Mean(), _Mean()
        self.worst_wait: tuple[float, Any, dict[str, Any]] | None = None  # (median wait, where, comm_wait)
        self.wait = _Mean()
        self.straggler: tuple[float, Any, dict[str, Any]] | None = None  # (ratio, where, straggler)
        self.val_accuracy = _Mean()
        self.iterations: int | None = None
        self.profiler: tuple[Any, Any] | None = None  # (where, profiler) of the first run written with one
        self.matrices: dict[int, tuple[Any, list[list[int]]]] = {}  # size -> (where of the first, sum)
        self.cuda: list[float] = []
        self.host: list[float] = []
        self.held, self.private = _Mean(), _Mean()
        self.flops = {key: _Mean() for key in ("total", *FLOPS_FIGURES)}
        self.matmul_rates: list[float] = []  # the matmul rate each rank of each run measured
        self.compile_s: list[float] = []
        self.recompilations = 0
        self.reasons: list[str] = []
        self.comm_bytes, self.cross_comm, self.cross_backward = _Mean(), _Mean(), _Mean()
        self.unsettled = 0
        self.shown = {path: _Mean() for path, _ in SHOWN}  # every figure the schema marks Shown, read alike

    def add(self, summary: dict[str, Any], where: Any) -> None:
        self.summaries += 1
        for path, mean in self.shown.items():
            value: Any = summary
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            mean.add(value)
        if self.first is None or where < self.first[0]:
            self.first = (
                where,
                {
                    "threads_per_process": summary.get("threads_per_process"),
                    "cpu_cores": summary.get("cpu_cores"),
                    "device_type": (summary.get("device") or {}).get("type"),
                    "global_batch": (summary.get("batch") or {}).get("global"),
                    "strategy": summary.get("strategy") if isinstance(summary.get("strategy"), str) else None,
                    "workload": summary.get("workload") if isinstance(summary.get("workload"), dict) else None,
                },
            )
        steps = summary.get("steps")
        if _well_formed_steps(steps):
            self._add_steps(cast(dict[str, Any], steps), where)
        self.val_accuracy.add(summary.get("val_accuracy"))
        if summary.get("profiler") and (self.profiler is None or where < self.profiler[0]):
            self.profiler = (where, summary["profiler"])
        matrix = summary.get("confusion_matrix")
        if _square(matrix):
            self._add_matrix(len(matrix), where, matrix)
        memory = _dict(summary.get("memory"))
        top = _dict(memory.get("max"))
        if is_number(top.get("cuda_max_reserved_bytes")):
            self.cuda.append(float(top["cuda_max_reserved_bytes"]))
        if is_number(top.get("peak_rss_bytes")):
            self.host.append(float(top["peak_rss_bytes"]))
        self.held.add(top.get("held_bytes"))
        ranks = memory.get("ranks", [])
        self.private.add(max((r.get("workers_private_bytes") or 0 for r in ranks if isinstance(r, dict)), default=None))
        flops = _dict(summary.get("flops"))
        self.flops["total"].add(_dict(flops.get("per_sample")).get("total"))
        for key in FLOPS_FIGURES:
            self.flops[key].add(flops.get(key))
        flops_ranks = flops.get("ranks")
        flops_ranks = flops_ranks if isinstance(flops_ranks, list) else []
        rates = [_float(_dict(r).get("attainable_flops_per_s")) for r in flops_ranks]
        self.matmul_rates += [r for r in rates if r is not None and r > 0]

    def _add_step_extras(self, steps: dict[str, Any]) -> None:
        """Compilation, bytes on the wire, steady state and the DDP cross-check of one run's steps."""
        compiled = _dict(steps.get("compile"))
        if is_number(compiled.get("compile_s")):
            self.compile_s.append(float(compiled["compile_s"]))
        if _count(compiled.get("recompilations")):
            self.recompilations = max(self.recompilations, int(compiled["recompilations"]))
            reasons = compiled.get("reasons")
            if not self.reasons and isinstance(reasons, list):
                self.reasons = [str(r)[:200] for r in reasons[:3]]
        if _dict(steps.get("steady")).get("settled") is False:
            self.unsettled += 1
        for rank in steps["ranks"]:
            if isinstance(rank, dict):
                self.comm_bytes.add(rank.get("comm_bytes_per_step"))
        checks = steps.get("ddp_crosscheck")
        for check in checks if isinstance(checks, list) else []:
            ratio = _dict(_dict(check).get("ratio"))
            self.cross_comm.add(ratio.get("comm"))
            self.cross_backward.add(ratio.get("backward"))

    def _add_steps(self, steps: dict[str, Any], where: Any) -> None:
        self.steps += 1
        self._add_step_extras(steps)
        figures, ranks = steps["global"], steps["ranks"]
        self.p50.add(figures.get("step_s_p50"))
        self.p90.add(figures.get("step_s_p90"))
        self.data_share.add(figures.get("data_share"))
        self.world = len(ranks) if self.world is None else min(self.world, len(ranks))
        for number, rank in enumerate(ranks):
            if number == len(self.rank_parts):
                self.rank_parts.append({part: _Mean() for part in STEP_PARTS})
            parts = self.rank_parts[number]
            for part, value in _step_parts(rank).items():
                parts[part].add(value)
            self.comm_timed = self.comm_timed or is_number(rank.get("exposed_comm_s_mean"))
            self.buckets.add(rank.get("buckets_per_step"))
        self.overlap.add(figures.get("overlap"))
        self.busbw.add(figures.get("busbw_Bps"))
        self.reference.add(_dict(steps.get("comm_reference")).get("busbw_Bps"))
        wait = steps.get("comm_wait")
        if isinstance(wait, dict) and is_number(wait.get("median_wait_s")):
            self.worst_wait = _larger(self.worst_wait, (wait["median_wait_s"], where, wait))
            self.wait.add(wait["median_wait_s"])
        straggler = steps.get("straggler")
        if isinstance(straggler, dict) and is_number(straggler.get("ratio")):
            self.straggler = _larger(self.straggler, (straggler["ratio"], where, straggler))
        if ranks:
            fewest = min(r.get("iterations", 0) for r in ranks)
            self.iterations = fewest if self.iterations is None else min(self.iterations, fewest)

    def _add_matrix(self, size: int, where: Any, matrix: list[list[int]]) -> None:
        found = self.matrices.get(size)
        if found is None:
            self.matrices[size] = (where, [list(row) for row in matrix])
            return
        for total, row in zip(found[1], matrix):
            for j, v in enumerate(row):
                total[j] += v
        if where < found[0]:
            self.matrices[size] = (where, found[1])

    def merge(self, other: _Figures) -> None:
        """Add the runs of ``other`` (disjoint from these) to these."""
        self.summaries += other.summaries
        if other.first is not None and (self.first is None or other.first[0] < self.first[0]):
            self.first = other.first
        for mine, theirs in (
            (self.p50, other.p50),
            (self.p90, other.p90),
            (self.data_share, other.data_share),
            (self.overlap, other.overlap),
            (self.busbw, other.busbw),
            (self.reference, other.reference),
            (self.buckets, other.buckets),
            (self.wait, other.wait),
            (self.val_accuracy, other.val_accuracy),
            (self.held, other.held),
            (self.private, other.private),
            *((self.flops[key], other.flops[key]) for key in self.flops),
            *((self.shown[path], other.shown[path]) for path in self.shown),
            (self.comm_bytes, other.comm_bytes),
            (self.cross_comm, other.cross_comm),
            (self.cross_backward, other.cross_backward),
        ):
            mine.merge(theirs)
        self.compile_s += other.compile_s
        self.matmul_rates += other.matmul_rates
        self.recompilations = max(self.recompilations, other.recompilations)
        self.reasons = self.reasons or other.reasons
        self.unsettled += other.unsettled
        self.steps += other.steps
        if other.world is not None:
            self.world = other.world if self.world is None else min(self.world, other.world)
        for number, parts in enumerate(other.rank_parts):
            if number == len(self.rank_parts):
                self.rank_parts.append({part: _Mean() for part in STEP_PARTS})
            for part, mean in parts.items():
                self.rank_parts[number][part].merge(mean)
        self.comm_timed = self.comm_timed or other.comm_timed
        if other.worst_wait is not None:
            self.worst_wait = _larger(self.worst_wait, other.worst_wait)
        if other.straggler is not None:
            self.straggler = _larger(self.straggler, other.straggler)
        if other.iterations is not None:
            self.iterations = other.iterations if self.iterations is None else min(self.iterations, other.iterations)
        if other.profiler is not None and (self.profiler is None or other.profiler[0] < self.profiler[0]):
            self.profiler = other.profiler
        for size, (where, total) in other.matrices.items():
            self._add_matrix(size, where, total)
        self.cuda += other.cuda
        self.host += other.host

    def fill(self, config: ConfigResult) -> None:
        config.throughput = mean_interval(config.samples_per_s)
        if not self.summaries:
            return
        config.step_p50_s, config.step_p90_s = self.p50.value, self.p90.value
        for path, shown in SHOWN:
            value = self.shown[path].value
            config.shown[shown.column] = None if value is None else value * shown.scale
        config.data_share = self.data_share.value
        if self.steps:
            parts = self.rank_parts[: self.world or 0]
            config.rank_phases = [{p: rank[p].value or 0.0 for p in STEP_PARTS} for rank in parts]
            config.phases = {p: _mean([r[p] for r in config.rank_phases]) or 0.0 for p in STEP_PARTS}
            config.comm_timed = self.comm_timed
            config.overlap, config.buckets_per_step = self.overlap.value, self.buckets.value
            config.busbw_Bps, config.reference_busbw_Bps = self.busbw.value, self.reference.value
            iteration = sum(config.phases.values())
            if config.comm_timed and iteration > 0:
                config.exposed_share = config.phases["exposed_comm"] / iteration
            if self.worst_wait is not None and iteration > 0:
                worst = self.worst_wait[2]
                wait_s = self.wait.value or 0.0
                others = [r for r in range(len(worst.get("wait_s") or [])) if r != worst.get("rank")]
                share = wait_s / iteration
                config.comm_wait = {"rank": worst.get("rank"), "waiting": others, "wait_s": wait_s, "share": share}
        config.straggler = self.straggler[2] if self.straggler is not None else None
        config.val_accuracy = self.val_accuracy.value
        first = self.first[1] if self.first is not None else {}
        config.threads_per_process, config.cpu_cores = first["threads_per_process"], first["cpu_cores"]
        config.device_type, config.global_batch = first["device_type"], first["global_batch"]
        config.strategy = first["strategy"]
        config.workload_info = first.get("workload")
        config.measured_iterations = self.iterations
        config.profiler = self.profiler[1] if self.profiler is not None else None
        if self.matrices:
            config.confusion_matrix = min(self.matrices.values(), key=lambda found: found[0])[1]
        if self.cuda:
            config.peak_memory, config.memory_kind = mean_interval(self.cuda), "CUDA reserved"
        else:
            config.peak_memory, config.memory_kind = mean_interval(self.host), "resident" if self.host else None
        config.held_bytes, config.workers_memory = self.held.value, self.private.value
        config.flops_per_sample = self.flops["total"].value
        for key in FLOPS_FIGURES:
            setattr(config, key, self.flops[key].value)
        config.matmul_rate = max(self.matmul_rates, default=None)
        config.compile_s = mean_interval(self.compile_s) if self.compile_s else None
        config.recompilations, config.recompile_reasons = self.recompilations, self.reasons
        config.comm_bytes_per_step, config.unsettled_runs = self.comm_bytes.value, self.unsettled
        if self.cross_comm.value is not None:
            config.ddp_crosscheck = {"comm": self.cross_comm.value, "backward": self.cross_backward.value or math.nan}


def _larger(
    a: tuple[float, Any, dict[str, Any]] | None, b: tuple[float, Any, dict[str, Any]]
) -> tuple[float, Any, dict[str, Any]]:
    """The larger figure of two ``(figure, where, record)``; on a tie, the one written first."""
    if a is None or b[0] > a[0] or (b[0] == a[0] and b[1] < a[1]):
        return b
    return a


class _Bucket:
    """The runs of one configuration made in one environment with one thread count: the figures of those the
    verdict may use (completed, and not contended unless contended runs are counted) and of the other completed
    ones, accumulated as they are read. ``stale``: one of the first was superseded by a later attempt of its
    repeat, so the configuration's figures are read again from the runs it uses."""

    __slots__ = ("eligible", "others", "stale")

    def __init__(self) -> None:
        self.eligible = _Figures()
        self.others: _Figures | None = None
        self.stale = False


@dataclass(slots=True)
class _Seen:
    """A run as the first pass keeps it: its result, where its record is, what it ran on and in which bucket its
    figures were counted (None without a summary)."""

    run: RunResult
    where: Any
    world: Any
    machine: _Machine | None
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


class Reader:
    """Reads records one at a time (:meth:`add`), keeping per run only what the verdict and the flags need, and
    adding its summary's figures to its configuration's as it goes; then builds the configurations
    (:meth:`configs`). ``fetch`` gives a record again from where it was read: needed only where a run counted in a
    configuration's figures turned out to be superseded by a later attempt."""

    def __init__(self, axes: Sequence[str], include_contended: bool) -> None:
        self.axes, self.include_contended = list(axes), include_contended
        self.groups: dict[str, _Group] = {}
        self.buckets: dict[tuple[str, _Machine | None, int | None], _Bucket] = {}
        self.records = 0
        self.flags: list[Flag] = []
        self._machines: dict[_Machine, _Machine] = {}  # one tuple per distinct environment: thousands of runs share it

    def add(self, record: dict[str, Any], where: Any) -> None:
        self.records += 1
        if record["status"] == "interrupted":  # stopped with the sweep: neither a result nor a failure
            return
        key = record["key"].rsplit("-r", 1)[0]
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(record["index"], record["grid"], record["config"])
        predicted = _dict(record.get("prediction")).get("peak_bytes")
        if is_number(predicted):
            group.predicted = _float(predicted)
        summary = _dict(record.get("summary"))
        contention = _dict(summary.get("contention"))
        window = _dict(_dict(summary.get("steps")).get("global")).get("window_s")
        run = RunResult(
            repeat=record["repeat"],
            attempt=record.get("attempt", 0),
            position=record.get("position", 0),
            status=sys.intern(str(record["status"])),
            samples_per_s=_float(summary.get("samples_per_s")),
            contended=bool(record.get("contended")),
            foreign_cpu_share=_float(contention.get("foreign_cpu_share")),
            diverged=str(summary["diverged"]) if summary.get("diverged") else None,
            used=False,
            run_dir=str(record.get("run_dir", "")),
            error=None if record.get("error") is None else str(record["error"]),
            measured_s=_float(window) if is_number(window) else _float(summary.get("train_time_s")),
            elapsed_s=_float(record.get("elapsed_s")),
            train_time_s=_float(summary.get("train_time_s")),
            engine_s=_float(summary.get("wall_time_s")),
            val_accuracy=_float(summary.get("val_accuracy")),
            epochs=_count(summary.get("epochs")),
        )
        seen = _Seen(run, None, None, None, None, None)
        if record["status"] == "completed" and record.get("summary"):
            seen.where, seen.world = where, summary.get("world_size")
            seen.machine, seen.threads = self._machine(record, summary), _count(summary.get("threads_per_process"))
            bucket = self.buckets.get((key, seen.machine, seen.threads))
            if bucket is None:
                bucket = self.buckets[key, seen.machine, seen.threads] = _Bucket()
            seen.bucket = bucket
            if self.include_contended or not run.contended:
                bucket.eligible.add(summary, where)
            else:
                bucket.others = bucket.others or _Figures()
                bucket.others.add(summary, where)
        group.repeats.setdefault(record["repeat"], []).append(seen)

    def _machine(self, record: dict[str, Any], summary: dict[str, Any]) -> _Machine:
        """What the run ran on, from its record, else from the config.json its run folder keeps."""
        versions = _dict(summary.get("versions")) or _dict(record.get("versions"))
        host = _dict(summary.get("host")) or _dict(record.get("host"))
        if not versions or not host:
            written = _written_facts(str(record.get("run_dir") or ""))
            versions, host = versions or _dict(written.get("versions")), host or _dict(written.get("host"))
        device = _dict(summary.get("device"))
        kind, name = _text(device.get("type")), _text(device.get("name"))

        def version(package: str) -> str | None:
            return (_text(versions.get(package)) or "") if versions else None

        machine = (
            version("torch"),
            version("ignite"),
            version("cuda"),
            version("torch_xla"),
            None if kind is None else (kind if kind == "cpu" or name is None else f"{kind} {name}"),
            _text(host.get("cpu")) or (name if kind == "cpu" else None),
            _count(summary.get("cpu_cores")) or _count(host.get("cpu_cores")),
        )
        return self._machines.setdefault(machine, machine)

    def configs(self, fetch: Callable[[Any], dict[str, Any]]) -> list[ConfigResult]:
        environments = self._environments()
        configs: list[ConfigResult] = []
        parts: list[list[_Seen]] = []
        for group in self.groups.values():
            for config, members in self._split(group, self._choose(group), environments):
                configs.append(config)
                parts.append(members)
        again: list[tuple[Any, int]] = []  # (where, configuration) of the runs to read again
        figures = []
        for i, members in enumerate(parts):
            found = _Figures()
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
            figures[i].add(_dict(fetch(where).get("summary")), where)
        predicted = {group.index: group.predicted for group in self.groups.values()}
        for config, found in zip(configs, figures):
            found.fill(config)
            config.predicted_memory = predicted.get(config.index)
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

    def _environments(self) -> dict[_Machine, tuple[int, str | None]]:
        """Each environment seen (number, label): runs that agree on every field both of them know share one;
        numbered in the order they first appear in the results. One environment has no label."""
        counts: dict[_Machine, int] = {}
        first: dict[_Machine, Any] = {}  # where its first run is in the results
        for group in self.groups.values():
            for attempts in group.repeats.values():
                for seen in attempts:
                    if seen.machine is not None:
                        counts[seen.machine] = counts.get(seen.machine, 0) + 1
                        if seen.machine not in first or seen.where < first[seen.machine]:
                            first[seen.machine] = seen.where
        known: list[_Machine] = []  # the most specific first: the others join the first they agree with
        joined: dict[_Machine, int] = {}
        for machine in sorted(counts, key=lambda m: (sum(v is None for v in m), first[m])):
            home = next((i for i, env in enumerate(known) if _agree(machine, env)), None)
            if home is None:
                home = len(known)
                known.append(machine)
            joined[machine] = home
        if len(known) < 2:
            return {machine: (0, None) for machine in counts}
        runs = [0] * len(known)
        seen_first: list[Any] = [None] * len(known)
        for machine, home in joined.items():
            runs[home] += counts[machine]
            if seen_first[home] is None or first[machine] < seen_first[home]:
                seen_first[home] = first[machine]
        order = sorted(range(len(known)), key=lambda i: seen_first[i])
        number = {home: n for n, home in enumerate(order)}
        differ = [i for i in range(len(ENVIRONMENT_FIELDS)) if len({env[i] for env in known if env[i] is not None}) > 1]

        def label(env: _Machine) -> str:
            return ", ".join(f"{ENVIRONMENT_FIELDS[i]} {_shown_value(env[i])}" for i in differ if env[i] is not None)

        labels = {home: f"env {number[home] + 1} ({label(known[home])})" for home in range(len(known))}
        described = "; ".join(f"{labels[home]}: {runs[home]} run(s)" for home in order)
        self.flags.append(
            Flag(
                "mixed-environments",
                None,
                f"{len(known)} environments that differ in {', '.join(ENVIRONMENT_FIELDS[i] for i in differ)}: "
                f"{described}; each has its own verdict",
            )
        )
        return {machine: (number[home], labels[home]) for machine, home in joined.items()}

    def _split(
        self, group: _Group, runs: list[_Seen], environments: dict[_Machine, tuple[int, str | None]]
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


def _count(value: Any) -> int | None:
    """A count a run can report (threads, cores): a positive integer, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _agree(a: _Machine, b: _Machine) -> bool:
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
            return _dict(json.loads(f.read(CONFIG_JSON_LIMIT)))
    except (OSError, ValueError):
        return {}


class _Mean:
    """The mean of the finite numbers added, one at a time: what :func:`statistics.fmean` gives for all of them
    (Shewchuk's exact partial sums, summed with :func:`math.fsum`), without keeping them."""

    __slots__ = ("n", "partials")

    def __init__(self) -> None:
        self.n = 0
        self.partials: list[float] = []

    def add(self, value: Any) -> None:
        if not is_number(value):
            return
        self._add(float(value))
        self.n += 1

    def _add(self, x: float) -> None:
        partials, i = self.partials, 0
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            high = x + y
            low = y - (high - x)
            if low:
                partials[i] = low
                i += 1
            x = high
        partials[i:] = [x]

    def merge(self, other: _Mean) -> None:
        for x in other.partials:  # exact: the partials sum to the other's values exactly
            self._add(x)
        self.n += other.n

    @property
    def value(self) -> float | None:
        return math.fsum(self.partials) / self.n if self.n else None


FLOPS_FIGURES = ("achieved_flops_per_s", "utilisation_attainable", "utilisation_peak")


def _dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a mapping, else an empty one: results files may hold foreign data."""
    return value if isinstance(value, dict) else {}


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _float(value: Any) -> float | None:
    return float(value) if is_number(value) else None


def _mean(values: list[Any]) -> float | None:
    """Mean of the finite numbers among ``values`` (None if there are none)."""
    numbers = [float(v) for v in values if is_number(v)]
    return statistics.fmean(numbers) if numbers else None


def _well_formed_steps(steps: Any) -> bool:
    return (
        isinstance(steps, dict)
        and isinstance(steps.get("global"), dict)
        and isinstance(steps.get("ranks"), list)
        and all(isinstance(r, dict) for r in steps["ranks"])
    )


def _step_parts(rank: dict[str, Any]) -> dict[str, float | None]:
    """One rank's mean step split into :data:`STEP_PARTS` (seconds); without communication timing, backward
    compute holds the whole backward, all-reduce included."""
    exposed = _float(rank.get("exposed_comm_s_mean"))
    backward = _float(rank.get("backward_s_mean"))
    return {
        "data": _float(rank.get("data_s_mean")),
        "forward": _float(rank.get("forward_s_mean")),
        "backward_compute": backward if exposed is None or backward is None else backward - exposed,
        "exposed_comm": exposed,
        "optimizer": _float(rank.get("optimizer_s_mean")),
        "handlers": _float(rank.get("handlers_s_mean")),
    }


def _square(matrix: Any) -> TypeGuard[list[list[int]]]:
    """A non-empty square matrix of integers."""
    return (
        isinstance(matrix, list)
        and bool(matrix)
        and all(isinstance(row, list) and len(row) == len(matrix) for row in matrix)
        and all(isinstance(v, int) and not isinstance(v, bool) for row in matrix for v in row)
    )
