"""Where a run's step times settle: the warm-up found in the series itself, not assumed.

A run's first iterations are slower than the rest (caches, allocator, lazy initialisation, a compiler); how many
depends on the model, the machine and what else runs there. A fixed count (``--warmup-iters``) either keeps slow
iterations in the statistics or throws good ones away. :func:`mser5` finds the cut with **MSER-5** (White, 1997;
White, Cobb and Spratt, 2000): average the series in batches of 5, and drop the number of leading batches ``d``
that minimises

    MSER(d) = sum over the kept batches of (batch mean - mean of the kept batches)^2 / (batches kept)^2,

the squared standard error of the kept mean: dropping slow early batches lowers it until only steady noise is left,
dropping more raises it again (fewer batches). The cut keeps at least 40 % of the batches: with fewer left, the
statistic of pure noise is often smallest near the end by chance. Two guards keep noise from passing for a
warm-up or a drift, which on real CPU runs it otherwise did (a 2-core VM: 13 of 68 runs of 60 iterations called
unsettled, with halves 0-4 % apart, and up to 25 iterations cut from steady series): a cut is made only where what
it drops is at least 2 % slower than what it keeps (``MATERIAL``), and when the best cut falls in the second half
of the series (the "half rule") the run **never settled** only if the two halves of what is kept differ by more
than 5 % (``DRIFT``): its mean is then not a steady-state figure, and the run is flagged.

Example (a slow start of 10 iterations, then steady):
    >>> import random
    >>> noise = random.Random(0)
    >>> times = [0.5, 0.4, 0.3, 0.3, 0.2, 0.2, 0.15, 0.15, 0.12, 0.11] + [noise.gauss(0.1, 0.005) for _ in range(60)]
    >>> cut = mser5(times)
    >>> cut.drop, cut.settled
    (10, True)
    >>> mser5([0.1 * (1 + i / 10) for i in range(60)]).settled  # a series that keeps slowing down
    False
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BATCH", "DRIFT", "KEEP", "MATERIAL", "MIN_BATCHES", "SteadyCut", "mser5"]

BATCH = 5  # MSER-5: batch means of 5 observations, which tames single outliers
MIN_BATCHES = 4  # fewer batch means than this: too short to tell a start from noise, nothing is cut
KEEP = 0.4  # the share of batches every cut keeps (see the module docstring)
MATERIAL = 0.02  # a cut is made only where what it drops is this much slower than what it keeps
DRIFT = 0.05  # a run is unsettled only where the two halves of what it keeps differ by more than this


@dataclass(frozen=True)
class SteadyCut:
    """Where a series settles: ``drop`` leading observations to leave out (a multiple of :data:`BATCH`), whether
    it ``settled`` (the best cut lies in the first half), and whether it was long enough to ``tested`` at all."""

    drop: int
    settled: bool
    tested: bool


def mser5(times: Sequence[float]) -> SteadyCut:
    """The MSER-5 cut of ``times`` (one observation per iteration, in order); see the module docstring.

    A series that never settles is still cut at its best point in the first half, so its figures use the calmest
    half there is; ``settled`` says they are not a steady state."""
    values = [t for t in times if not math.isnan(t)]
    batches = len(values) // BATCH
    if batches < MIN_BATCHES:
        return SteadyCut(0, True, False)
    means = [sum(values[i * BATCH : (i + 1) * BATCH]) / BATCH for i in range(batches)]
    scores = []
    for d in range(batches - max(2, math.ceil(KEEP * batches)) + 1):
        kept = means[d:]
        mean = sum(kept) / len(kept)
        scores.append(sum((m - mean) ** 2 for m in kept) / len(kept) ** 2)
    best = min(range(len(scores)), key=scores.__getitem__)
    half = batches // 2
    cut = best if best <= half else min(range(half + 1), key=scores.__getitem__)
    if cut and _mean(means[:cut]) < (1 + MATERIAL) * _mean(means[cut:]):
        cut = 0  # what the cut drops is no slower than the rest: noise, not a warm-up
    kept = means[cut:]
    middle = len(kept) // 2
    drift = abs(_mean(kept[middle:]) / _mean(kept[:middle]) - 1) if middle else 0.0
    return SteadyCut(cut * BATCH, best <= half or drift <= DRIFT, True)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
