"""How ``ignite-ddl report`` scales with the number of records: wall time and peak resident memory.

Writes a sweep folder of N synthetic run records that pass the results schema (``results.jsonl`` records shaped as
a sweep writes them: the full option set, a summary with per-rank steps, memory, FLOPs, contention, history and a
10-class confusion matrix; about 1 % of the runs contended and re-run, 0.5 % failed), optionally a run folder per
run (``config.json`` and ``steps_rank<r>.csv``, as a run leaves them), then times ``ignite-ddl report`` on it in a
child process and reads the child's peak RSS (``ru_maxrss`` from ``os.wait4``). Two shapes by default:

- ``100x500``: 100 configurations x 500 repeats (a long study of a few configurations);
- ``10000x5``: 10,000 configurations x 5 repeats (a large grid, a SLURM sweep of a few thousand runs and more).

Usage: python benchmarks/report_scale.py [--shapes 100x500 10000x5] [--no-run-dirs] [--timeout 900] [--json out]

Measured on a 2-core AMD EPYC VM (no GPU), run folders included, 50,460 / 50,491 records (293 MiB of results):
before the streaming report, 100x500 took 100.5 s at 2483 MiB peak and 10000x5 was killed at 600 s, 7787 MiB;
after, 31.1 s / 275 MiB and 33.8 s / 502 MiB.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ignite_ddl.core.config import TrainConfig

SHAPES = {"100x500": (100, 500), "10000x5": (10_000, 5)}
MODELS = ("cnn", "mlp")
PROCS = (1, 2)
BATCHES = (32, 64, 128, 256, 512)
CONTENDED = 0.01  # share of runs recorded contended (each re-run once)
FAILED = 0.005  # share of runs that failed
VERSIONS = {"python": "3.11.7", "torch": "2.14.1", "torchvision": "0.29.1", "ignite": "0.5.5", "cuda": "13.0"}
HOST = {"hostname": "vm", "platform": "linux", "cpu": "AMD EPYC", "cpu_cores": 2}


def grid_of(index: int, configs: int) -> dict[str, Any]:
    """The grid values of configuration ``index``: model x processes x batch size x learning rate."""
    per_lr = len(MODELS) * len(PROCS) * len(BATCHES)
    rest, lr = divmod(index, max(1, configs // per_lr))
    rest, batch = divmod(rest, len(BATCHES))
    model, procs = divmod(rest, len(PROCS))
    return {
        "model": MODELS[model % len(MODELS)],
        "nproc_per_node": PROCS[procs],
        "batch_size": BATCHES[batch],
        "lr": round(0.01 + 0.0001 * lr, 6),
    }


def _rank(rank: int, rate: float, rng: random.Random) -> dict[str, Any]:
    step = 64 / rate
    return {
        "rank": rank,
        "iterations": 40,
        "samples": 2560,
        "window_s": 40 * step,
        "samples_per_s": rate,
        "step_s_mean": step,
        "step_s_p50": step * 0.98,
        "step_s_p90": step * 1.1,
        "step_s_p99": step * 1.3,
        "data_s_mean": step * 0.02,
        "data_share": 0.02,
        "forward_s_mean": step * 0.35,
        "backward_s_mean": step * 0.55,
        "optimizer_s_mean": step * 0.05,
        "own_s_mean": step * 0.42,
        "comm_s_mean": step * 0.2,
        "exposed_comm_s_mean": step * 0.05,
        "backward_compute_s_mean": step * 0.5,
        "overlap": 0.75,
        "comm_bytes_per_step": 472_000.0,
        "buckets_per_step": 1.0,
        "busbw_Bps": 2.1e9 * rng.uniform(0.9, 1.1),
        "handlers_s_mean": step * 0.03,
    }


def summary_of(grid: dict[str, Any], rate: float, contended: bool, rng: random.Random) -> dict[str, Any]:
    """A completed run's summary.json, every section filled the way the trainer fills it."""
    world = grid["nproc_per_node"]
    ranks = [_rank(r, rate / world, rng) for r in range(world)]
    step = ranks[0]["step_s_mean"]
    share = rng.uniform(0.2, 0.5) if contended else rng.uniform(0.0, 0.05)
    rss = int(6e8 * rng.uniform(0.98, 1.02))
    return {
        "schema_version": 2,
        "status": "completed",
        "world_size": world,
        "backend": "gloo" if world > 1 else "none",
        "device": {"type": "cpu", "name": HOST["cpu"]},
        "threads_per_process": max(1, HOST["cpu_cores"] // world),
        "cpu_cores": HOST["cpu_cores"],
        "launch_mode": "spawn" if world > 1 else "serial",
        "launcher": None,
        "nproc_per_node": world,
        "nnodes": 1,
        "start_method": "fork" if world > 1 else None,
        "dataset": "synthetic",
        "model": grid["model"],
        "amp": "none",
        "strategy": "ddp" if world > 1 else "none",
        "batch": {
            "requested_global": grid["batch_size"],
            "per_rank": grid["batch_size"] // world,
            "global": grid["batch_size"],
            "accumulate": 1,
            "micro": grid["batch_size"] // world,
        },
        "epochs": 1,
        "iterations": 45,
        "epoch_length": 45,
        "wall_time_s": 45 * step + 1.0,
        "train_time_s": 45 * step,
        "train_samples": 2880,
        "samples_per_s": rate,
        "samples_per_s_source": "steps",
        "final_train_loss": 1.9,
        "initial_train_loss": 2.3,
        "diverged": None,
        "val_accuracy": 0.4 + rng.uniform(0, 0.05),
        "val_loss": 1.8,
        "best_val_accuracy": 0.42,
        "stopped_early_at_epoch": None,
        "confusion_matrix": [[rng.randrange(0, 60) for _ in range(10)] for _ in range(10)],
        "last_checkpoint": None,
        "resumed_from": None,
        "history": [
            {
                "epoch": 1,
                "iteration": 45,
                "train_loss": 1.9,
                "train_samples": 2880,
                "train_time_s": 45 * step,
                "samples_per_s": rate,
                "val_accuracy": 0.41,
                "val_loss": 1.8,
            }
        ],
        "steps": {
            "warmup_iterations": 5,
            "ranks": ranks,
            "global": {
                "samples": 2560 * world,
                "window_s": 40 * step,
                "samples_per_s": rate,
                "step_s_p50": step * 0.98,
                "step_s_p90": step * 1.1,
                "step_s_p99": step * 1.3,
                "data_share": 0.02,
                "comm_s_mean": step * 0.2 if world > 1 else None,
                "exposed_comm_s_mean": step * 0.05 if world > 1 else None,
                "overlap": 0.75 if world > 1 else None,
                "busbw_Bps": 2.1e9 if world > 1 else None,
            },
            "straggler": {"rank": world - 1, "own_s_mean": step * 0.43, "median_own_s_mean": step * 0.42, "ratio": 1.02}
            if world > 1
            else None,
            "comm_wait": None,
            "comm_reference": None,
        },
        "contention": {
            "foreign_cpu_share": share,
            "foreign_gpu_share": None,
            "nodes": [
                {
                    "node": 0,
                    "cpus": 2,
                    "window_s": 40 * step,
                    "busy_cpu_s": 80 * step,
                    "own_cpu_s": 80 * step * (1 - share),
                    "foreign_cpu_share": share,
                }
            ],
        },
        "profiler": None,
        "flops": {
            "per_sample": {"forward": 1.1e7, "backward": 2.1e7, "total": 3.2e7},
            "precision": "fp32",
            "datasheet_peak": None,
            "matmul_size": 1024,
            "ranks": [
                {
                    "rank": r,
                    "achieved_flops_per_s": 3.2e7 * rate / world,
                    "attainable_flops_per_s": 3e10,
                    "utilisation_attainable": 3.2e7 * rate / world / 3e10,
                    "utilisation_peak": None,
                }
                for r in range(world)
            ],
            "achieved_flops_per_s": 3.2e7 * rate / world,
            "utilisation_attainable": 3.2e7 * rate / world / 3e10,
            "utilisation_peak": None,
        },
        "memory": {
            "source": "/proc (VmHWM)",
            "window": "after warm-up",
            "limit_bytes": 25_000_000_000,
            "ranks": [
                {
                    "rank": r,
                    "peak_rss_bytes": rss,
                    "workers": 0,
                    "workers_peak_rss_bytes": 0,
                    "workers_private_bytes": 0,
                    "held_bytes": {"params": 118568, "grads": 118568, "optimizer": 118568},
                    "cuda": None,
                    "reset_after_warmup": True,
                }
                for r in range(world)
            ],
            "max": {
                "peak_rss_bytes": rss,
                "workers_peak_rss_bytes": 0,
                "held_bytes": 355704,
                "cuda_max_allocated_bytes": None,
                "cuda_max_reserved_bytes": None,
            },
        },
    }


def records(configs: int, repeats: int, out: Path, seed: int = 0) -> Iterator[dict[str, Any]]:
    """The sweep's records in interleaved order (every configuration's first repeat, then the second, ...), each
    contended run followed at the end of its round by its re-run."""
    rng = random.Random(seed)
    base = TrainConfig().to_dict() | {"dataset": "synthetic", "epochs": 1, "train_size": 2880}
    grids = [grid_of(i, configs) for i in range(configs)]
    means = [1000.0 * rng.uniform(0.5, 1.5) for _ in range(configs)]
    position = 0
    for repeat in range(repeats):
        reruns = []
        for index in range(configs):
            grid = grids[index]
            digest = hashlib.sha1(json.dumps(grid, sort_keys=True).encode()).hexdigest()[:12]
            for attempt in (0, 1):
                if attempt and (index, repeat) not in reruns:
                    break
                name = f"cfg{index:05d}-r{repeat}" + (f"-a{attempt}" if attempt else "")
                run_dir = str(out / "runs" / name)
                contended = attempt == 0 and rng.random() < CONTENDED
                failed = not contended and rng.random() < FAILED
                rate = rng.gauss(means[index], 0.02 * means[index])
                yield {
                    "key": f"{digest}-r{repeat}",
                    "index": index,
                    "repeat": repeat,
                    "attempt": attempt,
                    "position": position,
                    "grid": grid,
                    "config": base | grid | {"output_dir": run_dir},
                    "run_dir": run_dir,
                    "elapsed_s": 5.0,
                    "exit_code": 1 if failed else 0,
                    "status": "failed" if failed else "completed",
                    "error": "rank 0 failed: RuntimeError: synthetic" if failed else None,
                    "contended": contended,
                    "summary": None if failed else summary_of(grid, rate, contended, rng),
                }
                position += 1
                if contended:
                    reruns.append((index, repeat))


def write_run_dir(record: dict[str, Any]) -> None:
    """What a run leaves in its folder that a report may read: config.json and a steps CSV per rank."""
    run_dir = Path(record["run_dir"])
    run_dir.mkdir(parents=True)
    summary = record["summary"] or {}
    facts = {k: summary.get(k) for k in ("world_size", "backend", "device", "threads_per_process", "cpu_cores")}
    config = {"schema_version": 2, "config": record["config"], **facts, "versions": VERSIONS, "host": HOST}
    (run_dir / "config.json").write_text(json.dumps(config))
    step = 64 / (summary.get("samples_per_s") or 1000.0)
    for rank in range(record["grid"]["nproc_per_node"]):
        rows = ["iteration,warmup,data_s,step_s"]
        rows += [f"{i},{int(i < 5)},{0.02 * step:.6f},{step * (1 + 0.01 * (i % 7)):.6f}" for i in range(45)]
        (run_dir / f"steps_rank{rank}.csv").write_text("\n".join(rows) + "\n")


def write_sweep(out: Path, configs: int, repeats: int, run_dirs: bool) -> int:
    """Write the sweep folder; return the number of records."""
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(out / "results.jsonl", "w") as f:
        for record in records(configs, repeats, out):
            f.write(json.dumps(record) + "\n")
            if run_dirs:
                write_run_dir(record)
            count += 1
    spec = {"name": f"scale-{configs}x{repeats}", "repeats": repeats, "order": "interleaved", "start": "preloaded"}
    meta = {
        "spec": spec,
        "versions": VERSIONS,
        "host": HOST,
        "sessions": [{"started": "2025-01-01T00:00:00+00:00", "wall_s": 5.0 * count, "runs": count}],
    }
    (out / "sweep.json").write_text(json.dumps(meta))
    return count


def measure(out: Path, timeout: float) -> dict[str, Any]:
    """Wall time, peak RSS (MiB) and exit status of ``ignite-ddl report out`` in a child process."""
    command = [sys.executable, "-m", "ignite_ddl", "report", str(out)]
    began = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = began + timeout
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            os.killpg(child.pid, signal.SIGKILL)
            pid, status, usage = os.wait4(child.pid, 0)
            break
        time.sleep(0.05)
    wall = time.perf_counter() - began
    child.returncode = os.waitstatus_to_exitcode(status)
    output = child.stdout.read().decode(errors="replace") if child.stdout else ""
    return {
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024),  # kilobytes on Linux
        "exit": child.returncode,
        "timed_out": wall > timeout,
        "last_line": output.strip().splitlines()[-1] if output.strip() else "",
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), help="CONFIGSxREPEATS, e.g. 100x500")
    parser.add_argument("--no-run-dirs", action="store_true", help="records only, no run folders")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the sweeps (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="report_scale_"))
    results = []
    try:
        for shape in args.shapes:
            configs, repeats = (int(n) for n in shape.lower().split("x"))
            out = root / shape
            shutil.rmtree(out, ignore_errors=True)
            began = time.perf_counter()
            count = write_sweep(out, configs, repeats, not args.no_run_dirs)
            size = (out / "results.jsonl").stat().st_size
            print(
                f"{shape}: {count} records, {size / 2**20:.0f} MiB of results.jsonl, written in "
                f"{time.perf_counter() - began:.0f} s",
                flush=True,
            )
            result = {
                "shape": shape,
                "records": count,
                "results_mib": round(size / 2**20),
                **measure(out, args.timeout),
            }
            print(
                f"{shape}: report in {result['wall_s']} s, peak RSS {result['peak_rss_mib']} MiB, exit "
                f"{result['exit']}{' (killed at the timeout)' if result['timed_out'] else ''}: "
                f"{result['last_line']}",
                flush=True,
            )
            results.append(result)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"machine: {_cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
