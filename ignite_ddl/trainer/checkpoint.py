"""Checkpoints: resumable state saved during a run, the best model kept after each evaluation, and a file given to
``--resume`` checked before any process starts.

A resumable checkpoint is a ``torch.save`` dictionary of state dicts written by Ignite's ``Checkpoint``: ``trainer``,
``model`` (unwrapped from DDP), ``optimizer``, and ``lr_scheduler`` / ``scaler`` when the run uses them. It is read
back with ``torch.load(..., weights_only=True)``: no pickled code ever runs.

**A finished run is not resumed.** ``--resume`` with the final checkpoint of a run that trained all its epochs
(``--epochs`` x its epoch length) is refused in one line before anything starts (exit 2): there is nothing left to
train, and Ignite would otherwise begin the last epoch again. Pass a larger ``--epochs`` to train on from it.

Example:
    >>> import tempfile, torch
    >>> from ignite_ddl import ConfigError, TrainConfig
    >>> path = tempfile.mkdtemp() + "/notes.txt"
    >>> _ = open(path, "w").write("not a checkpoint")
    >>> try:
    ...     check_checkpoint(path, TrainConfig(model="toy"))
    ... except ConfigError as e:
    ...     print(str(e).split(":")[0])
    cannot resume from a file that is not a PyTorch checkpoint
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, DiskSaver, global_step_from_engine
from torch import nn

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.outputs import save_torch
from ignite_ddl.trainer.recipe import changes_lr

__all__ = [
    "attach_best_model",
    "attach_checkpoints",
    "check_checkpoint",
    "finished_problem",
    "load_checkpoint",
]


def _saved_objects(config: TrainConfig) -> list[str]:
    """The objects a resumable checkpoint of ``config``'s run holds."""
    names = ["trainer", "model", "optimizer"]
    if changes_lr(config):
        names.append("lr_scheduler")
    if config.amp == "fp16":
        names.append("scaler")
    if config.early_stopping:
        names.append("early_stopping")
    return names


# The first bytes of what torch.save writes: its zip archive, or its legacy format (a pickle, protocol 2).
_TORCH_MAGIC = (b"PK\x03\x04", b"\x80")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint safely (``weights_only=True``); :class:`ConfigError` with one line if it cannot be."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"checkpoint to resume from is a folder: {path} (pass one of the files in checkpoints/)")
    if not path.exists():
        raise ConfigError(f"checkpoint to resume from not found: {path}")
    if not path.is_file():  # a device (/dev/zero would be read forever), a FIFO, a socket
        raise ConfigError(
            f"checkpoint to resume from is not a regular file: {path} (pass one of the files in checkpoints/)"
        )
    if path.stat().st_size == 0:
        raise ConfigError(f"cannot resume from {path}: the file is empty")
    with open(path, "rb") as f:
        head = f.read(4)
    if not head.startswith(_TORCH_MAGIC):
        raise ConfigError(f"cannot resume from a file that is not a PyTorch checkpoint: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # torch's words are a page long; what they say is this
        raise ConfigError(
            f"cannot resume from {path}: it holds Python objects that a safe (weights-only) load refuses, not the "
            "state dicts of a checkpoint of ignite-ddl train"
        ) from None
    except Exception:  # zip and torch errors alike: the file was cut short or damaged
        raise ConfigError(
            f"cannot resume from a file that is not a PyTorch checkpoint: {path} (it is damaged or cut short)"
        ) from None
    if not isinstance(state, dict):
        raise ConfigError(f"cannot resume from {path}: it holds a {type(state).__name__}, not a checkpoint dictionary")
    return state


def finished_problem(path: str | Path, iteration: Any, epoch_length: Any, config: TrainConfig) -> str | None:
    """Why resuming from ``path`` has nothing left to do: the trainer it saved is at ``iteration`` of epochs of
    ``epoch_length``, and ``config.epochs`` of them end at or before it (None: there is training left)."""
    if not isinstance(iteration, int) or not isinstance(epoch_length, int) or epoch_length < 1:
        return None
    total = config.epochs * epoch_length
    if iteration < total:
        return None
    return (
        f"cannot resume from {path}: nothing left to do, its run is finished (iteration {iteration} of "
        f"{total}, epoch {iteration // epoch_length} of --epochs {config.epochs}); pass a larger --epochs to train on"
    )


def _model_mismatch(theirs: dict[str, Any], ours: dict[str, torch.Tensor]) -> str | None:
    """How a saved model state differs from this model's (None if it fits)."""
    missing = [k for k in ours if k not in theirs]
    unexpected = [k for k in theirs if k not in ours]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} of this model's tensors missing (e.g. {missing[0]})")
        if unexpected:
            parts.append(f"{len(unexpected)} tensors this model does not have (e.g. {unexpected[0]})")
        return ", ".join(parts)
    for key, tensor in ours.items():
        saved = theirs[key]
        if not isinstance(saved, torch.Tensor) or tuple(saved.shape) != tuple(tensor.shape):
            shape = tuple(saved.shape) if isinstance(saved, torch.Tensor) else type(saved).__name__
            return f"{key} is {shape} there and {tuple(tensor.shape)} here"
    return None


def check_checkpoint(path: str | Path, config: TrainConfig, model: nn.Module | None = None) -> None:
    """Refuse, with one line, a ``--resume`` file that this run could not continue from: unreadable, not written by
    ``ignite-ddl train``, saved with other options (warm-up schedule, fp16 scaler), or holding another model.

    The model is built on the ``meta`` device for the comparison: no memory, no computation, nothing that would make
    forking ranks afterwards unsafe.
    """
    from ignite_ddl.trainer.data import dataset_info
    from ignite_ddl.trainer.models import build_model

    state = load_checkpoint(path)
    if state and all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(
            f"cannot resume from {path}: it holds only model weights (a best-model file?), not a resumable "
            "checkpoint; resume from one in checkpoints/"
        )
    missing = [name for name in _saved_objects(config) if name not in state]
    if missing:
        held = ", ".join(sorted(map(str, state))) or "nothing"
        raise ConfigError(
            f"cannot resume from {path}: it lacks {', '.join(missing)} (it holds {held}); resume with the options "
            "of the run that wrote it (--warmup-epochs, --lr-schedule, --amp, --early-stopping) or start afresh"
        )
    if not isinstance(state["model"], dict):
        raise ConfigError(f"cannot resume from {path}: its 'model' entry is not a state dict")
    problem = _trainer_problem(state["trainer"])
    if problem:
        raise ConfigError(f"cannot resume from {path}: its trainer state {problem}; the file was altered")
    trainer = state["trainer"]
    finished = finished_problem(path, trainer.get("iteration"), trainer.get("epoch_length"), config)
    if finished:
        raise ConfigError(finished)
    what = f"workload {config.workload}" if model is not None else f"--model {config.model} on {config.dataset}"
    if model is None:  # a workload's model is given, as its function built it
        info = dataset_info(config)
        with torch.device("meta"):
            model = build_model(config.model, info.in_channels, info.image_size, info.num_classes)
    mismatch = _model_mismatch(state["model"], model.state_dict())
    if mismatch:
        raise ConfigError(f"cannot resume from {path}: it holds another model's weights than {what} ({mismatch})")
    problem = _optimizer_problem(state["optimizer"], sum(1 for _ in model.parameters()))
    if problem:
        raise ConfigError(f"cannot resume from {path}: its optimizer state {problem}; the file was altered")


def _count(value: Any, low: int) -> bool:
    """Whether ``value`` is an int (not a bool) of at least ``low``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _trainer_problem(trainer: Any) -> str | None:
    """What is wrong with a saved Ignite trainer state (``Engine.state_dict()``: ``epoch_length``, ``max_epochs``
    and ``iteration`` or ``epoch``), None if nothing is. Ignite itself raises bare TypeErrors and ValueErrors on
    these, or accepts a negative iteration and counts samples that were never trained."""
    if not isinstance(trainer, Mapping):
        return f"is a {type(trainer).__name__}, not a dictionary"
    if "iteration" not in trainer and "epoch" not in trainer:
        return "has neither an iteration nor an epoch"
    for key, low in (("iteration", 0), ("epoch", 0), ("epoch_length", 1), ("max_epochs", 1)):
        if key in trainer and not _count(trainer[key], low):
            return f"has {key} {trainer[key]!r}, not a whole number >= {low}"
    if "epoch_length" not in trainer:
        return "has no epoch_length"
    return None


def _optimizer_problem(optimizer: Any, parameters: int) -> str | None:
    """What is wrong with a saved optimizer state (``Optimizer.state_dict()``, or the full state an FSDP run saves)
    for a model of ``parameters`` parameters, None if nothing is."""
    if not isinstance(optimizer, Mapping) or not isinstance(optimizer.get("state"), Mapping):
        return "has no 'state' dictionary"
    groups = optimizer.get("param_groups")
    if not isinstance(groups, list) or not groups or not all(isinstance(g, Mapping) for g in groups):
        return "has no parameter groups"
    saved = [p for g in groups for p in (g.get("params") if isinstance(g.get("params"), list) else [None])]
    if None in saved or len(saved) != parameters:
        return f"holds {len(saved)} parameters in its groups where this model has {parameters}"
    return None


class _Saver(DiskSaver):
    """Ignite's ``DiskSaver`` writing through :func:`~ignite_ddl.core.outputs.save_torch`: a full disk is reported as
    such, with the checkpoint's path, instead of torch's "unexpected pos"."""

    def _save_func(self, checkpoint: Mapping, path: Path, func: Callable) -> None:
        save_torch(checkpoint, path, func, **self.kwargs)


def attach_checkpoints(trainer: Engine, to_save: dict[str, Any], out: Path, every: int) -> Checkpoint:
    """Resumable checkpoints every ``every`` iterations (0: none) and at the end, in ``out/checkpoints``. Returns
    the checkpoint handler."""
    saver = _Saver(str(out / "checkpoints"), require_empty=False)
    checkpoint = Checkpoint(to_save, saver, n_saved=2, global_step_transform=lambda e, _: e.state.iteration)
    if every:
        trainer.add_event_handler(Events.ITERATION_COMPLETED(every=every), checkpoint)

    @trainer.on(Events.COMPLETED)
    def _save_final(engine: Engine) -> None:
        if not every or engine.state.iteration % every:  # not saved at this iteration already
            checkpoint(engine)

    return checkpoint


def attach_best_model(trainer: Engine, evaluator: Engine, model: nn.Module, out: Path) -> None:
    """Keep the model with the best validation accuracy in ``out/best`` (after each evaluation)."""
    best = Checkpoint(
        {"model": model},
        _Saver(str(out / "best"), require_empty=False),
        filename_prefix="best",
        n_saved=1,
        score_function=Checkpoint.get_default_score_fn("accuracy"),
        score_name="val_accuracy",
        global_step_transform=global_step_from_engine(trainer),
    )
    evaluator.add_event_handler(Events.COMPLETED, best)
