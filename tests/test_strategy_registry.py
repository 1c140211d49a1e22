"""Strategies own their options: each strategy registers itself under its ``--strategy`` name, declares its options
as a group (declared once, with their ranges, given flat as before), and checks them; another strategy's own options
are refused before any process starts."""

from __future__ import annotations

import dataclasses
import re

import ignite.distributed as idist
import pytest
import torch
import torch.distributed as dist
from torch import nn

from ignite_ddl.core.config import STRATEGIES, DDPOptions, FSDPOptions, StrategyOptions, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import option_specs
from ignite_ddl.trainer.strategies import DDPStrategy, FSDPStrategy, Strategy, registered, strategy_for


def test_every_strategy_the_option_offers_registered_itself():
    found = registered()
    assert set(found) | {"auto"} == set(STRATEGIES)
    assert found["ddp"] is DDPStrategy and found["fsdp"] is FSDPStrategy
    assert DDPStrategy.options is DDPOptions and FSDPStrategy.options is FSDPOptions
    assert all(s.options is None or issubclass(s.options, StrategyOptions) for s in found.values())
    with pytest.raises(TypeError):
        Strategy()  # type: ignore[abstract]  # the base says what a strategy must do, and places nothing

    class Unfinished(Strategy):  # no place(): abstract, so not registered
        name = "ddp"

    with pytest.raises(TypeError):
        Unfinished()  # type: ignore[abstract]
    assert registered()["ddp"] is DDPStrategy
    with pytest.raises(TypeError, match="not one of --strategy's choices"):

        class Zero3(Strategy):
            name = "zero3"

            def place(self, model: nn.Module, config: TrainConfig) -> nn.Module:
                return model


def test_a_strategys_options_are_declared_once_in_its_group():
    """The run's options are the groups' declarations, ranges included: the flat names users give (flags, spec
    keys) are the group's fields, and a run's config gives each group back whole."""
    run = option_specs(TrainConfig)
    for group in (DDPOptions, FSDPOptions):
        for name, spec in option_specs(group).items():
            assert run[name] == spec, name
    config = TrainConfig(bucket_cap_mb=4, comm_hook="bf16", fsdp_wrap="model")
    assert config.ddp == DDPOptions(bucket_cap_mb=4.0, comm_hook="bf16")
    assert config.fsdp == FSDPOptions(fsdp_wrap="model")
    assert dataclasses.asdict(config.ddp).keys() == option_specs(DDPOptions).keys()
    with pytest.raises(ConfigError, match="bucket_cap_mb must be > 0, got 0"):
        TrainConfig(bucket_cap_mb=0)
    with pytest.raises(ConfigError, match="unknown fsdp_wrap 'layers'"):
        TrainConfig(fsdp_wrap="layers")


@pytest.mark.parametrize(
    "strategy, world, options, backend, message",
    [
        ("fsdp", 2, {"comm_hook": "bf16"}, "gloo", "--comm-hook bf16: DDP option(s), for --strategy ddp"),
        ("fsdp", 2, {"static_graph": True}, None, "--static-graph: DDP option(s), for --strategy ddp (this run's"),
        ("ddp", 2, {"reshard_after_forward": False}, "gloo", "--no-reshard-after-forward: FSDP option(s)"),
        ("ddp", 2, {"fsdp_wrap": "model"}, "gloo", "--fsdp-wrap model: FSDP option(s), for --strategy fsdp"),
        ("ddp", 2, {"gradient_as_bucket_view": True}, "xla-tpu", "need torch's DistributedDataParallel, not xla"),
        ("fsdp", 2, {"fsdp_mixed_precision": "fp16"}, "gloo", "fsdp_mixed_precision fp16 is for CUDA ranks"),
    ],
)
def test_a_strategy_refuses_what_it_cannot_do(strategy, world, options, backend, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        strategy_for(strategy, world).check_options(TrainConfig(**options), backend)


@pytest.mark.parametrize(
    "strategy, world, options",
    [
        ("ddp", 1, {"comm_hook": "bf16", "reshard_after_forward": False}),  # one process: nothing to communicate
        ("ddp", 2, {"bucket_cap_mb": 1.0, "static_graph": True}),
        ("fsdp", 2, {"bucket_cap_mb": 1.0, "fsdp_mixed_precision": "bf16"}),  # DDP's tuning only: ignored by FSDP
    ],
)
def test_a_strategy_accepts_its_own_options(strategy, world, options):
    strategy_for(strategy, world).check_options(TrainConfig(**options), "gloo")


@pytest.mark.distributed
@pytest.mark.parametrize("wrap, reshard, units", [("children", True, 3), ("model", False, 1)])
def test_fsdp_shards_as_its_options_say(tmp_path, wrap, reshard, units):
    """FSDP's options reach fully_shard on a real (one-rank) gloo group: the units (each child holding parameters,
    then the model; or the model alone), and whether a unit's parameters are freed after forward (sharded
    parameters are DTensors; gathered ones plain tensors) and kept so through evaluation's end."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        strategy = FSDPStrategy()
        model = strategy.place(net, TrainConfig(fsdp_wrap=wrap, reshard_after_forward=reshard))
        assert sum(isinstance(m, FSDPModule) for m in model.modules()) == units
        model(torch.randn(3, 4)).sum().backward()
        model(torch.randn(3, 4))  # forward only: what stays gathered is what reshard_after_forward leaves
        gathered = [not isinstance(p, DTensor) for p in model.parameters()]
        assert gathered == [not reshard] * len(gathered)
        strategy.begin_evaluation(model)
        strategy.end_evaluation(model)
        assert all(isinstance(p, DTensor) for p in model.parameters())  # evaluation ends resharded
    finally:
        # Ignite took the group as its computation model (place asks idist for the backend): finalize ends both,
        # so that the next test in this process finds neither.
        idist.finalize()
