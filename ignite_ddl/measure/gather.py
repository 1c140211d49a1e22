"""Gathering plain Python objects (dicts of figures, lists of times) from every rank.

``idist.all_gather`` gathers picklable objects as well as tensors, but needs a process group; a run of one
process has none, and its gather is the object itself.

Example:
    >>> gather_objects({"rank": 0, "step_s": 0.25})  # one process: no process group, the object alone
    [{'rank': 0, 'step_s': 0.25}]
"""

from __future__ import annotations

from typing import Any, cast

import ignite.distributed as idist

__all__ = ["gather_objects"]


def gather_objects(obj: Any) -> list[Any]:
    """Collective: ``obj`` of every rank, in rank order (``idist.all_gather`` for any picklable object)."""
    if idist.get_world_size() == 1:
        return [obj]
    # Ignite's annotation is the union over every kind of input; any input but a tensor gathers into a list.
    return cast(list[Any], idist.all_gather(obj))
