"""What DDP and its communication hook cost a rank in a step besides the all-reduces: DDP's own work on each
bucket and torch's own hook, run on this machine in one process, timed per DDP bucket, with the bytes each of the
hook's all-reduces carries.

**Why measure it.** A hook trades bytes for work. PowerSGD, per bucket, adds the previous step's error, keeps a
copy, multiplies every gradient matrix by its factor Q, orthogonalises the product P, multiplies again for Q,
rebuilds the matrix from P Q^T and keeps the new error; its three all-reduces (the tensors it leaves uncompressed,
the Ps, the Qs) are small, the work is not: on wide_mlp's 59 MB of gradients it costs more than the plain
all-reduce it replaces (docs/faster-step.md). fp16 / bf16 cast the bucket down, divide it and copy the sum back.
Without a hook, DDP's default one divides the bucket by the world size before its all-reduce. And whatever the
hook, DDP copies each gradient into its bucket as backward makes it and the reduced bucket back into the gradients
(unless ``gradient_as_bucket_view`` makes the gradients views of the bucket): on wide_mlp's 59 MB, 12 ms a step
with one thread here, which a rank pays on its own cores and the one-process run never did. That work depends on
the machine, so it is measured here rather than counted.

**How.** The model's gradients are laid out in DDP's buckets as DDP forms them (the parameters in reverse order,
capped at ``bucket_cap_mb``: ``torch.distributed._compute_bucket_assignment_by_size``, which DDP calls), each
bucket a real float32 buffer of random values beside real gradients. Each step copies the gradients into their
bucket, runs torch's hook on it (``allreduce_hook`` for none, ``powerSGD_hook`` with the run's rank, error feedback
and warm start; ``fp16_compress_hook``, ``bf16_compress_hook``) and copies the bucket back, on a process group of
this one process (an all-reduce over one rank is its input: nothing is sent, nothing listens), with the intra-op
threads a rank of the run gets. PowerSGD's plain iterations and its first compressed one (which draws Q), or the
other hooks' first step, are left out; the median of the next :data:`MEASURED_STEPS` is the cost. PowerSGD's bytes
come from its own rule (``_should_compress``): a matrix is compressed where its two factors are at least
``min_compression_rate`` times smaller; vectors and the rest go whole.

**What it is not**: a GPU rank's cost (the buffers here are CPU tensors), nor the contention a rank's other threads
add to its own. The buffers are real: this allocates about five times the gradients' bytes, so a model above
:data:`MAX_GRADIENT_BYTES` is not measured (its configuration says why).

Example:
    >>> from ignite_ddl.core.config import TrainConfig
    >>> cost = hook_cost(TrainConfig(model="mlp", nproc_per_node=2, comm_hook="powersgd"), threads=1)
    >>> len(cost) >= 1 and all(b.compute_s > 0 and len(b.allreduce_bytes) == 3 for b in cost)
    True
    >>> half = hook_cost(TrainConfig(model="mlp", nproc_per_node=2, comm_hook="bf16"), threads=1)
    >>> [len(b.allreduce_bytes) for b in half], sum(b.allreduce_bytes[0] for b in half)  # mlp's 0.8 M parameters
    ([1], 1641748)
    >>> plain = hook_cost(TrainConfig(model="mlp", nproc_per_node=2), threads=1)  # DDP's copies and division
    >>> [len(b.allreduce_bytes) for b in plain], sum(b.allreduce_bytes[0] for b in plain), plain[0].compute_s > 0
    ([1], 3283496, True)
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ignite_ddl.core.apart import ChildFailed, call_apart
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.predict.memory import gradient_shapes

__all__ = ["MAX_GRADIENT_BYTES", "MEASURED_STEPS", "BucketCost", "ddp_buckets", "hook_cost"]

MEASURED_STEPS = 3
MAX_GRADIENT_BYTES = 2 << 30  # beyond this the measurement's buffers (about 5x) would strain the machine
_MIN_COMPRESSION_RATE = 2  # PowerSGDState's default, which the run uses (strategies.comm_hook)


@dataclass(frozen=True)
class BucketCost:
    """One DDP bucket under a communication hook: DDP's and the hook's own work a step (seconds, one rank: the
    gradients copied in and out, the hook's division, casts or compression) and the bytes of its all-reduces in the
    order it issues them (none: the bucket; PowerSGD: uncompressed tensors, Ps, Qs; fp16 / bf16: the bucket in half
    precision)."""

    compute_s: float
    allreduce_bytes: tuple[int, ...]


def ddp_buckets(config: TrainConfig) -> list[list[torch.Tensor]]:
    """The model's gradients (meta tensors) grouped in DDP's buckets, in the order DDP reduces them."""
    # After its first iteration DDP rebuilds its buckets in the order backward made the gradients ready: the
    # parameters' reverse, here. Their cap is bucket_cap_mb for every bucket, the first too: torch gives the first a
    # cap of its own (1 MiB) only where bucket_cap_mb is left unset, and the DDP strategy always sets it.
    grads = gradient_shapes(config)[::-1]
    indices, _ = dist._compute_bucket_assignment_by_size(grads, [int(config.bucket_cap_mb * 2**20)])
    return [[grads[i] for i in bucket] for bucket in indices]


def _bytes(bucket: list[torch.Tensor], hook: str, rank: int) -> tuple[int, ...]:
    """The bytes of each all-reduce the hook issues for ``bucket`` (float32 gradients): the bucket itself without a
    hook, one of half precision for fp16 / bf16; PowerSGD's three, by its own rule."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    if hook == "none":
        return (4 * sum(g.numel() for g in bucket),)
    if hook != "powersgd":
        return (2 * sum(g.numel() for g in bucket),)
    whole = ps = qs = 0
    for g in bucket:
        n = g.shape[0] if g.dim() else 1
        m = g.numel() // n
        r = min(n, m, rank)
        if _should_compress(n, m, r, _MIN_COMPRESSION_RATE)[0]:
            ps, qs = ps + n * r, qs + m * r
        else:
            whole += g.numel()
    return whole * 4, ps * 4, qs * 4


class _Bucket:
    """What torch's hook reads of DDP's ``GradBucket``: its flat buffer, its index, whether it is the step's last,
    and its gradients as views of the buffer; and the parameters' own gradients DDP copies in and out
    (:meth:`fill`, :meth:`empty`)."""

    def __init__(self, index: int, count: int, shapes: list[torch.Size], as_view: bool):
        self._index, self._count, self._shapes = index, count, shapes
        self._buffer = torch.randn(sum(s.numel() for s in shapes))
        self._grads = [] if as_view else [torch.randn(shape) for shape in shapes]

    def fill(self) -> None:
        """DDP's copy of each gradient into the bucket, as backward makes it (none where gradients are views)."""
        for view, grad in zip(self.gradients(), self._grads):
            view.copy_(grad)

    def empty(self) -> None:
        """DDP's copy of the reduced bucket back into the gradients (none where gradients are views)."""
        for view, grad in zip(self.gradients(), self._grads):
            grad.copy_(view)

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._index == self._count - 1

    def gradients(self) -> list[torch.Tensor]:
        views, offset = [], 0
        for shape in self._shapes:
            views.append(self._buffer[offset : offset + shape.numel()].view(shape))
            offset += shape.numel()
        return views


class _Alone(dist.ProcessGroup):
    """A process group of this one process: an all-reduce over one rank is its input, complete when issued. The
    hook's completion callbacks then run at once on this thread, where a gloo group of one would run them on its
    worker thread beside the next bucket's work (and, holding the last reference to the group, abort the process
    when they destroy it there: seen here). Nothing is sent, so nothing binds or listens."""

    def __init__(self) -> None:
        super().__init__(0, 1)

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        from torch._C._distributed_c10d import _create_work_from_future

        done: torch.futures.Future[list[torch.Tensor]] = torch.futures.Future()
        done.set_result(tensors)
        return _create_work_from_future(done)

    def size(self) -> int:
        return 1

    def getBackendName(self) -> str:
        return "alone"


def _measure(config: TrainConfig, threads: int) -> list[BucketCost]:
    """:func:`hook_cost` measured in this process, which it leaves unable to fork after PowerSGD: only ever called
    in a process of its own. Raises ValueError for another hook or for gradients above :data:`MAX_GRADIENT_BYTES`;
    :class:`~ignite_ddl.predict.memory.NotTraceable` for a workload of the user's."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if config.comm_hook not in ("none", "powersgd", "fp16", "bf16"):
        raise ValueError(f"no measurement for the communication hook {config.comm_hook!r}")
    layout = ddp_buckets(config)
    total = sum(g.numel() * g.element_size() for bucket in layout for g in bucket)
    if total > MAX_GRADIENT_BYTES:
        raise ValueError(
            f"the hook's work is measured on real gradients, {total / 2**30:.1f} GiB here: above the "
            f"{MAX_GRADIENT_BYTES / 2**30:.0f} GiB measured"
        )
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    group = _Alone()
    times: list[list[float]] = [[] for _ in layout]
    try:
        if config.comm_hook == "powersgd":
            start = 2  # the fewest plain iterations PowerSGD allows with error feedback
            state = powerSGD_hook.PowerSGDState(
                process_group=group, matrix_approximation_rank=config.powersgd_rank, start_powerSGD_iter=start
            )
            hook: Any = lambda bucket: powerSGD_hook.powerSGD_hook(state, bucket)  # noqa: E731
        else:
            start = 0
            plain = {
                "none": default_hooks.allreduce_hook,  # what DDP runs without a hook: divide, then all-reduce
                "fp16": default_hooks.fp16_compress_hook,
                "bf16": default_hooks.bf16_compress_hook,
            }[config.comm_hook]
            hook = lambda bucket: plain(group, bucket)  # noqa: E731
        as_view = config.gradient_as_bucket_view
        buckets = [_Bucket(i, len(layout), [g.shape for g in b], as_view) for i, b in enumerate(layout)]
        for step in range(start + 1 + MEASURED_STEPS):
            for bucket, seen in zip(buckets, times, strict=True):
                began = time.perf_counter()
                bucket.fill()
                hook(bucket).wait()
                bucket.empty()
                if step > start:  # PowerSGD's plain iterations and every hook's first step (PowerSGD draws Q) out
                    seen.append(time.perf_counter() - began)
    finally:
        torch.set_num_threads(before)
    return [
        BucketCost(statistics.median(seen), _bytes(b, config.comm_hook, config.powersgd_rank))
        for b, seen in zip(layout, times, strict=True)
    ]


def hook_cost(
    config: TrainConfig, threads: int, timeout_s: float = 300.0, start_method: str = "spawn"
) -> list[BucketCost]:
    """Each of ``config``'s DDP buckets under its communication hook (``comm_hook``: none, powersgd at its
    ``powersgd_rank``, fp16 or bf16): DDP's and the hook's own work a step, measured with ``threads`` intra-op
    threads in a fresh process of its own (``start_method`` spawn, or forkserver from a server that imported torch
    and ran nothing: a sweep's, 0.6 s instead of 5 s of imports here), and the bytes of its all-reduces.

    Apart, for two reasons measured here. The work depends on what the C allocator already holds: PowerSGD's 32 MiB
    copies on wide_mlp are fresh mappings or reused heap by the measuring process's history, and the same
    measurement gave 40 to 66 ms a step in different planning processes (2-core EPYC VM); a fresh process starts
    the same every time. And PowerSGD leaves the process it ran in unable to fork: a child forked after it aborted
    in its first backward. Raises RuntimeError with the child's error ("ValueError: ..." for another hook or for
    gradients above :data:`MAX_GRADIENT_BYTES`, "NotTraceable: ..." for a workload of the user's), or where it does
    not answer within ``timeout_s``."""
    try:
        costs: list[BucketCost] = call_apart(_measure, config, threads, start_method=start_method, timeout_s=timeout_s)
    except ChildFailed as e:
        raise RuntimeError(str(e)) from None
    return costs
