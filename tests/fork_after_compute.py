"""Launch forked ranks from a process that has already run multi-threaded torch ops (as a notebook does).

Used by test_launch.py; prints rank 0's result.
"""

from __future__ import annotations

import sys

import torch

from ignite_ddl import LaunchSettings, launch


def matmul(local_rank: int) -> dict:
    x = torch.randn(1500, 1500)
    # a large tensor in the result: pickling it for the parent runs a parallel torch op too
    return {"threads": torch.get_num_threads(), "finite": bool(torch.isfinite(x @ x).all()), "w": torch.ones(100_000)}


if __name__ == "__main__":
    torch.set_num_threads(2)
    x = torch.randn(2000, 2000)
    (x @ x).sum()  # an OpenMP parallel region in the parent before forking
    settings = LaunchSettings(backend="gloo", nproc_per_node=1, threads=2, start_method="fork", log_dir=sys.argv[1])
    result = launch(matmul, settings)
    print({"threads": result["threads"], "finite": result["finite"], "w": float(result["w"].sum())})
