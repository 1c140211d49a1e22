"""Per-step cost of the workload layer: ignite_ddl's trainer on the GPT workload (``--workload gpt``) against a
hand-written PyTorch loop training the same model on the same tokens.

The method is ``benchmarks/overhead.py``'s, reused from it (its window, clock handler, clock files, table and
machine record): both sides train the same GPT (``ignite_ddl.trainer.gpt.make`` with the same arguments and seed)
on the same token sequences with the same global batch, SGD (TrainConfig's lr and momentum), one ``loss.item()`` per
step and the same intra-op threads; W warm-up iterations, then M timed ones; runs alternate ours, raw, ours, raw
R times per process count, and each reports how much of the CPUs other processes used meanwhile.

* **ours**: ``train(TrainConfig(workload="gpt", workload_args=...), setup=StepClock)``: the workload loaded in
  every rank, its loss through the workload train step, every default handler on (step recorder, memory monitor,
  evaluation, TensorBoard, checkpoints).
* **raw**: ``DataLoader`` -> ``lm_loss(model(x), y)`` -> ``zero_grad`` -> ``backward`` -> ``step`` ->
  ``loss.item()``; with two processes gloo + ``DistributedDataParallel`` + ``DistributedSampler``.

``ours/raw`` is the median step time of ours over that of raw (1.00: no cost per step).

Usage:
    python benchmarks/workload_overhead.py                  # GPT 2 x 64, 64 tokens, 2 x 3 runs per process count
    python benchmarks/workload_overhead.py --procs 1,2 --repeats 5 --iters 50 --json workload_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp
from overhead import StepClock, Window, _read_clocks, _write_clock, machine, print_table
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Subset

from ignite_ddl import TrainConfig, plan_launch, train
from ignite_ddl.launcher import free_port, in_fresh_thread
from ignite_ddl.measure.contention import ForeignLoad
from ignite_ddl.trainer.gpt import lm_loss, make


def run_ours(config: TrainConfig, window: Window, run_dir: Path) -> float:
    summary = train(replace(config, output_dir=str(run_dir)), setup=StepClock(window, run_dir))
    if summary["iterations"] != window.last:
        raise RuntimeError(f"ours ran {summary['iterations']} iterations, expected {window.last}")
    return _read_clocks(run_dir, summary["world_size"], window)


def raw_worker(rank: int, config: TrainConfig, world: int, threads: int, port: int, window: Window, out: Path) -> None:
    torch.set_num_threads(threads)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(config.seed)  # as seed_everything in ours: the same initial weights
        workload = make(**config.workload_args)
        model: torch.nn.Module = workload.model
        train_ds = Subset(workload.data()[0], range(config.train_size or 0))
        sampler = None
        if world > 1:
            model = DistributedDataParallel(model)
            sampler = DistributedSampler(train_ds, num_replicas=world, rank=rank, shuffle=True, seed=config.seed)
        loader = DataLoader(
            train_ds, batch_size=config.batch_size // world, sampler=sampler, shuffle=sampler is None, drop_last=True
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
        model.train()
        if sampler is not None:
            sampler.set_epoch(0)
        start, iteration = 0.0, 0
        for x, y in loader:
            loss = lm_loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss.item()
            iteration += 1
            if iteration == window.warmup:
                start = time.perf_counter()
            elif iteration == window.last:
                _write_clock(out, rank, time.perf_counter() - start, window.iters)
                break
    finally:
        if world > 1:
            dist.destroy_process_group()


def raw_rank(rank: int, *args: Any) -> None:
    """A forked rank runs torch in a fresh thread, as ignite_ddl's launcher does (see overhead.raw_rank)."""
    in_fresh_thread(args[2], raw_worker, rank, *args)


def run_raw(config: TrainConfig, window: Window, run_dir: Path) -> float:
    plan = plan_launch(config)
    run_dir.mkdir(parents=True)
    args = (config, plan.world_size, plan.threads, plan.master_port or free_port(plan.master_addr), window, run_dir)
    if plan.world_size == 1:
        raw_worker(0, *args)
    else:
        torch_mp.start_processes(raw_rank, args=args, nprocs=plan.world_size, join=True, start_method="fork")
    return _read_clocks(run_dir, plan.world_size, window)


RUNNERS = {"ours": run_ours, "raw": run_raw}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per side and process count (default 3)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up iterations per run (default 5)")
    parser.add_argument("--iters", type=int, default=30, help="measured iterations per run (default 30)")
    parser.add_argument("--batch-size", type=int, default=16, help="GLOBAL batch of sequences (default 16)")
    parser.add_argument("--procs", default="1,2", help="comma-separated process counts (default 1,2)")
    parser.add_argument("--gpt", default="n_layer=2,d_model=64,n_head=4,seq_len=64,vocab=256", help="make()'s sizes")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    sizes = {k: int(v) for k, v in (item.split("=") for item in args.gpt.split(","))}
    window = Window(args.warmup, args.iters)
    info = machine()
    print(f"machine: {info['cpu']}, {info['cpu_cores']} cores | torch {info['torch']}, ignite {info['ignite']}")
    print(
        f"GPT {sizes}, global batch {args.batch_size} sequences, {args.warmup} warm-up + {args.iters} measured "
        f"iterations per run, {args.repeats} runs per side, alternating ours/raw"
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="ignite_ddl_workload_overhead_") as tmp:
        for procs in [int(p) for p in args.procs.split(",")]:
            config = TrainConfig(
                backend="none" if procs == 1 else "gloo",
                nproc_per_node=None if procs == 1 else procs,
                start_method="fork",
                workload="gpt",
                workload_args=sizes,
                train_size=window.last * args.batch_size,  # one epoch of exactly W + M global batches
                val_size=args.batch_size,
                batch_size=args.batch_size,
                epochs=1,
                max_iters=window.last,
                progress=False,
            )
            runs: dict[str, list[float]] = {side: [] for side in RUNNERS}
            foreign: dict[str, list[float | None]] = {side: [] for side in RUNNERS}
            for repeat in range(args.repeats):
                for side, runner in RUNNERS.items():
                    with ForeignLoad() as other:
                        step = runner(config, window, Path(tmp) / f"p{procs}-r{repeat}-{side}")
                    runs[side].append(step)
                    foreign[side].append(other.share)
                    busy = f", other processes used {other.share:.0%} of the CPUs" if other.share is not None else ""
                    print(f"  {procs} proc run {repeat + 1}/{args.repeats} {side:4s}: {step * 1e3:7.1f} ms/step{busy}")
            stats = {
                side: {"median_s": statistics.median(r), "min_s": min(r), "runs_s": r, "foreign_cpu": foreign[side]}
                for side, r in runs.items()
            }
            results.append(
                {
                    "procs": procs,
                    "threads_per_process": plan_launch(config).threads,
                    "per_rank_batch": args.batch_size // procs,
                    **stats,
                    "ratio_median": stats["ours"]["median_s"] / stats["raw"]["median_s"],
                    "ratio_min": stats["ours"]["min_s"] / stats["raw"]["min_s"],
                }
            )
    print()
    print_table(results)
    report = {"benchmark": "workload_overhead", "machine": info, "gpt": sizes, "results": results}
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
