"""What a rank measures while it trains, each piece usable on an engine of one's own: per-step timings
(:mod:`.recorder`), gradient communication per bucket (:mod:`.comm`), model FLOPs and utilisation (:mod:`.flops`;
layers the FLOP counter cannot see, :mod:`.uncounted`), the machine's matmul peak (:mod:`.peak`), the bytes a rank
holds (:mod:`.memory`), what other processes used meanwhile (:mod:`.contention`), Ignite's and PyTorch's profilers
attached the right way (:mod:`.profilers`), the profiler's trace read back as a second clock for the communication
timing (:mod:`.traces`), device-synchronised clocks (:mod:`.clock`) and gathering any object from every rank
(:mod:`.gather`).

Example:
    >>> from ignite_ddl.measure import StepRecorder
    >>> StepRecorder(warmup=2).warmup
    2
"""

from __future__ import annotations

from ignite_ddl.core.exports import lazy_exports

__all__ = [
    "CommTimer",
    "ContentionMonitor",
    "ForeignLoad",
    "StepRecorder",
    "attach_profiler",
    "count_flops",
    "device_synchronizer",
    "format_steps",
    "gather_objects",
    "held_bytes",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CommTimer": "comm",
        "ContentionMonitor": "contention",
        "ForeignLoad": "contention",
        "StepRecorder": "recorder",
        "format_steps": "recorder",
        "attach_profiler": "profilers",
        "count_flops": "flops",
        "device_synchronizer": "clock",
        "gather_objects": "gather",
        "held_bytes": "memory",
    },
)
