"""Invalid setups are refused before any process starts: one line on stderr, exit status 2, nothing written."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import SMALL_SWEEP, run_cli

from ignite_ddl import ConfigError, LaunchSettings, TrainConfig, plan_launch

REFUSED = {
    "nccl without CUDA": (["--backend", "nccl"], "needs CUDA"),
    "xla without torch_xla": (["--backend", "xla-tpu"], "needs torch_xla"),
    "nnodes without node rank": (["--nnodes", "2"], "--node-rank"),
    "nnodes without address": (["--nnodes", "2", "--node-rank", "1", "--master-port", "29500"], "--master-addr"),
    "nproc < 1": (["--nproc-per-node", "0"], "nproc_per_node must be >= 1"),
    "unknown backend": (["--backend", "mpi2"], "unknown backend 'mpi2'"),
    "unknown model": (["--model", "no_such_net"], "unknown model 'no_such_net'"),
    "unknown dataset": (["--dataset", "imagenet9"], "unknown dataset 'imagenet9'"),
    "batch smaller than world": (["--nproc-per-node", "2", "--batch-size", "1"], "cannot be split over 2"),
    "several processes without a backend": (["--backend", "none", "--nproc-per-node", "2"], "single process"),
    "mnist missing": (["--dataset", "mnist", "--data-dir", "{tmp}/nodata"], "pass --download"),
    "cifar10 missing": (["--dataset", "cifar10", "--data-dir", "{tmp}/nodata"], "pass --download"),
    "resume file missing": (["--resume", "{tmp}/nothing.pt"], "not found"),
    "fp16 on CPU": (["--amp", "fp16"], "needs a CUDA GPU"),
    "unknown amp": (["--amp", "fp8"], "unknown amp"),
    "negative epochs": (["--epochs", "-1"], "epochs must be >= 1"),
    "wrong type": (["--epochs", "two"], "invalid int value"),
    "unknown option": (["--bogus", "1"], "unrecognized arguments"),
    "node rank out of range": (["--nnodes", "2", "--node-rank", "2"], "node_rank must be in [0, 1]"),
    # 16 iterations, PowerSGD compressing from the 15th: the measured window (5 later) would hold no compressed step.
    "window straddling PowerSGD's start": (
        ["--nproc-per-node", "2", "--comm-hook", "powersgd", "--powersgd-start-iter", "14", "--train-size", "512"]
        + ["--batch-size", "32", "--epochs", "1"],
        "it would measure no compressed step",
    ),
    "static graph with accumulation": (
        ["--nproc-per-node", "2", "--static-graph", "--accumulate", "2"],
        "--static-graph cannot be combined with --accumulate 2",
    ),
}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Run every refused case at once (each is a fresh interpreter that mostly waits on imports)."""
    tmp = tmp_path_factory.mktemp("refusals")

    def refuse(case: str):
        out = tmp / case.replace(" ", "_")
        args = [a.format(tmp=tmp) for a in REFUSED[case][0]]
        return run_cli("train", *args, "--output-dir", str(out), timeout=120), out

    with ThreadPoolExecutor(len(REFUSED)) as pool:
        return dict(zip(REFUSED, pool.map(refuse, REFUSED)))


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_before_start(case, refusals):
    result, out = refusals[case]
    returncode, stdout, stderr = result.returncode, result.stdout, result.stderr
    assert returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ignite-ddl: error:"), stderr
    assert REFUSED[case][1] in lines[0]
    assert "Traceback" not in stdout + stderr
    assert not out.exists(), "a refused run must not write anything"


@pytest.mark.slow
def test_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_cli("train", "--output-dir", str(blocker / "run"), timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "is not writable" in result.stderr


def test_more_nccl_processes_than_gpus():
    with pytest.raises(ConfigError, match="one process per GPU: 2 processes asked for, 1 GPU"):
        plan_launch(LaunchSettings(backend="nccl", nproc_per_node=2), cuda_devices=1)


def test_more_gloo_processes_than_visible_gpus():
    """Ignite calls torch.cuda.set_device(local_rank) wherever CUDA is available, whatever the backend: two gloo
    processes on one GPU failed in rank 1 with 'invalid device ordinal' on an H200. Refused before spawning; with no
    GPU visible the same launch is planned."""
    with pytest.raises(ConfigError, match="process r of a node the GPU cuda:r: 2 processes asked for, 1 GPU"):
        plan_launch(LaunchSettings(backend="gloo", nproc_per_node=2), cuda_devices=1, environ={})
    assert plan_launch(LaunchSettings(backend="gloo", nproc_per_node=2), cuda_devices=0, environ={}).world_size == 2
    assert plan_launch(LaunchSettings(backend="gloo", nproc_per_node=2), cuda_devices=2, environ={}).world_size == 2


def test_torchrun_environment_is_not_spawned_again():
    env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}
    plan = plan_launch(LaunchSettings(), cuda_devices=0, environ=env)
    assert (plan.mode, plan.backend, plan.world_size, plan.nproc_per_node, plan.nnodes) == ("env", "gloo", 4, 2, 2)
    with pytest.raises(ConfigError, match="started by torchrun"):
        plan_launch(LaunchSettings(nproc_per_node=2), cuda_devices=0, environ=env)


def test_auto_backend():
    assert plan_launch(LaunchSettings(), cuda_devices=0, environ={}).backend is None
    assert plan_launch(LaunchSettings(nproc_per_node=2), cuda_devices=0, environ={}).backend == "gloo"
    assert plan_launch(LaunchSettings(nproc_per_node=2), cuda_devices=2, environ={}).backend == "nccl"


def test_threads_split_cores(monkeypatch):
    monkeypatch.setattr("ignite_ddl.launcher.settings.cpu_cores", lambda: 8)
    assert plan_launch(LaunchSettings(nproc_per_node=4), cuda_devices=0, environ={}).threads == 2
    assert plan_launch(LaunchSettings(nproc_per_node=16), cuda_devices=0, environ={}).threads == 1
    assert plan_launch(LaunchSettings(nproc_per_node=4, threads=3), cuda_devices=0, environ={}).threads == 3


def test_config_from_dict_refuses_unknown_keys_and_types():
    with pytest.raises(ConfigError, match="unknown option"):
        TrainConfig.from_dict({"epochz": 1})
    with pytest.raises(ConfigError, match="expects int"):
        TrainConfig.from_dict({"epochs": "1"})
    with pytest.raises(ConfigError, match="expects int"):
        TrainConfig.from_dict({"epochs": True})
    assert TrainConfig.from_dict({"lr": 1, "resume": None}).lr == 1


EVERY_ONE_REFUSED = "all 2 configurations of the grid are refused, nothing to run; the first, configuration {"


@pytest.mark.slow
@pytest.mark.parametrize(
    "grid, said",
    [
        (["--grid", "seed=1,2", "--set", "strategy=fsdp"], "strategy fsdp needs 2 or more processes"),
        (["--grid", "accumulate=2,4", "--set", "static_graph=true"], "--static-graph cannot be combined"),
        (["--grid", "batch_size=62,30", "--set", "nproc_per_node=2", "--set", "accumulate=2"], "make it a multiple"),
        (
            ["--grid", "powersgd_start_iter=6,7", "--set", "comm_hook=powersgd", "--set", "nproc_per_node=2"]
            + ["--set", "batch_size=32"],
            "it would measure no compressed step",
        ),
    ],
    ids=["fsdp-one-process", "static-graph-accumulate", "batch-split", "powersgd-window"],
)
def test_a_sweep_whose_every_configuration_is_refused_is_refused_before_its_first_run(tmp_path, grid, said):
    """A configuration invalid on any machine is one refused configuration (the sweep records it and runs the
    others: tests/test_sweep.py); a grid of nothing but those is refused whole, in one line, before anything runs."""
    out = tmp_path / "sweep"
    result = run_cli("sweep", *grid, *SMALL_SWEEP, "--output-dir", str(out), timeout=300)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], lines
    assert lines[0].startswith(f"ignite-ddl: error: {EVERY_ONE_REFUSED}"), lines
    assert not out.exists(), "nothing may be written before every configuration is checked"
