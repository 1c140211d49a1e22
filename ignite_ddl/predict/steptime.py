"""Step time predicted from a sweep's first round: a cost model fitted to its one-process runs and to this machine's
all-reduce, predicting every configuration of several processes before its figures are read, with an interval.

**The model.** A configuration's *one-process twin* is the configuration with the same options but one process
(the layout options, :data:`~ignite_ddl.core.config.LAYOUT_OPTIONS`, aside: one process ignores DDP's hook and graph
options, so a hooked configuration's twin is the plain one). Its measured step, with the interval of its
throughput and its phases, gives the compute. A configuration of N processes then takes

- compute: forward and backward as the twin's where the N ranks share the cores one process used (CPU: each rank
  gets cores / N threads), 1/N of it where each rank has its own device; the optimizer step is each rank's whole
  under DDP (every rank updates every parameter: on shared cores, N times the twin's optimizer time), a shard under
  FSDP;
- DDP on CPU ranks: every bucket's own work, measured on this machine with a rank's threads in a fresh process
  (:func:`~ignite_ddl.predict.hook_cost.hook_cost`): the gradients copied into the bucket and back, and the hook's
  work on it (without one, DDP's division by the world size; fp16 / bf16 casts; PowerSGD in its steady phase, the
  one a run measures); never hidden, plus its all-reduces (the bucket; the half-precision bucket; PowerSGD's three
  small ones), the buckets one after another. Nothing hides behind backward: gloo's copies and sums need the cores
  backward holds, and measured here the overlapped part of wide_mlp's all-reduce came back as slower backward
  (2 processes: backward +17 ms over the twin's, 47 ms exposed, against 38 ms for the whole all-reduce at the
  fitted link). On wide_mlp's 59 MB of gradients DDP's copies and division alone cost 12 ms a step. Where that
  work could not be measured: the all-reduces alone, and PowerSGD not predicted;
- DDP on a GPU rank (nothing measured there): the gradients' all-reduce, once per optimizer step whatever the
  accumulation, half the bytes with an fp16 / bf16 hook, its buckets overlapping backward (backward as the twin
  measured its share of the step; :func:`~ignite_ddl.predict.projection.model.bucketed_exposed_s`); PowerSGD not
  predicted;
- FSDP: every micro-batch gathers each unit's parameters in forward and again in backward, and each unit's
  gradients are reduce-scattered once; on gloo none of it overlaps compute, each collective
  ``(N-1) alpha + (N-1)/N M / beta`` (CPU ranks sharing the cores: as measured, below);

with the link (alpha, beta) fitted to all-reduces measured on this machine
(:func:`~ignite_ddl.predict.projection.inputs.measure_allreduce`, kept in ``<output_dir>/plan/link.json`` like the
runtime's memory). On CPU ranks sharing the cores, a collective in a training step costs more than alone: gloo's
threads compete with backward's, and DDP copies into its buckets and back. The *busy factor*
(:func:`~ignite_ddl.predict.projection.inputs.measure_busy_factor`: an MLP's DDP step less its step without DDP, over
the all-reduce at the link; about 2 here for 4 to 64 MiB of gradients) scales every collective of such a
configuration, and stands for DDP's own copies (the hook's measured work is then counted only for a hook of one's
own: PowerSGD, fp16, bf16). FSDP's gathers and reduce-scatters are priced unit by unit, each unit's bytes
(:func:`fsdp_busy_s`), from three models trained plain and under FSDP2
(:func:`~ignite_ddl.predict.projection.inputs.measure_fsdp_factor`): every collective pays a cost of its own
whatever its bytes (FSDP2's hooks around every unit and its copies into and out of its flat buffers, about 1.7 ms
here, so 32 small units cost more than 4 large ones), and its bytes a factor of their time at the link, about twice
as much for a unit above glibc's largest mmap threshold (32 MiB: its buffers mapped and faulted in afresh at every
collective; ResNet-18's last stage is such a unit).

How a rank's compute on its share of the cores differs from the twin's is not a rule: measured on MLPs
(benchmarks/ddp_cpu_parts.py) it was 0.64 to 1.8 times the twin's step, by the layer widths and the batch. Where a
sweep measured it, the *layout probe* (``layout_s``: a short run of the configuration's own model at its layout under
DDP with ``gradient_sync`` off, :mod:`ignite_ddl.sweep.layout_probe`) replaces that rule: its step over the twin's
step in the same probe, run right after it (``layout_twin_s``), times the twin's measured step is the compute (the
ratio holds where the machine's speed drifts between the probe and the runs), a sharded optimizer's step a 1/N
share of its optimizer step. What it cannot see: the work PowerSGD adds inside
backward, and the noise of the runs it reads (a small CNN's 2-thread step measured 59 ms in one sweep, 48 in the
next: its predictions move as much). The interval is the twin's throughput interval carried through
the compute term (the link's own fit error is left out: it is small beside run-to-run noise here).

Example:
    >>> from ignite_ddl.predict.projection.model import Link
    >>> one = Observed(0, {"nproc_per_node": 1, "batch_size": 64}, 1, "cpu", 0.64, 0.60, 0.70, 0.5)
    >>> two = Observed(1, {"nproc_per_node": 2, "batch_size": 64, "strategy": "ddp"}, 2, "cpu", None, None, None, None)
    >>> link = Link("made up", alpha_s=1e-4, beta_Bps=1e9, source="example")
    >>> p = predict_steps([one, two], link, {1: 4_000_000})[1]
    >>> round(p.compute_s, 3), round(p.comm_s * 1e3, 3)  # DDP's work unmeasured: the all-reduce, not hidden
    (0.64, 4.2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ignite_ddl.core.config import LAYOUT_OPTIONS
from ignite_ddl.core.strategies import StrategyInfo, resolve_strategy
from ignite_ddl.core.sweep_records import PredictedStep, StepLink, StepModel
from ignite_ddl.predict.projection.inputs import MMAP_THRESHOLD_MAX, fsdp_collectives
from ignite_ddl.predict.projection.model import Link, bucketed_exposed_s, ring_allreduce_s

if TYPE_CHECKING:
    from ignite_ddl.predict.hook_cost import BucketCost

__all__ = [
    "Busy",
    "Observed",
    "StepPrediction",
    "bucket_work_in_factor",
    "fsdp_busy_s",
    "hook_s",
    "predict_steps",
    "step_model",
    "twins",
]

MIB = 2**20
_DEFAULT_BUCKET_MB = 25.0


@dataclass(frozen=True)
class Observed:
    """What a configuration's first round measured (``step_s`` None: not measured yet, or not used)."""

    index: int
    config: dict[str, Any]
    world_size: int
    device_type: str | None
    step_s: float | None  # seconds per optimizer step, from its throughput and global batch
    low_s: float | None  # its interval's ends (faster, slower)
    high_s: float | None
    backward_share: float | None  # backward / step, as its runs timed it
    optimizer_share: float | None = None  # optimizer step / step, as its runs timed it
    # Several CPU processes: a step of this layout without communication, measured (the layout probe, DDP with
    # gradient_sync off), and its optimizer step (seconds, the slowest rank's); None: not probed
    layout_s: float | None = None
    layout_optimizer_s: float | None = None
    # the one-process twin's step in the same probe, run right after it (None: not probed beside it)
    layout_twin_s: float | None = None


@dataclass(frozen=True)
class StepPrediction:
    index: int
    step_s: float | None
    low_s: float | None
    high_s: float | None
    compute_s: float | None
    comm_s: float | None
    basis: str  # "one-process twin cfgNNN" or why there is no prediction

    @classmethod
    def unpredicted(cls, index: int, why: str, compute_s: float | None = None) -> StepPrediction:
        """No prediction for configuration ``index``, and why (its compute, where that much was predicted)."""
        return cls(index, None, None, None, compute_s, None, why)

    def record(self) -> PredictedStep:
        """As ``sweep.json`` keeps it (:class:`~ignite_ddl.core.sweep_records.PredictedStep`), under its index."""
        return PredictedStep(
            step_s=self.step_s,
            low_s=self.low_s,
            high_s=self.high_s,
            compute_s=self.compute_s,
            comm_s=self.comm_s,
            basis=self.basis,
        )


@dataclass(frozen=True)
class Busy:
    """How many times their time at the link collectives cost a step of CPU ranks sharing the cores, as measured
    (:func:`~ignite_ddl.predict.projection.inputs.measure_busy_factor`, ``measure_fsdp_factor``): DDP's all-reduce
    (its copies in it) and the other strategies' collectives (``ddp``), FSDP's gathers and reduce-scatters with its
    own work around them (``fsdp``); None: not measured, the collective at the link alone."""

    ddp: float | None = None
    # FSDP's: its bytes' time at the link's bandwidth (without its latency) times ``fsdp``, a unit's above glibc's
    # largest mmap threshold times ``fsdp_large``, and every collective ``fsdp_collective_s`` whatever its bytes
    # (:func:`~ignite_ddl.predict.projection.inputs.measure_fsdp_factor`); without ``fsdp_collective_s``, the
    # link's latency times ``fsdp``
    fsdp: float | None = None
    fsdp_large: float | None = None
    fsdp_collective_s: float | None = None
    # seconds FSDP's optimizer step takes per parameter tensor beyond its 1/N share of the plain one (Adam on
    # sharded parameters); None: not measured
    fsdp_optimizer_per_tensor_s: float | None = None


def bucket_work_in_factor(comm_hook: str, busy: Busy | None) -> bool:
    """Whether DDP's own work on its buckets (its copies and division) is priced inside ``busy``'s DDP factor for CPU
    ranks sharing the cores, so that it is neither measured apart nor counted twice: without a communication hook,
    where the factor was measured. A hook's own work is always its own."""
    return busy is not None and busy.ddp is not None and comm_hook == "none"


def step_model(predictions: dict[int, StepPrediction], link: Link | None, busy: Busy | None = None) -> StepModel:
    """The model as ``sweep.json`` keeps it (``step_model``): the link it used (with the factors its collectives
    took beside CPU ranks' compute, where measured) and every prediction, by index."""
    kept: StepLink | None = None
    if link is not None:
        kept = {"alpha_s": link.alpha_s, "beta_Bps": link.beta_Bps}
        if busy is not None and busy.ddp is not None:
            kept["busy_factor"] = busy.ddp
        if busy is not None and busy.fsdp is not None:
            kept["fsdp_busy_factor"] = busy.fsdp
        if busy is not None and busy.fsdp_large is not None:
            kept["fsdp_large_busy_factor"] = busy.fsdp_large
        if busy is not None and busy.fsdp_collective_s is not None:
            kept["fsdp_collective_s"] = busy.fsdp_collective_s
        if busy is not None and busy.fsdp_optimizer_per_tensor_s is not None:
            kept["fsdp_optimizer_per_tensor_s"] = busy.fsdp_optimizer_per_tensor_s
    return StepModel(link=kept, configurations={str(i): p.record() for i, p in sorted(predictions.items())})


def _twin_key(config: dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in config.items() if k not in LAYOUT_OPTIONS and k != "output_dir"))


def twins(observed: Sequence[Observed]) -> dict[int, Observed]:
    """Each configuration of several processes in ``observed`` with its one-process twin measured: the twin, by the
    configuration's index."""
    measured = {_twin_key(o.config): o for o in observed if o.world_size == 1 and o.step_s}
    found = {o.index: measured.get(_twin_key(o.config)) for o in observed if o.world_size > 1}
    return {index: twin for index, twin in found.items() if twin is not None}


def predict_steps(
    observed: list[Observed],
    link: Link | None,
    grad_bytes: dict[int, int],
    hook_costs: dict[int, Sequence[BucketCost] | str] | None = None,
    busy: Busy | None = None,
    tensors: dict[int, int] | None = None,
    units: dict[int, Sequence[int]] | None = None,
) -> dict[int, StepPrediction]:
    """Each configuration of several processes predicted from its one-process twin's measured step and ``link``;
    ``grad_bytes``: each configuration's gradient bytes (float32); ``hook_costs``: the hook's measured cost per
    bucket for each configuration that uses a hook, or why it was not measured; ``busy``: how many times its time
    at ``link`` a collective costs a step of CPU ranks sharing the cores (:class:`Busy`), where measured;
    ``tensors``: each configuration's count of trainable parameter tensors (FSDP's optimizer step on CPU ranks
    pays :attr:`Busy.fsdp_optimizer_per_tensor_s` for each); ``units``: the bytes each of its FSDP units gathers
    (:class:`~ignite_ddl.predict.memory.GradientLayout`; unknown: the whole model one unit)."""
    measured = twins(observed)
    found = {}
    for o in observed:
        if o.world_size == 1:
            continue
        twin = measured.get(o.index)
        if twin is None or twin.step_s is None:
            found[o.index] = StepPrediction.unpredicted(o.index, "no one-process twin measured")
            continue
        # CPU ranks split one machine's cores; a GPU rank has its own device.
        shared = (o.device_type or twin.device_type) in (None, "cpu")
        backward = twin.step_s * (1.0 if shared else 1 / o.world_size) * (twin.backward_share or 2 / 3)
        hook = (hook_costs or {}).get(o.index)
        exposed_after = 0.0 if shared else backward  # on shared cores nothing hides behind backward
        layout = (units or {}).get(o.index)
        comm, why = _comm_s(o, link, grad_bytes.get(o.index), exposed_after, hook, busy if shared else None, layout)
        # FSDP's optimizer step on CPU ranks: a dispatch per sharded tensor beyond its share of the bytes' work
        per_tensor = busy.fsdp_optimizer_per_tensor_s if busy is not None and shared else None
        sharded_step = 0.0
        if per_tensor is not None and _strategy(o).shards_parameters:
            sharded_step = per_tensor * (tensors or {}).get(o.index, 0)
        compute = _compute_s(twin, twin.step_s, o, shared) + sharded_step
        if comm is None:
            found[o.index] = StepPrediction.unpredicted(o.index, why, compute)
            continue
        low = _compute_s(twin, twin.low_s or twin.step_s, o, shared) + sharded_step + comm
        high = _compute_s(twin, twin.high_s or twin.step_s, o, shared) + sharded_step + comm
        basis = f"one-process twin cfg{twin.index:03d}"
        if shared and o.layout_s:
            basis += ", compute probed at the layout"
        found[o.index] = StepPrediction(o.index, compute + comm, low, high, compute, comm, basis)
    return found


def _compute_s(twin: Observed, step_s: float, o: Observed, shared: bool) -> float:
    """``o``'s compute from its twin's step ``step_s`` (its measured median, or an end of its interval): on shared
    cores, the layout probe's step where one was measured, as a ratio to the twin's probe beside it times
    ``step_s`` (without that probe, scaled as ``step_s`` is to the twin's median: the interval carried over), the
    optimizer step a shard where the strategy shards it; else forward and backward
    split over the ranks (on shared cores the N ranks take as long together as the twin did); the optimizer step is
    every rank's whole under DDP (each updates all the parameters: N times the twin's work on the same cores), a
    shard under FSDP."""
    n = o.world_size
    optimizer = step_s * (twin.optimizer_share or 0.0)
    sharded = "optimizer" in _strategy(o).shards  # each rank updates its shard of the parameters
    if shared and o.layout_s and twin.step_s:
        probed = o.layout_s - (n - 1) / n * (o.layout_optimizer_s or 0.0) if sharded else o.layout_s
        return probed * step_s / (o.layout_twin_s or twin.step_s)
    if shared:
        return step_s if sharded else step_s + (n - 1) * optimizer
    return (step_s - optimizer) / n + (optimizer / n if sharded else optimizer)


def _comm_s(
    o: Observed,
    link: Link | None,
    grad_bytes: int | None,
    backward_s: float,
    hook: Sequence[BucketCost] | str | None,
    busy: Busy | None = None,
    units: Sequence[int] | None = None,
) -> tuple[float | None, str]:
    info = _strategy(o)
    n = o.world_size
    if link is None or grad_bytes is None:
        return None, "no all-reduce measured on this machine" if link is None else "gradient bytes unknown"
    accumulate = int(o.config.get("accumulate") or 1)
    if info.shards_parameters and busy is not None and busy.fsdp is not None:  # CPU ranks sharing the cores
        reshard = bool(o.config.get("reshard_after_forward", True))
        # units unknown: the whole model one unit below an empty root (two gathers and a reduce-scatter)
        return fsdp_busy_s(units or (grad_bytes, 0), n, link, busy, reshard, accumulate), ""
    factor = None if busy is None else busy.fsdp if info.shards_parameters else busy.ddp
    if factor is not None:  # CPU ranks on shared cores: every collective at its measured cost beside compute
        link = dataclasses.replace(link, beta_Bps=link.beta_Bps / factor, alpha_s=link.alpha_s * factor)
        if info.gradient_buckets and bucket_work_in_factor(str(o.config.get("comm_hook", "none")), busy):
            hook = None  # DDP's copies and division are in the measured factor: not counted twice
    # Every collective the strategy makes but DDP's bucketed all-reduce of the gradients (costed below, with its
    # hook): FSDP's gathers of the parameters in each micro-batch's forward and backward and its reduce-scatter of
    # the gradients; ZeRO-1's broadcasts of the parameters each rank updated. Each moves the part's full bytes (the
    # gradients' float32 size), and none of them overlaps compute on gloo.
    per_micro_batch = info.micro_batch_collectives(bool(o.config.get("reshard_after_forward", True)))
    others = [c for c in info.collectives if not (info.gradient_buckets and c == ("allreduce", "grads"))]
    rest = sum(_collective_s(kind, grad_bytes, n, link) for kind, _ in others) + accumulate * sum(
        _collective_s(kind, grad_bytes, n, link) for kind, _ in per_micro_batch
    )
    if not info.gradient_buckets:
        return rest, ""
    name = o.config.get("comm_hook", "none")
    if hook is not None and not isinstance(hook, str):  # DDP's and the hook's own work measured, with its bytes
        return hook_s(hook, backward_s, n, link) + rest, ""
    if name == "powersgd":
        return None, "PowerSGD's work not measured" + (f": {hook}" if isinstance(hook, str) else "")
    nbytes = grad_bytes / 2 if name in ("fp16", "bf16") else grad_bytes  # their cast unmeasured: not costed
    bucket = float(o.config.get("bucket_cap_mb") or _DEFAULT_BUCKET_MB) * MIB
    return bucketed_exposed_s(backward_s, nbytes, bucket, n, link) + rest, ""


def _strategy(o: Observed) -> StrategyInfo:
    return resolve_strategy(str(o.config.get("strategy", "auto")), o.world_size)


def _collective_s(kind: str, nbytes: float, n: int, link: Link) -> float:
    """Seconds of one collective over ``n`` ranks moving a part of ``nbytes`` in all: an all-reduce is a ring's two
    passes; an all-gather, a reduce-scatter or every rank broadcasting its 1/n share is one pass,
    ``(n-1) alpha + (n-1)/n nbytes / beta``."""
    if kind == "allreduce":
        return ring_allreduce_s(nbytes, n, link)
    return (n - 1) * link.alpha_s + (n - 1) / n * nbytes / link.beta_Bps


def fsdp_busy_s(
    units: Sequence[int], n: int, link: Link, busy: Busy, reshard_after_forward: bool = True, accumulate: int = 1
) -> float:
    """Seconds FSDP2's collectives add to an optimizer step of ``n`` CPU ranks sharing the cores, units of ``units``
    bytes (the root last): every gather and reduce-scatter
    (:func:`~ignite_ddl.predict.projection.inputs.fsdp_collectives`) at :attr:`Busy.fsdp_collective_s` plus its
    bytes' time at ``link``'s bandwidth times the busy factor, :attr:`Busy.fsdp_large` for a unit above glibc's
    largest mmap threshold (its buffers faulted in afresh at every collective: measured here about twice a smaller
    unit's cost per byte)."""
    if busy.fsdp is None:
        raise ValueError("FSDP's busy factor was not measured")
    total = 0.0
    for nbytes in fsdp_collectives(units, reshard_after_forward, accumulate):
        factor = busy.fsdp_large if nbytes > MMAP_THRESHOLD_MAX and busy.fsdp_large is not None else busy.fsdp
        fixed = busy.fsdp_collective_s if busy.fsdp_collective_s is not None else (n - 1) * link.alpha_s * factor
        total += fixed + factor * (n - 1) / n * nbytes / link.beta_Bps
    return total


def hook_s(buckets: Sequence[BucketCost], backward_s: float, n: int, link: Link) -> float:
    """Seconds a communication hook adds to a step after backward (``backward_s`` 0 on CPU ranks: nothing hidden):
    every bucket's own work (never hidden: it blocks backward's thread or shares its cores) and what its all-reduces
    leave exposed, bucket i ready at ``backward (i+1)/k`` and its all-reduces starting once it is ready and the
    previous bucket's are done (PowerSGD on gloo waits for them: strategies.comm_hook)."""
    done = 0.0
    for i, bucket in enumerate(buckets):
        ready = backward_s * (i + 1) / len(buckets)
        done = max(ready, done) + sum(ring_allreduce_s(b, n, link) for b in bucket.allreduce_bytes if b)
    return sum(b.compute_s for b in buckets) + max(0.0, done - backward_s)
