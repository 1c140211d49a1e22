"""Where time is lost, per configuration, and what to try: data wait, exposed communication, a rank others wait
for, a straggler, poor scaling."""

from __future__ import annotations

from ignite_ddl.core.text import all_reduce_wait
from ignite_ddl.report.model import (
    COMM_WAIT_HIGH,
    DATA_WAIT_HIGH,
    EFFICIENCY_LOW,
    EXPOSED_COMM_HIGH,
    STRAGGLER_HIGH,
    Analysis,
)

__all__ = ["notes"]


def notes(analysis: Analysis) -> list[str]:
    """Where time is lost, per configuration, and what to try."""
    found = []
    for config in analysis.configs:
        if config.data_share is not None and config.data_share > DATA_WAIT_HIGH:
            found.append(
                f"{config.name}: data wait {100 * config.data_share:.0f}% of each iteration -> raise "
                f"num_workers (now {config.option('num_workers')}) or make loading cheaper"
            )
        if config.exposed_share is not None and config.exposed_share > EXPOSED_COMM_HIGH:
            overlap = f", {100 * config.overlap:.0f} % of it overlapped" if config.overlap is not None else ""
            found.append(
                f"{config.name}: exposed communication is {100 * config.exposed_share:.0f} % of the step{overlap} "
                f"-> larger buckets (--bucket-cap-mb, now {config.option('bucket_cap_mb'):g}), "
                "gradient accumulation, or a larger batch per rank so that compute hides the all-reduce"
            )
        wait = config.comm_wait
        if wait and wait["share"] > COMM_WAIT_HIGH:
            found.append(
                f"{config.name}: {all_reduce_wait(wait['waiting'], wait['wait_s'], wait['rank'])} "
                f"({100 * wait['share']:.0f} % of the step) -> look at what rank {wait['rank']} does "
                "differently before backward (its data, its device, other work on its cores)"
            )
        straggler = config.straggler
        if straggler and straggler["ratio"] > STRAGGLER_HIGH:
            found.append(
                f"{config.name}: rank {straggler['rank']} is a straggler (own time {straggler['ratio']:.2f}x "
                "the median rank's) -> look at its data loading, its device, or other work on its cores"
            )
        efficiency = config.efficiency
        if efficiency is None or efficiency.value is None or config.world_size < 2:
            continue
        if efficiency.value >= EFFICIENCY_LOW:
            continue
        cores = config.cpu_cores or (analysis.meta.get("host") or {}).get("cpu_cores")
        per_node = config.config.get("nproc_per_node") or 1
        threads = config.threads_per_process or 1
        base = analysis.config(config.baseline) if config.baseline else None
        base_threads = base.threads_per_process if base else None
        on_cpu = config.device_type == "cpu"
        if on_cpu and cores and per_node * threads > cores:
            found.append(
                f"{config.name}: {per_node} processes x {threads} threads on {cores} cores is "
                f"oversubscribed (efficiency {efficiency.value:.2f}) -> at most {cores} processes here"
            )
        elif on_cpu and cores and base_threads and base_threads >= cores:
            found.append(
                f"{config.name}: efficiency {efficiency.value:.2f}: the 1-process run already kept all "
                f"{cores} cores busy with {base_threads} intra-op threads, so more processes add "
                "communication, not compute"
            )
        else:
            found.append(
                f"{config.name}: scaling efficiency {efficiency.value:.2f} -> communication and "
                "per-process overhead dominate; try a larger batch per rank"
            )
    return found
