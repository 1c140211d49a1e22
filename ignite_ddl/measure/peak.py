"""The machine's matmul peak: what its largest matrix multiplies reach, the reference of a run's utilisation (MFU).

:func:`attainable_matmul_rate` times large square matmuls in a precision (:func:`matmul_precision`: the one a
run's matmuls use) and gives their median rate: the honest ceiling where no datasheet applies, such as a CPU, with
this machine's clocks, power limit and BLAS library included. One such estimate moves with whatever else the machine
does (0.25 s of them ranged 74-146 GFLOP/s between quiet runs on a 2-core VM), so a reference is never one estimate:

- :func:`stable_matmul_rate` estimates again until two successive estimates agree within 3 %
  (:data:`PEAK_TOLERANCE`), at most :data:`PEAK_TRIES` times, and takes the higher of the two; where none agree it
  gives the highest, marked unstable. On a CPU it runs on all the cores the process may use: the machine's peak,
  of which each rank is given its share (``flops.rank_share``).
- :func:`measured_peak` measures that once per machine and keeps it in a JSON cache file the caller names, per
  device name (on a CPU its model, cores and threads), precision, matmul size and torch release. A run keeps it in
  its output folder; a sweep passes its own ``plan/matmul_peak.json`` to every run, so all its configurations are
  judged against one figure.

Example:
    >>> import torch
    >>> matmul_precision(torch.device("cpu"), "none"), matmul_precision(torch.device("cpu"), "bf16")
    ('fp32', 'bf16')
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ignite_ddl.core.environment import cpu_cores, device_info
from ignite_ddl.core.jsonfiles import write_json

__all__ = [
    "PEAK_TOLERANCE",
    "PRECISIONS",
    "MatmulRate",
    "attainable_matmul_rate",
    "matmul_precision",
    "measured_peak",
    "stable_matmul_rate",
]

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class MatmulRate:
    """The matrix-multiply rate this machine attained: median over ``repetitions`` square matmuls of ``size``; as
    :func:`measured_peak` measures it, on ``threads`` CPU threads (None on a GPU), the highest of ``tries``
    estimates, ``stable`` where the last two agreed within :data:`PEAK_TOLERANCE` (None: a single estimate)."""

    precision: str
    size: int
    repetitions: int
    flops_per_s: float
    dtype: str
    threads: int | None = None
    tries: int = 1
    stable: bool | None = None


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


# -- a measured peak, kept per machine


PEAK_CACHE_VERSION = 2
PEAK_TRY_S = 0.2  # one estimate: a median over many matmuls (tens of 1024^3 on a CPU, hundreds of 8192^3 on a GPU)
PEAK_TRIES = 8  # estimates at most, before the figure is recorded as unstable
PEAK_TOLERANCE = 0.03  # two successive estimates this close (relative) make the figure stable


def _device_key(device: torch.device, precision: str, size: int, threads: int | None) -> str:
    """What a measured peak is kept under: the machine (device name; on a CPU its model, cores and the threads
    measured on), precision, matmul size and torch release."""
    name = str(device_info(device)["name"])
    machine = f"{name}|{cpu_cores()} cores|threads {threads}" if threads is not None else name
    return f"{machine}|{precision}|{size}|torch {torch.__version__}"


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
        threads = entry.get("threads")
        rate = MatmulRate(
            precision=str(entry["precision"]),
            size=int(entry["size"]),
            repetitions=int(entry["repetitions"]),
            flops_per_s=float(entry["flops_per_s"]),
            dtype=str(entry["dtype"]),
            threads=None if threads is None else int(threads),
            tries=int(entry["tries"]),
            stable=bool(entry["stable"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    sound = rate.precision == precision and rate.size == size and rate.repetitions >= 3 and rate.tries >= 1
    return rate if sound and math.isfinite(rate.flops_per_s) and rate.flops_per_s > 0 else None


@contextlib.contextmanager
def _cpu_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` inside the block (None: left as they are), restored after."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def stable_matmul_rate(
    device: torch.device,
    precision: str,
    size: int | None = None,
    seconds: float = PEAK_TRY_S,
    threads: int | None = None,
    tries: int = PEAK_TRIES,
) -> MatmulRate | None:
    """The device's matmul rate (:func:`attainable_matmul_rate`, ``seconds`` an estimate), estimated again until two
    successive estimates agree within :data:`PEAK_TOLERANCE`, at most ``tries`` times: the higher of those two (a
    peak: another process only ever lowers a rate), or, where none agreed, the highest estimate, marked unstable.
    On a CPU it runs on ``threads`` (default: all the cores this process may use)."""
    device = torch.device(device)
    threads = (threads or cpu_cores()) if device.type == "cpu" else None
    estimates: list[MatmulRate] = []
    with _cpu_threads(threads):
        while len(estimates) < max(tries, 2):
            rate = attainable_matmul_rate(device, precision, size=size, seconds=seconds)
            if rate is None:
                return None
            estimates.append(rate)
            if len(estimates) >= 2:
                last, before = estimates[-1].flops_per_s, estimates[-2].flops_per_s
                if abs(last - before) <= PEAK_TOLERANCE * max(last, before):
                    best = max(estimates[-2:], key=lambda r: r.flops_per_s)
                    return dataclasses.replace(best, threads=threads, tries=len(estimates), stable=True)
    best = max(estimates, key=lambda r: r.flops_per_s)
    return dataclasses.replace(best, threads=threads, tries=len(estimates), stable=False)


def measured_peak(
    device: torch.device,
    precision: str,
    cache: str | Path | None = None,
    size: int | None = None,
    seconds: float = PEAK_TRY_S,
    threads: int | None = None,
) -> tuple[MatmulRate | None, bool]:
    """The machine's matmul peak in ``precision`` (:func:`stable_matmul_rate`: on a CPU with all its cores, or
    ``threads``), measured once: ``(rate, from_cache)``.

    ``cache`` is a JSON file (the caller's to place: a run keeps ``matmul_peak.json`` in its output folder, a sweep
    in its ``plan/`` folder for all its runs, ``benchmarks/gpu_check.py`` in its output folder). A figure kept
    there for the same machine (device name; on a CPU its model, cores and threads), precision, size and torch
    release is read back instead of measured; otherwise the peak is measured and added to the file (written
    whole, atomically). Nothing in the file is executed or unpickled; an entry that is not a sound figure is
    measured again.
    """
    device = torch.device(device)
    n = size or (8192 if device.type == "cuda" else 1024)
    if device.type == "cpu":
        threads = threads or cpu_cores()
    path = Path(cache) if cache is not None else None
    key = _device_key(device, precision, n, threads) if device.type in ("cpu", "cuda") else ""
    entries = _read_peak_cache(path) if path is not None else {}
    cached = _cached_rate(entries.get(key), precision, n) if key else None
    if cached is not None:
        return cached, True
    rate = stable_matmul_rate(device, precision, size=n, seconds=seconds, threads=threads)
    if rate is not None and path is not None:
        entries[key] = dataclasses.asdict(rate) | {"device": str(device_info(device)["name"])}
        write_json(path, {"version": PEAK_CACHE_VERSION, "entries": entries})
    return rate, False
