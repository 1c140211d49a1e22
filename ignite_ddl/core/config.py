"""The run configuration: one dataclass shared by the CLI, the Python API and sweep specs.

Every field is declared once, with :func:`~ignite_ddl.core.options.option`: its type, default, help line, the values
it accepts and its role. The ``train`` command line, the type and range checks of a value from Python or a spec,
the sweep's workload axes and the report's layout axes are all derived from these declarations. The launch
fields (:class:`LaunchOptions`) are the ones the launcher's ``LaunchSettings`` is made of.

Example:
    >>> from ignite_ddl import TrainConfig
    >>> cfg = TrainConfig(nproc_per_node=2, epochs=1)
    >>> cfg.to_dict()["batch_size"]
    128
    >>> TrainConfig(batch_size=0)
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: batch_size must be >= 1, got 0
    >>> WORKLOAD_OPTIONS
    ('model', 'dataset', 'amp', 'optimizer', 'sync_bn', 'workload', 'workload_args')
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, ClassVar

from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.jsonfiles import not_json
from ignite_ddl.core.options import Options, Role, names_with_role, option, option_flag, option_specs
from ignite_ddl.core.strategies import STRATEGY_CHOICES, strategy_help

__all__ = [
    "AMP_MODES",
    "BACKENDS",
    "COMM_HOOKS",
    "COMPILE_MODES",
    "FSDP_MIXED_PRECISION",
    "FSDP_WRAP",
    "MATMUL_PEAK_FILE",
    "DATASETS",
    "LAYOUT_OPTIONS",
    "LR_SCHEDULES",
    "OPTIMIZERS",
    "PROFILERS",
    "START_METHODS",
    "STRATEGIES",
    "TRACKERS",
    "WORKLOAD_OPTIONS",
    "DDPOptions",
    "FSDPOptions",
    "ZeroOptions",
    "StrategyOptions",
    "LaunchOptions",
    "TrainConfig",
    "changed_flags",
    "declared_default",
]

BACKENDS = ("auto", "none", "gloo", "nccl", "xla-tpu")
START_METHODS = ("auto", "fork", "spawn", "forkserver")
DATASETS = ("synthetic", "digits", "mnist", "cifar10")
AMP_MODES = ("none", "bf16", "fp16")
OPTIMIZERS = ("sgd", "adam", "adamw")
LR_SCHEDULES = ("linear", "cosine", "constant")
PROFILERS = ("none", "timer", "basic", "handlers", "torch")
STRATEGIES = STRATEGY_CHOICES  # auto and every strategy described (ignite_ddl.core.strategies): a live view
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd")
TRACKERS = ("none", "mlflow")

DEFAULT_TIMEOUT_S = 300.0
MAX_TIMEOUT_S = 30 * 86400.0  # a month: longer waits are a typo, and overflow the C timeouts below them
MAX_PROCESSES = 4096  # per node; more is a typo (each process is a Python interpreter with torch)
MATMUL_PEAK_FILE = "matmul_peak.json"  # the machine's matmul peak, kept in a run's output folder or a sweep's plan/


@dataclass(frozen=True, kw_only=True)
class LaunchOptions(Options):
    """How a run's processes are started: the fields of the launcher's ``LaunchSettings`` (role ``launch``)."""

    backend: str = option(
        "auto",
        "process group: none | gloo | nccl | xla-tpu | auto (nccl on CUDA, xla on TPU, gloo for CPU ranks)",
        role=Role.LAUNCH,
        choices=BACKENDS,
    )
    nproc_per_node: int | None = option(
        None,
        "processes to spawn on this node (default 1; not with torchrun/SLURM)",
        role=Role.LAUNCH,
        low=1,
        high=MAX_PROCESSES,
    )
    nnodes: int = option(1, "number of nodes taking part", role=Role.LAUNCH, low=1, high=65536)
    node_rank: int | None = option(None, "index of this node (required when nnodes > 1)", role=Role.LAUNCH, low=0)
    master_addr: str | None = option(
        None, "rendezvous address, rank 0's node (default 127.0.0.1 on a single node)", role=Role.LAUNCH
    )
    master_port: int | None = option(
        None, "rendezvous port (default: a free port on a single node)", role=Role.LAUNCH, low=1, high=65535
    )
    start_method: str = option(
        "auto",
        "process start method: auto (fork where available) | fork | spawn | forkserver",
        role=Role.LAUNCH,
        choices=START_METHODS,
    )
    threads: int | None = option(
        None,
        "intra-op CPU threads per process (default: cores / processes on this node)",
        role=Role.LAUNCH,
        low=1,
        high=MAX_PROCESSES,
    )
    timeout: float = option(
        DEFAULT_TIMEOUT_S,
        "seconds ranks wait for each other: rendezvous, missing nodes, every collective",
        role=Role.LAUNCH,
        low=1,
        high=MAX_TIMEOUT_S,
    )
    stall_timeout: float | None = option(
        None,
        "seconds without a completed iteration before the run ends naming the stuck rank "
        "(default: 0.8 x --timeout, so it acts before a collective times out; 0: never)",
        role=Role.LAUNCH,
        low=0,
        high=MAX_TIMEOUT_S,
    )

    def check(self) -> None:
        super().check()
        if self.node_rank is not None and not self.node_rank < self.nnodes:
            raise ConfigError(
                f"node_rank must be in [0, {self.nnodes - 1}] for nnodes={self.nnodes}, got {self.node_rank}"
            )
        if self.master_addr is not None and not self.master_addr.strip():
            raise ConfigError("master_addr must not be empty")
        if self.stall_timeout is not None and self.stall_timeout >= self.timeout:
            raise ConfigError(
                f"stall_timeout ({self.stall_timeout:g} s) must be shorter than timeout ({self.timeout:g} s): "
                "a stuck collective would time out first, without naming the rank that holds it up"
            )

    def stall_seconds(self) -> float:
        """The stall watchdog's limit in seconds (0: no watchdog)."""
        return 0.8 * self.timeout if self.stall_timeout is None else self.stall_timeout


@dataclass(frozen=True, kw_only=True)
class StrategyOptions(Options):
    """The options of one strategy, a group of their own: a strategy declares its group, and a run of another
    strategy refuses those of the group's options that ask for something only that strategy does (``OWN``)."""

    OWN: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def asked(cls, options: Options) -> list[str]:
        """The flags of this group's ``OWN`` options that ``options`` (the group itself, or a run's config) sets away
        from their declared defaults, as a user gives them."""
        return changed_flags(options, cls, cls.OWN)


@dataclass(frozen=True, kw_only=True)
class DDPOptions(StrategyOptions):
    """DDP's own options (``--strategy ddp``), declared once: the gradient buckets, the communication hook and its
    parameters, and two promises DDP may exploit. A run's :attr:`TrainConfig.ddp`; the DDP strategy checks them."""

    bucket_cap_mb: float = option(
        25.0,
        "DDP gradient bucket size in MiB: the all-reduce of a bucket starts when all its gradients are ready "
        "(smaller: earlier start, more calls)",
        role=Role.LAYOUT,
        low=0,
        low_open=True,
        high=1 << 20,
    )
    comm_hook: str = option(
        "none",
        "DDP communication hook (torch's built-in): none (DDP's all-reduce) | fp16 / bf16 (gradients compressed to "
        "half precision on the wire) | powersgd (low-rank compression, --powersgd-rank, after "
        "--powersgd-start-iter iterations of plain all-reduce)",
        role=Role.LAYOUT,
        choices=COMM_HOOKS,
    )
    powersgd_rank: int = option(
        1,
        "PowerSGD's matrix approximation rank (larger: more accurate, more bytes)",
        role=Role.LAYOUT,
        low=1,
        high=4096,
    )
    powersgd_start_iter: int = option(
        10,
        "iterations of plain all-reduce before PowerSGD compresses (error feedback needs 2 or more)",
        role=Role.LAYOUT,
        low=2,
        high=10**9,
    )
    static_graph: bool = option(
        False,
        "DDP static_graph: the set of parameters used and the graph are the same every iteration (DDP then skips "
        "some bookkeeping)",
        role=Role.LAYOUT,
    )
    gradient_as_bucket_view: bool = option(
        False,
        "DDP gradient_as_bucket_view: gradients are views into the all-reduce buckets (saves a copy and the memory "
        "of one set of gradients)",
        role=Role.LAYOUT,
    )
    gradient_sync: bool = option(
        True,
        "false: DDP never all-reduces the gradients (every backward inside no_sync), so each rank trains its own "
        "replica on its shard: a measurement of what the ranks' own work costs at this layout without "
        "communication (the plan's layout probe), not training",
        role=Role.LAYOUT,
    )

    # The options that ask DDP for something no other strategy does: refused with --strategy fsdp (one process
    # accepts and ignores them, so that a sweep may grid them against process counts). The rest (bucket size,
    # PowerSGD's parameters) only tune DDP and are ignored elsewhere.
    OWN: ClassVar[tuple[str, ...]] = ("comm_hook", "static_graph", "gradient_as_bucket_view", "gradient_sync")


FSDP_MIXED_PRECISION = ("auto", "none", "bf16", "fp16")
FSDP_WRAP = ("children", "model")


@dataclass(frozen=True, kw_only=True)
class FSDPOptions(StrategyOptions):
    """FSDP's own options (``--strategy fsdp``, FSDP2's ``fully_shard``), declared once: whether a unit frees its
    gathered parameters after forward, the mixed-precision policy, and which modules are units. A run's
    :attr:`TrainConfig.fsdp`; the FSDP strategy checks them."""

    reshard_after_forward: bool = option(
        True,
        "FSDP: free each unit's gathered parameters after its forward and gather them again in backward (off: keep "
        "them until backward, one all-gather less per step for the memory of the whole model's parameters)",
        role=Role.LAYOUT,
    )
    fsdp_mixed_precision: str = option(
        "auto",
        "FSDP's MixedPrecisionPolicy: auto (from --amp: bf16 or fp16 parameters, gradients reduced in float32) | "
        "none (full precision) | bf16 | fp16 (parameters in that type, gradients reduced in float32)",
        role=Role.LAYOUT,
        choices=FSDP_MIXED_PRECISION,
    )
    fsdp_wrap: str = option(
        "children",
        "FSDP's units: children (each direct child holding parameters, or a --workload's blocks, then the whole "
        "model: one unit's parameters gathered at a time) | model (the whole model as one unit)",
        role=Role.LAYOUT,
        choices=FSDP_WRAP,
    )

    OWN: ClassVar[tuple[str, ...]] = ("reshard_after_forward", "fsdp_mixed_precision", "fsdp_wrap")


@dataclass(frozen=True, kw_only=True)
class ZeroOptions(StrategyOptions):
    """ZeRO-1's own options (``--strategy zero1``, torch's ``ZeroRedundancyOptimizer``), declared once. It is DDP
    too: DDP's options apply. (``overlap_with_ddp`` is not offered: it needs a functional optimizer and a DDP hook
    of its own, and its first steps do not update the model.)"""

    zero_bucket_view: bool = option(
        False,
        "ZeRO-1: pack each rank's parameters into one flat buffer per device, so that the broadcast after each step "
        "is one large collective per rank instead of one per parameter (ZeroRedundancyOptimizer's "
        "parameters_as_bucket_view)",
        role=Role.LAYOUT,
    )

    OWN: ClassVar[tuple[str, ...]] = ("zero_bucket_view",)


def changed_flags(options: Options, group: type[Options], names: tuple[str, ...]) -> list[str]:
    """The flags of ``names`` whose value in ``options`` is not ``group``'s declared default (``--static-graph``,
    ``--no-reshard-after-forward``, ``--comm-hook fp16``)."""
    specs = option_specs(group)
    flags = []
    for name in names:
        value = getattr(options, name)
        if value == specs[name].default:
            continue
        if isinstance(value, bool):
            flags.append(option_flag(name) if value else "--no-" + option_flag(name)[2:])
        else:
            flags.append(f"{option_flag(name)} {value}")
    return flags


# Built-in workloads by short name: what --workload gpt stands for.
BUILT_IN = {"gpt": "ignite_ddl.trainer.gpt:make"}
# Built-in families of workloads by prefix: --workload hf:gpt2 calls the family's function with the name after the
# prefix as its first argument (a module of one's own named like a prefix is reached as package.module:function).
FAMILIES = {"hf": "ignite_ddl.trainer.hub:make"}


def family_member(path: str) -> str | None:
    """The name after a family's prefix (``hf:gpt2``: ``gpt2``), None for any other workload path."""
    prefix, sep, name = path.strip().partition(":")
    return name.strip() if sep and prefix in FAMILIES else None


def resolve(path: str) -> tuple[str, str]:
    """``(module, function)`` of a workload path: ``package.module:function``, a built-in name or a family's
    ``prefix:name``. Checked with the other options, so a malformed path is refused before anything is imported or
    started."""
    member, prefix = family_member(path), path.strip().partition(":")[0]
    if member == "":
        raise ConfigError(f"workload '{path}' names no model: {prefix}:NAME (e.g. hf:gpt2)")
    text = FAMILIES[prefix] if member is not None else BUILT_IN.get(path.strip(), path.strip())
    module, sep, function = text.partition(":")
    if not sep or not all(part.isidentifier() for part in module.split(".")) or not function.isidentifier():
        raise ConfigError(
            f"workload '{path}' is not module:function (e.g. my_project.bench:make) nor a built-in workload "
            f"({', '.join([*BUILT_IN, *(f'{prefix}:NAME' for prefix in FAMILIES)])})"
        )
    return module, function


@dataclass(frozen=True, kw_only=True)
class TrainConfig(LaunchOptions, DDPOptions, FSDPOptions, ZeroOptions):
    """Everything one training run needs. ``batch_size`` is the *global* batch, split across all ranks. The
    strategies' own options are declared in their groups (:class:`DDPOptions`, :class:`FSDPOptions`) and given flat
    (``--bucket-cap-mb``, a spec's ``bucket_cap_mb``), as before the groups existed."""

    # -- the workload: what fixes the work done per sample
    model: str = option(
        "cnn",
        "toy | mlp | wide_mlp (14.7 M parameters: where memory goes to weights) | cnn | resnet18 | any torchvision "
        "classification model name | timm:NAME (any timm model, e.g. timm:resnet10t; random weights)",
        role=Role.WORKLOAD,
    )
    dataset: str = option("synthetic", "the data", role=Role.WORKLOAD, choices=DATASETS)
    amp: str = option(
        "none",
        "mixed precision: none | bf16 (CPU or CUDA) | fp16 (CUDA, with GradScaler)",
        role=Role.WORKLOAD,
        choices=AMP_MODES,
    )
    optimizer: str = option(
        "sgd",
        "the optimizer: sgd (--momentum, --nesterov) | adam | adamw (decoupled --weight-decay on parameters of 2 or "
        "more dimensions only, matrices and embeddings; biases and norm weights are not decayed, as nanoGPT does)",
        role=Role.WORKLOAD,
        choices=OPTIMIZERS,
    )
    sync_bn: bool = option(False, "convert BatchNorm layers to SyncBatchNorm", role=Role.WORKLOAD)
    workload: str | None = option(
        None,
        "your own training instead of --model / --dataset: 'package.module:function' returning a Workload "
        "(ignite_ddl.trainer.workload), or a built-in one: gpt (a small GPT on a synthetic token stream) | hf:TYPE (a "
        "Hugging Face causal LM of that model type, e.g. hf:gpt2, built from its config: random weights, no download)",
        role=Role.WORKLOAD,
        metavar="MODULE:FUNCTION",
    )
    workload_args: dict[str, Any] = option(
        factory=dict,
        help="keyword arguments of the workload's function (--workload-args KEY=VALUE; in a spec "
        "workload_args.KEY: a sweep axis)",
        role=Role.WORKLOAD,
    )
    # Where the workload's module is looked for first (then the working folder, then the installed packages): a
    # sweep sets it to its spec's folder. It only finds the code, so it is no part of the workload's identity.
    workload_dir: str | None = option(
        None,
        "folder searched first for --workload's module (default: the working folder only)",
        role=Role.OUTPUT,
        path=True,
    )
    # -- data
    data_dir: str = option(
        "data", "where mnist / cifar10 files live (or are downloaded to)", role=Role.OUTPUT, path=True
    )
    download: bool = option(False, "download the dataset if missing (rank 0 of each node first)", role=Role.OUTPUT)
    train_size: int | None = option(
        None, "use only the first N training samples (synthetic default: 4096)", role=Role.TRAINING, low=1
    )
    val_size: int | None = option(
        None, "use only the first N validation samples (synthetic default: 1024)", role=Role.TRAINING, low=1
    )
    num_workers: int = option(
        0, "DataLoader worker processes per node (split across local ranks)", role=Role.TRAINING, low=0, high=1024
    )
    batch_size: int = option(
        128, "GLOBAL batch size; each rank gets batch_size // world_size", role=Role.TRAINING, low=1
    )
    shuffle: bool = option(True, "reshuffle training data every epoch", role=Role.TRAINING)
    pin_memory: bool | None = option(
        None,
        "DataLoader batches in page-locked host memory, for faster copies to a GPU (default: on with CUDA, as "
        "auto_dataloader does; nothing to gain on CPU)",
        role=Role.TRAINING,
    )
    accumulate: int = option(
        1,
        "gradient accumulation: each optimizer step runs N micro-batches (batch_size stays the global batch per "
        "optimizer step, split into world size x N micro-batches)",
        role=Role.TRAINING,
        low=1,
        high=4096,
    )
    # -- optimisation
    lr: float = option(0.05, "peak learning rate", role=Role.TRAINING, low=0)
    momentum: float = option(0.9, "SGD momentum", role=Role.TRAINING, low=0)
    nesterov: bool = option(False, "Nesterov momentum (SGD)", role=Role.TRAINING)
    weight_decay: float = option(0.0, "weight decay", role=Role.TRAINING, low=0)
    warmup_epochs: float = option(0.0, "epochs of linear LR warm-up from 0 to --lr", role=Role.TRAINING, low=0)
    lr_schedule: str | None = option(
        None,
        "the LR after the warm-up, per iteration: linear or cosine (half a cosine) down to --min-lr-ratio x lr after "
        "the last iteration, or constant (default: linear after a warm-up, else constant)",
        role=Role.TRAINING,
        choices=LR_SCHEDULES,
    )
    min_lr_ratio: float = option(0.0, "the decay's floor, a fraction of --lr", role=Role.TRAINING, low=0, high=1)
    clip_grad_norm: float | None = option(
        None,
        "clip the gradients' global norm to this once per optimizer step, after every micro-batch (and after "
        "unscaling under --amp fp16); 0: off (default: the workload's own value, else off)",
        role=Role.TRAINING,
        low=0,
    )
    # -- how the model is held across ranks
    strategy: str = option(
        "auto",
        strategy_help,  # each strategy's own summary, as described (ignite_ddl.core.strategies)
        role=Role.LAYOUT,
        choices=STRATEGIES,
    )
    # -- how each step is executed
    compile: bool = option(
        False,
        "torch.compile the model (Inductor; on CPU it needs a C++ compiler): compilation is timed apart "
        "(compile_s) and left out of steady-state throughput",
        role=Role.EXECUTION,
    )
    activation_checkpointing: bool = option(
        False,
        "recompute each block's activations in backward instead of keeping them (torch.utils.checkpoint): less "
        "memory, more compute; for workloads that mark their blocks (gpt does)",
        role=Role.EXECUTION,
    )
    compile_mode: str = option(
        "default",
        "torch.compile mode: default | reduce-overhead (CUDA graphs on GPU) | max-autotune (longer compilation, "
        "tuned kernels)",
        role=Role.EXECUTION,
        choices=COMPILE_MODES,
    )
    channels_last: bool = option(
        False,
        "hold the model's 4-D weights and each batch of images in channels_last memory format (NHWC): on GPUs with "
        "tensor cores convolutions under AMP run faster in it; on CPU it mostly changes nothing",
        role=Role.EXECUTION,
    )
    cuda_memory_fraction: float | None = option(
        None,
        "cap each rank's CUDA allocator at this fraction of its GPU's memory "
        "(torch.cuda.set_per_process_memory_fraction): what fits a smaller GPU, a real out-of-memory above it",
        role=Role.EXECUTION,
        low=0,
        low_open=True,
        high=1,
    )
    # -- run
    epochs: int = option(3, "training epochs", role=Role.TRAINING, low=1, high=1_000_000)
    max_iters: int | None = option(
        None, "stop after this many iterations in total (an iteration budget)", role=Role.TRAINING, low=1
    )
    seed: int = option(
        543, "random seed (model init, synthetic data, shuffling)", role=Role.TRAINING, low=0, high=2**32 - 1
    )
    output_dir: str = option(
        "runs/train",
        "where config.json, summary.json, logs, checkpoints and TensorBoard go",
        role=Role.OUTPUT,
        path=True,
    )
    checkpoints: bool = option(
        True, "save resumable checkpoints (at the end, and every --checkpoint-every iterations)", role=Role.OUTPUT
    )
    checkpoint_every: int = option(
        0, "save a resumable checkpoint every N iterations (0: only at the end)", role=Role.OUTPUT, low=0
    )
    best_model: bool = option(
        True, "keep the model weights with the best validation accuracy in best/", role=Role.OUTPUT
    )
    eval_every: int = option(
        1,
        "evaluate every N epochs (0: only after the last epoch, which is always evaluated)",
        role=Role.TRAINING,
        low=0,
    )
    early_stopping: int = option(
        0, "stop when validation accuracy has not improved for N evaluations (0: never)", role=Role.TRAINING, low=0
    )
    resume: str | None = option(None, "checkpoint file to resume from", role=Role.OUTPUT, path=True)
    overwrite: bool = option(
        False, "replace a previous run in --output-dir (otherwise such a folder is refused)", role=Role.OUTPUT
    )
    log_every: int = option(
        10, "log training loss to TensorBoard (and the tracker) every N iterations", role=Role.OUTPUT, low=1
    )
    tracker: str = option(
        "none", "also log params and metrics to an experiment tracker", role=Role.OUTPUT, choices=TRACKERS
    )
    tracking_uri: str | None = option(
        None,
        "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<output_dir>/mlflow.db)",
        role=Role.OUTPUT,
        path=True,
    )
    progress: bool = option(
        True, "show a progress bar on rank 0 (in a terminal or notebook; never in piped output)", role=Role.OUTPUT
    )
    # -- measurement
    record_steps: bool = option(
        True, "record per-step timings on every rank (steps_rank<r>.csv, summary 'steps')", role=Role.MEASUREMENT
    )
    warmup_iters: int = option(
        5, "iterations left out of step statistics (recorded, flagged as warm-up)", role=Role.MEASUREMENT, low=0
    )
    comm_timing: bool = option(
        True,
        "time each gradient bucket's all-reduce on every rank (a DDP communication hook doing DDP's own "
        "all-reduce): communication, exposed communication, overlap",
        role=Role.MEASUREMENT,
    )
    measure_memory: bool = option(
        True,
        "record memory on every rank: peak resident memory of the rank and of its DataLoader workers (CUDA: the "
        "allocator's peaks), the bytes held for parameters, gradients and optimizer state, a reading per step",
        role=Role.MEASUREMENT,
    )
    measure_flops: bool = option(
        True,
        "count the model's FLOPs per sample and measure this machine's matmul peak (square matmuls on all its "
        "cores before training, repeated until two estimates agree, once per machine): achieved FLOP/s and "
        "utilisation, each rank against its share of the machine",
        role=Role.MEASUREMENT,
    )
    matmul_peak_cache: str | None = option(
        None,
        "JSON file keeping this machine's matmul peak: read where it holds this machine's, else measured and added "
        f"(default: {MATMUL_PEAK_FILE} in --output-dir; a sweep gives its runs its own plan/{MATMUL_PEAK_FILE}, so "
        "all its configurations share one peak)",
        role=Role.OUTPUT,
        path=True,
    )
    profiler: str = option(
        "none",
        "also attach a profiler: timer | basic | handlers (Ignite's) | torch (torch.profiler, a Chrome trace per "
        "rank in profile/)",
        role=Role.MEASUREMENT,
        choices=PROFILERS,
    )

    def behaviour_changes_at(self, world_size: int, iterations: int | None = None) -> int:
        """The iteration up to which the run behaves otherwise than in its steady phase because of an option
        (PowerSGD's plain all-reduces up to ``powersgd_start_iter``); 0 when no option does, or when the run of
        ``iterations`` (where known) ends before the change."""
        start = self.powersgd_start_iter if self.comm_hook == "powersgd" and world_size > 1 else 0
        return start if iterations is None or start < iterations else 0

    def measured_warmup(self, world_size: int, iterations: int | None = None) -> int:
        """Iterations left out before the measured window: ``warmup_iters``, counted from the iteration at which an
        option changes the run's behaviour (:meth:`behaviour_changes_at`), so that bytes per step, speed-ups and
        compilation's payback come from the steady phase, never a blend of both phases."""
        return self.behaviour_changes_at(world_size, iterations) + self.warmup_iters

    def check(self) -> None:
        super().check()
        if self.early_stopping and not self.eval_every:
            raise ConfigError("early_stopping needs evaluations to compare: set eval_every to 1 or more")
        if self.workload is not None and not self.workload.strip():
            raise ConfigError("workload must not be empty (package.module:function, or gpt)")
        if self.workload is not None:
            resolve(self.workload)
        if self.workload_args and self.workload is None:
            raise ConfigError("workload_args are the arguments of a --workload's function: name the workload")
        keys: list[Any] = list(self.workload_args)  # from YAML: keys of any type
        wrong = [repr(k) for k in keys if not (isinstance(k, str) and k.isidentifier())]
        if wrong:
            raise ConfigError(f"workload_args keys are keyword-argument names, got {', '.join(wrong)[:80]}")
        for key, value in self.workload_args.items():  # a run records its arguments (config.json, summary.json)
            problem = not_json(value)
            if problem is not None:
                raise ConfigError(f"workload argument {key}: {problem}; give it as a quoted string")
        if self.workload is not None and (self.model != "cnn" or self.dataset != "synthetic"):
            raise ConfigError("a --workload brings its own model and data: leave --model and --dataset unset")

    def peak_cache(self) -> str:
        """Where this run's matmul peak is kept: ``matmul_peak_cache``, else ``matmul_peak.json`` in its output
        folder."""
        return self.matmul_peak_cache or os.path.join(self.output_dir, MATMUL_PEAK_FILE)

    @property
    def ddp(self) -> DDPOptions:
        """This run's DDP options as their group."""
        return DDPOptions(**{name: getattr(self, name) for name in option_specs(DDPOptions)})

    @property
    def fsdp(self) -> FSDPOptions:
        """This run's FSDP options as their group."""
        return FSDPOptions(**{name: getattr(self, name) for name in option_specs(FSDPOptions)})

    @property
    def zero(self) -> ZeroOptions:
        """This run's ZeRO-1 options as their group."""
        return ZeroOptions(**{name: getattr(self, name) for name in option_specs(ZeroOptions)})

    def to_argv(self) -> list[str]:
        """The ``ignite-ddl train`` options that reproduce this config (fields left at None are omitted)."""
        argv = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "workload_args":  # values as JSON, which the command line reads back as YAML
                argv += [f"--workload-args={key}={json.dumps(v)}" for key, v in value.items()]
            elif isinstance(value, bool):
                argv.append(option_flag(f.name) if value else "--no-" + option_flag(f.name)[2:])
            elif value is not None:
                argv.append(f"{option_flag(f.name)}={value}")  # '=': a value may start with '-'
        return argv


# What fixes the work done per sample: a sweep ranks configurations only within one workload.
WORKLOAD_OPTIONS = names_with_role(TrainConfig, Role.WORKLOAD)
# Options that only say how the ranks are started and laid out, or where files go: the speed-up baseline of a
# configuration is the configuration equal to it but for these, with one process.
LAYOUT_OPTIONS = names_with_role(TrainConfig, Role.LAUNCH, Role.LAYOUT, Role.OUTPUT)


def declared_default(name: str) -> Any:
    """The declared default of run option ``name``: what a run record without the option (written before it existed,
    or by hand) ran with. The report reads it here instead of typing the value again."""
    return option_specs(TrainConfig)[name].default
