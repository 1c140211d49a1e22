"""What each way of holding the model across ranks *is*, without torch: its name, what it shards, which
collectives a step makes and on which bytes, the memory it adds, the world sizes it runs, and its ZeRO stage.

Every layer that reasons about a strategy (the plan, the step-time model, the report, the CLI) asks the strategy's
:class:`StrategyInfo` here instead of comparing its name; the torch side (wrapping, sharding, state dicts) is the
trainer's :class:`~ignite_ddl.trainer.strategies.Strategy`, registered under the same name. A strategy is described
once, by :func:`describe_strategy`, and every choice of ``--strategy`` comes from this registry.

============  =====  ==========================================  ============================================
name          ZeRO   sharded over the ranks                      collectives of an optimizer step
============  =====  ==========================================  ============================================
``none``      -      nothing (one process)                       none
``ddp``       0      nothing: a full replica per rank            all-reduce of the gradients (in buckets)
``zero1``     1      optimizer state                             all-reduce of the gradients, then each rank
                                                                 broadcasts the parameters it updated
``fsdp``      3 / 2  parameters, gradients, optimizer state      all-gather of the parameters in forward and in
                                                                 backward, reduce-scatter of the gradients
============  =====  ==========================================  ============================================

FSDP2 with ``reshard_after_forward: false`` keeps each unit's parameters gathered from forward to backward: ZeRO
stage 2's memory, one all-gather less per micro-batch.

Example:
    >>> resolve_strategy("auto", 1).name, resolve_strategy("auto", 2).name, resolve_strategy("ddp", 1).name
    ('none', 'ddp', 'none')
    >>> info = resolve_strategy("fsdp", 4)
    >>> sorted(info.shards), info.zero_stage(), info.zero_stage(reshard_after_forward=False), info.shard_of("grads", 4)
    (['grads', 'optimizer', 'params'], 3, 2, 0.25)
    >>> resolve_strategy("ddp", 2).zero_stage(), resolve_strategy("ddp", 2).gradient_buckets
    (0, True)
    >>> zero = resolve_strategy("zero1", 4)
    >>> sorted(zero.shards), zero.zero_stage(), zero.shard_of("optimizer", 4), resolve_strategy("zero1", 1).name
    (['optimizer'], 1, 0.25, 'none')
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from ignite_ddl.core.errors import ConfigError

__all__ = [
    "SHARDABLE",
    "STRATEGY_CHOICES",
    "StrategyInfo",
    "describe_strategy",
    "resolve_strategy",
    "strategy_help",
    "strategy_info",
    "strategy_infos",
]

SHARDABLE = ("params", "grads", "optimizer")  # what a rank may hold a 1/N share of


@dataclass(frozen=True)
class StrategyInfo:
    """One strategy, as every layer above the trainer needs to know it.

    ``collectives``: what one optimizer step communicates, each ``(collective, what)`` with ``what`` one of
    :data:`SHARDABLE` (the bytes moved are that part's full size): ``("allreduce", "grads")`` for DDP.
    ``per_micro_batch``: the collectives repeated for every micro-batch of an accumulated step (FSDP gathers the
    parameters in each forward and backward). ``gradient_buckets``: DDP's flat buckets, one more copy of the
    gradients held for the whole run. ``one_process``: what it is with one process (``None``: refused). Its own
    options are its torch side's group (:attr:`~ignite_ddl.trainer.strategies.Strategy.options`)."""

    name: str
    summary: str  # what it is, in a line: ``--strategy``'s help shows it
    shards: frozenset[str] = frozenset()
    collectives: tuple[tuple[str, str], ...] = ()
    per_micro_batch: tuple[tuple[str, str], ...] = ()
    gradient_buckets: bool = False
    min_world: int = 1
    max_world: int | None = None
    one_process: str | None = "none"

    def __post_init__(self) -> None:
        unknown = set(self.shards) - set(SHARDABLE)
        if unknown:
            raise ValueError(f"strategy {self.name} shards {sorted(unknown)}: not among {SHARDABLE}")

    @property
    def distributed(self) -> bool:
        """Whether it runs several ranks (anything but ``none``)."""
        return self.min_world > 1

    @property
    def shards_parameters(self) -> bool:
        return "params" in self.shards

    def shard_of(self, part: str, world: int) -> float:
        """The share of ``part`` (:data:`SHARDABLE`) one of ``world`` ranks holds: 1/world where it is sharded."""
        return 1 / world if part in self.shards else 1.0

    def micro_batch_collectives(self, reshard_after_forward: bool = True) -> tuple[tuple[str, str], ...]:
        """The collectives every micro-batch repeats: a strategy that shards parameters gathers them in forward and
        again in backward, unless they stay gathered after forward (``reshard_after_forward`` false)."""
        if self.shards_parameters and not reshard_after_forward and ("allgather", "params") in self.per_micro_batch:
            gathers = list(self.per_micro_batch)
            gathers.remove(("allgather", "params"))
            return tuple(gathers)
        return self.per_micro_batch

    def zero_stage(self, reshard_after_forward: bool = True) -> int | None:
        """Its ZeRO stage (None for one process): how many of optimizer state, gradients and parameters it shards;
        parameters kept gathered between forward and backward count as stage 2."""
        if not self.distributed:
            return None
        stage = len(self.shards)
        return 2 if self.shards_parameters and not reshard_after_forward else stage


_REGISTRY: dict[str, StrategyInfo] = {}


def describe_strategy(info: StrategyInfo) -> StrategyInfo:
    """Register ``info`` under its name (once: a second description of a name is refused)."""
    if info.name == "auto" or info.name in _REGISTRY:
        raise TypeError(f"strategy {info.name!r} is described twice (or named auto, the resolver's own)")
    if info.one_process is not None and info.one_process != info.name and info.one_process not in _REGISTRY:
        raise TypeError(f"strategy {info.name!r} becomes {info.one_process!r} with one process: describe that first")
    _REGISTRY[info.name] = info
    return info


def strategy_infos() -> dict[str, StrategyInfo]:
    """Every strategy described, by name, in the order described."""
    return dict(_REGISTRY)


def strategy_help() -> str:
    """``--strategy``'s help line: every strategy described now (a user's own too), each with its summary."""
    described = [f"{name} - {info.summary}" for name, info in _REGISTRY.items()]
    return "how the model is held across ranks: " + " | ".join(
        [*described, "auto - none for one process, ddp for several"]
    )


def strategy_info(name: str) -> StrategyInfo:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown strategy '{name}' (choose from: {', '.join(STRATEGY_CHOICES)})") from None


def resolve_strategy(name: str, world: int) -> StrategyInfo:
    """The strategy a run of ``world`` ranks asking for ``name`` uses: ``auto`` is ``none`` for one process and
    ``ddp`` for several; a strategy with one process is what its ``one_process`` says (refused where None); a
    world outside its range is refused (:class:`ConfigError`), before any process starts."""
    if name == "auto":
        name = "none" if world == 1 else "ddp"
    info = strategy_info(name)
    if world == 1 and info.one_process is not None and info.one_process != name:
        return strategy_info(info.one_process)
    if world < info.min_world:
        raise ConfigError(f"strategy {name} needs {info.min_world} or more processes (one process: --strategy none)")
    if info.max_world is not None and world > info.max_world:
        raise ConfigError(f"strategy {name} runs {info.max_world} process, not {world} (several: --strategy ddp)")
    return info


class _Choices(Sequence[str]):
    """``--strategy``'s choices as they are now: ``auto`` and every strategy described (a live view, so a strategy
    described later, a user's own, is a choice too)."""

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return ("auto", *_REGISTRY)[index]

    def __len__(self) -> int:
        return 1 + len(_REGISTRY)

    def __iter__(self) -> Iterator[str]:
        return iter(("auto", *_REGISTRY))

    def __contains__(self, value: object) -> bool:
        return value == "auto" or value in _REGISTRY

    def __repr__(self) -> str:
        return repr(tuple(self))


STRATEGY_CHOICES: Sequence[str] = _Choices()

describe_strategy(StrategyInfo("none", "one process: the model on its device, nothing to communicate", max_world=1))
describe_strategy(
    StrategyInfo(
        "ddp",
        "data parallel: a full replica per rank, gradients averaged in backward (DistributedDataParallel)",
        collectives=(("allreduce", "grads"),),
        gradient_buckets=True,
        min_world=2,
    )
)
describe_strategy(
    StrategyInfo(
        "fsdp",
        "fully sharded data parallel (FSDP2): parameters, gradients and optimizer state sharded over the ranks",
        shards=frozenset(SHARDABLE),
        collectives=(("reducescatter", "grads"),),
        per_micro_batch=(("allgather", "params"), ("allgather", "params")),
        min_world=2,
        one_process=None,
    )
)
describe_strategy(
    StrategyInfo(
        "zero1",
        "ZeRO stage 1: DDP with the optimizer state sharded over the ranks (torch's ZeroRedundancyOptimizer)",
        shards=frozenset({"optimizer"}),
        collectives=(("allreduce", "grads"), ("broadcast", "params")),
        gradient_buckets=True,
        min_world=2,
    )
)
