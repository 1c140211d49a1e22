"""Our communication timing against DDP's own: the same run measured by a second, independent clock.

``DistributedDataParallel`` keeps runtime statistics of its own (``_get_ddp_logging_data()``, read from its C++
reducer and logger): on sampled iterations it stamps the start of its forward, the end of the forward (the start
of "backward compute"), the launch of the first gradient bucket (the start of "backward communication"), the end
of autograd's backward (the end of backward compute) and the end of ``finalize_backward`` (every bucket reduced
and copied back into ``.grad``: the end of backward communication), and keeps running averages in nanoseconds:

==========================  ===============================================  ======================================
DDP's figure                from ... to ...                                  ours, on the same iterations
==========================  ===============================================  ======================================
backward communication      first bucket launched -> finalize_backward end   ``comm_s``: union of the buckets'
                                                                             [ready, done] intervals
exposed (comm - overlap)    autograd's end -> finalize_backward end          ``exposed_comm_s``: last bucket ready
                                                                             -> last bucket done
backward compute            DDP forward's end -> autograd's end              ``backward_s - exposed_comm_s``
backward, all of it         DDP forward's end -> finalize_backward end       ``backward_s``: ``zero_grad`` and
                            (compute + communication - overlap)              ``backward()``
==========================  ===============================================  ======================================

They must differ a little, in known directions: DDP's communication span also holds the gaps between buckets and
the copy of the reduced buckets into ``.grad`` (so it is at least ours); its backward also holds the loss (ours
counts it in the forward). The split of backward into compute and exposed communication depends on one instant
each side reads differently: DDP ends "compute" when autograd's final callback runs, we when the last bucket is
ready; on a machine whose cores are all busy (two ranks on two cores, with gloo's threads) the callback can run
milliseconds later, moving that much from DDP's exposed communication into its compute. So the cross-check's
firm comparisons are the communication span and the whole backward; the split is recorded beside them. DDP samples iterations 1-10 and every 100th by default; a
timed run sets its sample rate to 1 (every iteration; DDP folds an iteration in at the next forward, so the last
iteration is never in its averages), and the comparison averages ours over exactly the iterations DDP averaged.

Example (our figures for iterations 1-3 of a rank, against DDP's averages in ns):
    >>> rows = [{"iteration": i, "comm_s": 0.010, "exposed_comm_s": 0.004, "backward_s": 0.030} for i in (1, 2, 3, 4)]
    >>> ddp = {"iteration": 3, "avg_backward_comm_time": 11_000_000, "avg_backward_compute_comm_overlap_time": 6_000_000,
    ...        "avg_backward_compute_time": 27_000_000}
    >>> check = compare(rows, ddp)
    >>> check["iterations"], check["ours_ms"]["comm"], check["ddp_ms"]["comm"], round(check["ratio"]["comm"], 3)
    (3, 10.0, 11.0, 0.909)
"""  # noqa: E501

from __future__ import annotations

import math
from typing import Any

from torch import nn

from ignite_ddl.core.schema import DDPCrossCheck

__all__ = ["DDP_KEYS", "compare", "ddp_runtime_stats", "sample_every_iteration"]

# DDP's running averages (ns) this comparison reads, and the name of each figure.
DDP_KEYS = {
    "comm": "avg_backward_comm_time",
    "overlap": "avg_backward_compute_comm_overlap_time",
    "backward_compute": "avg_backward_compute_time",
}


def sample_every_iteration(model: nn.Module) -> bool:
    """Ask a DDP model to record its runtime statistics on every iteration (a few clock readings per step);
    False where this torch's DDP cannot."""
    try:
        model._set_ddp_runtime_logging_sample_rate(1)  # type: ignore[operator]
    except (AttributeError, RuntimeError):
        return False
    return True


def ddp_runtime_stats(model: nn.Module) -> dict[str, Any] | None:
    """DDP's averages this comparison uses and the last iteration they hold (None: not a DDP model, or DDP has
    not folded in any iteration yet)."""
    if not isinstance(model, nn.parallel.DistributedDataParallel):
        return None
    try:
        data = model._get_ddp_logging_data()
    except (AttributeError, RuntimeError):
        return None
    if "iteration" not in data or not all(key in data for key in DDP_KEYS.values()):
        return None
    return {"iteration": int(data["iteration"]), **{key: int(data[key]) for key in DDP_KEYS.values()}}


def compare(rows: list[dict[str, Any]], ddp: dict[str, Any]) -> DDPCrossCheck | None:
    """Ours against DDP's on the iterations DDP averaged (1 to ``ddp["iteration"]``): communication, exposed
    communication, backward compute and the whole backward in ms, and ours / DDP's for each (None without timed
    iterations there)."""
    kept = [r for r in rows if 1 <= r["iteration"] <= ddp["iteration"] and not math.isnan(r.get("comm_s", math.nan))]
    if not kept:
        return None

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    ours = {
        "comm": mean([r["comm_s"] for r in kept]) * 1e3,
        "exposed": mean([r["exposed_comm_s"] for r in kept]) * 1e3,
        "backward_compute": mean([r["backward_s"] - r["exposed_comm_s"] for r in kept]) * 1e3,
        "backward": mean([r["backward_s"] for r in kept]) * 1e3,
    }
    comm, compute = ddp[DDP_KEYS["comm"]] / 1e6, ddp[DDP_KEYS["backward_compute"]] / 1e6
    exposed = comm - ddp[DDP_KEYS["overlap"]] / 1e6
    theirs = {"comm": comm, "exposed": exposed, "backward_compute": compute, "backward": compute + exposed}
    ratio: dict[str, float | None] = {k: ours[k] / theirs[k] if theirs[k] > 0 else math.nan for k in ours}
    return {"iterations": len(kept), "ours_ms": ours, "ddp_ms": theirs, "ratio": ratio}
