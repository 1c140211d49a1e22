"""Scaling projection: how a data-parallel step would scale to N workers (the alpha-beta model of a link, for a ring
all-reduce with DDP's buckets and for a parameter server).

Example:
    >>> from ignite_ddl.projection import LINKS, Compute, project
    >>> compute = Compute(forward_s=0.01, backward_s=0.02, optimizer_s=0.0, batch_size=32, grad_bytes=4 * 2**20)
    >>> [row["n"] for row in project(compute, LINKS["10gbe"], max_workers=4).rows]
    [1, 2, 4]
"""

from __future__ import annotations

from ignite_ddl.core.exports import lazy_exports

__all__ = ["LINKS", "Compute", "Link", "project"]

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "model"))
