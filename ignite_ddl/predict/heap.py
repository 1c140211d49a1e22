"""What the C allocator's heap keeps beyond a CPU rank's tensors: the traced step's allocations replayed through this
machine's own allocator.

On CPU a rank's resident peak is its tensors *and* what glibc keeps of the blocks they freed. glibc raises its mmap
threshold (up to 32 MiB) as large blocks are freed and from then on serves blocks below it from its heap, where a
freed block stays resident and the holes between live ones are reused only by blocks that fit them: a step that
frees its activations as its backward goes leaves a heap wider than the step's largest set of live tensors. How much
wider depends on the sizes and the order of every allocation, which the trace knows, and on glibc's policy, which
this module does not imitate: it *replays* the sequence. The trace records each tensor's allocation and free in
order (PyTorch's ``MemTracker``, on fake tensors: sizes, no storage); :func:`replay` then starts a clean process (a
fresh interpreter, or a sweep's fork server's child, as its runs start) that allocates and frees real blocks of the
same sizes in the same order with ``torch.empty`` (the allocator a rank's tensors use), touching every page as a step
writes its tensors, and reads its resident peak (``VmHWM``, reset before the replay) against the largest sum of live
blocks. The difference is the ``heap`` part of the prediction. Not a fork of the planning process: its heap's free
space, resident already, takes the blocks without a page's growth (a test session's read 0 for the built-in GPT).

Measured on the 2-core CPU VMs (torch 2.15.0): GPT-2's architecture (3 blocks of 192 over 64 tokens, batch 32) traced
193 MiB live at its peak and its replay peaked 257-269 MiB above its start after 2 steps, 280-291 after 4 and 291
after 8, so :data:`REPLAYED_STEPS` steps are replayed. The built-in GPT of ``benchmarks/heap_growth.py`` (4 blocks of
128 over 256 tokens) replayed to 460 MiB for 296 live, where the same model trained without a tracker held 396-464
MiB between steps over 60 steps (docs/plan-validation.md). A model imitating glibc's policy instead (best fit, the
top, the dynamic threshold, trimming) stayed at the traced peak: glibc's bins and their order of reuse matter.

The replay allocates what the step allocates, for real (pages touched), in a process that ends with it: it is
made only where the traced peak is at most :data:`REPLAY_SHARE` of the memory available, else the heap is not
predicted and the plan's line says so. Only a CPU rank under glibc whose parameters are not sharded is replayed (an
FSDP rank's gathers have their own note; a CUDA rank's allocator is PyTorch's).

Example:
    >>> events = [Allocation(0, 1 << 20), Allocation(1, 1 << 20), Free(0), Allocation(2, 1 << 19), Free(1), Free(2)]
    >>> largest_live(events) == 2 << 20
    True
"""

from __future__ import annotations

import gc
import multiprocessing as mp
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ignite_ddl.core.apart import ChildFailed, call_apart
from ignite_ddl.core.procfs import available_bytes
from ignite_ddl.measure.memory import peak_rss_bytes, reset_peak

__all__ = [
    "Allocation",
    "Free",
    "REPLAYED_STEPS",
    "REPLAY_SHARE",
    "heap_beyond_tensors",
    "largest_live",
    "record",
    "replay",
]

REPLAYED_STEPS = 4  # glibc's heap under GPT-2's step: 257-269 MiB after 2 replayed steps, 280-291 after 4, 291 after 8
REPLAY_SHARE = 0.25  # the replay may allocate up to about 1.5 times the traced peak: a quarter of what is available
_PAGE = 4096


@dataclass(frozen=True)
class Allocation:
    """A tensor's storage allocated: ``key`` names it until its :class:`Free`."""

    key: int
    nbytes: int


@dataclass(frozen=True)
class Free:
    key: int


Event = Allocation | Free


def record(tracker: Any, events: list[Event]) -> bool:
    """Make ``tracker`` (a ``MemTracker``) append every storage it sees allocated or freed to ``events``, in order;
    False (nothing recorded) where this PyTorch's tracker does not have the private update it wraps."""
    try:
        from torch.distributed._tools.mem_tracker import _UpdateType
    except ImportError:
        return False
    update: Callable[..., None] | None = getattr(tracker, "_update_snap", None)
    if update is None:
        return False
    live: dict[int, int] = {}  # the tracker's record of a storage (by id) -> our key

    def recording(kind: Any, winfo: Any, *rest: Any, **more: Any) -> None:
        # A storage resized (SIZE) is freed and allocated again at its new size, as the allocator sees it.
        held = live.pop(id(winfo), None) if kind in (_UpdateType.DEL, _UpdateType.SIZE) else None
        if held is not None:
            events.append(Free(held))
        nbytes = int(getattr(winfo, "mem_consumed", 0) or 0)
        if kind in (_UpdateType.ADD, _UpdateType.SIZE) and nbytes:
            live[id(winfo)] = len(events)
            events.append(Allocation(len(events), nbytes))
        update(kind, winfo, *rest, **more)

    tracker._update_snap = recording
    return True


def largest_live(events: list[Event]) -> int:
    """The largest sum of the blocks live at once over ``events`` (bytes)."""
    sizes: dict[int, int] = {}
    live = peak = 0
    for event in events:
        if isinstance(event, Allocation):
            sizes[event.key] = event.nbytes
            live += event.nbytes
            peak = max(peak, live)
        else:
            live -= sizes.pop(event.key, 0)
    return peak


def replay(events: list[Event], start_method: str = "spawn", timeout_s: float = 300.0) -> int | None:
    """:func:`heap_beyond_tensors` of ``events`` in a process of its own, started ``start_method``: a fresh
    interpreter (``spawn``) or a fork server's child (``forkserver``: a sweep's, which imported what a run imports
    and ran nothing), never a fork of this one (whose heap, free space included, would take the replay's blocks:
    after a test session or a long sweep, every step's heap read as nothing). None where no replay is made or it
    failed, or this process is daemonic and may start none (the plan then says the heap is not predicted)."""
    available = available_bytes()
    if not events or available is None or largest_live(events) > REPLAY_SHARE * available:
        return None  # said before a process is started for it
    if mp.current_process().daemon:
        return None  # a daemonic process may not start one (a plan made in a child made for it)
    try:
        kept: int | None = call_apart(
            heap_beyond_tensors, events, start_method=start_method, timeout_s=timeout_s, run_main=False
        )
    except (ChildFailed, OSError):  # the heap goes unpredicted, said as such; the prediction stands
        return None
    return kept


def heap_beyond_tensors(events: list[Event]) -> int | None:
    """What this process's resident peak rose above the largest sum of live blocks while ``events`` were replayed
    through its allocator (bytes); None where it cannot be measured here (no ``/proc``, its peak cannot be reset) or
    the replay would allocate too much (see the module docstring). Allocates for real, and reads this process's
    allocator as it is: call it through :func:`replay`."""
    peak = largest_live(events)
    available = available_bytes()
    if not events or available is None or peak > REPLAY_SHARE * available:
        return None
    gc.collect()
    if not reset_peak():
        return None
    start = peak_rss_bytes()  # the resident set now, less its pages mapped from files, as a rank's peak is read
    blocks: dict[int, torch.Tensor] = {}
    for event in events:
        if isinstance(event, Allocation):
            block = torch.empty(event.nbytes, dtype=torch.uint8)
            block[::_PAGE].fill_(1)  # a step writes its tensors: every page becomes resident
            blocks[event.key] = block
        else:
            blocks.pop(event.key, None)
    blocks.clear()
    return max(0, peak_rss_bytes() - start - peak)
