"""What the communication timing hook costs: per-step time of the real trainer with DDP's built-in all-reduce and
with the timing hook (``ignite_ddl.measure.comm``), on the same work.

Both variants are ``train(config)`` with the same model, data, global batch, processes and threads; only
``comm_timing`` differs. Each run is timed as ``overhead.py`` times ours: the clock is read at the end of warm-up
iteration W and of iteration W + M, so the window holds M whole iterations. The two variants alternate, their order
flipping every round, so drifts of the machine hit both alike. Each round gives one paired ratio (hook / default);
the result is the mean of those ratios with its 95 % Student-t interval, beside the ratio of the medians.

Run-to-run noise on a shared machine is several per cent, far above what a hook costs, so ``--step-pairs N`` also
measures at the finest grain: in one 2-process group, two DDP replicas of the same model (DDP's default and the
timing hook) take training steps in turn, N pairs, the order flipping every pair, each step timed on its own between
barriers. That gives the hook's cost per step with drifts cancelled; its interval treats the pairs of one run as
independent, so it says how precisely the cost is resolved, not how it varies between runs.

Usage:
    python benchmarks/comm_hook_overhead.py                # about 4 minutes on 2 cores
    python benchmarks/comm_hook_overhead.py --repeats 11 --json comm_hook_overhead.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
import ignite.distributed as idist
import torch
from bench_common import finish, print_machine
from overhead import Window, bench_config, run_ours
from torch import nn

from ignite_ddl.launcher import LaunchSettings, launch
from ignite_ddl.measure.comm import CommTimer
from ignite_ddl.measure.contention import ForeignLoad
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.report.stats import mean_interval
from ignite_ddl.trainer.models import build_model

VARIANTS = {"ddp-default": False, "timing-hook": True}


def _paired_steps(local_rank: int, model: str, batch: int, pairs: int, warmup: int, cap: float) -> list[list[float]]:
    """Per-step seconds of [default, hook] for each pair, on every rank (returned by rank 0)."""
    replicas, timers = [], []
    for timed in (False, True):
        torch.manual_seed(0)
        net = nn.parallel.DistributedDataParallel(build_model(model, 3, 32, 10), bucket_cap_mb=cap)
        timers.append(CommTimer(torch.device("cpu")).attach(net) if timed else None)
        replicas.append((net, torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)))
    per_rank = batch // idist.get_world_size()
    x, y = torch.randn(per_rank, 3, 32, 32), torch.randint(0, 10, (per_rank,))

    def step(variant: int) -> float:
        net, optimizer = replicas[variant]
        idist.barrier()
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(net(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        timer = timers[variant]
        if timer is not None:
            timer.take()  # as the step recorder does at the end of every iteration
        return time.perf_counter() - start

    times = []
    for i in range(warmup + pairs):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        pair = {variant: step(variant) for variant in order}
        if i >= warmup:
            times.append([pair[0], pair[1]])
    return gather_objects(times)


def step_pairs(args: argparse.Namespace) -> dict[str, Any]:
    settings = LaunchSettings(backend="gloo", nproc_per_node=args.procs, start_method="fork")
    per_rank = launch(
        _paired_steps, settings, args.model, args.batch_size, args.step_pairs, args.warmup, args.bucket_cap_mb
    )
    # A step ends on every rank when its all-reduce does: the slowest rank's time is the step's.
    pairs = [[max(r[i][v] for r in per_rank) for v in (0, 1)] for i in range(len(per_rank[0]))]
    ratios = [hook / default for default, hook in pairs]
    paired = mean_interval(ratios)
    default, hook = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
    print(
        f"step pairs ({len(pairs)}): default median {default * 1e3:.3f} ms, hook median {hook * 1e3:.3f} ms, "
        f"ratio of medians {hook / default:.4f}; paired {paired.value:.4f} (95 % interval {paired.low:.4f} to "
        f"{paired.high:.4f}); hook cost per step {1e6 * (hook - default):+.0f} us"
    )
    return {
        "pairs": len(pairs),
        "median_default_s": default,
        "median_hook_s": hook,
        "median_ratio": hook / default,
        "paired_ratio": {"mean": paired.value, "low": paired.low, "high": paired.high},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="rounds of both variants (default 9)")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up iterations per run (default 10)")
    parser.add_argument("--iters", type=int, default=100, help="measured iterations per run (default 100)")
    parser.add_argument("--model", default="cnn", help="model name as in TrainConfig (default cnn)")
    parser.add_argument("--batch-size", type=int, default=128, help="GLOBAL batch size (default 128)")
    parser.add_argument("--procs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP bucket size (default 25)")
    parser.add_argument(
        "--step-pairs",
        type=int,
        default=0,
        help="also time N alternating step pairs in one run (see above; default 0: not)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.procs < 2:
        parser.error("the hook exists only with 2 or more processes")
    if args.repeats < 1 and args.step_pairs < 1:
        parser.error("nothing to measure: give --repeats or --step-pairs")
    window = Window(args.warmup, args.iters)
    base = replace(bench_config(args.procs, args, window), measure_flops=False, bucket_cap_mb=args.bucket_cap_mb)

    info = print_machine()
    print(
        f"model {args.model}, global batch {args.batch_size}, {args.procs} processes, buckets of "
        f"{args.bucket_cap_mb:g} MiB, {args.warmup} warm-up + {args.iters} measured iterations per run, "
        f"{args.repeats} rounds"
    )
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

    results: dict[str, Any] = {"machine": info, "options": vars(args) | {"json": str(args.json) if args.json else None}}
    if args.repeats:
        ratios = [hook / default for hook, default in zip(steps["timing-hook"], steps["ddp-default"])]
        paired = mean_interval(ratios)
        medians = {name: statistics.median(v) for name, v in steps.items()}
        results["runs"] = {
            "steps_s": steps,
            "median_s": medians,
            "median_ratio": medians["timing-hook"] / medians["ddp-default"],
            "paired_ratio": {"mean": paired.value, "low": paired.low, "high": paired.high, "n": paired.n},
        }
        for name, median in medians.items():
            print(f"{name:>11}: median {median * 1e3:.2f} ms/step")
        ratio = results["runs"]["median_ratio"]
        print(
            f"ratio hook / default: median {ratio:.3f}; paired per round {paired.value:.3f} "
            f"(95 % interval {paired.low:.3f} to {paired.high:.3f}, {paired.n} rounds)"
        )
    if args.step_pairs:
        with ForeignLoad() as other:
            results["step_pairs"] = step_pairs(args)
        busiest = max(busiest, other.share or 0.0)
    return finish(results, busiest, args.json)


if __name__ == "__main__":
    main()
