"""Reports: tables that match the results, speedup and efficiency computed right, real PNGs, HParams records."""

from __future__ import annotations

import statistics

import pytest
from conftest import check_ok, run_cli
from matplotlib.image import imread
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from ignite_ddl.report import aggregate, write_report
from ignite_ddl.sweep import append_record, read_results

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    """1 and 2 processes x 2 repeats of a tiny run, then its report."""
    out = tmp_path_factory.mktemp("report") / "out"
    check_ok(run_cli("sweep", "--grid", "nproc_per_node=1,2", "--set", "model=toy", "--set", "train_size=512",
                     "--set", "val_size=64", "--set", "batch_size=64", "--set", "epochs=1", "--repeats", "2",
                     "--output-dir", str(out), timeout=300))  # fmt: skip
    return out


def table_rows(report: str) -> dict[str, dict[str, str]]:
    """The configuration table of report.md, by config name."""
    lines = report.split("## Configurations")[1].split("## ")[0].strip().splitlines()
    table = [line for line in lines if line.startswith("| ")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    return {r[0]: dict(zip(header, r)) for r in ([c.strip() for c in line.strip("|").split("|")] for line in table[1:])}


def test_report_table_matches_results(small_sweep):
    records = read_results(small_sweep / "results.jsonl")
    rows = table_rows((small_sweep / "report.md").read_text())
    for index, name in enumerate(("cfg000", "cfg001")):
        mine = [r["summary"]["samples_per_s"] for r in records if r["index"] == index]
        assert rows[name]["samples/s"] == f"{statistics.mean(mine):.0f}"
        assert rows[name]["runs"] == "2/2" and rows[name]["world"] == str(index + 1)
        p50 = statistics.mean(r["summary"]["steps"]["global"]["step_s_p50"] for r in records if r["index"] == index)
        assert float(rows[name]["step p50 ms"]) == pytest.approx(1e3 * p50, rel=5e-3)
    speedup = statistics.mean(r["summary"]["samples_per_s"] for r in records if r["index"] == 1) / statistics.mean(
        r["summary"]["samples_per_s"] for r in records if r["index"] == 0
    )
    assert float(rows["cfg001"]["speedup"]) == pytest.approx(speedup, rel=5e-3)
    assert "## Best configuration" in (small_sweep / "report.md").read_text()
    assert "<table>" in (small_sweep / "report.html").read_text()


def test_plots_are_real_pngs(small_sweep):
    report = (small_sweep / "report.md").read_text()
    for name in ("throughput_vs_processes.png", "step_breakdown.png", "rank_step_times.png"):
        path = small_sweep / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE and f"]({name})" in report
        height, width, _ = imread(path).shape
        assert height > 200 and width > 200
    assert not (small_sweep / "throughput_vs_batch.png").exists()  # one batch size: nothing to plot


def test_hparams_read_back(small_sweep):
    records = read_results(small_sweep / "results.jsonl")
    for record in records:
        events = EventAccumulator(str(small_sweep / "tb_hparams" / f"cfg{record['index']:03d}-r{record['repeat']}"))
        events.Reload()
        content = events.PluginTagToContent("hparams")
        start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        hparams = start.session_start_info.hparams
        assert hparams["nproc_per_node"].number_value == record["grid"]["nproc_per_node"]
        assert hparams["world_size"].number_value == record["summary"]["world_size"]
        value = events.Scalars("hparam/samples_per_s")[0].value
        assert value == pytest.approx(record["summary"]["samples_per_s"], rel=1e-5)


def fake_record(index: int, repeat: int, nproc: int, samples_per_s: float, batch: int = 64) -> dict:
    config = {"model": "cnn", "batch_size": batch, "nproc_per_node": nproc, "output_dir": f"x{index}-{repeat}"}
    summary = {"world_size": nproc, "samples_per_s": samples_per_s, "batch": {"global": batch},
               "device": {"type": "cpu", "name": "cpu"}, "threads_per_process": 1, "val_accuracy": 0.5}  # fmt: skip
    return {"key": f"c{index}-r{repeat}", "index": index, "repeat": repeat, "status": "completed", "error": None,
            "grid": {"nproc_per_node": nproc, "batch_size": batch}, "config": config, "summary": summary,
            "run_dir": f"x{index}-{repeat}"}  # fmt: skip


def test_speedup_and_efficiency_on_a_hand_made_results_file(tmp_path):
    records = [
        fake_record(0, 0, 1, 100.0), fake_record(0, 1, 1, 120.0),  # baseline: mean 110
        fake_record(1, 0, 2, 198.0), fake_record(1, 1, 2, 198.0),  # 1.8x on 2 processes
        fake_record(2, 0, 4, 264.0),  # 2.4x on 4 processes
        fake_record(3, 0, 2, 500.0, batch=256),  # another kind, no 1-process baseline
    ]  # fmt: skip
    for record in records:
        append_record(tmp_path / "results.jsonl", record)
    rows = aggregate(read_results(tmp_path / "results.jsonl"))
    assert [r.throughput for r in rows] == [110.0, 198.0, 264.0, 500.0]
    assert rows[0].spread == pytest.approx(statistics.stdev([100.0, 120.0]))
    assert [r.speedup for r in rows[:3]] == pytest.approx([1.0, 1.8, 2.4])
    assert [r.efficiency for r in rows[:3]] == pytest.approx([1.0, 0.9, 0.6])
    assert rows[3].speedup is None and rows[3].efficiency is None

    report = write_report(tmp_path).read_text()
    table = table_rows(report)
    assert (table["cfg001"]["speedup"], table["cfg001"]["efficiency"]) == ("1.8", "0.9")
    assert (table["cfg002"]["speedup"], table["cfg002"]["efficiency"]) == ("2.4", "0.6")
    assert table["cfg003"]["speedup"] == "-"
    assert "cfg003: nproc_per_node=2, batch_size=256" in report  # best
    assert "cfg002: scaling efficiency 0.60" in report


def test_report_of_an_empty_directory_is_refused(tmp_path):
    result = run_cli("report", str(tmp_path), timeout=60)
    assert result.returncode == 2 and "no results" in result.stderr
