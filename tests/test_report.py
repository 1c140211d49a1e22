"""Reports on hand-made results files: intervals and speed-ups computed right on known numbers, a best named only
when separated, ties named, flags raised, workloads kept apart, HParams records, refusals."""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
import torch
from conftest import completed_record, rank_steps, run_cli
from scipy import stats as scipy_stats
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as plugin_metadata
from tensorboard.plugins.hparams import plugin_data_pb2

from ignite_ddl.cli import main
from ignite_ddl.core.results import append_record
from ignite_ddl.core.schema import Shown, shown_figures
from ignite_ddl.report import analyze, load, write_report
from ignite_ddl.report.model import TABLE_ROWS
from ignite_ddl.report.stats import mean_interval, outpaces, ratio_interval, repeats_to_separate, separated


def record(index: int, repeat: int, rate: float, procs: int = 1, model: str = "cnn", batch: int = 64, **extra) -> dict:
    """A completed run's record as a sweep writes it (only the fields the report reads)."""
    config = {
        "model": model,
        "batch_size": batch,
        "nproc_per_node": procs,
        "dataset": "synthetic",
        "amp": "none",
        "optimizer": "sgd",
        "sync_bn": False,
        "output_dir": f"x{index}-{repeat}",
    }
    config.update(extra.pop("config", {}))
    digest = hashlib.sha1(f"configuration {index}".encode()).hexdigest()  # one configuration per index
    summary = {
        "world_size": procs,
        "samples_per_s": rate,
        "batch": {"global": batch},
        "device": {"type": "cpu", "name": "cpu"},
        "threads_per_process": max(1, 2 // procs),
        "cpu_cores": 2,
        "val_accuracy": 0.5,
        "diverged": None,
        "contention": {"foreign_cpu_share": 0.01},
    }
    summary.update(extra.pop("summary", {}))
    grid = {"model": model, "nproc_per_node": procs, "batch_size": batch, **extra.pop("grid", {})}
    return completed_record(
        f"{digest[:12]}-r{repeat}",
        index,
        repeat,
        grid=grid,
        config=config,
        summary=summary,
        run_dir=f"x{index}-{repeat}",
        elapsed_s=1.0,
        **extra,
    )


def configs(*rates_per_config: list[float], **kwargs) -> list[dict]:
    return [record(i, r, v, **kwargs) for i, rates in enumerate(rates_per_config) for r, v in enumerate(rates)]


# -- statistics on known numbers


def test_t_interval_on_known_numbers():
    e = mean_interval([100.0, 110.0, 105.0])
    half = 4.302652729911275 * 5.0 / math.sqrt(3)  # t(0.975, 2) * sd / sqrt(n)
    assert (e.value, e.sd, e.n) == (105.0, 5.0, 3)
    assert (e.low, e.high) == pytest.approx((105.0 - half, 105.0 + half))
    assert mean_interval([7.0]).low is None and mean_interval([]).value is None


def test_speedup_interval_on_known_numbers():
    a, b = [190.0, 200.0, 210.0], [100.0, 110.0, 105.0]
    s = ratio_interval(a, b)
    ratio = 200.0 / 105.0
    va, vb = 100.0 / (3 * 200.0**2), 25.0 / (3 * 105.0**2)  # variance of each mean, relative
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    q = scipy_stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert s.value == pytest.approx(ratio)
    assert (s.low, s.high) == pytest.approx((ratio * math.exp(-q), ratio * math.exp(q)))


def test_speedup_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    rng = random.Random(1)
    true_a, true_b, hits, trials = 180.0, 100.0, 0, 2000
    for _ in range(trials):
        a = [rng.gauss(true_a, 9.0) for _ in range(4)]
        b = [rng.gauss(true_b, 6.0) for _ in range(4)]
        s = ratio_interval(a, b)
        hits += s.low <= true_a / true_b <= s.high
    assert 0.92 <= hits / trials <= 0.98


def test_repeats_to_separate():
    a, b = mean_interval([100.0, 104.0, 96.0]), mean_interval([94.0, 98.0, 90.0])
    assert separated(a, b) is False
    n = repeats_to_separate(a, b)
    assert n is not None and n > 3
    grown = [mean_interval([m + d for d in [-4.0, 0.0, 4.0] * n][:n]) for m in (100.0, 94.0)]
    assert separated(*grown)  # n repeats with the same means and spreads do separate them


# -- verdicts


def test_clearly_separated_configurations_name_a_best():
    analysis = analyze(configs([100.0, 101.0, 99.0], [120.0, 121.0, 119.0]))
    (verdict,) = analysis.verdicts
    assert verdict.best == "cfg001" and verdict.tied == [] and not verdict.provisional
    assert verdict.difference == pytest.approx(0.2) and verdict.welch_p < 0.01


def test_overlapping_configurations_are_a_tie_naming_both(tmp_path):
    records = configs([100.0, 110.0, 90.0], [105.0, 95.0, 112.0], [60.0, 61.0, 59.0])
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    (verdict,) = analyze(records).verdicts
    assert verdict.best is None and verdict.tied == ["cfg001", "cfg000"]  # cfg002 is clearly slower: not tied
    assert set(verdict.repeats_needed) == {"cfg000"}
    report = write_report(tmp_path).read_text()
    assert "**Statistically tied: cfg001, cfg000**" in report and "Best:" not in report
    assert "repeats of each would separate them" in report or "treat them as equal" in report
    assert "statistically tied: cfg001, cfg000" in (tmp_path / "verdict.txt").read_text()
    assert "<strong>Statistically tied: cfg001, cfg000</strong>" in (tmp_path / "report.html").read_text()


def test_fewer_than_min_repeats_is_not_judged():
    (verdict,) = analyze(configs([100.0, 101.0], [150.0, 151.0])).verdicts
    assert verdict.provisional and verdict.best is None and verdict.recommended is None
    assert set(verdict.not_judged) == {"cfg000", "cfg001"}
    assert "2 usable runs of the 3 needed (min_repeats)" in verdict.not_judged["cfg001"]
    (two,) = analyze(configs([100.0, 101.0], [150.0, 151.0]), {"spec": {"min_repeats": 2}}).verdicts
    assert not two.provisional and two.best == two.recommended == "cfg001"
    (single,) = analyze(configs([100.0], [150.0]), {"spec": {"min_repeats": 1}}).verdicts
    assert single.best is None and single.tied == ["cfg001", "cfg000"]


def test_speedup_and_efficiency_keep_their_baseline(tmp_path):
    records = configs([100.0, 110.0, 105.0]) + [record(1, r, v, procs=2) for r, v in enumerate([190.0, 200.0, 210.0])]
    records += [record(2, r, v, procs=4) for r, v in enumerate([260.0, 270.0, 250.0])]
    records += [record(3, r, v, procs=2, batch=256) for r, v in enumerate([500.0, 510.0, 490.0])]  # no 1-process run
    analysis = analyze(records)
    speedups = [c.speedup for c in analysis.configs]
    assert speedups[0].value == 1.0 and speedups[1].value == pytest.approx(200.0 / 105.0)
    assert speedups[1].low < speedups[1].value < speedups[1].high
    assert analysis.configs[2].efficiency.value == pytest.approx(260.0 / 105.0 / 4)
    assert analysis.configs[2].efficiency.low == pytest.approx(speedups[2].low / 4)
    assert speedups[3] is None and analysis.configs[3].baseline is None


def test_superlinear_efficiency_and_a_diverged_run_are_flagged(tmp_path):
    records = configs([100.0, 101.0, 99.0])
    records += [record(1, r, v, procs=2) for r, v in enumerate([235.0, 236.0, 234.0])]  # efficiency 1.18
    records[1]["summary"]["diverged"] = "the training loss became NaN or infinite in epoch 1"
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    kinds = {(f.kind, f.config) for f in analyze(records).flags}
    assert ("superlinear", "cfg001") in kinds and ("diverged", "cfg000") in kinds
    report = write_report(tmp_path).read_text()
    trust = report.split("## Can I trust these numbers?")[1].split("\n## ")[0]
    assert "**superlinear** (1)" in trust and "efficiency 1.18" in trust and "**diverged** (1)" in trust
    assert "unfair baseline" in trust and "NaN" in trust  # each flag says what it means


def test_high_variation_few_iterations_and_oversubscription_are_flagged():
    records = configs([100.0, 140.0, 70.0])
    for r in records:
        r["summary"]["threads_per_process"] = 2
        r["config"]["nproc_per_node"] = 2
        r["summary"]["steps"] = {
            "ranks": [{"iterations": 8}],
            "global": {"step_s_p50": 0.01, "step_s_p90": 0.01, "data_share": 0.0},
            "straggler": None,
        }
    kinds = {f.kind for f in analyze(records).flags}
    assert {"high-variation", "few-iterations", "oversubscribed"} <= kinds


def test_contended_runs_are_left_out_of_the_verdict_unless_asked():
    records = configs([100.0, 101.0, 99.0, 300.0], [120.0, 121.0, 119.0, 119.5])
    records[3].update(contended=True)  # a wild value while another job ran
    records[3]["summary"]["contention"]["foreign_cpu_share"] = 0.45
    analysis = analyze(records)
    assert analysis.configs[0].samples_per_s == [100.0, 101.0, 99.0]
    assert analysis.verdicts[0].best == "cfg001"
    assert [f.detail for f in analysis.flags if f.kind == "contended"] == ["repeat 4: others used 45% of the CPUs"]
    included = analyze(records, include_contended=True)
    assert included.configs[0].samples_per_s == [100.0, 101.0, 99.0, 300.0]
    # Counted, its contended run makes it not judged: the other one is best only as the only one judged.
    assert "contended" in included.verdicts[0].not_judged["cfg000"] and included.verdicts[0].provisional


def test_a_rerun_replaces_its_contended_attempt():
    records = configs([100.0, 101.0, 99.0])
    records[2].update(contended=True)
    rerun = record(0, 2, 100.5, attempt=1)
    analysis = analyze([*records, rerun])
    assert analysis.configs[0].samples_per_s == [100.0, 101.0, 100.5]
    assert [(r.attempt, r.used) for r in analysis.configs[0].runs if r.repeat == 2] == [(0, False), (1, True)]


def test_mixed_models_get_a_verdict_each_and_no_cross_model_ratio(tmp_path):
    records = configs([4000.0, 4010.0, 3990.0], model="mlp")
    records += [record(1, r, v, model="cnn") for r, v in enumerate([100.0, 101.0, 99.0])]
    records += [record(2, r, v, model="cnn", procs=2) for r, v in enumerate([150.0, 151.0, 149.0])]
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    analysis = analyze(records)
    assert [(v.workload.split(",")[0], v.best) for v in analysis.verdicts] == [
        ("model=mlp", "cfg000"),
        ("model=cnn", "cfg002"),
    ]
    assert analysis.configs[2].speedup.value == pytest.approx(1.5)  # against cnn on 1 process, not the mlp
    report = write_report(tmp_path).read_text()
    cross = [f"{a / b:.1f}" for a in (4000.0, 3990.0) for b in (100.0, 150.0)] + ["the slowest configuration"]
    assert not any(ratio in report for ratio in cross)  # no MLP-vs-CNN figure anywhere
    assert "Workload model=mlp" in report and "Workload model=cnn" in report


def test_measured_share_comes_from_the_sessions():
    records = configs([100.0, 101.0, 99.0])
    for r in records:
        r["summary"]["steps"] = {
            "ranks": [{"iterations": 40}],
            "straggler": None,
            "global": {"window_s": 3.0, "step_s_p50": 0.01, "step_s_p90": 0.01, "data_share": 0},
        }
        r["elapsed_s"] = 4.0
        r["summary"].update(wall_time_s=3.6, train_time_s=3.3)
    analysis = analyze(records, {"sessions": [{"wall_s": 10.0}, {"wall_s": 5.0}]})
    assert analysis.measured_share == pytest.approx(9.0 / 15.0)
    assert analysis.measured_share_of_runs == pytest.approx(9.0 / 12.0)
    assert analysis.time_breakdown() == pytest.approx(
        {"start-up and writing": 1.2, "warm-up and epoch boundaries": 0.9, "evaluation": 0.9, "measured": 9.0}
    )


def test_hparams_hold_runs_and_aggregated_configurations(tmp_path):
    records = configs([100.0, 101.0, 99.0]) + [record(1, r, v, procs=2) for r, v in enumerate([150.0, 160.0, 155.0])]
    for number, r in enumerate(records):  # memory too: the HParams of "what fits"
        peak = (600 + number) * 2**20
        r["summary"]["memory"] = {"max": {"peak_rss_bytes": peak, "held_bytes": 2**20}, "ranks": []}
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    write_report(tmp_path)
    analysis = analyze(records)

    def session(path):
        events = EventAccumulator(str(path))
        events.Reload()
        content = events.PluginTagToContent("hparams")
        start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        return start.session_start_info.hparams, events

    hparams, events = session(tmp_path / "tb_hparams" / "runs" / "cfg001-r2")
    assert hparams["repeat"].string_value == "3" and hparams["nproc_per_node"].number_value == 2
    assert events.Scalars("hparam/samples_per_s")[0].value == pytest.approx(155.0)
    hparams, events = session(tmp_path / "tb_hparams" / "configs" / "cfg001")
    speedup = analysis.configs[1].speedup
    assert hparams["repeat"].string_value == "all" and hparams["world_size"].number_value == 2
    assert events.Scalars("hparam/samples_per_s")[0].value == pytest.approx(155.0)
    assert events.Scalars("hparam/speedup")[0].value == pytest.approx(speedup.value, rel=1e-6)
    assert events.Scalars("hparam/speedup_low")[0].value == pytest.approx(speedup.low, rel=1e-6)
    assert events.Scalars("hparam/efficiency_high")[0].value == pytest.approx(speedup.high / 2, rel=1e-6)
    assert events.Scalars("hparam/contended_runs")[0].value == 0.0
    assert events.Scalars("hparam/cv")[0].value == pytest.approx(statistics.stdev([150, 160, 155]) / 155, rel=1e-6)
    assert "_hparams_/experiment" not in events.PluginTagToContent("hparams")  # one description, at the root
    # The one experiment description TensorBoard's HParams plugin reads declares every session's metrics, the
    # configurations' speed-up and interval bounds included, and tells repeats from attempts.
    root = EventAccumulator(str(tmp_path / "tb_hparams"))
    root.Reload()
    experiment = plugin_metadata.parse_experiment_plugin_data(
        root.PluginTagToContent("hparams")[plugin_metadata.EXPERIMENT_TAG]
    )
    declared = {m.name.tag for m in experiment.metric_infos}
    assert {"hparam/samples_per_s", "hparam/speedup", "hparam/speedup_low", "hparam/speedup_high"} <= declared
    assert {"hparam/efficiency_low", "hparam/contended", "hparam/used", "hparam/fits"} <= declared
    assert {"hparam/peak_memory_mib", "hparam/peak_memory_mib_low", "hparam/held_mib"} <= declared
    assert events.Scalars("hparam/peak_memory_mib")[0].value == pytest.approx(604.0)  # cfg001's mean, MiB
    assert events.Scalars("hparam/held_mib")[0].value == pytest.approx(1.0)
    assert {"repeat", "attempt", "world_size", "workload"} <= {h.name for h in experiment.hparam_infos}


@pytest.mark.slow
def test_report_of_an_empty_directory_is_refused(tmp_path):
    result = run_cli("report", str(tmp_path), timeout=60)
    assert result.returncode == 2 and "no results" in result.stderr


def test_communication_figures_reach_the_breakdown_table_notes_and_hparams(tmp_path):
    """Rank 0 waits 8 ms per step in the all-reduce for rank 1: exposed communication is large, and named."""
    steps = {
        "ranks": [rank_steps(0, 0.010, 0.012), rank_steps(1, 0.002, 0.004)],
        "straggler": None,
        "global": {
            "window_s": 3.0,
            "step_s_p50": 0.034,
            "step_s_p90": 0.035,
            "data_share": 0.06,
            "overlap": 0.4,
            "busbw_Bps": 2e8,
        },
        "comm_wait": {"rank": 1, "wait_s": [0.008, 0.0], "median_wait_s": 0.008},
        "comm_reference": {"message_bytes": 60000, "seconds": 0.0003, "busbw_Bps": 4e8},
    }
    flops = {
        "per_sample": {"total": 3e7},
        "achieved_flops_per_s": 2.5e10,
        "utilisation_attainable": 0.2,
        "utilisation_peak": None,
    }
    summary = {"steps": steps, "flops": flops}
    records = [record(0, r, v, procs=2, summary=summary) for r, v in enumerate([150, 152, 148])]
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    config = analyze(records).configs[0]
    assert config.comm_timed and config.overlap == pytest.approx(0.4)
    # per rank: backward compute = backward - exposed; the parts add up to the iteration
    assert config.rank_phases[0]["backward_compute"] == pytest.approx(0.010)
    assert config.rank_phases[1]["exposed_comm"] == pytest.approx(0.002)
    iteration = 0.002 + 0.010 + 0.020 + 0.001 + 0.0005
    assert sum(config.phases.values()) == pytest.approx(iteration)
    assert config.exposed_share == pytest.approx(0.006 / iteration)
    assert config.comm_wait == {
        "rank": 1,
        "waiting": [0],
        "wait_s": pytest.approx(0.008),
        "share": pytest.approx(0.008 / iteration),
    }
    report = write_report(tmp_path).read_text()
    assert "rank 0 waits 8.0 ms per step for rank 1 in the gradient all-reduce" in report
    assert "| config | strategy | overlap % | exposed comm % | busbw GB/s | isolated GB/s |" in report
    assert "| config | MFLOPs per sample | GFLOP/s per rank | MFU % |" in report
    assert "% of datasheet peak" not in report  # no configuration has one: no empty column
    events = EventAccumulator(str(tmp_path / "tb_hparams" / "configs" / "cfg000"))
    events.Reload()
    assert events.Scalars("hparam/comm_overlap")[0].value == pytest.approx(0.4)
    assert events.Scalars("hparam/busbw_GBps")[0].value == pytest.approx(0.2)
    assert events.Scalars("hparam/utilisation_attainable")[0].value == pytest.approx(0.2)


# -- what fits: memory in the verdict


def _with_memory(rec: dict, peak_mib: float) -> dict:
    rec["summary"]["memory"] = {
        "source": "/proc (VmHWM)",
        "window": "after warm-up",
        "limit_bytes": None,
        "ranks": [],
        "max": {"peak_rss_bytes": peak_mib * 2**20, "held_bytes": 1e6, "workers_peak_rss_bytes": 0},
    }
    return rec


def _memory_sweep(spec: dict | None = None) -> dict:
    """Three configurations tied on speed: cfg000 one process with 600 MiB, cfg001 two processes with 400 MiB,
    cfg002 two processes with 300 MiB; and cfg003, clearly faster, that needs 900 MiB."""
    rates = {0: [100, 104, 98], 1: [101, 99, 103], 2: [99, 102, 100], 3: [150, 152, 149]}
    memory = {0: 600, 1: 400, 2: 300, 3: 900}
    procs = {0: 1, 1: 2, 2: 2, 3: 2}
    records = [
        _with_memory(record(i, r, v, procs=procs[i], batch=64 * (1 + i)), memory[i])
        for i in rates
        for r, v in enumerate(rates[i])
    ]
    return {"records": records, "meta": {"spec": spec or {}}}


def test_among_configurations_tied_on_speed_the_cheapest_is_recommended():
    sweep = _memory_sweep()
    tied = [r for r in sweep["records"] if r["index"] != 3]
    verdict = analyze(tied, sweep["meta"]).verdicts[0]
    assert verdict.best is None and set(verdict.tied) == {"cfg000", "cfg001", "cfg002"}
    assert verdict.recommended == "cfg000"  # fewest processes first
    assert "cfg000 uses 1 process instead of 2" in verdict.recommendation
    two_procs = [r for r in tied if r["index"] != 0]
    verdict = analyze(two_procs, sweep["meta"]).verdicts[0]
    assert verdict.recommended == "cfg002"  # then the lowest peak memory: 300 MiB against 400
    assert verdict.recommendation.endswith(
        "cfg002 needs 25 % less memory per rank (300 against 400 MiB), 25 % less in all (2 x 300 = 600 against "
        "2 x 400 = 800 MiB)"
    )
    config = analyze(two_procs, sweep["meta"]).config("cfg002")
    assert config.peak_memory.value == 300 * 2**20 and config.peak_memory.low == config.peak_memory.high  # sd 0


def test_memory_inside_the_noise_makes_no_configuration_cheaper():
    """Two configurations tied on speed whose peak memory differs by less than the runs' spread: the faster is
    recommended, with no "0 % less memory" reason; a difference beyond the spread still decides."""
    rates = {0: [101, 99, 103], 1: [99, 102, 100]}
    memory = {0: [553, 548, 558], 1: [541, 566, 552]}
    records = [_with_memory(record(i, r, v, procs=2), memory[i][r]) for i in rates for r, v in enumerate(rates[i])]
    verdict = analyze(records, {"spec": {}}).verdicts[0]
    assert set(verdict.tied) == {"cfg000", "cfg001"}
    assert verdict.recommended == "cfg000" and "none of them is cheaper" in verdict.recommendation
    for r in records:
        if r["index"] == 1:
            r["summary"]["memory"]["max"]["peak_rss_bytes"] -= 200 * 2**20
    verdict = analyze(records, {"spec": {}}).verdicts[0]
    assert verdict.recommended == "cfg001" and "% less memory per rank" in verdict.recommendation


def test_a_configuration_above_the_memory_limit_is_never_recommended(tmp_path):
    sweep = _memory_sweep({"memory_limit_mb": 800})
    analysis = analyze(sweep["records"], sweep["meta"])
    verdict = analysis.verdicts[0]
    assert verdict.best == "cfg003" and verdict.does_not_fit == ["cfg003"]
    assert verdict.recommended == "cfg000" and "cfg003 faster but does not fit" in verdict.recommendation
    assert any(f.kind == "does-not-fit" and f.config == "cfg003" for f in analysis.flags)
    without_limit = analyze(sweep["records"], {"spec": {}}).verdicts[0]
    assert without_limit.recommended == "cfg003"
    for rec in sweep["records"]:
        append_record(tmp_path / "results.jsonl", rec)
    (tmp_path / "sweep.json").write_text('{"spec": {"memory_limit_mb": 800}}')
    report = write_report(tmp_path).read_text()
    assert "**Recommended: cfg000" in report and "Does not fit (never recommended): cfg003." in report
    assert "| peak memory/rank MiB |" in report and "### Memory" in report


def _strategy_sweep() -> list[dict]:
    """A grid of strategy [ddp, fsdp] x nproc_per_node [1, 2]: ddp on one process ran as none (what its summaries
    say), fsdp on one process was refused before the sweep started (one record, never run)."""
    records = []
    for index, (strategy, procs, ran) in enumerate((("ddp", 1, "none"), ("ddp", 2, "ddp"), ("fsdp", 2, "fsdp"))):
        for repeat, rate in enumerate((100.0, 104.0, 98.0)):
            rec = record(
                index,
                repeat,
                rate * (1 + index),
                procs=procs,
                grid={"strategy": strategy},
                config={"strategy": strategy},
                summary={"strategy": ran},
            )
            records.append(_with_memory(rec, 500 - 50 * index))
    refused = record(3, 0, 0.0, procs=1, grid={"strategy": "fsdp"}, config={"strategy": "fsdp"})
    reason = "strategy fsdp needs 2 or more processes (one process: --strategy none)"
    refused.update(status="refused", summary=None, exit_code=None, error=reason, run_dir="", position=-1)
    return [refused, *records]


def test_ddp_on_one_process_has_one_label_in_every_table(tmp_path):
    """One process has nothing to average: the grid's ddp ran as none. Every table (the decision table's grid
    column, the memory table; the communication table lists only several processes) labels it alike, with both
    names, and the verdict's lines too; a strategy that ran as asked keeps its one name."""
    from ignite_ddl.report.tables import decision_table

    for rec in _strategy_sweep():
        append_record(tmp_path / "results.jsonl", rec)
    analysis = load(tmp_path)
    header, rows = decision_table(analysis)
    assert [row[header.index("strategy")] for row in rows] == ["ddp -> none (one process)", "ddp", "fsdp"]
    report = write_report(tmp_path).read_text()
    labelled = [line for line in report.splitlines() if line.startswith("| cfg000 |") and "none" in line]
    assert len(labelled) == 2, labelled  # the decision table's row and the memory table's
    assert all("| ddp -> none (one process) |" in line for line in labelled), labelled
    assert "| cfg001 | 2 | ddp |" in report and "| cfg002 | fsdp |" in report  # memory, communication
    # Without a summary (a run that failed) the label is resolved the same way; a refused one keeps its name.
    from ignite_ddl.report.model import strategy_label

    assert strategy_label("ddp", None, 1) == "ddp -> none (one process)" and strategy_label("fsdp", None, 1) == "fsdp"
    assert strategy_label("auto", "ddp", 2) == "auto -> ddp" and strategy_label(None, "ddp", 2) == "ddp"


def test_a_refused_configuration_is_listed_with_why_and_compared_with_none(tmp_path):
    """A configuration refused before the sweep started never ran: it is listed with its reason (the Refused
    table, the verdict's lines), is no row of the results' tables, and cannot make the verdict provisional (it
    could not have been the fastest)."""
    records = _strategy_sweep()
    analysis = analyze(records, {"spec": {}})
    assert [c.name for c in analysis.configs] == ["cfg000", "cfg001", "cfg002"]
    assert [(c.name, c.refusal) for c in analysis.refused] == [("cfg003", records[0]["error"])]
    assert analysis.verdicts[0].best == "cfg002" and not analysis.verdicts[0].provisional
    for rec in records:
        append_record(tmp_path / "results.jsonl", rec)
    report = write_report(tmp_path).read_text()
    refused, failures = report.split("## Refused")[1], report.split("## Refused")[0]
    assert f"| cfg003 | model=cnn, nproc_per_node=1, batch_size=64, strategy=fsdp | {records[0]['error']} |" in refused
    assert "| cfg003 |" not in failures and "## Failures" not in report
    # Refused by an earlier session, run by a later one: it ran, and its old refusal is no failure of it.
    stale = {**records[0], "index": 2, "key": records[-1]["key"].replace("-r2", "-r0"), "grid": records[-1]["grid"]}
    later = analyze([*records[1:], stale], {"spec": {}})
    assert not later.refused and [r.status for r in later.config("cfg002").runs] == ["completed"] * 3
    verdict = (tmp_path / "verdict.txt").read_text()
    assert "refused, not run: cfg003 (model=cnn, nproc_per_node=1, batch_size=64, strategy=fsdp): " in verdict


def test_a_configuration_that_ran_out_of_memory_does_not_fit():
    sweep = _memory_sweep()
    records = [r for r in sweep["records"] if r["index"] != 3]
    failed = record(3, 0, 0.0, procs=2)
    failed.update(status="out_of_memory", summary=None, error="rank 1 failed: out of memory: ...")
    analysis = analyze([*records, failed], sweep["meta"])
    assert analysis.config("cfg003").fits is False and "cfg003" in analysis.verdicts[0].does_not_fit
    assert any(f.kind == "out-of-memory" for f in analysis.flags)


# -- comparable runs only (issue 23.6): a sweep whose runs were made in different environments is judged per
# environment, never averaged across


def _environment(records: list[dict], repeats: set[int], versions: dict | None = None, **summary) -> list[dict]:
    """The records of the given repeats marked as made elsewhere (other versions, other summary facts)."""
    for r in records:
        if r["repeat"] in repeats:
            if versions is not None:
                r["summary"]["versions"] = versions
            r["summary"].update(summary)
    return records


TORCH_A = {"python": "3.11.7", "torch": "2.14.1", "ignite": "0.5.5", "cuda": ""}
TORCH_B = {**TORCH_A, "torch": "2.15.0"}


def test_a_sweep_resumed_with_another_torch_is_split_and_flagged(tmp_path):
    records = configs([100.0, 101.0, 99.0, 130.0, 131.0, 129.0])
    records += [record(1, r, v, procs=2) for r, v in enumerate([150.0, 151.0, 149.0, 140.0, 141.0, 139.0])]
    _environment(records, {0, 1, 2}, TORCH_A)
    _environment(records, {3, 4, 5}, TORCH_B)
    analysis = analyze(records)
    names = [c.name for c in analysis.configs]
    assert names == ["cfg000", "cfg000@env2", "cfg001", "cfg001@env2"]
    assert analysis.config("cfg000").samples_per_s == [100.0, 101.0, 99.0]  # never averaged with 130
    assert analysis.config("cfg000@env2").samples_per_s == [130.0, 131.0, 129.0]
    # one verdict per environment; each speed-up against the 1-process run of its own environment
    assert [v.best for v in analysis.verdicts] == ["cfg001", "cfg001@env2"]
    assert analysis.config("cfg001@env2").baseline == "cfg000@env2"
    assert analysis.config("cfg001@env2").speedup.value == pytest.approx(140.0 / 130.0)
    (flag,) = [f for f in analysis.flags if f.kind == "mixed-environments"]
    assert flag.config is None and "torch" in flag.detail and "2.14.1" in flag.detail and "2.15.0" in flag.detail
    assert "6 run(s)" in flag.detail and "Ignite" not in flag.detail  # says what differs, and only that
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    report = write_report(tmp_path).read_text()
    trust = report.split("## Can I trust these numbers?")[1].split("\n## ")[0]
    assert "**mixed-environments** (1)" in trust and "env 2 (torch 2.15.0)" in trust
    verdicts = (tmp_path / "verdict.txt").read_text().splitlines()
    assert len(verdicts) == 2 and "env 1 (torch 2.14.1)" in verdicts[0] and "env 2 (torch 2.15.0)" in verdicts[1]


def test_a_workload_label_leaves_out_the_options_that_are_off():
    """No "sync_bn=False, workload=None, workload_args={}" noise in the one-line summary and the group labels; a
    --workload's arguments read as keywords."""
    (plain,) = analyze(configs([100.0, 101.0, 99.0])).verdicts
    assert plain.workload == "model=cnn, dataset=synthetic, amp=none, optimizer=sgd"
    gpt = {"workload": "gpt", "workload_args": {"n_layer": 2}, "sync_bn": True}
    (own,) = analyze(configs([100.0, 101.0, 99.0], config=gpt)).verdicts
    assert own.workload == "amp=none, optimizer=sgd, sync_bn=True, workload=gpt, workload_args={n_layer=2}"


def test_a_configuration_with_no_iteration_measured_after_warm_up_is_not_judged():
    """Every iteration of a run was warm-up (a batch of 448 on 2048 samples: 4 iterations): its samples/s is the
    whole run's, start-up included, and the fastest such configuration is neither best nor recommended."""

    def steps(iterations: int) -> dict:
        return {"steps": {"ranks": [{**rank_steps(0, None, None), "iterations": iterations}], "global": {}}}

    records = [record(0, r, v, summary=steps(40)) for r, v in enumerate([100.0, 101.0, 99.0])]
    records += [record(1, r, v, batch=448, summary=steps(0)) for r, v in enumerate([300.0, 301.0, 299.0])]
    analysis = analyze(records)
    (verdict,) = analysis.verdicts
    warm = next(c for c in analysis.configs if c.index == 1)
    assert warm.not_judged is not None and "no iteration measured after warm-up" in warm.not_judged
    assert verdict.best != warm.name and verdict.recommended != warm.name


def test_a_plot_panel_names_only_the_workload_arguments_that_differ():
    """Two widths of one --workload: each panel's title says d_model=64 or d_model=128, not the whole dictionary of
    its arguments (which ran off the panel)."""
    from ignite_ddl.report.plots.layout import workloads

    def gpt(width: int) -> dict:
        return {"workload": "gpt", "workload_args": {"n_layer": 2, "d_model": width, "seq_len": 64}}

    records = [record(i, r, v, config=gpt(w)) for i, w in enumerate([64, 128]) for r, v in enumerate([99, 100, 101])]
    analysis = analyze(records)
    titles = [title for title, _ in workloads(analysis, analysis.configs)]
    assert titles == ["workload: d_model=64", "workload: d_model=128"] or titles == [
        "workload: d_model=128",
        "workload: d_model=64",
    ]


def test_the_decision_table_shows_the_workload_only_where_its_columns_do_not():
    """Two models in the grid: the model column already says which workload a row is, so no workload column (the
    longest cell of the table); runs from two environments: the environment is in no column, so it is shown."""
    from ignite_ddl.report.tables import decision_table

    two_models = [record(i, r, v, model=m) for i, m in enumerate(["cnn", "mlp"]) for r, v in enumerate([99, 100, 101])]
    analysis = analyze(two_models)
    assert len(analysis.verdicts) == 2
    header, rows = decision_table(analysis)
    assert "workload" not in header and "model" in header and len(rows[0]) == len(header)
    records = configs([100.0, 101.0, 99.0, 130.0, 131.0, 129.0])
    _environment(records, {0, 1, 2}, TORCH_A)
    _environment(records, {3, 4, 5}, TORCH_B)
    header, rows = decision_table(analyze(records))
    assert "workload" in header and "env 2 (torch 2.15.0)" in rows[1][header.index("workload")]


def test_the_environment_comes_from_each_run_folder_and_names_the_cpu(tmp_path):
    """Real records carry no versions: they are read from each run's config.json; the CPU model and the cores come
    from the summary (the device) and the run's host."""
    records = configs([100.0, 101.0, 99.0, 80.0, 81.0], [110.0, 111.0, 109.0, 90.0, 91.0])
    for r in records:
        run_dir = tmp_path / "runs" / f"cfg{r['index']:03d}-r{r['repeat']}"
        run_dir.mkdir(parents=True)
        r["run_dir"] = str(run_dir)
        later = r["repeat"] >= 3
        host = {"hostname": "b" if later else "a", "cpu": "Intel Xeon" if later else "AMD EPYC", "cpu_cores": 2}
        (run_dir / "config.json").write_text(json.dumps({"versions": TORCH_A, "host": host}))
        r["summary"]["device"] = {"type": "cpu", "name": host["cpu"]}
        append_record(tmp_path / "results.jsonl", r)
    analysis = load(tmp_path)
    (flag,) = [f for f in analysis.flags if f.kind == "mixed-environments"]
    assert "differ in CPU:" in flag.detail and "AMD EPYC" in flag.detail and "Intel Xeon" in flag.detail
    assert [c.name for c in analysis.configs] == ["cfg000", "cfg000@env2", "cfg001", "cfg001@env2"]
    assert analysis.config("cfg001@env2").samples_per_s == [90.0, 91.0]


def test_runs_that_do_not_say_where_they_ran_are_not_split():
    """Records of an older release (no versions, no run folder) join the environment they agree with."""
    records = configs([100.0, 101.0, 99.0], [110.0, 111.0, 109.0])
    _environment(records, {0}, TORCH_A)
    analysis = analyze(records)
    assert [c.name for c in analysis.configs] == ["cfg000", "cfg001"] and analysis.verdicts[0].best == "cfg001"
    assert not any(f.kind == "mixed-environments" for f in analysis.flags)
    assert all(c.environment is None for c in analysis.configs)


def test_runs_of_one_configuration_with_other_thread_counts_are_reported_apart():
    records = configs([100.0, 101.0, 99.0, 60.0, 61.0], [110.0, 111.0, 109.0])
    _environment(records, {3, 4}, threads_per_process=1)  # cfg000: 2 threads in repeats 1-3, 1 in repeats 4-5
    records[0]["summary"]["threads_per_process"] = 2
    analysis = analyze(records)
    assert [c.name for c in analysis.configs] == ["cfg000", "cfg000@threads=1", "cfg001"]
    assert analysis.config("cfg000").samples_per_s == [100.0, 101.0, 99.0]
    assert analysis.config("cfg000@threads=1").samples_per_s == [60.0, 61.0]
    (flag,) = [f for f in analysis.flags if f.kind == "mixed-environments"]
    assert flag.config == "cfg000" and "2 (3 run(s)), 1 (2 run(s))" in flag.detail


# -- multiple comparisons (issue 23.4)


def _leader_and_seven() -> list[dict]:
    """cfg000 leads a precise runner-up (cfg001) with intervals apart, by a margin one comparison accepts (one-sided
    Welch p = 0.018) and seven do not (5 % / 7 = 0.0071); the other six are far behind."""
    rates = [[100.0, 110.0, 120.0], [80.0, 80.1, 79.9]] + [[50.0 - i, 50.1 - i, 49.9 - i] for i in range(6)]
    return configs(*rates)


def test_with_eight_configurations_a_lead_one_comparison_would_accept_is_a_tie(tmp_path):
    records = _leader_and_seven()
    leader, runner_up = analyze(records).configs[:2]
    assert separated(leader.throughput, runner_up.throughput)  # the intervals alone would name cfg000 best
    (verdict,) = analyze(records).verdicts
    assert verdict.best is None and verdict.tied == ["cfg000", "cfg001"]
    assert "with 8 configurations compared a one-sided t-test on the pooled spread at 5 % / 7 (Bonferroni)" in (
        verdict.reason
    )
    # cfg000 is far noisier than the pooled spread (an F-test): it keeps its own, with its own 2 degrees of freedom
    assert not leader.throughput.pooled and leader.throughput.df == 2
    assert runner_up.throughput.pooled and runner_up.throughput.df == 16
    assert verdict.repeats_needed["cfg001"] is not None  # more repeats would settle it
    (pair,) = analyze([r for r in records if r["index"] < 2]).verdicts  # the same two alone: one comparison
    assert pair.best == "cfg000" and "one-sided Welch t-test at 5 %" in pair.reason
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    method = write_report(tmp_path).read_text().split("## Method")[1]
    assert "Multiple comparisons: with k configurations in a workload, the best must also be shown faster" in method
    assert "at 5 % / (k - 1) (Bonferroni" in method and "at most 5 % however many configurations" in method


def test_a_lead_that_welch_cannot_show_among_eight_the_pooled_spread_does():
    """Eight configurations at a 3 % spread, the leader 10 % ahead, 3 runs each: Welch's test between two (2 to 4
    degrees of freedom) at 5 % / 7 does not show the lead; the spread pooled over the eight (16) does."""
    rates = [[110.0 * f for f in (1.0, 1.03, 0.97)]] + [[100.0 - i, 103.0 - i, 97.0 - i] for i in range(7)]
    leader, runner_up = rates[0], rates[1]
    assert not outpaces(leader, runner_up, comparisons=7)
    (verdict,) = analyze(configs(*rates)).verdicts
    assert verdict.pooled and verdict.best == "cfg000", verdict.reason
    assert "one-sided t-test on the pooled spread at 5 % / 7" in verdict.reason
    alone = analyze(configs(*rates[:2])).verdicts[0]  # two configurations: each its own spread, as before
    assert not alone.pooled


def test_far_apart_configurations_are_still_separated_among_many():
    (verdict,) = analyze(configs(*[[100.0 + 50 * i, 101.0 + 50 * i, 99.0 + 50 * i] for i in range(8)])).verdicts
    assert verdict.best == "cfg007" and "each of the 7 others" in verdict.reason


# -- figures come from the runs the verdict uses


def _steps(p50: float) -> dict:
    return {
        "ranks": [{"iterations": 40, "step_s_p50": p50}],
        "global": {"step_s_p50": p50, "step_s_p90": p50, "data_share": 0.0},
        "straggler": None,
    }


def test_step_times_average_only_the_runs_the_verdict_uses():
    """A contended attempt (left out of the verdict) and its re-run share the run folder name: only the re-run's
    step time counts, as its throughput does."""
    records = configs([100.0, 101.0, 99.0])
    for r in records:
        r["summary"]["steps"] = _steps(0.010)
    contended = records[2]
    contended.update(contended=True)
    contended["summary"].update(samples_per_s=40.0, steps=_steps(0.500))
    rerun = record(0, 2, 99.0, attempt=1)
    rerun["summary"]["steps"] = _steps(0.010)
    config = analyze([*records, rerun]).configs[0]
    assert config.samples_per_s == [100.0, 101.0, 99.0]
    assert config.step_p50_s == pytest.approx(0.010) and config.step_p90_s == pytest.approx(0.010)
    counted = analyze([*records, rerun], include_contended=True).configs[0]
    assert counted.step_p50_s == pytest.approx(0.010)  # the re-run is still the attempt used


# -- scale


def test_a_view_of_many_configurations_keeps_the_named_ones_and_their_baselines():
    rates = [[100.0 + i, 101.0 + i, 99.0 + i] for i in range(30)]
    records = configs(*rates) + configs(*rates, procs=2, model="mlp")
    for r in records[len(records) // 2 :]:
        r["index"] += 30
    analysis = analyze(records)
    view = analysis.shown(10)
    assert view.omitted == 50 and len(view.configs) == 10
    assert {v.tied[0] for v in analysis.verdicts} <= {c.name for c in view.configs}  # the fastest of each workload
    assert {c.workload for c in view.configs} == {c.workload for c in analysis.configs}
    assert "Shown: 10 of the 60 configurations" in view.shown_note
    assert analysis.shown(100) is analysis and analysis.shown_note is None


def test_a_report_on_thousands_of_records_counts_every_one(tmp_path):
    """3000 records of 600 configurations: the report is written whole, every record is counted, and its tables,
    plots and verdict lines stay a readable size, saying what they leave out."""
    rng = random.Random(5)
    records = []
    for index in range(600):
        mean = rng.uniform(50, 150)
        procs = 1 + index % 2
        records += [record(index, r, rng.gauss(mean, 1.0), procs=procs, batch=16 + index) for r in range(5)]
    records[7].update(contended=True)
    with open(tmp_path / "results.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    report = write_report(tmp_path).read_text()
    analysis = load(tmp_path)
    assert sum(len(c.runs) for c in analysis.configs) == 3000 and len(analysis.configs) == 600
    assert analysis.used_runs == 2999 and not any(f.kind == "unreadable" for f in analysis.flags)
    assert "Shown: " in report and "of the 600 configurations" in report
    decision = report.split("## Configurations")[1].split("###")[0]
    assert decision.count("\n| cfg") <= 2 * TABLE_ROWS  # the named and the fastest, with their baselines
    assert all(len(line) < 2000 for line in (tmp_path / "verdict.txt").read_text().splitlines())
    assert len(list((tmp_path / "tb_hparams" / "configs").iterdir())) == 600


# Results files written by earlier releases of the suite, kept as they were written (a 2-configuration sweep of the
# toy model, 3 repeats each; the run folders are not kept): the first sweeps' records, and those written before the
# options layer (one declaration per option), the strategy seam and memory recording.
OLD_RESULTS = Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["results_first_sweeps.jsonl", "results_before_options.jsonl"])
def test_results_written_by_earlier_releases_still_report(tmp_path, name, capsys):
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "results.jsonl").write_bytes((OLD_RESULTS / name).read_bytes())
    analysis = load(folder)
    assert sorted((c.name, len(c.runs)) for c in analysis.configs) == [("cfg000", 3), ("cfg001", 3)]
    assert all(run.samples_per_s > 0 for c in analysis.configs for run in c.runs)
    assert not [f for f in analysis.flags if f.kind == "unreadable"], analysis.flags
    assert len(analysis.verdicts) == 1
    assert main(["report", str(folder)]) == 0
    assert (folder / "report.md").read_text().count("cfg00") >= 2 and (folder / "report.html").exists()
    assert capsys.readouterr().out.startswith("ignite-ddl: report: ")


def test_a_utilisation_above_the_measured_matmul_rate_is_flagged_not_printed(tmp_path):
    """No step does more arithmetic than the device's own largest matmul: 130 % of it is a flag, never a figure."""
    flops = {"per_sample": {"total": 3e7}, "achieved_flops_per_s": 2.5e10, "utilisation_attainable": 1.3}
    records = [record(0, r, v, summary={"flops": flops | {"utilisation_peak": None}}) for r, v in enumerate([150, 152])]
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    flags = [(f.kind, f.config) for f in analyze(records).flags]
    assert ("above-measured-peak", "cfg000") in flags
    report = write_report(tmp_path).read_text()
    assert "flagged: 130" in report and "| 130 |" not in report


def test_flops_not_counted_are_named_not_given_a_low_mfu(tmp_path):
    """A layer the FLOP counter could not see: the FLOPs table names it where the MFU would be, and the configuration
    is flagged; a run's utilisation of null is not read as a figure."""
    flops = {"per_sample": {"total": 3e7}, "achieved_flops_per_s": 2.5e8, "utilisation_attainable": None}
    flops |= {"utilisation_peak": None, "not_counted": ["my_model.FusedCell"], "by_formula": []}
    records = [record(0, r, v, summary={"flops": flops}) for r, v in enumerate([150, 152])]
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    flags = [(f.kind, f.config, f.detail) for f in analyze(records).flags]
    assert ("flops-not-counted", "cfg000", "FLOPs not counted: my_model.FusedCell (no MFU given)") in flags
    report = write_report(tmp_path).read_text()
    assert "| FLOPs not counted: my_model.FusedCell |" in report


class _Inner(TypedDict):
    rate: Annotated[float | None, "a rate", Shown("rate/s", scale=2.0)]
    hidden: Annotated[float, "not shown"]


class _Outer(TypedDict, total=False):
    inner: Annotated[_Inner | None, "nested and optional"]
    top: Annotated[int, "shown at the top", Shown("top")]


def test_a_figure_marked_shown_is_found_wherever_it_is_declared():
    """The report's generic figures come from the schema's declarations: shown_figures walks the typed records
    (optional and nested ones too) and gives each Shown figure's path; a figure without the mark is not shown."""
    assert shown_figures(_Outer) == [(("inner", "rate"), Shown("rate/s", 2.0)), (("top",), Shown("top"))]


def test_optimizer_steps_per_second_are_measured_and_shown(tmp_path):
    """The recorder measures optimizer steps per second (measured iterations over the window) and the report shows
    their mean over the runs in the timing table, declared only in the schema; older runs without it show no
    column."""
    from ignite.engine import Engine

    from ignite_ddl.measure.recorder import StepRecorder
    from ignite_ddl.report.tables import _timing_table

    engine = Engine(lambda engine, batch: None)
    recorder = StepRecorder(warmup=1).attach(engine)
    engine.run([(torch.zeros(4, 3), torch.zeros(4))] * 5)
    figures = recorder.gather()["global"]
    assert figures["optimizer_steps_per_s"] == pytest.approx(4 / figures["window_s"])

    def steps(rate: float) -> dict:
        return {"steps": {"ranks": [rank_steps(0, None, None)], "global": {"optimizer_steps_per_s": rate}}}

    records = [record(0, r, 100.0 + r, summary=steps(10.0 + 2 * r)) for r in range(3)]
    header, rows = _timing_table(analyze(records))
    assert rows[0][header.index("optimizer steps/s")] == pytest.approx(12.0)
    header, _ = _timing_table(analyze([record(0, r, 100.0 + r) for r in range(3)]))
    assert "optimizer steps/s" not in header


def test_impossible_memory_figures_are_skipped_and_said_to_be(tmp_path):
    """A negative peak, a CPU peak below the bytes the rank holds, a negative held count: no run produces these
    (a hand edit, a damaged file). Each such record is skipped with its reason, never averaged into "peak MiB"."""
    good = [_with_memory(record(0, r, v), 600) for r, v in enumerate([100.0, 101.0, 99.0])]
    bad = [_with_memory(record(0, 3 + r, 100.0), 600) for r in range(3)]
    bad[0]["summary"]["memory"]["max"]["peak_rss_bytes"] = -382 * 2**20
    bad[1]["summary"]["memory"]["max"]["peak_rss_bytes"] = 1e5  # below its 1e6 held bytes
    bad[2]["summary"]["memory"]["max"]["held_bytes"] = -1
    for r in good + bad:
        append_record(tmp_path / "results.jsonl", r)
    analysis = load(tmp_path)
    skipped = [f.detail for f in analysis.flags if f.kind == "unreadable"]
    assert len(skipped) == 3 and all("not memory a run can have" in s for s in skipped), skipped
    assert (
        "max: peak_rss_bytes -4.00556e+08 is negative" in skipped[0] and "below the 1e+06 bytes it holds" in skipped[1]
    )
    (config,) = analysis.configs
    assert config.peak_memory.value == pytest.approx(600 * 2**20)
