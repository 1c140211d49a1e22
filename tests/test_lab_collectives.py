"""The collectives lab on real gloo process groups: every idist collective checked, and the bandwidth figures."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pytest
from conftest import check_ok, output_from, run, run_cli

from ignite_ddl.core.errors import ConfigError
from ignite_ddl.labs import collectives


def run_lab(tmp_path, **options) -> dict:
    return collectives.run(backend="gloo", output_dir=str(tmp_path), **options)


def test_every_collective_gives_the_expected_value_on_four_ranks(tmp_path):
    result = run_lab(tmp_path, nproc_per_node=4)
    assert [c["claim"] for c in result["checks"] if not c["ok"]] == []
    rows = result["rows"]
    assert [row["rank"] for row in rows] == [0, 1, 2, 3] and [row["input"] for row in rows] == [1, 2, 3, 4]
    for row in rows:  # inputs 1..4
        assert [row[f"all_reduce {op}"] for op in ("SUM", "PRODUCT", "MIN", "MAX")] == [10, 24, 1, 4]
        assert row["all_gather number"] == [1, 2, 3, 4] and row["all_gather str"][3] == "rank3!!!"
        assert row["broadcast tensor"] == [4.0, 5.0, 6.0] and row["broadcast str"] == "rank3!!!"
        assert row["broadcast object"] == {"rank": 3, "squares": [0, 1, 4, 9]}
    # ignite 0.5.5 sends a broadcast number as float32
    assert rows[1]["broadcast number"] == pytest.approx(4 / 3, rel=1e-6)
    assert [row["one_rank_only ran"] for row in rows] == [True, False, False, False]
    waits = [row["barrier left"] - row["barrier arrived"] for row in rows]
    assert min(waits[:3]) > 0.25 * collectives.BARRIER_DELAY_S  # the early ranks waited for the late one


def test_bandwidth_figures_follow_nccl_tests_definitions():
    # 4 ranks, 1 ms per call on every rank: hand-computed figures
    sizes = [1 << 20]
    rows = collectives.bandwidth_rows(sizes, 4, [[1e-3, 1e-3, 1e-3]] * 4)
    by_name = {row["collective"]: row for row in rows}
    assert by_name["all_reduce"]["algbw_GBps"] == pytest.approx(1.048576)
    assert by_name["all_reduce"]["busbw_GBps"] == pytest.approx(1.048576 * 1.5)  # 2(N-1)/N
    assert by_name["all_gather"]["bytes"] == 1 << 20  # the total gathered, each rank sending a quarter
    assert by_name["all_gather"]["busbw_GBps"] == pytest.approx(1.048576 * 0.75)  # (N-1)/N
    assert by_name["broadcast"]["busbw_GBps"] == by_name["broadcast"]["algbw_GBps"]
    # the time of a row is the mean over ranks; the slowest rank is kept beside it
    (row,) = collectives.bandwidth_rows(sizes, 2, [[1e-3, 2e-3, 1e-3], [3e-3, 2e-3, 1e-3]])[:1]
    assert row["time_s"] == pytest.approx(2e-3) and row["time_max_s"] == pytest.approx(3e-3)


def test_sizes():
    assert collectives.parse_size("64M") == 64 << 20 and collectives.parse_size("1 KiB") == 1024
    assert (
        collectives.message_sizes(1024, 64 << 20)[-1] == 64 << 20
        and len(collectives.message_sizes(1024, 64 << 20)) == 9
    )
    assert collectives.message_sizes(1024, 8192) == [1024, 4096, 8192]
    assert collectives.format_size(64 << 20) == "64M" and collectives.format_size(1000) == "1000B"
    with pytest.raises(argparse.ArgumentTypeError):
        collectives.parse_size("lots")


def test_bench_measures_every_collective_and_size(tmp_path):
    result = run_lab(tmp_path, nproc_per_node=2, bench=True, max_size=64 << 10, warmup=1, iters=3)
    assert all(c["ok"] for c in result["checks"]), result["checks"]
    assert [(r["collective"], r["size"]) for r in result["rows"][:3]] == [
        ("all_reduce", 1024),
        ("all_gather", 1024),
        ("broadcast", 1024),
    ]
    assert len(result["rows"]) == 3 * 4 and result["world_size"] == 2
    assert all(math.isfinite(r["busbw_GBps"]) and r["busbw_GBps"] > 0 for r in result["rows"])


@pytest.mark.slow
@pytest.mark.distributed
def test_cli_prints_the_per_rank_table(tmp_path):
    out = tmp_path / "result.json"
    result = run_cli(
        "collectives", "--backend", "gloo", "--nproc-per-node", "3", "--output-dir", str(tmp_path), "--json", str(out)
    )
    check_ok(result)
    lines = output_from(result.stdout, "3 ranks, backend gloo")
    assert "barrier wait ms" in lines[1]
    assert [line.split()[:3] for line in lines[2:5]] == [["0", "1", "6"], ["1", "2", "6"], ["2", "3", "6"]]
    assert "[ok] one_rank_only: exactly one rank (rank 0) ran the function" in result.stdout
    assert "FAILED" not in result.stdout and all(c["ok"] for c in json.loads(out.read_text())["checks"])


@pytest.mark.slow
@pytest.mark.distributed
def test_cli_bench(tmp_path):
    result = run_cli(
        "collectives",
        "--bench",
        "--backend",
        "gloo",
        "--nproc-per-node",
        "2",
        "--max-size",
        "16K",
        "--iters",
        "2",
        "--output-dir",
        str(tmp_path),
    )
    check_ok(result)
    assert "busbw GB/s" in result.stdout and "all_gather     16K" in result.stdout
    assert "[ok] busbw = bytes / time x nccl-tests factor" in result.stdout


def test_bench_refuses_one_process(tmp_path):
    with pytest.raises(ConfigError, match="at least 2 processes"):
        run_lab(tmp_path, nproc_per_node=1, bench=True)


@pytest.mark.slow
@pytest.mark.distributed
def test_benchmark_against_raw_torch_distributed(tmp_path):
    script = Path(__file__).parents[1] / "benchmarks" / "collectives.py"
    out = tmp_path / "bench.json"
    result = run(
        [
            sys.executable,
            str(script),
            "--procs",
            "2",
            "--max-size",
            "4K",
            "--iters",
            "2",
            "--repeats",
            "1",
            "--json",
            str(out),
        ]
    )
    check_ok(result)
    assert "ours/raw" in result.stdout
    rows = json.loads(out.read_text())["results"]
    assert {(r["collective"], r["size"]) for r in rows} == {
        (c, s) for c in collectives.BENCH_COLLECTIVES for s in (1024, 4096)
    }
    assert all(r["ratio_median"] > 0 and r["raw_busbw_GBps"] > 0 for r in rows)
