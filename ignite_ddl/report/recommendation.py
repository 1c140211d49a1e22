"""The configuration to use in each workload: the fastest that is judged, fits and does not learn worse, or the
cheapest of those tied with it on speed; every faster configuration passed over says why."""

from __future__ import annotations

from typing import cast

from ignite_ddl.report.model import MEMORY_MATERIAL, MIB, ConfigResult, Verdict
from ignite_ddl.report.stats import CONFIDENCE, Estimate, leads, positive_range

__all__ = ["RECOMMEND_RULE", "cheaper", "less_memory", "memory_in_all", "recommend"]


def memory_in_all(config: ConfigResult) -> Estimate:
    """A configuration's peak memory in all: the largest rank's peak times its processes (what the machine must
    hold), with the per-rank interval scaled alike."""
    return config.peak_memory.scaled(config.world_size)


def less_memory(a: ConfigResult, b: ConfigResult) -> bool:
    """Whether ``a`` needs less peak memory in all (:func:`memory_in_all`) than ``b`` beyond the noise: their
    intervals apart where both have one, else at least MEMORY_MATERIAL less (a difference inside the runs' spread is
    no reason to choose). In all, not per rank: one process at 525 MiB is cheaper than two at 556 MiB each."""
    mine, theirs = memory_in_all(a), memory_in_all(b)
    if mine.value is None or not theirs.value:
        return False
    if mine.has_interval and theirs.has_interval:
        return cast(float, mine.high) < cast(float, theirs.low)
    return mine.value <= (1 - MEMORY_MATERIAL) * theirs.value


def cheaper(a: ConfigResult, b: ConfigResult) -> bool:
    """Whether ``a`` is cheaper than ``b``: less peak memory in all beyond the noise; where neither is, fewer
    processes."""
    if less_memory(a, b) or less_memory(b, a):
        return less_memory(a, b)
    return a.world_size < b.world_size


def _cheaper(cheap: ConfigResult, than: ConfigResult) -> str:
    """What makes ``cheap`` cheaper than ``than``, in words: memory per rank and in all (every rank's peak)."""
    reasons = []
    if cheap.world_size < than.world_size:
        reasons.append(
            f"uses {cheap.world_size} process{'es' if cheap.world_size > 1 else ''} instead of {than.world_size}"
        )
    mine, theirs = cheap.peak_memory.value, than.peak_memory.value
    if mine is not None and theirs:
        all_mine, all_theirs = mine * cheap.world_size, theirs * than.world_size
        per_rank = 1 - mine / theirs
        if less_memory(cheap, than) or all_mine < (1 - MEMORY_MATERIAL) * all_theirs:
            ranks = f"{than.world_size} x {theirs / MIB:.0f} = " if than.world_size > 1 else ""
            mine_all = f"{cheap.world_size} x {mine / MIB:.0f} = " if cheap.world_size > 1 else ""
            more_or_less = "less" if per_rank >= 0 else "more"
            rank_text = (
                f"needs {100 * abs(per_rank):.0f} % {more_or_less} memory per rank ({mine / MIB:.0f} against "
                f"{theirs / MIB:.0f} MiB)"
            )
            reasons.append(
                f"{rank_text}, {100 * (1 - all_mine / all_theirs):.0f} % less in all ({mine_all}{all_mine / MIB:.0f} "
                f"against {ranks}{all_theirs / MIB:.0f} MiB)"
            )
    return " and ".join(reasons) or "is no more expensive"


def _evidence(config: ConfigResult, confidence: float) -> str:
    """A configuration's throughput as evidence: mean, interval, runs."""
    t, runs = config.throughput, len(config.samples_per_s)
    interval = f", {round(100 * confidence)} % interval {positive_range(t)}" if t.has_interval else ""
    return f"{config.name}: {t.value:.0f} samples/s{interval}, {runs} run{'s' if runs != 1 else ''}"


RECOMMEND_RULE = (
    "the fastest configuration that is judged (at least min_repeats usable runs, most of them settled, each with "
    "iterations measured after warm-up, none contended), fits, and does not learn worse than its workload's "
    "reference; among configurations tied on speed with it, the cheapest (the least peak memory in all, per "
    "rank x processes, beyond the runs' spread; then the fewest processes)"
)


def recommend(
    verdict: Verdict, configs: list[ConfigResult], limit: float | None, confidence: float = CONFIDENCE
) -> None:
    """The configuration to use (:data:`RECOMMEND_RULE`); every faster configuration passed over says why."""
    measured = sorted(
        (c for c in configs if c.throughput.value is not None), key=lambda c: -cast(float, c.throughput.value)
    )
    verdict.does_not_fit = [c.name for c in configs if not c.fits]
    verdict.rule = RECOMMEND_RULE

    def why_not(c: ConfigResult) -> str | None:
        if c.not_judged is not None:
            return f"not judged: {c.not_judged}"
        if not c.fits:
            return "does not fit" + (" (ran out of memory)" if c.out_of_memory else " (above memory_limit_mb)")
        if c.learns_worse:
            return c.quality_note
        return None

    candidates = [c for c in measured if why_not(c) is None]
    if not candidates:
        if measured:
            verdict.recommendation = "none: every configuration measured is not judged, does not fit or learns worse"
            verdict.passed_over = {c.name: cast(str, why_not(c)) for c in measured}
        return
    lead = candidates[0]
    ahead = measured[: measured.index(lead)]  # faster than the lead, each passed over
    verdict.passed_over = {c.name: cast(str, why_not(c)) for c in ahead}
    passed = "; ".join(f"{name} faster but {why}" for name, why in verdict.passed_over.items())
    passed = f" ({passed})" if passed else ""
    quality = f"; {lead.quality_note}" if lead.quality == "not judged" else ""
    judged = [c for c in measured if c.not_judged is None]
    if verdict.best is not None and verdict.best == lead.name:
        verdict.recommended = lead.name
        verdict.evidence = _evidence(lead, confidence)
        verdict.recommendation = (
            f"{lead.name}: the fastest, separated from every other configuration judged{passed}{quality}"
        )
        return
    peers = [lead]
    if lead.throughput.has_interval:  # tied with the lead by the verdict's own rule
        rivals = len(judged) - 1
        peers += [c for c in candidates[1:] if not leads(lead.throughput, c.throughput, rivals, confidence)]
    cheapest = lead  # cheaper only inside the noise: the fastest is as cheap
    for peer in peers[1:]:  # fastest first: of peers as cheap as each other, the faster stays
        if cheaper(peer, cheapest):
            cheapest = peer
    verdict.recommended = cheapest.name
    verdict.evidence = _evidence(cheapest, confidence)
    if cheapest.quality == "not judged":
        quality = f"; {cheapest.quality_note}"
    if len(judged) == 1:
        verdict.recommendation = f"{lead.name}: the only configuration judged{passed}{quality}"
    elif len(peers) == 1:
        verdict.recommendation = f"{lead.name}: the fastest configuration that can be recommended{passed}{quality}"
    elif cheapest is lead:
        others = ", ".join(c.name for c in peers if c is not lead)
        verdict.recommendation = (
            f"{lead.name}: tied on speed with {others}, and none of them is cheaper{passed}{quality}"
        )
    else:
        verdict.recommendation = (
            f"{cheapest.name}: tied on speed with {lead.name}; {cheapest.name} {_cheaper(cheapest, lead)}"
            f"{passed}{quality}"
        )
