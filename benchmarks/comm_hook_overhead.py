"""What the communication timing hook costs: per-step time of the real trainer with DDP's built-in all-reduce and
with the timing hook (``ignite_ddl.comm``), on the same work.

Both variants are ``train(config)`` with the same model, data, global batch, processes and threads; only
``comm_timing`` differs. Each run is timed as ``overhead.py`` times ours: the clock is read at the end of warm-up
iteration W and of iteration W + M, so the window holds M whole iterations. The two variants alternate, their order
flipping every round, so drifts of the machine hit both alike. Each round gives one paired ratio (hook / default);
the result is the mean of those ratios with its 95 % Student-t interval, beside the ratio of the medians.

Usage:
    python benchmarks/comm_hook_overhead.py                # about 4 minutes on 2 cores
    python benchmarks/comm_hook_overhead.py --repeats 11 --json comm_hook_overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from overhead import Window, bench_config, machine, run_ours

from ignite_ddl.contention import ForeignLoad
from ignite_ddl.report.stats import mean_interval

VARIANTS = {"ddp-default": False, "timing-hook": True}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="rounds of both variants (default 9)")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up iterations per run (default 10)")
    parser.add_argument("--iters", type=int, default=100, help="measured iterations per run (default 100)")
    parser.add_argument("--model", default="cnn", help="model name as in TrainConfig (default cnn)")
    parser.add_argument("--batch-size", type=int, default=128, help="GLOBAL batch size (default 128)")
    parser.add_argument("--procs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP bucket size (default 25)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.procs < 2:
        parser.error("the hook exists only with 2 or more processes")
    window = Window(args.warmup, args.iters)
    base = replace(bench_config(args.procs, args, window), measure_flops=False, bucket_cap_mb=args.bucket_cap_mb)

    info = machine()
    print(f"machine: {info['cpu']}, {info['cpu_cores']} cores | torch {info['torch']}, ignite {info['ignite']}")
    print(f"model {args.model}, global batch {args.batch_size}, {args.procs} processes, buckets of "
          f"{args.bucket_cap_mb:g} MiB, {args.warmup} warm-up + {args.iters} measured iterations per run, "
          f"{args.repeats} rounds")  # fmt: skip
    steps: dict[str, list[float]] = {name: [] for name in VARIANTS}
    busiest = 0.0
    with tempfile.TemporaryDirectory(prefix="ignite_ddl_comm_hook_") as tmp:
        for repeat in range(args.repeats):
            order = list(VARIANTS) if repeat % 2 == 0 else list(reversed(VARIANTS))
            for name in order:
                with ForeignLoad() as other:
                    step = run_ours(replace(base, comm_timing=VARIANTS[name]), window, Path(tmp) / f"{name}-{repeat}")
                steps[name].append(step)
                busiest = max(busiest, other.share or 0.0)
                print(f"  round {repeat + 1}/{args.repeats} {name:11s}: {step * 1e3:7.2f} ms/step", flush=True)

    ratios = [hook / default for hook, default in zip(steps["timing-hook"], steps["ddp-default"])]
    paired = mean_interval(ratios)
    medians = {name: statistics.median(v) for name, v in steps.items()}
    results = {
        "machine": info,
        "options": vars(args) | {"json": str(args.json) if args.json else None},
        "steps_s": steps,
        "median_s": medians,
        "median_ratio": medians["timing-hook"] / medians["ddp-default"],
        "paired_ratio": {"mean": paired.value, "low": paired.low, "high": paired.high, "n": paired.n},
        "foreign_cpu_share_max": busiest,
    }
    for name, median in medians.items():
        print(f"{name:>11}: median {median * 1e3:.2f} ms/step")
    print(f"ratio hook / default: median {results['median_ratio']:.3f}; paired per round {paired.value:.3f} "
          f"(95 % interval {paired.low:.3f} to {paired.high:.3f}, {paired.n} rounds)")  # fmt: skip
    if busiest > 0.05:
        print(f"warning: other processes used up to {busiest:.0%} of the CPUs; rerun on an idle machine")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
