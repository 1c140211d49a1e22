"""Verdicts from real sweeps: identical configurations are a tie, a mixed-model sweep is judged per model, runs
are interleaved, a run beside a CPU-burning process is flagged as contended and re-run, a diverged run is flagged."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import check_ok, run_cli

from ignite_ddl.core.results import read_results
from ignite_ddl.report import load
from ignite_ddl.sweep.plan import run_order
from ignite_ddl.sweep.spec import parse_spec

TINY = ["--set", "train_size=1024", "--set", "val_size=64", "--set", "batch_size=32", "--set", "epochs=2"]
# Where contention is not what a test checks, no run counts as contended: on a busy machine every run would be left
# out of the verdict (the contention tests below use the default threshold).
ANY_LOAD = ["--contention-threshold", "1"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def sweep(out: Path, *args: str, timeout: float = 600):
    result = run_cli("sweep", *args, "--output-dir", str(out), timeout=timeout)
    check_ok(result)
    return result


@pytest.mark.slow
@pytest.mark.distributed
def test_an_a_a_sweep_is_a_tie(tmp_path):
    """Two configurations doing identical work (only the seed differs), 3 repeats each: no winner."""
    result = sweep(tmp_path, "--grid", "seed=1,2", "--set", "model=mlp", *TINY, *ANY_LOAD, "--repeats", "3")
    analysis = load(tmp_path)
    (verdict,) = analysis.verdicts  # the seed does not change the workload
    assert verdict.best is None, analysis.configs  # never a winner between identical configurations
    assert all(len(c.samples_per_s) == 3 for c in analysis.configs)
    if verdict.not_judged:  # on a busy machine most runs of one may never settle: it is passed over, and says why
        assert all("unsettled" in why for why in verdict.not_judged.values()) and verdict.provisional
        assert "not judged: cfg00" in result.stdout
    else:
        assert sorted(verdict.tied) == ["cfg000", "cfg001"] and not verdict.provisional
        assert "statistically tied: cfg00" in result.stdout  # the CLI prints the verdict


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """1 and 2 processes x two models, 3 repeats: 12 short runs."""
    out = tmp_path_factory.mktemp("mixed") / "out"
    sweep(out, "--grid", "model=toy,mlp", "--grid", "nproc_per_node=1,2", *TINY, *ANY_LOAD, "--repeats", "3")
    return out


@pytest.mark.slow
@pytest.mark.distributed
def test_runs_are_interleaved(mixed):
    records = read_results(mixed / "results.jsonl")
    spec = parse_spec({"grid": {"model": ["toy", "mlp"], "nproc_per_node": [1, 2]}, "repeats": 3})
    expected = run_order(spec, 4)
    assert [(r["index"], r["repeat"]) for r in records] == expected
    assert expected[:4] == [(0, 0), (1, 0), (2, 0), (3, 0)]  # every configuration once before any repeats
    assert [r["position"] for r in records] == list(range(12))


@pytest.mark.slow
@pytest.mark.distributed
def test_a_mixed_model_sweep_is_judged_per_model(mixed):
    analysis = load(mixed)
    assert [v.workload.split(",")[0] for v in analysis.verdicts] == ["model=toy", "model=mlp"]
    for verdict in analysis.verdicts:
        models = {analysis.config(name).config["model"] for name in verdict.configs}
        assert len(models) == 1 and len(verdict.configs) == 2
        # a best or a tie, never both; neither only where a configuration was passed over (not judged), saying why
        assert (verdict.best is None) != (verdict.tied == []) or (verdict.best is None and verdict.not_judged)
    for config in analysis.configs:  # speed-up against the same model on one process
        base = analysis.config(config.baseline)
        assert base.config["model"] == config.config["model"] and base.world_size == 1
    report = (mixed / "report.md").read_text()
    assert "Workload model=toy" in report and "Workload model=mlp" in report
    assert "## Can I trust these numbers?" in report and "## Time spent measuring" in report


@pytest.mark.slow
@pytest.mark.distributed
def test_report_table_matches_the_results(mixed):
    records = read_results(mixed / "results.jsonl")
    section = (mixed / "report.md").read_text().split("## Configurations")[1].split("\n## ")[0]
    tables = [
        [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines() if line.startswith("| ")]
        for block in section.split("\n\n")
    ]
    tables = [t for t in tables if t]
    decision, timing = tables[0], next(t for t in tables if "runs" in t[0])  # the decision table comes first
    rows = {
        row[0]: dict(zip(decision[0], row)) | dict(zip(timing[0], next(r for r in timing if r[0] == row[0])))
        for row in decision[1:]
    }
    analysis = load(mixed)
    for config in analysis.configs:
        rates = [r["summary"]["samples_per_s"] for r in records if r["index"] == config.index and not r["contended"]]
        row = rows[config.name]
        assert row["samples/s"] == f"{sum(rates) / len(rates):.0f}" and row["runs"] == f"{len(rates)}/3"
        # On a busy machine three runs may spread so far that the interval's low end is below 0: clipped, and said.
        found = re.fullmatch(r"([\d.]+) to ([\d.]+)( \(clipped at 0\))?", row["95% interval"])
        low, high = float(found.group(1)), float(found.group(2))
        assert low <= sum(rates) / len(rates) < high


@pytest.mark.slow
@pytest.mark.distributed
def test_sweep_runs_measure_and_skip_what_a_comparison_does_not_need(mixed):
    run_dir = mixed / "runs" / "cfg001-r0"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "best").exists()
    assert [h["val_accuracy"] is None for h in summary["history"]] == [True, False]  # evaluated once, at the end
    assert summary["contention"]["foreign_cpu_share"] is not None
    analysis = load(mixed)
    assert 0 < analysis.measured_share < analysis.measured_share_of_runs < 1
    for name in ("throughput.png", "throughput_vs_processes.png", "step_breakdown.png", "rank_step_times.png"):
        assert (mixed / name).read_bytes()[:8] == PNG_SIGNATURE


def _burn(count: int) -> list[subprocess.Popen]:
    """CPU-burning processes outside the run's process tree (their own sessions)."""
    code = "import time\nend = time.time() + 300\nwhile time.time() < end: pass\n"
    return [subprocess.Popen([sys.executable, "-c", code], start_new_session=True) for _ in range(count)]


@pytest.mark.slow
@pytest.mark.distributed
def test_a_run_beside_a_cpu_burning_process_is_contended_and_re_run(tmp_path):
    burners = _burn(os.cpu_count() or 1)  # half the machine or more, whatever its size
    try:
        time.sleep(0.5)
        result = sweep(tmp_path, "--grid", "model=mlp", *TINY, "--no-report")
    finally:
        for burner in burners:
            os.killpg(burner.pid, signal.SIGKILL)
            burner.wait()
    (record,) = read_results(tmp_path / "results.jsonl")
    assert record["contended"] and record["summary"]["contention"]["foreign_cpu_share"] > 0.25
    assert "CONTENDED: other processes used" in result.stdout

    result = sweep(tmp_path, "--grid", "model=mlp", *TINY, "--resume", "--rerun-contended", "1")
    first, rerun = read_results(tmp_path / "results.jsonl")
    assert first == record and rerun["attempt"] == 1
    analysis = load(tmp_path)
    # The re-run is used if it was not contended; on a machine someone else keeps busy it is flagged too, and
    # neither attempt counts.
    used = not rerun["contended"]
    assert [(r.attempt, r.used) for r in analysis.configs[0].runs] == [(0, False), (1, used)]
    trust = (tmp_path / "report.md").read_text().split("## Can I trust these numbers?")[1].split("\n## ")[0]
    assert f"**contended** ({1 + rerun['contended']})" in trust and "repeat 1:" in trust


@pytest.mark.slow
def test_a_diverged_training_run_warns(tmp_path):
    result = run_cli(
        "train",
        "--lr",
        "1e4",
        "--train-size",
        "256",
        "--val-size",
        "64",
        "--batch-size",
        "64",
        "--epochs",
        "1",
        "--no-progress",
        "--output-dir",
        str(tmp_path),
    )
    check_ok(result)
    assert "warning: the run diverged: the training loss" in result.stderr
    assert json.loads((tmp_path / "summary.json").read_text())["diverged"].startswith("the training loss")
