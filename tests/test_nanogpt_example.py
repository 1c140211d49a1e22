"""examples/nanogpt, the recipe of docs/ddp-or-fsdp.md: its workload trains on nanoGPT's token files (uint16 ids) in
tokens, with its own loss, and its sweep is the grid the page describes (DDP, ZeRO-1 and FSDP over 1-8 nccl
processes, a memory limit)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

from ignite_ddl.sweep import expand, load_spec

EXAMPLE = Path(__file__).parents[1] / "examples" / "nanogpt"


def test_the_sweep_is_the_grid_the_page_describes():
    spec = load_spec(EXAMPLE / "sweep.yaml")
    grids = [run.config for run in expand(spec) if run.repeat == 0]
    layouts = sorted((c.strategy, c.nproc_per_node) for c in grids)
    assert layouts == sorted(
        [("ddp", n) for n in (1, 2, 4, 8)] + [(s, n) for s in ("zero1", "fsdp") for n in (2, 4, 8)]
    )
    assert {(c.backend, c.workload, c.amp) for c in grids} == {("nccl", "bench:make", "bf16")}
    assert spec.memory_limit_mb == 16000


@pytest.mark.slow
def test_the_workload_trains_on_token_files_in_tokens(tmp_path):
    """One process on a tiny token file: each item a window of block_size tokens, throughput in tokens."""
    vocab, block = 64, 16
    rng = np.random.default_rng(0)
    for name, windows in (("train.bin", 64), ("val.bin", 8)):
        rng.integers(0, vocab, windows * block + 1, dtype=np.uint16).tofile(tmp_path / name)
    small = [f"data_dir={tmp_path}", "n_layer=1", "n_head=2", "n_embd=32", f"block_size={block}", f"vocab_size={vocab}"]
    result = run_cli(
        "train", "--workload=bench:make", *(f"--workload-args={arg}" for arg in small), "--batch-size=16",
        "--max-iters=6", "--epochs=1", "--no-checkpoints", "--no-best-model", "--no-progress",
        f"--output-dir={tmp_path / 'run'}", cwd=EXAMPLE, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    workload = summary["workload"]
    assert (workload["sample_unit"], workload["units_per_sample"]) == ("tokens", block)
    assert workload["units_per_s"] > 0 and math.isfinite(summary["val_loss"]) and "tokens/s" in result.stdout
