"""ZeRO-1 (``--strategy zero1``, torch's ZeroRedundancyOptimizer) with real gloo ranks: it trains as DDP does, each
rank holds its share of Adam's state, its checkpoints resume DDP and the reverse; the plan and the step model count
it from its description; and a fourth strategy described in one module is seen by the plan, the trainer and the
report, which is what the strategies' seam promises."""

from __future__ import annotations

import pytest
import torch
from conftest import run_cli
from torch import nn

from ignite_ddl import TrainConfig, train
from ignite_ddl.core import strategies as core_strategies
from ignite_ddl.core.strategies import StrategyInfo, describe_strategy, resolve_strategy
from ignite_ddl.predict import memory
from ignite_ddl.predict.memory import gradient_bytes, predict
from ignite_ddl.predict.projection.model import Link
from ignite_ddl.predict.steptime import Observed, predict_steps
from ignite_ddl.trainer import strategies as trainer_strategies
from ignite_ddl.trainer.strategies import DDPStrategy, ZeRO1Strategy, strategy_for

TOLERANCE = 2e-5  # float32 sums in another order: test_strategies.py's
ADAM = {
    "optimizer": "adam",
    "lr": 0.003,
    "train_size": 256,
    "val_size": 60,
    "batch_size": 32,
    "warmup_iters": 1,
    "progress": False,
    "measure_flops": False,
}


def _final_weights(summary: dict) -> dict[str, torch.Tensor]:
    return torch.load(summary["last_checkpoint"], weights_only=True)["model"]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


@pytest.mark.slow
@pytest.mark.distributed
def test_zero1_trains_as_ddp_with_each_rank_holding_its_share_of_adams_state(tmp_path):
    runs = {
        s: train(TrainConfig(nproc_per_node=2, strategy=s, epochs=1, output_dir=str(tmp_path / s), **ADAM))
        for s in ("ddp", "zero1")
    }
    assert runs["zero1"]["strategy"] == "zero1"
    assert _max_diff(_final_weights(runs["zero1"]), _final_weights(runs["ddp"])) < TOLERANCE
    ddp = [r["held_bytes"] for r in runs["ddp"]["memory"]["ranks"]]
    zero = [r["held_bytes"] for r in runs["zero1"]["memory"]["ranks"]]
    assert sum(r["optimizer"] for r in zero) == ddp[0]["optimizer"] > 0  # the shards add up to one replica's state
    # ZeroRedundancyOptimizer partitions whole parameters, largest first: near half each, never all on one rank
    assert all(0.3 * ddp[0]["optimizer"] <= r["optimizer"] <= 0.7 * ddp[0]["optimizer"] for r in zero), zero
    assert all(r["params"] == ddp[0]["params"] and r["grads"] == ddp[0]["grads"] for r in zero)  # not sharded


@pytest.mark.slow
@pytest.mark.distributed
def test_a_zero1_checkpoint_resumes_ddp_and_a_ddp_checkpoint_resumes_zero1(tmp_path):
    whole = train(TrainConfig(nproc_per_node=2, strategy="ddp", epochs=2, output_dir=str(tmp_path / "w"), **ADAM))
    for first, then in (("zero1", "ddp"), ("ddp", "zero1")):
        out = tmp_path / f"{first}-{then}"
        part = train(TrainConfig(nproc_per_node=2, strategy=first, epochs=1, output_dir=str(out / "a"), **ADAM))
        resumed = train(
            TrainConfig(
                nproc_per_node=2,
                strategy=then,
                epochs=2,
                resume=part["last_checkpoint"],
                output_dir=str(out / "b"),
                **ADAM,
            )
        )
        assert resumed["iterations"] == whole["iterations"]
        assert _max_diff(_final_weights(resumed), _final_weights(whole)) < TOLERANCE, (first, then)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--zero-bucket-view", "--nproc-per-node", "2"], "--zero-bucket-view: ZERO1 option(s), for --strategy zero1"),
        (["--strategy", "fsdp", "--nproc-per-node", "2", "--static-graph"], "--static-graph: DDP option(s)"),
    ],
)
def test_a_strategys_own_options_are_refused_with_another(tmp_path, args, message):
    result = run_cli("train", *args, "--output-dir", str(tmp_path / "out"))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_zero1_accepts_ddps_options_and_one_process_is_one_process():
    zero = strategy_for("zero1", 2)
    assert isinstance(zero, ZeRO1Strategy) and isinstance(zero, DDPStrategy)
    zero.check_options(TrainConfig(strategy="zero1", nproc_per_node=2, bucket_cap_mb=4, zero_bucket_view=True))
    assert strategy_for("zero1", 1).name == "none"
    assert resolve_strategy("zero1", 2).zero_stage() == 1


def test_the_plan_gives_zero1_half_the_optimizer_state_of_ddp():
    base = {"model": "toy", "nproc_per_node": 2, "batch_size": 8, "optimizer": "adam", "checkpoints": False}
    ddp = predict(TrainConfig(strategy="ddp", **base), 0).parts
    zero = predict(TrainConfig(strategy="zero1", **base), 0).parts
    assert zero["optimizer"] == ddp["optimizer"] // 2 > 0
    # the heap is a replay's measurement (each rank's allocations through glibc, in a process of its own): it moves
    # by a fraction of a MiB between replays of this model, so it is left out of the exact comparison
    same = ("optimizer", "heap")
    assert {k: v for k, v in zero.items() if k not in same} == {k: v for k, v in ddp.items() if k not in same}
    assert abs(zero.get("heap", 0) - ddp.get("heap", 0)) < 16 * 2**20
    # saving a checkpoint, rank 0 consolidates the whole optimizer state (Adam: two tensors per parameter) beside its
    # own half: for a model this small that moment is the peak
    saving = predict(TrainConfig(strategy="zero1", **{**base, "checkpoints": True}), 0).parts
    params = 4 * (3 * 32 * 32 * 10 + 10 + 10 * 10 + 10)  # the toy model's float32 parameters
    assert saving["checkpoint"] == 2 * params and saving["optimizer"] == params


def test_the_heap_a_step_leaves_never_decides_whether_saving_is_the_peak():
    # a replay's heap moves between replays; the saving moment holds it as the step does, so however large it is the
    # consolidated optimizer state alone decides (a heap left out of the saving moment once made the step the peak)
    config = TrainConfig(strategy="zero1", model="toy", nproc_per_node=2, optimizer="adam", checkpoints=True)
    info = resolve_strategy("zero1", 2)
    params = gradient_bytes(config)
    step = {"params": params, "grads": params, "optimizer": params, "activations": 1000, "buckets": params}
    for heap in (0, 2**20, 2**30):
        saving = memory._checkpoint_phase(config, {**step, "heap": heap}, info)
        assert saving["checkpoint"] == 2 * params and saving["heap"] == heap and saving["activations"] == 0


def test_the_step_model_adds_zero1s_broadcast_to_ddps_all_reduce():
    one = Observed(0, {"nproc_per_node": 1, "batch_size": 64}, 1, "cpu", 0.5, 0.45, 0.55, 0.5, 0.1)
    two = {"nproc_per_node": 2, "batch_size": 64}
    configs = [one, Observed(1, two | {"strategy": "ddp"}, 2, "cpu", None, None, None, None)]
    configs.append(Observed(2, two | {"strategy": "zero1"}, 2, "cpu", None, None, None, None))
    link = Link("made up", alpha_s=1e-4, beta_Bps=1e9, source="test")
    found = predict_steps(configs, link, {1: 8_000_000, 2: 8_000_000})
    ddp, zero = found[1], found[2]
    assert zero.comm_s == pytest.approx(ddp.comm_s + link.alpha_s + 0.5 * 8_000_000 / link.beta_Bps)
    assert zero.compute_s < ddp.compute_s  # each rank updates half of the parameters


@pytest.fixture
def fourth_strategy():
    """A fourth strategy described and registered in this module alone, removed after the test."""
    info = describe_strategy(
        StrategyInfo(
            "halfway",
            "a toy: DDP whose description says it shards gradients",
            shards=frozenset({"grads"}),
            collectives=(("reducescatter", "grads"),),
            min_world=2,
        )
    )

    class Halfway(DDPStrategy):
        name = "halfway"

        def place(self, model: nn.Module, config: TrainConfig) -> nn.Module:
            return super().place(model, config)

    yield info
    del core_strategies._REGISTRY["halfway"], trainer_strategies._REGISTRY["halfway"]


@pytest.mark.slow
@pytest.mark.distributed
def test_a_fourth_strategy_described_in_one_module_is_seen_everywhere(tmp_path, fourth_strategy):
    from ignite_ddl.report.model import ConfigResult
    from ignite_ddl.report.tables import zero_stage

    config = TrainConfig(model="toy", strategy="halfway", nproc_per_node=2, batch_size=8, optimizer="adam")
    plan = predict(config, 0).parts  # the plan: gradients held as a 1/2 shard, no buckets
    ddp = predict(TrainConfig(model="toy", strategy="ddp", nproc_per_node=2, batch_size=8, optimizer="adam"), 0).parts
    assert plan["grads"] == ddp["grads"] // 2 and plan["buckets"] == 0
    summary = train(  # the trainer (ranks forked from this process, which described it)
        TrainConfig(
            strategy="halfway", nproc_per_node=2, start_method="fork", epochs=1, output_dir=str(tmp_path), **ADAM
        )
    )
    assert summary["strategy"] == "halfway"
    row = ConfigResult(index=0, grid={}, config=config.to_dict(), workload="toy", world_size=2)  # the report
    row.strategy = summary["strategy"]
    assert zero_stage(row) == 1


def test_every_strategy_is_described_to_the_user_by_its_own_summary(fourth_strategy, capsys):
    """``--strategy``'s help is written from the descriptions as they stand: a strategy described later (a user's
    own) is named there with its summary, beside the built-in ones."""
    from ignite_ddl.cli import main
    from ignite_ddl.core.strategies import strategy_infos

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for name, info in strategy_infos().items():
        assert f"{name} - {info.summary}" in shown, name
    assert "halfway - a toy: DDP whose description says it shards gradients" in shown


def test_the_experiments_second_spec_is_valid_and_asks_the_same_grid():
    from pathlib import Path

    from ignite_ddl.sweep import load_spec
    from ignite_ddl.sweep.grid import configurations

    folder = Path(__file__).parents[1] / "experiments" / "ddp_zero_fsdp"
    grids = [configurations(load_spec(folder / name)) for name in ("spec.yaml", "wide_mlp.yaml")]
    layouts = [{(g["strategy"], g["reshard_after_forward"], g["accumulate"]) for g in grid} for grid in grids]
    assert layouts[0] == layouts[1] and len(layouts[0]) == 8  # ddp, zero1, fsdp x 2 reshard modes, x accumulate 1 / 4


@pytest.mark.slow
@pytest.mark.distributed
def test_the_ddp_zero_fsdp_experiment_runs_cut_down(tmp_path):
    """experiments/ddp_zero_fsdp at toy size, predictions on: every configuration completes and the report names
    each one's ZeRO stage beside its predicted and measured memory."""
    out = tmp_path / "sweep"
    result = run_cli(
        "sweep",
        "experiments/ddp_zero_fsdp/spec.yaml",
        "--repeats=1",
        "--set=workload_args.n_layer=1",
        "--set=workload_args.d_model=32",
        "--set=workload_args.train_sequences=64",
        "--set=warmup_iters=1",
        f"--output-dir={out}",
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    from ignite_ddl.core.results import read_results

    records = read_results(out / "results.jsonl")
    assert len(records) == 8 and {r["status"] for r in records} == {"completed"}
    assert {r["summary"]["strategy"] for r in records} == {"ddp", "zero1", "fsdp"}
    report = (out / "report.md").read_text()
    memory = report.split("ZeRO stage", 1)[1].split("\n\n", 1)[0]
    for strategy, stage in (("ddp", "0"), ("zero1", "1"), ("fsdp", "3"), ("fsdp", "2")):
        assert f"| {strategy} | {stage} |" in memory, memory
