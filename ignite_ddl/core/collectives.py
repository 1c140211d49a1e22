"""The arithmetic of collectives, without torch: what share of a message each rank sends over its link.

Both the measured bus bandwidth (:mod:`ignite_ddl.measure.comm`) and the scaling projection's time of a ring
all-reduce (:mod:`ignite_ddl.predict.projection.model`) use it; the projection is read by the command line at
start-up, so this module imports nothing heavy.

Example:
    >>> allreduce_bus_factor(2), allreduce_bus_factor(4), allreduce_bus_factor(1)
    (1.0, 1.5, 0.0)
"""

from __future__ import annotations

__all__ = ["allreduce_bus_factor"]


def allreduce_bus_factor(world_size: int) -> float:
    """The share of the data each rank must send for an all-reduce, 2(N-1)/N (nccl-tests' bus factor: busbw =
    algbw x this factor); a ring all-reduce's reduce-scatter and all-gather each move (N-1)/N of the message. 0 for
    one rank, which sends nothing."""
    return 2 * (world_size - 1) / world_size if world_size > 1 else 0.0
