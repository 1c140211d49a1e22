"""dp-vs-ddp lab: what DataParallel and DDP do on CPU; their memory and speed on two or more GPUs."""

from __future__ import annotations

import pytest
import torch
from conftest import check_ok, run_cli

from ignite_ddl.labs import claims_hold, dp_vs_ddp
from ignite_ddl.trainer.models import mlp


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="with 2 or more GPUs the lab measures them instead")
@pytest.mark.distributed
def test_without_gpus_it_says_so_and_shows_the_structure(tmp_path):
    result = dp_vs_ddp.run(backend="gloo", nproc_per_node=3, output_dir=str(tmp_path))
    assert claims_hold(result), dp_vs_ddp.format_result(result)
    assert result["gpu"]["measured"] is False and "needs 2 or more CUDA GPUs" in result["gpu"]["reason"]
    ranks = result["structure"]["ddp_ranks"]
    assert len({r["pid"] for r in ranks}) == 3
    assert len({r["weights_before"] for r in ranks}) == 3 and len({r["weights_after"] for r in ranks}) == 1
    numels = ranks[0]["bucket_numels"]  # every gradient in exactly one bucket
    assert len(numels) >= 2 and sum(numels) == sum(p.numel() for p in mlp(32, 10, hidden=(256, 256, 256)).parameters())
    assert result["structure"]["dataparallel"]["same_output"]
    assert "NOT MEASURED" in dp_vs_ddp.format_result(result)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="DataParallel vs DDP memory and speed need 2 or more GPUs")
def test_on_gpus_dataparallel_loads_gpu0_and_ddp_is_balanced(tmp_path):
    result = dp_vs_ddp.run(backend="nccl", steps=10, output_dir=str(tmp_path))
    assert result["gpu"]["measured"] is True
    assert claims_hold(result), dp_vs_ddp.format_result(result)


@pytest.mark.slow
@pytest.mark.distributed
def test_cli(tmp_path):
    result = run_cli("dp-vs-ddp", "--backend", "gloo", "--output-dir", str(tmp_path))
    check_ok(result)
    assert "DDP over 2 processes" in result.stdout and "FAILED" not in result.stdout
