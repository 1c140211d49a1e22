"""Model FLOPs and utilisation: how much of the hardware's arithmetic a training run turns into training.

*Model FLOPs* are the floating-point operations one training step needs, whatever the implementation does on top
(recomputation, padding, extra kernels). :func:`count_flops` counts them once, per sample, with PyTorch's
``torch.utils.flop_counter.FlopCounterMode``. What it counts is the matrix-multiply-like work only (``mm``,
``addmm``, ``bmm``, ``baddbmm``, convolutions and attention kernels, forward and backward), at 2 FLOPs per
multiply-add; bias additions, activations, normalisation layers and the loss's own arithmetic count for nothing.
For the networks this suite trains that work is nearly all of it, and it is what the datasheet peaks below
measure too.

The backward pass of a layer multiplies twice as much as its forward: once for the gradient of the weights and
once for the gradient of the layer's input, so a training step is close to 3x the forward pass. Close, not
equal: the first layer's input is the data, which needs no gradient, so that layer's backward skips the second
product and the backward is slightly less than twice the forward.

Layers the counter cannot see (recurrent layers, which run as one fused kernel; a layer of one's own doing its
products some other way) are counted by formula or named (:mod:`.uncounted`): ``FlopCount.by_formula`` and
``FlopCount.not_counted``. A run whose count misses something it cannot name gives no utilisation at all rather
than a low one.

*Achieved FLOP/s* is FLOPs per sample x samples per second (:func:`achieved_flops`). Divided by a peak it gives
the *utilisation* (:func:`utilisation`, the "model FLOPs utilisation" of large-model papers). Keep both sides on
the same scope. A run's reference is the machine's matmul peak (:mod:`.peak`: measured on all its cores, repeated
until stable, kept once per machine) and each rank is judged against its share of it (:func:`rank_share`: on a CPU
its threads out of the cores; on a GPU its device): one process of 2 threads and two of 1 thread on 2 cores read
the same utilisation at the same total throughput, so within one workload MFU orders configurations on the same
cores as their throughput does.

Beside the measured peak, :data:`PEAKS` holds the dense figures of NVIDIA's datasheets (the tensor-core figures
that datasheets print with an asterisk assume 2:4 structured sparsity, which dense training never uses; the
dense rate is half of them) and :func:`datasheet_peak` finds the one for a device name and a precision. The peak
depends on the precision the matmuls run in (:func:`~ignite_ddl.measure.peak.matmul_precision`): an H100 SXM does
67 TFLOP/s in fp32, 494.7 in tf32 and 989.4 in bf16; the measured peak shows how far below the datasheet even an
ideal workload stays. :func:`mfu` and :func:`format_mfu` put a run's achieved FLOP/s beside both peaks, each
named. A run cannot do more arithmetic than the machine's own largest matmul does, so a figure above 100 % of the
measured peak is flagged (``above_measured_peak``), never printed as a plain percentage: the FLOP count or one of
the two timings is off.

Example:
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    >>> inputs, targets = torch.randn(16, 8), torch.randint(0, 2, (16,))
    >>> flops = count_flops(model, inputs, targets, nn.CrossEntropyLoss())
    >>> flops.forward, flops.backward  # forward 2*(8*4 + 4*2); backward adds layer 2's input gradient 2*4*2
    (80.0, 96.0)
    >>> rank_share(torch.device("cpu"), threads=1, cores=2, ranks_here=2)  # one of two 1-thread ranks on 2 cores
    0.5
    >>> peak = datasheet_peak("NVIDIA H100 80GB HBM3", "bf16")
    >>> peak.family, peak.flops_per_s
    ('H100 SXM', 989400000000000.0)
    >>> round(utilisation(6e9, 50_000, peak.flops_per_s), 3)  # 6 GFLOPs per sample at 50k samples/s per GPU
    0.303
    >>> print(datasheet_peak("Intel(R) Xeon(R) CPU @ 2.20GHz", "fp32"))
    None
"""

from __future__ import annotations

import copy
import dataclasses
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ignite_ddl.core.schema import Flops, FlopsRank, MachinePeak
from ignite_ddl.measure.peak import PEAK_TOLERANCE, PRECISIONS, MatmulRate
from ignite_ddl.measure.uncounted import watching

__all__ = [
    "PEAKS",
    "FlopCount",
    "Peak",
    "achieved_flops",
    "count_flops",
    "count_step_flops",
    "datasheet_peak",
    "format_flops",
    "format_mfu",
    "mfu",
    "peak_words",
    "rank_share",
    "utilisation",
    "utilisation_record",
]

_H100 = "https://www.nvidia.com/en-us/data-center/h100/"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_A100 = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_L4 = "https://www.nvidia.com/en-us/data-center/l4/"
_T4 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf"

# Dense TFLOP/s per GPU. fp32 is the CUDA-core figure (no sparsity involved); tf32/bf16/fp16 are the tensor-core
# figures, half of the datasheets' "with sparsity" ones. H100/H200 SXM use the exact clock-derived rates (the
# datasheet rounds 2 x 494.7 and 2 x 989.4 to 989 and 1,979). A precision a GPU lacks is absent: the T4 (Turing)
# has no tf32 nor bf16 tensor cores, and its 65 TFLOP/s is the mixed fp16/fp32 tensor-core rate.
PEAKS: dict[str, dict[str, Any]] = {
    "H100 SXM": {"tflops": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, "source": _H100},
    "H100 PCIe": {"tflops": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5}, "source": _H100},
    "H100 NVL": {"tflops": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}, "source": _H100},
    "H200 SXM": {"tflops": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, "source": _H200},
    "H200 NVL": {"tflops": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}, "source": _H200},
    "A100": {"tflops": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, "source": _A100},
    "L4": {"tflops": {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0}, "source": _L4},
    "T4": {"tflops": {"fp32": 8.1, "fp16": 65.0}, "source": _T4},
}

# Names as torch.cuda.get_device_name reports them, most specific first: "NVIDIA H100 80GB HBM3" is the SXM board,
# "NVIDIA H100 PCIe" and "NVIDIA H100 NVL" the others; the A100's SXM and PCIe boards share their figures. Word
# boundaries keep "NVIDIA L40S" from matching L4, "NVIDIA H20" and "NVIDIA GH200" from matching H200.
_FAMILIES = [
    (re.compile(r"\bH100\b.*\bNVL\b", re.I), "H100 NVL"),
    (re.compile(r"\bH100\b.*\bPCIe\b", re.I), "H100 PCIe"),
    (re.compile(r"\bH100\b", re.I), "H100 SXM"),
    (re.compile(r"\bH200\b.*\bNVL\b", re.I), "H200 NVL"),
    (re.compile(r"\bH200\b", re.I), "H200 SXM"),
    (re.compile(r"\bA100\b", re.I), "A100"),
    (re.compile(r"\bL4\b", re.I), "L4"),
    (re.compile(r"\bT4\b", re.I), "T4"),
]


@dataclass(frozen=True)
class FlopCount:
    """Model FLOPs of one training step, per sample: forward (model and loss) and backward; the module types the
    counter cannot see, counted by formula (``by_formula``) or not counted at all (``not_counted``: see
    :mod:`.uncounted`)."""

    forward: float
    backward: float
    by_formula: tuple[str, ...] = ()
    not_counted: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        """Forward + backward FLOPs per sample."""
        return self.forward + self.backward

    def to_dict(self) -> dict[str, float]:
        return {"forward": self.forward, "backward": self.backward, "total": self.total}


@dataclass(frozen=True)
class Peak:
    """A datasheet's dense peak rate of one GPU family in one precision."""

    family: str
    precision: str
    flops_per_s: float  # FLOP/s, not TFLOP/s
    source: str


def count_flops(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, criterion: nn.Module) -> FlopCount:
    """Model FLOPs per sample of one training step on the batch ``(inputs, targets)``: forward, loss and backward.

    The step runs once, in train mode, on a CPU copy of ``model`` (pass the module inside a
    ``DistributedDataParallel`` wrapper: the wrapper's forward would communicate), so the model, its gradients and
    its buffers (BatchNorm running statistics) are left as they were, and so is the global CPU random number
    generator that dropout would draw from. The copy costs the model's
    size once more in host memory (briefly on the GPU as well, where ``copy.deepcopy`` copies a CUDA model).
    """
    if len(inputs) == 0:
        raise ValueError("count_flops needs a non-empty batch")
    loss_fn = copy.deepcopy(criterion).cpu()  # a loss may hold buffers (class weights) on the model's device
    # clone: a tensor made under inference_mode cannot take part in autograd, its copy can
    x, y = inputs.detach().cpu().clone(), targets.detach().cpu().clone()
    return count_step_flops(model, lambda replica: loss_fn(replica(x), y), len(inputs))


def count_step_flops(model: nn.Module, step: Callable[[nn.Module], torch.Tensor], samples: int) -> FlopCount:
    """Model FLOPs per sample of ``step(model) -> loss`` and its backward, on a batch of ``samples``: what
    :func:`count_flops` counts, for a step of any shape (a workload's own ``training_step``).

    As there, the step runs on a CPU copy of ``model`` in train mode, leaving the model, its gradients and the
    global random number generator as they were; the step's batch must be on the CPU. Recurrent layers, which the
    counter cannot see, are counted by formula, and a layer holding a weight matrix that counted nothing is named
    in ``not_counted`` (:mod:`.uncounted`).
    """
    if samples < 1:
        raise ValueError("count_step_flops needs a non-empty batch")
    replica = copy.deepcopy(model).cpu().train()
    replica.zero_grad(set_to_none=True)  # gradients the original carried are not needed by the copy
    with torch.random.fork_rng(devices=[]), torch.enable_grad():
        with FlopCounterMode(display=False) as counter, watching(replica, counter) as watch:
            loss = step(replica)
        forward = counter.get_total_flops() + watch.forward  # what the counter cannot see, counted by formula
        backward = 0.0
        if loss.requires_grad:  # a fully frozen model has no backward to count
            with FlopCounterMode(display=False) as counter:
                loss.backward()
            backward = counter.get_total_flops() + watch.backward
    return FlopCount(
        forward=forward / samples,
        backward=backward / samples,
        by_formula=tuple(sorted(watch.by_formula)),
        not_counted=tuple(sorted(watch.not_counted)),
    )


def datasheet_peak(device_name: str, precision: str) -> Peak | None:
    """The dense datasheet peak of the GPU named ``device_name`` (as ``torch.cuda.get_device_name`` reports it).

    None for a device :data:`PEAKS` does not know (any CPU), for a precision that GPU lacks, and for a MIG slice
    (a name with "MIG"), which has only part of the GPU's compute.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if re.search(r"\bMIG\b", device_name):
        return None
    family = next((family for pattern, family in _FAMILIES if pattern.search(device_name)), None)
    if family is None:
        return None
    tflops = PEAKS[family]["tflops"].get(precision)
    if tflops is None:
        return None
    return Peak(family=family, precision=precision, flops_per_s=tflops * 1e12, source=PEAKS[family]["source"])


def achieved_flops(flops_per_sample: float, samples_per_s: float) -> float:
    """Model FLOP/s a run achieved: FLOPs per sample x samples per second."""
    return flops_per_sample * samples_per_s


def utilisation(flops_per_sample: float, samples_per_s: float, peak_flops_per_s: float | None) -> float | None:
    """Achieved model FLOP/s over ``peak_flops_per_s`` (a fraction, 1.0 = the peak); None without a peak.

    Throughput and peak must have the same scope: one device's samples per second against one device's peak.
    """
    if peak_flops_per_s is None:
        return None
    if peak_flops_per_s <= 0:
        raise ValueError(f"peak FLOP/s must be positive, got {peak_flops_per_s}")
    return achieved_flops(flops_per_sample, samples_per_s) / peak_flops_per_s


def rank_share(device: torch.device, threads: int, cores: int, ranks_here: int) -> float:
    """The share of its machine's matmul peak a rank is measured against: on a CPU its intra-op ``threads`` out of
    the machine's ``cores``, at most an even share of them among the ``ranks_here`` on the machine (ranks with more
    threads than cores time-slice them); on a GPU its device, whole (1).

    So one process of 2 threads and two of 1 thread on 2 cores are each judged against the whole machine, and read
    the same utilisation at the same total throughput.
    """
    if torch.device(device).type != "cpu":
        return 1.0
    return min(threads, cores / max(ranks_here, 1)) / max(cores, 1)


def utilisation_record(
    count: FlopCount,
    precision: str,
    peak: Peak | None,
    rates: list[MatmulRate | None],
    rank_samples_per_s: list[float],
    shares: list[float] | None = None,
    samples_per_s: float | None = None,
    from_cache: bool = False,
) -> Flops:
    """A run's FLOPs and utilisation as the schema's :class:`~ignite_ddl.core.schema.Flops` (summary.json's
    ``flops``). Per rank, the model FLOP/s it achieved (FLOPs per sample x its own samples per second) against its
    share (``shares``, default 1; :func:`rank_share`) of its machine's matmul peak (``rates``, in rank order:
    :func:`~.peak.measured_peak`) and against the datasheet ``peak``. For the run, its model FLOP/s at its global
    throughput (``samples_per_s``) against the sum of its ranks' references, so that within one workload the
    utilisation orders runs on the same cores as their throughput does (the mean over ranks where the throughput
    is not known). Where ``count`` names modules whose FLOPs were not counted, no utilisation is given: it would
    read low for no reason the figure could say."""
    shares = shares if shares is not None else [1.0] * len(rates)
    counted = not count.not_counted
    ranks: list[FlopsRank] = []
    for rank, (rate, share, rank_rate) in enumerate(zip(rates, shares, rank_samples_per_s)):
        achieved = achieved_flops(count.total, rank_rate) if rank_rate == rank_rate else None  # NaN: not measured
        reference = rate.flops_per_s * share if rate is not None else None
        ranks.append(
            {
                "rank": rank,
                "share": share,
                "achieved_flops_per_s": achieved,
                "attainable_flops_per_s": reference,
                "utilisation_attainable": _ratio(achieved, reference) if counted else None,
                "utilisation_peak": _ratio(achieved, peak.flops_per_s if peak else None) if counted else None,
            }
        )

    def mean(key: Literal["achieved_flops_per_s", "utilisation_attainable", "utilisation_peak"]) -> float | None:
        values = [v for v in (r[key] for r in ranks) if v is not None]
        return statistics.fmean(values) if values else None

    of_machine, of_datasheet = mean("utilisation_attainable"), mean("utilisation_peak")
    references = [r["attainable_flops_per_s"] for r in ranks]
    if counted and samples_per_s is not None and samples_per_s == samples_per_s and ranks:
        run = achieved_flops(count.total, samples_per_s)
        known = all(r is not None for r in references)
        of_machine = _ratio(run, sum(r for r in references if r is not None)) if known else None
        of_datasheet = _ratio(run, len(ranks) * peak.flops_per_s) if peak is not None else None
    first = next((r for r in rates if r is not None), None)
    above = [r["utilisation_attainable"] for r in ranks] + [of_machine]
    return {
        "per_sample": count.to_dict(),
        "by_formula": list(count.by_formula),
        "not_counted": list(count.not_counted),
        "precision": precision,
        "datasheet_peak": dataclasses.asdict(peak) if peak is not None else None,
        "matmul_size": first.size if first is not None else None,
        "machine_peak": _machine_peak(first, from_cache) if first is not None else None,
        "ranks": ranks,
        "achieved_flops_per_s": mean("achieved_flops_per_s"),
        "utilisation_attainable": of_machine,
        "utilisation_peak": of_datasheet,
        "above_measured_peak": any(u is not None and u > 1.0 for u in above),
    }


def _ratio(value: float | None, reference: float | None) -> float | None:
    return value / reference if value is not None and reference else None


def _machine_peak(rate: MatmulRate, from_cache: bool) -> MachinePeak:
    return {
        "flops_per_s": rate.flops_per_s,
        "precision": rate.precision,
        "size": rate.size,
        "threads": rate.threads,
        "tries": rate.tries,
        "stable": rate.stable is not False,
        "from_cache": from_cache,
    }


def format_flops(record: dict[str, Any]) -> str:
    """:func:`utilisation_record`'s figures in one line (the utilisation part by :func:`format_mfu`)."""
    line = (
        f"model FLOPs: {record['per_sample']['total'] / 1e6:.1f} M per sample (forward + backward); achieved "
        f"{record['achieved_flops_per_s'] / 1e9:.1f} GFLOP/s per rank"
    )
    if record.get("by_formula"):
        line += f" (counted by formula: {', '.join(record['by_formula'])})"
    if record.get("not_counted"):
        return f"{line}; FLOPs not counted: {', '.join(record['not_counted'])}, so no utilisation is given"
    peak = record["datasheet_peak"]
    described = format_mfu(
        {
            "precision": record["precision"],
            "of_measured": record["utilisation_attainable"],
            "of_datasheet": record["utilisation_peak"],
            "above_measured_peak": record.get("above_measured_peak", False),  # absent from older summaries
            "datasheet_family": peak["family"] if peak is not None else None,
        },
        reference=peak_words(record.get("machine_peak")),
    )
    return f"{line}, {described}" if described else line


def peak_words(machine: dict[str, Any] | None) -> str:
    """What a run's utilisation is against, in words: "matmul peak of this machine (each rank against its share;
    150.3 GFLOP/s on 2 threads, stable within 3 % after 2 tries, measured now)"."""
    if not machine:
        return "matmul rate measured here"  # a summary before schema 3
    threads = f" on {machine['threads']} threads" if machine.get("threads") else ""
    how = "read from the cache" if machine.get("from_cache") else "measured now"
    tries, within = machine.get("tries", 1), f"{100 * PEAK_TOLERANCE:.0f} %"
    stable = (
        f"stable within {within} after {tries} tries"
        if machine.get("stable", True)
        else f"UNSTABLE: no two successive estimates of {tries} agreed within {within}"
    )
    return (
        f"matmul peak of this machine (each rank against its share; {machine['flops_per_s'] / 1e9:.1f} "
        f"GFLOP/s{threads}, {stable}, {how})"
    )


def mfu(achieved_flops_per_s: float, precision: str, measured: MatmulRate | None, peak: Peak | None) -> dict[str, Any]:
    """A run's achieved FLOP/s against both peaks, each named: ``of_measured`` (the matmul rate measured on this
    device, :func:`~.peak.measured_peak`) and ``of_datasheet`` (:func:`datasheet_peak`; None where no datasheet
    applies, such as a CPU); ``above_measured_peak`` where the first is over 100 %, which no run can truly reach."""
    of_measured = achieved_flops_per_s / measured.flops_per_s if measured is not None else None
    return {
        "precision": precision,
        "achieved_flops_per_s": achieved_flops_per_s,
        "measured_peak_flops_per_s": measured.flops_per_s if measured is not None else None,
        "datasheet_peak_flops_per_s": peak.flops_per_s if peak is not None else None,
        "datasheet_family": peak.family if peak is not None else None,
        "of_measured": of_measured,
        "of_datasheet": achieved_flops_per_s / peak.flops_per_s if peak is not None else None,
        "above_measured_peak": of_measured is not None and of_measured > 1.0,
    }


def format_mfu(record: dict[str, Any], reference: str = "matmul rate measured on this device") -> str:
    """:func:`mfu`'s figures in words, saying which peak is which (``reference``: what the measured one is); a figure
    above the measured peak is flagged, never printed plain. Empty where neither peak is known."""
    parts = []
    of_measured = record["of_measured"]
    if of_measured is not None:
        what = f"the {record['precision']} {reference}"
        if record["above_measured_peak"]:
            parts.append(
                f"FLAGGED: above {what} ({100 * of_measured:.0f} %, impossible: the FLOP count or a timing is off)"
            )
        else:
            parts.append(f"{100 * of_measured:.0f} % of {what}")
    if record["of_datasheet"] is not None and record["datasheet_family"] is not None:
        parts.append(
            f"{100 * record['of_datasheet']:.1f} % of the {record['datasheet_family']} {record['precision']} "
            "datasheet peak"
        )
    return ", ".join(parts)
