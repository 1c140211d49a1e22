"""The xla-tpu backend through ignite_ddl.launcher.xla, on torch_xla's CPU PJRT runtime with two replicas:
collectives, data shards, gradient averaging, the trainer and the step recorder's timing.

Runs only where torch_xla is installed (``.ci/xla`` builds such an environment). A process can start PJRT replicas
only while it has not used an XLA device, so every case runs in a fresh interpreter: ``python test_xla.py CASE DIR``
writes the case's result to DIR/result.json.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("torch_xla") is None:
    pytest.skip("torch_xla is not installed (.ci/xla runs these tests where it is)", allow_module_level=True)

import ignite.distributed as idist
import torch
from conftest import QUICK, check_ok, load_summary, run, run_cli, run_script
from ignite.engine import Engine
from torch import nn
from torch.utils.data import TensorDataset

from ignite_ddl import ConfigError, LaunchSettings, RunFailed, launch
from ignite_ddl.launcher import plan_launch, xla
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.measure.recorder import StepRecorder

pytestmark = [pytest.mark.xla]

REPLICAS = 2
XLA_ENV = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(REPLICAS)}
SHARDED = 9  # samples in the shards case: not divisible by 2, so the sampler pads one
SGD = {"lr": 0.2, "steps": 6, "batch": 8}  # the averaging case: 8 samples per replica

# -- what each case runs on every replica


def collectives(local_rank: int) -> list[dict]:
    rank, world, device = idist.get_rank(), idist.get_world_size(), idist.device()
    value, src = rank + 1, world - 1
    row = {
        "rank": rank,
        "local_rank": local_rank,
        "world": world,
        "device": str(device),
        "backend": idist.backend(),
        "nproc_per_node": idist.get_nproc_per_node(),
    }
    for op in ("SUM", "PRODUCT", "MIN", "MAX"):
        row[op] = idist.all_reduce(torch.tensor(float(value), device=device), op=op).item()
    row["all_reduce number"] = idist.all_reduce(value)
    row["all_gather tensor"] = idist.all_gather(torch.full((2,), float(value), device=device)).tolist()
    row["all_gather str"] = idist.all_gather("r" * value)  # lengths differ: idist pads them
    row["all_gather object"] = idist.all_gather({"rank": rank, "squares": [i * i for i in range(value)]})
    buffer = torch.arange(3.0, device=device) + value if rank == src else torch.empty(3, device=device)
    row["broadcast tensor"] = idist.broadcast(buffer, src=src).tolist()
    row["broadcast str"] = idist.broadcast("from the last rank" if rank == src else None, src=src, safe_mode=True)
    idist.barrier()
    if rank == src:
        time.sleep(0.3)
    idist.barrier()  # the others wait here for the late one
    row["left barrier"] = time.time()
    return gather_objects(row)


def shards(local_rank: int) -> list[dict]:
    loader = idist.auto_dataloader(TensorDataset(torch.arange(SHARDED)), batch_size=4, shuffle=True)
    epochs = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        epochs.append([i for (batch,) in loader for i in batch.cpu().tolist()])
    first = next(iter(loader))[0]
    row = {"rank": idist.get_rank(), "epochs": epochs, "batch_size": loader.batch_size, "on": first.device.type}
    return gather_objects(row)


def _sgd_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def _sgd_batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch, the same at every step: its own samples, so gradients differ between replicas."""
    x = torch.randn(SGD["batch"], 4, generator=torch.Generator().manual_seed(rank))
    return x, x.sum(dim=1, keepdim=True).sin()


def _flat(model: nn.Module) -> list[float]:
    return torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()]).tolist()


def sgd(local_rank: int) -> list[dict]:
    rank, device = idist.get_rank(), idist.device()
    torch.manual_seed(rank)  # different weights on purpose: auto_model must broadcast rank 0's
    model = idist.auto_model(_sgd_model())
    initial = _flat(model)
    optimizer = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=SGD["lr"]))
    losses = []
    for _ in range(SGD["steps"]):
        x, y = (t.to(device) for t in _sgd_batch(rank))
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    row = {
        "rank": rank,
        "initial": initial,
        "final": _flat(model),
        "losses": losses,
        "optimizer": type(optimizer).__name__,
        "is_sgd": isinstance(optimizer, torch.optim.SGD),
    }
    return gather_objects(row)


def recorder(local_rank: int) -> dict:
    """Step times of a step whose work is all lazy (it never syncs): a clock that did not launch and wait for the
    step would read only the time to trace it."""
    device = idist.device()
    weight = (torch.randn(384, 384) / 20).to(device)

    def step(engine: Engine | None, batch: torch.Tensor) -> torch.Tensor:
        x = batch.to(device)
        for _ in range(20):
            x = torch.tanh(x @ weight)
        return x  # the engine keeps it: a graph runs only for the tensors still alive

    def best_of_3(wait: bool) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            out = step(None, torch.randn(384, 384))
            if wait:
                xla.wait(launch=True)
            times.append(time.perf_counter() - start)
            del out  # not waited for: dropped unexecuted
        return min(times)

    traced = best_of_3(wait=False)
    engine = Engine(step)
    rec = StepRecorder(warmup=2, device=device).attach(engine)
    engine.run([torch.randn(384, 384) for _ in range(8)])
    return {"traced_s": traced, "executed_s": best_of_3(wait=True), "steps": rec.gather()}


def fail(local_rank: int) -> None:
    idist.barrier()
    if idist.get_rank() == 1:
        raise RuntimeError("injected failure")
    idist.barrier()  # rank 0 would wait here forever


CASES = {"collectives": collectives, "shards": shards, "sgd": sgd, "recorder": recorder, "fail": fail}


def main(case: str, out: str) -> None:
    try:
        result = launch(CASES[case], LaunchSettings(backend="xla-tpu", log_dir=str(Path(out) / "logs")))
    except RunFailed as e:
        result = {"failed_rank": e.rank, "message": e.message, "log_file": e.log_file}
    Path(out, "result.json").write_text(json.dumps(result))


# -- the tests


def run_case(case: str, tmp_path: Path) -> dict | list:
    check_ok(run_script("test_xla.py", case, str(tmp_path), env=XLA_ENV, timeout=300))
    return json.loads((tmp_path / "result.json").read_text())


def test_plan_uses_every_device_and_nothing_else():
    plan = plan_launch(LaunchSettings(backend="xla-tpu"), environ=XLA_ENV)
    assert (plan.mode, plan.nproc_per_node, plan.world_size) == ("spawn", REPLICAS, REPLICAS)
    assert plan_launch(LaunchSettings(backend="xla-tpu", nproc_per_node=REPLICAS), environ=XLA_ENV).world_size == 2
    assert plan_launch(LaunchSettings(backend="xla-tpu", nproc_per_node=1), environ=XLA_ENV).world_size == 1
    with pytest.raises(ConfigError, match="one process per XLA device .* 3 asked for, 2 XLA device"):
        plan_launch(LaunchSettings(backend="xla-tpu", nproc_per_node=3), environ=XLA_ENV)
    torchrun = {**XLA_ENV, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    with pytest.raises(ConfigError, match="not torchrun"):
        plan_launch(LaunchSettings(backend="xla-tpu"), environ=torchrun)


PLAIN_PROCESS = """
import ignite.distributed as idist
from ignite.utils import manual_seed
from ignite_ddl import ConfigError, LaunchSettings, plan_launch
from ignite_ddl.launcher import xla

xla.install()  # what every launch does first
manual_seed(0)  # Ignite's: it starts the XLA runtime in this process
print(idist.backend(), idist.device(), idist.get_world_size())
try:
    plan_launch(LaunchSettings(backend="xla-tpu"))
except ConfigError as e:
    print(e)
"""


def test_a_plain_process_stays_off_xla():
    # With the compatibility layer a launch installs, a plain process is not claimed by XLA; and once something
    # (Ignite's manual_seed) has started the XLA runtime in it, PJRT cannot start replicas from it any more.
    result = run([sys.executable, "-c", PLAIN_PROCESS], env=XLA_ENV)
    check_ok(result)
    lines = result.stdout.splitlines()
    assert lines[0] == "None cpu 1" and "already uses an XLA device" in lines[1]


def test_collectives(tmp_path):
    rows = run_case("collectives", tmp_path)
    assert [(r["rank"], r["local_rank"], r["device"]) for r in rows] == [(0, 0, "xla:0"), (1, 1, "xla:1")]
    for row in rows:
        assert (row["world"], row["backend"], row["nproc_per_node"]) == (2, "xla-tpu", 2)
        assert (row["SUM"], row["PRODUCT"], row["MIN"], row["MAX"]) == (3.0, 2.0, 1.0, 2.0)
        assert row["all_reduce number"] == 3
        assert row["all_gather tensor"] == [1.0, 1.0, 2.0, 2.0]
        assert row["all_gather str"] == ["r", "rr"]
        assert row["all_gather object"] == [{"rank": 0, "squares": [0]}, {"rank": 1, "squares": [0, 1]}]
        assert row["broadcast tensor"] == [2.0, 3.0, 4.0] and row["broadcast str"] == "from the last rank"
    # Both left the second barrier after the late rank's 0.3 s: they left it together.
    assert abs(rows[0]["left barrier"] - rows[1]["left barrier"]) < 0.2


def test_shards_are_disjoint_and_cover_the_dataset(tmp_path):
    rows = run_case("shards", tmp_path)
    assert all(r["batch_size"] == 2 and r["on"] == "xla" for r in rows)  # global 4 over 2 replicas, on the device
    for epoch in range(2):
        seen = [i for r in rows for i in r["epochs"][epoch]]
        assert [len(r["epochs"][epoch]) for r in rows] == [5, 5]  # ceil(9 / 2): one sample padded
        assert set(seen) == set(range(SHARDED)) and len(seen) - len(set(seen)) == 1
    assert rows[0]["epochs"][0] != rows[0]["epochs"][1]  # set_epoch reshuffles


def test_auto_optim_averages_gradients_over_replicas(tmp_path):
    rows = run_case("sgd", tmp_path)
    assert rows[0]["optimizer"] == "SGD" and rows[0]["is_sgd"]
    assert rows[0]["initial"] == rows[1]["initial"]  # rank 0's weights, broadcast by auto_model
    assert rows[0]["final"] == pytest.approx(rows[1]["final"], abs=1e-6)
    # The loss over both replicas' samples, which the averaged gradient descends.
    losses = [(mine + other) / 2 for mine, other in zip(rows[0]["losses"], rows[1]["losses"])]
    assert all(later < earlier for earlier, later in zip(losses, losses[1:])), losses
    # One process taking both replicas' samples as one batch ends with the same weights.
    model = _sgd_model()
    nn.utils.vector_to_parameters(torch.tensor(rows[0]["initial"]), model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=SGD["lr"])
    x, y = (torch.cat(pair) for pair in zip(*(_sgd_batch(rank) for rank in range(REPLICAS))))
    for _ in range(SGD["steps"]):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    assert rows[0]["final"] == pytest.approx(_flat(model), abs=1e-4)


def test_recorder_times_the_execution_of_a_lazy_step(tmp_path):
    result = run_case("recorder", tmp_path)
    steps, executed = result["steps"], result["executed_s"]
    assert result["traced_s"] < 0.5 * executed  # the case tells the two apart
    assert [r["iterations"] for r in steps["ranks"]] == [6, 6] and steps["global"]["samples"] == 2 * 6 * 384
    assert all(r["step_s_p50"] > 0.5 * executed for r in steps["ranks"])


def test_training_run(tmp_path):
    out = tmp_path / "run"
    check_ok(
        run_cli(
            "train",
            "--backend",
            "xla-tpu",
            "--epochs",
            "3",
            *QUICK[:-3],
            "--checkpoint-every",
            "8",
            "--no-progress",
            "--output-dir",
            str(out),
            env=XLA_ENV,
            timeout=300,
        )
    )
    summary = load_summary(out, world_size=REPLICAS)
    assert (summary["backend"], summary["device"]["type"], summary["launch_mode"]) == ("xla-tpu", "xla", "spawn")
    assert summary["batch"] == {"requested_global": 64, "per_rank": 32, "global": 64, "accumulate": 1, "micro": 32}
    losses = [epoch["train_loss"] for epoch in summary["history"]]
    assert losses[-1] < losses[0], losses
    # The step recorder's summary: both ranks, the optimizer phase holding the device time of the step.
    steps = summary["steps"]
    assert [r["rank"] for r in steps["ranks"]] == [0, 1] and steps["global"]["samples_per_s"] > 0
    for r in steps["ranks"]:
        assert r["iterations"] == summary["iterations"] - 5 and r["optimizer_s_mean"] > r["forward_s_mean"]
        assert not math.isnan(r["own_s_mean"])
    assert (out / "steps_rank1.csv").is_file()
    # Every checkpoint holds the model (Ignite's XLA saving alone can leave an empty file).
    checkpoints = sorted((out / "checkpoints").glob("*.pt"))
    assert checkpoints and all("model" in torch.load(c, weights_only=True) for c in checkpoints)


def test_one_replica_of_several_devices(tmp_path):
    out = tmp_path / "run"
    check_ok(
        run_cli(
            "train",
            "--backend",
            "xla-tpu",
            "--nproc-per-node",
            "1",
            *QUICK,
            "--output-dir",
            str(out),
            env=XLA_ENV,
            timeout=300,
        )
    )
    summary = load_summary(out, world_size=1)
    assert summary["backend"] == "xla-tpu" and summary["device"]["type"] == "xla"


def test_a_failing_replica_is_named(tmp_path):
    # Rank 1's own error, not rank 0's timeout in the barrier it was left waiting in.
    result = run_case("fail", tmp_path)
    assert result["failed_rank"] == 1 and result["message"] == "RuntimeError: injected failure"
    assert "injected failure" in Path(result["log_file"]).read_text()


if __name__ == "__main__":
    main(*sys.argv[1:])
