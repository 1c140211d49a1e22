"""Runs of the real trainer with something injected, each in its own interpreter (used by the tests).

Usage: python scenarios.py NAME OUTPUT_DIR

Every scenario launches ``ignite_ddl.training`` through ``ignite_ddl.launch`` and injects its fault or delay with
a ``setup`` function; a failed run prints ``error: <message>`` and exits with status 1, like the CLI.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import ignite.distributed as idist
from ignite.engine import Engine, Events

from ignite_ddl import RunFailed, TrainConfig, launch, training
from ignite_ddl.trainer import TrainingRun

DELAY_S = 0.03
BASE = {"train_size": 2048, "val_size": 64, "batch_size": 64, "epochs": 1, "progress": False}


def fail_at_iteration_3(run: TrainingRun) -> None:
    @run.trainer.on(Events.ITERATION_STARTED(once=3))
    def _fail(engine: Engine) -> None:
        if idist.get_rank() == idist.get_world_size() - 1:
            if os.environ["SCENARIO"] == "fail-exit":
                os._exit(3)
            raise RuntimeError("injected failure at iteration 3")


class SlowLoader:
    """Wraps a loader so that every batch takes DELAY_S longer to arrive."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            time.sleep(DELAY_S)
            yield batch


def slow_data_on_rank1(run: TrainingRun) -> None:
    if idist.get_rank() == 1:
        run.trainer.add_event_handler(Events.STARTED, lambda engine: engine.set_data(SlowLoader(run.loaders.train)))


def slow_forward_on_rank1(run: TrainingRun) -> None:
    if idist.get_rank() == 1:
        run.model.register_forward_pre_hook(lambda module, inputs: time.sleep(DELAY_S))


def time_window_outside(run: TrainingRun) -> None:
    """Clock the recorder's measured window with handlers of our own: after warm-up to the last iteration."""
    marks = {}
    warmup, last = run.config.warmup_iters, len(run.loaders.train) * run.config.epochs
    run.trainer.add_event_handler(
        Events.ITERATION_COMPLETED(once=warmup), lambda _: marks.update(start=time.perf_counter())
    )
    run.trainer.add_event_handler(
        Events.ITERATION_COMPLETED(once=last), lambda _: marks.update(end=time.perf_counter())
    )

    @run.trainer.on(Events.COMPLETED)
    def _write(engine: Engine) -> None:
        if idist.get_rank() == 0:
            samples = (last - warmup) * run.loaders.global_batch
            Path(run.config.output_dir, "outside.json").write_text(
                json.dumps({"samples": samples, "seconds": marks["end"] - marks["start"]})
            )


def slow_evaluation(run: TrainingRun) -> None:
    run.evaluator.add_event_handler(Events.COMPLETED, lambda _: time.sleep(float(os.environ.get("EVAL_DELAY", "0"))))


SCENARIOS = {
    "fail-raise": ({"backend": "gloo", "nproc_per_node": 2, "epochs": 5}, fail_at_iteration_3),
    "fail-exit": ({"backend": "gloo", "nproc_per_node": 2, "epochs": 5}, fail_at_iteration_3),
    "handlers-raise": ({"profiler": "handlers"}, fail_at_iteration_3),
    "window": ({"backend": "gloo", "nproc_per_node": 2}, time_window_outside),
    "slow-data": ({"backend": "gloo", "nproc_per_node": 2, "train_size": 1024}, slow_data_on_rank1),
    "slow-forward": ({"backend": "gloo", "nproc_per_node": 2, "train_size": 1024}, slow_forward_on_rank1),
    "slow-eval": ({"profiler": "timer", "epochs": 3, "train_size": 512}, slow_evaluation),
}

if __name__ == "__main__":
    name, output_dir = sys.argv[1], sys.argv[2]
    os.environ["SCENARIO"] = name
    options, setup = SCENARIOS[name]
    config = TrainConfig(**{**BASE, **options, "output_dir": output_dir})
    try:
        launch(training, config, setup=setup)
    except RunFailed as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
