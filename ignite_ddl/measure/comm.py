"""Where DDP's gradient communication goes on each rank: per-bucket timing from a communication hook.

Under DDP, a rank's backward is three things at once: gradient compute, the all-reduce of gradient buckets that
overlaps it, and waiting for slower ranks inside that all-reduce. :class:`CommTimer` tells them apart. It registers a
DDP communication hook (``register_comm_hook``) that performs exactly DDP's default reduction (divide the bucket by
the world size, then all-reduce with SUM, as ``default_hooks.allreduce_hook`` does) and records, for each bucket of
each step:

- when the bucket was *ready* (the hook is called as soon as autograd has produced all of its gradients),
- when its all-reduce *completed* (the future's callback), and
- its bytes.

The reduction itself is a hook of torch's own (:data:`Hook`: ``default_hooks.allreduce_hook``, the fp16 / bf16
compression hooks, PowerSGD), which the timer *wraps* rather than replaces: what goes on the wire and the result
are the wrapped hook's; the timer adds the two instants and the bytes the hook puts on the wire (half the bucket
for fp16 / bf16, PowerSGD's low-rank factors and uncompressed tensors). The time from ready to completed then
includes the hook's own compression and decompression.

On CPU (gloo) both instants are host clock readings: the callback runs in the process group's thread as the work
completes. On CUDA they are CUDA events recorded on the stream the hook and the callback run on (the callback's
stream waits for the collective), read after the step's end synchronisation: the hook adds no host
synchronisation. From these, per step (:class:`StepComm`):

- **communication time**: the union of the buckets' [ready, completed] intervals: the time at least one bucket's
  all-reduce was in flight;
- **exposed communication**: from the last gradient ready to the last all-reduce completed, the part of backward
  that no gradient compute hides; 0 <= exposed <= communication;
- **overlap**: (communication - exposed) / communication;
- **bytes** and **bus bandwidth**: bytes / communication time x 2(N-1)/N (nccl-tests' busbw for all-reduce), to be
  compared with what :func:`time_allreduce` measures for one message of the same size on the same ranks;
- **spans**: each bucket's own (ready, completed) instants, in seconds after the step's start (the instant given to
  :meth:`CommTimer.begin`; without it, the first bucket's ready instant), ordered by ready time: the step recorder
  writes them into ``steps_rank<r>.csv`` (``bucket_spans_ms``) and the DDP diagram draws one bar per bucket.

A collective completes only when every rank has joined it, so time a fast rank spends waiting for a slow one shows
up *on the fast rank*, as communication (and, when the slow rank is late with its last bucket, exposed
communication). The straggler view (:func:`waits`) uses exactly that: a rank whose exposed communication is much
smaller than the others' is the one they wait for.

Example (the figures of one step from its buckets' times in seconds):
    >>> step = summarize([_Bucket(0, 132, 0.010, 0.014), _Bucket(1, 40, 0.012, 0.013)], world_size=2)
    >>> round(step.comm_s, 6), round(step.exposed_s, 6), step.bytes, step.buckets
    (0.004, 0.002, 172, 2)
    >>> round(step.overlap, 2)
    0.5
    >>> [(round(r, 6), round(d, 6)) for r, d in summarize([_Bucket(0, 132, 0.010, 0.014)], 2, origin=0.008).spans]
    [(0.002, 0.006)]
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ignite_ddl.core.collectives import allreduce_bus_factor
from ignite_ddl.core.schema import CommWait
from ignite_ddl.measure.clock import device_synchronizer

__all__ = ["NO_COMM", "CommTimer", "Hook", "StepComm", "allreduce", "summarize", "time_allreduce", "waits"]

# A DDP communication hook as the timer calls it: reduce one bucket, return the future of the reduced bucket and
# the bytes this rank puts on the wire for it.
Hook = Callable[[dist.GradBucket], "tuple[torch.futures.Future[torch.Tensor], int]"]


def allreduce(group: Any) -> Hook:
    """torch's ``allreduce_hook`` (what DDP does without a hook: divide by the world size, all-reduce with SUM),
    with the bucket's bytes."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(bucket: dist.GradBucket) -> tuple[torch.futures.Future[torch.Tensor], int]:
        tensor = bucket.buffer()
        return allreduce_hook(group, bucket), tensor.numel() * tensor.element_size()

    return hook


@dataclass
class _Bucket:
    index: int
    nbytes: int
    ready: Any  # seconds (float) on CPU, a torch.cuda.Event on CUDA
    done: Any = None


@dataclass(frozen=True)
class StepComm:
    """One step's gradient communication on one rank (times in seconds)."""

    comm_s: float
    exposed_s: float
    bytes: int
    buckets: int
    busbw: float  # bytes/s, nccl-tests' bus bandwidth over the communication time
    # Each bucket's (ready, done) in seconds after the step's start, ordered by ready time (buckets whose all-reduce
    # had not completed are left out); empty without communication.
    spans: tuple[tuple[float, float], ...] = ()

    @property
    def overlap(self) -> float:
        """Share of the communication time hidden behind gradient compute (NaN without communication)."""
        return (self.comm_s - self.exposed_s) / self.comm_s if self.comm_s > 0 else math.nan


NO_COMM = StepComm(math.nan, math.nan, 0, 0, math.nan)


def summarize(buckets: list[_Bucket], world_size: int, origin: float = 0.0) -> StepComm:
    """A step's figures from its buckets' [ready, done] times in seconds (see the module docstring); ``origin``, on
    the same clock, is the step's start, from which :attr:`StepComm.spans` are measured."""
    spans = sorted((b.ready, b.done) for b in buckets if b.done is not None)
    if not spans:
        return NO_COMM
    busy, start, end = 0.0, spans[0][0], spans[0][1]
    for ready, done in spans[1:]:  # the union of the intervals: buckets in flight together count once
        if ready > end:
            busy += end - start
            start = ready
        end = max(end, done)
    busy += end - start
    exposed = max(0.0, max(d for _, d in spans) - max(r for r, _ in spans))
    nbytes = sum(b.nbytes for b in buckets)
    busbw = nbytes / busy * allreduce_bus_factor(world_size) if busy > 0 else math.nan
    offsets = tuple((ready - origin, done - origin) for ready, done in spans)
    return StepComm(busy, exposed, nbytes, len(buckets), busbw, offsets)


@dataclass
class CommTimer:
    """Times each gradient bucket's all-reduce of a DDP model on this rank; see the module docstring.

    Attach it before the first backward; call :meth:`begin` at each step's start (optional: it is the origin of the
    buckets' spans) and :meth:`take` once per step, after the step (and on CUDA after the step's synchronisation), to
    get that step's :class:`StepComm` and start the next one.
    """

    device: torch.device
    _buckets: list[_Bucket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # completions arrive on the backend's threads
    _hook: Hook | None = None
    _world_size: int = 1
    _origin: Any = None  # the step's start: seconds (float) on CPU, a torch.cuda.Event on CUDA; None: not marked

    def attach(self, model: nn.Module, hook: Hook | None = None) -> CommTimer:
        """Register the timing hook on ``model`` (a ``DistributedDataParallel``), wrapping ``hook`` (default:
        :func:`allreduce`, DDP's own reduction); returns self."""
        if not isinstance(model, nn.parallel.DistributedDataParallel):
            raise TypeError(f"CommTimer needs a DistributedDataParallel model, got {type(model).__name__}")
        self._world_size = dist.get_world_size(model.process_group)
        self._hook = hook if hook is not None else allreduce(model.process_group)
        model.register_comm_hook(self, _timed_hook)
        return self

    def _now(self) -> Any:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()  # on the current stream: after the work queued there so far
            return event
        return time.perf_counter()

    def begin(self, now: float | None = None) -> None:
        """Mark the start of a step: the spans :meth:`take` returns are measured from here. On CPU ``now`` is the
        ``time.perf_counter()`` reading to use (the caller's own, so both count from the same instant; default: now).
        On CUDA a timing event is recorded on the current stream instead and ``now`` is ignored: the event fires when
        the stream reaches it, which is at once after the previous step's synchronisation (a caveat: this CUDA path
        has never run on a GPU)."""
        origin = self._now() if self.device.type == "cuda" or now is None else now
        with self._lock:
            self._origin = origin

    def _ready(self, index: int, nbytes: int) -> _Bucket:
        bucket = _Bucket(index, nbytes, self._now())
        with self._lock:
            self._buckets.append(bucket)
        return bucket

    def take(self) -> StepComm:
        """The figures of the step since the last call (:data:`NO_COMM` if no bucket was reduced)."""
        with self._lock:
            buckets, self._buckets = self._buckets, []
            origin, self._origin = self._origin, None
        if not buckets:
            return NO_COMM
        if self.device.type == "cuda":
            # Events as seconds after the step's start event (or the first bucket's ready event): origin 0. Timing
            # from a step-start event has never run on a GPU: unverified there.
            return summarize(_event_seconds(buckets, origin), self._world_size)
        return summarize(buckets, self._world_size, min(b.ready for b in buckets) if origin is None else origin)


def _event_seconds(buckets: list[_Bucket], origin: Any = None) -> list[_Bucket]:
    """CUDA events as seconds after ``origin`` (an event recorded before the buckets' on the same stream; default:
    the first bucket's ready event); every event must have completed. A step-start event as ``origin`` has never
    run on a GPU."""
    origin = buckets[0].ready if origin is None else origin
    origin.synchronize()
    for b in buckets:
        if b.done is not None:
            b.done.synchronize()  # already complete after the step's synchronisation: no wait in practice
    return [
        _Bucket(
            b.index,
            b.nbytes,
            origin.elapsed_time(b.ready) / 1e3,
            None if b.done is None else origin.elapsed_time(b.done) / 1e3,
        )
        for b in buckets
    ]


# DDP checks a hook's annotations against the real classes; this module's postponed (string) annotations would
# fail that check, so the hook carries none.
def _timed_hook(timer, bucket):  # type: ignore[no-untyped-def]
    """The timer's wrapped hook reducing ``bucket``, with the bucket's ready and done instants and its bytes on the
    wire recorded by ``timer``."""
    record = timer._ready(bucket.index(), 0)
    future, record.nbytes = timer._hook(bucket)

    def completed(fut: torch.futures.Future) -> torch.Tensor:
        record.done = timer._now()
        return fut.value()

    return future.then(completed)


def time_allreduce(nbytes: int, dtype: torch.dtype, device: torch.device, iters: int = 10, warmup: int = 2) -> float:
    """Collective: the median seconds of one all-reduce of ``nbytes`` on the default group, every rank calling it.

    Each call is timed on its own after a barrier, so it measures the transfer and not a rank's late arrival; this
    is the yardstick a run's achieved bandwidth is compared with.
    """
    numel = max(1, nbytes // torch.tensor([], dtype=dtype).element_size())
    tensor = torch.zeros(numel, dtype=dtype, device=device)
    sync = device_synchronizer(device) or (lambda: None)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    seconds = []
    for _ in range(iters):
        sync()
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        sync()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def waits(exposed_s: list[float]) -> CommWait | None:
    """Who waits for whom, from each rank's mean exposed communication per step (seconds, in rank order).

    The rank with the least exposed communication is the one the others wait for: its last bucket is the last to
    arrive, so its all-reduce completes almost as soon as it joins. Every rank's extra exposed communication over
    its own is that rank's wait (``wait_s``, in rank order; 0 for the rank waited for). None with fewer than two
    ranks or missing figures.

    >>> waits([0.014, 0.002])
    {'rank': 1, 'wait_s': [0.012, 0.0], 'median_wait_s': 0.012}
    """
    if len(exposed_s) < 2 or any(math.isnan(e) for e in exposed_s):
        return None
    last = min(range(len(exposed_s)), key=lambda r: exposed_s[r])
    wait = [round(e - exposed_s[last], 9) for e in exposed_s]
    others = [w for r, w in enumerate(wait) if r != last]
    return {"rank": last, "wait_s": wait, "median_wait_s": statistics.median(others)}
