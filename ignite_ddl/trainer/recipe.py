"""What a training script does besides the model and its step: the optimizer with its parameter groups, the
learning-rate schedule and gradient clipping, from the run's options or declared by a workload. The same optimizer
serves every strategy (ZeRO-1 shards it group by group), the suite's own step with ``--accumulate`` and ``--amp``
(:mod:`ignite_ddl.trainer.engines` clips), and the memory prediction's trace (:mod:`ignite_ddl.predict.memory`).

**Optimizer.** ``--optimizer sgd`` or ``adam`` over every parameter (``--weight-decay``, if any, on all of them, as
torch applies it). ``--optimizer adamw`` is torch's AdamW over two parameter groups, nanoGPT's rule
(:func:`decay_groups`): parameters of 2 or more dimensions (linear and embedding matrices, convolution kernels) are
decayed by ``--weight-decay``, those of fewer (biases, LayerNorm and BatchNorm weights) are not. A workload's
``optimizer(model)`` replaces both: called on the model as the strategy placed it (its parameters are DDP's, or
FSDP2's sharded ones), it returns an optimizer, or parameter groups as torch's optimizers take them (parameters, or
dicts of ``params`` and options), over which ``--optimizer`` is built, a group's own keys overriding the options.

**Schedule.** Ignite's parameter schedulers, stepped at the start of every iteration: a linear warm-up from 0 to the
peak over ``--warmup-epochs`` (``PiecewiseLinear``), then ``--lr-schedule``: linear (``PiecewiseLinear``) or cosine
(``CosineAnnealingScheduler`` after the warm-up, in a ``ConcatScheduler``) down to ``--min-lr-ratio`` of the peak one
iteration after the last of ``--epochs``, or constant. The peak is each group's own learning rate (``--lr``, or what
a workload's optimizer set); groups with different rates each follow the same shape (``ParamGroupScheduler``). The
scheduler is checkpointed with the run, so ``--resume`` continues it. (Ignite's ``create_lr_scheduler_with_warmup``
reaches the peak one iteration early, to avoid repeating a value, and gives every group the same rate after the
warm-up: the two parts are joined here instead.)

**Clipping.** ``--clip-grad-norm X`` (or a workload's ``clip_grad_norm``; the option wins, 0 turns it off) clips the
global norm of the gradients with ``torch.nn.utils.clip_grad_norm_`` once per optimizer step, after the last
micro-batch's backward (gradients averaged over the ranks, the same everywhere; under FSDP2 the norm of the sharded
gradients is reduced over the ranks) and after the GradScaler unscaled them under ``--amp fp16``.

Example:
    >>> import torch
    >>> from torch import nn
    >>> from ignite_ddl.core.config import TrainConfig
    >>> model = nn.Sequential(nn.Embedding(10, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    >>> optimizer = build_optimizer(model, TrainConfig(optimizer="adamw", lr=1e-3, weight_decay=0.1))
    >>> [(len(g["params"]), g["weight_decay"]) for g in optimizer.param_groups]  # 2 matrices; 3 vectors
    [(2, 0.1), (3, 0.0)]
    >>> schedule_kind(TrainConfig()), schedule_kind(TrainConfig(warmup_epochs=1)), changes_lr(TrainConfig())
    ('constant', 'linear', False)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.handlers.param_scheduler import (
    ConcatScheduler,
    CosineAnnealingScheduler,
    ParamGroupScheduler,
    ParamScheduler,
    PiecewiseLinear,
)
from torch import nn

from ignite_ddl.core.config import TrainConfig

__all__ = [
    "OptimizerFactory",
    "Schedule",
    "attach_schedule",
    "build_optimizer",
    "build_schedule",
    "changes_lr",
    "clip_value",
    "decay_groups",
    "optimizer_options",
    "schedule_end",
    "schedule_kind",
    "schedule_shape",
]

# A workload's optimizer: the placed model -> an optimizer, or the parameter groups to build --optimizer over.
OptimizerFactory = Callable[[nn.Module], Any]
Schedule = ParamScheduler | ParamGroupScheduler


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """The trainable parameters of ``model`` in two groups, as nanoGPT's ``configure_optimizers`` makes them:
    ``weight_decay`` for those of 2 or more dimensions (matrices, embeddings, kernels), none for the others (biases,
    norm weights). A group left empty is left out. Shared (tied) parameters count once."""
    decayed = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    kept = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decayed, "weight_decay": weight_decay}, {"params": kept, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


def build_optimizer(
    model: nn.Module, config: TrainConfig, factory: OptimizerFactory | None = None
) -> torch.optim.Optimizer:
    """The optimizer of ``config`` over ``model``'s parameters, or what a workload's ``factory(model)`` makes (an
    optimizer as it is, or parameter groups that ``config``'s optimizer is built over)."""
    params: Any = model.parameters()
    if factory is not None:
        made = factory(model)
        if isinstance(made, torch.optim.Optimizer):
            return made
        if not isinstance(made, Iterable) or isinstance(made, (str, bytes, Mapping, torch.Tensor)):
            raise TypeError(f"it returned a {type(made).__name__}, not an optimizer or parameter groups")
        params = list(made)
    elif config.optimizer == "adamw":
        params = decay_groups(model, config.weight_decay)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.SGD(
        params, lr=config.lr, momentum=config.momentum, nesterov=config.nesterov, weight_decay=config.weight_decay
    )


def optimizer_options(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer``'s defaults that its class's constructor takes: what rebuilds it over other parameters (torch's
    AdamW records ``decoupled_weight_decay`` among its defaults, which its constructor refuses)."""
    accepted = inspect.signature(type(optimizer).__init__).parameters
    return {key: value for key, value in optimizer.defaults.items() if key in accepted}


def clip_value(config: TrainConfig, declared: float | None) -> float | None:
    """The gradient norm each optimizer step clips to: ``--clip-grad-norm`` where given, else the workload's
    ``declared`` value; None for no clipping (0 turns it off)."""
    value = config.clip_grad_norm if config.clip_grad_norm is not None else declared
    return float(value) if value else None


def schedule_kind(config: TrainConfig) -> str:
    """The learning rate after the warm-up: ``--lr-schedule``, or by default linear after a warm-up, else
    constant (what ``--warmup-epochs`` alone always meant)."""
    return config.lr_schedule or ("linear" if config.warmup_epochs > 0 else "constant")


def changes_lr(config: TrainConfig) -> bool:
    """Whether ``config``'s learning rate changes during the run (a scheduler runs, and is checkpointed)."""
    return config.warmup_epochs > 0 or schedule_kind(config) != "constant"


def build_schedule(optimizer: torch.optim.Optimizer, config: TrainConfig, epoch_length: int) -> Schedule | None:
    """``config``'s learning-rate schedule of ``optimizer`` over ``config.epochs`` epochs of ``epoch_length``
    iterations (the module docstring), to be called at every ``ITERATION_STARTED``; None for a constant rate."""
    if not changes_lr(config):
        return None
    total = config.epochs * epoch_length
    warmup = 0
    if config.warmup_epochs > 0:
        warmup = min(total - 1, max(1, round(config.warmup_epochs * epoch_length)))
    peaks = [group["lr"] for group in optimizer.param_groups]
    if len(set(peaks)) == 1:  # one scheduler for every group
        return _shape(optimizer, config, peaks[0], warmup, total, None)
    shapes = [_shape(optimizer, config, peak, warmup, total, i) for i, peak in enumerate(peaks)]
    return ParamGroupScheduler(shapes, names=[f"lr (group {i})" for i in range(len(shapes))])


def _shape(
    optimizer: torch.optim.Optimizer, config: TrainConfig, peak: float, warmup: int, total: int, group: int | None
) -> ParamScheduler:
    """The schedule of one rate (of every group, or of ``group``): warm-up to ``peak``, then the kind's shape."""
    kind, floor = schedule_kind(config), peak * config.min_lr_ratio
    ramp = [(0, 0.0), (warmup, peak)] if warmup else [(0, peak)]
    if kind == "cosine" and total - warmup >= 2:  # Ignite's cycle spans 2 iterations or more
        cosine = CosineAnnealingScheduler(optimizer, "lr", peak, floor, total - warmup, param_group_index=group)
        if not warmup:
            return cosine
        linear = PiecewiseLinear(optimizer, "lr", milestones_values=ramp, param_group_index=group)
        return ConcatScheduler([linear, cosine], durations=[warmup])
    decay = [(total, floor)] if kind != "constant" else []
    return PiecewiseLinear(optimizer, "lr", milestones_values=ramp + decay, param_group_index=group)


def attach_schedule(
    trainer: Engine, optimizer: torch.optim.Optimizer, config: TrainConfig, epoch_length: int
) -> Schedule | None:
    """:func:`build_schedule`, stepped at the start of every iteration of ``trainer``; None for a constant rate."""
    scheduler = build_schedule(optimizer, config, epoch_length)
    if scheduler is not None:
        trainer.add_event_handler(Events.ITERATION_STARTED, scheduler)
    return scheduler


# A scheduler's progress through its schedule, not the schedule itself.
_PROGRESS = {"event_index", "_index", "_current_duration", "_scheduler_index", "cycle", "save_history"}


def schedule_shape(state: Any) -> Any:
    """A scheduler's ``state_dict()`` without its progress: what two runs share when their schedules are the
    same (a resumed run must continue the schedule of the run that saved it)."""
    if isinstance(state, Mapping):
        return {key: schedule_shape(value) for key, value in state.items() if key not in _PROGRESS}
    if isinstance(state, (list, tuple)):
        return [schedule_shape(value) for value in state]
    return state


def schedule_end(state: Any) -> int:
    """The iteration at which a scheduler's ``state_dict()`` schedule ends (its decay's last milestone)."""
    if not isinstance(state, Mapping):
        return 0
    if "schedulers" in state and "durations" not in state:  # ParamGroupScheduler: (name, state) pairs
        return max(schedule_end(pair[1]) for pair in state["schedulers"])
    if "durations" in state:  # ConcatScheduler: its parts one after the other
        return int(sum(state["durations"])) + schedule_end(state["schedulers"][-1])
    if "cycle_size" in state:
        return int(state["cycle_size"])
    return int(state["milestones"][-1]) if state.get("milestones") else 0
