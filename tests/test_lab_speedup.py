"""The speedup lab: a CPU-bound job split over gloo processes, and the device-transfer comparison."""

from __future__ import annotations

import json

import pytest
from conftest import check_ok, output_from, run_cli

from ignite_ddl.core.environment import cpu_cores
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.labs import speedup


@pytest.mark.slow
@pytest.mark.distributed
def test_cli_strong_scaling_table(tmp_path):
    out = tmp_path / "speedup.json"
    # 8 sorts of 1M floats: about 0.6 s on one core, enough to stand above the start-up noise
    result = run_cli(
        "speedup",
        "--procs",
        "1,2,4",
        "--work",
        "1000000",
        "--repeats",
        "2",
        "--output-dir",
        str(tmp_path),
        "--json",
        str(out),
    )
    check_ok(result)
    output_from(result.stdout, "strong scaling: the same job, 8 tasks (each: sort 1,000,000 random floats)")
    assert "wall s  speedup efficiency" in result.stdout
    data = json.loads(out.read_text())
    assert data["scaling"] == "strong" and data["cpu_cores"] == cpu_cores()
    rows = {row["procs"]: row for row in data["rows"]}
    assert rows[1]["speedup"] == 1.0 and rows[4]["tasks_per_rank"] == [2, 2, 2, 2]
    assert all(row["threads"] == 1 for row in rows.values())  # one intra-op thread per process
    assert all(c["ok"] for c in data["checks"]), data["checks"]


def scaling_rows(speedups: dict[int, float], cores_used: float = 2.0) -> list[dict]:
    return [
        {
            "procs": p,
            "speedup": s,
            "efficiency": s / p,
            "tasks_per_rank": [8 // p] * p,
            "cores_used": min(p, cores_used),
        }
        for p, s in speedups.items()
    ]


def test_checks_catch_what_cannot_happen():
    # 2 cores: 1 -> 2 processes must help, and 4 processes cannot go beyond the 2 cores
    good = speedup._scaling_checks(scaling_rows({1: 1.0, 2: 1.9, 4: 1.85}), tasks=8, cores=2)
    assert [c["ok"] for c in good] == [True, True, True]
    no_gain = speedup._scaling_checks(scaling_rows({1: 1.0, 2: 1.1, 4: 1.0}), tasks=8, cores=2)
    assert [c["ok"] for c in no_gain] == [True, False, True]
    too_fast = speedup._scaling_checks(scaling_rows({1: 1.0, 2: 1.9, 4: 3.5}), tasks=8, cores=2)
    assert [c["ok"] for c in too_fast] == [True, True, False]
    # on 8 cores nothing in 1, 2, 4 is oversubscribed
    assert len(speedup._scaling_checks(scaling_rows({1: 1.0, 2: 1.9, 4: 3.6}), tasks=8, cores=8)) == 2


def test_no_verdict_on_scaling_when_another_job_held_the_cores():
    busy = speedup._scaling_checks(scaling_rows({1: 1.0, 2: 1.1}, cores_used=1.3), tasks=8, cores=2)
    assert busy[1]["ok"] and "not judged" in busy[1]["detail"]


def test_no_verdict_on_the_core_cap_when_the_baseline_was_starved():
    rows = scaling_rows({1: 1.0, 2: 1.9, 8: 2.45})
    rows[0]["cores_used"] = 0.55  # a neighbour took half the core the one-process run was timed on
    starved = speedup._scaling_checks(rows, tasks=8, cores=2)
    assert starved[2]["ok"] and "not judged" in starved[2]["detail"]
    rows[0]["cores_used"] = 1.0  # the same figures measured with the core to itself break the cap
    assert not speedup._scaling_checks(rows, tasks=8, cores=2)[2]["ok"]


def test_refusals(tmp_path):
    with pytest.raises(ConfigError, match="must include 1"):
        speedup.run(procs=[2, 4], output_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="without work"):
        speedup.run(procs=[1, 4], tasks=2, output_dir=str(tmp_path))


@pytest.mark.slow
@pytest.mark.distributed
def test_cli_transfer_on_cpu_says_there_is_nothing_to_move(tmp_path):
    result = run_cli(
        "speedup",
        "--transfer",
        "--work",
        "200000",
        "--transfer-iters",
        "3",
        "--repeats",
        "1",
        "--output-dir",
        str(tmp_path),
    )
    check_ok(result)
    assert result.stdout.startswith("device cpu: 3 iterations of sorting 200,000 floats")
    assert "the device is the host: .to(device) copies nothing" in result.stdout
    assert "[ok] on the host, .to(device) returns the very same tensor" in result.stdout
