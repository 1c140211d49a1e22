"""Collective bandwidth measured by the ``collectives`` lab (through ``ignite.distributed``) against a raw
``torch.distributed`` loop doing the same calls.

Two sides time all_reduce, all_gather and broadcast of float32 messages of the same sizes with the same number of
processes, backend, start method and intra-op threads per process:

* **ours**: the lab itself, ``ignite-ddl collectives --bench`` (``collectives.run``): ranks started by
  ignite_ddl's launcher through ``idist.Parallel``, calling ``idist.all_reduce`` / ``idist.all_gather`` /
  ``idist.broadcast``.
* **raw**: no Ignite: ``torch.multiprocessing.start_processes``, ``dist.init_process_group``, then
  ``dist.all_reduce(t)``, ``dist.all_gather(outputs, t)`` into preallocated outputs, ``dist.broadcast(t, 0)``.
  Forked ranks run in a fresh thread, as the launcher's do (see ``launcher.in_fresh_thread``).

Both sides run the lab's timing loop (``collectives.time_collectives``: warm-up calls, barrier, back-to-back timed
calls, device synchronised before each clock reading) and its figures (``collectives.bandwidth_rows``: time = mean
over ranks, algbw, busbw as nccl-tests defines them), so only the collective calls differ. Runs alternate (ours,
raw, ours, raw, ...) ``--repeats`` times so that slow drifts of the machine hit both sides alike.

Reading the result: ``ours/raw`` is ours' median time per call over raw's, per collective and size. 1.00 means
``idist`` adds nothing measurable. ``idist.all_gather`` allocates its outputs at every call and concatenates them
into one tensor, where the raw loop gathers into buffers it allocated once: expect that copy to show for large
messages. Small messages (well under a millisecond per call) are dominated by scheduling noise on a busy machine.

Usage:
    python benchmarks/collectives.py                          # 2 and 4 processes, 1K..64M, about 2-3 minutes
    python benchmarks/collectives.py --procs 2 --max-size 4M --repeats 5 --json collectives.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

from ignite_ddl import TrainConfig, plan_launch
from ignite_ddl.core.jsonfiles import write_json
from ignite_ddl.labs import collectives
from ignite_ddl.launcher import free_port, in_fresh_thread
from ignite_ddl.measure.contention import ForeignLoad

sys.path.insert(0, str(Path(__file__).parent))
from overhead import machine  # noqa: E402  (the sibling benchmark script, not a package)


def raw_ops(world: int) -> collectives.OpBuilders:
    return {
        "all_reduce": lambda t: partial(dist.all_reduce, t),
        "all_gather": lambda t: partial(dist.all_gather, [torch.empty_like(t) for _ in range(world)], t),
        "broadcast": lambda t: partial(dist.broadcast, t, src=0),
    }


def raw_worker(rank: int, backend: str, world: int, port: int, options: argparse.Namespace, out: Path) -> None:
    """One rank of the raw side; rank 0 writes every rank's seconds per call to ``out``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        sizes = collectives.message_sizes(options.min_size, options.max_size)
        ops = raw_ops(world)
        seconds = collectives.time_collectives(ops, sizes, world, device, dist.barrier, options.warmup, options.iters)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, seconds)
        if rank == 0:
            out.write_text(json.dumps(gathered))
    finally:
        dist.destroy_process_group()


def raw_rank(rank: int, threads: int, *args: Any) -> None:
    in_fresh_thread(threads, raw_worker, rank, *args)


def run_raw(config: TrainConfig, options: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    plan = plan_launch(config)  # the same backend, start method and threads per process as ours gets
    world, port = plan.world_size, plan.master_port or free_port(plan.master_addr)
    torch_mp.start_processes(
        raw_rank,
        args=(plan.threads, plan.backend, world, port, options, out),
        nprocs=world,
        join=True,
        start_method=plan.start_method,
    )
    sizes = collectives.message_sizes(options.min_size, options.max_size)
    return collectives.bandwidth_rows(sizes, world, json.loads(out.read_text()))


def run_ours(config: TrainConfig, options: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    result = collectives.run(
        **vars(options),
        backend=config.backend,
        nproc_per_node=config.nproc_per_node,
        output_dir=str(out.parent),
        bench=True,
    )
    failed = [c["claim"] for c in result["checks"] if not c["ok"]]
    if failed:
        raise RuntimeError(f"the lab's own checks failed: {failed}")
    return result["rows"]


RUNNERS = {"ours": run_ours, "raw": run_raw}


def bench_procs(procs: int, backend: str, repeats: int, options: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """Alternate ours and raw ``repeats`` times; one row per collective and size with both sides' medians."""
    config = TrainConfig(backend=backend, nproc_per_node=procs, output_dir=str(tmp))  # as the lab builds it
    runs: dict[str, list[list[dict[str, Any]]]] = {side: [] for side in RUNNERS}
    foreign: list[float] = []
    for repeat in range(repeats):
        for side, runner in RUNNERS.items():
            with ForeignLoad() as other:
                runs[side].append(runner(config, options, tmp / f"p{procs}-r{repeat}-{side}.json"))
            busy = f", other processes used {other.share:.0%} of the CPUs" if other.share is not None else ""
            foreign += [other.share] if other.share is not None else []
            print(f"  {procs} procs, run {repeat + 1}/{repeats} {side}{busy}", flush=True)
    results = []
    for i, row in enumerate(runs["ours"][0]):
        times = {side: [run[i]["time_s"] for run in runs[side]] for side in RUNNERS}
        median = {side: statistics.median(t) for side, t in times.items()}
        factor = row["busbw_GBps"] / row["algbw_GBps"]
        results.append(
            {
                "procs": procs,
                "collective": row["collective"],
                "size": row["size"],
                "bytes": row["bytes"],
                **{f"{side}_times_s": t for side, t in times.items()},
                **{f"{side}_busbw_GBps": row["bytes"] / t / 1e9 * factor for side, t in median.items()},
                "ratio_median": median["ours"] / median["raw"],
                "ratio_min": min(times["ours"]) / min(times["raw"]),
                "foreign_cpu_max": max(foreign, default=None),
            }
        )
    return results


def print_table(results: list[dict[str, Any]]) -> None:
    header = (
        f"{'procs':>5} {'collective':<11} {'size':>5} | {'ours us':>10} {'busbw GB/s':>10} | "
        f"{'raw us':>10} {'busbw GB/s':>10} | {'ours/raw':>8} {'(min)':>6}"
    )
    print(header)
    print("-" * len(header))
    order = sorted(results, key=lambda r: (r["procs"], collectives.BENCH_COLLECTIVES.index(r["collective"])))
    for r in order:
        print(
            f"{r['procs']:>5} {r['collective']:<11} {collectives.format_size(r['size']):>5} | "
            f"{statistics.median(r['ours_times_s']) * 1e6:>10.1f} {r['ours_busbw_GBps']:>10.3f} | "
            f"{statistics.median(r['raw_times_s']) * 1e6:>10.1f} {r['raw_busbw_GBps']:>10.3f} | "
            f"{r['ratio_median']:>8.3f} {r['ratio_min']:>6.3f}"
        )
    within = sum(abs(r["ratio_median"] - 1) <= 0.05 for r in results)
    print(
        f"ours/raw: median time per call through idist / through torch.distributed ((min): best run / best run); "
        f"{within} of {len(results)} within 5 %"
    )
    shares = [r["foreign_cpu_max"] for r in results if r["foreign_cpu_max"] is not None]
    if shares and max(shares) > 0.05:
        print(
            f"warning: other processes used up to {max(shares):.0%} of the CPUs during some runs; "
            "rerun on an idle machine before trusting differences of a few percent"
        )


def process_counts(text: str) -> list[int]:
    counts = [int(p) for p in text.split(",") if p.strip().isdigit()]
    if len(counts) != len(text.split(",")) or min(counts) < 2:
        raise argparse.ArgumentTypeError(f"expected comma-separated process counts of at least 2, got {text!r}")
    return counts


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=process_counts, default=[2, 4], help="process counts (default 2,4)")
    parser.add_argument("--backend", default="gloo", help="gloo (default) or nccl (one process per GPU)")
    parser.add_argument("--min-size", type=collectives.parse_size, default=1 << 10, help="smallest message (1K)")
    parser.add_argument("--max-size", type=collectives.parse_size, default=64 << 20, help="largest message (64M)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before each measurement (default 5)")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per size and collective (default 20)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per side and process count (default 3)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    options = argparse.Namespace(**{k: getattr(args, k) for k in ("min_size", "max_size", "warmup", "iters")})

    info = machine()
    print(
        f"machine: {info['cpu']}, {info['cpu_cores']} cores | torch {info['torch']}, ignite {info['ignite']} | "
        f"backend {args.backend}, {args.warmup} warm-up + {args.iters} timed calls, {args.repeats} runs per side, "
        "alternating ours/raw"
    )
    with tempfile.TemporaryDirectory(prefix="ignite_ddl_collectives_") as tmp:
        results = [r for p in args.procs for r in bench_procs(p, args.backend, args.repeats, options, Path(tmp))]
    print()
    print_table(results)
    settings = {**vars(options), "repeats": args.repeats, "backend": args.backend}
    report = {"benchmark": "collectives", "machine": info, "settings": settings, "results": results}
    if args.json is not None:
        write_json(args.json, report)
        print(f"results written to {args.json}")
    return report


if __name__ == "__main__":
    main()
