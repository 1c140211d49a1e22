"""How much of the machine *other* processes used while a run measured: a contended run's numbers say more about
its neighbours than about its configuration.

CPU: all CPUs' busy time from ``/proc/stat`` (steal included: time another virtual machine took) minus the CPU
time of this run's own processes (every rank and its DataLoader workers, from ``/proc/<pid>/stat``), as a share
of the window's CPU capacity. A few percent is background noise; a competing job shows as tens of percent.
GPU: utilisation of this run's GPUs by processes that are not its own, from NVML where ``pynvml`` is installed.

:class:`ForeignLoad` measures one window in one process; :class:`ContentionMonitor` is the Ignite handler the
trainer attaches: it opens the window on every rank when the first measured iteration starts (warm-up excluded)
and closes it when training completes, then combines the ranks of each node.

Example:
    >>> with ForeignLoad() as load:
    ...     _ = sum(range(100_000))
    >>> load.share is None or 0.0 <= load.share <= 1.0
    True
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterable
from typing import Any

from ignite_ddl.core.procfs import children_map, process_tree_pids
from ignite_ddl.core.schema import Contention, NodeContention

__all__ = [
    "ContentionMonitor",
    "ForeignLoad",
    "GpuLoad",
]

CONTENTION_THRESHOLD = 0.10  # default share of the machine others may use before a run counts as contended


def _machine_busy_s() -> float | None:
    """CPU seconds all CPUs of the machine spent busy since boot (None where ``/proc/stat`` is missing)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _proc_stat_cpus() -> int:
    """The CPUs ``/proc/stat`` sums over (all online CPUs, whatever this process's affinity)."""
    try:
        with open("/proc/stat") as f:
            return sum(1 for line in f if line.startswith("cpu") and line[3].isdigit()) or (os.cpu_count() or 1)
    except OSError:
        return os.cpu_count() or 1


def _cpu_s(pid: int) -> float:
    """utime + stime of one live process (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _process_tree_cpu_s(pid: int | None = None) -> float:
    """CPU seconds used by process ``pid`` (default: this one), its live descendants and its reaped children."""
    pid = os.getpid() if pid is None else pid
    if not os.path.isdir("/proc"):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    children = children_map()
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += _cpu_s(current)
        todo.extend(children.get(current, []))
    if pid == os.getpid():  # children that already ended count too (their time moved to RUSAGE_CHILDREN)
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        total += reaped.ru_utime + reaped.ru_stime
    return total


class ForeignLoad:
    """Context manager: the share of the machine's CPU capacity that processes other than ``own`` (default: this
    process and its descendants) used while it was open. ``share`` is None where ``/proc/stat`` is missing."""

    def __init__(self, own: Iterable[int] | None = None):
        self.pids = list(own) if own is not None else [os.getpid()]
        self.share: float | None = None
        self.busy_s = self.own_s = self.window_s = 0.0
        self.cpus = _proc_stat_cpus()

    def _own(self) -> float:
        return sum(_process_tree_cpu_s(pid) for pid in self.pids)

    def start(self) -> ForeignLoad:
        self._busy0, self._own0, self._t0 = _machine_busy_s(), self._own(), time.perf_counter()
        return self

    def elapsed_s(self) -> float:
        """Seconds since :meth:`start`."""
        return time.perf_counter() - self._t0

    def stop(self) -> float | None:
        busy, own, now = _machine_busy_s(), self._own(), time.perf_counter()
        self.window_s = now - self._t0
        if busy is None or self._busy0 is None or self.window_s <= 0:
            return None
        self.busy_s, self.own_s = busy - self._busy0, own - self._own0
        self.share = min(1.0, max(0.0, self.busy_s - self.own_s) / (self.window_s * self.cpus))
        return self.share

    def __enter__(self) -> ForeignLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _combine_nodes(parts: list[dict[str, Any]]) -> Contention:
    """Per-node CPU accounting from every rank's window: the machine's busy time (the mean of what its ranks read)
    minus the sum of the ranks' own CPU time."""
    nodes: dict[int, list[dict[str, Any]]] = {}
    for part in parts:
        nodes.setdefault(part["node"], []).append(part)
    result: list[NodeContention] = []
    for node, ranks in sorted(nodes.items()):
        if any(r["busy_cpu_s"] is None for r in ranks):
            continue
        window = sum(r["window_s"] for r in ranks) / len(ranks)
        busy = sum(r["busy_cpu_s"] for r in ranks) / len(ranks)
        own = sum(r["own_cpu_s"] for r in ranks)
        cpus = ranks[0]["cpus"]
        share = min(1.0, max(0.0, busy - own) / (window * cpus)) if window > 0 else 0.0
        result.append(
            {
                "node": node,
                "cpus": cpus,
                "window_s": window,
                "busy_cpu_s": busy,
                "own_cpu_s": own,
                "foreign_cpu_share": share,
            }
        )
    return {
        "foreign_cpu_share": max((n["foreign_cpu_share"] for n in result), default=None),
        "foreign_gpu_share": max((p["gpu_share"] for p in parts if p.get("gpu_share") is not None), default=None),
        "nodes": result,
    }


class GpuLoad:
    """Utilisation of one CUDA device by processes other than ``own_pids``, from NVML (pynvml), sampled over a
    window: None where NVML is not available."""

    def __init__(self, device_index: int, own_pids: Iterable[int]):
        self.own = set(own_pids)
        self.share: float | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        except Exception:  # no pynvml, no driver, or a device NVML cannot see: nothing to report
            self._nvml = None

    def start(self) -> None:
        self._since = int(time.time() * 1e6)  # NVML timestamps are microseconds since the epoch

    def stop(self) -> float | None:
        if self._nvml is None:
            return None
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(self._handle, self._since)
        except Exception:  # NVML_ERROR_NOT_FOUND: no process used the GPU in the window
            samples = []
        foreign = sum(s.smUtil for s in samples if s.pid not in self.own)
        self.share = min(1.0, foreign / 100.0)
        return self.share


class ContentionMonitor:
    """Ignite handler measuring, on every rank, what other processes used during the measured iterations.

    Attach it to the trainer; after the run, :meth:`gather` (a collective) returns the combined figures
    (schema: :class:`ignite_ddl.core.schema.Contention`), or None if the window never opened.
    """

    def __init__(self, warmup: int, device: Any = None):
        self.warmup = warmup
        self.device = device
        self._load: ForeignLoad | None = None
        self._gpu: GpuLoad | None = None
        self._iterations = 0

    def attach(self, engine: Any) -> ContentionMonitor:
        """Attach after the step recorder and before evaluation handlers: the window then opens between the last
        warm-up iteration and the first measured one, and closes before the final evaluation."""
        from ignite.engine import Events

        if self.warmup == 0:
            engine.add_event_handler(Events.STARTED, self._open)
        else:
            engine.add_event_handler(Events.ITERATION_COMPLETED, self._count)
        engine.add_event_handler(Events.EPOCH_COMPLETED, self._last_epoch)
        engine.add_event_handler(Events.COMPLETED, self._close)
        return self

    def _count(self) -> None:
        # Counted here rather than from engine.state.iteration: a resumed run starts past iteration 0.
        self._iterations += 1
        if self._iterations == self.warmup:
            self._open()

    def _last_epoch(self, engine: Any) -> None:
        if engine.state.epoch == engine.state.max_epochs:
            self._close()

    def _open(self) -> None:
        self._closed = False
        self._load = ForeignLoad().start()
        if self.device is not None and getattr(self.device, "type", None) == "cuda":
            self._gpu = GpuLoad(self.device.index or 0, process_tree_pids(os.getpid()))
            self._gpu.start()

    def _close(self) -> None:
        if self._load is not None and not self._closed:
            self._closed = True
            self._load.stop()
            if self._gpu is not None:
                self._gpu.stop()

    def part(self) -> dict[str, Any]:
        """This rank's measurements."""
        import ignite.distributed as idist

        load = self._load
        measured = load if load is not None and load.share is not None else None
        return {
            "node": idist.get_node_rank(),
            "cpus": load.cpus if load is not None else _proc_stat_cpus(),
            "window_s": measured.window_s if measured is not None else 0.0,
            "busy_cpu_s": measured.busy_s if measured is not None else None,
            "own_cpu_s": measured.own_s if measured is not None else 0.0,
            "gpu_share": self._gpu.share if self._gpu is not None else None,
        }

    def gather(self) -> Contention | None:
        """Collective: the run's contention over all ranks and nodes, as the schema's
        :class:`~ignite_ddl.core.schema.Contention`."""
        from ignite_ddl.measure.gather import gather_objects

        parts = gather_objects(self.part())
        if all(p["busy_cpu_s"] is None for p in parts) and all(p["gpu_share"] is None for p in parts):
            return None
        return _combine_nodes(parts)
