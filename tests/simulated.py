"""A sweep executor whose runs draw their throughput from a known distribution with a fixed seed: the truth is
known, so what a sweep, its adaptive repeats or a search concludes can be checked (tests/test_adaptive.py,
tests/test_search.py)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from ignite_ddl.sweep.plan import Run
from ignite_ddl.sweep.records import new_record


class Simulated:
    """An executor whose runs draw their samples/s from Normal(mean, cv * mean), seeded; ``means`` gives each
    configuration's mean, by index (a sequence) or from its grid values (a function)."""

    def __init__(
        self,
        means: Sequence[float] | Callable[[dict[str, Any]], float],
        cv: float,
        seed: int = 0,
        run_s: float = 10.0,
        sleep: bool = False,
    ):
        self.means, self.cv, self.rng, self.run_s, self.sleep = means, cv, random.Random(seed), run_s, sleep
        self.started: list[tuple[int, int]] = []

    def check(self) -> None:
        pass

    def execute(
        self,
        runs: Sequence[Run],
        recorded: Callable[..., None],
        progress: Callable[[str], None],
        where: Callable[[Run, int], str],
    ) -> None:
        for number, run in enumerate(runs, 1):
            recorded(self.draw(run), run, number)

    def draw(self, run: Run) -> dict[str, Any]:
        """A run started and ended: its record, its samples/s drawn."""
        self.started.append((run.index, run.repeat))
        if self.sleep:  # runs that take the time they report, for the budget
            time.sleep(self.run_s)
        mean = self.means(run.grid) if callable(self.means) else self.means[run.index]
        record = new_record(run, self.run_s, 0)
        record["summary"] = {
            "world_size": 1,
            "samples_per_s": self.rng.gauss(mean, self.cv * mean),
            "contention": {"foreign_cpu_share": 0.0},
        }
        return dict(record)


def adaptive_outcome(draw: Callable[[int], float], configurations: int, rule: Any) -> str:
    """One simulated adaptive sweep of one workload: ``min_repeats`` runs of each configuration drawn by ``draw``
    (its index -> a samples/s), then a round for those :func:`~ignite_ddl.sweep.adaptive.decide` asks for, until it
    stops; how the workload ended."""
    from ignite_ddl.sweep.adaptive import decide

    samples = {i: [draw(i) for _ in range(rule.min_repeats)] for i in range(configurations)}
    rounds = rule.min_repeats
    while True:
        decision = decide(samples, dict.fromkeys(samples, "w"), rule, rounds)
        if decision.done:
            return decision.outcome["w"]
        for i in decision.more:
            samples[i].append(draw(i))
        rounds += 1
