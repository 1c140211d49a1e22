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
from collections.abc import Callable, Mapping
from typing import Any

import ignite.distributed as idist
import numpy as np
import torch
from ignite.engine import Engine, Events
from ignite.handlers import EarlyStopping
from ignite.metrics import Accuracy, ConfusionMatrix, Loss
from ignite.utils import manual_seed
from torch import nn
from torch.utils._pytree import tree_leaves

from ignite_ddl.launcher.backends import device_of
from ignite_ddl.measure.recorder import StepRecorder
from ignite_ddl.trainer.recipe import build_optimizer
from ignite_ddl.trainer.strategies import unwrap

__all__ = [
    "attach_early_stopping",
    "autocast",
    "build_optimizer",
    "clip_and_step",
    "create_evaluator",
    "create_trainer",
    "create_workload_evaluator",
    "criterion_step",
    "move_batch",
    "optimizer_step",
    "output_loss",
    "split_batch",
    "seed_everything",
    "to_device",
]


AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch; XLA's generator only on XLA ranks.

    Ignite's ``manual_seed`` also seeds XLA wherever torch_xla is installed, which starts the XLA runtime (and takes
    the TPU) in every process, gloo ranks included.
    """
    if device_of(idist.backend()) == "xla":
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
    criterion: Callable[..., torch.Tensor],
    device: torch.device,
    amp: str = "none",
    scaler: torch.amp.GradScaler | None = None,
    recorder: StepRecorder | None = None,
    accumulate: int = 1,
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    channels_last: bool = False,
    step: Callable[[nn.Module, Any], torch.Tensor] | None = None,
    samples_in: Callable[[Any], int] | None = None,
    process_function: Callable[[Engine, Any], Any] | None = None,
    clip_grad_norm: float | None = None,
) -> Engine:
    """An engine whose step is forward, backward (DDP all-reduces gradients here) and optimizer step.

    With ``accumulate`` N > 1, a step splits this rank's batch into N micro-batches, runs forward and backward on
    each (the first N - 1 inside ``no_sync()``: gradients accumulate without communicating) and steps the optimizer
    once; each micro-batch's loss is divided by N, so the step's gradient is the whole batch's mean, as without
    accumulation. An iteration is one optimizer step either way.

    With ``clip_grad_norm``, the gradients' global norm is clipped to it once per optimizer step, after the last
    micro-batch (:func:`clip_and_step`).

    Its output is ``{"loss": float, "samples": int}`` for this rank's batch, and ``"grad_norm"``, the norm before
    clipping, where it clips. With a ``recorder``, the step
    reports the end of each phase to it (attach the recorder to the returned engine); the phases of the
    micro-batches add up. With ``channels_last``, image batches arrive in that memory format (:func:`to_device`).

    ``step(model, batch) -> loss`` replaces ``criterion(model(x), y)`` for batches of any structure (tensors in
    tuples, lists or mappings: moved to ``device`` and split along their first dimension for accumulation), and
    ``samples_in(batch)`` counts its samples (a workload's, :mod:`ignite_ddl.trainer.workload`).

    ``process_function(engine, batch) -> output`` (Ignite's) replaces the whole step: it runs its own forward,
    backward and optimizer step, so the step is timed whole (no phases), ``amp``, ``accumulate`` and
    ``clip_grad_norm`` must be left at their defaults (the checks before the run refuse them), and the output's loss
    is read by :func:`output_loss`.
    """
    mark = recorder.mark if recorder is not None else lambda phase: None
    if recorder is not None:
        recorder.micro_steps = accumulate
    if process_function is not None:
        if accumulate != 1 or amp != "none" or clip_grad_norm:
            raise ValueError("a process_function runs its own step: accumulate, amp and clipping are its own")
        return _own_step_trainer(model, device, process_function, samples_in or _first_length)

    step = step or criterion_step(criterion)
    count = samples_in or _first_length

    def train_step(engine: Engine, batch: Any) -> dict[str, Any]:
        batch = to_device(batch, device, channels_last) if channels_last else move_batch(batch, device)
        loss, norm = _step(model, optimizer, step, batch, amp, scaler, accumulate, no_sync, mark, clip_grad_norm)
        return {**_read(loss, norm), "samples": count(batch)}

    return Engine(train_step)


def criterion_step(criterion: Callable[..., torch.Tensor]) -> Callable[[nn.Module, Any], torch.Tensor]:
    """The step of an ``(x, y)`` batch: ``criterion(model(x), y)``."""

    def step(model: nn.Module, batch: Any) -> torch.Tensor:
        return criterion(model(batch[0]), batch[1])

    return step


def _read(loss: torch.Tensor, norm: torch.Tensor | None) -> dict[str, float]:
    """The step's output figures: the loss, and the gradient norm before clipping where it clipped, read from the
    device together (one wait, not two)."""
    if norm is None:
        return {"loss": loss.item()}
    full_tensor = getattr(norm, "full_tensor", None)  # FSDP2's norm, a DTensor: reduced over the ranks already
    if full_tensor is not None:
        norm = full_tensor()
    loss_value, norm_value = torch.stack([loss.detach().float(), norm.detach().float()]).tolist()
    return {"loss": loss_value, "grad_norm": norm_value}


def clip_and_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    clip_grad_norm: float | None,
    mark: Callable[[str], None],
) -> torch.Tensor | None:
    """The end of an optimizer step, after every micro-batch's backward: with ``clip_grad_norm``, the gradients
    unscaled (under a GradScaler) and their global norm clipped to it (``torch.nn.utils.clip_grad_norm_``: under
    FSDP2, over every rank's shards); then the optimizer's step (the scaler's, which skips a step whose gradients
    overflowed). The norm before clipping (None where it does not clip)."""
    norm = None
    if clip_grad_norm:
        if scaler is not None:
            scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    mark("optimizer")
    return norm


def optimizer_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    step: Callable[[nn.Module, Any], torch.Tensor],
    batch: Any,
    amp: str = "none",
    scaler: torch.amp.GradScaler | None = None,
    accumulate: int = 1,
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    mark: Callable[[str], None] = lambda phase: None,
    clip_grad_norm: float | None = None,
) -> torch.Tensor:
    """One optimizer step of :func:`create_trainer` on this rank's ``batch`` (on its device), ``step(model, part)``
    giving each micro-batch's loss; the step's loss as a tensor (its ``item()`` would wait for the device, and
    cannot be read at all when the memory prediction runs the step on fake tensors:
    :mod:`ignite_ddl.predict.memory`). The last step's gradients are set to None after the first forward, before
    the first backward makes new ones."""
    loss, _ = _step(model, optimizer, step, batch, amp, scaler, accumulate, no_sync, mark, clip_grad_norm)
    return loss


def _step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    step: Callable[[nn.Module, Any], torch.Tensor],
    batch: Any,
    amp: str,
    scaler: torch.amp.GradScaler | None,
    accumulate: int,
    no_sync: Callable[[], contextlib.AbstractContextManager],
    mark: Callable[[str], None],
    clip_grad_norm: float | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`optimizer_step`, with the gradient norm before clipping (None where it does not clip)."""
    model.train()
    device = _device_of(batch)
    parts = split_batch(batch, accumulate) if accumulate > 1 else [batch]
    total = torch.zeros((), device=device)
    for i, part in enumerate(parts):
        with no_sync() if i < len(parts) - 1 else contextlib.nullcontext():
            with autocast(device, amp):
                loss = step(model, part) / len(parts)
            if i == 0:
                optimizer.zero_grad(set_to_none=True)
            mark("forward")
            (scaler.scale(loss) if scaler is not None else loss).backward()
            mark("backward")
        total += loss.detach().float()
    return total, clip_and_step(model, optimizer, scaler, clip_grad_norm, mark)


def _device_of(batch: Any) -> torch.device:
    """The device of the first tensor in ``batch`` (tensors in tuples, lists and mappings; CPU if it holds none)."""
    return next((t.device for t in tree_leaves(batch) if isinstance(t, torch.Tensor)), torch.device("cpu"))


def _first_length(batch: Any) -> int:
    return len(batch[0])


def move_batch(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor in it (in tuples, lists and mappings) on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: move_batch(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_batch(v, device) for v in batch)
    return batch


def split_batch(batch: Any, parts: int) -> list[Any]:
    """``batch`` cut into ``parts`` micro-batches along the first dimension of every tensor in it."""
    if isinstance(batch, torch.Tensor):
        return list(batch.chunk(parts))
    if isinstance(batch, dict):
        pieces = {k: split_batch(v, parts) for k, v in batch.items()}
        return [{k: v[i] for k, v in pieces.items()} for i in range(parts)]
    if isinstance(batch, (list, tuple)):
        columns = [split_batch(v, parts) for v in batch]
        return [type(batch)(c[i] for c in columns) for i in range(parts)]
    return [batch] * parts


def output_loss(output: Any) -> float | None:
    """The loss in a process function's ``output``: a number, a one-element floating tensor, or either under the key
    ``"loss"`` of a mapping (what Ignite's own steps return); None when it holds none."""
    if isinstance(output, Mapping):
        output = output.get("loss")
    if isinstance(output, torch.Tensor):
        return float(output.detach().item()) if output.numel() == 1 and output.is_floating_point() else None
    if isinstance(output, (int, float)) and not isinstance(output, bool):
        return float(output)
    return None


def _own_step_trainer(
    model: nn.Module,
    device: torch.device,
    process_function: Callable[[Engine, Any], Any],
    samples_in: Callable[[Any], int],
) -> Engine:
    """The train step of :func:`create_trainer` around a workload's own Ignite ``process_function``: the batch moved
    to ``device`` and the model back in train mode (the evaluator leaves it in eval mode), then the user's step,
    whole; its output (a mapping's keys kept) with the loss and the samples the run's epochs and records count."""

    def train_step(engine: Engine, batch: Any) -> dict[str, Any]:
        model.train()
        batch = move_batch(batch, device)
        output = process_function(engine, batch)
        loss = output_loss(output)
        if loss is None:  # checked before the run on two samples; a step that stops returning one ends it here
            raise ValueError(f"the workload's process_function returned {type(output).__name__}, not a loss")
        kept = dict(output) if isinstance(output, Mapping) else {}
        return {**kept, "loss": loss, "samples": samples_in(batch)}

    return Engine(train_step)


def create_workload_evaluator(
    model: nn.Module,
    step: Callable[[nn.Module, Any], torch.Tensor],
    samples_in: Callable[[Any], int],
    device: torch.device,
    amp: str = "none",
) -> Engine:
    """An evaluator of a workload's own ``step``: its mean loss over every rank's validation batches (weighted by
    samples), no accuracy."""
    net = unwrap(model)

    @torch.no_grad()
    def eval_step(engine: Engine, batch: Any) -> tuple[torch.Tensor, int]:
        net.eval()
        batch = move_batch(batch, device)
        with autocast(device, amp):
            loss = step(net, batch)
        return loss.float(), samples_in(batch)

    evaluator = Engine(eval_step)
    Loss(lambda loss, _: loss, output_transform=lambda o: (o[0], o[1]), batch_size=lambda n: n).attach(
        evaluator, "loss"
    )
    return evaluator


def _flat_scores(output: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores ``(..., classes)`` and targets ``(...)`` as Ignite's metrics take them: ``(N, classes)`` and ``(N,)``
    (a language model scores every position of a sequence)."""
    y_pred, y = output
    if y_pred.dim() > 2:
        return y_pred.reshape(-1, y_pred.shape[-1]), y.reshape(-1)
    return y_pred, y


def create_evaluator(
    model: nn.Module,
    criterion: Callable[..., torch.Tensor],
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
    Accuracy(output_transform=_flat_scores).attach(evaluator, "accuracy")
    Loss(criterion, output_transform=_flat_scores).attach(evaluator, "loss")
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
