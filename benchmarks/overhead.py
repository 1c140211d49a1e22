"""Per-step overhead of ignite_ddl's trainer against a hand-written PyTorch loop doing the same work.

Two sides train the same model (``ignite_ddl.trainer.models.build_model``) on the same synthetic data
(``ignite_ddl.trainer.data.build_datasets``) with the same global batch, the same SGD optimizer (TrainConfig's lr and
momentum), one ``loss.item()`` per step and the same number of intra-op threads per process
(``plan_launch(config).threads``):

* **ours**: the real job, ``train(config, setup=...)``, with every default handler on (step recorder,
  per-epoch log and evaluation, TensorBoard, checkpointing, the ``max_iters`` stop) and only the progress bar off.
  One process runs with backend ``none``; two processes with backend ``gloo``, started by ``launch`` with ``fork``.
* **raw**: a plain loop with no Ignite at all: ``DataLoader`` -> forward -> ``zero_grad`` -> ``backward`` ->
  ``step`` -> ``loss.item()``. With two processes it is ``torch.distributed`` (gloo) + ``DistributedDataParallel``
  + ``DistributedSampler``, started with ``torch.multiprocessing.start_processes`` and the same start method
  (each forked rank runs in a fresh thread, as ignite_ddl's launcher does: see :func:`raw_rank`).

Method: each run trains W warm-up iterations and then M measured ones. The clock is read at the end of iteration W
and at the end of iteration W + M (on the trainer's ITERATION_COMPLETED, attached through ``setup`` after every
default handler, and at the same two points of the raw loop), so the measured window holds M complete steps
including data loading and every per-iteration handler, and excludes start-up, warm-up and whatever runs once the
window is closed (the final evaluation and checkpoint). The training set holds exactly (W + M) global batches and
``max_iters`` is W + M, so both sides stop right after the window in one epoch: no epoch boundary (with its
evaluation) falls inside it. Each rank measures its own window; a run's figure is the slowest rank's window / M.
Runs alternate (ours, raw, ours, raw, ...) R times for each process count, so slow drifts of the machine hit both
sides alike. Each run also reports how much of the CPUs other processes used meanwhile
(:class:`ignite_ddl.measure.contention.ForeignLoad`): with 2 threads on 2 cores, another busy process can make
steps several times slower.

Reading the result: ``ours/raw`` is the median step time of ours divided by that of raw. 1.00 means the trainer
costs nothing measurable per step; 1.03 means ignite_ddl makes each step 3 % slower than the hand-written loop.
Compare it to the spread between a side's min and median (the noise of the machine) before reading anything into
differences of a percent or two, and distrust any run flagged as sharing the CPUs. The overhead is mostly a fixed
time per step, so the ratio grows when steps are short (small model, small batch, many processes) and shrinks
towards 1 when they are long.

On a GPU (``--device cuda``, one process) both sides train on the GPU with the same mixed precision (``--amp``:
``torch.autocast``, and with fp16 a ``GradScaler``), the same memory format (``--channels-last``: model and batches
in NHWC) and pinned host batches; the clock is read after ``torch.cuda.synchronize()`` at both edges of the window,
so the window holds the GPU's work, not only its launch. ``--fresh`` runs every run in a fresh Python process (the
GPU's allocator, cuDNN's autotuning and the CUDA context start anew each time, alike for both sides).

**Step pairs** (``--mode pairs``, the default): instead of whole runs, ours and raw alternate blocks of ``--block``
steps inside the same process(es), ``--pairs`` pairs after the warm-up (:mod:`step_pairs`); the ratio is the
geometric mean of the pairs' ours/raw with its paired 95 % interval. ``--mode runs`` is the whole-run method above
(slower to resolve a few percent). ``--model gpt`` trains the built-in GPT workload (sizes from ``--gpt``) on both
sides, in tokens.

Usage:
    python benchmarks/overhead.py                       # step pairs, the CNN, 1 and 2 processes
    python benchmarks/overhead.py --model gpt --pairs 60 --block 5
    python benchmarks/overhead.py --mode runs           # whole runs: about 2-4 minutes on 2 cores
    python benchmarks/overhead.py --repeats 7 --iters 200 --model resnet18 --procs 1 --json overhead.json
    python benchmarks/overhead.py --device cuda --procs 1 --model resnet18 --batch-size 256 --amp bf16 --fresh
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
import ignite.distributed as idist
import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp
import yaml
from ignite.engine import Engine, Events
from step_pairs import Pairs, run_pairs
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from ignite_ddl import TrainConfig, plan_launch, train
from ignite_ddl.core.environment import cpu_cores, cpu_name, versions
from ignite_ddl.launcher import free_port, in_fresh_thread
from ignite_ddl.measure.contention import ForeignLoad
from ignite_ddl.report.stats import mean_interval
from ignite_ddl.trainer.data import build_datasets
from ignite_ddl.trainer.models import build_model
from ignite_ddl.trainer.run import TrainingRun


@dataclass(frozen=True)
class Window:
    """The measured window: iterations warmup + 1 .. warmup + iters (1-based, as Ignite counts them)."""

    warmup: int
    iters: int

    @property
    def last(self) -> int:
        return self.warmup + self.iters


def _synchronize() -> None:
    """Wait for the GPU's queued work before a clock reading (nothing to wait for on a CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _write_clock(run_dir: Path, rank: int, seconds: float, iterations: int) -> None:
    (run_dir / f"clock_rank{rank}.json").write_text(json.dumps({"seconds": seconds, "iterations": iterations}))


def _read_clocks(run_dir: Path, world: int, window: Window) -> float:
    """Seconds per step of the slowest rank; refuses a run where a rank did not record a full window."""
    per_rank = []
    for rank in range(world):
        path = run_dir / f"clock_rank{rank}.json"
        if not path.is_file():
            raise RuntimeError(f"{run_dir.name}: rank {rank} recorded no window (did it run {window.last} steps?)")
        clock = json.loads(path.read_text())
        if clock["iterations"] != window.iters:
            raise RuntimeError(f"{run_dir.name}: rank {rank} measured {clock['iterations']} steps, not {window.iters}")
        per_rank.append(clock["seconds"] / window.iters)
    return max(per_rank)


# -- ours: the real trainer, timed by a handler attached through `setup`


class StepClock:
    """``setup`` for :func:`training`: reads the clock at ITERATION_COMPLETED of the window's first and last edge.

    Attached after all default handlers, so the window includes their work for every one of its iterations.
    It also turns the rank-0 console log down to warnings (the log file keeps everything) so the benchmark's own
    output stays readable; that happens before the run, outside the window.
    """

    def __init__(self, window: Window, run_dir: Path):
        self.window, self.run_dir = window, run_dir
        self.rank = 0
        self.start: float | None = None

    def __call__(self, run: TrainingRun) -> None:
        self.rank = idist.get_rank()
        for handler in logging.getLogger(f"ignite_ddl.rank{self.rank}").handlers:
            if not isinstance(handler, logging.FileHandler):
                handler.setLevel(logging.WARNING)
        run.trainer.add_event_handler(Events.ITERATION_COMPLETED, self._tick)

    def _tick(self, engine: Engine) -> None:
        iteration = engine.state.iteration
        if iteration == self.window.warmup:
            _synchronize()
            self.start = time.perf_counter()
        elif iteration == self.window.last and self.start is not None:
            _synchronize()
            _write_clock(self.run_dir, self.rank, time.perf_counter() - self.start, self.window.iters)


def run_ours(config: TrainConfig, window: Window, run_dir: Path) -> float:
    config = replace(config, output_dir=str(run_dir))
    summary = train(config, setup=StepClock(window, run_dir))
    if summary["iterations"] != window.last:
        raise RuntimeError(f"ours ran {summary['iterations']} iterations, expected {window.last}")
    return _read_clocks(run_dir, summary["world_size"], window)


# -- raw: plain PyTorch, no Ignite


def raw_worker(
    rank: int, config: TrainConfig, world: int, threads: int, port: int, window: Window, run_dir: Path
) -> None:
    """One rank of the hand-written loop (rank is the process index given by ``start_processes``)."""
    torch.set_num_threads(threads)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        cuda = torch.cuda.is_available() and world == 1  # several raw ranks are gloo CPU ranks, as ours are
        device = torch.device("cuda" if cuda else "cpu")
        layout = torch.channels_last if config.channels_last else torch.contiguous_format
        train_ds, _, info = build_datasets(config)
        torch.manual_seed(config.seed)
        model: nn.Module = build_model(config.model, info.in_channels, info.image_size, info.num_classes)
        model = model.to(device, memory_format=layout)
        sampler = None
        if world > 1:
            model = DistributedDataParallel(model)
            sampler = DistributedSampler(train_ds, num_replicas=world, rank=rank, shuffle=True, seed=config.seed)
        loader = DataLoader(
            train_ds,
            batch_size=config.batch_size // world,
            sampler=sampler,
            shuffle=sampler is None,
            drop_last=True,
            pin_memory=cuda,  # as auto_dataloader does for ours on a GPU
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
        criterion = nn.CrossEntropyLoss()
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.amp)
        scaler = torch.amp.GradScaler("cuda") if config.amp == "fp16" else None

        model.train()
        if sampler is not None:
            sampler.set_epoch(0)
        start, iteration = 0.0, 0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if x.dim() == 4:
                x = x.contiguous(memory_format=layout)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = criterion(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            loss.item()
            iteration += 1
            if iteration == window.warmup:
                _synchronize()
                start = time.perf_counter()
            elif iteration == window.last:
                _synchronize()
                _write_clock(run_dir, rank, time.perf_counter() - start, window.iters)
                break
    finally:
        if world > 1:
            dist.destroy_process_group()


RawWorker = Callable[[int, TrainConfig, int, int, int, Window, Path], None]


def raw_rank(rank: int, worker: RawWorker, *args: Any) -> None:
    """``start_processes`` target: ``worker`` (:func:`raw_worker`, or another workload's hand-written loop) in a
    fresh thread of the forked process.

    This parent has already run multi-threaded ops (the one-process runs), so a forked child's main thread must not
    run torch ops (see ``launcher.in_fresh_thread``, plain threading: no Ignite involved); ignite_ddl's launcher
    does the same, so doing it here also keeps the two sides alike.
    """
    threads = args[2]  # the worker's arguments: config, world, threads, port, window, run_dir
    in_fresh_thread(threads, worker, rank, *args)


def run_raw(config: TrainConfig, window: Window, run_dir: Path, worker: RawWorker = raw_worker) -> float:
    """One run of the hand-written loop ``worker`` on ``plan_launch(config)``'s processes; seconds per step."""
    plan = plan_launch(config)  # the same threads per process and start method as ours gets
    run_dir.mkdir(parents=True)
    world = plan.world_size
    args = (config, world, plan.threads, plan.master_port or free_port(plan.master_addr), window, run_dir)
    if world == 1:
        worker(0, *args)
    else:
        torch_mp.start_processes(
            raw_rank, args=(worker, *args), nprocs=world, join=True, start_method=plan.start_method
        )
    return _read_clocks(run_dir, world, window)


# -- driver


RUNNERS: dict[str, Callable[[TrainConfig, Window, Path], float]] = {"ours": run_ours, "raw": run_raw}


def run_fresh(side: str, procs: int, args: argparse.Namespace, run_dir: Path) -> float:
    """One run of ``side`` in a fresh Python process (``--one-run``): nothing the previous runs left in this
    process (the CUDA context, the allocator's cache, cuDNN's tuned choices) carries over."""
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        f"--one-run={side}",
        f"--run-dir={run_dir}",
        f"--procs={procs}",
        f"--warmup={args.warmup}",
        f"--iters={args.iters}",
        f"--model={args.model}",
        f"--batch-size={args.batch_size}",
        f"--amp={args.amp}",
        f"--device={args.device}",
        f"--gpt={args.gpt}",
        f"--ours={args.ours}",
        *(["--channels-last"] if args.channels_last else []),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=args.run_timeout)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{side} run in a fresh process failed (exit {done.returncode}): {tail[0]}")
    return float(json.loads((run_dir / "step.json").read_text())["step_s"])


def _gpt_sizes(text: str) -> dict[str, int]:
    return {k.strip(): int(v) for k, v in (item.split("=") for item in text.split(",") if item.strip())}


def bench_config(procs: int, args: argparse.Namespace, window: Window) -> TrainConfig:
    model = {"model": args.model} if args.model != "gpt" else {"workload": "gpt", "workload_args": _gpt_sizes(args.gpt)}
    if args.model == "gpt":
        model["workload_args"]["train_sequences"] = window.last * args.batch_size
        model["workload_args"].setdefault("val_sequences", args.batch_size)
    config = TrainConfig(
        backend="none" if procs == 1 else "gloo",
        amp=args.amp,
        channels_last=args.channels_last,
        nproc_per_node=None if procs == 1 else procs,
        start_method="fork",
        dataset="synthetic",
        train_size=window.last * args.batch_size,  # exactly one epoch of W + M global batches
        val_size=args.batch_size,  # the final evaluation runs after the window; keep it short
        batch_size=args.batch_size,
        **model,
        epochs=1,
        max_iters=window.last,
        progress=False,
    )
    return replace(config, **_ours_options(getattr(args, "ours", "")))


def _ours_options(text: str) -> dict[str, Any]:
    """``--ours KEY=VALUE,...``: options of ours' TrainConfig (YAML values: ``record_steps=false``), each a part of
    the suite switched off to measure what it costs; {} for none. Raises ValueError for an unknown option."""
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in fields:
            raise ValueError(f"{item!r} is not KEY=VALUE of a TrainConfig option")
        options[key.strip()] = yaml.safe_load(value)
    return options


def bench_procs(procs: int, args: argparse.Namespace, window: Window, tmp: Path) -> dict[str, Any]:
    """Alternate ours and raw ``args.repeats`` times with ``procs`` processes; per-step figures in seconds."""
    config = bench_config(procs, args, window)

    def one_run(side: str, run_dir: Path) -> float:
        return run_fresh(side, procs, args, run_dir) if args.fresh else RUNNERS[side](config, window, run_dir)

    return alternate(one_run, config, args.repeats, tmp)


def bench_pairs(procs: int, args: argparse.Namespace, window: Window, plan: Pairs, tmp: Path) -> dict[str, Any]:
    """Ours and raw by step pairs with ``procs`` processes (:func:`step_pairs.run_pairs`), beside the other
    processes' CPU share meanwhile; the same keys as :func:`alternate`'s, each pair standing for a run."""
    config = bench_config(procs, args, window)
    with ForeignLoad() as other:
        found = run_pairs(config, plan, tmp / f"pairs-p{procs}")
    busy = f", other processes used {other.share:.0%} of the CPUs" if other.share is not None else ""
    print(f"  {procs} proc: {plan.pairs} pairs of {plan.block} steps{busy}")
    ours, raw = found["ours_s"], found["raw_s"]
    return {
        **found,
        "threads_per_process": plan_launch(config).threads,
        "per_rank_batch": config.batch_size // procs,
        "ours": {"median_s": statistics.median(ours), "min_s": min(ours), "runs_s": ours, "foreign_cpu": [other.share]},
        "raw": {"median_s": statistics.median(raw), "min_s": min(raw), "runs_s": raw, "foreign_cpu": [other.share]},
        "ratio_median": statistics.median(ours) / statistics.median(raw),
        "pair_ratio_median": found["ratio_median"],
        "ratio_min": min(ours) / min(raw),
    }


def alternate(one_run: Callable[[str, Path], float], config: TrainConfig, repeats: int, tmp: Path) -> dict[str, Any]:
    """``one_run(side, run_dir)`` (seconds per step) for ours then raw, ``repeats`` times, with ``config``'s
    processes, each timed beside :class:`ForeignLoad`: alternating, so that a change of the machine's load spreads
    over both sides. The medians, minima, every run and the other processes' CPU share, per side; ours/raw."""
    procs = plan_launch(config).world_size
    runs: dict[str, list[float]] = {side: [] for side in RUNNERS}
    foreign: dict[str, list[float | None]] = {side: [] for side in RUNNERS}
    for repeat in range(repeats):
        for side in RUNNERS:
            with ForeignLoad() as other:
                step = one_run(side, tmp / f"p{procs}-r{repeat}-{side}")
            runs[side].append(step)
            foreign[side].append(other.share)
            busy = f", other processes used {other.share:.0%} of the CPUs" if other.share is not None else ""
            print(f"  {procs} proc run {repeat + 1}/{repeats} {side:4s}: {step * 1e3:7.2f} ms/step{busy}")
    stats = {
        side: {"median_s": statistics.median(r), "min_s": min(r), "runs_s": r, "foreign_cpu": foreign[side]}
        for side, r in runs.items()
    }
    # Each alternation is a pair run side by side under the same load: the geometric mean of the pairs' ratios,
    # with a Student-t interval on their logarithms, is the ratio with its uncertainty.
    paired = mean_interval([math.log(o / r) for o, r in zip(runs["ours"], runs["raw"])])
    return {
        "procs": procs,
        "threads_per_process": plan_launch(config).threads,
        "per_rank_batch": config.batch_size // procs,
        **stats,
        "ratio_median": stats["ours"]["median_s"] / stats["raw"]["median_s"],
        "ratio_min": stats["ours"]["min_s"] / stats["raw"]["min_s"],
        "ratio_paired": [None if v is None else math.exp(v) for v in (paired.value, paired.low, paired.high)],
    }


def _paired_text(paired: list[float | None] | None) -> str:
    if not paired or paired[0] is None:
        return "-"
    value, low, high = paired
    return f"{value:.3f}" + (f" ({low:.3f} to {high:.3f})" if low is not None and high is not None else "")


def print_table(results: list[dict[str, Any]]) -> None:
    header = (
        f"{'procs':>5} {'threads':>7} {'batch/rank':>10} | {'ours median':>11} {'ours min':>9} | "
        f"{'raw median':>11} {'raw min':>9} | {'ours/raw':>8} {'(min)':>6} | paired, 95 % interval"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        ours, raw = r["ours"], r["raw"]
        print(
            f"{r['procs']:>5} {r['threads_per_process']:>7} {r['per_rank_batch']:>10} | "
            f"{ours['median_s'] * 1e3:>8.2f} ms {ours['min_s'] * 1e3:>6.2f} ms | "
            f"{raw['median_s'] * 1e3:>8.2f} ms {raw['min_s'] * 1e3:>6.2f} ms | "
            f"{r['ratio_median']:>8.3f} {r['ratio_min']:>6.3f} | {_paired_text(r.get('ratio_paired'))}"
        )
    print("ours/raw: median step time of ignite_ddl's trainer / that of the hand-written loop (1.00 = no overhead);")
    print(
        "paired: the geometric mean of each alternation's (or step pair's) ours/raw, with its 95 % Student-t interval"
    )
    shares = [s for r in results for side in RUNNERS for s in r[side]["foreign_cpu"] if s is not None]
    if shares and max(shares) > 0.05:
        print(
            f"warning: other processes used up to {max(shares):.0%} of the CPUs during some runs; "
            "rerun on an idle machine before trusting differences of a few percent"
        )


def machine() -> dict[str, Any]:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu_name(), "cpu_cores": cpu_cores(), "gpu": gpu, "platform": sys.platform, **versions()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mode", choices=("pairs", "runs"), default="pairs", help="step pairs in one run (default) or whole runs"
    )
    parser.add_argument("--pairs", type=int, default=40, help="pairs of blocks, --mode pairs (default 40)")
    parser.add_argument("--block", type=int, default=10, help="steps per block, --mode pairs (default 10)")
    parser.add_argument(
        "--gpt", default="n_layer=2,d_model=64,n_head=4,seq_len=64,vocab=256", help="--model gpt: make()'s sizes"
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs per side and process count, --mode runs")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up iterations per run, not timed (default 10)")
    parser.add_argument("--iters", type=int, default=200, help="measured iterations per run (default 200)")
    parser.add_argument("--model", default="cnn", help="model name as in TrainConfig (default cnn)")
    parser.add_argument("--batch-size", type=int, default=128, help="GLOBAL batch size (default 128)")
    parser.add_argument("--procs", default="1,2", help="comma-separated process counts (default 1,2)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    parser.add_argument(
        "--ours",
        default="",
        help="options of ours only, KEY=VALUE,... (record_steps=false): what a part of the suite costs, switched off",
    )
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="where one process trains (default auto)"
    )
    parser.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none", help="mixed precision (both sides)")
    parser.add_argument("--channels-last", action="store_true", help="model and batches in channels_last (both sides)")
    parser.add_argument("--fresh", action="store_true", help="every run in a fresh Python process")
    parser.add_argument("--run-timeout", type=float, default=600.0, help="seconds one fresh run may take (default 600)")
    parser.add_argument("--one-run", choices=tuple(RUNNERS), help=argparse.SUPPRESS)  # a fresh run's own process
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        procs_list = [int(p) for p in args.procs.split(",") if p.strip()]
    except ValueError:
        parser.error(f"--procs expects comma-separated integers, got {args.procs!r}")
    if args.repeats < 1 or args.warmup < 1 or args.iters < 1 or not procs_list or min(procs_list) < 1:
        parser.error("--repeats, --warmup, --iters and every --procs value must be >= 1")
    if args.pairs < 2 or args.block < 1:
        parser.error("--pairs must be >= 2 and --block >= 1")
    if args.fresh:
        args.mode = "runs"  # fresh processes are whole runs
    try:
        _gpt_sizes(args.gpt)
    except ValueError:
        parser.error(f"--gpt expects KEY=INTEGER,..., got {args.gpt!r}")
    try:
        _ours_options(args.ours)
    except (ValueError, yaml.YAMLError) as e:
        parser.error(f"--ours: {e}")
    if args.mode == "pairs":
        args.iters = args.pairs * args.block
    window = Window(args.warmup, args.iters)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU is visible here")
    if args.device == "cuda" and max(procs_list) > 1:
        parser.error("--device cuda runs one process (--procs 1): several ranks here are gloo CPU ranks")
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before anything initialises CUDA: both sides train on the CPU
    if args.amp == "fp16" and not torch.cuda.is_available():
        parser.error("--amp fp16 needs a CUDA GPU (its GradScaler); use --amp bf16 on a CPU")
    if args.one_run is not None:
        if args.run_dir is None or len(procs_list) != 1:
            parser.error("--one-run needs --run-dir and one --procs value")
        step = RUNNERS[args.one_run](bench_config(procs_list[0], args, window), window, args.run_dir)
        (args.run_dir / "step.json").write_text(json.dumps({"step_s": step}))
        return {"step_s": step}

    info = machine()
    print(
        f"machine: {info['cpu']}, {info['cpu_cores']} cores | python {info['python']}, torch {info['torch']}, "
        f"ignite {info['ignite']}"
    )
    where = f"GPU {info['gpu']}" if info["gpu"] and args.device != "cpu" else "CPU"
    model = f"gpt ({args.gpt})" if args.model == "gpt" else args.model
    how = (
        f"{args.warmup} warm-up steps a side, then {args.pairs} pairs of {args.block}-step blocks alternating "
        "ours/raw in the same process(es)"
        if args.mode == "pairs"
        else f"{args.warmup} warm-up + {args.iters} measured iterations per run, {args.repeats} runs per side, "
        f"alternating ours/raw{', each in a fresh process' if args.fresh else ''}"
    )
    print(
        f"model {model} on the {where}, global batch {args.batch_size}, amp {args.amp}"
        f"{', channels_last' if args.channels_last else ''}, {how}"
    )
    with tempfile.TemporaryDirectory(prefix="ignite_ddl_overhead_") as tmp:
        if args.mode == "pairs":
            plan = Pairs(args.warmup, args.block, args.pairs)
            results = [bench_pairs(procs, args, window, plan, Path(tmp)) for procs in procs_list]
        else:
            results = [bench_procs(procs, args, window, Path(tmp)) for procs in procs_list]
    print()
    print_table(results)

    report = {
        "benchmark": "overhead",
        "machine": info,
        "settings": {
            "mode": args.mode,
            "model": args.model,
            "gpt": _gpt_sizes(args.gpt) if args.model == "gpt" else None,
            "ours_options": _ours_options(args.ours),
            "pairs": args.pairs if args.mode == "pairs" else None,
            "block": args.block if args.mode == "pairs" else None,
            "device": where,
            "amp": args.amp,
            "channels_last": args.channels_last,
            "fresh_processes": args.fresh,
            "global_batch": args.batch_size,
            "warmup": args.warmup,
            "iters": args.iters,
            "repeats": args.repeats,
        },
        "results": results,
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"results written to {args.json}")
    return report


if __name__ == "__main__":
    main()
