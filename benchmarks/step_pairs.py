"""Ours vs raw by step pairs: the suite's trainer and a hand-written loop alternate short blocks of steps inside the
same process(es), so that both sides meet the same machine at the same moment.

Whole runs in turn (``overhead.py --fresh``, or one after the other in one process) compare two stretches of time
that are seconds apart; on a shared machine the load moves in between and five runs a side resolve about 10 %. Here
the comparison is made every few steps:

* **ours** is the real job, ``train(config, setup=PairClock(...))``, with every default handler on (step recorder,
  memory monitor, per-epoch log and evaluation, TensorBoard, checkpoints) and only the progress bar off;
* **raw** is a plain loop built inside the same rank at the end of ours' warm-up (:class:`RawStepper`): its own
  model of the same kind and seed, its own ``DataLoader`` over the same data (``DistributedSampler`` and
  ``DistributedDataParallel`` on the run's process group when there are several ranks), SGD with the same lr and
  momentum, the same autocast, one ``loss.item()`` per step.

:class:`PairClock` is attached after every default handler (at ``ITERATION_COMPLETED``). After ours' W warm-up
iterations it runs W raw warm-up steps, then: B iterations of ours, B steps of raw, B of ours, B of raw... Each
block is timed with the wall clock read after ``torch.cuda.synchronize()`` on a GPU (so the block holds the GPU's
work and every host cost around it: the handlers, the synchronisations, the loader); a pair is one block of each,
adjacent in time. On several ranks every rank does the same at the same iteration (both sides' collectives in
lockstep) and a pair's figure is the slowest rank's block.

The ratio is the geometric mean of the pairs' ours/raw, with a Student-t 95 % interval on their logarithms: with
P pairs it resolves what whole runs cannot (``benchmarks/comm_hook_overhead.py`` showed the same: 300 step pairs
gave an interval of +-1 % where whole runs spread +-8 %).
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Subset

from ignite_ddl import TrainConfig, train
from ignite_ddl.report.stats import mean_interval
from ignite_ddl.trainer.data import build_datasets
from ignite_ddl.trainer.models import build_model
from ignite_ddl.trainer.run import TrainingRun


@dataclass(frozen=True)
class Pairs:
    """W warm-up iterations of each side, then ``pairs`` pairs of ``block`` steps of each."""

    warmup: int
    block: int
    pairs: int

    @property
    def iterations(self) -> int:
        """Ours' iterations: the warm-up and every block of ours."""
        return self.warmup + self.block * self.pairs


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class RawStepper:
    """A hand-written training step of ``config``'s model (a built-in model or the built-in GPT workload) on
    ``device``, over its own loader of the same data, cycling through it."""

    def __init__(self, config: TrainConfig, device: torch.device):
        self.device = device
        world, rank = idist.get_world_size(), idist.get_rank()
        torch.manual_seed(config.seed)
        model: nn.Module
        if config.workload is not None:  # the built-in GPT: its model and token sequences, as gpt.make builds them
            from ignite_ddl.trainer.gpt import lm_loss, make

            workload = make(**config.workload_args)
            model, self.loss = workload.model, lm_loss
            train_set: Any = workload.data()[0]
            train_set = Subset(train_set, range(min(len(train_set), config.train_size or len(train_set))))
            self.layout = torch.contiguous_format
        else:
            train_set, _, info = build_datasets(config)
            model = build_model(config.model, info.in_channels, info.image_size, info.num_classes)
            self.loss = nn.CrossEntropyLoss()
            self.layout = torch.channels_last if config.channels_last else torch.contiguous_format
        model = model.to(device)
        if self.layout == torch.channels_last:
            model = model.to(memory_format=self.layout)
        sampler = None
        if world > 1:
            model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
            sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=config.seed)
        self.model = model
        self.loader = DataLoader(
            train_set,
            batch_size=config.batch_size // world,
            sampler=sampler,
            shuffle=sampler is None,
            drop_last=True,
            pin_memory=device.type == "cuda",
        )
        self.sampler, self.epoch = sampler, 0
        self.optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.amp)
        self.scaler = torch.amp.GradScaler(device.type) if config.amp == "fp16" else None
        self.batches: Iterator[Any] = iter(())

    def _next(self) -> Any:
        try:
            return next(self.batches)
        except StopIteration:
            if self.sampler is not None:
                self.sampler.set_epoch(self.epoch)
            self.epoch += 1
            self.batches = iter(self.loader)
            return next(self.batches)

    def step(self) -> None:
        x, y = self._next()
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        if x.dim() == 4:
            x = x.contiguous(memory_format=self.layout)
        self.model.train()
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
            loss = self.loss(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        loss.item()


class PairClock:
    """``setup`` for ``train``: after ours' warm-up, alternates blocks of ours' iterations with blocks of raw steps
    (see the module docstring) and writes this rank's block times to ``<run_dir>/pairs_rank<r>.json``."""

    def __init__(self, config: TrainConfig, plan: Pairs, run_dir: Path):
        self.config, self.plan, self.run_dir = config, plan, run_dir
        self.raw: RawStepper | None = None
        self.device = torch.device("cpu")
        self.start = 0.0
        self.ours: list[float] = []
        self.raws: list[float] = []

    def __call__(self, run: TrainingRun) -> None:
        rank = idist.get_rank()
        for handler in logging.getLogger(f"ignite_ddl.rank{rank}").handlers:
            if not isinstance(handler, logging.FileHandler):
                handler.setLevel(logging.WARNING)
        self.device = idist.device()
        run.trainer.add_event_handler(Events.ITERATION_COMPLETED, self._tick)

    def _raw_block(self, steps: int) -> float:
        assert self.raw is not None
        _synchronize(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            self.raw.step()
        _synchronize(self.device)
        return time.perf_counter() - start

    def _tick(self, engine: Engine) -> None:
        iteration, plan = engine.state.iteration, self.plan
        if iteration < plan.warmup or (iteration - plan.warmup) % plan.block:
            return
        _synchronize(self.device)
        now = time.perf_counter()
        if iteration == plan.warmup:
            self.raw = RawStepper(self.config, self.device)
            self._raw_block(plan.warmup)
        else:
            self.ours.append((now - self.start) / plan.block)
            self.raws.append(self._raw_block(plan.block) / plan.block)
        if iteration == plan.iterations:
            path = self.run_dir / f"pairs_rank{idist.get_rank()}.json"
            path.write_text(json.dumps({"ours_s": self.ours, "raw_s": self.raws}))
        _synchronize(self.device)
        self.start = time.perf_counter()  # ours' next block starts after raw's


def run_pairs(config: TrainConfig, plan: Pairs, run_dir: Path) -> dict[str, Any]:
    """Ours and raw in pairs of blocks (the module docstring) with ``config``'s processes; per-step seconds of each
    pair (the slowest rank's block), the medians, and ours/raw with its paired 95 % interval."""
    run_dir.mkdir(parents=True, exist_ok=True)
    batch = config.batch_size
    config = replace(
        config,
        output_dir=str(run_dir),
        epochs=1,
        max_iters=plan.iterations,
        train_size=plan.iterations * batch,  # one epoch: no evaluation inside the blocks
        val_size=config.val_size or batch,
        progress=False,
    )
    summary = train(config, setup=PairClock(config, plan, run_dir))
    world = summary["world_size"]
    ranks = []
    for rank in range(world):
        path = run_dir / f"pairs_rank{rank}.json"
        if not path.is_file():
            raise RuntimeError(f"rank {rank} recorded no pairs (did it run {plan.iterations} iterations?)")
        ranks.append(json.loads(path.read_text()))
    ours = [max(r["ours_s"][i] for r in ranks) for i in range(plan.pairs)]
    raw = [max(r["raw_s"][i] for r in ranks) for i in range(plan.pairs)]
    logs = mean_interval([math.log(o / r) for o, r in zip(ours, raw)])
    return {
        "procs": world,
        "pairs": plan.pairs,
        "block": plan.block,
        "warmup": plan.warmup,
        "ours_s": ours,
        "raw_s": raw,
        "ours_median_s": statistics.median(ours),
        "raw_median_s": statistics.median(raw),
        "ratio_median": statistics.median(o / r for o, r in zip(ours, raw)),
        "ratio_paired": [None if v is None else math.exp(v) for v in (logs.value, logs.low, logs.high)],
    }
