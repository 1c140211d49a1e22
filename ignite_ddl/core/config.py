"""The run configuration: one dataclass shared by the CLI, the Python API and sweep specs.

Every field carries its help text, so the command line is generated from this class and cannot drift from it;
sweep specs name the same fields.

Example:
    >>> from ignite_ddl import TrainConfig
    >>> cfg = TrainConfig(nproc_per_node=2, epochs=1)
    >>> cfg.to_dict()["batch_size"]
    128
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "AMP_MODES",
    "BACKENDS",
    "OPTIMIZERS",
    "PATH_OPTIONS",
    "PROFILERS",
    "START_METHODS",
    "TRACKERS",
    "ConfigError",
    "TrainConfig",
    "field_types",
    "option_flag",
    "option_kind",
]

BACKENDS = ("auto", "none", "gloo", "nccl", "xla-tpu")
START_METHODS = ("auto", "fork", "spawn", "forkserver")
AMP_MODES = ("none", "bf16", "fp16")
OPTIMIZERS = ("sgd", "adam")
PROFILERS = ("none", "timer", "basic", "handlers", "torch")
TRACKERS = ("none", "mlflow")
PATH_OPTIONS = ("output_dir", "data_dir", "resume", "tracking_uri")  # empty: silently the working folder


class ConfigError(ValueError):
    """A setup the suite refuses before starting any process; its message is one line meant for the user."""


def _opt(default: Any, help: str, **extra: Any) -> Any:
    return field(default=default, metadata={"help": help, **extra})


@dataclass
class TrainConfig:
    """Everything one training run needs. ``batch_size`` is the *global* batch, split across all ranks."""

    # -- launch
    backend: str = _opt("auto", "none | gloo | nccl | xla-tpu | auto (nccl on CUDA, xla on TPU, gloo for CPU ranks)")
    nproc_per_node: int | None = _opt(None, "processes to spawn on this node (default 1; not with torchrun/SLURM)")
    nnodes: int = _opt(1, "number of nodes taking part")
    node_rank: int | None = _opt(None, "index of this node (required when nnodes > 1)")
    master_addr: str | None = _opt(None, "rendezvous address, rank 0's node (default 127.0.0.1 on a single node)")
    master_port: int | None = _opt(None, "rendezvous port (default: a free port on a single node)")
    start_method: str = _opt("auto", "process start method: auto (fork where available) | fork | spawn | forkserver")
    threads: int | None = _opt(None, "intra-op CPU threads per process (default: cores / processes on this node)")
    timeout: float = _opt(300.0, "seconds ranks wait for each other: rendezvous, missing nodes, every collective")
    stall_timeout: float | None = _opt(
        None,
        "seconds without a completed iteration before the run ends naming the stuck rank "
        "(default: 0.8 x --timeout, so it acts before a collective times out; 0: never)",
    )
    # -- data
    dataset: str = _opt("synthetic", "synthetic | digits | mnist | cifar10")
    data_dir: str = _opt("data", "where mnist / cifar10 files live (or are downloaded to)")
    download: bool = _opt(False, "download the dataset if missing (rank 0 of each node first)")
    train_size: int | None = _opt(None, "use only the first N training samples (synthetic default: 4096)")
    val_size: int | None = _opt(None, "use only the first N validation samples (synthetic default: 1024)")
    num_workers: int = _opt(0, "DataLoader worker processes per node (split across local ranks)")
    batch_size: int = _opt(128, "GLOBAL batch size; each rank gets batch_size // world_size")
    shuffle: bool = _opt(True, "reshuffle training data every epoch")
    # -- model and optimisation
    model: str = _opt("cnn", "toy | mlp | cnn | resnet18 | any torchvision classification model name")
    optimizer: str = _opt("sgd", "sgd | adam")
    lr: float = _opt(0.05, "peak learning rate")
    momentum: float = _opt(0.9, "SGD momentum")
    nesterov: bool = _opt(False, "Nesterov momentum (SGD)")
    weight_decay: float = _opt(0.0, "weight decay")
    warmup_epochs: float = _opt(0.0, "linear LR warm-up epochs, then linear decay to 0 (0: constant LR)")
    sync_bn: bool = _opt(False, "convert BatchNorm layers to SyncBatchNorm")
    bucket_cap_mb: float = _opt(
        25.0,
        "DDP gradient bucket size in MiB: the all-reduce of a bucket starts when all "
        "its gradients are ready (smaller: earlier start, more calls)",
    )
    amp: str = _opt("none", "mixed precision: none | bf16 (CPU or CUDA) | fp16 (CUDA, with GradScaler)")
    # -- run
    epochs: int = _opt(3, "training epochs")
    max_iters: int | None = _opt(None, "stop after this many iterations in total (an iteration budget)")
    seed: int = _opt(543, "random seed (model init, synthetic data, shuffling)")
    output_dir: str = _opt("runs/train", "where config.json, summary.json, logs, checkpoints and TensorBoard go")
    checkpoints: bool = _opt(True, "save resumable checkpoints (at the end, and every --checkpoint-every iterations)")
    checkpoint_every: int = _opt(0, "save a resumable checkpoint every N iterations (0: only at the end)")
    best_model: bool = _opt(True, "keep the model weights with the best validation accuracy in best/")
    eval_every: int = _opt(1, "evaluate every N epochs (0: only after the last epoch, which is always evaluated)")
    early_stopping: int = _opt(0, "stop when validation accuracy has not improved for N evaluations (0: never)")
    resume: str | None = _opt(None, "checkpoint file to resume from")
    overwrite: bool = _opt(False, "replace a previous run in --output-dir (otherwise such a folder is refused)")
    log_every: int = _opt(10, "log training loss to TensorBoard (and the tracker) every N iterations")
    tracker: str = _opt("none", "also log params and metrics to an experiment tracker: none | mlflow")
    tracking_uri: str | None = _opt(
        None, "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<output_dir>/mlflow.db)"
    )
    progress: bool = _opt(True, "show a progress bar on rank 0 (in a terminal or notebook; never in piped output)")
    # -- measurement
    record_steps: bool = _opt(True, "record per-step timings on every rank (steps_rank<r>.csv, summary 'steps')")
    warmup_iters: int = _opt(5, "iterations left out of step statistics (recorded, flagged as warm-up)")
    comm_timing: bool = _opt(
        True,
        "time each gradient bucket's all-reduce on every rank (a DDP communication "
        "hook doing DDP's own all-reduce): communication, exposed communication, overlap",
    )
    measure_flops: bool = _opt(
        True,
        "count the model's FLOPs per sample and measure this machine's matmul rate "
        "(a short GEMM benchmark before training): achieved FLOP/s and utilisation",
    )
    profiler: str = _opt(
        "none",
        "also attach a profiler: none | timer | basic | handlers (Ignite's) | torch (torch.profiler, a "
        "Chrome trace per rank in profile/)",
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_argv(self) -> list[str]:
        """The ``ignite-ddl train`` options that reproduce this config (fields left at None are omitted)."""
        argv = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                argv.append(option_flag(f.name) if value else "--no-" + option_flag(f.name)[2:])
            elif value is not None:
                argv += [option_flag(f.name), str(value)]
        return argv

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Build a config from plain data, refusing unknown keys and wrongly typed values."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown option(s): {', '.join(unknown)}")
        for name, value in values.items():
            _check_type(name, value)
        return cls(**values)

    def launch_settings(self) -> Any:
        """The distribution settings of this run (:class:`~ignite_ddl.launcher.spawn.LaunchSettings`); rank logs go to
        ``<output_dir>/logs``."""
        from ignite_ddl.launcher.spawn import LaunchSettings

        return LaunchSettings(
            backend=self.backend,
            nproc_per_node=self.nproc_per_node,
            nnodes=self.nnodes,
            node_rank=self.node_rank,
            master_addr=self.master_addr,
            master_port=self.master_port,
            start_method=self.start_method,
            threads=self.threads,
            timeout=self.timeout,
            log_dir=str(Path(self.output_dir) / "logs"),
        )

    def check(self) -> None:
        """Refuse values that are wrong whatever the machine (ranges and choices)."""
        self.launch_settings().check()
        _choice("amp", self.amp, AMP_MODES)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("profiler", self.profiler, PROFILERS)
        _choice("tracker", self.tracker, TRACKERS)
        for name in ("batch_size", "epochs", "log_every"):
            _at_least(name, getattr(self, name), 1)
        for name in ("max_iters", "train_size", "val_size"):
            if getattr(self, name) is not None:
                _at_least(name, getattr(self, name), 1)
        for name in ("num_workers", "checkpoint_every", "warmup_iters", "eval_every", "early_stopping"):
            _at_least(name, getattr(self, name), 0)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{f.name} must be a finite number, got {value}")
            if isinstance(value, str) and not value.strip() and f.name in PATH_OPTIONS:
                raise ConfigError(f"{f.name} must not be empty")
        for name in ("lr", "momentum", "weight_decay", "warmup_epochs"):
            _at_least(name, getattr(self, name), 0)
        if self.bucket_cap_mb <= 0:
            raise ConfigError(f"bucket_cap_mb must be > 0, got {self.bucket_cap_mb}")
        if self.early_stopping and not self.eval_every:
            raise ConfigError("early_stopping needs evaluations to compare: set eval_every to 1 or more")
        if self.stall_timeout is not None:
            _at_least("stall_timeout", self.stall_timeout, 0)
            if self.stall_timeout >= self.timeout:
                raise ConfigError(
                    f"stall_timeout ({self.stall_timeout:g} s) must be shorter than timeout ({self.timeout:g} s): "
                    "a stuck collective would time out first, without naming the rank that holds it up"
                )

    def stall_seconds(self) -> float:
        """The stall watchdog's limit in seconds (0: no watchdog)."""
        return 0.8 * self.timeout if self.stall_timeout is None else self.stall_timeout


def option_flag(name: str) -> str:
    """The command-line flag of config field ``name``: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"unknown {name} '{value}' (choose from: {', '.join(choices)})")


def _at_least(name: str, value: float, low: float) -> None:
    if value < low:
        raise ConfigError(f"{name} must be >= {low}, got {value}")


def option_kind(hint: Any) -> tuple[type, bool, bool]:
    """``(kind, optional, many)`` of an option's annotation, for ``TrainConfig`` and the labs' options alike:
    ``int | None`` -> (int, True, False), ``tuple[float, ...]`` -> (float, False, True).

    >>> option_kind(int | None), option_kind(tuple[float, ...])
    ((<class 'int'>, True, False), (<class 'float'>, False, True))
    """
    args = typing.get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        (hint,) = [a for a in args if a is not type(None)]
        args = typing.get_args(hint)
    many = typing.get_origin(hint) is tuple
    if many:
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"an option's tuple is tuple[X, ...], not {hint}")
        hint = args[0]
    if hint not in (int, float, str, bool):
        raise TypeError(f"an option is an int, float, str or bool (or a tuple of them, or None): not {hint}")
    return hint, optional, many


@functools.cache
def field_types() -> dict[str, tuple[type, bool]]:
    """Each ``TrainConfig`` field's base type and whether it may be None (:func:`option_kind` of its annotation,
    read once). The CLI and :meth:`TrainConfig.from_dict` both use it.

    >>> field_types()["nproc_per_node"], field_types()["lr"]
    ((<class 'int'>, True), (<class 'float'>, False))
    """
    hints = typing.get_type_hints(TrainConfig)
    return {f.name: option_kind(hints[f.name])[:2] for f in dataclasses.fields(TrainConfig)}


def _check_type(name: str, value: Any) -> None:
    base, optional = field_types()[name]
    if value is None and optional:
        return
    allowed = (int, float) if base is float else (base,)  # an int is a fine float
    if isinstance(value, bool) and base is not bool or not isinstance(value, allowed):
        raise ConfigError(f"option {name} expects {base.__name__}{' or null' if optional else ''}, got {value!r}")
