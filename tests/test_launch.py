"""Every launch mode produces a valid run: serial, spawned gloo ranks, torchrun, and two nodes on loopback."""

from __future__ import annotations

import csv
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import ignite.distributed as idist
import pytest
from conftest import QUICK, check_ok, load_summary, run, run_cli, run_script

from ignite_ddl import LaunchSettings, launch
from ignite_ddl.core.errors import LaunchFailed
from ignite_ddl.launcher import free_port


def big_result(local_rank: int) -> dict:
    return {"rank": idist.get_rank(), "payload": "x" * 1_000_000}


@pytest.mark.slow
def test_serial_run(tmp_path):
    out = tmp_path / "run"
    check_ok(run_cli("train", *QUICK, "--output-dir", str(out)))
    summary = load_summary(out, world_size=1)
    assert summary["backend"] == "none" and summary["launch_mode"] == "serial"


@pytest.mark.slow
@pytest.mark.distributed
def test_spawn_two_processes(spawn_run):
    summary = load_summary(spawn_run, world_size=2)
    assert summary["backend"] == "gloo" and summary["launch_mode"] == "spawn"
    assert summary["batch"] == {"requested_global": 64, "per_rank": 32, "global": 64}
    # 2 cores shared by 2 processes: one intra-op thread each (or more where the machine has more cores)
    assert summary["threads_per_process"] >= 1
    assert (spawn_run / "logs" / "rank0.log").is_file() and (spawn_run / "logs" / "rank1.log").is_file()


@pytest.mark.slow
@pytest.mark.distributed
def test_torchrun(tmp_path):
    out = tmp_path / "run"
    port = str(free_port())
    result = run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            port,
            "-m",
            "ignite_ddl",
            "train",
            *QUICK,
            "--output-dir",
            str(out),
        ],
    )
    check_ok(result)
    summary = load_summary(out, world_size=2)
    assert summary["launch_mode"] == "env" and summary["backend"] == "gloo"
    # one final line for the run, not one per rank; and no progress-bar redraws in piped output
    assert [line for line in result.stdout.splitlines() if "samples/s, val accuracy" in line][1:] == []
    assert "\r" not in result.stderr and "it/s]" not in result.stderr


@pytest.mark.slow
@pytest.mark.distributed
def test_two_nodes_on_loopback(tmp_path):
    port = str(free_port())

    def node(rank: int):
        return run_cli(
            "train",
            "--backend",
            "gloo",
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--nproc-per-node",
            "1",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            port,
            *QUICK,
            "--output-dir",
            str(tmp_path / f"node{rank}"),
        )

    with ThreadPoolExecutor(2) as pool:
        for result in pool.map(node, range(2)):
            check_ok(result)
    summary = load_summary(tmp_path / "node0", world_size=2)
    assert summary["nnodes"] == 2 and summary["nproc_per_node"] == 1
    assert (tmp_path / "node1" / "logs" / "rank1.log").is_file()


@pytest.mark.slow
def test_fork_after_multithreaded_compute_does_not_hang(tmp_path):
    result = run_script("fork_after_compute.py", str(tmp_path), timeout=60)
    check_ok(result)
    assert "{'threads': 2, 'finite': True, 'w': 100000.0}" in result.stdout


@pytest.mark.slow
@pytest.mark.distributed
def test_launch_returns_rank0_result(tmp_path):
    # a large result must not block rank 0 at exit (the parent drains the pipe while ranks run)
    settings = LaunchSettings(backend="gloo", nproc_per_node=2, start_method="spawn", log_dir=str(tmp_path))
    result = launch(big_result, settings)
    assert result["rank"] == 0 and len(result["payload"]) == 1_000_000


@pytest.mark.slow
@pytest.mark.distributed
def test_dataloader_workers_are_not_restarted_each_epoch(tmp_path):
    # Ranks started with "spawn": a DataLoader worker started afresh each epoch would re-import torch (seconds).
    out = tmp_path / "run"
    check_ok(
        run_cli(
            "train",
            "--nproc-per-node",
            "2",
            "--start-method",
            "spawn",
            "--num-workers",
            "2",
            "--epochs",
            "3",
            *QUICK[:-3],
            "--no-progress",
            "--output-dir",
            str(out),
        )
    )
    with open(out / "steps_rank0.csv") as f:
        rows = list(csv.DictReader(f))
    first_of_epoch = [float(r["data_s"]) for r in rows if int(r["iteration"]) % 8 == 1]
    assert len(first_of_epoch) == 3 and max(first_of_epoch[1:]) < 0.3, first_of_epoch
    assert load_summary(out, world_size=2)["start_method"] == "spawn"


def _stalled_rank_main(real, marker, always):
    """A rank main whose local rank 1 stops before joining the group (on the first launch only, unless always)."""

    def rank_main(local_rank, *args):
        if local_rank == 1 and (always or not marker.exists()):
            marker.touch()
            time.sleep(3600)  # never reaches the process group
        return real(local_rank, *args)

    return rank_main


def world_size(local_rank: int) -> int:
    return idist.get_world_size()


@pytest.mark.slow
@pytest.mark.distributed
def test_a_rank_that_never_joins_is_restarted_once(tmp_path, monkeypatch, capfd):
    from ignite_ddl.launcher import spawn as launcher

    monkeypatch.setattr(launcher, "JOIN_TIMEOUT_S", 3.0)
    monkeypatch.setattr(launcher, "_rank_main", _stalled_rank_main(launcher._rank_main, tmp_path / "m", False))
    # forked ranks run the patched function (inherited from this process): rank 1 stalls on the first launch
    assert launch(world_size, LaunchSettings(backend="gloo", nproc_per_node=2, start_method="fork")) == 2
    assert "rank(s) 1 did not join the process group within 3 s" in capfd.readouterr().err


@pytest.mark.slow
@pytest.mark.distributed
def test_a_rank_that_never_joins_ends_the_launch(tmp_path, monkeypatch):
    from ignite_ddl.launcher import spawn as launcher

    monkeypatch.setattr(launcher, "JOIN_TIMEOUT_S", 2.0)
    monkeypatch.setattr(launcher, "_rank_main", _stalled_rank_main(launcher._rank_main, tmp_path / "m", True))
    began = time.monotonic()
    with pytest.raises(LaunchFailed, match=r"rank\(s\) 1 did not join the process group within 2 s, 2 times"):
        launch(world_size, LaunchSettings(backend="gloo", nproc_per_node=2, start_method="fork"))
    assert time.monotonic() - began < 60  # two attempts of 2 s and the stops, far from the 300 s rendezvous timeout
