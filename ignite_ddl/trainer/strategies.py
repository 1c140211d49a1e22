"""Ways of holding the model across ranks, one object each (as Lightning Fabric's strategies): how a strategy
places the model, which communication timing it supports, what it refuses, how it skips gradient
synchronisation, and how the bytes a rank holds are counted.

============  ========================================================================================
``none``      one process: the model on its device, nothing to communicate
``ddp``       data parallel: a full replica per rank, gradients averaged in backward
              (``idist.auto_model``: torch's ``DistributedDataParallel``; on XLA, replicas averaged in
              the optimizer step)
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

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar, cast

import ignite.distributed as idist
import torch
from torch import nn

from ignite_ddl.core.config import STRATEGIES, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.launcher.backends import rules
from ignite_ddl.measure.comm import CommTimer
from ignite_ddl.measure.memory import held_bytes

__all__ = [
    "DataParallel",
    "FullyShardedDataParallel",
    "SingleProcess",
    "Strategy",
    "place_model",
    "strategy_for",
    "unwrap",
]


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel or DataParallel wrapper (the model itself otherwise): the one to
    call where the wrapper's forward would communicate, and whose parameter names have no ``module.`` prefix.

    Example:
        >>> net = nn.Linear(2, 1)
        >>> unwrap(nn.DataParallel(net)) is net and unwrap(net) is net
        True
    """
    return model.module if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) else model


class Strategy:
    """How the model is held across ranks. Subclasses set ``name`` and ``min_world`` and override what differs."""

    name: ClassVar[str]
    min_world: ClassVar[int] = 1
    max_world: ClassVar[int | None] = None

    def check(self, world_size: int) -> None:
        """Refuse (:class:`ConfigError`) a world size this strategy cannot run, before any process starts."""
        if world_size < self.min_world:
            raise ConfigError(
                f"strategy {self.name} needs {self.min_world} or more processes (one process: --strategy none)"
            )
        if self.max_world is not None and world_size > self.max_world:
            raise ConfigError(
                f"strategy {self.name} runs {self.max_world} process, not {world_size} (several: --strategy ddp)"
            )

    def place(self, model: nn.Module, config: TrainConfig) -> nn.Module:
        """The model as this rank trains it (moved to its device, wrapped or sharded)."""
        raise NotImplementedError

    def comm_timer(self, model: nn.Module, device: torch.device) -> CommTimer | None:
        """A communication timer attached to the placed ``model``, where this strategy's communication can be timed
        honestly (None: not timed)."""
        return None

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """A context in which backward accumulates gradients without communicating (gradient accumulation)."""
        return contextlib.nullcontext()

    def held_bytes(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
        """The bytes this rank holds for parameters, gradients and optimizer state."""
        return held_bytes(model, optimizer)

    def begin_evaluation(self, model: nn.Module) -> None:
        """Called on every rank before the evaluator runs (collective where the strategy's forward is)."""

    def end_evaluation(self, model: nn.Module) -> None:
        """Called on every rank after the evaluator ran."""

    def saved(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Any, Any]:
        """The objects a checkpoint saves and loads for the model and the optimizer (anything with
        ``state_dict`` / ``load_state_dict``; Ignite's ``Checkpoint`` unwraps DDP itself)."""
        return model, optimizer

    def timed_comm(self) -> bool:
        """Whether this strategy's gradient communication is timed per collective when ``--comm-timing`` is on."""
        return False


class SingleProcess(Strategy):
    """One process: the model on this process's device."""

    name = "none"
    max_world = 1

    def place(self, model: nn.Module, config: TrainConfig) -> nn.Module:
        # Not auto_model: with one process it would wrap DataParallel when several GPUs are visible (ignite#2447),
        # which is not what a one-process run asked for.
        return model.to(idist.device())


class DataParallel(Strategy):
    """A full replica per rank, gradients averaged during backward (DDP), through ``idist.auto_model``."""

    name = "ddp"
    min_world = 2

    def place(self, model: nn.Module, config: TrainConfig) -> nn.Module:
        backend = idist.backend()
        options = {"bucket_cap_mb": config.bucket_cap_mb} if backend and rules(backend).ddp_bucket_cap else {}
        return idist.auto_model(model, sync_bn=config.sync_bn, **options)

    def comm_timer(self, model: nn.Module, device: torch.device) -> CommTimer | None:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            return CommTimer(device).attach(model)
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


class FullyShardedDataParallel(Strategy):
    """FSDP2: parameters, gradients and optimizer state sharded over the ranks (see the module docstring)."""

    name = "fsdp"
    min_world = 2

    def place(self, model: nn.Module, config: TrainConfig) -> nn.Module:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if idist.backend() not in ("gloo", "nccl"):
            raise ConfigError(f"strategy fsdp runs on gloo or nccl process groups, not {idist.backend()}")
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.amp)
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
        model = model.to(idist.device())
        for child in model.children():
            if any(True for _ in child.parameters()):
                fully_shard(child, mp_policy=policy)
        return cast(nn.Module, fully_shard(model, mp_policy=policy))  # the model itself, now an FSDP module

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
            unit.set_reshard_after_forward(True)
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

        set_optimizer_state_dict(self.model, self.optimizer, state, options=StateDictOptions(full_state_dict=True))


_STRATEGIES: dict[str, type[Strategy]] = {
    "none": SingleProcess,
    "ddp": DataParallel,
    "fsdp": FullyShardedDataParallel,
}
assert set(_STRATEGIES) | {"auto"} == set(STRATEGIES), "every strategy the option offers has its class"


def place_model(model: nn.Module, sync_bn: bool = False) -> nn.Module:
    """``model`` placed as a run of this world size places it by default (``--strategy auto``)."""
    return strategy_for("auto", idist.get_world_size()).place(model, TrainConfig(sync_bn=sync_bn))


def strategy_for(name: str, world_size: int) -> Strategy:
    """The strategy ``name`` (``auto``: none for one process, ddp for several), checked against ``world_size``.
    ``ddp`` with one process is one process (nothing to average), so a sweep can grid strategies against process
    counts; ``fsdp`` with one process is refused (sharding over one rank only adds FSDP's bookkeeping)."""
    if name == "auto" or (name == "ddp" and world_size == 1):
        name = "none" if world_size == 1 else "ddp"
    strategy = _STRATEGIES[name]()
    strategy.check(world_size)
    return strategy
