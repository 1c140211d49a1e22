"""Collectives: what each ``ignite.distributed`` collective gives every rank, checked against what it must give,
and (``--bench``) how fast all_reduce, all_gather and broadcast move data.

What it teaches: data-parallel training is built from a few collectives. Each rank starts from its own value
(rank + 1): ``all_reduce`` leaves every rank the same reduction of all of them, ``all_gather`` everyone's values in
rank order, ``broadcast`` one rank's value; ``barrier`` holds the early ranks until the last one arrives and
``one_rank_only`` runs a function on one rank. ``idist.broadcast`` (ignite 0.5.5) sends numbers as float32 and
refuses arbitrary objects, which ``all_gather`` pickles. The benchmark reports nccl-tests' figures: algbw = bytes /
time, and busbw = algbw x the share of the data each rank must pass on (all_reduce 2(N-1)/N, all_gather (N-1)/N,
broadcast 1), comparable across process counts and with the link's bandwidth.

Example:
    >>> result = run(backend="gloo", nproc_per_node=2)
    >>> [row["all_reduce SUM"] for row in result["rows"]], all(c["ok"] for c in result["checks"])
    ([3.0, 3.0], True)
"""

from __future__ import annotations

import argparse
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypedDict, cast

import ignite.distributed as idist
import torch

from ignite_ddl.core.collectives import allreduce_bus_factor
from ignite_ddl.core.config import LaunchOptions
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import Role, option, option_like
from ignite_ddl.core.text import format_table
from ignite_ddl.labs import Check, LabLaunchOptions, LabResult, at_least, check, format_checks, lab_logs
from ignite_ddl.launcher.settings import LaunchSettings
from ignite_ddl.launcher.spawn import launch
from ignite_ddl.measure.clock import device_synchronizer
from ignite_ddl.measure.gather import gather_objects

__all__ = [
    "BARRIER_DELAY_S",
    "BENCH_COLLECTIVES",
    "CLAIM",
    "HELP",
    "NAME",
    "BandwidthRow",
    "BenchResult",
    "CheckResult",
    "OpBuilders",
    "Options",
    "Result",
    "bandwidth_rows",
    "format_result",
    "format_size",
    "message_sizes",
    "parse_size",
    "run",
    "time_collectives",
]

NAME = "collectives"
HELP = "run idist's collectives on every rank and check each result (--bench: measure their bandwidth)"
CLAIM = (
    "each idist collective gives every rank the value it must; with --bench, time, algbw and busbw follow "
    "nccl-tests' definitions"
)

_REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX")
BARRIER_DELAY_S = 0.2  # how late the last rank reaches the barrier: the others must wait that long

# What one rank got from each collective, keyed "<collective> <what was sent>" (``all_reduce SUM``, ``broadcast str``:
# the keys of _expected), with its rank, its input, its barrier times and whether one_rank_only ran on it.
CollectiveRow = dict[str, Any]


class _Gathered(TypedDict):
    backend: str
    device: str
    rows: list[CollectiveRow]  # one per rank


class CheckResult(_Gathered, LabResult):
    lab: str
    mode: Literal["check"]
    world_size: int


class BandwidthRow(TypedDict):
    """One collective at one message size, as nccl-tests reports it."""

    collective: str
    size: int  # the message size asked for
    bytes: int  # bytes moved per call (all_gather: the gathered total)
    time_s: float  # mean over ranks of the seconds per call
    time_max_s: float  # the slowest rank's
    algbw_GBps: float  # bytes / time
    busbw_GBps: float  # algbw x the share each rank passes on


class _Timed(TypedDict):
    backend: str | None
    device: str
    seconds: list[list[float]]  # per rank, per size and collective


class BenchResult(LabResult):
    lab: str
    mode: Literal["bench"]
    backend: str | None
    device: str
    world_size: int
    warmup: int
    iters: int
    rows: list[BandwidthRow]


Result = CheckResult | BenchResult

# -- checking what each collective returns


def _word(rank: int) -> str:
    return f"rank{rank}" + "!" * rank  # strings of different lengths: idist pads them to the longest


def _payload(rank: int) -> dict[str, Any]:
    return {"rank": rank, "squares": [i * i for i in range(rank + 1)]}  # nested, of a size that depends on the rank


def _number(rank: int) -> float:
    return (rank + 1) / 3  # not exact in float32, so the rounding of idist.broadcast shows


def _broadcast_object(obj: Any, src: int) -> tuple[Any, str]:
    """``obj`` of rank ``src`` on every rank, and how it was sent.

    ``idist.broadcast`` (ignite 0.5.5) takes tensors, numbers, str and Path only and raises TypeError for anything
    else, on every rank, before any communication; ``all_gather`` pickles any object, so take ``src``'s entry.
    """
    try:
        return idist.broadcast(obj, src=src, safe_mode=True), "idist.broadcast"
    except TypeError as e:
        return gather_objects(obj)[src], f"idist.all_gather(obj)[src] (idist.broadcast: {e})"


def _collectives_rank(local_rank: int) -> _Gathered:
    rank, world, device = idist.get_rank(), idist.get_world_size(), idist.device()
    value, src = rank + 1, world - 1  # broadcast from the last rank: any rank can be the source
    row: CollectiveRow = {"rank": rank, "input": value}
    # idist's collectives are typed for every kind of input they take; given a tensor, they return one.
    for op in _REDUCE_OPS:
        total = idist.all_reduce(torch.tensor(float(value), device=device), op=op)
        row[f"all_reduce {op}"] = cast(torch.Tensor, total).item()
    gathered = idist.all_gather(torch.full((2,), float(value), device=device))
    row["all_gather tensor"] = cast(torch.Tensor, gathered).tolist()
    row["all_gather number"] = idist.all_gather(value)
    row["all_gather str"] = idist.all_gather(_word(rank))
    row["all_gather object"] = gather_objects(_payload(rank))
    # A tensor needs a buffer of the same shape and dtype on the other ranks; with safe_mode they may pass None.
    buffer = torch.arange(3.0, device=device) + value if rank == src else torch.empty(3, device=device)
    row["broadcast tensor"] = cast(torch.Tensor, idist.broadcast(buffer, src=src)).tolist()
    row["broadcast number"] = idist.broadcast(_number(rank) if rank == src else None, src=src, safe_mode=True)
    row["broadcast str"] = idist.broadcast(_word(rank) if rank == src else None, src=src, safe_mode=True)
    row["broadcast object"], row["broadcast object via"] = _broadcast_object(_payload(rank), src)

    idist.barrier()  # everyone starts the barrier test together, then the last rank comes late
    if rank == src:
        time.sleep(BARRIER_DELAY_S)
    row["barrier arrived"] = time.time()  # one clock for all ranks of a node
    idist.barrier()
    row["barrier left"] = time.time()

    ran: list[int] = []
    idist.one_rank_only(with_barrier=True)(lambda: ran.append(rank))()
    row["one_rank_only ran"] = bool(ran)
    return {"backend": idist.backend() or "none", "device": str(device), "rows": gather_objects(row)}


def _expected(world: int) -> dict[str, Any]:
    src, values = world - 1, range(1, world + 1)
    return {
        "all_reduce SUM": float(sum(values)),
        "all_reduce PRODUCT": float(math.prod(values)),
        "all_reduce MIN": 1.0,
        "all_reduce MAX": float(world),
        "all_gather tensor": [float(v) for v in values for _ in range(2)],
        "all_gather number": list(values),
        "all_gather str": [_word(r) for r in range(world)],
        "all_gather object": [_payload(r) for r in range(world)],
        "broadcast tensor": [float(src + 1 + i) for i in range(3)],
        "broadcast number": _number(src),
        "broadcast str": _word(src),
        "broadcast object": _payload(src),
    }


def _same(got: Any, expected: Any) -> bool:
    if isinstance(expected, float):
        return math.isclose(got, expected, rel_tol=1e-6)  # float32 on the wire: N! is exact only while small
    return got == expected


def _collective_checks(rows: list[CollectiveRow]) -> list[Check]:
    world = len(rows)
    checks = []
    for key, expected in _expected(world).items():
        got = [row[key] for row in rows]
        wrong = [f"rank {r}: {g!r}" for r, g in enumerate(got) if not _same(g, expected)]
        detail = f"every rank got {got[0]!r}" if not wrong else f"expected {expected!r}; " + ", ".join(wrong)
        if key == "broadcast number":
            detail += f", rank {world - 1} sent {expected!r} (ignite sends numbers as float32)"
        elif key == "broadcast object":
            detail += f", sent with {rows[0]['broadcast object via']}"
        what = f"rank {world - 1}'s value" if key.startswith("broadcast") else "the expected result"
        checks.append(check(f"{key} gives every rank {what}", not wrong, detail))
    arrived, left = max(row["barrier arrived"] for row in rows), min(row["barrier left"] for row in rows)
    waits = ", ".join(f"{(row['barrier left'] - row['barrier arrived']) * 1e3:.0f}" for row in rows)
    checks.append(
        check(
            "barrier: no rank leaves before the last one arrives",
            left >= arrived,
            f"last rank came {BARRIER_DELAY_S * 1e3:.0f} ms late; waits per rank (ms): {waits}",
        )
    )
    ran = [row["rank"] for row in rows if row["one_rank_only ran"]]
    checks.append(check("one_rank_only: exactly one rank (rank 0) ran the function", ran == [0], f"ran on {ran}"))
    return checks


# -- bandwidth: the timing loop and the figures, shared with benchmarks/collectives.py

BENCH_COLLECTIVES = ("all_reduce", "all_gather", "broadcast")
_ELEMENT = torch.float32
# nccl-tests' bus bandwidth factors: the share of the message each rank must send over its link.
_BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": allreduce_bus_factor,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
# Every op builder takes the rank's input tensor and returns the call to time.
OpBuilders = Mapping[str, Callable[[torch.Tensor], Callable[[], Any]]]
_IDIST_OPS: OpBuilders = {
    "all_reduce": lambda t: partial(idist.all_reduce, t),
    "all_gather": lambda t: partial(idist.all_gather, t),
    "broadcast": lambda t: partial(idist.broadcast, t, src=0),
}

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """A message size in bytes from ``1024``, ``64K``, ``64M``, ``1G`` (binary units; ``KB``, ``KiB`` also read).

    >>> parse_size("64M"), parse_size("1KiB"), parse_size("512")
    (67108864, 1024, 512)
    """
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(I?B)?\s*", text.upper())
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 1024, 64K, 64M)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def format_size(nbytes: int) -> str:
    for unit in ("G", "M", "K"):
        if nbytes >= _UNITS[unit] and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return f"{nbytes}B"


def message_sizes(min_size: int, max_size: int) -> list[int]:
    """Powers of 4 times ``min_size`` up to ``max_size``, which is always the last one."""
    sizes = [min_size]
    while sizes[-1] * 4 < max_size:
        sizes.append(sizes[-1] * 4)
    return sizes if sizes[-1] == max_size else [*sizes, max_size]


def _message_numel(collective: str, size: int, world: int) -> int:
    """Elements of each rank's input: for all_gather ``size`` is the gathered total (nccl-tests' convention)."""
    return size // (_ELEMENT.itemsize * (world if collective == "all_gather" else 1))


def _moved_bytes(collective: str, numel: int, world: int) -> int:
    return numel * _ELEMENT.itemsize * (world if collective == "all_gather" else 1)


def time_collectives(
    ops: OpBuilders,
    sizes: Sequence[int],
    world: int,
    device: torch.device,
    barrier: Callable[[], None],
    warmup: int,
    iters: int,
) -> list[float]:
    """Seconds per call on this rank, for each size and collective in that order (a collective loop: every rank).

    Each measurement starts with all ranks released by one barrier after the warm-up calls, times ``iters``
    back-to-back calls and waits for the device before reading the clock.
    """
    # launch=True: on XLA, work the collective left pending is launched and waited for too
    sync = device_synchronizer(device, launch=True) or (lambda: None)
    seconds = []
    for size in sizes:
        for collective in BENCH_COLLECTIVES:
            call = ops[collective](torch.zeros(_message_numel(collective, size, world), dtype=_ELEMENT, device=device))
            for _ in range(warmup):
                call()
            sync()
            barrier()
            start = time.perf_counter()
            for _ in range(iters):
                call()
            sync()
            seconds.append((time.perf_counter() - start) / iters)
    return seconds


def bandwidth_rows(sizes: Sequence[int], world: int, per_rank_seconds: Sequence[Sequence[float]]) -> list[BandwidthRow]:
    """One row per (size, collective): bytes, time (mean over ranks, as nccl-tests reports it), algbw, busbw."""
    rows: list[BandwidthRow] = []
    timings = iter(zip(*per_rank_seconds))
    for size in sizes:
        for collective in BENCH_COLLECTIVES:
            ranks = next(timings)
            nbytes = _moved_bytes(collective, _message_numel(collective, size, world), world)
            seconds = sum(ranks) / len(ranks)
            algbw = nbytes / seconds / 1e9
            rows.append(
                {
                    "collective": collective,
                    "size": size,
                    "bytes": nbytes,
                    "time_s": seconds,
                    "time_max_s": max(ranks),
                    "algbw_GBps": algbw,
                    "busbw_GBps": algbw * _BUS_FACTORS[collective](world),
                }
            )
    return rows


def _bench_rank(local_rank: int, sizes: list[int], warmup: int, iters: int) -> _Timed:
    world, device = idist.get_world_size(), idist.device()
    seconds = time_collectives(_IDIST_OPS, sizes, world, device, idist.barrier, warmup, iters)
    return {"backend": idist.backend(), "device": str(device), "seconds": gather_objects(seconds)}


def _bench_checks(rows: list[BandwidthRow], world: int) -> list[Check]:
    bad = [
        _label(r)
        for r in rows
        if not all(math.isfinite(v) and v > 0 for v in (r["time_s"], r["algbw_GBps"], r["busbw_GBps"]))
    ]
    # Recomputed from bytes and time alone, so a slip in units or in the order of the timings shows.
    factor = {c: _BUS_FACTORS[c](world) for c in BENCH_COLLECTIVES}
    inconsistent = [
        _label(r)
        for r in rows
        if not math.isclose(r["busbw_GBps"], r["bytes"] / r["time_s"] / 1e9 * factor[r["collective"]])
    ]
    factors = ", ".join(f"{c} {f:.3g}" for c, f in factor.items())
    return [
        check("time, algbw and busbw are positive and finite", not bad, ", ".join(bad) or f"{len(rows)} rows"),
        check(
            f"busbw = bytes / time x nccl-tests factor ({factors} for N = {world})",
            not inconsistent,
            ", ".join(inconsistent),
        ),
    ]


def _label(row: BandwidthRow) -> str:
    return f"{row['collective']} {format_size(row['size'])}"


# -- the lab interface


@dataclass(frozen=True, kw_only=True)
class Options(LabLaunchOptions):
    nproc_per_node: int = option_like(LaunchOptions, "nproc_per_node", 4, "processes to start")
    bench: bool = option(False, "measure all_reduce, all_gather, broadcast bandwidth", role=Role.MEASUREMENT)
    min_size: int = option(
        1 << 10,
        "smallest message of --bench in bytes: 4096, 64K, 1M, ...",
        parse=parse_size,
        show=format_size,
        metavar="SIZE",
        role=Role.MEASUREMENT,
    )
    max_size: int = option(
        64 << 20,
        "largest message of --bench",
        parse=parse_size,
        show=format_size,
        metavar="SIZE",
        role=Role.MEASUREMENT,
    )
    warmup: int = option(5, "untimed calls before each measurement of --bench", role=Role.MEASUREMENT)
    iters: int = option(20, "timed calls of --bench per size and collective", role=Role.MEASUREMENT)

    def check(self) -> None:
        at_least(1, nproc_per_node=self.nproc_per_node)
        if not self.bench:
            return
        if self.nproc_per_node < 2:
            raise ConfigError("the bandwidth benchmark (bench) needs at least 2 processes: busbw of one process is 0")
        at_least(0, warmup=self.warmup)
        at_least(1, iters=self.iters)
        smallest = _ELEMENT.itemsize * self.nproc_per_node  # all_gather sends min_size / N bytes from each rank
        if not smallest <= self.min_size <= self.max_size:
            raise ConfigError(f"need {smallest} <= min_size <= max_size (an element per rank at least)")


def run(**options: Any) -> Result:
    """Check every collective on ``nproc_per_node`` ranks or, with ``bench=True``, measure their bandwidth.
    ``options``: the fields of :class:`Options`."""
    opts = Options(**options)
    settings = LaunchSettings(
        backend=opts.backend, nproc_per_node=opts.nproc_per_node, log_dir=lab_logs(opts.output_dir)
    )
    if not opts.bench:
        gathered: _Gathered = launch(_collectives_rank, settings)
        checks = _collective_checks(gathered["rows"])
        return {"lab": NAME, "mode": "check", "world_size": len(gathered["rows"]), **gathered, "checks": checks}

    sizes = message_sizes(opts.min_size, opts.max_size)
    result: _Timed = launch(_bench_rank, settings, sizes, opts.warmup, opts.iters)
    world = len(result["seconds"])
    rows = bandwidth_rows(sizes, world, result["seconds"])
    return {
        "lab": NAME,
        "mode": "bench",
        "backend": result["backend"],
        "device": result["device"],
        "world_size": world,
        "warmup": opts.warmup,
        "iters": opts.iters,
        "rows": rows,
        "checks": _bench_checks(rows, world),
    }


def format_result(result: Result) -> str:
    shown = _format_bench(result) if result["mode"] == "bench" else _format_check(result)
    return shown + "\n" + format_checks(result)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ",".join(_short(v) for v in value) + "]"
    return str(value)


_CHECK_COLUMNS = (
    "input",
    *(f"all_reduce {op}" for op in _REDUCE_OPS),
    "all_gather number",
    "broadcast tensor",
    "broadcast number",
    "broadcast str",
)


def _format_check(result: CheckResult) -> str:
    rows = result["rows"]
    cells = [
        [
            str(row["rank"]),
            *(_short(row[c]) for c in _CHECK_COLUMNS),
            "yes" if row["one_rank_only ran"] else "-",
            f"{(row['barrier left'] - row['barrier arrived']) * 1e3:.0f}",
        ]
        for row in rows
    ]
    header = ["rank", *(c.replace("all_reduce ", "") for c in _CHECK_COLUMNS), "one_rank_only", "barrier wait ms"]
    lines = [f"{len(rows)} ranks, backend {result['backend']}, device {result['device']}; input = rank + 1"]
    lines.append(format_table(header, cells))
    lines.append(f"all_gather object (every rank): {rows[0]['all_gather object']}")
    lines.append(f"broadcast object: {rows[0]['broadcast object']} via {rows[0]['broadcast object via']}")
    return "\n".join(lines)


def _format_bench(result: BenchResult) -> str:
    lines = [
        f"{result['world_size']} ranks, backend {result['backend']}, device {result['device']}: "
        f"{result['warmup']} warm-up + {result['iters']} timed calls per size, time = mean over ranks",
        f"{'collective':<11} {'size':>6} {'bytes':>11} {'time us':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}",
    ]
    for row in sorted(result["rows"], key=lambda r: BENCH_COLLECTIVES.index(r["collective"])):  # stable: by size
        lines.append(
            f"{row['collective']:<11} {format_size(row['size']):>6} {row['bytes']:>11} {row['time_s'] * 1e6:>10.1f} "
            f"{row['algbw_GBps']:>11.3f} {row['busbw_GBps']:>11.3f}"
        )
    return "\n".join(lines)
