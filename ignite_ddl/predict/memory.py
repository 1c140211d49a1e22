"""Predicted memory of one rank, before any process starts: the training step traced on fake tensors.

**How.** The model is built, placed as the run's strategy places it, and trained for two optimizer steps (four where
its heap is replayed) with the trainer's own step (:func:`~ignite_ddl.trainer.engines.optimizer_step`: its
accumulation, autocast, ``no_sync`` and gradient clipping, with the run's optimizer and its parameter groups) on the
rank's batch, all under ``FakeTensorMode``: every tensor has its shape, dtype and device but no storage, so a model
far too large for the machine is traced, not built. PyTorch's own memory trackers follow the trace
(``torch.distributed._tools``): ``MemTracker`` for one process, DDP and ZeRO-1, ``FSDPMemTracker`` for FSDP2, which
knows FSDP's sharded and gathered parameters, its all-gather and reduce-scatter buffers and its mixed-precision
copies. They were chosen over counting shapes here because they see what the step really allocates (temporaries of
the backward, Adam's ``foreach`` buffers, the gradients accumulation keeps) and attribute the peak to its parts.
FSDP is traced on a fake process group of the run's world size (``torch.testing._internal.distributed.fake_pg``, as
PyTorch's own FSDP memory tests and torchtitan's estimator do), initialised only for the trace and destroyed after
it; DDP is traced without its wrapper (its C++ reducer allocates outside the trace) and its gradient buckets, one
flat copy of the gradients that DDP keeps for the whole run, are added (with ``gradient_as_bucket_view`` the
gradients *are* the buckets and are not counted twice).

**Parts** (bytes, the largest rank's, at the traced peak): ``params`` (parameters and buffers, FSDP's shards and the
unit it has gathered), ``grads`` (FSDP's reduce-scatter input included), ``optimizer``, ``activations`` (activations
of one micro-batch, the backward's temporaries, the input batch), ``heap`` (what glibc keeps beyond the tensors at
the peak: below), ``buckets`` (DDP, ZeRO-1), ``checkpoint`` (rank 0
of a strategy that shards gathers the full state of what it shards to save it: where that moment needs more than the
training step, the parts are that moment's; a part the strategy shards and the trace did not, ZeRO-1's optimizer
state, is scaled to the rank's share), ``data`` (the datasets every rank holds in memory), ``libraries`` (what the
modules of a model from beyond the suite hold: a workload's own and what it imports, transformers for ``hf:gpt2``,
timm for ``timm:NAME``; measured in a fresh interpreter by :func:`library_bytes`) and ``runtime``: what a rank of
this launch holds before any of this (Python, PyTorch, Ignite, the process group, the loaders), measured by a run
of a tiny model. The caller gives both (:mod:`ignite_ddl.sweep.forecast` measures each once per machine and caches it).

**The heap** (``heap``, a CPU rank under glibc whose parameters are not sharded): the resident set is the tensors
*and what the C allocator keeps*. glibc raises its mmap threshold (up to 32 MiB) as large blocks are freed and from
then on serves them from its heap, whose freed blocks stay resident; a step that frees its activations as its
backward goes leaves holes that later blocks do not fit. The trace records its allocations in order, and a clean
process replays them through this machine's allocator (:mod:`ignite_ddl.predict.heap`): what its resident peak rose
beyond the largest sum of live blocks is the part. Where no replay is made (a step too large to replay, no
``/proc``, a replay that failed) a rank whose activations are a tenth of its peak or more says its heap is not
predicted. An FSDP rank gathers, frees and re-gathers its units and gradients on every micro-batch, and the holes
this leaves in the main thread's heap keep its resident set well above its tensors through every steady step: not
replayed, it says so in ``unpredicted``, and docs/plan.md states how far its resident peak was from the
prediction. A fixed threshold (``MALLOC_MMAP_THRESHOLD_``) brings the resident peak to the tensors but costs every
step its page faults, so the suite leaves glibc's default.

**What is traced**: the built-in models (torchvision's and timm's by name too), built on the meta device, and every
workload — the built-in GPT and the user's — built by calling its function with the meta device as the default one
(:mod:`ignite_ddl.trainer.abstract`): its model and the data it makes without naming a device have shapes but no
storage, so nothing of the model is allocated; its datasets count the bytes they hold; the micro-batch is shaped as
their first sample; the step is the workload's own (``loss`` or ``training_step``), its blocks its FSDP units and
checkpointed blocks. A function that reads a value of a tensor it made without naming a device cannot build so: its line
says ``cannot predict`` and why.

**What is not predicted** is said in ``unpredicted`` instead of being guessed: ``--compile`` (Inductor's compiler and
its generated code live in the rank's memory, and the compiled graph's buffer reuse is not the eager trace's), a DDP
communication hook's own buffers (``--comm-hook``: measured 80 MiB a rank for bf16 and 245 MiB for PowerSGD on
wide_mlp's 59 MB of gradients, far beyond the copies they make, so not modelled) and a
CUDA rank's context and caching allocator's reserve (measured on one H200, docs/gpu: not modelled yet).

Example:
    >>> from ignite_ddl.core.config import TrainConfig, resolve
    >>> p = predict(TrainConfig(model="toy", batch_size=8), runtime_bytes=0)
    >>> p.parts["params"] == (3 * 32 * 32 * 10 + 10 + 10 * 10 + 10) * 4 and p.fits(1 << 30)
    True
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing as mp
import platform
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from ignite_ddl.core.apart import ChildFailed, call_apart
from ignite_ddl.core.config import BUILT_IN, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.strategies import StrategyInfo, resolve_strategy
from ignite_ddl.core.sweep_records import MemoryPrediction
from ignite_ddl.core.text import format_bytes
from ignite_ddl.launcher.backends import device_of
from ignite_ddl.predict import heap
from ignite_ddl.trainer.abstract import fake_batch, held_bytes, on_meta, one_sample, to_fake
from ignite_ddl.trainer.data import dataset_info
from ignite_ddl.trainer.engines import build_optimizer, criterion_step, optimizer_step
from ignite_ddl.trainer.models import build_model
from ignite_ddl.trainer.recipe import OptimizerFactory, clip_value
from ignite_ddl.trainer.strategies import strategy_for
from ignite_ddl.trainer.workload import activation_checkpointing

__all__ = [
    "GradientLayout",
    "PARTS",
    "Prediction",
    "data_bytes",
    "gradient_bytes",
    "gradient_layout",
    "gradient_shapes",
    "library_bytes",
    "library_parts",
    "needs_libraries",
    "not_traceable_reason",
    "on_cuda",
    "predict",
    "replays_heap",
    "trace_step",
    "world_size",
]

PARTS = ("params", "grads", "optimizer", "activations", "heap", "buckets", "checkpoint", "data", "libraries", "runtime")
# Optimizer state tensors per parameter (SGD: with momentum; AdamW's groups hold Adam's two moments).
_STATE_PER_PARAMETER = {"adam": 2, "adamw": 2, "sgd": 1}
_CUDA_NOTE = (
    "the CUDA context and the caching allocator's reserve (not modelled; on an H200: context 527 MiB, reserve 160 MiB "
    "to 4.1 GiB, docs/gpu)"
)
# On a CPU rank, glibc's heaps keep resident what FSDP frees on every micro-batch (see the module docstring).
_HEAP_NOTE = (
    "the C allocator's heap kept beside FSDP's freed gathered units and gradients (glibc, CPU): the resident peak "
    "may be well above this figure (docs/plan.md)"
)
# On a CPU rank whose step is mostly activations and was not replayed, glibc's heap keeps much of what the step
# frees (docs/plan.md).
_ACTIVATION_HEAP_NOTE = (
    "the C allocator's heap kept beside the activations each step frees (glibc, CPU; the step not replayed): the "
    "resident peak was 11-25 % above the tensors for GPTs with activations a tenth of it or more (docs/plan.md)"
)
# Said where the activations are at least this share of the peak: glibc was measured keeping 0.55-0.9 times a GPT's
# activations beyond its traced peak (1.8 with checkpointing), so from a tenth on that is 5 % of the peak or more.
_ACTIVATION_HEAP_SHARE = 0.10
_TRACED_STEPS = 2  # the second step is the steady one: optimizer state exists, last step's gradients are freed

# The trackers' categories (their enum values), grouped into the parts shown.
_CATEGORY_PART = {
    "Parameter": "params",
    "Buffer": "params",
    "Sharded Param": "params",
    "Unsharded Param": "params",
    "All Gather": "params",
    "Gradient": "grads",
    "Sharded Grad": "grads",
    "Unsharded Grad": "grads",
    "Reduce Scatter": "grads",
    "Optstate": "optimizer",
    "OptState": "optimizer",
    "Activation": "activations",
    "Temp": "activations",
    "Inputs": "activations",
    "Other": "activations",
}

# Bytes per sample of the datasets the trainer holds in memory (torchvision keeps CIFAR-10 and MNIST as uint8
# arrays and their labels as int64 / a list; the synthetic and digits sets are float32 tensors).
_SET_SIZES = {"digits": (1437, 360), "mnist": (60000, 10000), "cifar10": (50000, 10000)}


@dataclass(frozen=True)
class Prediction:
    """One configuration's predicted peak per rank. ``problem`` (``cannot predict: <why>``) replaces the figure
    where the step could not be traced; ``unpredicted`` names what the figure leaves out."""

    parts: dict[str, int] = field(default_factory=dict)
    problem: str | None = None
    unpredicted: tuple[str, ...] = ()
    method: str = ""

    @property
    def peak_bytes(self) -> int | None:
        """The predicted peak per rank (None: cannot predict)."""
        return None if self.problem else sum(self.parts.values())

    def fits(self, limit_bytes: float | None) -> bool | None:
        """Whether the peak is within ``limit_bytes`` (None: no limit, or no prediction). Where the peak is unknown
        but the parts traced already exceed the limit (the runtime not measured), it does not fit."""
        if limit_bytes is None:
            return None
        peak = self.peak_bytes
        if peak is None:
            return False if self.parts and sum(self.parts.values()) > limit_bytes else None
        return peak <= limit_bytes

    def to_dict(self) -> MemoryPrediction:
        """As a sweep keeps it, in its plan and in each run's record."""
        return {
            "peak_bytes": self.peak_bytes,
            "parts": dict(self.parts),
            "problem": self.problem,
            "unpredicted": list(self.unpredicted),
            "method": self.method,
        }

    def describe(self) -> str:
        """One line: the peak and its parts, or why there is none."""
        if self.problem:
            return self.problem
        parts = ", ".join(f"{name} {format_bytes(self.parts[name])}" for name in PARTS if self.parts.get(name))
        text = f"{format_bytes(self.peak_bytes or 0)} ({parts})"
        return text + "".join(f"; not predicted: {u}" for u in self.unpredicted)


def on_cuda(config: TrainConfig) -> bool:
    """Whether ``config``'s ranks would run on CUDA devices here (a GPU, and a backend that uses one)."""
    # Ignite places every rank on CUDA wherever it is available, a gloo rank or a single process too; XLA ranks
    # compute on their own devices.
    return torch.cuda.is_available() and device_of(config.backend) != "xla"


def world_size(config: TrainConfig) -> int:
    return (config.nproc_per_node or 1) * config.nnodes


@dataclass
class _Job:
    """What a rank trains, as the trace needs it: its model (``build``: called under the fake tensor mode or the
    meta device, or already on meta), its step (``step(model, batch) -> loss``), one micro-batch of ``n`` items
    (``batch``), the blocks that are its FSDP units and checkpointed blocks, and the bytes of the datasets it holds."""

    build: Callable[[], nn.Module]
    step: Callable[[nn.Module, Any], torch.Tensor]
    batch: Callable[[int], Any]
    blocks: Callable[[nn.Module], list[str]]  # the built model's blocks, by name
    data_bytes: int
    optimizer: OptimizerFactory | None = None  # a workload's own (Workload.optimizer), else the config's
    clip: float | None = None  # the gradient norm a workload declares it clips to


class NotTraceable(Exception):
    """A configuration whose step the plan cannot trace, and why."""


def _job(config: TrainConfig) -> _Job:
    """``config``'s job: a built-in model, or a workload (the built-in GPT, or one of the user's) built with its model
    on the meta device (:mod:`ignite_ddl.trainer.abstract`). Raises :class:`NotTraceable` for a workload whose
    function cannot build so."""
    if config.workload is not None:
        return _workload_job(config)
    info = dataset_info(config)
    pixels = info.in_channels * info.image_size * info.image_size
    if config.dataset == "synthetic":
        held = ((config.train_size or 4096) + (config.val_size or 1024)) * (pixels * 4 + 8)
    else:
        train, val = _SET_SIZES[config.dataset]
        held = (train + val) * (pixels * 4 + 8 if config.dataset == "digits" else pixels + 8)

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.empty(n, info.in_channels, info.image_size, info.image_size)
        if config.channels_last:  # as the trainer lays its batches out
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.zeros(n, dtype=torch.long)

    def build() -> nn.Module:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        # On meta, outside the trace's fake mode, as a workload's model: a constructor may compute on tensors it
        # makes on the CPU by name (timm's drop-path rates), which the fake mode would make values it cannot read.
        with unset_fake_temporarily(), on_meta():
            return build_model(config.model, info.in_channels, info.image_size, info.num_classes)

    return _Job(build, criterion_step(nn.CrossEntropyLoss()), batch, lambda model: [], held)


def _workload_job(config: TrainConfig) -> _Job:
    """A workload's job: its function called with the meta device as the default one (its model, and the data it
    makes without naming a device, have no storage), once per workload and arguments in this process; the datasets'
    bytes as they hold them; a micro-batch shaped as their first sample."""
    key = (config.workload, repr(sorted(config.workload_args.items())), config.workload_dir)
    if key not in _WORKLOADS:
        _WORKLOADS[key] = _abstract_workload(config)
    found = _WORKLOADS[key]
    if isinstance(found, str):
        raise NotTraceable(found)
    model, names, step, sample, held, optimizer, clip = found

    def build() -> nn.Module:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # a copy on meta, as built: the trace makes it fake (deep-copied under the
            return copy.deepcopy(model)  # fake mode, its parameters would be fake tensors on meta)

    return _Job(build, step, lambda n: fake_batch(sample, n), lambda built: names, held, optimizer, clip)


_WORKLOADS: dict[tuple[Any, ...], Any] = {}  # a workload's abstract build per function and arguments


def _abstract_workload(config: TrainConfig) -> Any:
    from ignite_ddl.trainer.workload import NotOnMeta, load_workload

    try:
        workload = load_workload(config, meta=True).workload
        with on_meta():
            train, val = workload.data()
        sample = one_sample(train)
    except NotOnMeta as e:
        return (
            f'{str(e).removeprefix("workload ")}; make its data on a named device (device="cpu") and read no '
            "tensor's value while building the model (docs/own-workload.md)"
        )
    except Exception as e:  # its datasets() or their first item, on the meta device
        return f"its data cannot be built on the meta device: {type(e).__name__}: {e}".splitlines()[0]
    held = held_bytes(train) + held_bytes(val)
    return (
        workload.model,
        workload.block_names(),
        workload.step,
        sample,
        held,
        workload.optimizer,
        workload.clip_grad_norm,
    )


def data_bytes(config: TrainConfig) -> int:
    """Bytes of the training and validation sets a rank holds in memory (each rank builds both whole)."""
    return _job(config).data_bytes


def gradient_shapes(config: TrainConfig) -> list[torch.Tensor]:
    """The model's gradients as meta tensors (one per trainable parameter, its shape and dtype, in the model's
    parameter order), built on the meta device: nothing is allocated. Raises :class:`NotTraceable` for a workload
    of the user's."""
    with torch.device("meta"):
        net = _job(config).build()
    return [torch.empty_like(p) for p in net.parameters() if p.requires_grad]


def gradient_bytes(config: TrainConfig) -> int:
    """Bytes of the model's gradients (one per trainable parameter, in the parameters' dtype), counted on the meta
    device: nothing is allocated."""
    return gradient_layout(config).bytes


@dataclass(frozen=True)
class GradientLayout:
    """A model's gradients as the step model prices their collectives: their bytes (:func:`gradient_bytes`), how
    many tensors they are (one per trainable parameter), and the bytes each FSDP unit would gather and
    reduce-scatter, the model's own last (:func:`~ignite_ddl.trainer.strategies.unit_bytes`)."""

    bytes: int
    tensors: int
    units: tuple[int, ...]


def gradient_layout(config: TrainConfig) -> GradientLayout:
    """``config``'s :class:`GradientLayout`, from one build on the meta device (nothing is allocated); its FSDP units
    as the FSDP strategy would shard them, whatever ``config``'s strategy."""
    from ignite_ddl.trainer.strategies import FSDPStrategy, unit_bytes

    job = _job(config)
    with torch.device("meta"):
        net = job.build()
    trainable = [p for p in net.parameters() if p.requires_grad]
    fsdp = FSDPStrategy()
    fsdp.units = tuple(job.blocks(net))
    units = tuple(unit_bytes(fsdp.unit_modules(net, config)))
    return GradientLayout(sum(p.numel() * p.element_size() for p in trainable), len(trainable), units)


def trace_step(config: TrainConfig, allocations: list[heap.Event] | None = None) -> dict[str, int]:
    """The parts (bytes) of one rank at the peak of its traced training step (see the module docstring). Raises
    whatever the trace raises: a model that cannot run on fake tensors (:class:`NotTraceable`: a user's workload).
    Given ``allocations`` and where :func:`replays_heap`, the trace also appends its step's allocations to it, in
    order, over :data:`~ignite_ddl.predict.heap.REPLAYED_STEPS` steps (for :func:`~ignite_ddl.predict.heap.replay`).

    On Linux the trace runs in a forked child: a backward on fake tensors starts autograd's device threads, after
    which torch refuses autograd in every process forked from this one ("Unable to handle autograd's threading in
    combination with fork-based multiprocessing"). Traced here, a plan would break the ranks a notebook or a test
    then forks. Where this process already is in that state (it compiled, or traced before), cannot fork, or may
    have no children (a daemonic process), the trace runs here.

    Where a CUDA GPU is visible the child is spawned instead: asking whether CUDA is available initialises the
    driver in this process, and a child forked after that fails at the first CUDA call that autograd's backward
    makes, even on fake CPU tensors (seen on an H200: "CUDA error: initialization error" for every workload)."""
    record = allocations is not None and replays_heap(config)
    if sys.platform != "linux" or mp.current_process().daemon:
        parts, events = _trace_here(config, record)
    else:
        start_method = "spawn" if torch.cuda.is_available() else "fork"
        try:
            parts, events = call_apart(_trace_in_child, config, record, start_method=start_method)
        except ChildFailed as e:
            if "fork-based multiprocessing" not in e.text:
                known = {"NotTraceable": NotTraceable, "ConfigError": ConfigError}
                raise known.get(e.name, type(e.name, (RuntimeError,), {}))(e.text) from None
            parts, events = _trace_here(config, record)  # this process is in that state already: nothing to lose
    if allocations is not None:
        allocations.extend(events)
    return dict(parts)


def _trace_in_child(config: TrainConfig, record: bool) -> tuple[dict[str, int], list[heap.Event]]:
    # One intra-op thread: a forked child that enters an OpenMP parallel region its parent had already used hangs
    # in libgomp (a workload's function makes real data here, and the parent may have made the same before). A
    # trace on fake tensors computes nothing, so it loses nothing.
    torch.set_num_threads(1)
    return _trace_here(config, record)


def replays_heap(config: TrainConfig) -> bool:
    """Whether ``config``'s rank gets its heap predicted by a replay (:mod:`ignite_ddl.predict.heap`): a CPU rank
    under glibc whose parameters are not sharded."""
    info = resolve_strategy(config.strategy, world_size(config))
    return not on_cuda(config) and platform.libc_ver()[0] == "glibc" and not info.shards_parameters


def _trace_here(config: TrainConfig, record: bool = False) -> tuple[dict[str, int], list[heap.Event]]:
    """The traced parts, and with ``record`` the step's allocations in order (none where this PyTorch's tracker
    cannot be followed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    world = world_size(config)
    strategy = strategy_for(config.strategy, world)
    job = _job(config)
    per_rank = config.batch_size // world
    if per_rank < config.accumulate:
        raise ConfigError(f"a rank's batch of {per_rank} cannot be split into {config.accumulate} micro-batches")
    sharded = strategy.info.shards_parameters  # traced sharded, on a fake process group
    # Non-fake inputs are allowed: the model arrives on the meta device and becomes fake here.
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with _fake_group(world) if sharded else contextlib.nullcontext() as mesh, fake:
        model: nn.Module = job.build()
        if any(p.device.type == "meta" for p in model.parameters()):
            to_fake(model)
        blocks = job.blocks(model)
        if config.channels_last:  # as the trainer lays the model out
            model = model.to(memory_format=torch.channels_last)
        if config.activation_checkpointing:  # as the trainer wraps a workload's blocks, before placing it
            activation_checkpointing(model, blocks)
        model, no_sync = strategy.traced(model, config, blocks, mesh)
        optimizer = build_optimizer(model, config, job.optimizer)
        batch = job.batch(per_rank)
        tracker = _tracker(model, optimizer, _tensors(batch), sharded)
        events: list[heap.Event] = []
        recording = record and heap.record(tracker, events)
        with tracker:
            for _ in range(heap.REPLAYED_STEPS if recording else _TRACED_STEPS):
                # The trackers follow one forward per module between resets: reset after each micro-batch (their
                # peak is kept across resets).
                optimizer_step(
                    model,
                    optimizer,
                    job.step,
                    batch,
                    config.amp,
                    None,
                    config.accumulate,
                    no_sync,
                    _resetting(tracker),
                    clip_grad_norm=clip_value(config, job.clip),
                )
        snapshot = tracker.get_tracker_snapshot("peak")
    parts = dict.fromkeys(("params", "grads", "optimizer", "activations"), 0)
    for device_parts in snapshot.values():
        for category, nbytes in device_parts.items():
            name = _CATEGORY_PART.get(getattr(category, "value", str(category)))
            if name is not None:
                parts[name] += int(nbytes)
    return parts, events


def _resetting(tracker: Any) -> Any:
    def mark(phase: str) -> None:
        if phase in ("backward", "optimizer"):
            tracker.reset_mod_stats()

    return mark


def _tensors(batch: Any) -> list[torch.Tensor]:
    """Every tensor in ``batch`` (in tuples, lists and mappings)."""
    return [t for t in tree_leaves(batch) if isinstance(t, torch.Tensor)]


def _tracker(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: list[torch.Tensor], sharded: bool) -> Any:
    if sharded:
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        fsdp = FSDPMemTracker(model, optimizer)
        fsdp.track_inputs(tuple(inputs))
        return fsdp
    from torch.distributed._tools.mem_tracker import MemTracker

    plain = MemTracker()
    plain.track_external(model, optimizer, *inputs)
    return plain


@contextlib.contextmanager
def _fake_group(world: int) -> Iterator[Any]:
    """A fake process group of ``world`` ranks (this process rank 0) and its device mesh, made outside the fake
    tensor mode (the mesh reads real tensors), destroyed after the trace."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise ConfigError("an FSDP step is traced on a fake process group: predict outside a distributed run")
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (world,))
    finally:
        dist.destroy_process_group()


def _checkpoint_phase(config: TrainConfig, step: dict[str, int], info: StrategyInfo) -> dict[str, int]:
    """Rank 0 of a strategy that shards while it saves a checkpoint: it gathers the full state of what is sharded
    (FSDP: the model and the optimizer state, ``full_state_dict`` offloaded to CPU; ZeRO-1: the optimizer state,
    consolidated) beside what it holds between steps and the heap the step left. The parts of that moment where it
    needs more than the training step, else ``step``'s."""
    full = gradient_bytes(config)
    states = _STATE_PER_PARAMETER.get(config.optimizer, 0) if config.optimizer != "sgd" or config.momentum else 0
    world = world_size(config)
    sizes = {"params": full, "grads": full, "optimizer": states * full}
    held = {part: int(size * info.shard_of(part, world)) for part, size in sizes.items()}
    gathered = sum(sizes[part] for part in ("params", "optimizer") if part in info.shards)
    # the heap the step's allocations left stays with the process while it saves: both moments hold it, so it never
    # decides which of them is the peak
    kept: dict[str, int] = {part: step[part] for part in ("heap", "buckets") if part in step}
    saving = {**held, "activations": 0, **kept, "checkpoint": gathered}
    return saving if sum(saving.values()) > sum(step.values()) else {**step, "checkpoint": 0}


def not_traceable_reason(e: Exception) -> str:
    """Why ``e``, raised by a trace or a count of a configuration's model, leaves it unpredicted: one line."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, NotTraceable):
        return text
    if type(e).__name__ in ("DataDependentOutputException", "DynamicOutputShapeException"):
        return f"the model reads a tensor's value ({text}), which a trace on fake tensors (no data) cannot follow"
    return f"{type(e).__name__}: {text}"


def _model_parts(config: TrainConfig, info: StrategyInfo, replay_start: str) -> dict[str, int]:
    """The traced step's parts, the heap its allocations leave (replayed in a process started ``replay_start``,
    where :func:`replays_heap`), what the strategy shards that the trace did not, DDP's buckets, the checkpoint
    moment of a strategy that shards, and the datasets (no runtime)."""
    allocations: list[heap.Event] = []
    parts = trace_step(config, allocations)
    kept = heap.replay(allocations, replay_start) if allocations else None
    if kept is not None:
        parts["heap"] = kept
    world = world_size(config)
    if not info.shards_parameters:  # traced unsharded: a strategy sharding its optimizer state (ZeRO-1) holds 1/N
        for part in info.shards:
            parts[part] = int(parts[part] * info.shard_of(part, world))
    parts["buckets"] = 0
    if info.gradient_buckets:
        # DDP's flat bucket buffers, one copy of every gradient (float32: DDP reduces the parameters' dtype).
        parts["buckets"] = gradient_bytes(config)
        if config.gradient_as_bucket_view:
            parts["grads"] = 0  # the gradients are views of the buckets
    if info.shards and config.checkpoints:
        parts = _checkpoint_phase(config, parts, info)
    parts["data"] = data_bytes(config)
    return parts


def needs_libraries(config: TrainConfig) -> bool:
    """Whether ``config``'s model comes from modules beyond the suite's own, whose import the runtime's probe (a run
    of the toy model) does not hold: a workload of one's own or of a family (``hf:gpt2`` imports transformers), a
    model by a library's name (``timm:resnet18``)."""
    return (config.workload is not None and config.workload.strip() not in BUILT_IN) or ":" in config.model


def library_parts(config: TrainConfig, timeout_s: float = 600) -> dict[str, int]:
    """What importing and building ``config``'s model adds to a rank's resident memory beyond the runtime's probe,
    measured in a fresh interpreter, the model built on the meta device (no storage): ``anonymous`` (its modules'
    and the libraries' objects and heap: transformers 61 MiB on a 2-core CPU VM, timm 25 to 33 MiB) and ``file``
    (the pages of the shared objects they load, which a rank's resident set counts too: transformers 23 MiB).
    Raises :class:`ChildFailed`."""
    parts: dict[str, int] = call_apart(_library_bytes_here, config.to_dict(), start_method="spawn", timeout_s=timeout_s)
    return parts


def library_bytes(config: TrainConfig, timeout_s: float = 600) -> int:
    """:func:`library_parts` in all: what ``config``'s model's own modules and libraries add to a rank's resident
    memory. Raises :class:`ChildFailed`."""
    return sum(library_parts(config, timeout_s).values())


def _library_bytes_here(fields: dict[str, Any]) -> dict[str, int]:
    from ignite_ddl.measure.memory import anonymous_rss_bytes, file_rss_bytes
    from ignite_ddl.trainer import run  # noqa: F401  (the trainer's own imports: the runtime's probe holds them)
    from ignite_ddl.trainer.workload import load_workload

    config = TrainConfig.from_dict(fields)
    _job(TrainConfig(model="toy")).build()  # and what building the probe's own model imports
    anonymous, file = anonymous_rss_bytes(), file_rss_bytes()
    if config.workload is not None:
        load_workload(config, meta=True)
    else:
        _job(config).build()
    return {"anonymous": max(0, anonymous_rss_bytes() - anonymous), "file": max(0, file_rss_bytes() - file)}


def predict(
    config: TrainConfig, runtime_bytes: int | None, libraries_bytes: int | None = 0, replay_start: str = "spawn"
) -> Prediction:
    """``config``'s predicted peak per rank: the traced step, the heap its allocations leave (replayed in a process
    started ``replay_start``: a fresh one, as a rank starts; a sweep gives its fork server, whose children start
    as its runs do), DDP's buckets, the datasets, ``libraries_bytes`` (what the model's own modules hold,
    :func:`library_bytes`; None: not measured, said in ``unpredicted``) and ``runtime_bytes`` (None: the runtime is
    not known, so neither is the peak). A model that cannot be traced gets ``problem``."""
    unpredicted = []
    if libraries_bytes is None:
        unpredicted.append("what the model's own modules and their libraries hold (not measured)")
    if config.compile:
        unpredicted.append("--compile (Inductor's own memory and the compiled graph's buffers; traced eagerly)")
    cuda = on_cuda(config)
    if cuda:
        unpredicted.append(_CUDA_NOTE)
    info = resolve_strategy(config.strategy, world_size(config))
    if info.gradient_buckets and config.comm_hook != "none":
        unpredicted.append(
            f"--comm-hook {config.comm_hook} (the hook's own buffers: compressed copies of the buckets; PowerSGD's "
            "error feedback and low-rank factors)"
        )
    method = "FSDPMemTracker" if info.shards_parameters else "MemTracker"
    glibc_cpu = not cuda and platform.libc_ver()[0] == "glibc"  # a rank whose heap is glibc's (see the notes)
    if info.shards_parameters and glibc_cpu:
        unpredicted.append(_HEAP_NOTE)
    try:  # the trace, and every count of the model after it: none of them may fail the plan or the sweep
        parts = _model_parts(config, info, replay_start)
    except Exception as e:  # any failure of the trace is this model's: it is listed, with why
        return Prediction(problem=f"cannot predict: {not_traceable_reason(e)}"[:300], method=method)
    parts["libraries"] = libraries_bytes or 0
    # a rank that shards parameters has its own note, which covers its heap whole; a replayed one has its heap
    if replays_heap(config) and "heap" not in parts and _mostly_activations(parts, runtime_bytes):
        unpredicted.append(_ACTIVATION_HEAP_NOTE)
    if runtime_bytes is None:
        return Prediction(
            parts, "cannot predict: the runtime's own memory was not measured", tuple(unpredicted), method
        )
    parts["runtime"] = runtime_bytes
    return Prediction(parts, None, tuple(unpredicted), method)


def _mostly_activations(parts: dict[str, int], runtime_bytes: int | None) -> bool:
    """Whether the activations are enough of the peak for what glibc's heap keeps of them to matter: at least
    :data:`_ACTIVATION_HEAP_SHARE` of it (of what was traced, where the runtime is not known)."""
    peak = sum(parts.values()) + (runtime_bytes or 0)
    return peak > 0 and parts.get("activations", 0) >= _ACTIVATION_HEAP_SHARE * peak
