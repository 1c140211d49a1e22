"""Every launch mode produces a valid run: serial, spawned gloo ranks, torchrun, and two nodes on loopback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ignite.distributed as idist
from conftest import QUICK, check_ok, load_summary, run_cli

from ignite_ddl import TrainConfig, launch
from ignite_ddl.launcher import free_port


def big_result(local_rank: int, config: TrainConfig) -> dict:
    return {"rank": idist.get_rank(), "payload": "x" * 1_000_000}


def test_serial_run(tmp_path):
    out = tmp_path / "run"
    check_ok(run_cli("train", *QUICK, "--output-dir", str(out)))
    summary = load_summary(out, world_size=1)
    assert summary["backend"] == "none" and summary["launch_mode"] == "serial"


def test_spawn_two_processes(spawn_run):
    summary = load_summary(spawn_run, world_size=2)
    assert summary["backend"] == "gloo" and summary["launch_mode"] == "spawn"
    assert summary["batch"] == {"requested_global": 64, "per_rank": 32, "global": 64}
    # 2 cores shared by 2 processes: one intra-op thread each (or more where the machine has more cores)
    assert summary["threads_per_process"] >= 1
    assert (spawn_run / "logs" / "rank0.log").is_file() and (spawn_run / "logs" / "rank1.log").is_file()


def test_torchrun(tmp_path):
    out = tmp_path / "run"
    port = str(free_port())
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
         "--master_port", port, "-m", "ignite_ddl", "train", *QUICK, "--output-dir", str(out)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    check_ok(result)
    summary = load_summary(out, world_size=2)
    assert summary["launch_mode"] == "env" and summary["backend"] == "gloo"


def test_two_nodes_on_loopback(tmp_path):
    port = str(free_port())
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ignite_ddl",
                "train",
                "--backend",
                "gloo",
                "--nnodes",
                "2",
                "--node-rank",
                str(i),
                "--nproc-per-node",
                "1",
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                port,
                *QUICK,
                "--output-dir",
                str(tmp_path / f"node{i}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(2)
    ]
    for node in nodes:
        stdout, stderr = node.communicate(timeout=180)
        assert node.returncode == 0, stderr
    summary = load_summary(tmp_path / "node0", world_size=2)
    assert summary["nnodes"] == 2 and summary["nproc_per_node"] == 1
    assert (tmp_path / "node1" / "logs" / "rank1.log").is_file()


def test_fork_after_multithreaded_compute_does_not_hang(tmp_path):
    script = Path(__file__).with_name("fork_after_compute.py")
    result = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=60)
    check_ok(result)
    assert "{'threads': 2, 'finite': True}" in result.stdout


def test_launch_returns_rank0_result(tmp_path):
    # a large result must not block rank 0 at exit (the parent drains the pipe while ranks run)
    config = TrainConfig(backend="gloo", nproc_per_node=2, start_method="spawn", output_dir=str(tmp_path))
    result = launch(big_result, config)
    assert result["rank"] == 0 and len(result["payload"]) == 1_000_000
