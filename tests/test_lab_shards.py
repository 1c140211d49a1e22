"""The shards lab: auto_dataloader's shards on real gloo ranks, gathered and checked epoch by epoch."""

from __future__ import annotations

import pytest
import torch
from conftest import check_ok, output_from, run_cli

from ignite_ddl.core.errors import ConfigError
from ignite_ddl.labs import shards


def run_lab(tmp_path, **options) -> dict:
    return shards.run(backend="gloo", output_dir=str(tmp_path), **options)


def test_shards_of_100_samples_over_3_ranks(tmp_path):
    result = run_lab(tmp_path, nproc_per_node=3, dataset_size=100, batch_size=12)
    assert all(c["ok"] for c in result["checks"]), result["checks"]
    assert result["per_rank_batch"] == 4 and result["padding"] == 2
    for epoch, facts in enumerate(result["epoch_facts"]):
        # DistributedSampler (seed 0) pads the epoch's permutation with its first samples, then deals it out
        permutation = torch.randperm(100, generator=torch.Generator().manual_seed(epoch)).tolist()
        padded = permutation + permutation[:2]
        assert [row["set_epoch"][epoch] for row in result["rows"]] == [padded[r::3] for r in range(3)]
        assert facts["duplicated"] == sorted(permutation[:2]) and facts["missing"] == []
    rows = result["rows"]
    assert all(row["forgotten"][1] == row["forgotten"][0] for row in rows)  # the bug: the same order again
    assert all(row["set_epoch"][1] != row["set_epoch"][0] for row in rows)


def test_no_padding_when_the_size_divides(tmp_path):
    result = run_lab(tmp_path, nproc_per_node=2, dataset_size=10, batch_size=4, epochs=3)
    assert all(c["ok"] for c in result["checks"]), result["checks"]
    assert result["padding"] == 0 and all(f["duplicated"] == [] and f["seen"] == 10 for f in result["epoch_facts"])


def test_a_batch_below_the_world_size_is_kept_per_rank(tmp_path):
    result = run_lab(tmp_path, nproc_per_node=3, dataset_size=10, batch_size=2)
    assert all(c["ok"] for c in result["checks"]), result["checks"]
    assert result["per_rank_batch"] == 2  # auto_dataloader divides only a batch of at least the world size


def test_refuses_a_single_epoch(tmp_path):
    with pytest.raises(ConfigError, match="epochs"):
        run_lab(tmp_path, epochs=1)


@pytest.mark.slow
@pytest.mark.distributed
def test_cli_with_image_grid(tmp_path):
    grid = tmp_path / "grid.png"
    result = run_cli(
        "shards",
        "--backend",
        "gloo",
        "--nproc-per-node",
        "2",
        "--dataset-size",
        "200",
        "--batch-size",
        "128",
        "--output-dir",
        str(tmp_path),
        "--image-grid",
        str(grid),
    )
    check_ok(result)
    output_from(result.stdout, "200 samples over 2 ranks (gloo): global batch 128 -> 64 per rank")
    assert "[ok] BUG REPRODUCED (expected): without sampler.set_epoch(epoch)" in result.stdout
    assert "WITHOUT sampler.set_epoch(epoch):" in result.stdout and "FAILED" not in result.stdout
    assert grid.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_image_grid_is_readable(tmp_path):
    """Each rank's first batch: tiles at least 0.7 in wide with labels of 8 pt, panels no larger than their tiles,
    so the PNG is mostly pictures, not white space (a short batch used to be a thin strip in a square panel)."""
    import matplotlib.image
    import numpy as np

    from ignite_ddl.trainer.data import synthetic_images

    images, labels = synthetic_images(24).tensors
    rows = [
        {"rank": r, "grid": {"indices": list(range(r, 24, 3)), "images": images[r::3], "labels": labels[r::3]}}
        for r in range(3)
    ]
    path = tmp_path / "grid.png"
    shards.save_image_grid(rows, str(path))
    pixels = matplotlib.image.imread(path)[..., :3]
    height, width = pixels.shape[:2]
    assert width >= 8 * 0.7 * 100 and height >= 3 * 0.7 * 100  # 8 tiles a row, 3 ranks, at 100 dpi
    white = float(np.mean(np.all(pixels > 0.97, axis=-1)))
    assert white < 0.45, f"{white:.0%} of the grid is white space"  # the earlier layout: 88 %
