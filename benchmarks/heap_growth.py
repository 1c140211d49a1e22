"""Why a trace cannot predict what glibc's heap keeps: the built-in GPT trained in this process, step after step,
with glibc's own figures after each step beside a replay of the step's tensor allocations through glibc's policy.

Each step allocates and frees the same tensors in the same order (PyTorch's ``MemTracker`` records them, on real
tensors here). After each step the script reads ``mallinfo2()``: ``arena`` (the heap's extent, what it keeps
resident) and ``uordblks`` (what is in use), and the process's resident set. It then replays the recorded
allocations through a model of glibc's policy for chunks above its thread cache (best fit over the free chunks,
the top, the mmap threshold raised by every freed mapped block, the top trimmed past twice that threshold). If the
heap's growth were a function of the tensors' sizes and order, the replay would follow glibc's figures. It does not:
measured on the 2-core AMD EPYC VM (torch 2.15.0, 2026-11-27), from the second step on glibc's heap held 460-590 MiB
between steps (three runs; it moves from run to run) while 12 MiB stayed in use, where the replay reached the traced
peak (300 MiB) in each step and gave all but 100 MiB back after it. What glibc keeps also depends on the
allocations the trace does not see (Python's objects, autograd's nodes, PyTorch's own small blocks), which pin holes
between the tensors and keep the top from being trimmed: docs/plan.md.

Usage:
    python benchmarks/heap_growth.py [--steps 8] [--checkpointing]
"""

from __future__ import annotations

import argparse
import bisect
import ctypes
import platform
import sys
from collections.abc import Hashable
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
from bench_common import print_machine

MIB = 2**20
_PAGE, _MINSIZE, _THREAD_CACHE_MAX, _MMAP_MAX = 4096, 32, 1032, 32 * MIB


class GlibcPolicy:
    """glibc's main arena for chunks above the thread cache (``malloc/malloc.c``): best fit over the free chunks,
    then the top, then ``mmap`` for a request at or above the threshold; a freed mapped block raises the threshold
    to its size (up to 32 MiB) and the trim threshold to twice that; a freed chunk merges with free neighbours and
    the top is trimmed past the trim threshold. ``heap`` is the extent (``mallinfo2().arena``)."""

    def __init__(self) -> None:
        self.mmap_threshold, self.trim_threshold, self.top_pad = 128 << 10, 128 << 10, 128 << 10
        self.top = self.end = self.mapped = 0
        self.peak = 0  # the largest extent since the last reading (peak_since)
        self.free_at: list[int] = []  # free chunks' addresses, sorted
        self.free_size: dict[int, int] = {}
        self.live: dict[Hashable, tuple[int, int, bool]] = {}

    def malloc(self, key: Hashable, nbytes: int) -> None:
        size = max(_MINSIZE, (nbytes + 8 + 15) & ~15)
        if nbytes <= 0 or size <= _THREAD_CACHE_MAX:
            return
        fits = [a for a in self.free_at if self.free_size[a] >= size]
        if fits:
            address = min(fits, key=lambda a: (self.free_size[a], a))
            have = self.free_size.pop(address)
            self.free_at.remove(address)
            if have - size >= _MINSIZE:
                self.free_size[address + size] = have - size
                bisect.insort(self.free_at, address + size)
        else:
            if self.end - self.top < size + _MINSIZE:
                if size >= self.mmap_threshold:
                    mapped = (size + 8 + _PAGE - 1) // _PAGE * _PAGE
                    self.live[key] = (0, mapped, True)
                    self.mapped += mapped
                    return
                grow = size + _MINSIZE + self.top_pad - (self.end - self.top)
                self.end += (grow + _PAGE - 1) // _PAGE * _PAGE
                self.peak = max(self.peak, self.end)
            address, self.top = self.top, self.top + size
        self.live[key] = (address, size, False)

    def free(self, key: Hashable) -> None:
        block = self.live.pop(key, None)
        if block is None:
            return
        address, size, mapped = block
        if mapped:
            self.mapped -= size
            if self.mmap_threshold < size <= _MMAP_MAX:
                self.mmap_threshold, self.trim_threshold = size, 2 * size
            return
        i = bisect.bisect_left(self.free_at, address)
        if i > 0 and self.free_at[i - 1] + self.free_size[self.free_at[i - 1]] == address:
            i -= 1
            address = self.free_at.pop(i)
            size += self.free_size.pop(address)
        if address + size == self.top:
            self.top = address
        else:
            if address + size in self.free_size:
                size += self.free_size.pop(address + size)
                self.free_at.pop(i)
            self.free_size[address] = size
            self.free_at.insert(i, address)
        if size >= 64 << 10 and self.end - self.top >= self.trim_threshold:
            extra = (self.end - self.top - self.top_pad - _MINSIZE - 1) // _PAGE * _PAGE
            self.end -= max(0, extra)

    @property
    def heap(self) -> int:
        return self.end

    def peak_since(self) -> int:
        """The largest extent since the last call (the extent now where it did not grow)."""
        peak, self.peak = max(self.peak, self.end), self.end
        return peak


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps (default 8)")
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing of the GPT's blocks")
    args = parser.parse_args()
    if platform.libc_ver()[0] != "glibc":
        sys.exit("heap_growth: this reads glibc's own figures (mallinfo2), and this C library is not glibc")
    if args.steps < 1:
        sys.exit("heap_growth: --steps must be 1 or more")

    import torch
    from torch.distributed._tools.mem_tracker import MemTracker, _UpdateType

    from ignite_ddl.core.procfs import current_rss_bytes
    from ignite_ddl.trainer import gpt
    from ignite_ddl.trainer.engines import criterion_step, optimizer_step
    from ignite_ddl.trainer.workload import activation_checkpointing

    print_machine()
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = gpt.GPT(4, 128, 4, 256, 256)  # benchmarks/memory_prediction.py's GPT: 4 blocks of 128, 256 tokens
    if args.checkpointing:
        activation_checkpointing(model, tuple(f"blocks.{i}" for i in range(4)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randint(0, 256, (32, 256)), torch.randint(0, 256, (32, 256))

    # The tracker's private update, wrapped to record each storage's allocation and free in order (its public
    # snapshots give sizes, not the sequence).
    events: list[tuple[str, Hashable, int]] = []
    live: dict[int, Hashable] = {}
    tracker = MemTracker()
    tracker.track_external(model, optimizer, x, y)
    update = tracker._update_snap

    def record(kind: Any, winfo: Any, *rest: Any, **more: Any) -> None:
        held = live.pop(id(winfo), None) if kind in (_UpdateType.DEL, _UpdateType.SIZE) else None
        if kind in (_UpdateType.ADD, _UpdateType.SIZE) and winfo.mem_consumed:
            live[id(winfo)] = (id(winfo), len(events))
            events.append(("malloc", live[id(winfo)], winfo.mem_consumed))
        if held is not None:
            events.append(("free", held, 0))
        update(kind, winfo, *rest, **more)

    tracker._update_snap = record  # type: ignore[method-assign]
    start, rss0 = libc.mallinfo2(), current_rss_bytes()
    policy, replayed = GlibcPolicy(), 0

    def reset(phase: str) -> None:
        if phase in ("backward", "optimizer"):
            tracker.reset_mod_stats()

    print(
        f"{'step':>4} {'glibc heap MiB':>14} {'in use MiB':>10} {'resident MiB':>12} {'replayed: heap, its peak':>24}"
    )
    with tracker:
        for step in range(args.steps):
            optimizer_step(model, optimizer, criterion_step(gpt.lm_loss), (x, y), "none", None, 1, mark=reset)
            now, rss = libc.mallinfo2(), current_rss_bytes()
            for kind, key, nbytes in events[replayed:]:
                policy.malloc(key, nbytes) if kind == "malloc" else policy.free(key)
            replayed = len(events)
            heap, used = (now.arena - start.arena) / MIB, (now.uordblks - start.uordblks) / MIB
            grown = (rss - (rss0 or 0)) / MIB
            replay = f"{policy.heap / MIB:.0f}, {policy.peak_since() / MIB:.0f}"
            print(f"{step + 1:>4} {heap:>+14.0f} {used:>+10.0f} {grown:>+12.0f} {replay:>24}")
    peak = sum(v for d in tracker.get_tracker_snapshot("peak").values() for k, v in d.items() if "Total" in str(k))
    print(f"traced peak of the tensors: {peak / MIB:.0f} MiB (glibc's figures are growths over the start)")


if __name__ == "__main__":
    main()
