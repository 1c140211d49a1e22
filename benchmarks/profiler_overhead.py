"""What measuring costs: per-step time of the real trainer with no instrumentation, with the step recorder, and
with each ``--profiler`` mode, on the same work.

Every variant is ``train(config)`` with the same model, data, global batch and threads; only the
measurement differs: ``none`` (``record_steps=False``, no profiler), ``recorder`` (the step recorder alone, as every
run has by default), and ``timer`` / ``basic`` / ``handlers`` (that Ignite profiler alone). Each run is timed the way
``overhead.py`` times ours: the clock is read at the end of warm-up iteration W and of iteration W + M, so the window
holds M whole iterations with every handler's work and nothing else. Variants alternate, R rounds, so drifts of the
machine hit all of them alike. The ratio is a variant's median step time over that of ``none``.

Usage:
    python benchmarks/profiler_overhead.py                 # about 3 minutes on 2 cores
    python benchmarks/profiler_overhead.py --procs 2 --repeats 7 --json profiler_overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
from overhead import Window, bench_config, machine, run_ours

from ignite_ddl.measure.contention import ForeignLoad

VARIANTS: dict[str, dict[str, Any]] = {
    "none": {"record_steps": False, "profiler": "none"},
    "recorder": {"record_steps": True, "profiler": "none"},
    "timer": {"record_steps": False, "profiler": "timer"},
    "basic": {"record_steps": False, "profiler": "basic"},
    "handlers": {"record_steps": False, "profiler": "handlers"},
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of all variants (default 5)")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up iterations per run (default 10)")
    parser.add_argument("--iters", type=int, default=150, help="measured iterations per run (default 150)")
    parser.add_argument("--model", default="cnn", help="model name as in TrainConfig (default cnn)")
    parser.add_argument("--batch-size", type=int, default=128, help="GLOBAL batch size (default 128)")
    parser.add_argument("--procs", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    window = Window(args.warmup, args.iters)
    base = bench_config(args.procs, args, window)

    info = machine()
    print(f"machine: {info['cpu']}, {info['cpu_cores']} cores | torch {info['torch']}, ignite {info['ignite']}")
    print(
        f"model {args.model}, global batch {args.batch_size}, {args.procs} process(es), {args.warmup} warm-up + "
        f"{args.iters} measured iterations per run, {args.repeats} rounds of {len(VARIANTS)} variants"
    )
    steps: dict[str, list[float]] = {name: [] for name in VARIANTS}
    busiest = 0.0
    with tempfile.TemporaryDirectory(prefix="ignite_ddl_profilers_") as tmp:
        for repeat in range(args.repeats):
            for name, options in VARIANTS.items():
                with ForeignLoad() as other:
                    step = run_ours(replace(base, **options), window, Path(tmp) / f"{name}-{repeat}")
                steps[name].append(step)
                busiest = max(busiest, other.share or 0.0)
                print(f"  round {repeat + 1}/{args.repeats} {name:8s}: {step * 1e3:7.2f} ms/step", flush=True)

    reference = statistics.median(steps["none"])
    results = {
        name: {
            "median_s": statistics.median(v),
            "min_s": min(v),
            "runs_s": v,
            "ratio": statistics.median(v) / reference,
        }
        for name, v in steps.items()
    }
    print(f"\n{'variant':>9} | {'median ms':>9} {'min ms':>7} | {'ratio':>6}")
    print("-" * 40)
    for name, r in results.items():
        print(f"{name:>9} | {r['median_s'] * 1e3:>9.2f} {r['min_s'] * 1e3:>7.2f} | {r['ratio']:>6.3f}")
    print("ratio: median step time / that with no instrumentation (1.00 = free)")
    if busiest > 0.05:
        print(f"warning: other processes used up to {busiest:.0%} of the CPUs; rerun on an idle machine")

    report = {
        "benchmark": "profiler_overhead",
        "machine": info,
        "settings": vars(args) | {"json": None},
        "results": results,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return report


if __name__ == "__main__":
    main()
