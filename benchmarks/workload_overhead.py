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
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
import torch
import torch.distributed as dist
from overhead import Window, _write_clock, alternate, machine, print_table, run_ours, run_raw
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Subset

from ignite_ddl import TrainConfig
from ignite_ddl.trainer.gpt import lm_loss, make


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


def run_side(config: TrainConfig, window: Window, side: str, run_dir: Path) -> float:
    """One run of ours (the trainer, timed as overhead.py times it) or raw (this GPT's hand-written loop)."""
    return run_ours(config, window, run_dir) if side == "ours" else run_raw(config, window, run_dir, raw_worker)


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
            results.append(alternate(partial(run_side, config, window), config, args.repeats, Path(tmp)))
    print()
    print_table(results)
    report = {"benchmark": "workload_overhead", "machine": info, "gpt": sizes, "results": results}
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
