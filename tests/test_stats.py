"""The pooled spread (``stats.pooled_estimates``): what it gains over Welch's test between two, and the false-best
rate of the verdict's rule on simulated workloads whose configurations are identical in speed but not in spread,
looking once and with adaptive repeats looking after every round."""

from __future__ import annotations

import math
import random

import pytest
from simulated import adaptive_outcome

from ignite_ddl.report.stats import (
    POOL_FROM,
    leads,
    mean_interval,
    pooled_estimates,
    repeats_to_separate,
)
from ignite_ddl.sweep.adaptive import AdaptiveRule


def _named_best(samples: dict[int, list[float]], level: float | None) -> int | None:
    """The configuration the verdict's rule names best (shown faster than each other at 5 % / (k - 1)), or None."""
    estimates = pooled_estimates(samples, own_spread_level=level)
    order = sorted(estimates, key=lambda i: estimates[i].value or 0.0, reverse=True)
    top, others = estimates[order[0]], len(order) - 1
    return order[0] if all(leads(top, estimates[i], others) for i in order[1:]) else None


def _one_noisy(k: int) -> list[float]:
    """Log-scale spreads: one configuration 4 times noisier (12 %) than the other k - 1 (3 %)."""
    return [0.12] + [0.03] * (k - 1)


def _false_best_rate(k: int, sweeps: int, level: float | None, seed: int = 1) -> float:
    rng = random.Random(seed)
    spreads = _one_noisy(k)
    named = 0
    for _ in range(sweeps):
        samples = {i: [100 * math.exp(rng.gauss(0, spreads[i])) for _ in range(3)] for i in range(k)}
        named += _named_best(samples, level) is not None
    return named / sweeps


def test_the_spread_is_pooled_from_three_configurations_with_two_runs():
    two = pooled_estimates({"a": [100.0, 102, 98], "b": [90.0, 91, 89], "c": [80.0]})  # c has one run
    assert POOL_FROM == 3 and not any(e.log_scale for e in two.values())
    assert two["a"] == mean_interval([100.0, 102, 98])
    three = pooled_estimates({"a": [100.0, 102, 98], "b": [90.0, 91, 89], "c": [80.0, 81, 79]})
    assert all(e.pooled and e.df == 6 for e in three.values())
    # the same spread for all: the precise ones' intervals widen, the noisier one's narrows
    widths = {k: math.log(e.high / e.low) for k, e in three.items()}  # type: ignore[operator]
    assert widths["a"] == pytest.approx(widths["c"]) and three["a"].value == 100.0


def test_a_configuration_noisier_than_the_pool_keeps_its_own_spread():
    samples = {i: [100.0 - i, 101.0 - i, 99.0 - i] for i in range(7)} | {7: [70.0, 100.0, 130.0]}
    estimates = pooled_estimates(samples)
    assert not estimates[7].pooled and estimates[7].df == 2  # its own 2 degrees of freedom
    assert all(estimates[i].pooled and estimates[i].df == 16 for i in range(7))
    blind = pooled_estimates(samples, own_spread_level=None)
    assert blind[7].pooled and blind[7].high < estimates[7].high  # type: ignore[operator]


def test_pooling_separates_with_fewer_repeats_than_welch():
    """At a 3 % spread, 8 configurations, a lead of 10 %: Welch's test between two needs more repeats than the
    pooled spread does (its degrees of freedom are the pair's, not the workload's)."""
    samples = {0: [110.0, 113.3, 106.7]} | {i: [100.0 - i, 103.0 - i, 97.0 - i] for i in range(1, 8)}
    pooled = pooled_estimates(samples)
    welch = {i: mean_interval(v) for i, v in samples.items()}
    by_pool = repeats_to_separate(pooled[0], pooled[1], comparisons=7)
    by_welch = repeats_to_separate(welch[0], welch[1], comparisons=7)
    assert by_pool is not None and by_welch is not None and by_pool < by_welch
    assert by_pool <= 3  # already separated: the verdict names it
    assert _named_best(samples, 0.05) == 0


@pytest.mark.slow
def test_identical_configurations_of_unequal_spread_rarely_get_a_false_best():
    """1000 simulated workloads of 8 and of 32 configurations identical in speed, one of them 4 times noisier than
    the rest, 3 runs each: the rule names a false best in at most 3 % of them (the guarantee is 5 %); pooling that
    noisy one's spread with the others' does worse."""
    for k in (8, 32):
        rule, blind = _false_best_rate(k, 1000, 0.05), _false_best_rate(k, 1000, None)
        assert rule <= 0.03, (k, rule)
        assert rule < blind, (k, rule, blind)


@pytest.mark.slow
def test_adaptive_repeats_on_unequal_spreads_rarely_stop_on_a_false_best():
    """300 simulated adaptive sweeps of 8 identical configurations, one 4 times noisier: stopping as soon as the rule
    names a best (looking after every round) names a false one in at most 5 % of them."""
    rule = AdaptiveRule(min_repeats=3, max_repeats=15, margin=0.03)
    rng = random.Random(1)
    spreads = _one_noisy(8)
    false_best = sum(
        adaptive_outcome(lambda i: 100 * math.exp(rng.gauss(0, spreads[i])), 8, rule) == "separated" for _ in range(300)
    )
    assert false_best <= 15, false_best
