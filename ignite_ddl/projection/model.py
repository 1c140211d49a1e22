"""Scaling projection: how a data-parallel step would scale to N workers, from one worker's measured compute and a
link's latency and bandwidth (the alpha-beta model), for a ring all-reduce with DDP's bucketed overlap and for a
parameter server. ``ignite-ddl project`` is its command.

The model (weak scaling: every worker keeps its batch ``b``; times in seconds, sizes in bytes):

- **a link** is a latency alpha (seconds per message) and a bandwidth beta (bytes per second, *per direction*):
  :class:`Link`, with presets in :data:`LINKS` whose sources are cited.
- **a ring all-reduce** of m bytes on N workers takes ``2(N-1) alpha + 2(N-1)/N m / beta`` (0 for N = 1): 2(N-1)
  steps (reduce-scatter, then all-gather), in each of which every worker sends m/N bytes to its neighbour
  (:func:`ring_allreduce_s`).
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
and network contention beyond one link. :func:`validate_this_machine` and :func:`validate_nvidia_resnet50` measure
how far off it is.

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

import csv
import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ignite_ddl.core.errors import ConfigError

__all__ = [
    "FIT_SIZES",
    "LINKS",
    "MIB",
    "NVIDIA_RESNET50",
    "Compute",
    "Link",
    "Projection",
    "bucketed_exposed_s",
    "compute_from_run",
    "figure",
    "fit_alpha_beta",
    "format_projection",
    "measure_allreduce",
    "project",
    "ps_comm_s",
    "ring_allreduce_s",
    "validate_nvidia_resnet50",
    "validate_this_machine",
    "worker_counts",
    "write_projection",
]

MIB = 1 << 20
_DDP_BUCKET_BYTES = 25 * MIB  # DistributedDataParallel's default bucket_cap_mb (25, in MiB)
HALF = 0.5  # a scheme "saturates" where its efficiency first drops below this


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


# -- the model


def ring_allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """Seconds of a ring all-reduce of ``nbytes`` on ``n`` workers: ``2(n-1) alpha + 2(n-1)/n nbytes / beta``."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * link.alpha_s + 2 * (n - 1) / n * nbytes / link.beta_Bps


def _bucket_sizes(grad_bytes: float, bucket_bytes: float) -> list[float]:
    """The gradient in ``ceil(grad_bytes / bucket_bytes)`` buckets: full ones, the remainder last."""
    if grad_bytes <= 0:
        return []
    k = math.ceil(grad_bytes / bucket_bytes)
    return [float(bucket_bytes)] * (k - 1) + [grad_bytes - (k - 1) * bucket_bytes]


def bucketed_exposed_s(backward_s: float, grad_bytes: float, bucket_bytes: float, n: int, link: Link) -> float:
    """The all-reduce time left after backward: bucket i is ready at ``backward (i+1)/k`` and starts when it is
    ready and the previous one is done; exposed = last done - end of backward (0 for one worker)."""
    sizes = _bucket_sizes(grad_bytes, bucket_bytes)
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
                "buckets": len(_bucket_sizes(self.compute.grad_bytes, self.bucket_bytes)),
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
    if efficiency(max_workers) >= HALF:
        return None
    low, high = 0, max_workers  # efficiency(low) >= 0.5 (or low = 0), efficiency(high) < 0.5
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if efficiency(mid) >= HALF else (low, mid)
    return high


def project(
    compute: Compute,
    link: Link,
    max_workers: int = 1024,
    bucket_bytes: float = _DDP_BUCKET_BYTES,
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
    counts = worker_counts(max_workers)

    def row(n: int) -> dict[str, float]:
        return _row(compute, n, link, bucket_bytes, gpus_per_node, inter_link)

    server = inter_link if inter_link is not None else link  # the server's link as N grows past one node
    server_s = 2 * (server.alpha_s + compute.grad_bytes / server.beta_Bps)  # per worker, as N -> infinity
    buckets = len(_bucket_sizes(compute.grad_bytes, bucket_bytes))
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


# -- output: table, files, plot


def format_projection(p: Projection) -> str:
    """The projection as a table (a row per N) and a line per scheme saying where it saturates."""
    from ignite_ddl.core.text import format_table, milliseconds

    c = p.compute
    header = [
        "N",
        "ring step ms",
        "exposed ms",
        "samples/s",
        "speed-up",
        "eff.",
        "PS step ms",
        "PS comm ms",
        "samples/s",
        "speed-up",
        "eff.",
    ]
    rows = [
        [
            int(r["n"]),
            milliseconds(r["ring_step_s"]),
            milliseconds(r["ring_comm_s"]),
            f"{r['ring_samples_per_s']:.0f}",
            f"{r['ring_speedup']:.2f}",
            f"{r['ring_efficiency']:.2f}",
            milliseconds(r["ps_step_s"]),
            milliseconds(r["ps_comm_s"]),
            f"{r['ps_samples_per_s']:.0f}",
            f"{r['ps_speedup']:.2f}",
            f"{r['ps_efficiency']:.2f}",
        ]
        for r in p.rows
    ]
    nodes = (
        f"; {p.gpus_per_node} workers per node, {p.inter_link.name} between nodes" if p.inter_link is not None else ""
    )
    buckets = len(_bucket_sizes(c.grad_bytes, p.bucket_bytes))
    lines = [
        f"projection ({c.source}): batch {c.batch_size} per worker, one worker's step {milliseconds(c.step_s)} ms "
        f"(forward {milliseconds(c.forward_s)}, backward {milliseconds(c.backward_s)}, optimizer "
        f"{milliseconds(c.optimizer_s)}, data and handlers {milliseconds(c.other_s)}), gradients "
        f"{c.grad_bytes / MIB:.2f} MiB in {buckets} bucket(s) of {p.bucket_bytes / MIB:g} MiB",
        f"link: {p.link.name}, alpha {p.link.alpha_s * 1e6:.2f} us, beta {p.link.beta_Bps / 1e9:.3f} GB/s per "
        f"direction{nodes}",
        format_table(header, rows),
    ]
    lines += [
        _saturation_line(
            "ring all-reduce",
            p.ring_half_efficiency_n,
            p.max_workers,
            p.ring_ceiling_samples_per_s,
            "latency-bound: b / (2 k alpha)",
        ),
        _saturation_line(
            "parameter server",
            p.ps_half_efficiency_n,
            p.max_workers,
            p.ps_ceiling_samples_per_s,
            "b / (2 (alpha + M / beta)) ~ b beta / (2M)",
        ),
    ]
    return "\n".join(lines)


def _saturation_line(scheme: str, half_n: int | None, max_workers: int, ceiling: float, formula: str) -> str:
    where = (
        f"efficiency first below 0.5 at N = {half_n}"
        if half_n is not None
        else f"efficiency stays >= 0.5 up to N = {max_workers}"
    )
    limit = "no ceiling (alpha = 0)" if math.isinf(ceiling) else f"{ceiling:.0f} samples/s"
    return f"{scheme}: {where}; throughput ceiling as N grows: {limit} ({formula})"


_CSV_COLUMNS = (
    "n",
    "ring_step_s",
    "ring_comm_s",
    "ring_samples_per_s",
    "ring_speedup",
    "ring_efficiency",
    "ps_step_s",
    "ps_comm_s",
    "ps_samples_per_s",
    "ps_speedup",
    "ps_efficiency",
)


def figure(p: Projection) -> Any:
    """Throughput and efficiency vs N (log2 axis), ring vs parameter server, saturation marked: an open matplotlib
    figure (close it when done)."""
    from ignite_ddl.core.figures import pyplot

    plt = pyplot()
    ns = [r["n"] for r in p.rows]
    fig, (ax_tp, ax_eff) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    single = p.compute.batch_size / p.compute.step_s
    ax_tp.plot(ns, [n * single for n in ns], color="grey", linestyle=":", label="ideal (N x one worker)")
    styles = {"ring": ("ring all-reduce (DDP buckets)", "tab:blue", "o"), "ps": ("parameter server", "tab:red", "s")}
    for scheme, (label, color, marker) in styles.items():
        ax_tp.plot(ns, [r[f"{scheme}_samples_per_s"] for r in p.rows], marker=marker, color=color, label=label)
        ax_eff.plot(ns, [r[f"{scheme}_efficiency"] for r in p.rows], marker=marker, color=color, label=label)
    if math.isfinite(p.ps_ceiling_samples_per_s):
        ax_tp.axhline(
            p.ps_ceiling_samples_per_s,
            color="tab:red",
            linestyle="--",
            linewidth=1,
            label=f"PS ceiling {p.ps_ceiling_samples_per_s:.0f} samples/s",
        )
    ax_eff.axhline(HALF, color="grey", linestyle=":", linewidth=1)
    for scheme, half_n in (("ring", p.ring_half_efficiency_n), ("ps", p.ps_half_efficiency_n)):
        if half_n is not None:
            label, color, _ = styles[scheme]
            ax_tp.axvline(half_n, color=color, linestyle="--", linewidth=1)
            ax_eff.axvline(
                half_n,
                color=color,
                linestyle="--",
                linewidth=1,
                label=f"{label.split(' (')[0]}: efficiency < 0.5 from N = {half_n}",
            )
    ax_tp.set(
        xscale="log", yscale="log", xlabel="workers N", ylabel="samples/s (all workers)", title="Projected throughput"
    )
    ax_eff.set(
        xscale="log",
        xlabel="workers N",
        ylabel="efficiency (speed-up / N)",
        ylim=(0, 1.05),
        title="Projected efficiency",
    )
    for ax in (ax_tp, ax_eff):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns], fontsize=7)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    nodes = f", {p.gpus_per_node}/node + {p.inter_link.name}" if p.inter_link is not None else ""
    fig.suptitle(
        f"{p.link.name}{nodes}: batch {p.compute.batch_size}/worker, step {p.compute.step_s * 1e3:.1f} ms, "
        f"gradients {p.compute.grad_bytes / MIB:.1f} MiB",
        fontsize=10,
    )
    return fig


def write_projection(p: Projection, output_dir: str | Path) -> list[Path]:
    """projection.json (inputs and a record per N), projection.csv and projection.png in ``output_dir``."""
    from ignite_ddl.core.figures import pyplot
    from ignite_ddl.core.outputs import writing
    from ignite_ddl.core.results import write_json

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "projection.json", out / "projection.csv", out / "projection.png"]
    write_json(paths[0], p.to_dict())
    with writing(paths[1]), open(paths[1], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=_CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(p.rows)
    fig = figure(p)
    try:
        with writing(paths[2]):
            fig.savefig(paths[2], dpi=110)
    finally:
        pyplot().close(fig)
    return paths


# -- inputs: a measured 1-process run, and a link fitted on this machine


def _grad_bytes_of_run(config: dict[str, Any]) -> int:
    """Bytes of the gradients DDP all-reduces per step for a run's ``config`` (config.json's ``config``): the
    trainable parameters' elements x element size, the model built on the meta device (no memory, no compute).
    Gradients have the parameters' dtype (float32, also under autocast)."""
    import torch

    from ignite_ddl.core.config import TrainConfig
    from ignite_ddl.trainer.data import dataset_info
    from ignite_ddl.trainer.models import build_model

    train_config = TrainConfig.from_dict(config)
    info = dataset_info(train_config)
    with torch.device("meta"):
        model = build_model(train_config.model, info.in_channels, info.image_size, info.num_classes)
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def compute_from_run(run_dir: str | Path) -> Compute:
    """One worker's step from a measured 1-process run (``ignite-ddl train``'s output folder): the mean forward,
    backward and optimizer times of its summary (``steps.ranks[0]``), the rest of its measured step time (data wait
    and handlers: per-rank batch / samples per second minus the three phases), its per-rank batch, and the
    gradient bytes of its model."""
    from ignite_ddl.core.results import read_json

    run_dir = Path(run_dir)
    try:
        summary, config = read_json(run_dir / "summary.json"), read_json(run_dir / "config.json")
    except FileNotFoundError as e:
        raise ConfigError(f"{run_dir} is not a finished run: {Path(e.filename).name} is missing") from None
    except ValueError as e:
        raise ConfigError(f"{run_dir}: cannot read its summary ({e})") from None
    if summary.get("world_size") != 1:
        raise ConfigError(
            f"{run_dir} ran {summary.get('world_size')} processes: a projection starts from a "
            "1-process run (ignite-ddl train --nproc-per-node 1)"
        )
    ranks = (summary.get("steps") or {}).get("ranks") or []
    found = [ranks[0].get(f"{p}_s_mean") if ranks else None for p in ("forward", "backward", "optimizer")]
    if any(v is None for v in found) or not summary.get("samples_per_s"):
        raise ConfigError(
            f"{run_dir} has no per-phase step times (run it with --record-steps and enough "
            "iterations past --warmup-iters)"
        )
    batch = summary["batch"]["per_rank"]
    step = batch / summary["samples_per_s"]
    phases = [float(v) for v in found if v is not None]
    forward, backward, optimizer = phases
    threads = summary.get("threads_per_process")
    return Compute(
        forward_s=forward,
        backward_s=backward,
        optimizer_s=optimizer,
        batch_size=batch,
        grad_bytes=_grad_bytes_of_run(config["config"]),
        other_s=max(0.0, step - sum(phases)),
        source=f"measured: {run_dir} ({summary.get('model')}, {threads} thread(s))",
    )


def fit_alpha_beta(sizes_bytes: Sequence[float], times_s: Sequence[float], nproc: int) -> Link:
    """alpha and beta of the ring formula ``t = 2(N-1) alpha + 2(N-1)/N m / beta`` fitted to measured all-reduce
    times of messages of ``sizes_bytes`` on ``nproc`` workers: a least-squares fit, linear in alpha and 1/beta.

    Each point is weighted by 1/t^2, i.e. the *relative* residuals are minimised: the sizes span orders of magnitude,
    and unweighted, a percent of noise on the largest message would swamp the whole latency of the smallest. A
    negative alpha (noise around a latency near 0) is set to 0 and beta refitted alone. The returned link's
    ``residual`` is the RMS relative residual of the fit.
    """
    if nproc < 2:
        raise ValueError(f"an all-reduce needs 2 or more workers to fit a link, got {nproc}")
    if len(sizes_bytes) != len(times_s) or len(set(sizes_bytes)) < 2:
        raise ValueError("need times for 2 or more distinct message sizes (one time per size)")
    if any(t <= 0 or not math.isfinite(t) for t in times_s):
        raise ValueError("every time must be a positive number of seconds")
    x1 = 2 * (nproc - 1)  # multiplies alpha
    points = [(x1, 2 * (nproc - 1) / nproc * m, t, 1 / t**2) for m, t in zip(sizes_bytes, times_s)]
    # Weighted normal equations of t = alpha x1 + gamma x2 (gamma = 1 / beta), solved in closed form.
    s11 = sum(w * a * a for a, _, _, w in points)
    s12 = sum(w * a * b for a, b, _, w in points)
    s22 = sum(w * b * b for _, b, _, w in points)
    r1 = sum(w * a * t for a, _, t, w in points)
    r2 = sum(w * b * t for _, b, t, w in points)
    det = s11 * s22 - s12 * s12
    alpha, gamma = (r1 * s22 - r2 * s12) / det, (s11 * r2 - s12 * r1) / det
    if alpha < 0:
        alpha, gamma = 0.0, r2 / s22
    if gamma <= 0:
        raise ValueError("the times do not grow with the message size: no bandwidth can be fitted")
    residual = math.sqrt(statistics.fmean(((alpha * a + gamma * b) / t - 1) ** 2 for a, b, t, _ in points))
    sizes = ", ".join(f"{m / 1024:g} KiB" for m in sizes_bytes)
    return Link(
        "fitted (this machine)",
        alpha,
        1 / gamma,
        f"least-squares fit of the ring formula to all-reduce times measured on {nproc} processes, messages {sizes}",
        residual=residual,
    )


FIT_SIZES = tuple(64 * 1024 * 4**i for i in range(5))  # 64 KiB, 256 KiB, 1 MiB, 4 MiB, 16 MiB


def _allreduce_times(local_rank: int, sizes: list[int], iters: int, warmup: int) -> list[list[float]]:
    """On every rank: :func:`ignite_ddl.measure.comm.time_allreduce` for each size; every rank's seconds, rank order."""
    import ignite.distributed as idist
    import torch

    from ignite_ddl.measure.comm import time_allreduce
    from ignite_ddl.measure.gather import gather_objects

    return gather_objects([time_allreduce(size, torch.float32, idist.device(), iters, warmup) for size in sizes])


def measure_allreduce(
    nproc: int = 2,
    sizes: Sequence[int] = FIT_SIZES,
    backend: str = "gloo",
    iters: int = 10,
    warmup: int = 2,
    log_dir: str | None = None,
) -> tuple[list[int], list[float]]:
    """All-reduce times on this machine: ``nproc`` real processes each time one all-reduce of each size with
    :func:`ignite_ddl.measure.comm.time_allreduce` (median of ``iters`` calls, each after a barrier); per size, the mean
    over the ranks (nccl-tests' convention). Returns (sizes, seconds), ready for :func:`fit_alpha_beta`."""
    from ignite_ddl.launcher.settings import LaunchSettings
    from ignite_ddl.launcher.spawn import launch

    settings = LaunchSettings(backend=backend, nproc_per_node=nproc, log_dir=log_dir)
    per_rank = launch(_allreduce_times, settings, list(sizes), iters, warmup)
    return list(sizes), [statistics.fmean(ranks) for ranks in zip(*per_rank)]


# -- validation


def validate_this_machine(
    output_dir: str | Path = "runs/projection-validation",
    batch_per_worker: int = 64,
    train_size: int = 3072,
    epochs: int = 2,
    model: str = "cnn",
    repeats: int = 3,
    rerun_contended: int = 2,
) -> dict[str, Any]:
    """Project 2 processes from 1 on this machine and compare with 2 measured processes (gloo, CPU).

    Three runs of ``ignite-ddl train`` (synthetic data, the quickstart's model and sizes, the same batch per
    worker): 2 processes with the launcher's threads per process (cores / 2); 1 process with *those* threads, the
    compute a worker of the 2-process run has; and 1 process with the default threads (every core), the naive
    starting point. On a CPU a single process already uses every core through intra-op threads, so projecting 2
    workers from it counts the cores twice. Each of ``repeats`` rounds fits alpha and beta to all-reduce times of
    2 gloo processes, then runs the three (slow drifts of the machine hit them alike), projects N = 2 from each
    1-process run and compares it with the round's 2-process run. Returns the relative errors of the projected step
    time and throughput per round, and their medians over all rounds and over the rounds no other process disturbed
    (the fit and every run below the contention threshold); also written to validation.json. A round that other
    processes disturbed is run again, up to ``rerun_contended`` times, and its last attempt kept.
    """
    from ignite_ddl.core.config import TrainConfig
    from ignite_ddl.core.environment import host, versions
    from ignite_ddl.core.results import write_json
    from ignite_ddl.launcher.settings import plan_launch
    from ignite_ddl.measure.contention import CONTENTION_THRESHOLD, ForeignLoad
    from ignite_ddl.trainer.run import train

    out = Path(output_dir)
    base: dict[str, Any] = {
        "dataset": "synthetic",
        "model": model,
        "epochs": epochs,
        "train_size": train_size,
        "val_size": 512,
        "progress": False,
        "overwrite": True,
        "checkpoints": False,
        "best_model": False,
    }
    two: dict[str, Any] = {"backend": "gloo", "nproc_per_node": 2, "batch_size": 2 * batch_per_worker}
    threads = plan_launch(TrainConfig(**base, **two)).threads  # each of the 2 ranks' threads
    kinds: dict[str, dict[str, Any]] = {
        "one_process_matched_threads": {"nproc_per_node": 1, "threads": threads, "batch_size": batch_per_worker},
        "one_process_all_cores": {"nproc_per_node": 1, "batch_size": batch_per_worker},
        "two_processes": two,
    }

    def contention(summary: dict[str, Any]) -> float | None:
        return (summary.get("contention") or {}).get("foreign_cpu_share")

    def one_round(repeat: int) -> dict[str, Any]:
        # Each round fits its own link first: the all-reduce latency of this VM moves with its load.
        with ForeignLoad() as fit_load:
            sizes, times = measure_allreduce(2, iters=20, warmup=5, log_dir=str(out / f"fit-r{repeat}" / "logs"))
        link = fit_alpha_beta(sizes, times, 2)
        runs = {}
        for kind, options in kinds.items():
            run_dir = out / f"{kind}-r{repeat}"
            summary = train(TrainConfig(**base, **options, output_dir=str(run_dir)))
            if summary is None:
                raise RuntimeError(f"the {kind} run returned no summary")
            runs[kind] = (run_dir, summary)
        measured = runs["two_processes"][1]
        measured_tp = measured["samples_per_s"]
        record: dict[str, Any] = {
            "link": dataclasses.asdict(link),
            "allreduce": {"sizes_bytes": sizes, "seconds": times, "foreign_cpu_share": fit_load.share},
            "measured_2": {
                "samples_per_s": measured_tp,
                "step_s": 2 * batch_per_worker / measured_tp,  # a rank's mean step, from the global throughput
                "exposed_comm_s": measured["steps"]["global"]["exposed_comm_s_mean"],
                "foreign_cpu_share": contention(measured),
            },
        }
        for kind in ("one_process_matched_threads", "one_process_all_cores"):
            run_dir, summary = runs[kind]
            compute = compute_from_run(run_dir)
            row = project(compute, link, max_workers=2).row(2)
            record[kind] = {
                "threads": summary["threads_per_process"],
                "measured_1_samples_per_s": summary["samples_per_s"],
                "foreign_cpu_share": contention(summary),
                "compute": dataclasses.asdict(compute),
                "projected_2_step_s": row["ring_step_s"],
                "projected_2_exposed_s": row["ring_comm_s"],
                "projected_2_samples_per_s": row["ring_samples_per_s"],
                "step_error": row["ring_step_s"] / record["measured_2"]["step_s"] - 1,
                "throughput_error": row["ring_samples_per_s"] / measured_tp - 1,
            }
        shares = [fit_load.share, *(contention(summary) for _, summary in runs.values())]
        record["contended"] = any(share is None or share > CONTENTION_THRESHOLD for share in shares)
        return record

    records = []
    for repeat in range(repeats):
        for attempt in range(1 + rerun_contended):  # as a sweep does: a disturbed round is run again
            record = {**one_round(repeat), "attempt": attempt}
            if not record["contended"]:
                break
        records.append(record)

    def medians(rounds: list[dict[str, Any]]) -> dict[str, Any] | None:
        if not rounds:
            return None
        compared = ("one_process_matched_threads", "one_process_all_cores")
        keys = ("step_error", "throughput_error", "projected_2_samples_per_s", "projected_2_exposed_s")
        return {
            "rounds": len(rounds),
            "measured_2_samples_per_s": statistics.median(r["measured_2"]["samples_per_s"] for r in rounds),
            "measured_2_exposed_comm_s": statistics.median(r["measured_2"]["exposed_comm_s"] for r in rounds),
            "alpha_s": statistics.median(r["link"]["alpha_s"] for r in rounds),
            "beta_Bps": statistics.median(r["link"]["beta_Bps"] for r in rounds),
            **{kind: {key: statistics.median(r[kind][key] for r in rounds) for key in keys} for kind in compared},
        }

    result: dict[str, Any] = {
        "machine": {**host(), "torch": versions()["torch"]},
        "workload": {**base, "batch_per_worker": batch_per_worker, "repeats": repeats},
        "threads_per_process_at_2": threads,
        "contention_threshold": CONTENTION_THRESHOLD,
        "rounds": records,
        "median": medians(records),
        "median_uncontended": medians([r for r in records if not r["contended"]]),
    }
    write_json(out / "validation.json", result)
    return result


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


def validate_nvidia_resnet50(link: Link | None = None, bucket_bytes: float = _DDP_BUCKET_BYTES) -> dict[str, Any]:
    """Predict NVIDIA's published 1 -> 8 GPU speed-up of ResNet-50 v1.5 on a DGX A100 and compare.

    Compute per step: 3 x the forward FLOPs per image (2 FLOPs per multiply-add, as :mod:`ignite_ddl.measure.flops`
    counts) x 256 images, at the A100's datasheet peak (:data:`ignite_ddl.measure.flops.PEAKS`) times a utilisation
    *calibrated* so that one GPU reproduces the published 1-GPU throughput: the compute per step is therefore the
    published one, and only the communication is predicted. Forward 1/3, backward 2/3 of it, no optimizer time;
    gradients 25.6 M x 4 bytes (float32, under AMP too); ``link`` NVLink 3 by default. Returns, per precision, the
    predicted 8-GPU speed-up and throughput and their relative errors against the published figures.
    """
    from ignite_ddl.measure.flops import PEAKS

    link = link if link is not None else LINKS["nvlink3"]
    ref = NVIDIA_RESNET50
    batch, gpus = ref["batch_per_gpu"], ref["gpus"]
    flops_per_image = 3 * 2 * ref["forward_macs"]
    grad_bytes = ref["params"] * 4
    cases = {}
    for name, case in ref["cases"].items():
        peak = PEAKS["A100"]["tflops"][case["precision"]] * 1e12
        utilisation = case["samples_per_s_1"] * flops_per_image / peak  # calibrated on the 1-GPU figure
        compute_s = batch * flops_per_image / (utilisation * peak)
        compute = Compute.from_total(compute_s, grad_bytes, batch, source=f"ResNet-50 {name}, calibrated")
        row = project(compute, link, max_workers=gpus, bucket_bytes=bucket_bytes).row(gpus)
        cases[name] = {
            "peak_flops_per_s": peak,
            "utilisation": utilisation,
            "compute_s": compute_s,
            "exposed_comm_s": row["ring_comm_s"],
            "predicted_speedup": row["ring_speedup"],
            "published_speedup": case["speedup_8"],
            "speedup_error": row["ring_speedup"] / case["speedup_8"] - 1,
            "predicted_samples_per_s": row["ring_samples_per_s"],
            "published_samples_per_s": case["samples_per_s_8"],
            "throughput_error": row["ring_samples_per_s"] / case["samples_per_s_8"] - 1,
        }
    return {
        "source": ref["source"],
        "link": dataclasses.asdict(link),
        "grad_bytes": grad_bytes,
        "flops_per_image": flops_per_image,
        "cases": cases,
    }
