"""Ways of holding the model across ranks, one object each (as Lightning Fabric's strategies): how a strategy
places the model, which communication timing it supports, what it refuses, how it skips gradient
synchronisation, and how the bytes a rank holds are counted.

============  ========================================================================================
``none``      one process: the model on its device, nothing to communicate
``ddp``       data parallel: a full replica per rank, gradients averaged in backward
              (``idist.auto_model``: torch's ``DistributedDataParallel``; on XLA, replicas averaged in
              the optimizer step)
============  ========================================================================================

``--strategy auto`` (the default) is ``none`` for one process and ``ddp`` for several. Backend rules (which DDP
options a backend's wrapper takes) come from :mod:`ignite_ddl.launcher.backends`.

Example:
    >>> strategy_for("auto", world_size=1).name, strategy_for("auto", world_size=2).name
    ('none', 'ddp')
    >>> strategy_for("ddp", world_size=1)
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: strategy ddp needs 2 or more processes (one process: --strategy none)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import ClassVar

import ignite.distributed as idist
import torch
from torch import nn

from ignite_ddl.core.config import STRATEGIES, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.launcher.backends import rules
from ignite_ddl.measure.comm import CommTimer
from ignite_ddl.measure.memory import held_bytes

__all__ = ["DataParallel", "SingleProcess", "Strategy", "place_model", "strategy_for", "unwrap"]


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

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            with model.no_sync():
                yield
        else:
            yield


_STRATEGIES: dict[str, type[Strategy]] = {"none": SingleProcess, "ddp": DataParallel}
assert set(_STRATEGIES) | {"auto"} == set(STRATEGIES), "every strategy the option offers has its class"


def place_model(model: nn.Module, sync_bn: bool = False) -> nn.Module:
    """``model`` placed as a run of this world size places it by default (``--strategy auto``)."""
    return strategy_for("auto", idist.get_world_size()).place(model, TrainConfig(sync_bn=sync_bn))


def strategy_for(name: str, world_size: int) -> Strategy:
    """The strategy ``name`` (``auto``: none for one process, ddp for several), checked against ``world_size``."""
    if name == "auto":
        name = "none" if world_size == 1 else "ddp"
    strategy = _STRATEGIES[name]()
    strategy.check(world_size)
    return strategy
