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

*Achieved FLOP/s* is FLOPs per sample x samples per second (:func:`achieved_flops`). Divided by a peak it gives
the *utilisation* (:func:`utilisation`, the "model FLOPs utilisation" of large-model papers). Keep both sides on
the same scope: one device's throughput (global throughput / world size) against one device's peak.

Two peaks are on offer. :data:`PEAKS` holds the dense figures of NVIDIA's datasheets (the tensor-core figures
that datasheets print with an asterisk assume 2:4 structured sparsity, which dense training never uses; the
dense rate is half of them) and :func:`datasheet_peak` finds the one for a device name and a precision. The peak
depends on the precision the matmuls run in (:func:`matmul_precision`): an H100 SXM does 67 TFLOP/s in fp32,
494.7 in tf32 and 989.4 in bf16. :func:`attainable_matmul_rate` measures what this machine really reaches on
large square matmuls (its clocks, power limit and BLAS library included); it is the honest ceiling where no
datasheet applies, such as a CPU, and shows how far below the datasheet even an ideal workload stays.

:func:`measured_peak` measures that ceiling once per device name, precision and torch release, with a longer timing,
and keeps it in a JSON cache file the caller names (``benchmarks/gpu_check.py`` keeps it in its output directory):
a later call on the same device reads it back instead of measuring again. :func:`mfu` and :func:`format_mfu` put a
run's achieved FLOP/s beside both peaks, each named: the datasheet's and the one measured here. A run cannot do more
arithmetic than the machine's own largest matmul does, so a figure above 100 % of the measured peak is flagged
(``above_measured_peak``), never printed as a plain percentage: the FLOP count or one of the two timings is off.

Example:
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    >>> inputs, targets = torch.randn(16, 8), torch.randint(0, 2, (16,))
    >>> flops = count_flops(model, inputs, targets, nn.CrossEntropyLoss())
    >>> flops.forward, flops.backward  # forward 2*(8*4 + 4*2); backward adds layer 2's input gradient 2*4*2
    (80.0, 96.0)
    >>> matmul_precision(torch.device("cpu"), "none")
    'fp32'
    >>> peak = datasheet_peak("NVIDIA H100 80GB HBM3", "bf16")
    >>> peak.family, peak.flops_per_s
    ('H100 SXM', 989400000000000.0)
    >>> round(utilisation(6e9, 50_000, peak.flops_per_s), 3)  # 6 GFLOPs per sample at 50k samples/s per GPU
    0.303
    >>> print(datasheet_peak("Intel(R) Xeon(R) CPU @ 2.20GHz", "fp32"))
    None
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import re
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ignite_ddl.core.environment import device_info
from ignite_ddl.core.schema import Flops, FlopsRank

__all__ = [
    "PEAKS",
    "FlopCount",
    "MatmulRate",
    "Peak",
    "achieved_flops",
    "attainable_matmul_rate",
    "count_flops",
    "count_step_flops",
    "datasheet_peak",
    "format_flops",
    "format_mfu",
    "matmul_precision",
    "measured_peak",
    "mfu",
    "utilisation",
    "utilisation_record",
]

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

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

_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class FlopCount:
    """Model FLOPs of one training step, per sample: forward (model and loss) and backward."""

    forward: float
    backward: float

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


@dataclass(frozen=True)
class MatmulRate:
    """The matrix-multiply rate this machine attained: median over ``repetitions`` square matmuls of ``size``."""

    precision: str
    size: int
    repetitions: int
    flops_per_s: float
    dtype: str


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
    global random number generator as they were; the step's batch must be on the CPU.
    """
    if samples < 1:
        raise ValueError("count_step_flops needs a non-empty batch")
    replica = copy.deepcopy(model).cpu().train()
    replica.zero_grad(set_to_none=True)  # gradients the original carried are not needed by the copy
    with torch.random.fork_rng(devices=[]), torch.enable_grad():
        with FlopCounterMode(display=False) as counter:
            loss = step(replica)
        forward = counter.get_total_flops()
        backward = 0
        if loss.requires_grad:  # a fully frozen model has no backward to count
            with FlopCounterMode(display=False) as counter:
                loss.backward()
            backward = counter.get_total_flops()
    return FlopCount(forward=forward / samples, backward=backward / samples)


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


def _cuda_tf32_enabled() -> bool:
    matmul = torch.backends.cuda.matmul
    try:
        return bool(matmul.allow_tf32)
    except RuntimeError:
        # torch >= 2.9 refuses to read the legacy flag once it disagrees with the newer per-backend setting
        # (``fp32_precision``, set directly); the newer one is what the legacy flag reports when they agree
        return matmul.fp32_precision == "tf32"


@contextlib.contextmanager
def _cuda_tf32(enabled: bool) -> Iterator[None]:
    """TF32 for CUDA matmuls on (or off) inside the block; both the legacy and the newer setting are restored."""
    if _cuda_tf32_enabled() == enabled:
        yield  # touch nothing: rewriting a setting can change what another API reads back
        return
    matmul = torch.backends.cuda.matmul
    new_api = getattr(matmul, "fp32_precision", None)  # torch >= 2.9
    try:
        legacy = torch.get_float32_matmul_precision()
    except RuntimeError:
        legacy = None  # the two already disagree; changing the newer one makes them agree for the duration
    if legacy is None:
        matmul.fp32_precision = "tf32" if enabled else "ieee"
    else:
        matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        if legacy is not None:
            torch.set_float32_matmul_precision(legacy)  # "medium" as well as "high": allow_tf32 cannot say which
        if new_api is not None:
            matmul.fp32_precision = new_api


def matmul_precision(device: torch.device, amp: str) -> str:
    """The precision a run's matmuls use: the autocast dtype with ``amp`` "bf16"/"fp16"; with "none", "tf32" on
    CUDA where TF32 is allowed for matmuls (``torch.backends.cuda.matmul.allow_tf32``) and "fp32" otherwise."""
    if amp in ("bf16", "fp16"):
        return amp
    if amp != "none":
        raise ValueError(f"unknown amp mode {amp!r}: expected none, bf16 or fp16")
    if torch.device(device).type == "cuda":
        return "tf32" if _cuda_tf32_enabled() else "fp32"
    return "fp32"


def attainable_matmul_rate(
    device: torch.device, precision: str, size: int | None = None, seconds: float = 0.25
) -> MatmulRate | None:
    """This machine's attainable matrix-multiply rate in ``precision``: the median FLOP/s of square matmuls.

    ``size`` x ``size`` matmuls (default 1024 on CPU, 8192 on CUDA: large enough to keep every core busy) run
    once to warm up (thread pools, cuBLAS handles and heuristics) and then again until ``seconds`` have passed,
    at least 3 times; each one counts 2 * size**3 FLOPs. On CUDA the device is synchronised before each clock
    reading, since kernels run asynchronously, and TF32 is switched on for "tf32" and off for "fp32" for the
    duration only. "tf32" on CPU is a plain float32 matmul. XLA devices are not supported (None): a matmul there
    is traced into a graph whose execution the clock cannot isolate.
    """
    device = torch.device(device)
    if precision not in _DTYPES:
        raise ValueError(f"unknown precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if device.type == "xla":
        return None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"attainable_matmul_rate supports cpu and cuda devices, not {device.type}")
    cuda = device.type == "cuda"
    n = size or (8192 if cuda else 1024)
    dtype = _DTYPES[precision]

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    # a private generator: measuring must not move the run's random stream
    generator = torch.Generator(device=device).manual_seed(0)
    tf32 = _cuda_tf32(precision == "tf32") if cuda else contextlib.nullcontext()
    with tf32, torch.no_grad():
        a = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
        b = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
        out = torch.empty(n, n, device=device, dtype=dtype)
        torch.mm(a, b, out=out)
        sync()
        durations: list[float] = []
        begin = time.perf_counter()
        while len(durations) < 3 or time.perf_counter() - begin < seconds:
            start = time.perf_counter()
            torch.mm(a, b, out=out)
            sync()
            durations.append(time.perf_counter() - start)
    # the median: one repetition slowed by another process or a clock change does not move it
    rate = statistics.median(2.0 * n**3 / max(d, 1e-12) for d in durations)
    return MatmulRate(
        precision=precision,
        size=n,
        repetitions=len(durations),
        flops_per_s=rate,
        dtype=str(dtype).removeprefix("torch."),
    )


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


def utilisation_record(
    count: FlopCount,
    precision: str,
    peak: Peak | None,
    rates: list[MatmulRate | None],
    rank_samples_per_s: list[float],
) -> Flops:
    """A run's FLOPs and utilisation as the schema's :class:`~ignite_ddl.core.schema.Flops` (summary.json's
    ``flops``): per rank, the model FLOP/s it achieved (FLOPs per sample x its own samples per second) against the
    matmul rate it measured (``rates``, in rank order) and against the datasheet ``peak``; then the means over
    ranks."""
    ranks: list[FlopsRank] = []
    for rank, (rate, samples_per_s) in enumerate(zip(rates, rank_samples_per_s)):
        achieved = achieved_flops(count.total, samples_per_s) if samples_per_s == samples_per_s else None  # NaN
        attainable = rate.flops_per_s if rate is not None else None
        ranks.append(
            {
                "rank": rank,
                "achieved_flops_per_s": achieved,
                "attainable_flops_per_s": attainable,
                "utilisation_attainable": achieved / attainable if achieved is not None and attainable else None,
                "utilisation_peak": achieved / peak.flops_per_s if achieved is not None and peak is not None else None,
            }
        )

    def mean(key: Literal["achieved_flops_per_s", "utilisation_attainable", "utilisation_peak"]) -> float | None:
        values = [v for v in (r[key] for r in ranks) if v is not None]
        return statistics.fmean(values) if values else None

    first = next((r for r in rates if r is not None), None)
    return {
        "per_sample": count.to_dict(),
        "precision": precision,
        "datasheet_peak": dataclasses.asdict(peak) if peak is not None else None,
        "matmul_size": first.size if first is not None else None,
        "ranks": ranks,
        "achieved_flops_per_s": mean("achieved_flops_per_s"),
        "utilisation_attainable": mean("utilisation_attainable"),
        "utilisation_peak": mean("utilisation_peak"),
        "above_measured_peak": any(
            r["utilisation_attainable"] is not None and r["utilisation_attainable"] > 1.0 for r in ranks
        ),
    }


def format_flops(record: dict[str, Any]) -> str:
    """:func:`utilisation_record`'s figures in one line (the utilisation part by :func:`format_mfu`)."""
    line = (
        f"model FLOPs: {record['per_sample']['total'] / 1e6:.1f} M per sample (forward + backward); achieved "
        f"{record['achieved_flops_per_s'] / 1e9:.1f} GFLOP/s per rank"
    )
    peak = record["datasheet_peak"]
    described = format_mfu(
        {
            "precision": record["precision"],
            "of_measured": record["utilisation_attainable"],
            "of_datasheet": record["utilisation_peak"],
            "above_measured_peak": record.get("above_measured_peak", False),  # absent from older summaries
            "datasheet_family": peak["family"] if peak is not None else None,
        },
        measured_where="measured here",
    )
    return f"{line}, {described}" if described else line


# -- a measured peak, kept per device


PEAK_CACHE_VERSION = 1
MEASURED_PEAK_S = 1.0  # long enough for a stable median on a GPU (hundreds of 8192^3 products) and on a CPU


def _device_key(device: torch.device, precision: str, size: int) -> str:
    """What a measured peak is kept under: device name, precision, matmul size, torch release; on CPU the threads
    too (the rate scales with them)."""
    name = str(device_info(device)["name"])
    threads = f"|threads {torch.get_num_threads()}" if device.type == "cpu" else ""
    return f"{name}|{precision}|{size}|torch {torch.__version__}{threads}"


def _read_peak_cache(path: Path) -> dict[str, Any]:
    """The cache's entries; an unreadable or foreign file counts as empty (it is measured again and replaced)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != PEAK_CACHE_VERSION:
        return {}
    entries = data.get("entries")
    # an entry that is not a record is dropped (the file is rewritten without it)
    return {k: v for k, v in entries.items() if isinstance(v, dict)} if isinstance(entries, dict) else {}


def _cached_rate(entry: Any, precision: str, size: int) -> MatmulRate | None:
    """A cache entry as a MatmulRate, or None when it is not a sound one (wrong types, a non-finite rate)."""
    if not isinstance(entry, dict):
        return None
    try:
        rate = MatmulRate(
            precision=str(entry["precision"]),
            size=int(entry["size"]),
            repetitions=int(entry["repetitions"]),
            flops_per_s=float(entry["flops_per_s"]),
            dtype=str(entry["dtype"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    sound = rate.precision == precision and rate.size == size and rate.repetitions >= 3
    return rate if sound and math.isfinite(rate.flops_per_s) and rate.flops_per_s > 0 else None


def measured_peak(
    device: torch.device,
    precision: str,
    cache: str | Path | None = None,
    size: int | None = None,
    seconds: float = MEASURED_PEAK_S,
) -> tuple[MatmulRate | None, bool]:
    """The device's achievable matmul rate in ``precision`` (:func:`attainable_matmul_rate`, timed for
    ``seconds``), measured once: ``(rate, from_cache)``.

    ``cache`` is a JSON file (the caller's to place: ``benchmarks/gpu_check.py`` keeps ``matmul_peak.json`` in its
    output directory). A figure kept there for the same device name, precision, size and torch release (and, on a
    CPU, thread count) is read back instead of measured; otherwise the rate is measured and added to the file.
    Nothing in the file is executed or unpickled; an entry that is not a sound figure is measured again.
    """
    device = torch.device(device)
    n = size or (8192 if device.type == "cuda" else 1024)
    path = Path(cache) if cache is not None else None
    key = _device_key(device, precision, n) if device.type in ("cpu", "cuda") else ""
    entries = _read_peak_cache(path) if path is not None else {}
    cached = _cached_rate(entries.get(key), precision, n) if key else None
    if cached is not None:
        return cached, True
    rate = attainable_matmul_rate(device, precision, size=n, seconds=seconds)
    if rate is not None and path is not None:
        entries[key] = dataclasses.asdict(rate) | {"device": str(device_info(device)["name"])}
        path.write_text(json.dumps({"version": PEAK_CACHE_VERSION, "entries": entries}, indent=2) + "\n")
    return rate, False


def mfu(achieved_flops_per_s: float, precision: str, measured: MatmulRate | None, peak: Peak | None) -> dict[str, Any]:
    """A run's achieved FLOP/s against both peaks, each named: ``of_measured`` (the matmul rate measured on this
    device, :func:`measured_peak`) and ``of_datasheet`` (:func:`datasheet_peak`; None where no datasheet applies,
    such as a CPU); ``above_measured_peak`` where the first is over 100 %, which no run can truly reach."""
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


def format_mfu(record: dict[str, Any], measured_where: str = "measured on this device") -> str:
    """:func:`mfu`'s figures in words, saying which peak is which; a figure above the measured peak is flagged,
    never printed plain. Empty where neither peak is known."""
    parts = []
    of_measured = record["of_measured"]
    if of_measured is not None:
        what = f"the {record['precision']} matmul rate {measured_where}"
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
