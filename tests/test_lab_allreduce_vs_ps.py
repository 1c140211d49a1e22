"""allreduce-vs-ps lab: a parameter server and all-reduce take the same SGD steps; the server's bytes grow with N."""

from __future__ import annotations

import pytest
from conftest import check_ok, run_cli

from ignite_ddl.core.errors import ConfigError
from ignite_ddl.labs import allreduce_vs_ps, claims_hold


@pytest.mark.distributed
def test_same_trajectory_and_the_bytes_each_scheme_moves(tmp_path):
    result = allreduce_vs_ps.run(
        workers=[2, 3], sizes=[16, 64], steps=6, batch_size=48, backend="gloo", output_dir=str(tmp_path)
    )
    assert claims_hold(result), allreduce_vs_ps.format_result(result)
    rows = {(r["scheme"], r["workers"], r["width"]): r for r in result["rows"]}
    assert len(rows) == 8 and len(result["pairs"]) == 4
    for (scheme, n, _), r in rows.items():
        size = r["model_bytes"]
        assert size == 4 * r["params"]
        if scheme == "ps":  # counted: the server sends N copies of the parameters and receives N gradients per step
            assert r["processes"] == n + 1 and r["busiest_rank"] == 0
            assert r["sends_per_step"] == r["receives_per_step"] == n * size
        else:
            assert r["processes"] == n and r["all_reduce_payload_per_step"] == size
            assert r["sends_per_step"] == pytest.approx(2 * (n - 1) / n * size)
        assert r["step_s"] > 0
    assert rows[("ps", 3, 64)]["params"] > rows[("ps", 3, 16)]["params"]


@pytest.mark.slow
@pytest.mark.distributed
def test_cli(tmp_path):
    result = run_cli(
        "allreduce-vs-ps",
        "--workers",
        "2",
        "--sizes",
        "32",
        "--steps",
        "4",
        "--backend",
        "gloo",
        "--output-dir",
        str(tmp_path),
    )
    check_ok(result)
    assert "server (0)" in result.stdout and "max|dw| PS-AR" in result.stdout and "FAILED" not in result.stdout


def test_refuses_a_single_worker(tmp_path):
    with pytest.raises(ConfigError, match="must be >= 2"):
        allreduce_vs_ps.run(workers=[1, 2], output_dir=str(tmp_path))
