"""Search against grid: does a search guided by the plan find the grid's best in a fifth of the grid's machine time?

The space is experiments/search/spec.yaml's: the built-in GPT, layout (one process; DDP, ZeRO-1, FSDP on 2 gloo
processes) x intra-op threads x global batch x accumulation x activation checkpointing, 96 configurations. First the
full grid with adaptive repeats (``repeats: auto``, no predictions) as the reference; then, for each of ``--seeds``
seeds, plain TPE (``guided: false``) and the guided search (``predict: true``: the plan's predictions steer it),
each with ``budget_s`` = ``--share`` (default 20 %) of the grid's machine time, its planning counted in it.

Written to ``--json`` (default docs/data/search_vs_grid.json), in the schema docs/search.md's table is generated
from (``python benchmarks/search_table.py`` rewrites it): ``configurations``, ``grid_tied_top`` (configurations
at the top of the grid's verdict: 1 where it names a best), ``grid_best`` (its grid values; the leader where none is
named), ``machine``, and per search ``sampler``, ``guided``, ``seed``, ``runs``, ``machine_s``,
``share_of_grid_time``, ``found_best_or_tied`` (the best the search names, else its leader, is the grid's best or
tied with it) and ``regret`` (how much slower that pick ran than the grid's best, both as the grid measured them, a
share of the best's samples/s).

The goal: every guided seed finds the grid's best or a tie of it in at most 20 % of the grid's machine time; plain
TPE is reported beside it, whatever it gives. The whole benchmark took 58 minutes on 2 cores (the grid 32): run it
on a quiet machine. ``--quick`` cuts the space to 8 configurations and the runs to a few steps, one seed: a check
that the benchmark runs (its JSON goes to ``--json`` only when given), not a measurement.

On a shared machine every run is measured beside other processes: ``--shared`` sets ``contention_threshold: 1``
(no run is set aside as contended) and ``on_busy: run``, and the table says the figures are contended.

Usage: python benchmarks/search_vs_grid.py [--seeds 3] [--share 0.2] [--max-repeats 15] [--quick] [--shared]
       [--out DIR] [--json docs/data/search_vs_grid.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
from bench_common import print_machine
from search_table import JSON

from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.report import load
from ignite_ddl.sweep.experiments import spec_path
from ignite_ddl.sweep.runner import sweep
from ignite_ddl.sweep.spec import load_spec, parse_spec

SPACE = (
    "the GPT (2 blocks of 128, 16-token sequences, Adam, 60 steps a run), layout {1 process; DDP, ZeRO-1, FSDP on "
    "2} x threads {1, 2} x batch {8, 32, 128} x accumulation {1, 4} x checkpointing {off, on}"
)
# --quick: 2 layouts x batch 8/32 x checkpointing, 2 threads, 8 steps a run: minutes, not an hour.
QUICK_GRID = {
    "nproc_per_node": [1, 2],
    "strategy": ["none", "ddp"],
    "threads": [2],
    "batch_size": [8, 32],
    "accumulate": [1],
    "activation_checkpointing": [False, True],
}
QUICK_SPACE = (
    "the GPT, layout {1 process; DDP on 2} x batch {8, 32} x checkpointing {off, on}, 2 threads, 8 steps a run"
)


def base_spec(args: argparse.Namespace) -> dict[str, Any]:
    """experiments/search/spec.yaml without its search (``--quick``: cut down)."""
    spec = load_spec(spec_path("experiments/search/spec.yaml")).to_dict()
    spec.pop("search", None)
    spec.update(repeats="auto", max_repeats=args.max_repeats, rerun_contended=0, predict=False)
    if args.quick:
        spec["grid"] = QUICK_GRID
        spec["base"] = {**spec["base"], "max_iters": 8, "warmup_iters": 2, "workload_args.train_sequences": 256}
        spec.update(min_repeats=2, max_repeats=min(args.max_repeats, 3))
    if args.shared:
        spec.update(contention_threshold=1.0, on_busy="run", busy_stop_after=0)
    return spec


def measure(spec: dict[str, Any], out: Path) -> dict[str, Any]:
    """Run ``spec`` into ``out``; its machine time, runs, verdict and per-configuration samples."""
    sweep(parse_spec(spec), out, progress=lambda line: None)
    analysis = load(out)
    verdict = analysis.verdicts[0]
    meta = read_json(out / "sweep.json")
    key = {c.name: json.dumps(c.grid, sort_keys=True) for c in analysis.configs}
    leader = max(analysis.configs, key=lambda c: c.throughput.value or 0.0)
    return {
        "machine_s": round(sum(float(s.get("wall_s") or 0.0) for s in meta["sessions"]), 1),
        "runs": sum(len(c.runs) for c in analysis.configs),
        "configurations": len(analysis.configs),
        "best": key.get(verdict.best) if verdict.best else None,
        "tied": [key[n] for n in verdict.tied],
        "leader": key[leader.name],
        "samples": {key[c.name]: c.samples_per_s for c in analysis.configs},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds of each search (default 3; --quick: 1)")
    parser.add_argument(
        "--share", type=float, default=0.2, help="each search's budget_s: this share of the grid's time"
    )
    parser.add_argument("--max-repeats", type=int, default=15, help="adaptive repeats' most rounds (default 15)")
    parser.add_argument("--quick", action="store_true", help="8 configurations, a few steps a run, one seed")
    parser.add_argument("--shared", action="store_true", help="a shared machine: measure every run, flag the table")
    parser.add_argument("--out", type=Path, default=None, help="keep the sweeps here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None, help=f"the results (default {JSON}; --quick: none)")
    args = parser.parse_args()
    path = args.json or (None if args.quick else JSON)
    seeds = 1 if args.quick and args.seeds == 3 else args.seeds
    info = {**print_machine(), "load_average": round(os.getloadavg()[0], 2)}
    root = args.out or Path(tempfile.mkdtemp(prefix="search_vs_grid-"))
    spec = base_spec(args)
    began = time.perf_counter()
    grid = measure({**spec, "name": "grid"}, root / "grid")
    top = {grid["best"]} if grid["best"] else set(grid["tied"]) or {grid["leader"]}
    best = grid["best"] or grid["leader"]
    best_mean = statistics.fmean(grid["samples"][best])
    print(
        f"grid: {grid['configurations']} configurations, {grid['runs']} runs, {grid['machine_s']:.0f} s; "
        f"{len(top)} at the top"
    )
    searches = []
    for seed in range(seeds):
        for guided in (False, True):
            search = {"sampler": "tpe", "budget_s": round(args.share * grid["machine_s"], 1), "seed": seed}
            name = f"{'guided' if guided else 'tpe'}{seed}"
            found = measure(
                {**spec, "name": name, "predict": guided, "search": {**search, "guided": guided}}, root / name
            )
            pick = found["best"] or found["leader"]
            measured = grid["samples"].get(pick) or []
            regret = (best_mean - statistics.fmean(measured)) / best_mean if measured and pick != best else 0.0
            searches.append(
                {
                    "sampler": "tpe",
                    "guided": guided,
                    "seed": seed,
                    "runs": found["runs"],
                    "machine_s": found["machine_s"],
                    "share_of_grid_time": round(found["machine_s"] / grid["machine_s"], 3),
                    "found_best_or_tied": pick in top,
                    "regret": round(max(regret, 0.0), 4),
                    "pick": json.loads(pick),
                    "configurations_measured": found["configurations"],
                }
            )
            s = searches[-1]
            print(
                f"{name}: {s['configurations_measured']} configurations, {s['runs']} runs, {s['machine_s']:.0f} s "
                f"({s['share_of_grid_time']:.0%} of the grid's); the grid's best or tied: {s['found_best_or_tied']}; "
                f"regret {s['regret']:.1%}"
            )
    result = {
        "configurations": grid["configurations"],
        "grid_tied_top": len(top),
        "grid_best": json.loads(best),
        "machine": info,
        "searches": searches,
        "grid": {"runs": grid["runs"], "machine_s": grid["machine_s"], "named_best": grid["best"] is not None},
        "space": QUICK_SPACE if args.quick else SPACE,
        "quick": args.quick,
        "shared": args.shared,
        "budget_share": args.share,
        "date": datetime.date.today().isoformat(),
        "wall_s": round(time.perf_counter() - began, 1),
    }
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"written: {path} (python benchmarks/search_table.py rewrites docs/search.md's table from it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
