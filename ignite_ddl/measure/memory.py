"""Memory on every rank: what a rank holds between steps for parameters, gradients and optimizer state (the local
shard of a sharded tensor, the whole tensor otherwise, counted alike for every strategy), its peak resident memory
and that of its DataLoader workers, and on CUDA the allocator's peaks, retries and out-of-memory count.

**Host memory** is read from ``/proc``: a process's peak resident set (``VmHWM``) less its resident pages mapped from
files (``RssFile``: the shared libraries' code and read-only data, shared with every process that maps them), and
its current resident set (``statm``). Those file pages say how the process started, not what it trains with: a
fresh interpreter touches some 300 MiB of torch's while importing it (``ignite-ddl train``, ``start: fresh``), a run
forked from a sweep's fork server, which imported torch, only the pages it executes (a nanoGPT-sized GPT peaked at
1600 MiB under ``train`` and 1356 MiB in a sweep; without them, 1268 and 1309 MiB: docs/memory.md). ``/proc``
rather than ``resource.getrusage``: ``ru_maxrss`` cannot be reset, so it would carry the start-up's peak (imports,
the FLOPs count on a model copy) into the measured window, and it counts a worker only once it has been waited for;
``/proc/<pid>/clear_refs`` resets ``VmHWM`` per process, so the peaks here are those of the measured window (after
warm-up), the rank's and each worker's apart. Without ``/proc`` (not Linux) the rank's figure falls back to
``ru_maxrss`` (whole-run peak, file pages included) and workers are not counted; the record says which.

**CUDA memory** (run on one H200, docs/gpu/h200-2026-11-27-2.md) comes from ``torch.cuda.max_memory_allocated`` /
``max_memory_reserved`` and ``torch.cuda.memory_stats`` (``num_alloc_retries``, ``num_ooms``), its peaks reset
with ``torch.cuda.reset_peak_memory_stats`` when warm-up ends.

A rank also leaves its last reading in ``<log_dir>/memory_rank<r>.txt`` (at most once a second), so that a rank
killed by the kernel's out-of-memory killer (SIGKILL, no chance to say anything) is still named with its memory.

Example:
    >>> import torch
    >>> from torch import nn
    >>> net = nn.Linear(4, 2)  # 8 weights + 2 biases, float32
    >>> opt = torch.optim.Adam(net.parameters())
    >>> net(torch.ones(1, 4)).sum().backward(); opt.step()
    >>> held_bytes(net, opt)  # Adam keeps two moments per parameter (and a step counter per tensor)
    {'params': 40, 'grads': 40, 'optimizer': 88}
    >>> peak_rss_bytes() >= current_rss_bytes() - file_rss_bytes() > 0  # the file pages are left out of both
    True
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from ignite_ddl.core.errors import OutputError
from ignite_ddl.core.outputs import write_bytes
from ignite_ddl.core.procfs import children_map, current_rss_bytes, memory_limit_bytes, reading_file
from ignite_ddl.core.schema import CudaMemory, HeldBytes, Memory, MemoryMax, RankMemory
from ignite_ddl.core.text import format_bytes

__all__ = [
    "HELD_PARTS",
    "MemoryMonitor",
    "anonymous_rss_bytes",
    "file_rss_bytes",
    "format_memory",
    "held_bytes",
    "local_bytes",
    "peak_rss_bytes",
    "reset_peak",
]

HELD_PARTS = ("params", "grads", "optimizer")
_PUBLISH_EVERY_S = 1.0


def local_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes this rank holds for ``tensors``: the local shard of a DTensor, the whole tensor otherwise."""
    return sum(
        (t.to_local() if isinstance(t, DTensor) else t).numel() * t.element_size() for t in tensors if t is not None
    )


def held_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """What this rank holds for ``model`` and ``optimizer`` now: parameters, gradients, optimizer state."""
    return {
        "params": local_bytes(model.parameters()),
        "grads": local_bytes(p.grad for p in model.parameters()),
        "optimizer": local_bytes(
            t for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)
        ),
    }


def _status_kb(pid: int | str, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss_bytes(pid: int | str = "self") -> int:
    """Peak resident memory of a process since it started or since :func:`reset_peak` (``VmHWM``), less its
    resident file pages now (:func:`file_rss_bytes`: see the module docstring); without /proc, this process's
    ``ru_maxrss`` (since it started, file pages included)."""
    kb = _status_kb(pid, "VmHWM")
    if kb is not None:
        return max(0, kb * 1024 - file_rss_bytes(pid))
    if pid != "self":
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def anonymous_rss_bytes(pid: int | str = "self") -> int:
    """A process's resident memory not mapped from files (``RssAnon``: its heap, Python's objects, tensors) now; 0
    without /proc."""
    kb = _status_kb(pid, "RssAnon")
    return kb * 1024 if kb is not None else 0


def file_rss_bytes(pid: int | str = "self") -> int:
    """A process's resident pages mapped from files (``RssFile``): shared libraries' code and data, read from the
    page cache and shared with every process that maps them; 0 without /proc."""
    kb = _status_kb(pid, "RssFile")
    return kb * 1024 if kb is not None else 0


def reset_peak(pid: int | str = "self") -> bool:
    """Reset a process's ``VmHWM`` to its current resident set (Linux 4.0+); False where it cannot be."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _workers(engines: Iterable[Any] = ()) -> list[int]:
    """The live DataLoader workers of the loaders ``engines`` run on: the children of this rank that are their
    loaders' worker processes. Other children are not workers: the watcher a sweep's run forks to end with the
    sweep (it was once counted in every one-process run, "1 DataLoader worker 7 MiB of their own" with
    num_workers 0), Inductor's compile workers. The workers are kept across epochs (``persistent_workers``), so
    the loader's iterator holds them from the first batch on."""
    ours = set(children_map().get(os.getpid(), []))
    found = []
    for engine in engines:
        loader = getattr(getattr(engine, "state", None), "dataloader", None)
        processes = getattr(getattr(loader, "_iterator", None), "_workers", None) or []  # torch's _MultiProcessing...
        found += [p.pid for p in processes if p.pid in ours and p.pid not in found]
    return found


def _private_bytes(pid: int | str) -> int:
    """A process's memory no other process shares (Private_Clean + Private_Dirty of smaps_rollup): a forked
    worker's own, without the rank's pages it still shares."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


class MemoryMonitor:
    """Ignite handler measuring one rank's memory: peaks reset after the fixed warm-up iterations (``warmup``), so
    start-up does not count (the steady window, found only when the run ends, may start later: what a compilation or
    a slow settling allocated after the fixed warm-up stays in the peak); a reading per step (:meth:`sample`, for
    the step recorder's CSV); the last reading left for the launcher at most once a second. :meth:`gather` (a
    collective) returns every rank's figures."""

    def __init__(self, warmup: int, device: torch.device, log_dir: str | Path | None = None, rank: int = 0):
        self.warmup, self.device, self.rank = warmup, device, rank
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.proc = os.path.isdir("/proc")
        self.reset = False  # whether the peaks were reset after warm-up (else they are the whole run's)
        self.limit = memory_limit_bytes()
        self._iterations = 0
        self._published = -math.inf
        self._cuda = device.type == "cuda"
        self._engines: list[Any] = []  # whose loaders' workers count as this rank's

    def attach(self, engine: Any, *loading: Any) -> MemoryMonitor:
        """Measure while ``engine`` runs; the workers of its loader and of the ``loading`` engines' (the evaluator)
        count as this rank's DataLoader workers."""
        from ignite.engine import Events

        self._engines = [engine, *loading]
        if self.warmup == 0:
            engine.add_event_handler(Events.STARTED, self._reset_peaks)
        engine.add_event_handler(Events.ITERATION_COMPLETED, self._on_iteration)
        return self

    def _on_iteration(self) -> None:
        self._iterations += 1
        if self._iterations == self.warmup:
            self._reset_peaks()
        now = time.monotonic()
        if self.log_dir is not None and now - self._published >= _PUBLISH_EVERY_S:
            self._published = now
            self._publish()

    def _reset_peaks(self) -> None:
        if self.proc:
            self.reset = reset_peak() and all(reset_peak(pid) for pid in _workers(self._engines))
        if self._cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def _publish(self) -> None:
        assert self.log_dir is not None
        with contextlib.suppress(OSError, OutputError):  # a reading is a hint: never worth failing a run for
            reading = f"{current_rss_bytes()} {self.limit if self.limit is not None else '-'}\n"
            write_bytes(reading_file(self.log_dir, self.rank), reading.encode(), sync=False)

    def sample(self) -> int:
        """Memory in use now: allocated device memory on CUDA, the rank's resident set otherwise."""
        if self._cuda:
            return int(torch.cuda.memory_allocated(self.device))
        return current_rss_bytes()

    def part(self, held: dict[str, int] | None) -> RankMemory:
        """This rank's figures, as the schema's :class:`~ignite_ddl.core.schema.RankMemory`."""
        workers = _workers(self._engines)
        record: RankMemory = {
            "rank": self.rank,
            "peak_rss_bytes": peak_rss_bytes(),
            "file_rss_bytes": file_rss_bytes(),
            "workers": len(workers),
            "workers_peak_rss_bytes": sum(peak_rss_bytes(pid) for pid in workers),
            "workers_private_bytes": sum(_private_bytes(pid) for pid in workers),
            "held_bytes": cast(HeldBytes, held),  # params, grads, optimizer (held_bytes), or None
            "cuda": self._cuda_stats() if self._cuda else None,
            "reset_after_warmup": self.reset,
        }
        return record

    def _cuda_stats(self) -> CudaMemory:
        stats = torch.cuda.memory_stats(self.device)
        return {
            "max_allocated_bytes": int(torch.cuda.max_memory_allocated(self.device)),
            "max_reserved_bytes": int(torch.cuda.max_memory_reserved(self.device)),
            "alloc_retries": int(stats.get("num_alloc_retries", 0)),
            "ooms": int(stats.get("num_ooms", 0)),
        }

    def gather(self, held: dict[str, int] | None = None) -> Memory:
        """Collective: every rank's memory and the largest figure of each over the ranks, as the schema's
        :class:`~ignite_ddl.core.schema.Memory`."""
        from ignite_ddl.measure.gather import gather_objects

        ranks: list[RankMemory] = gather_objects(self.part(held))
        return {
            "source": "/proc (VmHWM less RssFile)" if self.proc else "getrusage (ru_maxrss, whole run)",
            "window": "after warm-up" if all(r["reset_after_warmup"] for r in ranks) else "whole run",
            "limit_bytes": self.limit,
            "ranks": ranks,
            "max": _max_over(ranks),
        }


def _max_over(ranks: list[RankMemory]) -> MemoryMax:
    def top(values: Iterable[int | None]) -> int | None:
        found = [v for v in values if v is not None]
        return max(found) if found else None

    held = [r["held_bytes"] for r in ranks if r["held_bytes"] is not None]
    cuda = [r["cuda"] for r in ranks if r["cuda"] is not None]
    return {
        "peak_rss_bytes": top(r["peak_rss_bytes"] for r in ranks),
        "workers_peak_rss_bytes": top(r["workers_peak_rss_bytes"] for r in ranks),
        "held_bytes": top(h["params"] + h["grads"] + h["optimizer"] for h in held),
        "cuda_max_allocated_bytes": top(c["max_allocated_bytes"] for c in cuda),
        "cuda_max_reserved_bytes": top(c["max_reserved_bytes"] for c in cuda),
    }


def format_memory(memory: dict[str, Any]) -> str:
    """The memory line of a run's log: the largest figure of each over the ranks."""
    top = memory["max"]
    line = (
        f"memory ({memory['window']}, largest rank): peak resident {format_bytes(top['peak_rss_bytes'])}, "
        f"held between steps {format_bytes(top['held_bytes'])} (parameters, gradients, optimizer state)"
    )
    workers = max((r["workers"] for r in memory["ranks"]), default=0)
    if workers:
        private = max(r["workers_private_bytes"] for r in memory["ranks"])
        line += f", {workers} DataLoader worker(s) {format_bytes(private)} of their own"
    if top["cuda_max_allocated_bytes"] is not None:
        line += (
            f"; CUDA peak allocated {format_bytes(top['cuda_max_allocated_bytes'])}, reserved "
            f"{format_bytes(top['cuda_max_reserved_bytes'])}"
        )
    return line
