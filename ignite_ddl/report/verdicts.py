"""The verdict within a workload: which configurations the verdict passes over and why, and whether one is
separated from the others (best), tied with the fastest, equivalent within a margin, or not separable; and the
report's method paragraph saying how."""

from __future__ import annotations

from typing import cast

from ignite_ddl.report.model import TIED_LISTED, ConfigResult, Verdict
from ignite_ddl.report.stats import (
    CONFIDENCE,
    EQUIVALENCE_MARGIN,
    POOL_FROM,
    equivalent,
    greater_p,
    leads,
    pooled_estimates,
    repeats_to_separate,
)

__all__ = [
    "EQUIVALENT_MEANS",
    "EQUIVALENT_TEXT",
    "INSEPARABLE_TEXT",
    "RULE",
    "TIED_MEANS",
    "TIED_TEXT",
    "mark_not_judged",
    "pool_spread",
    "relative",
    "rule_text",
    "verdict_of",
]


RULE = (
    "Each configuration's throughput is the mean over its repeats (a run is one sample: steps within a run are not "
    "independent) with a {pct} % Student-t confidence interval, from its own runs' spread (or a pooled one: see Pooled "
    "spread below). Speed-up = mean throughput / the mean of the same configuration with one process; its interval "
    "comes from the delta method on the log of the ratio with Welch-Satterthwaite degrees of freedom; efficiency = "
    "speed-up / processes. Verdict: within a workload, a configuration is named best only when its interval lies "
    "entirely above every other configuration's (non-overlapping intervals; conservative: between identical "
    "configurations it names a false winner in about 0.5 % of sweeps, where a t-test at the same level would in 3 to 5 "
    "%). Otherwise the configurations whose intervals overlap the fastest one's are reported as statistically tied. "
    "The one-sided t-test p-value (fastest vs runner-up; Welch's, or on the pooled spread) is shown beside the "
    "corrected threshold it is judged by. Only configurations judged take part: one with fewer usable runs than "
    "min_repeats, most of whose runs never settled, a run with no iteration measured after warm-up, or a counted run "
    "that was contended is listed as not judged, with why, and is never best nor recommended. Quality: each "
    "configuration's validation accuracy after its last epoch is compared with its workload's reference configuration "
    "(the first without gradient compression, comm_hook=none): the difference of the means over repeats with a Welch "
    "interval; a configuration whose whole interval lies below -quality_margin learns worse and is never recommended. "
    "A workload that reports no accuracy, or a language model (its unit tokens), is judged by its validation loss "
    "alike: a configuration whose whole interval lies above quality_margin_loss times the reference's mean loss learns "
    "worse. Runs of fewer than 2 epochs are not judged on quality. "
)
MULTIPLE_COMPARISONS = (
    "Multiple comparisons: with k configurations in a workload, the best must also be shown faster than each of the "
    "other k - 1 by a one-sided t-test at {alpha:g} % / (k - 1) (Bonferroni over the comparisons with the "
    "leader: simultaneous one-sided bounds), so the chance of naming a wrong best stays at most {alpha:g} % however "
    "many configurations are compared (non-overlapping intervals alone let it grow with k); a configuration not "
    "shown slower that way stays tied with the fastest. Equivalence needs every tied configuration shown within the "
    "margin (an intersection-union test, which needs no correction). Adaptive repeats stop on this same rule."
)
POOLED = (
    "Pooled spread: with {pool_from} or more configurations judged in a workload, their intervals and tests use one "
    "spread pooled over them all, on the log scale (a run's speed moves by a share, not an amount, and alike across "
    "configurations): three runs each then give dozens of degrees of freedom, where Welch's test has two to four and "
    "a leader among many would have to be some 30 standard errors ahead. A configuration whose own spread is larger "
    "than the pooled one (an F-test at 5 %) keeps its own, and two spreads are combined by Welch-Satterthwaite; on "
    "simulated workloads of identical speed, one configuration 4 times noisier than the rest, this named a false "
    "best in 2.0 % of sweeps of 8 configurations and 0.6 % of 32 (3.3 % of 8 with adaptive repeats)."
)
COMPARABLE = (
    "Runs are compared only when they share torch, Ignite and CUDA versions, CPU or GPU model, CPU cores and "
    "intra-op threads; a sweep whose runs differ is judged per environment, never averaged across."
)


def rule_text(confidence: float = CONFIDENCE) -> str:
    """The report's method paragraph: how figures are computed and how a verdict is reached."""
    pct = round(100 * confidence)
    return (
        RULE.format(pct=pct)
        + MULTIPLE_COMPARISONS.format(alpha=100 - pct)
        + " "
        + POOLED.format(pool_from=POOL_FROM)
        + " "
        + COMPARABLE
    )


def pool_spread(configs: list[ConfigResult], confidence: float) -> None:
    """Give the configurations the verdict judges (``not_judged`` None) the intervals of their workload's pooled
    spread (:func:`~ignite_ddl.report.stats.pooled_estimates`; fewer than ``POOL_FROM`` with 2 runs: their own), so
    the tables show the intervals the verdict compared."""
    judged = [c for c in configs if c.not_judged is None and c.samples_per_s]
    estimates = pooled_estimates({c.name: c.samples_per_s for c in judged}, confidence)
    for config in judged:
        config.throughput = estimates[config.name]


def mark_not_judged(configs: list[ConfigResult], least: int) -> None:
    """Mark each configuration the verdict must pass over, and why: fewer usable runs than ``least``
    (min_repeats), most of its runs never settled (one such run among several is flagged, and its spread is already
    in the interval), a run with no iteration measured after warm-up, a run counted that was measured under
    contention."""
    for config in configs:
        runs = len(config.samples_per_s)
        if not runs:
            continue  # no usable run: listed apart, as unmeasured
        reasons = []
        if runs < least:
            reasons.append(f"{runs} usable run{'s' if runs != 1 else ''} of the {least} needed (min_repeats)")
        if 2 * config.unsettled_runs > runs:
            reasons.append(f"unsettled ({config.unsettled_runs} of its {runs} runs never settled)")
        if config.measured_iterations == 0:
            # every iteration was warm-up: its samples/s is the whole run's, start-up (and compilation) included
            reasons.append("no iteration measured after warm-up (raise train_size, epochs or max_iters)")
        contended = sum(r.used and r.contended for r in config.runs)
        if contended:
            reasons.append(f"contended ({contended} of its runs counted were measured under contention)")
        config.not_judged = "; ".join(reasons) or None


# The three verdicts on configurations that no rule separates, each with its one phrasing: tied (the intervals
# overlap), equivalent (the equivalence test passed), not separable at any practical number of repeats.
TIED_TEXT = "statistically tied"
TIED_MEANS = "these runs cannot tell them apart"
EQUIVALENT_TEXT = "equivalent within ±{margin:g} %"
EQUIVALENT_MEANS = (
    "the equivalence test passed (two one-sided tests at 5 %): none is slower than the fastest by more than the margin"
)
INSEPARABLE_TEXT = "not separable at any practical number of repeats"


def relative(
    name: str, value: float, base_name: str, base: float, faster: str = "faster", slower: str = "slower"
) -> str:
    """A relative difference that names its base: "cfg002 is 1.8 % slower than cfg003"."""
    change = value / base - 1
    return f"{name} is {100 * abs(change):.1f} % {faster if change >= 0 else slower} than {base_name}"


def verdict_of(
    workload: str, configs: list[ConfigResult], confidence: float, margin: float = EQUIVALENCE_MARGIN
) -> Verdict:
    """The verdict on one workload's configurations: best, tied with the fastest, equivalent within ``margin`` or
    not separable, and why (see :func:`rule_text`)."""
    ranked = sorted(
        (c for c in configs if c.throughput.value is not None),
        key=lambda c: cast(float, c.throughput.value),  # not None: the filter keeps the configurations with a value
        reverse=True,
    )
    names = [c.name for c in ranked]
    measured = [c for c in ranked if c.not_judged is None]  # only these can be best, tied or recommended
    not_judged = {c.name: c.not_judged for c in ranked if c.not_judged is not None}
    unmeasured = [c.name for c in configs if c.throughput.value is None]
    # A configuration without a usable run (failed, or every run contended), or passed over, might have been the
    # fastest.
    provisional = bool(unmeasured) or bool(not_judged)
    if not measured:
        reason = (
            "no configuration of this workload can be judged (see Not judged)"
            if ranked
            else "no configuration of this workload has a usable run"
        )
        return Verdict(workload, names, None, [], True, reason=reason, unmeasured=unmeasured, not_judged=not_judged)
    top = measured[0]
    if len(measured) == 1:
        if not_judged:  # others measured but passed over: nothing it was compared with, so no "best"
            reason = f"{top.name} is the only configuration judged: there is nothing it was compared with"
            return Verdict(workload, names, None, [], True, reason=reason, unmeasured=unmeasured, not_judged=not_judged)
        reason = "the only configuration of its workload" if len(configs) == 1 else "the only one with a usable run"
        return Verdict(
            workload, names, top.name, [], provisional, reason=reason, unmeasured=unmeasured, not_judged=not_judged
        )
    runner = measured[1]
    assert top.throughput.value is not None and runner.throughput.value is not None
    difference = top.throughput.value / runner.throughput.value - 1
    others = len(measured) - 1  # the leader is compared with each: the family the correction is over
    verdict = Verdict(
        workload,
        names,
        None,
        [],
        provisional,
        runner.name,
        difference,
        greater_p(top.throughput, runner.throughput),
        unmeasured=unmeasured,
        welch_threshold=(1 - confidence) / others,
        not_judged=not_judged,
        pooled=top.throughput.log_scale,
    )
    if not top.throughput.has_interval:
        verdict.tied = [c.name for c in measured]
        verdict.reason = "the fastest configuration has a single usable run, so no interval: nothing can be told apart"
        return verdict
    overlapping = [c for c in measured[1:] if not leads(top.throughput, c.throughput, others, confidence)]
    pct, alpha = round(100 * confidence), 100 - round(100 * confidence)
    kind = "t-test on the pooled spread" if verdict.pooled else "Welch t-test"
    test = f"a one-sided {kind} at {alpha:g} %" + (f" / {others} (Bonferroni)" if others > 1 else "")
    if not overlapping:
        verdict.best = top.name
        each = "the other configuration judged" if others == 1 else f"each of the {others} others judged"
        verdict.reason = (
            f"its {pct} % interval lies above every other {'judged ' if not_judged else ''}configuration's and it is "
            f"shown faster than {each} by "
            f"{test}; {relative(runner.name, runner.throughput.value, top.name, top.throughput.value)}"
        )
        return verdict
    verdict.tied = [top.name] + [c.name for c in overlapping]
    verdict.repeats_needed = {
        c.name: repeats_to_separate(top.throughput, c.throughput, confidence, comparisons=others) for c in overlapping
    }
    verdict.margin = margin
    verdict.equivalent = all(equivalent(top.samples_per_s, c.samples_per_s, margin) for c in overlapping)
    apart = [c.name for c in overlapping if _intervals_apart(top, c)]
    if not apart:
        verdict.reason = "their intervals overlap the fastest configuration's"
    else:
        near = len(overlapping) - len(apart)
        listed = ", ".join(apart[:TIED_LISTED]) + (
            f" and {len(apart) - TIED_LISTED} more" if len(apart) > TIED_LISTED else ""
        )
        verdict.reason = (
            (f"{near} of their intervals overlap the fastest configuration's; " if near else "")
            + f"the fastest's interval lies above that of {listed}, but with {others + 1} configurations compared "
            f"{test} does not show it faster"
        )
    return verdict


def _intervals_apart(top: ConfigResult, other: ConfigResult) -> bool:
    low, high = top.throughput.low, other.throughput.high
    return low is not None and high is not None and low > high
