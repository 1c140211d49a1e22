"""Adaptive repeats (``repeats: auto``): the stopping rule on its own, the sweep loop driven by a seeded executor
that draws each run's throughput from a known distribution (so the right answer is known), the false-best rate of
the rule on A/A sweeps, and one real sweep."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import SMALL_SWEEP, run_cli
from simulated import Simulated, adaptive_outcome

from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.core.results import read_results
from ignite_ddl.report import analyze, write_report
from ignite_ddl.sweep.adaptive import AdaptiveRule, decide
from ignite_ddl.sweep.plan import expand
from ignite_ddl.sweep.runner import _sweep
from ignite_ddl.sweep.spec import parse_spec

RULE = AdaptiveRule(min_repeats=3, max_repeats=12, margin=0.03)


def test_a_clear_best_stops_at_the_minimum():
    decision = decide(
        {0: [100.0, 101, 99], 1: [80.0, 81, 79], 2: [60.0, 61, 59]}, dict.fromkeys(range(3), "w"), RULE, 3
    )
    assert decision.done and decision.outcome == {"w": "separated"} and decision.leader == {"w": 0}


def test_only_the_configurations_still_in_the_race_get_another_round():
    samples = {0: [100.0, 102, 98], 1: [99.0, 101, 97], 2: [50.0, 51, 49]}  # 0 and 1: equivalent in 7 rounds
    decision = decide(samples, dict.fromkeys(range(3), "w"), RULE, 3)
    assert decision.more == [0, 1] and decision.outcome == {"w": "undecided"}


def test_configurations_shown_within_the_margin_are_equivalent():
    samples = {0: [100.0, 100.2, 99.8, 100.1], 1: [99.9, 100.1, 99.7, 100.0]}
    assert decide(samples, {0: "w", 1: "w"}, RULE, 4).outcome == {"w": "equivalent"}


def test_the_limits_cut_an_undecided_comparison_short():
    close = {0: [100.0, 102, 98], 1: [99.0, 101, 97]}
    assert decide(close, {0: "w", 1: "w"}, RULE, 12).outcome == {"w": "max_repeats"}
    budget = AdaptiveRule(3, 12, 0.03, budget_s=100.0)
    cut = decide(close, {0: "w", 1: "w"}, budget, 3, elapsed_s=90.0, run_s=10.0)
    assert cut.done and cut.outcome == {"w": "budget"}
    assert decide(close, {0: "w", 1: "w"}, budget, 3, elapsed_s=70.0, run_s=10.0).more == [0, 1]
    # Below the minimum nothing stops a sweep, whatever the data says.
    assert decide({0: [100.0], 1: [50.0]}, {0: "w", 1: "w"}, RULE, 1).more == [0, 1]


def test_a_comparison_the_rounds_left_cannot_settle_stops_at_once():
    # 1 % apart at a 10 % spread: neither separated nor shown within 3 % in 2 x 12 rounds as measured: no more rounds.
    noisy = {0: [100.0, 110, 90], 1: [99.0, 109, 89]}
    decision = decide(noisy, {0: "w", 1: "w"}, RULE, 3)
    assert decision.done and decision.outcome == {"w": "out_of_reach"}
    # With room for 100 rounds the same pair is within reach (equivalence after about 150), so the rounds go on.
    assert decide(noisy, {0: "w", 1: "w"}, AdaptiveRule(3, 100, 0.03), 3).more == [0, 1]
    # Beyond the margin itself (5 % apart), equivalence is out of reach at any spread; separation is what remains.
    apart = {0: [100.0, 100.4, 99.6], 1: [95.0, 99.0, 91.0]}
    assert decide(apart, {0: "w", 1: "w"}, RULE, 3).more == [0, 1]


def test_workloads_are_decided_apart():
    samples = {0: [100.0, 101, 99], 1: [80.0, 81, 79], 2: [100.0, 102, 98], 3: [99.0, 101, 97]}
    decision = decide(samples, {0: "a", 1: "a", 2: "b", 3: "b"}, RULE, 3)
    assert decision.outcome == {"a": "separated", "b": "undecided"} and decision.more == [2, 3]


def simulate(
    tmp_path: Path, means: Sequence[float], cv: float, executor: Simulated | None = None, **spec: object
) -> tuple[Simulated, dict]:
    parsed = parse_spec(
        {
            "name": "sim",
            "grid": {"batch_size": [16 * (i + 1) for i in range(len(means))]},
            "repeats": "auto",
            "rerun_contended": 0,
            **spec,
        }
    )
    executor = executor or Simulated(means, cv)
    said: list[str] = []
    _sweep(parsed, tmp_path, list(expand(parsed, tmp_path)), executor, False, said.append)
    return executor, read_json(tmp_path / "sweep.json")


def test_a_sweep_with_a_clear_best_runs_the_minimum_and_names_it(tmp_path):
    executor, meta = simulate(tmp_path, [100.0, 80.0, 60.0], cv=0.01)
    assert len(executor.started) == 9  # 3 configurations x min_repeats
    adaptive = meta["sessions"][-1]["adaptive"]
    assert adaptive["rounds"] == 3 and list(adaptive["outcome"].values()) == ["separated"]
    assert analyze(read_results(tmp_path / "results.jsonl"), meta).verdicts[0].best == "cfg000"


def test_a_close_race_repeats_only_the_contenders_and_keeps_interleaving(tmp_path):
    # cfg000 and cfg001 are 0.5 % apart; cfg002 is far behind and must get no round past the minimum.
    executor, meta = simulate(tmp_path, [100.0, 99.5, 70.0], cv=0.02, max_repeats=10)
    runs = {i: sum(1 for index, _ in executor.started if index == i) for i in range(3)}
    assert runs[2] == 3 and runs[0] > 3 and runs[1] > 3
    outcome = next(iter(meta["sessions"][-1]["adaptive"]["outcome"].values()))
    assert outcome in ("separated", "equivalent", "max_repeats")
    rounds = [[index for index, repeat in executor.started if repeat == r] for r in range(3, max(runs.values()))]
    for earlier, later in zip(rounds, rounds[1:]):  # the direction alternates from round to round
        assert later == earlier[::-1]


def test_identical_configurations_end_equivalent_and_the_report_says_so(tmp_path):
    _, meta = simulate(tmp_path, [100.0, 100.0], cv=0.005, max_repeats=20)
    assert set(meta["sessions"][-1]["adaptive"]["outcome"].values()) == {"equivalent"}
    verdict = analyze(read_results(tmp_path / "results.jsonl"), meta).verdicts[0]
    assert verdict.best is None and verdict.equivalent and verdict.margin == 0.03
    assert "**Equivalent within ±3 %: cfg00" in write_report(tmp_path).read_text()


def test_a_tie_too_noisy_to_settle_costs_only_the_minimum_and_the_report_says_why(tmp_path):
    # Two identical configurations at 10 % spread: within 8 rounds (or 16) neither a best nor equivalence within
    # 3 % is in reach, and the sweep sees it after the minimum.
    executor, meta = simulate(tmp_path, [100.0, 100.0], cv=0.10, max_repeats=8)
    assert len(executor.started) == 6
    assert list(meta["sessions"][-1]["adaptive"]["outcome"].values()) == ["out_of_reach"]
    report = write_report(tmp_path).read_text()
    assert "stopped early, undecided: at the spread measured, even twice max_repeats rounds" in report
    assert analyze(read_results(tmp_path / "results.jsonl"), meta).verdicts[0].best is None


def test_a_contender_out_of_reach_stays_tied_while_the_others_go_on():
    """At a 10 % spread a near-tie with the leader (cfg1, 0.5 % behind) can be neither separated nor shown
    equivalent in 24 rounds, but cfg2, 15 % behind, can be separated: cfg2 and the leader run again, cfg1 does not;
    once only near-ties are left the workload stops out of reach."""
    samples = {0: [100.0, 110, 90], 1: [99.5, 109.5, 89.5], 2: [85.0, 95, 75]}
    decision = decide(samples, dict.fromkeys(samples, "w"), RULE, 3)
    assert decision.outcome == {"w": "undecided"} and decision.more == [0, 2]
    near_ties = decide({i: samples[i] for i in (0, 1)} | {2: [99.0, 109, 89]}, dict.fromkeys(range(3), "w"), RULE, 3)
    assert near_ties.outcome == {"w": "out_of_reach"} and near_ties.done


def test_a_budget_is_never_overrun(tmp_path):
    # Three identical configurations at 5 % spread: equivalence within 3 % needs far more runs than the budget
    # allows. Each run takes 0.2 s; the minimum is 9 runs (1.8 s); a round of 3 more runs must end within 3 s.
    sim = Simulated([100.0, 100.0, 100.0], cv=0.05, run_s=0.2, sleep=True)
    executor, meta = simulate(tmp_path, sim.means, sim.cv, executor=sim, max_repeats=50, budget_s=3.0)
    assert 9 < len(executor.started) <= 15
    assert list(meta["sessions"][-1]["adaptive"]["outcome"].values()) == ["budget"]


@pytest.mark.slow
def test_a_a_sweeps_rarely_name_a_false_best():
    """1000 simulated sweeps of 8 identical configurations (CV 2 %): the rule may name a best only by chance, and
    must do so in at most 5 % of them (the report's rule needs the best's interval above all 7 others')."""
    rule = AdaptiveRule(min_repeats=3, max_repeats=15, margin=0.03)
    rng = random.Random(1)
    false_best = sum(adaptive_outcome(lambda i: rng.gauss(100, 2), 8, rule) == "separated" for _ in range(1000))
    assert false_best <= 50, false_best


@pytest.mark.slow
def test_a_real_adaptive_sweep(tmp_path):
    """`--repeats auto` end to end: real runs, the rounds recorded in sweep.json, the report's verdict."""
    result = run_cli(
        "sweep",
        "--grid",
        "model=toy,mlp",
        "--set",
        "dataset=synthetic",
        *SMALL_SWEEP,
        "--repeats",
        "auto",
        "--min-repeats",
        "2",
        "--max-repeats",
        "3",
        "--workload",
        "dataset",
        "--output-dir",
        str(tmp_path),
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    meta = read_json(tmp_path / "sweep.json")
    adaptive = meta["sessions"][-1]["adaptive"]
    records = read_results(tmp_path / "results.jsonl")
    assert 2 <= adaptive["rounds"] <= 3 and len(records) >= 4
    assert "adaptive repeats: stopped after" in result.stdout
    assert meta["spec"]["adaptive"] is True


def test_the_stop_needs_the_lead_to_survive_the_correction_for_many_configurations():
    """The verdict's rule, multiple comparisons included: a leader whose interval clears a precise runner-up's is
    separated among two configurations, but among eight (one-sided Welch p = 0.018 > 5 % / 7) the two run again;
    the configurations far behind do not."""
    leader, runner_up = [100.0, 110.0, 120.0], [80.0, 80.1, 79.9]
    far = {i: [50.0 - i, 50.1 - i, 49.9 - i] for i in range(2, 8)}
    two = decide({0: leader, 1: runner_up}, {0: "w", 1: "w"}, RULE, 3)
    assert two.outcome == {"w": "separated"}
    eight = decide({0: leader, 1: runner_up, **far}, dict.fromkeys(range(8), "w"), RULE, 3)
    assert eight.outcome == {"w": "undecided"} and eight.more == [0, 1]
    # the report reads the same samples the same way
    records = [
        {
            "key": f"k{i}-r{r}",
            "index": i,
            "repeat": r,
            "status": "completed",
            "grid": {"batch_size": 16 * (i + 1)},
            "config": {"batch_size": 16 * (i + 1)},
            "summary": {"world_size": 1, "samples_per_s": v},
        }
        for i, rates in {0: leader, 1: runner_up, **far}.items()
        for r, v in enumerate(rates)
    ]
    verdict = analyze(records).verdicts[0]
    assert verdict.best is None and verdict.tied == ["cfg000", "cfg001"]
    assert analyze([r for r in records if r["index"] < 2]).verdicts[0].best == "cfg000"
