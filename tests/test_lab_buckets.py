"""The bucket-size lab: the same workload trained with several DDP bucket sizes through the real trainer."""

from __future__ import annotations

import json

import pytest
from conftest import check_ok, run_cli


@pytest.mark.slow
@pytest.mark.distributed
def test_bucket_sizes_change_calls_not_bytes(tmp_path):
    out = tmp_path / "buckets.json"
    result = run_cli(
        "bucket-size",
        "--backend",
        "gloo",
        "--caps",
        "0.01,25",
        "--train-size",
        "1536",
        "--output-dir",
        str(tmp_path),
        "--json",
        str(out),
    )
    check_ok(result)
    assert "DDP bucket size, cnn on 2 processes" in result.stdout
    data = json.loads(out.read_text())
    small, large = data["rows"]
    assert (small["cap_mb"], large["cap_mb"]) == (0.01, 25.0)
    assert all(c["ok"] for c in data["checks"]), data["checks"]
    # the cnn on 3x32x32 inputs: conv 3->32 (3x3), conv 32->64 (3x3), linear 1024->10, with biases; float32
    gradients = (3 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (1024 * 10 + 10)
    assert small["bytes_per_step"] == large["bytes_per_step"] == 4 * gradients
    assert small["buckets_per_step"] > large["buckets_per_step"] == 1
    assert large["overlap"] == 0 and small["overlap"] > 0
    for row in data["rows"]:
        assert 0 <= row["exposed_ms"] <= row["comm_ms"]


def test_one_process_is_refused_in_one_line(tmp_path):
    result = run_cli("bucket-size", "--nproc-per-node", "1", "--output-dir", str(tmp_path))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "ignite-ddl: error: bucket-size needs at least 2 processes: one process has no gradients to all-reduce"
    ]
