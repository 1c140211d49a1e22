"""ddp-sgd lab: N-process DDP equals one-process SGD; BatchNorm breaks it; global-batch statistics restore it."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import check_ok, run_cli

from ignite_ddl.core.errors import ConfigError
from ignite_ddl.labs import claims_hold, ddp_sgd


@pytest.mark.distributed
def test_ddp_equals_sgd_and_batchnorm_breaks_it(tmp_path):
    result = ddp_sgd.run(procs=[2, 4], steps=4, backend="gloo", output_dir=str(tmp_path))
    assert claims_hold(result), ddp_sgd.format_result(result)
    assert [r["procs"] for r in result["runs"]] == [2, 4]
    for row in result["runs"]:
        assert row["plain"] <= 1e-5 and row["sync_bn"] <= 1e-5
        assert row["batchnorm"] > 1e-4
    assert result["weights_moved"] > 1e-3
    if torch.cuda.device_count() == 0:  # torch 2.15 refuses SyncBatchNorm on CPU; the lab says where and why
        refused_by = [r["by"] for r in result["runs"][0]["sync_bn_refusals"]]
        assert refused_by == ["DistributedDataParallel", "SyncBatchNorm.forward", "torch.batch_norm_stats"]
        assert result["runs"][0]["sync_bn_layer"].startswith("GlobalBatchNorm2d")


@pytest.mark.slow
@pytest.mark.distributed
def test_cli_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "result.json"
    result = run_cli(
        "ddp-sgd",
        "--procs",
        "1,2",
        "--steps",
        "2",
        "--backend",
        "gloo",
        "--output-dir",
        str(tmp_path),
        "--json",
        str(out),
    )
    check_ok(result)
    assert "no BN max|dw|" in result.stdout and "FAILED" not in result.stdout
    assert json.loads(out.read_text())["runs"][0]["procs"] == 2


def test_refuses_a_batch_that_does_not_split(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot be split evenly over \[4\]"):
        ddp_sgd.run(procs=[4], batch_size=30, output_dir=str(tmp_path))
