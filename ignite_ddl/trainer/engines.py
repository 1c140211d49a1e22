"""The Ignite engines of a run, on their own: the train step (forward, backward, optimizer step, reporting each
phase to a step recorder), the evaluator with its metrics, and the pieces they are built from (optimizer, mixed
precision, seeding, early stopping). :mod:`ignite_ddl.trainer.run` assembles them into a run; a notebook can attach
handlers of its own to them.

Example:
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Linear(4, 3)
    >>> trainer = create_trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(),
    ...                          torch.device("cpu"))
    >>> state = trainer.run([(torch.randn(8, 4), torch.randint(0, 3, (8,)))] * 2, max_epochs=1)
    >>> state.iteration, state.output["samples"]
    (2, 8)
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from typing import Any

import ignite.distributed as idist
import numpy as np
import torch
from ignite.engine import Engine, Events
from ignite.handlers import EarlyStopping
from ignite.metrics import Accuracy, ConfusionMatrix, Loss
from ignite.utils import manual_seed
from torch import nn

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.measure.recorder import StepRecorder
from ignite_ddl.trainer.strategies import unwrap

__all__ = [
    "attach_early_stopping",
    "autocast",
    "build_optimizer",
    "create_evaluator",
    "create_trainer",
    "seed_everything",
    "to_device",
]


AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch; XLA's generator only on XLA ranks.

    Ignite's ``manual_seed`` also seeds XLA wherever torch_xla is installed, which starts the XLA runtime (and takes
    the TPU) in every process, gloo ranks included.
    """
    if idist.backend() == "xla-tpu":
        manual_seed(seed)
        return
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def autocast(device: torch.device, amp: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for ``amp`` ("bf16" or "fp16"); a no-op context for "none"."""
    if amp == "none":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AMP_DTYPES[amp])


def to_device(batch: tuple[torch.Tensor, torch.Tensor], device: torch.device, channels_last: bool = False) -> Any:
    """A batch's inputs and targets on ``device``; 4-D inputs (images) in channels_last memory format if asked, so
    that they meet a channels_last model without a layout conversion in its first layer."""
    x, y = batch[0].to(device, non_blocking=True), batch[1].to(device, non_blocking=True)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, y


def create_trainer(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    criterion: nn.Module,
    device: torch.device,
    amp: str = "none",
    scaler: torch.amp.GradScaler | None = None,
    recorder: StepRecorder | None = None,
    accumulate: int = 1,
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    channels_last: bool = False,
) -> Engine:
    """An engine whose step is forward, backward (DDP all-reduces gradients here) and optimizer step.

    With ``accumulate`` N > 1, a step splits this rank's batch into N micro-batches, runs forward and backward on
    each (the first N - 1 inside ``no_sync()``: gradients accumulate without communicating) and steps the optimizer
    once; each micro-batch's loss is divided by N, so the step's gradient is the whole batch's mean, as without
    accumulation. An iteration is one optimizer step either way.

    Its output is ``{"loss": float, "samples": int}`` for this rank's batch. With a ``recorder``, the step
    reports the end of each phase to it (attach the recorder to the returned engine); the phases of the
    micro-batches add up. With ``channels_last``, image batches arrive in that memory format (:func:`to_device`).
    """
    mark = recorder.mark if recorder is not None else lambda phase: None
    if recorder is not None:
        recorder.micro_steps = accumulate

    def backward(loss: torch.Tensor) -> None:
        (scaler.scale(loss) if scaler is not None else loss).backward()

    def train_step(engine: Engine, batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, Any]:
        model.train()
        x, y = to_device(batch, device, channels_last)
        if accumulate == 1:
            with autocast(device, amp):
                loss = criterion(model(x), y)
            mark("forward")
            optimizer.zero_grad(set_to_none=True)
            backward(loss)
            mark("backward")
        else:
            total = torch.zeros((), device=device)
            optimizer.zero_grad(set_to_none=True)
            for i, (xi, yi) in enumerate(zip(x.chunk(accumulate), y.chunk(accumulate))):
                with no_sync() if i < accumulate - 1 else contextlib.nullcontext():
                    with autocast(device, amp):
                        part = criterion(model(xi), yi) / accumulate
                    mark("forward")
                    backward(part)
                    mark("backward")
                total += part.detach().float()
            loss = total
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        mark("optimizer")
        return {"loss": loss.item(), "samples": x.shape[0]}

    return Engine(train_step)


def create_evaluator(
    model: nn.Module,
    criterion: nn.Module,
    device: torch.device,
    amp: str = "none",
    num_classes: int | None = None,
    channels_last: bool = False,
) -> Engine:
    """An engine computing accuracy, loss and (given ``num_classes``) the confusion matrix; Ignite's metrics sum
    their counts over all ranks, so every rank holds the same figures."""
    # Evaluate the wrapped module: no DDP hooks, so ranks may hold different numbers of validation batches.
    net = unwrap(model)

    @torch.no_grad()
    def eval_step(engine: Engine, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        net.eval()
        x, y = to_device(batch, device, channels_last)
        with autocast(device, amp):
            y_pred = net(x)
        return y_pred.float(), y

    evaluator = Engine(eval_step)
    Accuracy().attach(evaluator, "accuracy")
    Loss(criterion).attach(evaluator, "loss")
    if num_classes is not None:
        ConfusionMatrix(num_classes).attach(evaluator, "confusion_matrix")
    return evaluator


def attach_early_stopping(trainer: Engine, evaluator: Engine, patience: int) -> EarlyStopping:
    """Ignite's ``EarlyStopping`` on validation accuracy: stop ``trainer`` after ``patience`` evaluations without
    improvement. Every rank stops at the same epoch with no extra collective: the accuracy it compares is already
    summed over all ranks, so every rank's handler sees the same scores and decides alike."""
    early = EarlyStopping(patience, score_function=lambda engine: engine.state.metrics["accuracy"], trainer=trainer)
    evaluator.add_event_handler(Events.COMPLETED, early)
    return early


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.SGD(
        model.parameters(),
        lr=config.lr,
        momentum=config.momentum,
        nesterov=config.nesterov,
        weight_decay=config.weight_decay,
    )
