"""Sweeps: run a grid of training configurations, one fresh launch each, into one crash-safe results file.

A spec (YAML, or the same keys from the command line) names the grid::

    name: quickstart            # the sweep's name (default output directory: runs/<name>)
    base:                       # TrainConfig options shared by every configuration
      epochs: 2
    grid:                       # every combination of these values is one configuration
      nproc_per_node: [1, 2]
      batch_size: [32, 128]
    repeats: 2                  # runs per configuration
    timeout_s: 600              # wall-time limit of one run

Each run is ``ignite-ddl train`` in its own process group with its own output directory under ``runs/``; when it
ends, one JSON line (the configuration plus its summary, or the reason it failed) is appended to
``results.jsonl`` and synced to disk. A failed, refused or timed-out run is recorded and the sweep goes on.
``--resume`` skips runs already recorded; a line cut short by a killed sweep is dropped on resume.

Example:
    >>> spec = parse_spec({"name": "demo", "grid": {"nproc_per_node": [1, 2]}, "base": {"epochs": 1}})
    >>> [run.grid for run in expand(spec)]
    [{'nproc_per_node': 1}, {'nproc_per_node': 2}]
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ignite_ddl.config import ConfigError, TrainConfig
from ignite_ddl.environment import host, versions
from ignite_ddl.results import read_json, write_json

SPEC_KEYS = ("name", "base", "grid", "repeats", "timeout_s", "output_dir")


@dataclass(frozen=True)
class Spec:
    name: str
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    repeats: int = 1
    timeout_s: float = 600.0
    output_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Run:
    """One run of a sweep: a configuration and the index of its repeat."""

    index: int  # position of the configuration in the grid
    repeat: int
    grid: dict[str, Any]  # this configuration's grid values
    config: TrainConfig

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
    spec = Spec(
        name=str(data.get("name", default_name)),
        base=base,
        grid=grid,
        repeats=_positive(data, "repeats", int, 1),
        timeout_s=_positive(data, "timeout_s", (int, float), 600.0),
        output_dir=data.get("output_dir"),
    )
    for _ in expand(spec):  # validates every combination before anything runs
        pass
    return spec


def _positive(data: dict, key: str, kind: type | tuple, default: Any) -> Any:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise ConfigError(f"spec '{key}' must be a positive number, got {value!r}")
    return value


def expand(spec: Spec, output_dir: str | Path = ".") -> Iterator[Run]:
    """Every run of the sweep, configurations in grid order, repeats of a configuration together."""
    keys = list(spec.grid)
    for index, values in enumerate(itertools.product(*(spec.grid[k] for k in keys))):
        grid = dict(zip(keys, values))
        for repeat in range(spec.repeats):
            run_dir = Path(output_dir) / "runs" / f"cfg{index:03d}-r{repeat}"
            config = TrainConfig.from_dict({**spec.base, **grid, "output_dir": str(run_dir)})
            try:
                config.check()
            except ConfigError as e:
                raise ConfigError(f"configuration {dict(grid)}: {e}") from None
            yield Run(index, repeat, grid, config)


# -- results.jsonl: whole lines only


def read_results(path: Path) -> list[dict[str, Any]]:
    """The records of a results file; a last line cut short (a sweep killed while writing) is ignored."""
    return _complete_records(path)[0]


def _complete_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The complete records at the start of ``path`` and the number of bytes they take."""
    if not path.exists():
        return [], 0
    records, size = [], 0
    for line in path.read_bytes().splitlines(keepends=True):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("incomplete line")
            records.append(json.loads(line))
        except ValueError:
            break
        size += len(line)
    return records, size


def _repair(path: Path) -> None:
    """Cut a results file back to its last complete record, so appended lines start on a line of their own."""
    _, size = _complete_records(path)
    if path.exists() and path.stat().st_size != size:
        with open(path, "r+b") as f:
            f.truncate(size)


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one record as a single line in one write, then sync it to disk."""
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


# -- running


def run_one(run: Run, timeout_s: float) -> dict[str, Any]:
    """Train one configuration in a fresh process group; its record for results.jsonl."""
    run_dir = Path(run.config.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "ignite_ddl", "train", *run.config.to_argv(), "--no-progress"]
    start = time.monotonic()
    with open(run_dir / "console.log", "w") as console:
        proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = None
        except BaseException:  # Ctrl-C: take the run's processes down with the sweep
            _kill_group(proc)
            raise
    record: dict[str, Any] = {
        "key": run.key, "index": run.index, "repeat": run.repeat, "grid": run.grid, "config": run.config.to_dict(),
        "run_dir": str(run_dir), "elapsed_s": round(time.monotonic() - start, 3), "exit_code": code,
    }  # fmt: skip
    summary_path = run_dir / "summary.json"
    if code == 0 and summary_path.is_file():
        return {**record, "status": "completed", "error": None, "summary": read_json(summary_path)}
    if code is None:
        status, error = "timeout", f"timed out after {timeout_s:g} s"
    else:
        status = "refused" if code == 2 else "failed"
        error = _last_error(run_dir / "console.log") or _exit_reason(code)
    return {**record, "status": status, "error": error, "summary": None}


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the run's whole process group, SIGKILL what is left after a grace period."""
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _last_error(console: Path) -> str | None:
    """The one-line error the run printed last (or its last line)."""
    lines = [line.strip() for line in console.read_text(errors="replace").splitlines() if line.strip()]
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


def sweep(
    spec: Spec,
    output_dir: str | Path | None = None,
    resume: bool = False,
    progress: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Run every configuration of ``spec`` not yet recorded; return all records of the sweep.

    Refuses (:class:`ConfigError`) to write into an existing sweep without ``resume``.
    """
    out = sweep_dir(spec, output_dir)
    results = out / "results.jsonl"
    if results.exists() and not resume:
        raise ConfigError(f"{results} exists: pass --resume to continue that sweep, or choose another --output-dir")
    runs = list(expand(spec, out))
    out.mkdir(parents=True, exist_ok=True)
    _repair(results)
    done = {r["key"] for r in read_results(results)}
    write_json(out / "sweep.json", {"spec": spec.to_dict(), "versions": versions(), "host": host()})
    todo = [run for run in runs if run.key not in done]
    if done:
        progress(f"resuming: {len(runs) - len(todo)} of {len(runs)} runs already recorded")
    for position, run in enumerate(todo, 1):
        where = f"[{position}/{len(todo)}] cfg{run.index:03d} {run.label} (repeat {run.repeat + 1}/{spec.repeats})"
        progress(f"{where} ...")
        record = run_one(run, spec.timeout_s)
        append_record(results, record)
        if record["status"] == "completed":
            progress(f"{where} ok: {record['summary']['samples_per_s']:.0f} samples/s in {record['elapsed_s']:.1f} s")
        else:
            progress(f"{where} {record['status'].upper()}: {record['error']}")
    return read_results(results)
