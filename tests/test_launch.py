"""Every launch mode produces a valid run: serial, spawned gloo ranks, torchrun, and two nodes on loopback."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ignite.distributed as idist
import pytest
from conftest import QUICK, check_ok, load_summary, run, run_cli, run_script
from ignite.engine import Events

from ignite_ddl import LaunchSettings, TrainConfig, launch, train
from ignite_ddl.core.errors import LaunchFailed, RunFailed
from ignite_ddl.launcher import free_port

TINY_RUN = {"train_size": 256, "val_size": 64, "batch_size": 32, "epochs": 1, "measure_flops": False}


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
    assert summary["batch"] == {"requested_global": 64, "per_rank": 32, "global": 64, "accumulate": 1, "micro": 32}
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


def _note_workers(run) -> None:
    """On every rank, at the end of each epoch: the pids of its child processes (its DataLoader workers)."""
    from ignite_ddl.core.procfs import children_map

    path = Path(run.config.output_dir) / f"workers_rank{idist.get_rank()}.txt"

    @run.trainer.on(Events.EPOCH_COMPLETED)
    def note(engine):
        with open(path, "a") as f:
            f.write(" ".join(map(str, sorted(children_map().get(os.getpid(), [])))) + "\n")


@pytest.mark.slow
@pytest.mark.distributed
def test_dataloader_workers_are_not_restarted_each_epoch(tmp_path):
    # Ranks started with "spawn": a DataLoader worker started afresh each epoch would re-import torch (seconds).
    config = TrainConfig(
        nproc_per_node=2,
        start_method="spawn",
        num_workers=2,
        output_dir=str(tmp_path),
        progress=False,
        **{**TINY_RUN, "epochs": 3},
    )
    summary = train(config, setup=_note_workers)
    assert summary["start_method"] == "spawn" and summary["epochs"] == 3
    for rank in (0, 1):
        epochs = (tmp_path / f"workers_rank{rank}.txt").read_text().splitlines()
        assert len(epochs) == 3 and epochs[0] and len(set(epochs)) == 1, epochs  # the same workers all along


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


_AT_FORK: list[tuple[int, int]] = []  # (Python threads, native threads) of this process at each of its forks
_RECORDING = [False]


def _record_fork() -> None:
    if _RECORDING[0]:
        _AT_FORK.append((threading.active_count(), len(os.listdir("/proc/self/task"))))


os.register_at_fork(before=_record_fork)


@contextlib.contextmanager
def forks_recorded() -> Iterator[list[tuple[int, int]]]:
    """The (Python threads, native threads) of this process at each fork made inside the ``with`` block."""
    _AT_FORK.clear()
    _RECORDING[0] = True
    try:
        yield _AT_FORK
    finally:
        _RECORDING[0] = False


@pytest.mark.slow
@pytest.mark.distributed
def test_a_rank_that_never_joins_is_restarted_once(tmp_path, monkeypatch, capfd):
    from ignite_ddl.launcher import spawn as launcher

    monkeypatch.setattr(launcher, "JOIN_TIMEOUT_S", 3.0)
    monkeypatch.setattr(launcher, "_rank_main", _stalled_rank_main(launcher._rank_main, tmp_path / "m", False))
    # forked ranks run the patched function (inherited from this process): rank 1 stalls on the first launch
    baseline = threading.active_count()
    with forks_recorded() as forks:
        assert launch(world_size, LaunchSettings(backend="gloo", nproc_per_node=2, start_method="fork")) == 2
    assert "rank(s) 1 did not join the process group within 3 s" in capfd.readouterr().err
    # the restart forks again, after stopping the first ranks: no thread of that stop (a kill timer) is left alive
    assert len(forks) >= 6 and all(python <= baseline for python, _ in forks), (baseline, forks)


@pytest.mark.slow
@pytest.mark.distributed
def test_a_rank_that_never_joins_ends_the_launch(tmp_path, monkeypatch):
    from ignite_ddl.launcher import spawn as launcher

    monkeypatch.setattr(launcher, "JOIN_TIMEOUT_S", 2.0)
    monkeypatch.setattr(launcher, "_rank_main", _stalled_rank_main(launcher._rank_main, tmp_path / "m", True))
    # The join watch ends it (its message, twice 2 s), not the 300 s rendezvous timeout, which would say otherwise.
    with pytest.raises(LaunchFailed, match=r"rank\(s\) 1 did not join the process group within 2 s, 2 times"):
        launch(world_size, LaunchSettings(backend="gloo", nproc_per_node=2, start_method="fork", timeout=300))


@pytest.mark.slow
@pytest.mark.distributed
def test_the_launcher_forks_its_ranks_without_a_thread_of_its_own():
    """No thread of the launcher (no pipe reader, no watch, no rendezvous server) exists when it forks: a child cannot
    inherit a lock one of them held. The native threads torch itself started at import are the baseline."""
    baseline = (threading.active_count(), len(os.listdir("/proc/self/task")))
    with forks_recorded() as forks:
        assert launch(world_size, LaunchSettings(backend="gloo", nproc_per_node=3, start_method="fork")) == 3
    assert len(forks) >= 4  # the rendezvous process and the 3 ranks
    # never more threads than before the launch: the launcher itself added none (torch's own may have ended)
    assert all(python <= baseline[0] and native <= baseline[1] for python, native in forks), (baseline, forks)


def _late_for_the_barrier(local_rank):
    if idist.get_rank() == 1:
        time.sleep(60)  # never enters the barrier before the others give up
    idist.barrier()


@pytest.mark.slow
@pytest.mark.distributed
def test_a_rank_that_never_enters_a_barrier_is_named():
    with pytest.raises(RunFailed) as failed:
        launch(_late_for_the_barrier, LaunchSettings(backend="gloo", nproc_per_node=2, timeout=5))
    assert failed.value.rank == 1
    assert str(failed.value).startswith("rank 1 failed: never reached the collective rank 0 waited in (barrier); ")


def _stuck_in_evaluation(run):
    if idist.get_rank() == 1:
        run.evaluator.add_event_handler(Events.ITERATION_STARTED, lambda: time.sleep(120))


@pytest.mark.slow
@pytest.mark.distributed
def test_a_rank_stuck_in_evaluation_is_named(tmp_path):
    config = TrainConfig(
        nproc_per_node=2, timeout=30, stall_timeout=4, output_dir=str(tmp_path), progress=False, **TINY_RUN
    )
    with pytest.raises(RunFailed) as failed:
        train(config, setup=_stuck_in_evaluation)
    assert failed.value.rank == 1, str(failed.value)
    assert "stuck evaluating" in str(failed.value) and "rank 0 waits for it, gathering the evaluation" in str(
        failed.value
    )
