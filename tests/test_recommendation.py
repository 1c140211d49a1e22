"""The recommendation on hand-made results: a faster configuration that learns worse is never recommended, one with
its accuracy tied is; a configuration with too few usable runs, an unsettled one and a contended one are never best
nor recommended; every verdict's phrase appears only under its condition; relative differences name their base and
no interval of a positive quantity goes below zero."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest
from test_report import _with_memory, record

from ignite_ddl import TrainConfig, train
from ignite_ddl.core.results import append_record
from ignite_ddl.report import analyze, write_report
from ignite_ddl.report.comparisons import versus_text
from ignite_ddl.report.render import verdict_lines
from ignite_ddl.report.tables import _quality_table
from ignite_ddl.report.verdicts import EQUIVALENT_TEXT, INSEPARABLE_TEXT, TIED_TEXT

ROOT = Path(__file__).resolve().parents[1]
PLAIN = [100.0, 101.0, 99.0]
FAST = [130.0, 131.0, 129.0]


def _runs(index: int, rates: list[float], accuracies: list[float], hook: str = "none", **summary) -> list[dict]:
    """A configuration's runs of 2 epochs each (2 processes, a comm_hook), with these rates and accuracies."""
    return [
        record(
            index,
            repeat,
            rate,
            procs=2,
            config={"comm_hook": hook},
            grid={"comm_hook": hook},
            summary={"val_accuracy": accuracy, "epochs": 2, **summary},
        )
        for repeat, (rate, accuracy) in enumerate(zip(rates, accuracies))
    ]


def test_a_faster_configuration_that_learns_worse_is_not_recommended():
    records = _runs(0, PLAIN, [0.225, 0.230, 0.220]) + _runs(1, FAST, [0.168, 0.170, 0.166], hook="powersgd")
    analysis = analyze(records)
    (verdict,) = analysis.verdicts
    hooked = analysis.config("cfg001")
    assert verdict.best == "cfg001"  # the fastest on speed alone ...
    assert hooked.quality == "learns worse" and hooked.quality_reference == "cfg000"
    assert hooked.accuracy_difference.high < -0.01  # ... whose whole interval is below the reference's by the margin
    assert verdict.recommended == "cfg000" and "cfg001 faster but learns worse" in verdict.recommendation
    assert any(f.kind == "learns-worse" and f.config == "cfg001" for f in analysis.flags)
    assert analysis.config("cfg000").quality == "reference"


def test_a_faster_configuration_with_tied_accuracy_is_recommended():
    records = _runs(0, PLAIN, [0.225, 0.230, 0.220]) + _runs(1, FAST, [0.221, 0.229, 0.226], hook="powersgd")
    analysis = analyze(records)
    (verdict,) = analysis.verdicts
    assert analysis.config("cfg001").quality == "no worse"
    assert verdict.best == verdict.recommended == "cfg001"
    # A margin wider than the gap changes nothing; one narrower than the whole interval's distance would.
    worse = _runs(0, PLAIN, [0.225, 0.230, 0.220]) + _runs(1, FAST, [0.205, 0.207, 0.206], hook="powersgd")
    assert analyze(worse, {"spec": {"quality_margin": 0.05}}).verdicts[0].recommended == "cfg001"
    assert analyze(worse, {"spec": {"quality_margin": 0.005}}).verdicts[0].recommended == "cfg000"


def test_runs_of_one_epoch_say_their_quality_is_not_judged():
    records = _runs(0, PLAIN, [0.2] * 3, epochs=1) + _runs(1, FAST, [0.1] * 3, hook="powersgd", epochs=1)
    analysis = analyze(records)
    assert analysis.config("cfg001").quality_note == "quality not judged: 1 epoch"
    assert analysis.verdicts[0].recommended == "cfg001"
    assert "quality not judged: 1 epoch" in analysis.verdicts[0].recommendation


def _loss_runs(index: int, rates: list[float], losses: list[float], hook: str = "none", **summary) -> list[dict]:
    """A configuration's runs of a workload that reports no accuracy (a regression, a workload with
    accuracy=False): only a validation loss."""
    runs = _runs(index, rates, [None] * len(rates), hook, **summary)
    for run, loss in zip(runs, losses):
        run["summary"]["val_loss"] = loss
    return runs


TOKENS = {"workload": {"sample_unit": "tokens", "units_per_sample": 16}}


def test_a_workload_without_accuracy_is_judged_by_its_validation_loss(tmp_path):
    plain = _loss_runs(0, PLAIN, [0.500, 0.510, 0.490])
    analysis = analyze(plain + _loss_runs(1, FAST, [0.700, 0.710, 0.690], hook="powersgd"))
    (verdict,) = analysis.verdicts
    hooked = analysis.config("cfg001")
    assert hooked.quality_by == "loss" and hooked.quality == "learns worse" and hooked.quality_reference == "cfg000"
    assert hooked.loss_difference.value == pytest.approx(0.2) and hooked.loss_difference.low > 0.02 * 0.5
    assert hooked.accuracy_difference is None
    assert hooked.quality_note.startswith("learns worse: validation loss +0.2 against cfg000 (95 % interval +0.177")
    assert "beyond the margin of 0.01 (2 % of cfg000's mean loss 0.5)" in hooked.quality_note
    assert verdict.best == "cfg001" and verdict.recommended == "cfg000"  # the fastest, passed over for its loss
    assert "cfg001 faster but learns worse: validation loss" in verdict.recommendation
    assert any(f.kind == "learns-worse" and f.config == "cfg001" for f in analysis.flags)
    # The same loss, within the noise: not shown worse, and the fastest is recommended.
    tied = analyze(plain + _loss_runs(1, FAST, [0.505, 0.495, 0.500], hook="powersgd"))
    assert tied.config("cfg001").quality == "no worse" and tied.verdicts[0].recommended == "cfg001"
    assert tied.config("cfg001").quality_note.startswith("not shown worse by more than 0.01 (2 % of cfg000's")
    # The margin is quality_margin_loss, a share of the reference's mean loss; quality_margin (points) is not it.
    worse = plain + _loss_runs(1, FAST, [0.7] * 3)
    assert analyze(worse, {"spec": {"quality_margin_loss": 0.5}}).verdicts[0].recommended == "cfg001"
    assert analyze(worse, {"spec": {"quality_margin": 0.5}}).verdicts[0].recommended == "cfg000"
    # The report's table is headed by what it judges: val loss and the difference in loss, no accuracy column.
    for r in plain + _loss_runs(1, FAST, [0.700, 0.710, 0.690], hook="powersgd"):
        append_record(tmp_path / "results.jsonl", r)
    report = write_report(tmp_path).read_text()
    trade = report.split("### Speed and quality")[1].split("\n### ")[0]
    header = next(line for line in trade.splitlines() if line.startswith("| config |"))
    assert "| val loss |" in header and "| vs reference, loss |" in header
    assert "val acc" not in header and "val ppl" not in header and "points" not in header
    row = next(line for line in trade.splitlines() if line.startswith("| cfg001 |"))
    assert "| 0.7 | +0.2 (+0.177 to +0.223) vs cfg000 | learns worse: validation loss +0.2" in row
    timing = report.split("### Timing")[1].split("\n### ")[0]
    assert "| val loss |" in timing and "val acc" not in timing


def test_a_language_model_is_judged_by_its_loss_with_its_perplexity_shown():
    """The GPT workload reports a next-token accuracy, but a language model's quality is its loss and perplexity."""
    plain = _runs(0, PLAIN, [0.30, 0.31, 0.29], val_loss=3.30, **TOKENS)
    worse = _runs(1, FAST, [0.30, 0.31, 0.29], hook="powersgd", val_loss=4.10, **TOKENS)
    analysis = analyze(plain + worse)
    hooked = analysis.config("cfg001")
    assert hooked.quality_by == "loss" and hooked.quality == "learns worse"  # the same accuracy, a worse loss
    assert hooked.perplexity == pytest.approx(math.exp(4.1)) and "perplexity 60.3 against 27.1" in hooked.quality_note
    assert analysis.verdicts[0].recommended == "cfg000"
    header, rows = _quality_table(analysis)
    assert header == ["config", "samples/s", "interval", "val loss", "val ppl", "vs reference, loss", "quality"]
    assert rows[1][3:5] == [pytest.approx(4.1), pytest.approx(math.exp(4.1))]


def test_a_workload_with_accuracy_stays_judged_by_accuracy_and_mixed_tables_name_each_unit():
    # A worse loss, the same accuracy: an image classifier is judged by its accuracy, as before.
    same = _runs(0, PLAIN, [0.225, 0.230, 0.220], val_loss=1.0) + _runs(
        1, FAST, [0.221, 0.229, 0.226], hook="powersgd", val_loss=2.0
    )
    analysis = analyze(same)
    assert analysis.config("cfg001").quality_by == "accuracy" and analysis.config("cfg001").quality == "no worse"
    assert _quality_table(analysis)[0][3:5] == ["val acc", "vs reference, points"]
    # Two workloads, one judged by accuracy, one by loss: both columns, and each difference names its unit.
    other = [{**r, "config": {**r["config"], "model": "mlp"}} for r in _loss_runs(2, PLAIN, [0.5, 0.51, 0.49])]
    other += [
        {**r, "config": {**r["config"], "model": "mlp"}}
        for r in _loss_runs(3, FAST, [0.7, 0.71, 0.69], hook="powersgd")
    ]
    header, rows = _quality_table(analyze(same + other))
    assert header[3:6] == ["val acc", "val loss", "vs reference"]
    cells = {row[0]: row for row in rows}
    assert cells["cfg001"][5].endswith(" points vs cfg000") and cells["cfg003"][5].endswith(" loss vs cfg002")
    assert cells["cfg001"][4] is None and cells["cfg003"][3] is None


def test_runs_of_one_epoch_are_not_judged_on_their_loss_either():
    records = _loss_runs(0, PLAIN, [0.5] * 3, epochs=1) + _loss_runs(1, FAST, [0.9] * 3, hook="powersgd", epochs=1)
    analysis = analyze(records)
    assert analysis.config("cfg001").quality_note == "quality not judged: 1 epoch"
    assert analysis.verdicts[0].recommended == "cfg001"


@pytest.mark.parametrize(
    ("kind", "change"),
    [
        ("one usable run", lambda rs: [r for r in rs if r["repeat"] == 0]),
        ("unsettled", lambda rs: [_unsettled(r) for r in rs]),
        ("contended", lambda rs: [_contended(r) for r in rs]),
    ],
)
def test_a_configuration_not_judged_is_never_best_nor_recommended(kind, change):
    fastest = change(_runs(1, [200.0, 202.0, 198.0], [0.2] * 3))
    analysis = analyze(_runs(0, PLAIN, [0.2] * 3) + fastest, include_contended=True)
    (verdict,) = analysis.verdicts
    # The only one judged: recommended, but not "best": nothing was compared with it.
    assert verdict.best is None and verdict.recommended == "cfg000", verdict
    assert "cfg001" in verdict.not_judged and verdict.provisional
    assert kind.split()[-1] in verdict.not_judged["cfg001"]  # says why it was passed over
    assert "cfg001 faster but not judged" in verdict.recommendation
    assert any("not judged: cfg001" in line for line in verdict_lines(analysis))


def test_a_best_beside_a_faster_configuration_not_judged_says_it_lies_above_the_judged_ones():
    """experiments/ddp_vs_fsdp once read "Best: cfg001 ... its interval lies above every other configuration's" while
    cfg000, unsettled and so not judged, was measured faster: the sentence speaks of the configurations judged."""
    runs = _runs(0, PLAIN, [0.2] * 3) + _runs(1, [130.0, 131.0, 129.0], [0.2] * 3)
    runs += [_unsettled(r) for r in _runs(2, [200.0, 202.0, 198.0], [0.2] * 3)]
    (verdict,) = analyze(runs, include_contended=True).verdicts
    assert verdict.best == "cfg001" and "cfg002" in verdict.not_judged
    assert "lies above every other judged configuration's" in verdict.reason, verdict.reason
    (plain,) = analyze(runs[:6], include_contended=True).verdicts  # nothing passed over: no qualifier
    assert plain.best == "cfg001" and "lies above every other configuration's" in plain.reason, plain.reason


def _unsettled(rec: dict) -> dict:
    rec["summary"]["steps"] = {"global": {}, "ranks": [], "steady": {"settled": False}}
    return rec


def _contended(rec: dict) -> dict:
    rec["contended"] = True
    return rec


# -- every phrase only under its condition, on hand-made analyses

PHRASES = {
    "best": "**Best:",
    "tied": f"**{TIED_TEXT.capitalize()}:",
    "equivalent": f"**{EQUIVALENT_TEXT.format(margin=3).capitalize()}:",
    "inseparable": INSEPARABLE_TEXT,
}
CASES = {
    "best": ([100.0, 101.0, 99.0], [130.0, 131.0, 129.0]),
    # Far apart in mean but so noisy that they overlap: tied, a few more repeats would separate them.
    "tied": ([100.0, 110.0, 90.0], [112.0, 122.0, 102.0]),
    # Within 0.3 % of each other at a 0.1 % spread: the equivalence test passes.
    "equivalent": ([100.0, 100.1, 99.9], [100.3, 100.4, 100.2]),
    # 0.2 % apart at a 10 % spread: more than 100 repeats of each would be needed.
    "inseparable": ([100.0, 110.0, 90.0], [100.2, 110.2, 90.2]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_verdict_phrase_appears_only_under_its_condition(case, tmp_path):
    slow, fast = CASES[case]
    records = _runs(0, slow, [0.2] * 3) + _runs(1, fast, [0.2] * 3)
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    (verdict,) = analyze(records).verdicts
    report = write_report(tmp_path).read_text()
    verdict_section = report.split("## Can I trust")[0]
    expected = {
        "best": verdict.best is not None,
        "tied": bool(verdict.tied) and not verdict.equivalent,
        "equivalent": verdict.equivalent,
        "inseparable": any(n is None for n in verdict.repeats_needed.values()),
    }
    assert expected[case], (case, verdict)  # the hand-made analysis is the case it is meant to be
    for name, phrase in PHRASES.items():
        assert (phrase in verdict_section) == expected[name], (case, name, verdict_section)
    assert "treat them as equal" not in report
    if "Welch's t-test p = " in verdict_section:  # two configurations: one comparison, nothing called corrected
        assert "(one comparison: no correction)" in verdict_section and "corrected threshold" not in verdict_section
    _relative_differences_name_their_base(report)
    _no_positive_interval_below_zero(report)


def _relative_differences_name_their_base(report: str) -> None:
    """Every "x % faster/slower/more/less" says than what."""
    for match in re.finditer(r"\d % (faster|slower)\b(.{0,40})", report):
        assert match.group(2).startswith(" than "), match.group(0)
    assert not re.search(r"[-+]\d+(\.\d+)? %,? Welch", report)  # a bare signed difference beside a p-value
    # One figure per pair, always against the faster one: not "28.8 % slower" here and "+40.4 %" there.
    said: dict[frozenset[str], set[str]] = {}
    for match in re.finditer(r"(cfg\d+)(?: \(the runner-up\))? is (\d[\d.]*) % (faster|slower) than (cfg\d+)", report):
        said.setdefault(frozenset((match[1], match[4])), set()).add(match.group(0).replace(" (the runner-up)", ""))
    assert all(len(sentences) == 1 for sentences in said.values()), said
    assert not re.search(r"\d - \d", report)  # a range reads "a to b"


def _no_positive_interval_below_zero(report: str) -> None:
    """Throughputs, speed-ups and memory are positive and printed unsigned (differences carry a sign on both ends:
    "-3 to +5 %"): no unsigned range ("a to b") may start below zero, and no range is written with a hyphen that
    could be a minus sign ("-286-1553")."""
    _no_unsigned_range_below_zero(report)
    assert not re.search(r"\d-\d", report.replace("repeats-", ""))


def _no_unsigned_range_below_zero(text: str) -> None:
    for low, high in re.findall(r"(?<![\w.+])(-?\d[\d.]*) to (\d[\d.]*)", text):
        assert not low.startswith("-"), f"{low} to {high}"


def test_a_noisy_throughput_interval_is_clipped_at_zero_and_says_so(tmp_path):
    records = _runs(0, [100.0, 1500.0, 20.0], [0.2] * 3) + _runs(1, [120.0, 130.0, 125.0], [0.2] * 3)
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    analysis = analyze(records)
    assert analysis.config("cfg000").throughput.low < 0  # the t-interval itself reaches below zero ...
    report = write_report(tmp_path).read_text()
    _no_positive_interval_below_zero(report)  # ... the report never prints it so
    assert "clipped at 0" in report
    lines = [line for line in report.splitlines() if line.startswith("| cfg000 |")]
    assert lines and "0 to " in lines[0]


@pytest.mark.slow
@pytest.mark.distributed
def test_a_powersgd_run_is_measured_after_its_start_and_its_bytes_are_the_compressed_ones(tmp_path):
    """PowerSGD's start (iteration 10) inside the default window (warm-up 5): the measured window starts 5 iterations
    after it, and the bytes per step are the compressed phase's alone, not a blend with the plain all-reduces."""
    config = TrainConfig(
        model="mlp",
        nproc_per_node=2,
        comm_hook="powersgd",
        powersgd_start_iter=10,
        train_size=512,
        val_size=64,
        batch_size=32,
        epochs=2,  # 16 iterations an epoch
        output_dir=str(tmp_path),
        progress=False,
        measure_flops=False,
        checkpoints=False,
        best_model=False,
    )
    assert config.warmup_iters == 5 < config.powersgd_start_iter
    summary = train(config)
    with open(tmp_path / "steps_rank0.csv") as f:
        rows = list(csv.DictReader(f))
    plain = [int(r["comm_bytes"]) for r in rows if int(r["iteration"]) <= 10]
    compressed = [int(r["comm_bytes"]) for r in rows if int(r["iteration"]) > 10]
    assert min(plain) > 20 * max(compressed)  # two phases, far apart
    measured = [r for r in rows if r["warmup"] == "0"]
    assert measured and min(int(r["iteration"]) for r in measured) > 10 + config.warmup_iters
    steps = summary["steps"]
    assert steps["steady"]["first_measured_iteration"] > 10 + config.warmup_iters
    expected = sum(int(r["comm_bytes"]) for r in measured) / len(measured)
    rank0 = next(r for r in steps["ranks"] if r["rank"] == 0)
    assert rank0["comm_bytes_per_step"] == pytest.approx(expected) and rank0["comm_bytes_per_step"] <= max(compressed)
    # The warm-up phase is measured apart, beside the steady one: iterations 6-10 (after the fixed warm-up of 5).
    phase = steps["warmup_phase"]
    assert (phase["cause"], phase["first_iteration"], phase["last_iteration"]) == ("powersgd_start_iter", 6, 10)
    early = [int(r["comm_bytes"]) for r in rows if 6 <= int(r["iteration"]) <= 10]
    assert phase["comm_bytes_per_step"] >= 20 * rank0["comm_bytes_per_step"]
    assert min(early) <= phase["comm_bytes_per_step"] <= max(early)  # the ranks' mean: rank 0's rows bound it
    assert phase["samples_per_s"] > 0 and phase["step_s_p50"] > 0
    # The report shows both phases side by side; its other figures are the steady phase's.
    hook = {"comm_hook": "powersgd", "powersgd_start_iter": 10}
    rate = summary["samples_per_s"]
    for repeat in range(3):
        append_record(tmp_path / "results.jsonl", record(0, repeat, rate, procs=2, config=hook, summary=summary))
    report = write_report(tmp_path).read_text()
    table = report.split("### Two phases", 1)[1].split("###", 1)[0]
    (row,) = [line for line in table.splitlines() if line.startswith("| cfg000 |")]
    early, steady = phase["comm_bytes_per_step"] / 1e6, rank0["comm_bytes_per_step"] / 1e6
    assert "plain all-reduces until powersgd_start_iter" in row and "iterations 6 to 10" in row
    assert f"{early:.3g} -> " in row and f" -> {steady:.3g}" in row.split("|")[4]


def test_compilation_pays_back_only_from_a_separated_difference():
    """+1 % inside the noise gives no payback figure (it once read "pays its 25 s back after 13141 iterations");
    +25 % well outside it does."""
    steps = {"global": {}, "ranks": [], "compile": {"compile_s": 25.0}}

    from ignite_ddl.report.tables import _faster_step_table

    def sweep(eager_rates: list[float], compiled_rates: list[float], words: str, cell: str) -> dict:
        records = _runs(0, eager_rates, [0.2] * 3)
        records += [
            record(1, r, v, procs=2, grid={"compile": True}, config={"compile": True}, summary={"steps": steps})
            for r, v in enumerate(compiled_rates)
        ]
        analysis = analyze(records)
        compiled = analysis.config("cfg001")
        (versus,) = compiled.versus
        assert words in versus_text(compiled, versus)
        # The table's cell says what the sentence says (it once read "never" beside "no payback shown").
        header, rows = _faster_step_table(analysis)
        (row,) = rows
        assert row[header.index("pays back after")].endswith(cell), (row, cell)
        return versus

    noisy = sweep([100.0, 110.0, 90.0], [101.0, 111.0, 91.0], "no payback figure", "not separated")
    assert noisy["payback_iterations"] is None and not noisy["separated"]
    clear = sweep([100.0, 101.0, 99.0], [125.0, 126.0, 124.0], "pays its 25 s of compilation back after", " it.")
    assert clear["separated"] and clear["payback_iterations"] > 0
    # Slower on the mean inside the noise: not shown never to pay back; shown slower: never.
    sweep([100.0, 110.0, 90.0], [96.0, 106.0, 86.0], "no payback shown (not faster per step on the mean", "none shown")
    sweep([100.0, 101.0, 99.0], [80.0, 81.0, 79.0], "never pay back (not faster per step)", "never")


def test_utilisation_is_against_one_reference_per_device(tmp_path):
    """Each run measures its own matmul rate (45.4 GFLOP/s here, 46.8 there, under whatever else ran): every row is
    judged against the device's one reference, the highest measured, and the report names it."""

    def flops(achieved: float, rate: float) -> dict:
        rank = {"rank": 0, "achieved_flops_per_s": achieved, "attainable_flops_per_s": rate}
        return {"per_sample": {"total": 3e7}, "achieved_flops_per_s": achieved, "ranks": [rank]}

    records = _runs(0, PLAIN, [0.2] * 3, flops=flops(13.8e9, 45.4e9))
    records += _runs(1, FAST, [0.2] * 3, flops=flops(18.2e9, 46.8e9))
    analysis = analyze(records)
    assert {c.matmul_reference for c in analysis.configs} == {46.8e9}
    assert analysis.config("cfg000").utilisation_attainable == pytest.approx(13.8 / 46.8)
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    report = write_report(tmp_path).read_text()
    assert "the highest matmul rate any run of the sweep measured on it (cpu: 46.8 GFLOP/s)" in report
    assert "units/s" not in report  # no workload with a unit of its own: neither the column nor a word on it


def test_the_plots_draw_no_interval_below_zero_and_the_speed_quality_trade():
    from matplotlib.collections import LineCollection

    from ignite_ddl.core.figures import pyplot
    from ignite_ddl.report.plots import figures

    records = _runs(0, [100.0, 1500.0, 20.0], [0.225, 0.230, 0.220])  # an interval reaching below zero
    records += _runs(1, FAST, [0.168, 0.170, 0.166], hook="powersgd")
    analysis = analyze(records)
    assert analysis.config("cfg000").throughput.low < 0
    made = figures(analysis)
    try:
        for name in ("throughput.png", "speed_vs_quality.png"):
            for ax in made[name].axes:
                for collection in ax.collections:
                    if isinstance(collection, LineCollection):  # error bars
                        for segment in collection.get_segments():
                            assert segment[:, 0].min() >= 0 and segment[:, 1].min() >= 0, (name, segment)
        (panel,) = [ax for ax in made["speed_vs_quality.png"].axes if ax.get_xlabel()]
        crosses = [line for line in panel.get_lines() if line.get_marker() == "x"]
        assert len(crosses) == 1 and crosses[0].get_xdata()[0] == pytest.approx(0.168)  # cfg001 learns worse
    finally:
        for fig in made.values():
            pyplot().close(fig)


def test_the_report_ends_with_a_glossary_linked_from_first_use(tmp_path):
    records = _runs(0, PLAIN, [0.225, 0.230, 0.220]) + _runs(1, FAST, [0.168, 0.170, 0.166], hook="powersgd")
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    report = write_report(tmp_path).read_text()
    body, glossary = report.split("\n## Glossary\n")
    trade = body.split("### Speed and quality")[1].split("\n### ")[0]  # the speed-quality trade in one table
    row = next(line for line in trade.splitlines() if line.startswith("| cfg001 |"))
    assert "-5.7 (" in row and "vs cfg000" in row and "learns worse" in row
    anchors = re.findall(r'<a id="(glossary-[a-z0-9-]+)"></a>', glossary)
    assert {"glossary-workload", "glossary-learns-worse", "glossary-welch", "glossary-reference-configuration"} <= set(
        anchors
    )
    for anchor in anchors:  # each defined term is linked once, from the body
        assert body.count(f"](#{anchor})") == 1, anchor
    page = (tmp_path / "report.html").read_text()
    assert "<dt id='glossary-welch'>" in page and "<a href='#glossary-welch'>" in page


def _memory(rec: dict, strategy: str, peak_mib: float, held_mib: float) -> dict:
    rec["config"]["strategy"] = strategy
    rec["summary"]["strategy"] = strategy
    rec["summary"]["memory"] = {"max": {"peak_rss_bytes": peak_mib * 2**20, "held_bytes": held_mib * 2**20}}
    return rec


@pytest.mark.parametrize("limit", [None, 1000])
def test_fits_only_where_a_limit_was_given_and_sharding_explained(tmp_path, limit):
    records = [_memory(r, "ddp", 898, 224) for r in _runs(0, PLAIN, [0.2] * 3)]
    records += [_memory(r, "fsdp", 1244, 112) for r in _runs(1, FAST, [0.2] * 3)]
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    (tmp_path / "sweep.json").write_text(json.dumps({"spec": {"memory_limit_mb": limit}}))
    report = write_report(tmp_path).read_text()
    memory = report.split("### Memory")[1].split("\n## ")[0]
    header = next(line for line in memory.splitlines() if line.startswith("| config |"))
    assert ("fits" in header) == (limit is not None)
    assert (f"| fits {limit} MiB/rank |" in header) if limit else "No memory_limit_mb was given" in memory
    assert "cfg001 (fsdp) holds 112 MiB per rank against cfg000 (ddp)'s 224, yet its resident peak is 1244" in memory
    assert memory.count("all-gathers each layer's full parameters") == 1
    assert "| peak MiB in all |" in header  # memory in all beside memory per rank


def _outputs(notebook: Path) -> str:
    """Every text a notebook's executed copy shows, cell by cell."""
    texts = []
    for cell in json.loads(notebook.read_text())["cells"]:
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain") or []
            texts.append("".join(text) if isinstance(text, list) else str(text))
    return "\n".join(texts)


@pytest.mark.parametrize("notebook", sorted((ROOT / "docs" / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_the_shipped_notebooks_outputs_say_nothing_contradictory(notebook):
    """The executed copies show what a reader sees: no interval of a positive quantity below zero or written with
    a hyphen, no p-value without its corrected threshold, no relative difference without its base, no "equal" from
    a tie, and nothing recommended that was not judged."""
    shown = _outputs(notebook)
    assert "treat them as equal" not in shown
    assert not re.search(r"\(\d[\d.]*-\d[\d.]*\)", shown)  # "(1236-1613)": a hyphen could be a minus sign
    _no_unsigned_range_below_zero(shown)
    for line in shown.splitlines():
        if re.search(r"Welch(?:'s t-test)? p = ", line):
            assert "threshold" in line, line
    assert not re.search(r"[-+]\d+(\.\d+)? %,? Welch", shown)
    passed_over = set(re.findall(r"not judged[^:\n]*: (cfg\d{3})", shown))
    recommended = set(re.findall(r"recommended: (cfg\d{3})", shown))
    assert not passed_over & recommended


def test_one_unsettled_run_among_three_is_flagged_but_judged():
    """One noisy run among several is in the interval's spread already: flagged, still judged; most runs
    unsettled, the configuration is not."""
    runs = _runs(1, [200.0, 202.0, 198.0], [0.2] * 3)
    _unsettled(runs[0])
    analysis = analyze(_runs(0, PLAIN, [0.2] * 3) + runs)
    assert analysis.verdicts[0].best == "cfg001" and not analysis.verdicts[0].not_judged  # one run of three: judged
    assert any(f.kind == "unsettled" and f.config == "cfg001" for f in analysis.flags)
    _unsettled(runs[1])
    (verdict,) = analyze(_runs(0, PLAIN, [0.2] * 3) + runs).verdicts
    assert verdict.not_judged["cfg001"] == "unsettled (2 of its 3 runs never settled)"


def _memory_plot(records: list[dict]) -> tuple[object, list[float], list[float]]:
    """The analysis, and the memory (MiB, x) of the configurations throughput_vs_memory.png rings and stars."""
    from matplotlib.collections import PathCollection

    from ignite_ddl.core.figures import pyplot
    from ignite_ddl.report.plots import figures

    analysis = analyze(records)
    made = figures(analysis)
    try:
        (panel,) = [ax for ax in made["throughput_vs_memory.png"].axes if ax.get_xlabel()]
        assert panel.get_xlabel().startswith("peak memory in all")
        ringed = [x for c in panel.collections if isinstance(c, PathCollection) for x, _ in c.get_offsets()]
        starred = [x for line in panel.get_lines() if line.get_marker() == "*" for x in line.get_xdata()]
    finally:
        for fig in made.values():
            pyplot().close(fig)
    return analysis, sorted(ringed), starred


def test_the_pareto_front_and_the_recommendation_weigh_memory_in_all():
    """One process at 525 MiB against two at 556 MiB each, tied on speed: 53 % less memory in all, which both the
    sentence and the plot say (it once read "6 % less memory per rank" while the plot, per rank, ringed the other);
    two processes at 300 MiB each against one at 700 MiB: the two, 14 % less in all though 2.3x more per rank."""
    records = [_with_memory(record(0, r, v, procs=1), 525) for r, v in enumerate([1424.0, 1500.0, 1350.0])]
    records += [_with_memory(record(1, r, v, procs=2), 556) for r, v in enumerate([1500.0, 1520.0, 1480.0])]
    analysis, ringed, starred = _memory_plot(records)
    (verdict,) = analysis.verdicts
    assert verdict.recommended == "cfg000" and "53 % less in all (525 against 2 x 556 = 1112 MiB)" in (
        verdict.recommendation
    )
    assert ringed == pytest.approx([525, 1112]) and starred == pytest.approx([525])  # both on the front

    records = [_with_memory(record(0, r, v, procs=1), 700) for r, v in enumerate([101.0, 99.0, 103.0])]
    records += [_with_memory(record(1, r, v, procs=2), 300) for r, v in enumerate([99.0, 102.0, 100.0])]
    records += [_with_memory(record(2, r, v, procs=2), 400) for r, v in enumerate([100.0, 98.0, 99.0])]
    analysis, ringed, starred = _memory_plot(records)
    (verdict,) = analysis.verdicts
    assert verdict.recommended == "cfg001"
    assert verdict.recommendation.endswith(
        "cfg001 needs 57 % less memory per rank (300 against 700 MiB), 14 % less in all (2 x 300 = 600 against 700 MiB)"
    )
    # cfg002 (800 MiB in all, slower than cfg001) is beaten on both: off the front; cfg000 (700) is faster than cfg001
    assert ringed == pytest.approx([600, 700]) and starred == pytest.approx([600])


def test_a_speed_up_clear_of_one_beside_a_tie_says_why_both_hold(tmp_path):
    """Two processes at 102 samples/s (69 to 134) against one at 62 (35 to 89): the speed-up's own interval, 1.14
    to 2.37, is clear of 1 while the verdict, whose rule asks more, ties them; the report says why, and says nothing
    where no speed-up is clear of 1."""
    records = [record(0, r, v, procs=1) for r, v in enumerate([62.0, 51.0, 73.0])]
    records += [record(1, r, v, procs=2) for r, v in enumerate([102.0, 89.0, 115.0])]
    analysis = analyze(records)
    assert set(analysis.verdicts[0].tied) == {"cfg000", "cfg001"} and analysis.config("cfg001").speedup.low > 1
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    report = write_report(tmp_path).read_text()
    assert "cfg001's speed-up over cfg000 (1.14 to 2.37) lies clear of 1, yet the verdict ties them" in report
    close = [record(0, r, v, procs=1) for r, v in enumerate([62.0, 51.0, 73.0])]
    close += [record(1, r, v, procs=2) for r, v in enumerate([70.0, 55.0, 80.0])]
    (tmp_path / "close").mkdir()
    for r in close:
        append_record(tmp_path / "close" / "results.jsonl", r)
    assert "lies clear of 1" not in write_report(tmp_path / "close").read_text()


def test_a_compiled_configuration_shows_its_first_compilation_beside_its_steady_phase(tmp_path):
    """Hand-made compiled runs whose first 2 iterations compiled (4.1 and 3.9 s at the median): the two phases side
    by side, averaged over the runs; an eager configuration has no row."""

    def steps(early_s: float) -> dict:
        phase = {"cause": "compile", "first_iteration": 1, "last_iteration": 2, "samples_per_s": 30.0}
        phase |= {"step_s_p50": early_s, "comm_bytes_per_step": None}
        return {"global": {"step_s_p50": 0.05}, "ranks": [{"rank": 0}], "warmup_phase": phase}

    records = _runs(0, PLAIN, [0.2] * 3)
    records += [
        record(1, r, v, procs=2, grid={"compile": True}, config={"compile": True}, summary={"steps": steps(s)})
        for r, (v, s) in enumerate(zip(FAST, [4.1, 3.9, 4.0]))
    ]
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    assert analyze(records).config("cfg000").warmup_phase is None
    report = write_report(tmp_path).read_text()
    table = report.split("### Two phases", 1)[1].split("###", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| cfg")]
    assert rows == ["| cfg001 | compile=True: the first compilation | iterations 1 to 2 | 4000.0 -> 50.0 | 30 -> 130 |"]
