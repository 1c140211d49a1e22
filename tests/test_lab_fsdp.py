"""fsdp lab: FSDP2 shards parameters, gradients and optimizer state (about 1/N each) and trains like DDP."""

from __future__ import annotations

import pytest
from conftest import check_ok, run_cli

from ignite_ddl.labs import claims_hold, fsdp


@pytest.mark.distributed
def test_fsdp_holds_a_third_on_three_ranks_and_matches_ddp(tmp_path):
    result = fsdp.run(
        backend="gloo", nproc_per_node=3, width=96, layers=5, steps=4, batch_size=48, output_dir=str(tmp_path)
    )
    assert claims_hold(result), fsdp.format_result(result)
    ddp, sharded = result["modes"]["ddp"], result["modes"]["fsdp"]
    params = 32 * 96 + 96 + 3 * (96 * 96 + 96) + 96 * 10 + 10
    for rank in ddp["bytes_per_rank"]:  # a full replica everywhere; Adam keeps two moments per parameter
        assert rank["params"] == rank["grads"] == 4 * params
        assert 2 * 4 * params <= rank["optimizer"] < 2 * 4 * params + 1024  # + one step counter per tensor
    assert sum(rank["params"] for rank in sharded["bytes_per_rank"]) == 4 * params
    assert 0.3 < result["ratio"]["total"] < 0.37 and result["loss_diff"] <= 1e-5


@pytest.mark.slow
@pytest.mark.distributed
def test_cli(tmp_path):
    result = run_cli(
        "fsdp",
        "--backend",
        "gloo",
        "--nproc-per-node",
        "2",
        "--width",
        "64",
        "--steps",
        "3",
        "--output-dir",
        str(tmp_path),
    )
    check_ok(result)
    assert "fully_shard" in result.stdout and "FAILED" not in result.stdout
