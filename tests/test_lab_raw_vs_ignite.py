"""raw-vs-ignite lab: the DDP tutorial's program with raw torch.distributed and with Ignite reach the same weights."""

from __future__ import annotations

import doctest

import pytest
from conftest import check_ok, run_cli

from ignite_ddl.labs import claims_hold, raw_vs_ignite


@pytest.mark.distributed
def test_raw_and_ignite_reach_the_same_weights_on_three_processes(tmp_path):
    result = raw_vs_ignite.run(backend="gloo", nproc_per_node=3, batch_size=30, output_dir=str(tmp_path))
    assert claims_hold(result), raw_vs_ignite.format_result(result)
    assert result["processes"] == 3 and result["max_abs_diff"] <= 1e-6 and result["weights_moved"] > 1e-3
    lines = result["code_lines"]
    assert set(lines["raw"]) == {"raw_worker", "raw_main"} and set(lines["ignite"]) == {"ignite_worker", "ignite_main"}
    # Ignite takes over the process group, the sampler and the training loop: fewer lines, whatever the exact count.
    assert sum(lines["ignite"].values()) < sum(lines["raw"].values())


def test_code_lines_counts_code_only():
    assert doctest.testmod(raw_vs_ignite).failed == 0
    assert raw_vs_ignite.code_lines(raw_vs_ignite.ignite_main) == 3


@pytest.mark.slow
@pytest.mark.distributed
def test_cli(tmp_path):
    result = run_cli("raw-vs-ignite", "--backend", "gloo", "--nproc-per-node", "2", "--output-dir", str(tmp_path))
    check_ok(result)
    assert "max |raw - ignite|" in result.stdout and "[ok] raw torch.distributed and Ignite" in result.stdout
