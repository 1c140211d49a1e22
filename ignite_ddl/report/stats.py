"""Intervals and tests over repeated runs: the run is the unit of replication, never the step.

- :func:`mean_interval`: mean and two-sided Student-t confidence interval over repeats.
- :func:`ratio_interval`: a ratio of two means (speed-up) with a delta-method interval on the log scale and
  Welch–Satterthwaite degrees of freedom (the two sets of runs are independent and may have unequal spreads).
- :func:`separated`: two configurations differ when their intervals do not overlap. Conservative on purpose:
  between identical configurations it names a false winner far less often than a t-test at the same confidence
  (simulated with 3–8 repeats: about 0.5 % against 3–5 %), and a reader can check it by eye on the plots' error
  bars.
- :func:`outpaces`: the verdict's rule for "the leader is faster than that one", one of the ``k - 1`` comparisons of
  the leader with the other configurations of its workload: the intervals do not overlap **and** a one-sided Welch
  t-test rejects "no faster" at ``5 % / (k - 1)`` (Bonferroni). A best named this way is the wrong one with
  probability at most 5 % whatever ``k`` (multiple comparisons with the best: a wrong leader must have beaten the
  true best, one of ``k - 1`` comparisons each at ``5 % / (k - 1)``), where intervals alone let that chance grow
  with ``k``.
- :func:`pooled_estimates`: a workload's intervals from one spread pooled over its configurations, on the log
  scale (a run's speed moves by a share, not an amount, and alike whatever the configuration), so three runs of
  each give dozens of degrees of freedom where Welch's test gives two to four; a configuration whose own spread is
  larger than the pooled one (an F-test at 5 %) keeps its own. :func:`leads` and :func:`repeats_to_separate` take
  such estimates as they come.
- :func:`welch_p`: Welch's t-test p-value, reported beside the rule.
- :func:`repeats_to_separate`: how many repeats per configuration would make two intervals stop overlapping, if the
  means and spreads stayed as measured; :func:`repeats_to_equivalence`: how many would show them equivalent.

Example:
    >>> e = mean_interval([100.0, 110.0, 105.0])
    >>> round(e.value, 1), round(e.low, 1), round(e.high, 1)
    (105.0, 92.6, 117.4)
    >>> s = ratio_interval([200.0, 210.0, 190.0], [100.0, 110.0, 105.0])
    >>> round(s.value, 3), s.low < s.value < s.high
    (1.905, True)
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "CONFIDENCE",
    "EQUIVALENCE_CONFIDENCE",
    "EQUIVALENCE_MARGIN",
    "Estimate",
    "difference_interval",
    "POOL_FROM",
    "positive_range",
    "pooled_estimates",
    "equivalent",
    "greater_p",
    "leads",
    "mean_interval",
    "outpaces",
    "rank_correlation",
    "ratio_interval",
    "repeats_to_equivalence",
    "repeats_to_separate",
    "separated",
    "welch_greater_p",
    "welch_p",
]

CONFIDENCE = 0.95
K = TypeVar("K", bound=Hashable)


def _scipy() -> Any:
    """scipy.stats, imported when first needed: it imports torch where torch is installed (its array-API
    support), and a sweep spec read for ``--help`` or a refusal must not pay for that."""
    from scipy import stats

    return stats


@dataclass(frozen=True)
class Estimate:
    """A figure over repeats: its value, the confidence interval's bounds (None with fewer than 2 runs), the runs it
    came from and their standard deviation; from :func:`pooled_estimates`, also the mean of the runs' logs and the
    spread the tests use on the log scale, with its degrees of freedom and whether it is the pooled one."""

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0
    sd: float | None = None
    log_mean: float | None = None
    log_sd: float | None = None
    df: float | None = None
    pooled: bool = False

    @property
    def log_scale(self) -> bool:
        """Whether the tests read this estimate on the log scale (:func:`pooled_estimates`)."""
        return self.log_mean is not None and self.log_sd is not None and self.df is not None

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def half_width(self) -> float | None:
        return (self.high - self.low) / 2 if self.low is not None and self.high is not None else None

    @property
    def cv(self) -> float | None:
        """Coefficient of variation: standard deviation over mean."""
        if self.sd is None or not self.value:
            return None
        return self.sd / self.value

    def scaled(self, factor: float) -> Estimate:
        """The same estimate multiplied by a constant."""

        def mul(v: float | None) -> float | None:
            return None if v is None else v * factor

        shifted = self.log_mean + math.log(factor) if self.log_mean is not None and factor > 0 else None
        return Estimate(
            mul(self.value),
            mul(self.low),
            mul(self.high),
            self.n,
            mul(self.sd),
            shifted,
            self.log_sd if shifted is not None else None,
            self.df if shifted is not None else None,
            self.pooled and shifted is not None,
        )


@functools.lru_cache(maxsize=4096)  # simulations of whole sweeps ask for the same few quantiles many times
def _t(confidence: float, df: float) -> float:
    return float(_scipy().t.ppf((1 + confidence) / 2, df))


def positive_range(e: Estimate | None, fmt: str = ".0f") -> str:
    """The interval of a positive quantity (a throughput, a speed-up, memory) as text, ``low to high`` (a hyphen
    could read as a minus sign), or ``-``; a low end below zero (a t-interval over a few noisy runs) is clipped at 0
    and says so.

    >>> positive_range(Estimate(660.0, -286.0, 1553.0)), positive_range(Estimate(1424.0, 1236.4, 1613.2))
    ('0 to 1553 (clipped at 0)', '1236 to 1613')
    """
    if e is None or e.low is None or e.high is None:
        return "-"
    if e.low < 0:
        return f"0 to {format(e.high, fmt)} (clipped at 0)"
    return f"{format(e.low, fmt)} to {format(e.high, fmt)}"


def prediction_range(low: float | None, high: float | None, fmt: str = ".1f") -> str | None:
    """A predicted interval as ``low to high``, or None where it has no width to show: a bound missing, or both ends
    equal to 4 significant figures (a prediction from a single run has no spread).

    >>> prediction_range(40.25, 47.0), prediction_range(40.0, 40.0), prediction_range(None, 3.0)
    ('40.2 to 47.0', None, None)
    """
    if not low or not high or f"{low:.4g}" == f"{high:.4g}":
        return None
    return f"{format(low, fmt)} to {format(high, fmt)}"


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """Mean of ``values`` with its Student-t confidence interval (no interval from fewer than 2 values)."""
    n = len(values)
    if n == 0:
        return Estimate(None)
    mean = statistics.fmean(values)
    if n < 2:
        return Estimate(mean, n=1)
    sd = statistics.stdev(values)
    half = _t(confidence, n - 1) * sd / math.sqrt(n)
    return Estimate(mean, mean - half, mean + half, n, sd)


# From this many configurations with 2 runs or more, a workload's spread is pooled (:func:`pooled_estimates`); with
# two, pooling adds little to Welch's degrees of freedom and leans on one configuration's spread for the other's.
POOL_FROM = 3
OWN_SPREAD_LEVEL = 0.05  # an F-test at this level finds a configuration's own spread larger than the pooled one


@functools.lru_cache(maxsize=4096)
def _f(level: float, df_own: float, df_pooled: float) -> float:
    return float(_scipy().f.ppf(level, df_own, df_pooled))


def pooled_estimates(
    samples: Mapping[K, Sequence[float]],
    confidence: float = CONFIDENCE,
    own_spread_level: float | None = OWN_SPREAD_LEVEL,
) -> dict[K, Estimate]:
    """Each configuration's mean throughput with an interval from the spread of the logs of its runs pooled over
    every configuration with 2 runs or more, when there are :data:`POOL_FROM` of them or more (fewer: each its own
    Student-t interval, :func:`mean_interval`).

    Why pooled: with 3 runs a configuration, Welch's test between two has 2 to 4 degrees of freedom, so a leader
    compared with 95 others (at 5 % / 95, Bonferroni) must be about 30 standard errors ahead; a machine's run-to-run
    noise is a share of the speed, alike across configurations, and pooled over 96 of them has 192 degrees of
    freedom (t = 3.3). Why not blindly: a configuration noisier than the rest (its own variance above the pooled one
    by an F-test at 5 %) keeps its own spread with its own ``n - 1`` degrees of freedom, and :func:`leads` combines
    two spreads by Welch-Satterthwaite. On simulated workloads of identical speed where one configuration is 4
    times noisier than the rest, this names a false best in 2.0 % (8 configurations) and 0.6 % (32) of sweeps, where
    pooling the noisy one too gives 3.6 and 4.5 %; adaptive repeats looking after every round, 3.3 % (8)
    (``tests/test_stats.py``).

    The interval is ``exp(mean log ± t * s / sqrt(n))``; the value stays the runs' mean. ``own_spread_level=None``
    pools every configuration's spread, however noisy (for comparison only).

    Example (three configurations at a 1 % spread: pooled, 6 degrees of freedom; alone, 2):
        >>> e = pooled_estimates({"a": [100.0, 101, 99], "b": [90.0, 91, 89], "c": [80.0, 81, 79]})
        >>> e["a"].df, e["a"].pooled, round(e["a"].low, 1), round(e["a"].high, 1)
        (6, True, 98.4, 101.6)
        >>> alone = mean_interval([100.0, 101, 99])
        >>> round(alone.low, 1), round(alone.high, 1)
        (97.5, 102.5)
    """
    plain = {key: mean_interval(values, confidence) for key, values in samples.items()}
    logs = {
        key: [math.log(v) for v in values]
        for key, values in samples.items()
        if len(values) >= 2 and all(v > 0 for v in values)
    }
    if len(logs) < POOL_FROM:
        return plain
    df = sum(len(v) - 1 for v in logs.values())
    pooled_var = sum(statistics.variance(v) * (len(v) - 1) for v in logs.values()) / df
    for key, values in logs.items():
        n, own = len(values), statistics.variance(values)
        noisier = (
            own_spread_level is not None and pooled_var > 0 and own / pooled_var > _f(1 - own_spread_level, n - 1, df)
        )
        var, dof = (own, n - 1) if noisier else (pooled_var, df)
        centre, half = statistics.fmean(values), _t(confidence, dof) * math.sqrt(var / n)
        e = plain[key]
        plain[key] = Estimate(
            e.value, math.exp(centre - half), math.exp(centre + half), n, e.sd, centre, math.sqrt(var), dof, not noisier
        )
    return plain


def ratio_interval(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = CONFIDENCE
) -> Estimate:
    """mean(numerator) / mean(denominator) with a confidence interval.

    The log of the ratio has variance about ``var_a / (n_a mean_a^2) + var_b / (n_b mean_b^2)`` (delta method);
    the interval is ``exp(log ratio ± t * se)`` with Welch–Satterthwaite degrees of freedom.
    """
    if not numerator or not denominator:
        return Estimate(None)
    a, b = statistics.fmean(numerator), statistics.fmean(denominator)
    if a <= 0 or b <= 0:
        return Estimate(None)
    ratio = a / b
    n_a, n_b = len(numerator), len(denominator)
    if n_a < 2 or n_b < 2:
        return Estimate(ratio, n=min(n_a, n_b))
    va = statistics.variance(numerator) / (n_a * a * a)
    vb = statistics.variance(denominator) / (n_b * b * b)
    se = math.sqrt(va + vb)
    if se == 0:
        return Estimate(ratio, ratio, ratio, min(n_a, n_b), 0.0)
    df = (va + vb) ** 2 / (va * va / (n_a - 1) + vb * vb / (n_b - 1))
    q = _t(confidence, df)
    return Estimate(ratio, ratio * math.exp(-q * se), ratio * math.exp(q * se), min(n_a, n_b), ratio * se)


def difference_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """mean(a) - mean(b) with a Welch confidence interval (the two sets of runs are independent and may have
    unequal spreads); no interval with fewer than 2 values in either.

    Example:
        >>> d = difference_interval([0.80, 0.82, 0.81], [0.70, 0.71, 0.72])
        >>> round(d.value, 3), round(d.low, 3), round(d.high, 3)
        (0.1, 0.077, 0.123)
    """
    if not a or not b:
        return Estimate(None)
    diff = statistics.fmean(a) - statistics.fmean(b)
    n_a, n_b = len(a), len(b)
    if n_a < 2 or n_b < 2:
        return Estimate(diff, n=min(n_a, n_b))
    va, vb = statistics.variance(a) / n_a, statistics.variance(b) / n_b
    if va + vb == 0:
        return Estimate(diff, diff, diff, min(n_a, n_b), 0.0)
    df = (va + vb) ** 2 / (va * va / (n_a - 1) + vb * vb / (n_b - 1))
    half = _t(confidence, df) * math.sqrt(va + vb)
    return Estimate(diff, diff - half, diff + half, min(n_a, n_b), math.sqrt(va + vb))


def separated(a: Estimate, b: Estimate) -> bool | None:
    """True when the two intervals do not overlap; None when either has no interval."""
    if not (a.has_interval and b.has_interval):
        return None
    assert a.low is not None and a.high is not None and b.low is not None and b.high is not None
    return a.low > b.high or b.low > a.high


EQUIVALENCE_MARGIN = 0.03  # the default: within 3 % is "equivalent"
EQUIVALENCE_CONFIDENCE = 0.90  # a 90 % interval inside the margin = two one-sided tests at 5 %


def equivalent(leader: Sequence[float], other: Sequence[float], margin: float) -> bool:
    """Whether the mean of ``other`` is within ``margin`` of the mean of ``leader``, shown by two one-sided tests at
    5 %: the 90 % interval of the ratio of the means lies inside ``[1 / (1 + margin), 1 + margin]``.

    Example:
        >>> equivalent([100.0, 100.5, 99.5], [99.0, 99.4, 98.6], 0.03)
        True
        >>> equivalent([100.0, 110, 90], [99.0, 109, 89], 0.03)  # too few runs at this spread to show it
        False
    """
    ratio = ratio_interval(leader, other, EQUIVALENCE_CONFIDENCE)
    if not ratio.has_interval:
        return False
    assert ratio.low is not None and ratio.high is not None
    return 1 / (1 + margin) < ratio.low and ratio.high < 1 + margin


def welch_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided p-value of Welch's t-test between two sets of runs (None with fewer than 2 runs in either)."""
    if len(a) < 2 or len(b) < 2:
        return None
    if statistics.stdev(a) == 0 and statistics.stdev(b) == 0:
        return 1.0 if statistics.fmean(a) == statistics.fmean(b) else 0.0
    return float(_scipy().ttest_ind(a, b, equal_var=False).pvalue)


def welch_greater_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """One-sided p-value of Welch's t-test of "the mean of ``a`` is no larger than the mean of ``b``" (None with
    fewer than 2 runs in either).

    >>> round(welch_greater_p([100.0, 110, 120], [80.0, 80.1, 79.9]), 3)  # 30 faster, t = 5.2 on 2 degrees
    0.018
    """
    return greater_p(mean_interval(a), mean_interval(b))


def greater_p(a: Estimate, b: Estimate) -> float | None:
    """One-sided p-value of "``a`` is no faster than ``b``" by the test the verdict uses, from two estimates:
    :func:`welch_greater_p` from their means, standard deviations and run counts; two from
    :func:`pooled_estimates` are compared on the log scale, the degrees of freedom the pooled spread's where both use
    it (one estimate of the spread, not two) and Welch-Satterthwaite's over each spread's own otherwise."""
    if a.log_scale and b.log_scale and a.n >= 2 and b.n >= 2:
        return _log_greater(a, b)
    if a.n < 2 or b.n < 2 or a.value is None or b.value is None or a.sd is None or b.sd is None:
        return None
    va, vb = a.sd * a.sd / a.n, b.sd * b.sd / b.n
    diff = a.value - b.value
    if va + vb == 0:
        return 0.0 if diff > 0 else 1.0
    df = (va + vb) ** 2 / (va * va / (a.n - 1) + vb * vb / (b.n - 1))
    return float(_scipy().t.sf(diff / math.sqrt(va + vb), df))


def _log_df(a: Estimate, b: Estimate, va: float, vb: float) -> float:
    """Degrees of freedom of the log-scale comparison of ``a`` and ``b`` whose squared standard errors are ``va``
    and ``vb`` (see :func:`greater_p`)."""
    assert a.df is not None and b.df is not None
    if a.pooled and b.pooled:
        return a.df
    return (va + vb) ** 2 / (va * va / a.df + vb * vb / b.df)


def _log_greater(a: Estimate, b: Estimate) -> float:
    assert a.log_mean is not None and b.log_mean is not None and a.log_sd is not None and b.log_sd is not None
    va, vb = a.log_sd**2 / a.n, b.log_sd**2 / b.n
    diff = a.log_mean - b.log_mean
    if va + vb == 0:
        return 0.0 if diff > 0 else 1.0
    return float(_scipy().t.sf(diff / math.sqrt(va + vb), _log_df(a, b, va, vb)))


def leads(a: Estimate, b: Estimate, comparisons: int = 1, confidence: float = CONFIDENCE) -> bool:
    """:func:`outpaces` from the two configurations' estimates (their ``confidence`` intervals over repeats)."""
    if not separated(a, b) or a.value is None or b.value is None or a.value <= b.value:
        return False
    p = greater_p(a, b)
    return p is not None and p <= (1 - confidence) / max(1, comparisons)


def outpaces(
    leader: Sequence[float], other: Sequence[float], comparisons: int = 1, confidence: float = CONFIDENCE
) -> bool:
    """Whether ``leader`` is shown faster than ``other`` by the verdict's rule, as one of ``comparisons``
    comparisons made with the same leader: their ``confidence`` intervals do not overlap (the leader's above), and
    the one-sided Welch t-test of "the leader is no faster" rejects at ``(1 - confidence) / comparisons``
    (Bonferroni). False when either has fewer than 2 runs.

    Example (a leader whose interval clears a precise runner-up's, but by a margin a single comparison allows and
    seven do not):
        >>> leader, runner_up = [100.0, 110, 120], [80.0, 80.1, 79.9]
        >>> outpaces(leader, runner_up, comparisons=1), outpaces(leader, runner_up, comparisons=7)
        (True, False)
    """
    return leads(mean_interval(leader, confidence), mean_interval(other, confidence), comparisons, confidence)


def repeats_to_separate(
    a: Estimate, b: Estimate, confidence: float = CONFIDENCE, limit: int = 100, comparisons: int = 1
) -> int | None:
    """Repeats per configuration at which the two intervals would no longer overlap, and the leader's lead would pass
    the one-sided Welch t-test at ``(1 - confidence) / comparisons`` (:func:`outpaces`), if the means and standard
    deviations stayed as measured; None if not within ``limit`` (or not computable)."""
    if a.log_scale and b.log_scale:
        return _log_repeats_to_separate(a, b, confidence, limit, comparisons)
    if a.value is None or b.value is None or a.sd is None or b.sd is None:
        return None
    gap = abs(a.value - b.value)
    if gap == 0:
        return None
    one_sided = 1 - 2 * (1 - confidence) / max(1, comparisons)  # _t is two-sided: this puts alpha/m in one tail
    spread = a.sd**2 + b.sd**2
    for n in range(2, limit + 1):
        if _t(confidence, n - 1) * (a.sd + b.sd) / math.sqrt(n) >= gap:
            continue
        if spread == 0:
            return n
        df = spread**2 * (n - 1) / (a.sd**4 + b.sd**4)  # Welch-Satterthwaite with n runs of each
        if _t(one_sided, round(df, 1)) * math.sqrt(spread / n) < gap:
            return n
    return None


def _log_repeats_to_separate(a: Estimate, b: Estimate, confidence: float, limit: int, comparisons: int) -> int | None:
    """:func:`repeats_to_separate` for two estimates from :func:`pooled_estimates`: a pooled spread's degrees of
    freedom grow by the runs added to the two, an own spread's are ``n - 1``."""
    assert a.log_mean is not None and b.log_mean is not None and a.log_sd is not None and b.log_sd is not None
    assert a.df is not None and b.df is not None
    gap = abs(a.log_mean - b.log_mean)
    if gap == 0:
        return None
    one_sided = 1 - 2 * (1 - confidence) / max(1, comparisons)
    for n in range(2, limit + 1):
        added = max(0, n - a.n) + max(0, n - b.n)
        df_a = a.df + added if a.pooled else n - 1
        df_b = b.df + added if b.pooled else n - 1
        if (_t(confidence, df_a) * a.log_sd + _t(confidence, df_b) * b.log_sd) / math.sqrt(n) >= gap:
            continue  # the intervals at n runs would still overlap
        va, vb = a.log_sd**2 / n, b.log_sd**2 / n
        if va + vb == 0:
            return n
        df = df_a if a.pooled and b.pooled else (va + vb) ** 2 / (va * va / df_a + vb * vb / df_b)
        if _t(one_sided, round(df, 1)) * math.sqrt(va + vb) < gap:
            return n
    return None


def repeats_to_equivalence(a: Estimate, b: Estimate, margin: float, limit: int = 100) -> int | None:
    """Repeats per configuration at which :func:`equivalent` would show the two within ``margin`` (the 90 %
    interval of the ratio of their means inside ``[1 / (1 + margin), 1 + margin]``), if the means and standard
    deviations stayed as measured; None if not within ``limit`` (a ratio at or beyond the margin never is).

    Example (1 % apart at a 2 % spread: 7 repeats show it within 3 %; 3 % apart, no number of repeats does):
        >>> a, b = mean_interval([100.0, 102, 98]), mean_interval([99.0, 101, 97])
        >>> repeats_to_equivalence(a, b, 0.03), repeats_to_equivalence(a, mean_interval([97.0, 99, 95]), 0.03)
        (7, None)
    """
    if a.value is None or b.value is None or a.sd is None or b.sd is None or a.value <= 0 or b.value <= 0:
        return None
    room = math.log1p(margin) - abs(math.log(a.value / b.value))  # what the interval's half-width may use up
    if room <= 0:
        return None
    ra, rb = (a.sd / a.value) ** 2, (b.sd / b.value) ** 2  # squared coefficients of variation
    if ra + rb == 0:
        return 2
    for n in range(2, limit + 1):
        df = (ra + rb) ** 2 * (n - 1) / (ra * ra + rb * rb)  # Welch-Satterthwaite with n runs of each
        if _t(EQUIVALENCE_CONFIDENCE, round(df, 1)) * math.sqrt((ra + rb) / n) < room:
            return n
    return None


def rank_correlation(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation of two paired lists (scipy's); None for fewer than 3 pairs or a constant list."""
    if len(a) != len(b) or len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return float(_scipy().spearmanr(a, b).statistic)
