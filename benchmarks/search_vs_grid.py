"""Search against grid: the best of a 40-configuration space found by search in a fraction of the grid's machine time?

The space, on the CNN with 2 gloo processes at most (runs on 2 cores): processes 1/2 x global batch 16/32/64/128/256
x gradient accumulation 1/2 x intra-op threads 1/2 = 40 configurations. First the full grid with adaptive repeats
(``repeats: auto``) as the reference; then a search of the same space (``search: {sampler, budget_runs, seed}``)
with each of ``--seeds`` seeds, its budget ``--share`` (default 35 %) of the runs the grid spent. Reported for each:
machine time (the sweep's wall time, from its ``sweep.json``), runs, the best named (or the tied set), whether the
search's best is the grid's best or in its tied set, and the regret: the grid's mean samples/s of its best minus the
grid's mean of the search's best, with a 95 % Welch interval (both measured in the reference, so the two figures
come from the same minutes of the machine).

The goal: the grid's best, or a configuration tied with it, in at most 35 % of the grid's machine time, for every
seed.

On a shared machine every run is measured beside other processes: ``--shared`` sets ``contention_threshold: 1``
(no run is set aside as contended) and ``on_busy: run``, and the table must be read as contended figures.

Usage: python benchmarks/search_vs_grid.py [--seeds 3] [--share 0.35] [--train-size 2048] [--max-repeats 5]
       [--small] [--shared] [--out DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
from bench_common import print_machine

from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.report import load
from ignite_ddl.sweep.runner import sweep
from ignite_ddl.sweep.spec import parse_spec

GRID = {"nproc_per_node": [1, 2], "batch_size": [16, 32, 64, 128, 256], "accumulate": [1, 2], "threads": [1, 2]}
# --small: 16 configurations, for a machine that cannot give the full grid its hour (the goal is stated for >= 36).
SMALL = {"nproc_per_node": [1, 2], "batch_size": [32, 128], "accumulate": [1, 2], "threads": [1, 2]}


def spec_of(args: argparse.Namespace, name: str, **more: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "base": {"model": "cnn", "dataset": "synthetic", "train_size": args.train_size, "val_size": 64, "epochs": 1},
        "grid": SMALL if args.small else GRID,
        "repeats": "auto",
        "min_repeats": 3,
        "max_repeats": args.max_repeats,
        "rerun_contended": 0,
        "timeout_s": 600,
        **more,
    }
    if args.shared:
        spec.update(contention_threshold=1.0, on_busy="run", busy_stop_after=0)
    return spec


def measure(spec: dict[str, Any], out: Path) -> dict[str, Any]:
    """Run ``spec`` into ``out``; its machine time, runs, verdict and per-configuration samples."""
    began = time.perf_counter()
    sweep(parse_spec(spec), out, progress=lambda line: None)
    wall = time.perf_counter() - began
    analysis = load(out)
    verdict = analysis.verdicts[0]
    meta = read_json(out / "sweep.json")
    samples = {json.dumps(c.grid, sort_keys=True): c.samples_per_s for c in analysis.configs}
    names = {c.name: json.dumps(c.grid, sort_keys=True) for c in analysis.configs}
    leader = max(analysis.configs, key=lambda c: c.throughput.value or 0.0)
    return {
        "wall_s": round(wall, 1),
        "machine_s": round(sum(float(s.get("wall_s") or 0.0) for s in meta["sessions"]), 1),
        "runs": sum(len(c.runs) for c in analysis.configs),
        "configurations": len(analysis.configs),
        "best": names.get(verdict.best) if verdict.best else None,
        "tied": [names[n] for n in verdict.tied],
        "equivalent": bool(verdict.equivalent),
        "leader": json.dumps(leader.grid, sort_keys=True),
        "samples": samples,
    }


def welch_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its 95 % Welch interval."""
    from scipy import stats

    diff = statistics.fmean(a) - statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, diff, diff
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.975, dof)) * math.sqrt(va + vb)
    return diff, diff - half, diff + half


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--share", type=float, default=0.35, help="the search's budget: this share of the grid's runs")
    parser.add_argument("--sampler", default="tpe", choices=("tpe", "gp", "random"))
    parser.add_argument(
        "--train-size",
        type=int,
        default=2048,
        help="samples per run's epoch (8 steps at batch 256; smaller: faster, noisier)",
    )
    parser.add_argument("--max-repeats", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="16 configurations instead of 40 (a busy machine)")
    parser.add_argument("--shared", action="store_true", help="a shared machine: measure every run, flag the table")
    parser.add_argument("--out", type=Path, default=None, help="keep the sweeps here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    info = print_machine()
    root = args.out or Path(tempfile.mkdtemp(prefix="search_vs_grid-"))
    grid = measure(spec_of(args, "grid"), root / "grid")
    best = grid["best"] or grid["leader"]
    tied = set(grid["tied"]) | {best}
    print(
        f"grid: {grid['configurations']} configurations, {grid['runs']} runs, {grid['machine_s']:.0f} s; best: "
        f"{grid['best'] or 'none named'}" + (f" (tied: {len(grid['tied'])})" if grid["tied"] else "")
    )
    budget = max(6, round(args.share * grid["runs"]))
    searches = []
    for seed in range(args.seeds):
        search = {"sampler": args.sampler, "budget_runs": budget, "seed": seed}
        found = measure(spec_of(args, f"search{seed}", search=search), root / f"search{seed}")
        named = found["best"] or found["leader"]
        regret = welch_interval(grid["samples"][best], grid["samples"][named]) if named != best else (0.0, 0.0, 0.0)
        found.update(
            seed=seed,
            named=named,
            right=named in tied,
            share_of_grid=round(found["machine_s"] / grid["machine_s"], 3),
            regret=[round(x, 1) for x in regret],
        )
        searches.append(found)
        print(
            f"search seed {seed}: {found['configurations']} configurations, {found['runs']} runs, "
            f"{found['machine_s']:.0f} s ({found['share_of_grid']:.0%} of the grid's); best: "
            f"{found['best'] or 'none named (leader ' + found['leader'] + ')'}; the grid's best or tied: "
            f"{found['right']}; regret {regret[0]:.1f} samples/s [{regret[1]:.1f}, {regret[2]:.1f}]"
        )
    goal = all(s["right"] and s["share_of_grid"] <= 0.35 for s in searches)
    print(f"goal (the grid's best or tied, in <= 35 % of its machine time, every seed): {'met' if goal else 'NOT met'}")
    if args.shared:
        print("note: measured on a shared machine (--shared): every figure above is contended")
    result = {"machine": info, "grid": grid, "searches": searches, "budget_runs": budget, "goal_met": goal}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
