"""The scaling projection's model: how a data-parallel step would scale to N workers, from one worker's compute and
a link's latency and bandwidth (the alpha-beta model), for a ring all-reduce with DDP's bucketed overlap and for a
parameter server. Pure arithmetic and cited figures: no torch, so the command line reads :data:`LINKS` at start-up
(its inputs from measured runs are in :mod:`~ignite_ddl.predict.projection.inputs`, its table, files and plot in
:mod:`~ignite_ddl.predict.projection.present`).

The model (weak scaling: every worker keeps its batch ``b``; times in seconds, sizes in bytes):

- **a link** is a latency alpha (seconds per message) and a bandwidth beta (bytes per second, *per direction*):
  :class:`Link`, with presets in :data:`LINKS` whose sources are cited.
- **a ring all-reduce** of m bytes on N workers takes ``2(N-1) alpha + 2(N-1)/N m / beta`` (0 for N = 1): 2(N-1)
  steps (reduce-scatter, then all-gather), in each of which every worker sends m/N bytes to its neighbour
  (:func:`ring_allreduce_s`; 2(N-1)/N is :func:`~ignite_ddl.core.collectives.allreduce_bus_factor`).
- **DDP's overlap**: the gradients (M bytes) go in ``ceil(M / bucket)`` buckets (25 MiB by default, as DDP); bucket
  i is ready at ``backward (i+1)/k`` (the last one at the end of backward) and the buckets are all-reduced one after
  another on the link, so ``start_i = max(ready_i, done_{i-1})``. What is left after backward,
  ``done_last - backward``, is the *exposed* communication (:func:`bucketed_exposed_s`); a step is
  ``other + forward + backward + exposed + optimizer``, ``other`` being the data wait and handler time per step.
- **a parameter server** (one server, N workers) carries N x M each way per step on its own link, serialised and
  overlapping nothing: pull ``N (alpha + M / beta)``, the workers compute, push ``N (alpha + M / beta)``
  (:func:`ps_comm_s`). As N grows its throughput tends to ``b / (2 (alpha + M / beta))``, i.e. ``b beta / (2M)``
  when alpha is small: it *saturates* there, whatever more workers are added.
- **several nodes** (``gpus_per_node`` G and an ``inter_link``): for N > G a flat ring is paced by its slowest edge
  (each node's NIC carries one edge of the ring), so every ring step takes the larger alpha and the smaller beta of
  the two links; the parameter server's link is the inter-node one once N > G.

Speed-up is against one worker with no communication at all (plain single-process training), efficiency is
speed-up / N, and each scheme's *saturation* is the first N whose efficiency drops below 0.5
(:class:`Projection`). The ring's throughput also has a ceiling in this model, ``b / (2 k alpha)`` for k buckets:
its latency term grows with N (NCCL switches to trees at scale for that reason; this model does not).

What the model leaves out: compute and communication competing for the same device (NCCL kernels use SMs, gloo
uses CPU cores), stragglers and jitter (every step waits for the slowest worker), the input pipeline, gradient
buckets that are not ready at evenly spaced instants, DDP's smaller first bucket, hierarchical or tree algorithms,
and network contention beyond one link. ``benchmarks/projection_validation.py`` (2 measured processes on this machine)
and :func:`~ignite_ddl.predict.projection.inputs.validate_nvidia_resnet50` (NVIDIA's published ResNet-50 scaling, with
:data:`NVIDIA_RESNET50`) measure how far off it is.

Example:
    >>> link = Link("example", alpha_s=10e-6, beta_Bps=10e9, source="made up")
    >>> round(ring_allreduce_s(100e6, 4, link) * 1e3, 3)  # 6 x 10 us + 1.5 x 100 MB / (10 GB/s)
    15.06
    >>> compute = Compute(forward_s=0.01, backward_s=0.02, optimizer_s=0.0, batch_size=32, grad_bytes=4 * 2**20)
    >>> p = project(compute, LINKS["10gbe"], max_workers=8)
    >>> [row["n"] for row in p.rows], p.rows[0]["ring_efficiency"]
    ([1, 2, 4, 8], 1.0)
    >>> round(p.ps_ceiling_samples_per_s)  # b / (2 (alpha + M / beta)): 32 / (2 (20 us + 4 MiB / 1.25 GB/s))
    4740
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ignite_ddl.core.collectives import allreduce_bus_factor
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import Options, Role, option

__all__ = [
    "DDP_BUCKET_BYTES",
    "LINKS",
    "MAX_BUCKETS",
    "MAX_WORKERS",
    "MIB",
    "NVIDIA_RESNET50",
    "SATURATION_EFFICIENCY",
    "Compute",
    "Link",
    "ProjectOptions",
    "Projection",
    "bucket_sizes",
    "bucketed_exposed_s",
    "project",
    "ps_comm_s",
    "ring_allreduce_s",
    "worker_counts",
]

MIB = 1 << 20
DDP_BUCKET_BYTES = 25 * MIB  # DistributedDataParallel's default bucket_cap_mb (25, in MiB)
SATURATION_EFFICIENCY = 0.5  # a scheme "saturates" where its efficiency first drops below this


@dataclass(frozen=True)
class Link:
    """A link in the alpha-beta model: ``alpha_s`` seconds per message (latency), ``beta_Bps`` bytes per second in
    each direction (bandwidth), and where the figures come from. ``residual`` is set on a fitted link only: the
    RMS of the fit's relative residuals (see :func:`fit_alpha_beta`)."""

    name: str
    alpha_s: float
    beta_Bps: float
    source: str
    residual: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.alpha_s) and self.alpha_s >= 0):
            raise ConfigError(f"link {self.name}: alpha must be a finite number of seconds >= 0, got {self.alpha_s}")
        if not (math.isfinite(self.beta_Bps) and self.beta_Bps > 0):
            raise ConfigError(f"link {self.name}: beta must be a finite number of bytes/s > 0, got {self.beta_Bps}")


_NCCL_TUNING = (
    "alpha: NCCL's own cost model, src/graph/tuning.cc (hwLat, Ring/Simple, the protocol of large messages: "
    "NVLink 3.4 us, PCI 5.7 us, network 9.6 us per ring step); an order-of-magnitude figure, not a datasheet's"
)
_A100 = (
    "beta: NVIDIA A100 datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf), NVLink 600 GB/s per GPU, both directions together: "
    "300 GB/s per direction"
)
_H100 = (
    "beta: NVIDIA H100 datasheet (https://www.nvidia.com/en-us/data-center/h100/), H100 SXM NVLink 900 GB/s per "
    "GPU, both directions together: 450 GB/s per direction"
)
_ETHERNET_ALPHA = (
    "alpha: TCP/IP through the kernel, tens of microseconds per message; an order-of-magnitude figure, not a "
    "datasheet's (NCCL's model uses 9.6 us per ring step for any network, RDMA included: optimistic for TCP)"
)
_PCIE = "beta: PCI-SIG, PCI Express Base Specification {rev}: {gts} GT/s per lane, 128b/130b encoding, x16: {gbs} GB/s "

# Bandwidths per direction in bytes per second: network and PCIe rates are per direction (full duplex) as quoted;
# NVLink's "600 GB/s" and "900 GB/s" add both directions, so they are halved here.
LINKS: dict[str, Link] = {
    "nvlink3": Link("NVLink 3 (A100)", 3.4e-6, 300e9, f"{_A100}; {_NCCL_TUNING}"),
    "nvlink4": Link("NVLink 4 (H100)", 3.4e-6, 450e9, f"{_H100}; {_NCCL_TUNING}"),
    "ib-hdr": Link(
        "InfiniBand HDR 200 Gb/s",
        9.6e-6,
        200e9 / 8,
        "beta: InfiniBand Trade Association, HDR 4x link 200 Gb/s per direction (NVIDIA ConnectX-6 "
        f"datasheet: 200Gb/s HDR InfiniBand): 25 GB/s; {_NCCL_TUNING}",
    ),
    "ib-ndr": Link(
        "InfiniBand NDR 400 Gb/s",
        9.6e-6,
        400e9 / 8,
        "beta: InfiniBand Trade Association, NDR 4x link 400 Gb/s per direction (NVIDIA ConnectX-7 "
        f"datasheet: 400Gb/s NDR InfiniBand): 50 GB/s; {_NCCL_TUNING}",
    ),
    "10gbe": Link(
        "10 GbE",
        20e-6,
        10e9 / 8,
        f"beta: IEEE 802.3ae, 10 Gb/s per direction (full duplex): 1.25 GB/s; {_ETHERNET_ALPHA}",
    ),
    "25gbe": Link(
        "25 GbE",
        20e-6,
        25e9 / 8,
        f"beta: IEEE 802.3by, 25 Gb/s per direction (full duplex): 3.125 GB/s; {_ETHERNET_ALPHA}",
    ),
    "100gbe": Link(
        "100 GbE",
        20e-6,
        100e9 / 8,
        f"beta: IEEE 802.3ba / 802.3bj, 100 Gb/s per direction (full duplex): 12.5 GB/s; {_ETHERNET_ALPHA}",
    ),
    "pcie4": Link(
        "PCIe 4.0 x16",
        5.7e-6,
        16e9 * 16 * 128 / 130 / 8,
        _PCIE.format(rev="4.0", gts=16, gbs=31.5) + f"per direction; {_NCCL_TUNING}",
    ),
    "pcie5": Link(
        "PCIe 5.0 x16",
        5.7e-6,
        32e9 * 16 * 128 / 130 / 8,
        _PCIE.format(rev="5.0", gts=32, gbs=63.0) + f"per direction; {_NCCL_TUNING}",
    ),
}


@dataclass(frozen=True)
class Compute:
    """One worker's step, measured on one worker (seconds): forward, backward and optimizer, plus ``other_s`` (data
    wait and handlers per step); the per-worker batch and the gradient bytes all-reduced per step."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    batch_size: int
    grad_bytes: float
    other_s: float = 0.0
    source: str = "given"

    def __post_init__(self) -> None:
        for name in ("forward_s", "backward_s", "optimizer_s", "other_s", "grad_bytes"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} must be a finite number >= 0, got {value}")
        if self.step_s <= 0:
            raise ConfigError("the compute per step must be > 0 seconds")
        if self.batch_size < 1 or not float(self.batch_size).is_integer():
            raise ConfigError(f"batch_size must be an integer >= 1, got {self.batch_size}")

    @classmethod
    def from_total(cls, compute_s: float, grad_bytes: float, batch_size: int, source: str = "given") -> Compute:
        """A step of ``compute_s`` seconds split as the FLOPs split it: forward 1/3, backward 2/3 (a layer's backward
        multiplies twice as much as its forward, see :mod:`ignite_ddl.measure.flops`); no optimizer or data time."""
        if not (math.isfinite(compute_s) and compute_s > 0):
            raise ConfigError(f"the compute per step must be a positive number of seconds, got {compute_s}")
        return cls(compute_s / 3, 2 * compute_s / 3, 0.0, batch_size, grad_bytes, source=source)

    @property
    def step_s(self) -> float:
        """The step of one worker alone: data and handlers, forward, backward, optimizer."""
        return self.other_s + self.forward_s + self.backward_s + self.optimizer_s


# The largest worker count projected, and the most gradient buckets modelled: every projected row walks the
# buckets one by one, and a row is computed for each power of 2 up to the worker count and for each step of the
# bisection that finds saturation (a 1-byte bucket on 100 MB of gradients would take hours).
MAX_WORKERS = 1 << 20
MAX_BUCKETS = 10_000


@dataclass(frozen=True, kw_only=True)
class ProjectOptions(Options):
    """``ignite-ddl project``'s options, each declared once (:mod:`ignite_ddl.core.options`): its flags and their
    checks come from here. The bounds keep every input something a real step or link can be, and every projected
    figure one a table can show: a step of 1 us to about 3 hours, up to 10 TiB of gradients, a link of 1 kB/s to
    1 PB/s with at most 10 s of latency, buckets of 0.001 MiB (about 1 kB) or more, up to 2^20 workers."""

    run: str | None = option(
        None,
        "a measured 1-process run (ignite-ddl train's output folder)",
        role=Role.MEASUREMENT,
        path=True,
        metavar="DIR",
    )
    compute_ms: float | None = option(
        None,
        "or: one worker's compute per step, ms (split forward 1/3, backward 2/3)",
        role=Role.MEASUREMENT,
        low=1e-3,
        high=1e7,
        metavar="MS",
    )
    grad_mb: float | None = option(
        None, "with --compute-ms: gradient MiB per step", role=Role.MEASUREMENT, low=0, high=1e7, metavar="MIB"
    )
    batch_size: int | None = option(
        None, "with --compute-ms: the batch of one worker", role=Role.MEASUREMENT, low=1, high=1_000_000, metavar="B"
    )
    link: str | None = option(
        None, "the link between the workers: a preset", role=Role.MEASUREMENT, choices=tuple(LINKS)
    )
    alpha_us: float | None = option(
        None, "or: the link's latency, microseconds", role=Role.MEASUREMENT, low=0, high=1e7, metavar="US"
    )
    beta_gbps: float | None = option(
        None,
        "and its bandwidth per direction, GB/s (10^9 bytes/s: 100 GbE is 12.5)",
        role=Role.MEASUREMENT,
        low=1e-6,
        high=1e6,
        metavar="GB/S",
    )
    fit: bool = option(
        False, "or: fit alpha and beta to all-reduce times measured here on 2 gloo processes", role=Role.MEASUREMENT
    )
    gpus_per_node: int | None = option(
        None,
        "workers per node: beyond G workers the --inter-link joins the nodes",
        role=Role.MEASUREMENT,
        low=1,
        high=MAX_WORKERS,
        metavar="G",
    )
    inter_link: str | None = option(
        None, "with --gpus-per-node: the link between nodes", role=Role.MEASUREMENT, choices=tuple(LINKS)
    )
    max_workers: int = option(
        1024, "project 1, 2, 4, ... up to N workers", role=Role.MEASUREMENT, low=1, high=MAX_WORKERS, metavar="N"
    )
    bucket_mb: float = option(
        25.0,
        "DDP gradient bucket size in MiB (25: DDP's)",
        role=Role.MEASUREMENT,
        low=1e-3,
        high=1e7,
        metavar="MIB",
    )
    output_dir: str = option(
        "runs/project", "where projection.json, .csv and .png go", role=Role.OUTPUT, path=True, metavar="DIR"
    )


# -- the model


def ring_allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """Seconds of a ring all-reduce of ``nbytes`` on ``n`` workers: ``2(n-1) alpha + 2(n-1)/n nbytes / beta``."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * link.alpha_s + allreduce_bus_factor(n) * nbytes / link.beta_Bps


def bucket_sizes(grad_bytes: float, bucket_bytes: float) -> list[float]:
    """The gradient in ``ceil(grad_bytes / bucket_bytes)`` buckets: full ones, the remainder last."""
    if grad_bytes <= 0:
        return []
    k = math.ceil(grad_bytes / bucket_bytes)
    return [float(bucket_bytes)] * (k - 1) + [grad_bytes - (k - 1) * bucket_bytes]


def bucketed_exposed_s(backward_s: float, grad_bytes: float, bucket_bytes: float, n: int, link: Link) -> float:
    """The all-reduce time left after backward: bucket i is ready at ``backward (i+1)/k`` and starts when it is
    ready and the previous one is done; exposed = last done - end of backward (0 for one worker)."""
    sizes = bucket_sizes(grad_bytes, bucket_bytes)
    if n <= 1 or not sizes:
        return 0.0
    done = 0.0
    for i, size in enumerate(sizes):
        ready = backward_s * (i + 1) / len(sizes)
        done = max(ready, done) + ring_allreduce_s(size, n, link)
    return max(0.0, done - backward_s)


def ps_comm_s(grad_bytes: float, n: int, link: Link) -> tuple[float, float]:
    """(pull, push) seconds of a parameter server's step: each ``n (alpha + M / beta)``, the server's link carrying
    the model to every worker, then every worker's gradient, one after another."""
    one = link.alpha_s + grad_bytes / link.beta_Bps
    return n * one, n * one


def _ring_link(link: Link, n: int, gpus_per_node: int | None, inter_link: Link | None) -> Link:
    """The link a flat ring of ``n`` workers runs at: the slowest edge paces every step."""
    if gpus_per_node is None or inter_link is None or n <= gpus_per_node:
        return link
    return Link(
        f"{link.name} + {inter_link.name}",
        max(link.alpha_s, inter_link.alpha_s),
        min(link.beta_Bps, inter_link.beta_Bps),
        "slowest of the two",
    )


def _ps_link(link: Link, n: int, gpus_per_node: int | None, inter_link: Link | None) -> Link:
    """The server's link: the intra-node one while all workers share its node, the inter-node one beyond."""
    if gpus_per_node is None or inter_link is None or n <= gpus_per_node:
        return link
    return inter_link


def worker_counts(max_workers: int) -> list[int]:
    """1, 2, 4, ... up to ``max_workers`` (which ends the list even when it is not a power of 2)."""
    if max_workers < 1:
        raise ConfigError(f"max_workers must be >= 1, got {max_workers}")
    counts = [1]
    while counts[-1] * 2 <= max_workers:
        counts.append(counts[-1] * 2)
    return counts if counts[-1] == max_workers else [*counts, max_workers]


@dataclass(frozen=True)
class Projection:
    """The projected step of each scheme for each N, and where each saturates (see the module docstring)."""

    compute: Compute
    link: Link
    inter_link: Link | None
    gpus_per_node: int | None
    bucket_bytes: float
    max_workers: int
    rows: list[dict[str, float]]
    ring_half_efficiency_n: int | None  # the first N whose efficiency is below 0.5 (None: not up to max_workers)
    ps_half_efficiency_n: int | None
    ps_ceiling_samples_per_s: float  # the PS's throughput as N -> infinity: b / (2 (alpha + M / beta))
    ring_ceiling_samples_per_s: float  # the ring's, latency-bound: b / (2 k alpha) (inf with alpha = 0)

    def row(self, n: int) -> dict[str, float]:
        """The figures for ``n`` workers (any n, not only those in :attr:`rows`)."""
        return _row(self.compute, n, self.link, self.bucket_bytes, self.gpus_per_node, self.inter_link)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the inputs, one record per N and the saturation figures (projection.json)."""
        return {
            "model": "alpha-beta: ring all-reduce with DDP's bucketed overlap, and one parameter server",
            "inputs": {
                "compute": dataclasses.asdict(self.compute),
                "link": dataclasses.asdict(self.link),
                "inter_link": dataclasses.asdict(self.inter_link) if self.inter_link is not None else None,
                "gpus_per_node": self.gpus_per_node,
                "bucket_bytes": self.bucket_bytes,
                "buckets": len(bucket_sizes(self.compute.grad_bytes, self.bucket_bytes)),
                "max_workers": self.max_workers,
            },
            "rows": self.rows,
            "saturation": {
                "ring_half_efficiency_n": self.ring_half_efficiency_n,
                "ps_half_efficiency_n": self.ps_half_efficiency_n,
                "ps_ceiling_samples_per_s": self.ps_ceiling_samples_per_s,
                "ring_ceiling_samples_per_s": self.ring_ceiling_samples_per_s,
            },
        }


def _row(
    compute: Compute, n: int, link: Link, bucket_bytes: float, gpus_per_node: int | None, inter_link: Link | None
) -> dict[str, float]:
    single = compute.batch_size / compute.step_s  # one worker, no communication: the reference of speed-up
    ring = _ring_link(link, n, gpus_per_node, inter_link)
    exposed = bucketed_exposed_s(compute.backward_s, compute.grad_bytes, bucket_bytes, n, ring)
    pull, push = ps_comm_s(compute.grad_bytes, n, _ps_link(link, n, gpus_per_node, inter_link))
    row: dict[str, float] = {"n": n}
    for scheme, comm in (("ring", exposed), ("ps", pull + push)):
        step = compute.step_s + comm
        throughput = n * compute.batch_size / step
        row |= {
            f"{scheme}_step_s": step,
            f"{scheme}_comm_s": comm,
            f"{scheme}_samples_per_s": throughput,
            f"{scheme}_speedup": throughput / single,
            f"{scheme}_efficiency": throughput / single / n,
        }
    return row


def _half_efficiency_n(efficiency: Callable[[int], float], max_workers: int) -> int | None:
    """The first N in 1..max_workers with efficiency below 0.5, by bisection: a step never gets shorter with more
    workers (every communication term grows with N, and the link can only get slower), so efficiency = step(1) /
    step(N) never rises."""
    if efficiency(max_workers) >= SATURATION_EFFICIENCY:
        return None
    low, high = 0, max_workers  # efficiency(low) >= 0.5 (or low = 0), efficiency(high) < 0.5
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if efficiency(mid) >= SATURATION_EFFICIENCY else (low, mid)
    return high


def project(
    compute: Compute,
    link: Link,
    max_workers: int = 1024,
    bucket_bytes: float = DDP_BUCKET_BYTES,
    gpus_per_node: int | None = None,
    inter_link: Link | None = None,
) -> Projection:
    """Project ``compute`` onto 1, 2, 4, ... ``max_workers`` workers joined by ``link`` (intra-node), or with
    ``gpus_per_node`` per node and ``inter_link`` between the nodes."""
    if not (math.isfinite(bucket_bytes) and bucket_bytes > 0):
        raise ConfigError(f"the bucket size must be > 0 bytes, got {bucket_bytes}")
    if (gpus_per_node is None) != (inter_link is None):
        raise ConfigError("several nodes need both gpus_per_node and inter_link (or neither, for one node)")
    if gpus_per_node is not None and gpus_per_node < 1:
        raise ConfigError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    if max_workers > MAX_WORKERS:
        raise ConfigError(f"max_workers must be <= {MAX_WORKERS}, got {max_workers}")
    buckets = math.ceil(compute.grad_bytes / bucket_bytes)
    if buckets > MAX_BUCKETS:
        raise ConfigError(
            f"buckets of {bucket_bytes / MIB:g} MiB split the {compute.grad_bytes / MIB:g} MiB of gradients into "
            f"{buckets:.3g} buckets: at most {MAX_BUCKETS} are modelled (a larger bucket size, --bucket-mb)"
        )
    counts = worker_counts(max_workers)

    def row(n: int) -> dict[str, float]:
        return _row(compute, n, link, bucket_bytes, gpus_per_node, inter_link)

    server = inter_link if inter_link is not None else link  # the server's link as N grows past one node
    server_s = 2 * (server.alpha_s + compute.grad_bytes / server.beta_Bps)  # per worker, as N -> infinity
    ring = inter_link if inter_link is not None else link
    ring_alpha = max(link.alpha_s, ring.alpha_s)
    return Projection(
        compute=compute,
        link=link,
        inter_link=inter_link,
        gpus_per_node=gpus_per_node,
        bucket_bytes=bucket_bytes,
        max_workers=max_workers,
        rows=[row(n) for n in counts],
        ring_half_efficiency_n=_half_efficiency_n(lambda n: row(n)["ring_efficiency"], max_workers),
        ps_half_efficiency_n=_half_efficiency_n(lambda n: row(n)["ps_efficiency"], max_workers),
        ps_ceiling_samples_per_s=compute.batch_size / server_s if server_s > 0 else math.inf,
        ring_ceiling_samples_per_s=(
            compute.batch_size / (2 * buckets * ring_alpha) if buckets and ring_alpha > 0 else math.inf
        ),
    )


# ResNet-50 v1.5 training on one DGX A100 (8x A100 80GB), as NVIDIA published it.
NVIDIA_RESNET50: dict[str, Any] = {
    "source": (
        "NVIDIA/DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, 'Training performance: "
        "NVIDIA DGX A100 (8x A100 80GB)' (pytorch-21.03 NGC container); batch 256 per GPU for TF32 and AMP from "
        "PyTorch/Classification/ConvNets/configs.yml (models: resnet50: DGXA100)"
    ),
    "gpus": 8,
    "batch_per_gpu": 256,
    "params": 25.6e6,  # ResNet-50: 25.6 M parameters (torchvision's resnet50 has 25,557,032)
    "forward_macs": 4.1e9,  # per 224 x 224 image: the "4.1 GFLOPs" usually quoted are multiply-adds
    "cases": {
        "TF32": {"precision": "tf32", "samples_per_s_1": 938.0, "samples_per_s_8": 7248.0, "speedup_8": 7.72},
        "AMP": {"precision": "fp16", "samples_per_s_1": 2470.0, "samples_per_s_8": 16621.0, "speedup_8": 6.72},
    },
}
