"""Ways of holding the model across ranks, one object each (as Lightning Fabric's strategies): how a strategy
places the model, which communication timing it supports, what it refuses, how it skips gradient
synchronisation, and how the bytes a rank holds are counted.

============  ========================================================================================
``none``      one process: the model on its device, nothing to communicate
``ddp``       data parallel: a full replica per rank, gradients averaged in backward
              (``idist.auto_model``: torch's ``DistributedDataParallel``; on XLA, replicas averaged in
              the optimizer step)
``zero1``     ZeRO stage 1: DDP with the optimizer state sharded (torch's ``ZeroRedundancyOptimizer``): each
              rank updates its 1/N of the parameters, then broadcasts them
``fsdp``      fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``): each rank holds
              1/N of the parameters, gradients and optimizer state; a block's parameters are all-gathered
              before it computes and freed after, gradients are reduce-scattered
============  ========================================================================================

``--strategy auto`` (the default) is ``none`` for one process and ``ddp`` for several. Backend rules (which DDP
options a backend's wrapper takes) come from :mod:`ignite_ddl.launcher.backends`.

**FSDP, how it is set up here.** Each direct child of the model that holds parameters (a layer of a Sequential, a
ResNet stage) is one FSDP unit, then the whole model: only the running unit's parameters are gathered at a time.
With ``--amp bf16`` the units compute in bfloat16 and reduce gradients in float32 (``MixedPrecisionPolicy``); fp16
takes the same policy with float16 (CUDA only, never run here). Evaluation gathers every unit's parameters once,
keeps them gathered while the evaluator runs (ranks hold different numbers of validation batches, and a sharded
forward is a collective every rank must join) and frees them after. Checkpoints hold the *full* state, gathered on
rank 0 through ``torch.distributed.checkpoint``'s state-dict API (``full_state_dict=True``): the file is the same
as a DDP run's — one file, the model's own parameter names, loadable with ``weights_only=True`` and resumable by
any strategy and world size — at the cost of gathering the model on rank 0 when saving. FSDP's communication is
not timed per collective: the step breakdown says "not split for FSDP" instead of a figure it does not have.

Example:
    >>> strategy_for("auto", world_size=1).name, strategy_for("auto", world_size=2).name
    ('none', 'ddp')
    >>> strategy_for("ddp", world_size=1).name  # one process is one process
    'none'
    >>> strategy_for("fsdp", world_size=1)
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: strategy fsdp needs 2 or more processes (one process: --strategy none)
"""

from __future__ import annotations

import abc
import contextlib
import inspect
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, cast

import ignite.distributed as idist
import torch
import torch.distributed as dist
from torch import nn

from ignite_ddl.core.config import STRATEGIES, DDPOptions, FSDPOptions, StrategyOptions, TrainConfig, ZeroOptions
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.strategies import StrategyInfo, resolve_strategy, strategy_info
from ignite_ddl.launcher.backends import device_of, rules
from ignite_ddl.measure.comm import CommTimer, Hook, allreduce
from ignite_ddl.measure.crosscheck import sample_every_iteration
from ignite_ddl.measure.memory import held_bytes
from ignite_ddl.trainer.recipe import optimizer_options

__all__ = [
    "DDPStrategy",
    "FSDPStrategy",
    "SingleProcessStrategy",
    "ZeRO1Strategy",
    "Strategy",
    "check_compile",
    "comm_hook",
    "place_model",
    "registered",
    "strategy_for",
    "unit_bytes",
    "unwrap",
]


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel or DataParallel wrapper and inside ``torch.compile``'s wrapper
    (the model itself otherwise): the one to call where the wrapper's forward would communicate or compile, and
    whose parameter names have neither a ``module.`` nor an ``_orig_mod.`` prefix.

    Example:
        >>> net = nn.Linear(2, 1)
        >>> unwrap(nn.DataParallel(net)) is net and unwrap(net) is net
        True
    """
    if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        model = model.module
    return cast(nn.Module, getattr(model, "_orig_mod", model))  # torch.compile's OptimizedModule holds the model


class Strategy(abc.ABC):
    """How the model is held across ranks, the torch side of a strategy described at the core layer
    (:class:`~ignite_ddl.core.strategies.StrategyInfo`: what it shards, its collectives, its world sizes). A
    subclass names itself (``name``, a strategy described there), declares its own options (``options``: a
    :class:`~ignite_ddl.core.config.StrategyOptions` group, or None) and registers itself by being defined
    (:func:`registered`), as Fabric's strategies and Ignite's computation models do; it must say how it places the
    model (:meth:`place`) and overrides what else differs."""

    name: ClassVar[str]
    options: ClassVar[type[StrategyOptions] | None] = None
    also_accepts: ClassVar[tuple[type[StrategyOptions], ...]] = ()  # another strategy's groups that apply here too

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if inspect.isabstract(cls):
            return
        if cls.name not in STRATEGIES or cls.name == "auto":
            raise TypeError(f"strategy {cls.__name__} is named {cls.name!r}, not one of --strategy's choices")
        if cls.name in _REGISTRY:
            raise TypeError(
                f"strategy {cls.name!r} is registered twice: {_REGISTRY[cls.name].__name__}, {cls.__name__}"
            )
        _REGISTRY[cls.name] = cls

    @property
    def info(self) -> StrategyInfo:
        """What this strategy is (:mod:`ignite_ddl.core.strategies`)."""
        return strategy_info(self.name)

    def check(self, world_size: int) -> None:
        """Refuse (:class:`ConfigError`) a world size this strategy cannot run, before any process starts."""
        resolve_strategy(self.name, world_size)

    @abc.abstractmethod
    def place(self, model: nn.Module, config: TrainConfig) -> nn.Module:
        """The model as this rank trains it (moved to its device, wrapped or sharded)."""

    def check_options(self, config: TrainConfig, backend: str | None = None) -> None:
        """Refuse (:class:`ConfigError`) another strategy's own options set away from their defaults (DDP's
        communication hook, static graph, gradient views; FSDP's resharding, precision policy, units), before any
        process starts: each group says which of its options are its own (``OWN``). One process accepts and
        ignores them: nothing to communicate or shard, so a sweep may grid them against process counts. A strategy
        checks its own against the run's ``backend`` (None: not known yet)."""
        if not self.info.distributed:
            return
        for strategy in _REGISTRY.values():
            group = strategy.options
            if group is None or group is self.options or group in self.also_accepts:
                continue
            asked = group.asked(config)
            if asked:
                raise ConfigError(
                    f"{', '.join(asked)}: {strategy.name.upper()} option(s), for --strategy {strategy.name} "
                    f"(this run's is {self.name})"
                )

    def optimizer(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, config: TrainConfig
    ) -> torch.optim.Optimizer:
        """The optimizer the run steps for the placed ``model``, from the one ``config``'s options built over the
        model's parameters (``idist.auto_optim``: on XLA its step also averages the replicas' gradients)."""
        return idist.auto_optim(optimizer)

    def traced(
        self, model: nn.Module, config: TrainConfig, blocks: list[str], mesh: Any
    ) -> tuple[nn.Module, Callable[[], contextlib.AbstractContextManager]]:
        """The model as the memory prediction traces it on fake tensors (:mod:`ignite_ddl.predict.memory`), with
        the context its step skips gradient synchronisation in: unwrapped by default (DDP's reducer allocates
        outside the trace; its buckets are counted apart); ``mesh`` is a fake process group's, where the strategy
        shards parameters, else None."""
        return model, contextlib.nullcontext

    def communication(self, model: nn.Module, config: TrainConfig, device: torch.device) -> CommTimer | None:
        """Set up the placed ``model``'s gradient communication as ``config`` says; return a communication timer
        attached to it where this strategy's communication can be timed honestly and ``--comm-timing`` asks for
        it (None: not timed)."""
        return None

    def compile(self, model: nn.Module, config: TrainConfig) -> nn.Module:
        """``model`` (not yet placed) compiled with ``torch.compile`` for the train step, to be placed as it is;
        :func:`unwrap` finds the model itself in what is placed, for evaluation, checkpoints and FLOPs, which run
        eagerly.

        The model is compiled *inside* DDP's wrapper: on torch 2.14 (CPU, gloo) compiling the wrapper itself
        (``torch.compile(DDP(model))``, where TorchDynamo's DDPOptimizer would split the graph at the gradient
        buckets) captured no graph at all here (44 frames compiled, 0 graphs: Dynamo skips DDP's forward
        wrapper). Compiled inside, the backward is one compiled graph: every gradient bucket is ready when it
        ends, so the all-reduce overlaps none of it, as the step breakdown shows."""
        return cast(nn.Module, torch.compile(model, mode=config.compile_mode))

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """A context in which backward accumulates gradients without communicating (gradient accumulation)."""
        return contextlib.nullcontext()

    def held_bytes(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
        """The bytes this rank holds for parameters, gradients and optimizer state."""
        return held_bytes(model, optimizer)

    def begin_evaluation(self, model: nn.Module) -> None:  # noqa: B027 - a hook most strategies leave empty
        """Called on every rank before the evaluator runs (collective where the strategy's forward is)."""

    def end_evaluation(self, model: nn.Module) -> None:  # noqa: B027 - a hook most strategies leave empty
        """Called on every rank after the evaluator ran."""

    def saved(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Any, Any]:
        """The objects a checkpoint saves and loads for the model and the optimizer (anything with
        ``state_dict`` / ``load_state_dict``): the model itself, with its own parameter names, whatever wraps it."""
        return unwrap(model), optimizer

    def timed_comm(self) -> bool:
        """Whether this strategy's gradient communication is timed per collective when ``--comm-timing`` is on."""
        return False


_REGISTRY: dict[str, type[Strategy]] = {}


def unit_bytes(units: Sequence[nn.Module]) -> list[int]:
    """Bytes of the trainable parameters each of ``units`` (as :meth:`FSDPStrategy.unit_modules` lists them, a unit
    before the units holding it) gathers and reduce-scatters: its own, less those of the units before it, as
    ``fully_shard`` leaves a nested unit's parameters to that unit; a parameter shared between units (tied
    weights), to the first."""
    counted: set[int] = set()
    found = []
    for unit in units:
        mine = [p for p in unit.parameters() if p.requires_grad and id(p) not in counted]
        counted.update(id(p) for p in mine)
        found.append(sum(p.numel() * p.element_size() for p in mine))
    return found


def registered() -> dict[str, type[Strategy]]:
    """Every strategy, by its ``--strategy`` name, as the classes registered themselves."""
    return dict(_REGISTRY)


class SingleProcessStrategy(Strategy):
    """One process: the model on this process's device."""

    name = "none"

    def place(self, model: nn.Module, config: TrainConfig) -> nn.Module:
        # Not auto_model: with one process it would wrap DataParallel when several GPUs are visible (ignite#2447),
        # which is not what a one-process run asked for.
        return model.to(idist.device())


class DDPStrategy(Strategy):
    """A full replica per rank, gradients averaged during backward (torch's ``DistributedDataParallel``), through
    ``idist.auto_model``; its options are :class:`~ignite_ddl.core.config.DDPOptions`. (Not ``nn.DataParallel``,
    one process driving several GPUs, which the dp-vs-ddp lab compares it with.)"""

    name = "ddp"
    options: ClassVar[type[StrategyOptions] | None] = DDPOptions

    def check_options(self, config: TrainConfig, backend: str | None = None) -> None:
        super().check_options(config, backend)
        asked = DDPOptions.asked(config)
        if asked and backend is not None and not rules(backend).ddp_bucket_cap:
            raise ConfigError(
                f"{', '.join(asked)}: DDP's communication options need torch's DistributedDataParallel, not {backend}"
            )

    def place(self, model: nn.Module, config: TrainConfig) -> nn.Module:
        backend = idist.backend()
        options: dict[str, Any] = {}
        if backend and rules(backend).ddp_bucket_cap:
            options = {
                "bucket_cap_mb": config.bucket_cap_mb,
                "static_graph": config.static_graph,
                "gradient_as_bucket_view": config.gradient_as_bucket_view,
            }
        placed = idist.auto_model(model, sync_bn=config.sync_bn, **options)
        if not config.gradient_sync and isinstance(placed, nn.parallel.DistributedDataParallel):
            # What no_sync() sets for one backward, for all of them: DDP's no_sync restores the value it found.
            placed.require_backward_grad_sync = False
        return placed

    def communication(self, model: nn.Module, config: TrainConfig, device: torch.device) -> CommTimer | None:
        if not isinstance(model, nn.parallel.DistributedDataParallel):
            return None
        hook = comm_hook(config, model.process_group)
        if config.record_steps and config.comm_timing:
            sample_every_iteration(model)  # DDP's own statistics of every iteration: the timing's cross-check
            return CommTimer(device).attach(model, hook)
        if config.comm_hook != "none":  # untimed: torch's hook itself, registered as torch documents it
            model.register_comm_hook(None, lambda _, bucket: hook(bucket)[0])
        return None

    def timed_comm(self) -> bool:
        return True

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            with model.no_sync():
                yield
        else:
            yield


class ZeRO1Strategy(DDPStrategy):
    """ZeRO stage 1: DDP (its options apply) with the optimizer state sharded over the ranks by torch's
    ``ZeroRedundancyOptimizer``: each rank keeps the state of, and updates, its own share of the parameters, then
    broadcasts them. Checkpoints hold the full optimizer state, consolidated on rank 0 (Ignite's ``Checkpoint``
    does it), so a ZeRO-1 checkpoint resumes any strategy and any world size, and the reverse."""

    name = "zero1"
    options = ZeroOptions
    also_accepts = (DDPOptions,)

    def check_options(self, config: TrainConfig, backend: str | None = None) -> None:
        super().check_options(config, backend)
        if not config.gradient_sync:  # each rank would update its share of parameters nobody else reduced
            raise ConfigError("gradient_sync: false is a probe of DDP's compute, for --strategy ddp (not zero1)")
        if backend is not None and not rules(backend).torch_group:
            raise ConfigError(f"strategy zero1 runs on gloo or nccl process groups, not {backend}")

    def optimizer(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, config: TrainConfig
    ) -> torch.optim.Optimizer:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        # Group by group (AdamW's decayed and undecayed ones keep their own options), each rank building the class
        # over its share with the options the class takes.
        groups = [{k: v for k, v in group.items() if k != "initial_lr"} for group in optimizer.param_groups]
        return ZeroRedundancyOptimizer(
            groups,
            optimizer_class=type(optimizer),
            parameters_as_bucket_view=config.zero_bucket_view,
            **optimizer_options(optimizer),
        )

    def held_bytes(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
        # the state this rank keeps is its local optimizer's (the wrapper's own is only rebuilt to save)
        return held_bytes(model, getattr(optimizer, "optim", optimizer))


class FSDPStrategy(Strategy):
    """FSDP2: parameters, gradients and optimizer state sharded over the ranks (see the module docstring); its
    options are :class:`~ignite_ddl.core.config.FSDPOptions`."""

    name = "fsdp"
    options = FSDPOptions
    # The FSDP units, as names of submodules: a workload's blocks (its wrap policy); none given, each direct child
    # that holds parameters.
    units: tuple[str, ...] = ()

    def _unit_names(self, model: nn.Module) -> list[str]:
        if self.units:
            return list(self.units)
        return [name for name, child in model.named_children() if any(True for _ in child.parameters())]

    reshard_after_forward = True  # as placed (set by place): what evaluation restores

    def check_options(self, config: TrainConfig, backend: str | None = None) -> None:
        super().check_options(config, backend)
        if config.fsdp_mixed_precision == "fp16" and backend is not None and rules(backend).device != "cuda":
            raise ConfigError(
                f"fsdp_mixed_precision fp16 is for CUDA ranks (nccl), not {backend}: on CPU use bf16 or none"
            )

    def place(self, model: nn.Module, config: TrainConfig) -> nn.Module:
        backend = idist.backend()
        if backend is None or not rules(backend).torch_group:
            raise ConfigError(f"strategy fsdp runs on gloo or nccl process groups, not {backend}")
        return self.shard(model.to(idist.device()), config)

    def shard(self, model: nn.Module, config: TrainConfig, mesh: Any = None) -> nn.Module:
        """``model`` sharded as ``config``'s FSDP options say, on ``mesh`` (default: the world's). The memory
        prediction (:mod:`ignite_ddl.predict.memory`) shards its fake model here too."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        options = config.fsdp
        dtype = self._param_dtype(config)
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
        self.reshard_after_forward = options.reshard_after_forward
        reshard = options.reshard_after_forward
        full_precision = {id(module) for module in self._full_precision_units(model, dtype is not None)}
        for unit in self.unit_modules(model, config)[:-1]:
            unit_policy = MixedPrecisionPolicy() if id(unit) in full_precision else policy
            fully_shard(unit, mesh=mesh, mp_policy=unit_policy, reshard_after_forward=reshard)
        # the model itself, now an FSDP module
        return cast(nn.Module, fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard))

    @staticmethod
    def _param_dtype(config: TrainConfig) -> torch.dtype | None:
        """The dtype the units compute in under mixed precision (``fsdp_mixed_precision``, ``auto``: ``--amp``'s),
        None without."""
        options = config.fsdp
        precision = config.amp if options.fsdp_mixed_precision == "auto" else options.fsdp_mixed_precision
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)

    @staticmethod
    def _full_precision_units(model: nn.Module, mixed: bool) -> list[nn.Module]:
        # Batch norm keeps float32 parameters, each layer a unit of its own: cast to bf16 beside its float32
        # running statistics it fails on CPU ("expected scalar type BFloat16 but found Float", resnet18), and in
        # half precision its statistics lose the small updates they accumulate.
        if not mixed:
            return []
        return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m is not model]

    def unit_modules(self, model: nn.Module, config: TrainConfig) -> list[nn.Module]:
        """The modules :meth:`shard` passes to ``fully_shard``, in that order (a unit before the units holding it),
        the model last: under mixed precision each batch norm layer, then the workload's blocks (none marked: each
        direct child holding parameters) with ``fsdp_wrap: children``. The step model prices FSDP's collectives by
        what each unit gathers (:func:`unit_bytes`)."""
        options = config.fsdp
        units = self._full_precision_units(model, self._param_dtype(config) is not None)
        seen = {id(unit) for unit in units}
        for name in self._unit_names(model) if options.fsdp_wrap == "children" else []:
            unit = model.get_submodule(name)
            if id(unit) not in seen:
                units.append(unit)
                seen.add(id(unit))
        return [*units, model]

    def traced(
        self, model: nn.Module, config: TrainConfig, blocks: list[str], mesh: Any
    ) -> tuple[nn.Module, Callable[[], contextlib.AbstractContextManager]]:
        self.units = tuple(blocks)
        sharded = self.shard(model, config, mesh)
        return sharded, lambda: self.no_sync(sharded)  # as the trainer calls it

    def compile(self, model: nn.Module, config: TrainConfig) -> nn.Module:
        """Each unit (a direct child holding parameters) compiled, then sharded as it is, as torchtitan compiles
        each block before sharding it: FSDP's gather and free hooks then sit on the compiled unit's wrapper and
        run eagerly around it (compiling the units in place, hooks inside, captured no graph here: TorchDynamo
        skips FSDP's hooks by design). Checkpoints keep the model's own names (``torch.distributed.checkpoint``
        drops the wrapper's ``_orig_mod.``). Evaluation calls the same units, so it compiles them once more, for
        ``no_grad``."""
        for name in self._unit_names(model):
            parent, _, child = name.rpartition(".")
            holder = model.get_submodule(parent) if parent else model
            unit = holder.get_submodule(child)
            holder.register_module(child, cast(nn.Module, torch.compile(unit, mode=config.compile_mode)))
        return model

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        sharded = cast(Any, model)  # an FSDPModule (its class is made when the model is sharded)
        sharded.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            sharded.set_requires_gradient_sync(True)

    def begin_evaluation(self, model: nn.Module) -> None:
        for unit in _units(model):
            unit.unshard()
            unit.set_reshard_after_forward(False)

    def end_evaluation(self, model: nn.Module) -> None:
        for unit in _units(model):
            unit.set_reshard_after_forward(self.reshard_after_forward)
            unit.reshard()

    def saved(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Any, Any]:
        return _FullModelState(model), _FullOptimizerState(model, optimizer)


def _units(model: nn.Module) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


class _FullModelState:
    """A sharded model's state as a checkpoint saves it: gathered in full on rank 0 (collective), loaded from a full
    state on every rank (each reads the file)."""

    def __init__(self, model: nn.Module):
        self.model = model

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(self.model, state, options=StateDictOptions(full_state_dict=True))


class _FullOptimizerState(_FullModelState):
    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer):
        super().__init__(model)
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(self.model, self.optimizer, options=options)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        state = _keyed_by_name(self.model, self.optimizer, state)
        set_optimizer_state_dict(self.model, self.optimizer, state, options=StateDictOptions(full_state_dict=True))


def _keyed_by_name(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state saved by a DDP or one-process run (``Optimizer.state_dict()``: parameters keyed by their
    index in the optimizer's groups) keyed by parameter name, as torch.distributed.checkpoint's full state is and as
    ``set_optimizer_state_dict`` needs; a state keyed by name already is returned as it is. The index is the
    parameter's position in the optimizer's groups, the same on every strategy (the optimizer is built from the
    model's parameters in order), and FSDP2 keeps the model's parameter names."""
    groups = state.get("param_groups", [])
    if not all(isinstance(i, int) for group in groups for i in group.get("params", [])):
        return state
    names = {id(p): name.replace("_orig_mod.", "") for name, p in model.named_parameters()}
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    return {
        "state": {order[i]: value for i, value in state.get("state", {}).items()},
        "param_groups": [{**group, "params": [order[i] for i in group["params"]]} for group in groups],
    }


def check_compile(backend: str | None, cuda_devices: int) -> None:
    """Refuse (:class:`ConfigError`) ``--compile`` where it cannot run, before any process starts: on XLA (its own
    compiler), or on CPU without the C++ compiler Inductor builds its kernels with."""
    if device_of(backend) == "xla":
        raise ConfigError("--compile is torch.compile with Inductor, for CPU and CUDA ranks; XLA compiles on its own")
    if cuda_devices == 0 and not (os.environ.get("CXX") or any(shutil.which(cc) for cc in ("g++", "clang++", "c++"))):
        raise ConfigError(
            "--compile on CPU needs a C++ compiler for Inductor's kernels (g++ or clang++; or set CXX): none found "
            "(Debian/Ubuntu: apt-get install g++)"
        )


def comm_hook(config: TrainConfig, group: Any) -> Hook:
    """torch's built-in DDP communication hook that ``config.comm_hook`` names, as the communication timer calls
    it (:data:`~ignite_ddl.measure.comm.Hook`): the reduced bucket's future and the bytes put on the wire.

    ``fp16`` / ``bf16`` cast the bucket to half precision before the all-reduce (half the bytes) and back after.
    ``powersgd`` runs plain all-reduces for ``powersgd_start_iter`` iterations, then sends each gradient matrix as
    two rank-``powersgd_rank`` factors (with error feedback and warm start, torch's defaults); the bytes are what
    PowerSGD itself counts (``PowerSGDState.total_numel_after_compression``) for the bucket."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if config.comm_hook == "none":
        return allreduce(group)
    if config.comm_hook in ("fp16", "bf16"):
        compress = default_hooks.fp16_compress_hook if config.comm_hook == "fp16" else default_hooks.bf16_compress_hook

        def half(bucket: dist.GradBucket) -> tuple[torch.futures.Future[torch.Tensor], int]:
            return compress(group, bucket), bucket.buffer().numel() * 2

        return half
    state = powerSGD_hook.PowerSGDState(
        process_group=group,
        matrix_approximation_rank=config.powersgd_rank,
        start_powerSGD_iter=config.powersgd_start_iter,
    )
    # PowerSGD issues a bucket's later all-reduces (the factors P, then Q) from completion callbacks, on the
    # backend's threads, while the next bucket's first all-reduce comes from backward's thread. gloo needs every rank
    # to issue its collectives in the same order, and without an order between those threads the ranks may not:
    # seen here as "Received data size doesn't match expected size" and an abort, with 3 buckets. On gloo each
    # bucket therefore waits for the previous one's reduction to finish (no overlap between buckets; NCCL orders
    # collectives on its stream and needs no wait).
    ordered = not rules(str(dist.get_backend(group))).orders_threaded_collectives
    previous: list[torch.futures.Future[torch.Tensor]] = []

    def powersgd(bucket: dist.GradBucket) -> tuple[torch.futures.Future[torch.Tensor], int]:
        if ordered and previous:
            previous.pop().wait()
        buffer, before = bucket.buffer(), state.total_numel_after_compression
        future = powerSGD_hook.powerSGD_hook(state, bucket)
        sent = state.total_numel_after_compression - before  # 0 while it still runs plain all-reduces
        if ordered:
            previous.append(future)
        return future, (sent or buffer.numel()) * buffer.element_size()

    return powersgd


def place_model(model: nn.Module, sync_bn: bool = False) -> nn.Module:
    """``model`` placed as a run of this world size places it by default (``--strategy auto``)."""
    return strategy_for("auto", idist.get_world_size()).place(model, TrainConfig(sync_bn=sync_bn))


def strategy_for(name: str, world_size: int) -> Strategy:
    """The strategy ``name`` (``auto``: none for one process, ddp for several), checked against ``world_size``.
    ``ddp`` with one process is one process (nothing to average), so a sweep can grid strategies against process
    counts; ``fsdp`` with one process is refused (sharding over one rank only adds FSDP's bookkeeping)."""
    return _REGISTRY[resolve_strategy(name, world_size).name]()
