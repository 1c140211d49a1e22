"""Every launch mode produces a valid run: serial, spawned gloo ranks, torchrun, and two nodes on loopback."""

from __future__ import annotations

import csv
import sys
from concurrent.futures import ThreadPoolExecutor

import ignite.distributed as idist
from conftest import QUICK, check_ok, load_summary, run, run_cli, run_script

from ignite_ddl import LaunchSettings, launch
from ignite_ddl.launcher import free_port


def big_result(local_rank: int) -> dict:
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
    result = run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
         "--master_port", port, "-m", "ignite_ddl", "train", *QUICK, "--output-dir", str(out)],
    )  # fmt: skip
    check_ok(result)
    summary = load_summary(out, world_size=2)
    assert summary["launch_mode"] == "env" and summary["backend"] == "gloo"
    # one final line for the run, not one per rank; and no progress-bar redraws in piped output
    assert [line for line in result.stdout.splitlines() if "samples/s, val accuracy" in line][1:] == []
    assert "\r" not in result.stderr and "it/s]" not in result.stderr


def test_two_nodes_on_loopback(tmp_path):
    port = str(free_port())

    def node(rank: int):
        return run_cli("train", "--backend", "gloo", "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1",
                       "--master-addr", "127.0.0.1", "--master-port", port, *QUICK,
                       "--output-dir", str(tmp_path / f"node{rank}"))  # fmt: skip

    with ThreadPoolExecutor(2) as pool:
        for result in pool.map(node, range(2)):
            check_ok(result)
    summary = load_summary(tmp_path / "node0", world_size=2)
    assert summary["nnodes"] == 2 and summary["nproc_per_node"] == 1
    assert (tmp_path / "node1" / "logs" / "rank1.log").is_file()


def test_fork_after_multithreaded_compute_does_not_hang(tmp_path):
    result = run_script("fork_after_compute.py", str(tmp_path), timeout=60)
    check_ok(result)
    assert "{'threads': 2, 'finite': True, 'w': 100000.0}" in result.stdout


def test_launch_returns_rank0_result(tmp_path):
    # a large result must not block rank 0 at exit (the parent drains the pipe while ranks run)
    settings = LaunchSettings(backend="gloo", nproc_per_node=2, start_method="spawn", log_dir=str(tmp_path))
    result = launch(big_result, settings)
    assert result["rank"] == 0 and len(result["payload"]) == 1_000_000


def test_dataloader_workers_are_not_restarted_each_epoch(tmp_path):
    # Ranks started with "spawn": a DataLoader worker started afresh each epoch would re-import torch (seconds).
    out = tmp_path / "run"
    check_ok(run_cli("train", "--nproc-per-node", "2", "--start-method", "spawn", "--num-workers", "2", "--epochs", "3",
                     *QUICK[:-3], "--no-progress", "--output-dir", str(out)))  # fmt: skip
    with open(out / "steps_rank0.csv") as f:
        rows = list(csv.DictReader(f))
    first_of_epoch = [float(r["data_s"]) for r in rows if int(r["iteration"]) % 8 == 1]
    assert len(first_of_epoch) == 3 and max(first_of_epoch[1:]) < 0.3, first_of_epoch
    assert load_summary(out, world_size=2)["start_method"] == "spawn"
