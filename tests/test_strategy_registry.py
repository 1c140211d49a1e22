"""Strategies own their options: each strategy registers itself under its ``--strategy`` name, declares its options
as a group (declared once, with their ranges, given flat as before), and checks them; another strategy's own options
are refused before any process starts."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
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


# Run in a fresh interpreter: FSDP's backward in the test process would leave autograd's threads behind, and a later
# test that forks ranks from the same process would fail ("Unable to handle autograd's threading in combination
# with fork-based multiprocessing").
_FSDP_CHECK = """
import sys
import ignite.distributed as idist, torch, torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.trainer.strategies import FSDPStrategy
store, wrap, reshard = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
dist.init_process_group("gloo", store=dist.FileStore(store, 1), rank=0, world_size=1)
torch.manual_seed(0)
strategy = FSDPStrategy()
net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
model = strategy.place(net, TrainConfig(fsdp_wrap=wrap, reshard_after_forward=reshard))
units = sum(isinstance(m, FSDPModule) for m in model.modules())
model(torch.randn(3, 4)).sum().backward()
model(torch.randn(3, 4))  # forward only: what stays gathered is what reshard_after_forward leaves
gathered = sorted({not isinstance(p, DTensor) for p in model.parameters()})
strategy.begin_evaluation(model)
strategy.end_evaluation(model)
resharded = all(isinstance(p, DTensor) for p in model.parameters())
idist.finalize()
print(units, gathered, resharded)
"""


@pytest.mark.distributed
@pytest.mark.parametrize("wrap, reshard, units", [("children", True, 3), ("model", False, 1)])
def test_fsdp_shards_as_its_options_say(tmp_path, wrap, reshard, units):
    """FSDP's options reach fully_shard on a real (one-rank) gloo group: the units (each child holding parameters,
    then the model; or the model alone), and whether a unit's parameters are freed after forward (sharded
    parameters are DTensors; gathered ones plain tensors) and resharded when evaluation ends."""
    done = subprocess.run(
        [sys.executable, "-c", _FSDP_CHECK, str(tmp_path / "store"), wrap, "1" if reshard else "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == f"{units} {[not reshard]} True"
