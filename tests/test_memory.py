"""Memory on every rank: the bytes held between steps, peak resident memory after warm-up, a reading per step, and
a rank that runs out of memory named as such (real gloo ranks, a real allocation past a real limit)."""

from __future__ import annotations

import csv
import json
import resource

import pytest
import torch
from conftest import SMALL_SWEEP, run_cli
from ignite.engine import Events

from ignite_ddl import RunFailed, TrainConfig, train
from ignite_ddl.core.results import read_results
from ignite_ddl.sweep.records import finish_record

TINY = {"train_size": 256, "val_size": 64, "batch_size": 64, "epochs": 1, "progress": False, "overwrite": True}


@pytest.mark.distributed
@pytest.mark.slow
def test_every_rank_records_its_memory(tmp_path):
    summary = train(TrainConfig(nproc_per_node=2, num_workers=1, output_dir=str(tmp_path), warmup_iters=1, **TINY))
    memory = summary["memory"]
    assert memory["source"].startswith("/proc") and memory["window"] == "after warm-up"
    assert [r["rank"] for r in memory["ranks"]] == [0, 1]
    params = 118_568  # the small CNN's float32 parameters
    for rank in memory["ranks"]:
        assert rank["held_bytes"] == {"params": params, "grads": params, "optimizer": params}  # SGD momentum
        assert rank["peak_rss_bytes"] > 50e6 and rank["workers"] >= 1 and rank["workers_peak_rss_bytes"] > 0
    assert memory["max"]["held_bytes"] == 3 * params
    assert memory["max"]["peak_rss_bytes"] == max(r["peak_rss_bytes"] for r in memory["ranks"])
    with open(tmp_path / "steps_rank1.csv") as f:
        readings = [int(row["memory_bytes"]) for row in csv.DictReader(f)]
    assert readings and all(r > 50e6 for r in readings)


@pytest.mark.slow
def test_peak_memory_grows_with_the_batch(tmp_path):
    """Two runs of one workload whose activations differ 16-fold: the larger batch's peak is the larger one (a
    comparison of memory, not of time)."""
    peaks = {}
    for batch in (16, 256):
        config = TrainConfig(
            model="resnet18",
            batch_size=batch,
            train_size=3 * batch,
            val_size=16,
            epochs=1,
            warmup_iters=1,
            measure_flops=False,
            output_dir=str(tmp_path / str(batch)),
            progress=False,
        )
        peaks[batch] = train(config)["memory"]["max"]["peak_rss_bytes"]
    assert peaks[256] > peaks[16] + 100e6, peaks


def _allocate_past_a_limit(run):
    """On rank 1 only: cap the process's data segment 300 MB above what it uses, then allocate 2 GB."""
    import ignite.distributed as idist

    if idist.get_rank() != 1:
        return
    with open("/proc/self/status") as f:
        data_kb = next(int(line.split()[1]) for line in f if line.startswith("VmData:"))
    resource.setrlimit(resource.RLIMIT_DATA, (data_kb * 1024 + 300 * 2**20, resource.RLIM_INFINITY))

    @run.trainer.on(Events.ITERATION_COMPLETED(once=2))
    def grow(engine):
        engine.state.ballast = torch.ones(500_000_000)  # 2 GB of float32


@pytest.mark.distributed
@pytest.mark.slow
def test_a_rank_that_allocates_past_its_limit_is_out_of_memory(tmp_path):
    """The limit is RLIMIT_DATA, not RLIMIT_AS: RLIMIT_AS counts every mapping, and after ``import torch`` (2.15,
    CUDA build, on CPU) a process maps 3.08 GB, mostly shared libraries it barely touches (libcublasLt 490 MB mapped,
    71 MB resident), against 0.76 GB VmData and 0.72 GB resident, so a cap "300 MB above what the rank uses" cannot
    be set there. RLIMIT_DATA counts the private writable memory a tensor is allocated in; a memory cgroup would need
    a writable cgroup hierarchy (root or delegation), which a test run need not have."""
    config = TrainConfig(nproc_per_node=2, output_dir=str(tmp_path), warmup_iters=1, **TINY)
    with pytest.raises(RunFailed) as failed:
        train(config, setup=_allocate_past_a_limit)
    assert failed.value.rank == 1 and failed.value.out_of_memory
    message = str(failed.value)
    assert message.startswith("rank 1 failed: out of memory (") and "GB resident of a" in message
    assert "can't allocate memory" in message


def test_a_run_killed_near_its_memory_limit_is_recorded_as_out_of_memory(tmp_path):
    """The kernel's OOM killer sends SIGKILL and the run says nothing: the last reading its rank left decides."""
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    record = {"exit_code": -9, "run_dir": str(run_dir), "status": "completed", "error": None}
    (run_dir / "logs" / "memory_rank0.txt").write_text(f"{int(11.5e9)} {int(12e9)}\n")
    done = finish_record(dict(record), threshold=0.1)
    assert done["status"] == "out_of_memory"
    said = "out of memory: killed by SIGKILL with 11.50 GB resident of a 12.00 GB limit at its last reading"
    assert done["error"] == f"rank 0 failed: {said}"
    (run_dir / "logs" / "memory_rank0.txt").write_text(f"{int(1e9)} {int(12e9)}\n")  # far from the limit
    assert finish_record(dict(record), threshold=0.1)["status"] == "failed"


def test_an_allocation_error_line_makes_an_out_of_memory_record(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "console.log").write_text(
        "ignite-ddl: error: rank 1 failed: out of memory (0.92 GB resident of a 25.28 GB limit): RuntimeError: "
        "DefaultCPUAllocator: can't allocate memory\n"
    )
    record = {"exit_code": 1, "run_dir": str(run_dir), "status": "completed", "error": None}
    done = finish_record(dict(record), threshold=0.1)
    assert done["status"] == "out_of_memory" and "0.92 GB resident" in done["error"]
    json.dumps(done)


@pytest.mark.slow
def test_only_dataloader_workers_count_as_workers(tmp_path):
    """A sweep's run forks a watcher (it ends the run if the sweep dies): a child of the rank, not a DataLoader
    worker. It was counted as one in every run, "1 DataLoader worker(s) 7 MiB of their own" with num_workers 0."""
    result = run_cli(
        "sweep", "--grid", "num_workers=0,1", *SMALL_SWEEP, "--set", "batch_size=64", "--no-report",
        "--output-dir", str(tmp_path), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    counted = {
        r["grid"]["num_workers"]: r["summary"]["memory"]["ranks"][0] for r in read_results(tmp_path / "results.jsonl")
    }
    assert counted[0]["workers"] == 0 and counted[0]["workers_private_bytes"] == 0
    assert counted[1]["workers"] == 2 and counted[1]["workers_private_bytes"] > 0  # the train and val loaders' own
