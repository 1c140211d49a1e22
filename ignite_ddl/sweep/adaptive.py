"""Adaptive repeats (``repeats: auto``): the least machine time to a verdict that is right.

After ``min_repeats`` rounds (every configuration once per round, interleaved), a round is added only for the
configurations that can still be the best of their workload, until each workload is decided:

- **separated**: the fastest configuration is shown faster than every other by the report's own rule for naming a
  best (:func:`ignite_ddl.report.stats.outpaces`: its interval above the other's, and a one-sided Welch t-test at
  5 % / (k - 1) for k configurations, corrected for the comparisons with the leader; from three configurations on,
  on the workload's pooled spread, :func:`~ignite_ddl.report.stats.pooled_estimates`), so the sweep stops exactly
  when the report can name one, and looking after every round does not let a wrong best through;
- **equivalent**: every configuration still overlapping the fastest is shown equivalent to it within
  ``equivalence_margin`` (default 3 %) by two one-sided tests at 5 %: the 90 % interval of the ratio of their mean
  throughputs lies inside ``[1 / (1 + margin), 1 + margin]``. Any of them will do; the report recommends the
  cheapest;
- **out of reach**: a contender could be neither separated from the fastest nor shown equivalent to it even in
  twice ``max_repeats`` rounds if the means and spreads stayed as measured
  (:func:`~ignite_ddl.report.stats.repeats_to_separate`, :func:`~ignite_ddl.report.stats.repeats_to_equivalence`):
  the rounds left cannot settle that comparison, so that contender gets no more rounds and stays tied, while the
  others that can still be settled go on; the workload is out of reach when none is left (a tie on a noisy machine
  costs the minimum, not the maximum). One contender out of reach used to stop the whole workload: among the 96
  configurations of docs/search.md's space, one near-tie with the leader then stopped the grid after the minimum
  with a dozen contenders that more rounds would have separated. Twice, because means and spreads estimated from
  three runs are rough: in seeded simulations (300 sweeps each of 8 identical configurations, of two 0.5 % apart,
  of four 10 % apart, with the whole-workload stop), projecting to ``max_repeats`` gave up 29-91 % of the decisions
  the full rounds reached, twice ``max_repeats`` 4-27 %;
- or the sweep ends undecided: ``max_repeats`` rounds were run, or the next round would overrun ``budget_s``.

Stopping early never makes a verdict less strict (the report applies its rule to whatever runs there are); it only
gives up a decision the remaining rounds were not expected to reach.

Configurations already out of the race (shown slower than the fastest by that same rule) get no more rounds. Each
round's runs keep the interleaved order (the direction reversed every round), so a slow minute of the machine is
spread over the configurations that are still compared.

Example:
    >>> rule = AdaptiveRule(min_repeats=3, max_repeats=10, margin=0.03)
    >>> decide({0: [100.0, 101, 99], 1: [80.0, 81, 79]}, {0: "w", 1: "w"}, rule, rounds=3).outcome
    {'w': 'separated'}
    >>> decide({0: [100.0, 102, 98], 1: [99.0, 101, 97]}, {0: "w", 1: "w"}, rule, rounds=3).more
    [0, 1]
    >>> decide({0: [100.0, 110, 90], 1: [99.0, 109, 89]}, {0: "w", 1: "w"}, rule, rounds=3).outcome
    {'w': 'out_of_reach'}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ignite_ddl.report.stats import (
    CONFIDENCE,
    Estimate,
    equivalent,
    leads,
    pooled_estimates,
    repeats_to_equivalence,
    repeats_to_separate,
)

__all__ = ["OUTCOMES", "AdaptiveRule", "Decision", "decide"]

# How a workload's comparison ended: decided either way, or cut short.
OUTCOMES = ("separated", "equivalent", "out_of_reach", "max_repeats", "budget", "undecided")


@dataclass(frozen=True)
class AdaptiveRule:
    """When adaptive repeats stop."""

    min_repeats: int = 3
    max_repeats: int = 15
    margin: float = 0.03
    budget_s: float | None = None
    confidence: float = CONFIDENCE


@dataclass
class Decision:
    """The verdict so far: each workload's state, and the configurations that need another round (empty: stop)."""

    outcome: dict[str, str] = field(default_factory=dict)  # workload -> one of OUTCOMES ("undecided": more rounds)
    more: list[int] = field(default_factory=list)
    leader: dict[str, int] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return not self.more


REACH = 2  # how far past max_repeats a projection looks before it calls a comparison out of reach (see above)


def _settles(top: Estimate, other: Estimate, others: int, rule: AdaptiveRule) -> bool:
    """Whether ``REACH * max_repeats`` rounds would separate ``other`` from the leader ``top`` or show the two
    equivalent, if their means and spreads stayed as measured."""
    limit = REACH * rule.max_repeats
    if repeats_to_separate(top, other, rule.confidence, limit=limit, comparisons=others) is not None:
        return True
    return repeats_to_equivalence(top, other, rule.margin, limit=limit) is not None


def _workload(samples: Mapping[int, Sequence[float]], rule: AdaptiveRule, rounds: int) -> tuple[str, list[int], int]:
    """(state, configurations needing more rounds, leader) of one workload's configurations after ``rounds``."""
    estimates = pooled_estimates({index: list(values) for index, values in samples.items() if values}, rule.confidence)
    leader = max(estimates, key=lambda i: estimates[i].value or 0.0)
    top = estimates[leader]
    others = len(estimates) - 1  # as the verdict counts them: the configurations with a usable run
    contenders = [i for i, e in estimates.items() if i != leader and not leads(top, e, others, rule.confidence)]
    missing = [i for i, values in samples.items() if not values]  # no usable run yet: it might be the best
    if not contenders and not missing and top.has_interval:
        return "separated", [], leader
    open_ = [i for i in contenders if not equivalent(samples[leader], samples[i], rule.margin)]
    if not open_ and not missing and top.has_interval:
        return "equivalent", [], leader
    if rule.min_repeats <= rounds < rule.max_repeats and not missing and top.has_interval:
        # Only the comparisons more rounds can settle get them; the rest stay tied with the leader.
        open_ = [i for i in open_ if _settles(top, estimates[i], others, rule)]
        if not open_:
            return "out_of_reach", [], leader
    return "undecided", sorted({leader, *open_, *missing}), leader


def decide(
    samples: Mapping[int, Sequence[float]],
    workloads: Mapping[int, str],
    rule: AdaptiveRule,
    rounds: int,
    elapsed_s: float = 0.0,
    run_s: float | None = None,
) -> Decision:
    """What to do after ``rounds`` rounds, given each configuration's usable throughputs (samples/s per run).

    ``elapsed_s`` is the sweep's time so far and ``run_s`` a run's typical wall time: a round that would end past
    ``budget_s`` is not started.
    """
    decision = Decision()
    by_workload: dict[str, dict[int, Sequence[float]]] = {}
    for index, name in workloads.items():
        by_workload.setdefault(name, {})[index] = samples.get(index, [])
    for name, group in by_workload.items():
        if not any(group.values()):  # nothing usable at all: more runs of everything, up to the limits
            state, more, leader = "undecided", sorted(group), min(group)
        else:
            state, more, leader = _workload(group, rule, rounds)
        decision.outcome[name], decision.leader[name] = state, leader
        decision.more += more
    decision.more.sort()
    if not decision.more:
        return decision
    cut = None
    if rounds >= rule.max_repeats:
        cut = "max_repeats"
    elif rule.budget_s is not None and run_s is not None and elapsed_s + run_s * len(decision.more) > rule.budget_s:
        cut = "budget"
    if rounds < rule.min_repeats:
        cut = None
    if cut:
        decision.outcome = {name: (cut if state == "undecided" else state) for name, state in decision.outcome.items()}
        decision.more = []
    return decision
