"""What the scaling projection is fed from the outside world: one worker's step read from a measured 1-process run
(:func:`compute_from_run`), all-reduce times measured on this machine (:func:`measure_allreduce`) and the link fitted
to them (:func:`fit_alpha_beta`), and NVIDIA's published ResNet-50 scaling with the A100's datasheet peak
(:func:`validate_nvidia_resnet50`).

Reading a run builds its model (on the meta device) with the trainer's model and dataset definitions, measuring
starts real processes with the launcher, and the peak comes from :mod:`ignite_ddl.measure.flops`: all of them import
torch, so they are imported inside the functions that need them; the package stays light for the command line's
start-up. Nothing here trains: the projection sits above the trainer's definitions, below sweeps.

Example (times made with the ring formula for alpha = 50 us, beta = 2 GB/s on 2 workers, fitted back):
    >>> times = [2 * 50e-6 + m / 2e9 for m in FIT_SIZES]
    >>> link = fit_alpha_beta(FIT_SIZES, times, nproc=2)
    >>> round(link.alpha_s * 1e6, 6), round(link.beta_Bps / 1e9, 6), round(link.residual, 6)
    (50.0, 2.0, 0.0)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from ignite_ddl.core.collectives import allreduce_bus_factor
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.core.runfiles import read_summary
from ignite_ddl.predict.projection.model import (
    DDP_BUCKET_BYTES,
    LINKS,
    NVIDIA_RESNET50,
    Compute,
    Link,
    project,
    ring_allreduce_s,
)

__all__ = [
    "BUSY_PROBE",
    "DDP_PROBE_PAIRS",
    "FSDP_PROBE_PAIRS",
    "FIT_SIZES",
    "LARGE_UNIT",
    "MMAP_THRESHOLD_MAX",
    "PROBE_REVISIONS",
    "SMALL_TENSORS",
    "alternate_plain_and_fsdp",
    "compute_from_run",
    "fit_alpha_beta",
    "fsdp_collectives",
    "fsdp_probe_model",
    "fsdp_unit_bytes",
    "measure_allreduce",
    "measure_busy_factor",
    "measure_fsdp_factor",
    "probe_grad_bytes",
    "probe_mlp",
    "run_warning",
    "validate_nvidia_resnet50",
]

FIT_SIZES = tuple(64 * 1024 * 4**i for i in range(5))  # 64 KiB, 256 KiB, 1 MiB, 4 MiB, 16 MiB
# The busy probe's model: an MLP of 4 blocks of 1024 (16 MiB of gradients), a global batch of 32, Adam; on 2 cores
# here a DDP step of about 45 ms, long enough to time, short enough to probe. DDP's probe times 60 pairs past 5
# warm-up pairs (5 s): with 15 past 2 the first steps' slowness (a plain step of 21-40 ms where the steady one is 21)
# reached the median, and on the quiet 2-core AMD EPYC VM four probes in a row (one link) found factors of 1.13-2.12
# (a standard deviation of 27 % of their mean); five at 60 past 5 found 1.27-1.55 (8 %). FSDP's probe times each of
# its models its own count (FSDP_PROBE_PAIRS).
BUSY_PROBE = {"width": 1024, "depth": 4, "batch": 32}
DDP_PROBE_PAIRS = {"pairs": 60, "warmup": 5}
# FSDP's probe, per model: (pairs timed, warm-up pairs before them). The MLP's and the small stack's set the price of
# every FSDP collective; at 15 pairs past 2 three probes a minute apart measured the MLP's FSDP step at 87.6, 90.5 and
# 105.8 ms (its factor 2.7 to 3.8), as DDP's probe spread before it timed 60 pairs. The large unit's pairs take half
# a second each and price only units above glibc's mmap threshold: they stay 15.
FSDP_PROBE_PAIRS = {"mlp": (60, 5), "small": (60, 5), "large": (15, 2)}
# FSDP's optimizer step per parameter tensor: a stack of small linear layers (64 tensors of 32 x 32 and 32), so that
# what Adam does per tensor on FSDP2's sharded parameters, not the bytes, is what its step takes
SMALL_TENSORS = {"width": 32, "layers": 32}
# What each busy probe measures, revised when that changes: a figure kept in an output folder by an earlier revision
# (plan/link.json) is measured again rather than read with another meaning (FSDP's 3: its collectives priced by unit).
PROBE_REVISIONS = {"ddp": 2, "fsdp": 4}  # DDP's 2: 60 pairs past 5 warm-up pairs; FSDP's 4: FSDP_PROBE_PAIRS
# glibc's largest mmap threshold on a 64-bit machine (DEFAULT_MMAP_THRESHOLD_MAX): a block above it is always mapped
# fresh and unmapped when freed, its pages faulted in again at every use, however often it is reused
MMAP_THRESHOLD_MAX = 32 * 2**20
# FSDP's cost per byte for a unit above that threshold: one linear layer of this width, 35 MB of parameters
LARGE_UNIT = {"width": 2968}


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
    run_dir = Path(run_dir)
    try:
        summary, config = read_summary(run_dir), read_json(run_dir / "config.json")
    except FileNotFoundError as e:
        raise ConfigError(f"{run_dir} is not a finished run: {Path(e.filename).name} is missing") from None
    except ValueError as e:  # read_summary says which file and why; a config.json that is not JSON, here
        said = str(e)
        raise ConfigError(
            f"--run {run_dir}: {said}" if said.startswith("its ") else f"{run_dir}: cannot read its summary ({e})"
        ) from None
    for name, data in (("config.json", config),):
        if not isinstance(data, dict):  # a file of that name that no run wrote
            raise ConfigError(f"--run {run_dir}: its {name} is not a run's (a JSON {type(data).__name__})")
    try:
        return _compute_of(run_dir, cast(dict[str, Any], summary), config)
    except ConfigError:  # a ValueError too: said already
        raise
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as e:  # a field missing or of another type
        raise ConfigError(
            f"--run {run_dir}: its summary.json or config.json is not a run's (a field missing or of another type: "
            f"{type(e).__name__})"
        ) from None


def _compute_of(run_dir: Path, summary: dict[str, Any], config: dict[str, Any]) -> Compute:
    """:func:`compute_from_run` from the run's summary and config, read (a field of the wrong type raises)."""
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


def run_warning(run_dir: str | Path, threshold: float | None = None) -> str | None:
    """Why a projection from this measured run would be too optimistic, in one line, or None when nothing says so:
    other processes used more than ``threshold`` of the CPUs while it measured (default: the sweeps' contention
    threshold, 10 %), or its one process ran more than one intra-op thread, i.e. used cores that each worker of an
    N-process run on the same machine would not have (docs/projection.md: nearly 2x optimistic from the
    default 2-thread run on 2 cores).

    Example (a run folder's summary.json written by hand):
        >>> import json, tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> _ = (run / "summary.json").write_text(json.dumps(
        ...     {"threads_per_process": 2, "contention": {"foreign_cpu_share": 0.57}}))
        >>> print(run_warning(run))  # doctest: +ELLIPSIS
        the run ... was measured under contention (other processes used 57% of the CPUs, above 10%: ...) and with 2 ...
    """
    from ignite_ddl.measure.contention import CONTENTION_THRESHOLD

    threshold = CONTENTION_THRESHOLD if threshold is None else threshold
    try:
        summary = read_summary(run_dir)
    except (OSError, ValueError):
        return None  # compute_from_run says what is wrong with the folder
    reasons = []
    contention = summary.get("contention")
    share = contention.get("foreign_cpu_share") if contention else None
    if isinstance(share, (int, float)) and share > threshold:
        reasons.append(
            f"under contention (other processes used {share:.0%} of the CPUs, above {threshold:.0%}: its step "
            "includes waiting for them)"
        )
    threads = summary.get("threads_per_process")
    if isinstance(threads, int) and threads > 1:
        reasons.append(
            f"with {threads} threads in its one process (a worker of an N-process run on these cores gets fewer: "
            f"up to ~{threads}x optimistic; measure with --threads 1, or cores / N)"
        )
    if not reasons:
        return None
    return f"the run {run_dir} was measured " + " and ".join(reasons) + ": the projection is optimistic"


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
    points = [(x1, allreduce_bus_factor(nproc) * m, t, 1 / t**2) for m, t in zip(sizes_bytes, times_s)]
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


def _probe_steps(local_rank: int, width: int, depth: int, batch: int, pairs: int, warmup: int) -> Any:
    """On every rank: the busy probe's MLP under DDP (Adam, a fixed random batch of ``batch`` per rank), its steps
    alternating with and without DDP's all-reduce (``no_sync``: no bucket, no hook, no collective); every rank's
    seconds per step, in rank order."""
    import contextlib

    import torch
    from torch import nn

    from ignite_ddl.measure.gather import gather_objects

    model = nn.parallel.DistributedDataParallel(probe_mlp(width, depth))
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))
    seconds = []
    for i in range(2 * (warmup + pairs)):
        began = time.perf_counter()
        optimizer.zero_grad()
        with model.no_sync() if i % 2 else contextlib.nullcontext():
            nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        seconds.append(time.perf_counter() - began)
    return gather_objects(seconds[2 * warmup :])


def probe_mlp(width: int, depth: int) -> Any:
    """The probes' model: ``depth`` blocks of a ``width`` x ``width`` linear layer and GELU, then 10 classes."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth)]
    return nn.Sequential(*blocks, nn.Linear(width, 10))


def probe_grad_bytes(width: int = BUSY_PROBE["width"], depth: int = BUSY_PROBE["depth"]) -> int:
    """Bytes of :func:`probe_mlp`'s gradients (float32; default: :data:`BUSY_PROBE`'s), counted on the meta
    device."""
    import torch

    with torch.device("meta"):
        model = probe_mlp(width, depth)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _fsdp_probe_steps(local_rank: int, width: int, depth: int, batch: int, pairs: dict[str, tuple[int, int]]) -> Any:
    """On every rank, three models each without any wrapper and as a copy under FSDP2 (each block a unit, then the
    root, as the trainer shards it), Adam each, steps alternating between the two: the probe's MLP, a stack of
    :data:`SMALL_TENSORS`' layers and one :data:`LARGE_UNIT`; every rank's ``{model: [(seconds of a plain step, of
    its optimizer step, of an FSDP step, of its optimizer step) per pair]}`` (``"mlp"``, ``"small"``,
    ``"large"``), in rank order; ``pairs``: each model's (pairs timed, warm-up pairs)."""
    import torch
    from torch import nn

    from ignite_ddl.measure.gather import gather_objects

    def pairs_of(
        plain: nn.Module, x: torch.Tensor, y: torch.Tensor, timed: int, warmup: int
    ) -> list[tuple[float, float, float, float]]:
        """(plain step, its optimizer step, FSDP step, its optimizer step) per pair, ``timed`` past ``warmup``."""
        units = list(plain.children())[:-1]  # each block a unit, the last layer the root's

        def loss(out: torch.Tensor) -> torch.Tensor:
            return nn.functional.cross_entropy(out, y)

        found = alternate_plain_and_fsdp(plain, units, x, loss, timed, warmup)
        return [(sum(bare), bare[2], sum(sharded), sharded[2]) for bare, sharded in found]

    small, large = SMALL_TENSORS["width"], LARGE_UNIT["width"]
    models = {"mlp": probe_mlp(width, depth), "small": fsdp_probe_model("small"), "large": fsdp_probe_model("large")}
    widths = {"mlp": width, "small": small, "large": large}
    return gather_objects(
        {
            name: pairs_of(model, torch.randn(batch, widths[name]), torch.randint(0, 10, (batch,)), *pairs[name])
            for name, model in models.items()
        }
    )


# seconds of a step's forward (from zeroing the gradients on), backward and optimizer step
Phases = tuple[float, float, float]


def alternate_plain_and_fsdp(
    plain: Any, units: Sequence[Any], x: Any, loss: Any, timed: int, warmup: int
) -> list[tuple[Phases, Phases]]:
    """Steps of ``plain`` and of a copy under FSDP2 (each of ``units``, modules of ``plain``, a unit in the copy,
    then its root), Adam each, alternating in this process (a rank of a process group that every rank enters alike):
    per pair past ``warmup``, the plain step's and the FSDP2 step's (forward, backward, optimizer) seconds. ``loss``
    turns a model's output into the loss; ``x`` is the batch. Alternating puts both beside the same minute of a
    machine whose speed drifts, so their difference is FSDP2's."""
    import copy

    import torch
    from torch.distributed.fsdp import fully_shard

    sharded = copy.deepcopy(plain)
    paths = {id(module): path for path, module in plain.named_modules()}
    copies = dict(sharded.named_modules())
    for unit in units:
        fully_shard(copies[paths[id(unit)]])
    fully_shard(sharded)
    optimizers = [torch.optim.Adam(plain.parameters()), torch.optim.Adam(sharded.parameters())]
    found = []
    for i in range(warmup + timed):
        pair = []
        for model, optimizer in zip((plain, sharded), optimizers):
            began = time.perf_counter()
            optimizer.zero_grad()
            out = loss(model(x))
            forward = time.perf_counter()
            out.backward()
            backward = time.perf_counter()
            optimizer.step()
            pair.append((forward - began, backward - forward, time.perf_counter() - backward))
        if i >= warmup:
            found.append((pair[0], pair[1]))
    return found


def fsdp_probe_model(name: str) -> Any:
    """The FSDP probe's models but its MLP: ``"small"``, :data:`SMALL_TENSORS`' stack of small linear layers (each a
    unit but the last, which the root holds); ``"large"``, one linear layer of :data:`LARGE_UNIT`'s width (a unit
    above glibc's largest mmap threshold), then 10 classes."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "small":
        small = SMALL_TENSORS["width"]
        return nn.Sequential(*(nn.Linear(small, small) for _ in range(SMALL_TENSORS["layers"])))
    large = LARGE_UNIT["width"]
    return nn.Sequential(nn.Linear(large, large), nn.Linear(large, 10))


def fsdp_unit_bytes(model: Any) -> list[int]:
    """Bytes each FSDP unit of a probe's model gathers (each child but the last a unit, the root last), as
    :func:`~ignite_ddl.trainer.strategies.unit_bytes` counts them; ``model`` a callable building it, called on the
    meta device (nothing allocated)."""
    import torch

    from ignite_ddl.trainer.strategies import unit_bytes

    with torch.device("meta"):
        built = model()
    return unit_bytes([*list(built.children())[:-1], built])


def fsdp_collectives(units: Sequence[int], reshard_after_forward: bool = True, accumulate: int = 1) -> list[int]:
    """The bytes of every collective an optimizer step of FSDP2 makes, for units of ``units`` bytes (as
    :func:`~ignite_ddl.trainer.strategies.unit_bytes` lists them, the root last), in ``accumulate`` micro-batches:
    each unit holding parameters gathers them in every micro-batch's forward and again in its backward (but the
    root, which FSDP2 keeps gathered after forward, and every unit with ``reshard_after_forward`` off), and
    reduce-scatters its gradients once."""
    held = [b for b in units[:-1] if b] + ([units[-1]] if units and units[-1] else [])
    again = [b for b in units[:-1] if b] if reshard_after_forward else []
    return [*held, *again] * accumulate + held


def _no_optimizer(pairs: Sequence[Sequence[float]]) -> float:
    """The median pair's FSDP step less the plain step, both without their optimizer steps (seconds)."""
    return statistics.median(
        (fsdp - fsdp_optimizer) - (plain - optimizer) for plain, optimizer, fsdp, fsdp_optimizer in pairs
    )


def measure_fsdp_factor(link: Link, nproc: int = 2, log_dir: str | None = None) -> dict[str, float]:
    """How much more FSDP2's gathers and reduce-scatters cost a training step on CPU ranks sharing this machine's
    cores than ``link`` says they cost alone. ``nproc`` gloo processes train three models plain and under FSDP2 in
    alternating steps, and each model's median pair's difference (the slowest rank's, the optimizer steps left
    out) is what its collectives cost (:func:`fsdp_collectives`: a gather per unit in forward and in backward and
    a reduce-scatter, each unit's bytes):

    - ``collective_s``, a collective's own cost whatever its bytes: a stack of :data:`SMALL_TENSORS`' small layers
      (32 units of a few KB), its difference over its 95 collectives (FSDP2's hooks around every unit, its copies
      into and out of its flat buffers, gloo's latency beside the compute; about 1.7 ms here);
    - ``factor``, what a byte costs beyond that, as a multiple of its time at ``link`` (the ring's bandwidth term):
      :data:`BUSY_PROBE`'s MLP (4 units of 4 MiB and the root);
    - ``large_factor``, the same for a unit above glibc's largest mmap threshold (32 MiB): one :data:`LARGE_UNIT`.
      Its gathered parameters and its gradients are mapped fresh and faulted in at every collective, so a byte there
      costs about twice as much (measured here: 136 ms for a unit of 31 MB, 285 ms for one of 35 MB).

    In the same processes the stack's optimizer steps measure what FSDP2's optimizer step costs per parameter
    tensor beyond a 1/nproc share of the plain step's (``optimizer_per_tensor_s``: Adam on sharded parameters
    (DTensors) pays a dispatch per tensor and operation; measured on 2 gloo processes here, 0.16-0.28 ms a tensor,
    so that a model of 40 small tensors steps its shard slower than the whole). Returns the figures with what
    they were computed from."""
    from ignite_ddl.launcher.settings import LaunchSettings
    from ignite_ddl.launcher.spawn import launch

    p = BUSY_PROBE
    settings = LaunchSettings(backend="gloo", nproc_per_node=nproc, log_dir=log_dir)
    per_rank = launch(_fsdp_probe_steps, settings, p["width"], p["depth"], p["batch"] // nproc, FSDP_PROBE_PAIRS)
    # slowest rank, per figure
    pairs = {
        name: [tuple(max(values) for values in zip(*ranks)) for ranks in zip(*(r[name] for r in per_rank))]
        for name in per_rank[0]
    }
    tensors = 2 * SMALL_TENSORS["layers"]
    # what a sharded optimizer step takes beyond its 1/nproc share of the plain one, per parameter tensor
    per_tensor = statistics.median((fsdp - plain / nproc) / tensors for _, plain, _, fsdp in pairs["small"])

    def bandwidth_s(nbytes: float) -> float:  # a collective's bytes over the ring, without its latency
        return (nproc - 1) / nproc * nbytes / link.beta_Bps

    small = fsdp_collectives(fsdp_unit_bytes(lambda: fsdp_probe_model("small")))
    collective_s = max(_no_optimizer(pairs["small"]), 0.0) / len(small)
    mlp = fsdp_collectives(fsdp_unit_bytes(lambda: probe_mlp(p["width"], p["depth"])))
    extra = _no_optimizer(pairs["mlp"]) - collective_s * len(mlp)
    if extra <= 0:
        raise ValueError("FSDP's steps were not slower than the plain steps by more than its collectives' latency")
    factor = extra / sum(bandwidth_s(b) for b in mlp)
    large = fsdp_collectives(fsdp_unit_bytes(lambda: fsdp_probe_model("large")))
    above = [b for b in large if b > MMAP_THRESHOLD_MAX]
    below = sum(factor * bandwidth_s(b) for b in large if b <= MMAP_THRESHOLD_MAX)
    large_extra = _no_optimizer(pairs["large"]) - collective_s * len(large) - below
    return {
        "revision": PROBE_REVISIONS["fsdp"],
        "factor": factor,
        "large_factor": max(large_extra, 0.0) / sum(bandwidth_s(b) for b in above),
        "collective_s": collective_s,
        "fsdp_s": statistics.median(pair[2] for pair in pairs["mlp"]),
        "plain_s": statistics.median(pair[0] for pair in pairs["mlp"]),
        "grad_bytes": probe_grad_bytes(),
        "optimizer_per_tensor_s": max(per_tensor, 0.0),
        "optimizer_tensors": tensors,
    }


def measure_busy_factor(link: Link, nproc: int = 2, log_dir: str | None = None) -> dict[str, float]:
    """How much more DDP's gradient all-reduce costs a training step on CPU ranks that share this machine's cores
    than ``link`` says it costs alone: ``nproc`` gloo processes (the cores shared out) train :data:`BUSY_PROBE`'s
    MLP under DDP, steps with the all-reduce alternating with steps without it (``no_sync``) so that the machine's
    drifts hit both alike; the factor is the median pair's difference (the slowest rank's steps) over the ring
    all-reduce of its gradients at ``link``. It takes in what the all-reduce alone leaves out: gloo's threads
    competing with backward's for the cores, DDP's copies into its buckets and back, its division. Measured here
    (benchmarks/ddp_cpu_parts.py, 2 processes, quiet): 2.2, 1.9 and 2.0 times the all-reduce alone for 4, 16 and
    64 MiB of gradients. Returns the factor with what it was computed from (seconds, bytes)."""
    from ignite_ddl.launcher.settings import LaunchSettings
    from ignite_ddl.launcher.spawn import launch

    p, timed = BUSY_PROBE, DDP_PROBE_PAIRS
    settings = LaunchSettings(backend="gloo", nproc_per_node=nproc, log_dir=log_dir)
    model = (p["width"], p["depth"], p["batch"] // nproc)
    per_rank = launch(_probe_steps, settings, *model, timed["pairs"], timed["warmup"])
    slowest = [max(steps) for steps in zip(*per_rank)]
    ddp, plain = statistics.median(slowest[0::2]), statistics.median(slowest[1::2])
    extra = statistics.median(a - b for a, b in zip(slowest[0::2], slowest[1::2]))
    grad_bytes = probe_grad_bytes()
    alone = ring_allreduce_s(grad_bytes, nproc, link)
    if extra <= 0:
        raise ValueError(f"DDP's steps ({ddp * 1e3:.1f} ms) were not slower than the steps without it")
    return {
        "revision": PROBE_REVISIONS["ddp"],
        "factor": extra / alone,
        "ddp_s": ddp,
        "no_comm_s": plain,
        "allreduce_s": alone,
        "grad_bytes": grad_bytes,
    }


def validate_nvidia_resnet50(link: Link | None = None, bucket_bytes: float = DDP_BUCKET_BYTES) -> dict[str, Any]:
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
