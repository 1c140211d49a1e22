"""The heap a CPU rank's allocator keeps beyond its tensors: the traced allocations recorded in order, replayed
through this machine's glibc in a child process, and the plan's ``heap`` part (ignite_ddl/predict/heap.py)."""

from __future__ import annotations

import platform
import random

import pytest
import torch
from torch import nn

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.predict import heap, memory

MIB = 2**20
glibc_cpu = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or memory.on_cuda(TrainConfig()),
    reason="the replay measures glibc's heap on a CPU rank",
)


@pytest.mark.parametrize("seed", range(20))
def test_the_largest_live_sum_is_the_peak_of_a_running_total(seed: int) -> None:
    """Each step allocates a block or frees the oldest live one; the largest live sum is the running total's peak."""
    rng = random.Random(seed)
    events: list[heap.Event] = []
    live: list[tuple[int, int]] = []
    total = peak = 0
    for _ in range(rng.randrange(40)):
        if rng.random() < 0.6 or not live:
            nbytes = rng.randrange(1, 1 << 20)
            events.append(heap.Allocation(len(events), nbytes))
            live.append((len(events) - 1, nbytes))
            total += nbytes
        else:
            key, size = live.pop(rng.randrange(len(live)))
            events.append(heap.Free(key))
            total -= size
        peak = max(peak, total)
    assert heap.largest_live(events) == peak


def test_a_tracker_records_the_allocations_it_follows_in_order() -> None:
    """The recording wraps PyTorch's own MemTracker: what it records reaches the tracker's own peak, and every free
    names an earlier allocation."""
    from torch.distributed._tools.mem_tracker import MemTracker

    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(32, 64)
    tracker = MemTracker()
    tracker.track_external(model, optimizer, x)
    before = _total(tracker.get_tracker_snapshot())  # the model, its optimizer (no state yet) and the input
    events: list[heap.Event] = []
    assert heap.record(tracker, events)
    with tracker:
        for _ in range(2):
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            tracker.reset_mod_stats()  # one forward per module between resets (the tracker's rule)
    allocated = {e.key for e in events if isinstance(e, heap.Allocation)}
    assert all(e.key in allocated for e in events if isinstance(e, heap.Free))
    assert any(isinstance(e, heap.Free) for e in events)  # the first step's gradients and activations
    assert heap.largest_live(events) == _total(tracker.get_tracker_snapshot("peak")) - before


def _total(snapshot: dict) -> int:
    return sum(v for device in snapshot.values() for k, v in device.items() if "Total" in str(k))


def _fragmenting() -> list[heap.Event]:
    """A block freed below glibc's largest mmap threshold raises it there (later blocks come from the heap). Then
    each block is followed by a small one that stays, and is freed: the small block keeps the hole from merging
    with the top, and the next block, half a MiB larger, does not fit it. Eight such rounds leave a heap about
    110 MiB wide while at most 15.5 MiB (and the small blocks) is live."""
    events: list[heap.Event] = [heap.Allocation(0, 24 * MIB), heap.Free(0)]
    for k in range(8):
        big = 1 + 2 * k
        events += [heap.Allocation(big, (24 + k) * MIB // 2), heap.Allocation(big + 1, 1024), heap.Free(big)]
    return events


def _stacked() -> list[heap.Event]:
    """Blocks allocated one on another and freed in reverse: each freed block merges with the top, and at the peak
    all are live, so the heap spans nothing beyond them."""
    events: list[heap.Event] = [heap.Allocation(0, 24 * MIB), heap.Free(0)]
    events += [heap.Allocation(k, 12 * MIB) for k in range(1, 9)]
    events += [heap.Free(k) for k in range(8, 0, -1)]
    return events


@glibc_cpu
def test_the_replay_measures_the_holes_glibc_leaves_and_nothing_where_it_leaves_none() -> None:
    """Replayed in a fresh interpreter, as the plan does (a forked child's heap is its parent's, free space
    included). How many of the rounds glibc places past the holes depends on its bins, so the bound is loose: more
    than one block's worth, less than all the blocks."""
    fragmented, stacked = heap.replay(_fragmenting()), heap.replay(_stacked())
    assert fragmented is not None and stacked is not None
    assert 20 * MIB <= fragmented <= 110 * MIB, fragmented / MIB
    assert stacked < 2 * MIB, stacked / MIB


@glibc_cpu
def test_a_replay_larger_than_its_share_of_the_memory_available_is_not_made(monkeypatch) -> None:
    """Refused before a process is started for it."""
    monkeypatch.setattr(heap, "available_bytes", lambda: 4 * 96 * MIB - 1)  # the replay's peak: 96 MiB live
    monkeypatch.setattr(heap, "call_apart", None)  # never reached
    assert heap.largest_live(_stacked()) == 96 * MIB
    assert heap.replay(_stacked()) is None


@glibc_cpu
def test_a_replay_reads_a_clean_process_not_the_callers_heap() -> None:
    """The caller's heap full of resident free space (a long test session, a sweep) does not change the figure: the
    replay runs in a process of its own. Forked from here instead, the same replay would land in that free space."""
    pinned = []
    for size in range(1, 200):  # blocks freed with a small one kept after each: holes the heap keeps resident
        block = torch.empty(size * 100_000, dtype=torch.uint8)
        block[::4096].fill_(1)
        pinned.append(torch.empty(64))
        del block
    fresh = heap.replay(_fragmenting())
    assert fresh is not None and fresh >= 20 * MIB, fresh / MIB


@glibc_cpu
def test_a_cpu_rank_whose_step_is_mostly_activations_has_its_heap_predicted(monkeypatch) -> None:
    """The built-in GPT frees its activations as its backward goes: its prediction has a heap part, measured by the
    replay, and says nothing of the heap as unpredicted. Where the replay is not made (here: too large for what is
    available), the rank says its heap is not predicted instead, as a step that is mostly activations."""
    gpt = TrainConfig(workload="gpt", batch_size=32)
    replayed = memory.predict(gpt, runtime_bytes=0)
    assert replayed.parts["heap"] > 0 and replayed.peak_bytes
    assert replayed.peak_bytes == sum(replayed.parts.values())
    assert not any("allocator" in u for u in replayed.unpredicted), replayed.unpredicted
    ddp = memory.predict(TrainConfig(workload="gpt", batch_size=32, strategy="ddp", nproc_per_node=2), 0)
    assert ddp.parts["heap"] > 0

    monkeypatch.setattr(heap, "REPLAY_SHARE", 0.0)
    refused = memory.predict(gpt, runtime_bytes=0)
    assert "heap" not in refused.parts
    assert [u for u in refused.unpredicted if "activations each step frees" in u]


@glibc_cpu
def test_a_plan_made_in_a_daemonic_child_still_predicts_without_the_heap() -> None:
    """A daemonic process may not start one (benchmarks/cuda_memory.py predicts in such a child): the replay is
    not made, the prediction stands and says its heap is not predicted."""
    from ignite_ddl.core.apart import call_apart

    prediction = call_apart(memory.predict, TrainConfig(workload="gpt", batch_size=32), 0, start_method="spawn")
    assert prediction.peak_bytes and prediction.problem is None
    assert "heap" not in prediction.parts
    assert [u for u in prediction.unpredicted if "activations each step frees" in u]
