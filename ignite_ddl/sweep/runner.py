"""Sweeps: run a grid of training configurations, one fresh launch each, into one crash-safe results file.

A spec (YAML, or the same keys from the command line) names the grid::

    name: quickstart            # the sweep's name (default output directory: runs/<name>)
    base:                       # TrainConfig options shared by every configuration
      epochs: 2
    grid:                       # every combination of these values is one configuration
      nproc_per_node: [1, 2]
      batch_size: [32, 128]
    repeats: 3                  # runs per configuration: the unit of replication of every comparison
    order: interleaved          # interleaved (default) | shuffled | grouped
    timeout_s: 600              # wall-time limit of one run

Each run is ``ignite-ddl train`` in its own process group with its own output directory under ``runs/``; when it
ends, one JSON line (the configuration plus its summary, or the reason it failed) is appended to
``results.jsonl`` and synced to disk. A failed, refused or timed-out run is recorded and the sweep goes on.
``--resume`` skips runs already recorded; a line that cannot be read (cut short by a killed sweep, or damaged) is
moved to ``results.jsonl.rejected`` with a warning, and every valid record is kept.

**Run order.** Repeats are interleaved: every configuration's first repeat, then every configuration's second, with
the direction reversed each round (A B C, C B A, ...), so a slow minute of the machine, or a slow drift, is spread
over the configurations instead of landing on one. ``shuffled`` draws each round's order from ``seed``;
``grouped`` runs a configuration's repeats back to back.

**Spending the time measuring.** A sweep compares throughput, so unless the spec asks for them its runs save no
checkpoints and no best model and evaluate once, after the last epoch (:data:`SWEEP_DEFAULTS`). Runs are started
from a fork server that has already imported torch, Ignite and the trainer (``start: preloaded``), which removes the
seconds of imports every fresh interpreter pays; ``start: fresh`` runs a new interpreter per run instead. The fork
server never runs a torch operation, so its forks are safe (see ``launcher.in_fresh_thread``).

**Contention.** Each run records how much of the machine other processes used while it measured
(:mod:`ignite_ddl.measure.contention`); a run above ``contention_threshold`` is recorded as contended, and with
``rerun_contended: N`` re-run up to N times at the end of the sweep.

Example:
    >>> spec = parse_spec({"name": "demo", "grid": {"nproc_per_node": [1, 2]}, "base": {"epochs": 1}, "repeats": 2})
    >>> [(run.index, run.repeat) for run in expand(spec)]
    [(0, 0), (1, 0), (1, 1), (0, 1)]
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import itertools
import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

from ignite_ddl.core.config import ConfigError, TrainConfig
from ignite_ddl.core.environment import host, versions
from ignite_ddl.core.folders import lock
from ignite_ddl.core.results import (
    RunRecord,
    SweepMeta,
    SweepSession,
    append_record,
    read_json,
    read_results,
    rejected_path,
    repair_results,
    write_json,
)
from ignite_ddl.launcher.signals import end_with, interruptible, sigterm_with_parent
from ignite_ddl.measure.contention import CONTENTION_THRESHOLD
from ignite_ddl.sweep.slurm import Outcome, check_cluster, load_jobs, parse_slurm_options, save_jobs, submit, wait_for

__all__ = [
    "ORDERS",
    "SWEEP_DEFAULTS",
    "WORKLOAD_OPTIONS",
    "Run",
    "RunInterrupted",
    "Spec",
    "append_record",
    "configurations",
    "contended_reruns",
    "expand",
    "finish_record",
    "load_spec",
    "make_run",
    "new_record",
    "parse_spec",
    "read_results",
    "run_one",
    "run_options",
    "run_order",
    "slurm_record",
    "sweep",
    "sweep_dir",
]

SPEC_KEYS = (
    "name",
    "base",
    "grid",
    "repeats",
    "timeout_s",
    "output_dir",
    "order",
    "seed",
    "start",
    "workload",
    "contention_threshold",
    "rerun_contended",
    "executor",
    "slurm",
)
ORDERS = ("interleaved", "shuffled", "grouped")
STARTS = ("preloaded", "fresh")
EXECUTORS = ("local", "slurm")
# What a sweep's runs do unless its spec says otherwise: measure, and spend no time on what a comparison of
# throughput does not need.
SWEEP_DEFAULTS: dict[str, Any] = {"checkpoints": False, "best_model": False, "eval_every": 0, "progress": False}
# Options that change the work done per sample: configurations are compared only within one workload.
WORKLOAD_OPTIONS = ("model", "dataset", "amp", "optimizer", "sync_bn")
# Imported once by the fork server, so that runs start without importing them again.
PRELOAD = ("ignite_ddl.cli", "ignite_ddl.trainer.run", "torch.utils.tensorboard")


@dataclass(frozen=True)
class Spec:
    name: str
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    repeats: int = 1
    timeout_s: float = 600.0
    output_dir: str | None = None
    order: str = "interleaved"
    seed: int = 0
    start: str = "preloaded"
    workload: tuple[str, ...] = WORKLOAD_OPTIONS
    contention_threshold: float = CONTENTION_THRESHOLD
    rerun_contended: int = 0
    executor: str = "local"  # local: one run after another here; slurm: every run a SLURM job (ignite_ddl.sweep.slurm)
    slurm: dict[str, Any] = field(default_factory=dict)  # the slurm executor's options (SlurmOptions' fields)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["workload"] = list(self.workload)
        return data


@dataclass(frozen=True)
class Run:
    """One run of a sweep: a configuration, the index of its repeat, and its attempt (re-runs of a contended run)."""

    index: int  # position of the configuration in the grid
    repeat: int
    grid: dict[str, Any]  # this configuration's grid values
    config: TrainConfig
    attempt: int = 0
    position: int = field(default=0, compare=False)  # place in the sweep's run order

    @property
    def key(self) -> str:
        """Identifies the run across restarts: the configuration's content (without its output directory)."""
        options = {k: v for k, v in self.config.to_dict().items() if k != "output_dir"}
        digest = hashlib.sha1(json.dumps(options, sort_keys=True).encode()).hexdigest()[:12]
        return f"{digest}-r{self.repeat}"

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.grid.items())


def load_spec(path: str | Path) -> Spec:
    """Read and validate a YAML spec; :class:`ConfigError` on anything wrong."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"cannot read spec {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"spec {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    return parse_spec(data, default_name=Path(path).stem)


def parse_spec(data: Any, default_name: str = "sweep") -> Spec:
    """Validate plain data as a spec: known keys, a non-empty grid of lists, every combination a valid config."""
    if not isinstance(data, dict):
        raise ConfigError("a sweep spec is a mapping with keys: " + ", ".join(SPEC_KEYS))
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise ConfigError(f"unknown spec key(s): {', '.join(unknown)} (allowed: {', '.join(SPEC_KEYS)})")
    base, grid = data.get("base") or {}, data.get("grid")
    if not isinstance(base, dict):
        raise ConfigError("spec 'base' must be a mapping of train options")
    if not isinstance(grid, dict) or not grid:
        raise ConfigError("spec 'grid' must map at least one train option to a list of values")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid option {key} needs a non-empty list of values, got {values!r}")
    if "output_dir" in base or "output_dir" in grid:
        raise ConfigError("output_dir is set per run by the sweep; use the spec's top-level output_dir")
    workload = data.get("workload", list(WORKLOAD_OPTIONS))
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    if not isinstance(workload, list) or not all(isinstance(w, str) and w in known for w in workload):
        raise ConfigError(f"spec 'workload' must be a list of train options, got {workload!r}")
    threshold = data.get("contention_threshold", CONTENTION_THRESHOLD)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise ConfigError(f"spec 'contention_threshold' must be a share in (0, 1], got {threshold!r}")
    spec = Spec(
        name=str(data.get("name", default_name)),
        base=base,
        grid=grid,
        repeats=_positive(data, "repeats", int, 1),
        timeout_s=_positive(data, "timeout_s", (int, float), 600.0),
        output_dir=data.get("output_dir"),
        order=_choice(data, "order", ORDERS),
        seed=_integer(data, "seed", 0, 0),
        start=_choice(data, "start", STARTS),
        workload=tuple(workload),
        contention_threshold=float(threshold),
        rerun_contended=_integer(data, "rerun_contended", 0, 0),
        executor=_choice(data, "executor", EXECUTORS),
        slurm=dataclasses.asdict(parse_slurm_options(data.get("slurm"))),
    )
    for _ in expand(spec):  # validates every combination before anything runs
        pass
    return spec


def _positive(data: dict, key: str, kind: type[float] | tuple[type[float], ...], default: Any) -> Any:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise ConfigError(f"spec '{key}' must be a positive number, got {value!r}")
    return value


def _integer(data: dict, key: str, default: int, low: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"spec '{key}' must be an integer >= {low}, got {value!r}")
    return value


def _choice(data: dict, key: str, choices: tuple[str, ...]) -> str:
    value = data.get(key, choices[0])
    if value not in choices:
        raise ConfigError(f"spec '{key}' must be one of {', '.join(choices)}, got {value!r}")
    return value


def run_options(spec: Spec, grid: dict[str, Any]) -> dict[str, Any]:
    """A configuration's train options: the sweep's defaults, then the spec's base, then its grid values.

    A spec that sets ``checkpoint_every`` asks for checkpoints.
    """
    options = {**spec.base, **grid}
    defaults = dict(SWEEP_DEFAULTS)
    if options.get("checkpoint_every"):
        defaults["checkpoints"] = True
    return {**defaults, **options}


def configurations(spec: Spec) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in grid order."""
    keys = list(spec.grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(spec.grid[k] for k in keys))]


def run_order(spec: Spec, count: int) -> list[tuple[int, int]]:
    """(configuration index, repeat) of every run, in the order the sweep runs them (see the module docstring)."""
    if spec.order == "grouped":
        return [(index, repeat) for index in range(count) for repeat in range(spec.repeats)]
    rng = random.Random(spec.seed)
    order = []
    for repeat in range(spec.repeats):
        indices = list(range(count))
        if spec.order == "shuffled":
            rng.shuffle(indices)
        elif repeat % 2:
            indices.reverse()
        order += [(index, repeat) for index in indices]
    return order


def make_run(
    spec: Spec,
    index: int,
    grid: dict[str, Any],
    repeat: int,
    output_dir: str | Path,
    attempt: int = 0,
    position: int = 0,
) -> Run:
    suffix = f"-a{attempt}" if attempt else ""
    run_dir = Path(output_dir) / "runs" / f"cfg{index:03d}-r{repeat}{suffix}"
    # The run folder is the sweep's: a run re-run after an interruption replaces what it had begun.
    config = TrainConfig.from_dict({**run_options(spec, grid), "output_dir": str(run_dir), "overwrite": True})
    try:
        config.check()
    except ConfigError as e:
        raise ConfigError(f"configuration {dict(grid)}: {e}") from None
    return Run(index, repeat, grid, config, attempt, position)


def expand(spec: Spec, output_dir: str | Path = ".") -> Iterator[Run]:
    """Every run of the sweep, in the order the sweep runs them."""
    grids = configurations(spec)
    for position, (index, repeat) in enumerate(run_order(spec, len(grids))):
        yield make_run(spec, index, grids[index], repeat, output_dir, position=position)


# -- running


class _Started:
    """A run's process, whichever way it was started: wait for it, or take its whole process group down."""

    def __init__(self, run: Run, console: Path, start: str):
        argv = ["train", *run.config.to_argv()]
        if start == "preloaded":
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(list(PRELOAD))
            self.process: Any = ctx.Process(
                target=_preloaded_main, args=(argv, str(console), os.getpid()), daemon=False
            )
            self.process.start()
            self.pid = cast(int, self.process.pid)  # started: it has a pid (typed int | None for one not started)
        else:
            with open(console, "w") as out:
                cmd = [sys.executable, "-m", "ignite_ddl", *argv]
                # The run gets SIGTERM when the sweep ends, however it ends (SIGKILL included).
                self.process = subprocess.Popen(
                    cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=sigterm_with_parent
                )
            self.pid = self.process.pid

    def wait(self, timeout: float | None) -> int | None:
        """The exit status (negative: killed by that signal), or None if still running after ``timeout``."""
        if isinstance(self.process, subprocess.Popen):
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
        self.process.join(timeout)
        return self.process.exitcode

    def kill_group(self) -> None:
        """SIGTERM the run's whole process group, SIGKILL what is left after a grace period."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:  # gone, or not yet the leader of its own group
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    return
            if self.wait(5) is not None:
                return


def _preloaded_main(argv: list[str], console: str, sweep_pid: int) -> None:
    """A run started by the fork server: its own session (so it can be killed as a group), output to console,
    and it ends when the sweep does (the fork server, its parent, outlives a sweep killed with SIGKILL)."""
    os.setsid()
    end_with(sweep_pid)
    fd = os.open(console, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    from ignite_ddl.cli import main

    sys.exit(main(argv))


class RunInterrupted(KeyboardInterrupt):
    """The sweep was interrupted while a run was going: ``record`` says so (status ``interrupted``)."""

    def __init__(self, record: RunRecord, cause: KeyboardInterrupt):
        self.record, self.cause = record, cause
        super().__init__(str(cause))


def run_one(run: Run, timeout_s: float, start: str = "preloaded", threshold: float = CONTENTION_THRESHOLD) -> RunRecord:
    """Train one configuration in a fresh process group; its record for results.jsonl."""
    run_dir = Path(run.config.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    process = _Started(run, run_dir / "console.log", start)
    interrupted: KeyboardInterrupt | None = None
    try:
        code = process.wait(timeout_s)
        if code is None:
            process.kill_group()
    except KeyboardInterrupt as e:  # SIGINT / SIGTERM: take the run's processes down with the sweep, say so
        process.kill_group()
        interrupted, code = e, process.wait(0)
    except BaseException:
        process.kill_group()
        raise
    record = new_record(run, round(time.monotonic() - began, 3), code)
    if interrupted is not None:
        name = getattr(interrupted, "name", "SIGINT")
        record.update(
            {"status": "interrupted", "error": f"the sweep was interrupted by {name}; --resume runs it again"}
        )
        raise RunInterrupted(record, interrupted)
    if code is None:
        record.update({"status": "timeout", "error": f"timed out after {timeout_s:g} s"})
    return finish_record(record, threshold)


def new_record(run: Run, elapsed_s: float, code: int | None) -> RunRecord:
    """A run's record as it ended (status completed until :func:`finish_record` reads the run's folder)."""
    return {
        "key": run.key,
        "index": run.index,
        "repeat": run.repeat,
        "attempt": run.attempt,
        "position": run.position,
        "grid": run.grid,
        "config": run.config.to_dict(),
        "run_dir": str(run.config.output_dir),
        "elapsed_s": elapsed_s,
        "exit_code": code,
        "status": "completed",
        "error": None,
        "contended": False,
        "summary": None,
    }


def finish_record(record: RunRecord, threshold: float) -> RunRecord:
    """Complete a run's record from its folder: its summary if it ended well, else why it did not."""
    code, run_dir = record["exit_code"], Path(record["run_dir"])
    summary_path = run_dir / "summary.json"
    if code == 0 and summary_path.is_file():
        summary = read_json(summary_path)
        share = (summary.get("contention") or {}).get("foreign_cpu_share") or 0.0
        gpu = (summary.get("contention") or {}).get("foreign_gpu_share") or 0.0
        record.update({"summary": summary, "contended": max(share, gpu) > threshold})
        return record
    if record["status"] == "completed":
        if code is None:
            record.update({"status": "failed", "error": "the run returned no exit status"})
        else:
            # A run killed by a signal printed nothing about it: its last line would be a stale log line.
            reason = _exit_reason(code) if code < 0 else _last_error(run_dir / "console.log") or _exit_reason(code)
            record.update({"status": "refused" if code == 2 else "failed", "error": reason})
    return record


def _last_error(console: Path) -> str | None:
    """The one-line error the run printed last (or its last line; None if it printed nothing, or died before it
    opened its console file)."""
    try:
        text = console.read_text(errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ignite-ddl: error: ")]
    if errors:
        return errors[-1].removeprefix("ignite-ddl: error: ")
    return lines[-1] if lines else None


def _exit_reason(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with status {code}"


def sweep_dir(spec: Spec, output_dir: str | Path | None = None) -> Path:
    """Where a sweep writes: ``output_dir``, else the spec's, else ``runs/<name>``."""
    return Path(output_dir or spec.output_dir or Path("runs") / spec.name)


def contended_reruns(spec: Spec, records: list[dict[str, Any]], out: Path) -> list[Run]:
    """The next attempt of every repeat whose attempts so far all ran contended, up to ``rerun_contended`` re-runs."""
    attempts: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["status"] != "interrupted":
            attempts.setdefault(record["key"], []).append(record)
    grids = configurations(spec)
    reruns = []
    for found in attempts.values():
        last = max(found, key=lambda r: r.get("attempt", 0))
        done = last.get("attempt", 0)
        if all(r.get("contended") for r in found) and done < spec.rerun_contended:
            index = last["index"]
            reruns.append(make_run(spec, index, grids[index], last["repeat"], out, done + 1, last["position"]))
    return sorted(reruns, key=lambda r: r.position)


def sweep(
    spec: Spec,
    output_dir: str | Path | None = None,
    resume: bool = False,
    progress: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Run every configuration of ``spec`` not yet recorded; return all records of the sweep.

    Refuses (:class:`ConfigError`) to write into an existing sweep without ``resume``, and a folder another sweep
    is using.
    """
    out = sweep_dir(spec, output_dir)
    runs = list(expand(spec, out))
    if spec.executor == "slurm":
        check_cluster(parse_slurm_options(spec.slurm))
    with lock(out, "sweep"):
        return _sweep(spec, out, runs, resume, progress)


def _sweep(
    spec: Spec, out: Path, runs: list[Run], resume: bool, progress: Callable[[str], None]
) -> list[dict[str, Any]]:
    results = out / "results.jsonl"
    if results.exists() and not resume:
        raise ConfigError(f"{results} exists: pass --resume to continue that sweep, or choose another --output-dir")
    rejected = repair_results(results)
    if rejected:
        progress(
            f"warning: {len(rejected)} unreadable line(s) of {results} moved to {rejected_path(results)} "
            f"(first: line {rejected[0].line}, {rejected[0].reason}); every valid record was kept"
        )
    done = {r["key"] for r in read_results(results) if r["status"] != "interrupted"}
    meta_path = out / "sweep.json"
    sessions = read_json(meta_path).get("sessions", []) if meta_path.exists() else []
    session: SweepSession = {
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "wall_s": 0.0,
        "runs": 0,
    }
    meta: SweepMeta = {"spec": spec.to_dict(), "versions": versions(), "host": host(), "sessions": [*sessions, session]}
    write_json(meta_path, meta)
    began = time.monotonic()
    todo = [run for run in runs if run.key not in done]
    if done:
        progress(f"resuming: {len(runs) - len(todo)} of {len(runs)} runs already recorded")

    def recorded(record: RunRecord, where: str) -> None:
        append_record(results, record)
        session.update({"wall_s": round(time.monotonic() - began, 3), "runs": session["runs"] + 1})
        write_json(meta_path, meta)
        progress(f"{where} {_outcome(record)}")

    def where(run: Run, number: int, count: int, what: str) -> str:
        again = f", re-run {run.attempt} of a contended run" if run.attempt else ""
        repeat = f"repeat {run.repeat + 1}/{spec.repeats}{again}"
        return f"[{number}/{count}{what}] cfg{run.index:03d} {run.label} ({repeat})"

    def execute_here(batch: list[Run], what: str) -> None:
        for number, run in enumerate(batch, 1):
            progress(f"{where(run, number, len(batch), what)} ...")
            try:
                record = run_one(run, spec.timeout_s, spec.start, spec.contention_threshold)
            except RunInterrupted as stop:
                append_record(results, stop.record)
                progress(f"{where(run, number, len(batch), what)} INTERRUPTED: stopped with the sweep")
                raise stop.cause from None
            recorded(record, where(run, number, len(batch), what))

    def execute_on_slurm(batch: list[Run], what: str) -> None:
        _on_slurm(
            spec,
            out,
            batch,
            lambda record, run, number: recorded(record, where(run, number, len(batch), what)),
            progress,
        )

    execute = execute_on_slurm if spec.executor == "slurm" else execute_here
    with interruptible():  # SIGTERM too stops the run in progress and records it, instead of orphaning it
        execute(todo, "")
        for _ in range(spec.rerun_contended):
            reruns = contended_reruns(spec, read_results(results), out)
            if not reruns:
                break
            execute(reruns, " re-runs")
    return read_results(results)


def _on_slurm(
    spec: Spec,
    out: Path,
    batch: list[Run],
    recorded: Callable[[RunRecord, Run, int], None],
    progress: Callable[[str], None],
) -> None:
    """Run ``batch`` as SLURM jobs: submit what this sweep has not submitted yet, wait for every job, record each
    as it ends. Stopping the sweep leaves the jobs running: ``--resume`` waits for them."""
    options = parse_slurm_options(spec.slurm)
    folder = out / "slurm"
    jobs = load_jobs(out)
    by_key = {run.key: run for run in batch}
    new = [run for run in batch if run.key not in jobs]
    if new:
        for run in new:
            Path(run.config.output_dir).mkdir(parents=True, exist_ok=True)
        submitted = submit(folder, spec.name, [(run.key, run.config) for run in new], options, spec.timeout_s)
        jobs.update(submitted)
        save_jobs(out, jobs)  # before waiting: a stopped sweep finds its jobs again
        progress(f"submitted {len(submitted)} SLURM job(s): {', '.join(submitted[run.key] for run in new)}")
    waiting = {key: jobs[key] for key in by_key}
    if len(waiting) > len(new):
        progress(f"waiting for {len(waiting) - len(new)} SLURM job(s) submitted before")
    ended = 0

    def on_end(key: str, outcome: Outcome) -> None:
        nonlocal ended
        ended += 1
        run = by_key[key]
        recorded(slurm_record(run, outcome, spec.contention_threshold), run, ended)

    try:
        wait_for(folder, waiting, options.poll_s, on_end)
    except KeyboardInterrupt:
        progress("the sweep stopped; its SLURM jobs go on (scancel to stop them): --resume waits for them")
        raise


def slurm_record(run: Run, outcome: Outcome, threshold: float) -> RunRecord:
    """The record of a run that ran as a SLURM job: as a local run's, with SLURM's state and reason."""
    run_dir = Path(run.config.output_dir)
    if outcome.console is not None and run_dir.is_dir():
        (run_dir / "console.log").write_text(outcome.console)
    state = outcome.slurm
    elapsed = state.run_time_s if state is not None and state.run_time_s is not None else 0.0
    record = new_record(run, elapsed, outcome.exit_code)
    record["slurm"] = {
        "job_id": outcome.job_id,
        "state": state.state if state else None,
        "reason": state.reason if state else None,
        "exit_code": state.exit_code if state else None,
    }
    # SLURM stopped the job (time limit, scancel, a lost node ...) whatever the run managed to return: its state
    # says why. A job that ran its course is COMPLETED, or FAILED when the run itself failed.
    stopped = state is not None and state.state not in ("COMPLETED", "FAILED")
    if outcome.exit_code is None or stopped:
        said = state.describe(outcome.job_id) if state else f"SLURM job {outcome.job_id} is unknown to SLURM"
        status = "timeout" if state is not None and state.state == "TIMEOUT" else "failed"
        last = _last_error(run_dir / "console.log")
        record.update({"status": status, "error": said + (f": {last}" if last else "")})
        return finish_record(record, threshold)
    record = finish_record(record, threshold)
    if record["status"] != "completed" and state is not None:
        record["error"] = f"{record['error']} ({state.describe(outcome.job_id)})"
    return record


def _outcome(record: RunRecord) -> str:
    if record["status"] != "completed" or record["summary"] is None:
        return f"{record['status'].upper()}: {record['error']}"
    # The run's summary.json as read back: looked up defensively, as plain data.
    summary: Mapping[str, Any] = record["summary"]
    window = ((summary.get("steps") or {}).get("global") or {}).get("window_s")
    measured = f", {window:.1f} s measured" if window else ""
    contended = ""
    if record["contended"]:
        share = (summary.get("contention") or {}).get("foreign_cpu_share") or 0.0
        contended = f"; CONTENDED: other processes used {share:.0%} of the CPUs"
    return f"ok: {summary['samples_per_s']:.0f} samples/s in {record['elapsed_s']:.1f} s{measured}{contended}"
