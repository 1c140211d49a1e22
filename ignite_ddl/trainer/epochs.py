"""What a run records per epoch, on every rank: :class:`EpochLog` measures each epoch (training loss, global
throughput from the slowest rank's time), :class:`EpochEvaluation` adds validation every ``eval_every`` epochs,
and :class:`EpochReport` writes each record once (log line, TensorBoard, listeners such as the MLflow tracker).
:func:`divergence` tells a run whose loss became NaN or exploded.

Example:
    >>> divergence(2.3, [{"epoch": 1, "train_loss": float("nan")}])
    'the training loss became NaN or infinite in epoch 1 (learning rate too high?)'
    >>> divergence(2.3, [{"epoch": 1, "train_loss": 1.1}]) is None
    True
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events
from ignite.handlers.tensorboard_logger import TensorboardLogger

from ignite_ddl.core.schema import EpochRecord, StepStats
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.measure.recorder import StepRecorder

__all__ = ["EpochEvaluation", "EpochLog", "EpochReport", "divergence"]


class EpochLog:
    """Per-epoch record on every rank: train loss and global throughput over all ranks, in ``history``.

    Training time runs from the epoch's start to its end, before evaluation; throughput is all ranks' samples
    divided by the slowest rank's time. The loss of the first iteration, computed before any update, is kept to
    tell a diverging run (:func:`divergence`). :class:`EpochEvaluation` adds validation to a record and
    :class:`EpochReport` writes it out; attached in that order, after this.
    """

    INITIAL_ITERATIONS = 1

    def __init__(self, recorder: StepRecorder | None = None):
        self.recorder = recorder
        self.epoch_start_iteration = 0
        self.history: list[EpochRecord] = []
        self.steps: list[StepStats | None] = []  # each epoch's per-rank step statistics (with a recorder)
        self.start, self.loss_sum, self.samples = 0.0, 0.0, 0
        self.initial_losses: list[float] = []

    def attach(self, trainer: Engine) -> None:
        trainer.add_event_handler(Events.EPOCH_STARTED, self._start)
        trainer.add_event_handler(Events.ITERATION_COMPLETED, self._step)
        trainer.add_event_handler(Events.EPOCH_COMPLETED, self._close)
        trainer.add_event_handler(Events.COMPLETED, self._close)  # a run cut short by max_iters ends mid-epoch

    def _start(self, engine: Engine) -> None:
        # Ranks leave evaluation at different times; aligning them here keeps a rank's wait for the others out of
        # the epoch it measures, so the slowest rank's time is the epoch's wall time.
        idist.barrier()
        self.start, self.loss_sum, self.samples = time.perf_counter(), 0.0, 0
        self.epoch_start_iteration = engine.state.iteration

    def _step(self, engine: Engine) -> None:
        # The train step's output (Ignite annotates State.output as int | None).
        output = cast(dict[str, Any], engine.state.output)
        self.loss_sum += output["loss"] * output["samples"]
        self.samples += output["samples"]
        if len(self.initial_losses) < self.INITIAL_ITERATIONS:
            self.initial_losses.append(output["loss"])

    def initial_loss(self) -> float | None:
        """Collective: the loss of the run's first iteration, averaged over all ranks."""
        local = sum(self.initial_losses) / len(self.initial_losses) if self.initial_losses else math.nan
        values = [v for v in gather_objects(local) if not math.isnan(v)]
        return sum(values) / len(values) if values else None

    def _close(self, engine: Engine) -> None:
        if self.history and self.history[-1]["iteration"] == engine.state.iteration:
            return  # closed at EPOCH_COMPLETED already: COMPLETED at the same iteration adds nothing
        # Ignite types all_reduce's result as tensor or number: it is what was reduced.
        seconds = cast(float, idist.all_reduce(time.perf_counter() - self.start, op="MAX"))
        totals = cast(torch.Tensor, idist.all_reduce(torch.tensor([float(self.samples), self.loss_sum])))
        samples, loss_sum = totals.tolist()
        self.steps.append(self.recorder.gather(since_iteration=self.epoch_start_iteration) if self.recorder else None)
        self.history.append(
            {
                "epoch": engine.state.epoch,
                "iteration": engine.state.iteration,
                "train_loss": loss_sum / max(samples, 1.0),
                "train_samples": int(samples),
                "train_time_s": seconds,
                "samples_per_s": samples / seconds if seconds > 0 else 0.0,
                "val_accuracy": None,
                "val_loss": None,
            }
        )


class EpochEvaluation:
    """Validation of the model every ``eval_every`` epochs (0: only at the end; the last epoch always), written
    into that epoch's record of :class:`EpochLog`; the confusion matrix of the last evaluation is kept."""

    def __init__(self, evaluator: Engine, loader: Iterable, epochs: EpochLog, eval_every: int = 1):
        self.evaluator, self.loader, self.epochs, self.eval_every = evaluator, loader, epochs, eval_every
        self.confusion_matrix: list[list[int]] | None = None

    def attach(self, trainer: Engine) -> None:
        trainer.add_event_handler(Events.EPOCH_COMPLETED, self._run, False)
        # A run stopped at an epoch's end by max_iters still gets its final evaluation here.
        trainer.add_event_handler(Events.COMPLETED, self._run, True)

    def _due(self, engine: Engine, final: bool) -> bool:
        final = final or engine.state.epoch == engine.state.max_epochs
        return final or (self.eval_every > 0 and engine.state.epoch % self.eval_every == 0)

    def _run(self, engine: Engine, final: bool) -> None:
        record = self.epochs.history[-1]
        if record["val_loss"] is not None or not self._due(engine, final):
            return
        self.evaluator.run(self.loader)
        metrics = self.evaluator.state.metrics
        accuracy = float(metrics["accuracy"]) if "accuracy" in metrics else None  # a workload's own step: loss only
        record.update({"val_accuracy": accuracy, "val_loss": float(metrics["loss"])})
        if "confusion_matrix" in metrics:
            self.confusion_matrix = metrics["confusion_matrix"].long().tolist()


class EpochReport:
    """Each epoch's record, once, when it is complete: a log line, TensorBoard scalars (rank 0, global and per
    rank) and every listener (the MLflow tracker)."""

    def __init__(self, epochs: EpochLog, tb: TensorboardLogger | None, log: logging.Logger):
        self.epochs, self.tb, self.log = epochs, tb, log
        self.listeners: list[Callable[[EpochRecord], None]] = []  # called with each epoch's record
        self.reported = 0

    def attach(self, trainer: Engine) -> None:
        trainer.add_event_handler(Events.EPOCH_COMPLETED, self._report)
        trainer.add_event_handler(Events.COMPLETED, self._report)

    def _report(self, engine: Engine) -> None:
        for record, steps in zip(self.epochs.history[self.reported :], self.epochs.steps[self.reported :]):
            self._write(record, steps)
        self.reported = len(self.epochs.history)

    def _write(self, record: EpochRecord, steps: StepStats | None) -> None:
        if self.tb is not None:
            self.tb.writer.add_scalar("epoch/wall_samples_per_s", record["samples_per_s"], record["epoch"])
            self.tb.writer.add_scalar("epoch/train_loss", record["train_loss"], record["epoch"])
            if steps is not None:
                _log_rank_scalars(self.tb, steps, record["epoch"])
        validation = f"val loss {record['val_loss']:.4f}, " if record["val_loss"] is not None else ""
        if record["val_accuracy"] is not None:
            validation = f"val accuracy {record['val_accuracy']:.4f}, {validation}"
        self.log.info(
            f"epoch {record['epoch']}: train loss {record['train_loss']:.4f}, {validation}"
            f"{record['samples_per_s']:.0f} samples/s (all ranks)"
        )
        for listener in self.listeners:
            listener(record)


_EXPLODING_FACTOR = 2.0  # a last-epoch loss this many times the first iteration's (and 0.5 above it) has exploded


def divergence(initial_loss: float | None, history: list[EpochRecord]) -> str | None:
    """Why a run's training loss says it diverged (NaN / infinite, or exploding), or None."""
    for record in history:
        loss = record["train_loss"]
        if loss is None or not math.isfinite(loss):
            return f"the training loss became NaN or infinite in epoch {record['epoch']} (learning rate too high?)"
    if initial_loss is None or not math.isfinite(initial_loss) or not history:
        return None
    last = cast(float, history[-1]["train_loss"])  # every loss is a number: checked above
    if last > _EXPLODING_FACTOR * initial_loss and last - initial_loss > 0.5:
        return f"the training loss grew from {initial_loss:.3g} (first iteration) to {last:.3g} (last epoch)"
    return None


def _log_rank_scalars(tb: TensorboardLogger, steps: StepStats, epoch: int) -> None:
    """Per-rank step time, throughput and data-wait share of one epoch (warm-up excluded), and the global figure."""
    for r in steps["ranks"]:
        if r["iterations"]:
            tb.writer.add_scalar(f"rank{r['rank']}/step_time_s", r["step_s_mean"], epoch)
            tb.writer.add_scalar(f"rank{r['rank']}/samples_per_s", r["samples_per_s"], epoch)
            tb.writer.add_scalar(f"rank{r['rank']}/data_wait_share", r["data_share"], epoch)
            comm = r["comm_s_mean"]
            if comm is not None and not math.isnan(comm):
                tb.writer.add_scalar(f"rank{r['rank']}/comm_time_s", r["comm_s_mean"], epoch)
                tb.writer.add_scalar(f"rank{r['rank']}/exposed_comm_time_s", r["exposed_comm_s_mean"], epoch)
                tb.writer.add_scalar(f"rank{r['rank']}/comm_overlap", r["overlap"], epoch)
    if steps["global"]["samples"]:
        tb.writer.add_scalar("epoch/measured_samples_per_s", steps["global"]["samples_per_s"], epoch)
