"""Every reason to doubt a number, as flags: contended, diverged, superlinear, high variation, oversubscribed, few
iterations, recompiled, unsettled, above the measured peak, FLOPs not counted, out of memory, does not fit."""

from __future__ import annotations

from typing import Any, cast

from ignite_ddl.report.model import CV_HIGH, FEW_ITERATIONS, MIB, SUPERLINEAR, ConfigResult, Flag
from ignite_ddl.report.stats import Estimate

__all__ = ["doubt_flags", "memory_flags", "superlinear"]


def memory_flags(configs: list[ConfigResult], limit: float | None) -> list[Flag]:
    """A flag for each configuration that ran out of memory, or does not fit ``limit`` (bytes per rank) as measured
    or as predicted."""
    flags = []
    for config in configs:
        if config.out_of_memory:
            flags.append(Flag("out-of-memory", config.name, f"{config.out_of_memory} run(s) ran out of memory"))
        elif not config.fits and limit is not None and config.peak_memory.value is not None:
            if config.peak_memory.value <= limit:  # fits as measured: it was predicted not to
                said = f"predicted peak {cast(float, config.predicted_memory) / MIB:.0f} MiB per rank > the limit"
                flags.append(Flag("does-not-fit", config.name, f"{said} of {limit / MIB:.0f} MiB (run anyway)"))
                continue
            flags.append(
                Flag(
                    "does-not-fit",
                    config.name,
                    f"peak {config.memory_kind} memory {config.peak_memory.value / MIB:.0f} MiB per rank > the "
                    f"limit of {limit / MIB:.0f} MiB",
                )
            )
    return flags


def superlinear(efficiency: Estimate | None) -> bool:
    """Whether an efficiency, as printed (two decimals), is above 1: more than N times one process on N."""
    return efficiency is not None and efficiency.value is not None and round(efficiency.value, 2) > SUPERLINEAR


def doubt_flags(configs: list[ConfigResult], meta: dict[str, Any]) -> list[Flag]:
    """A flag for each reason to doubt a run's or a configuration's figures (``meta``: the sweep's metadata, for
    the host's cores)."""
    flags = []
    cores = (meta.get("host") or {}).get("cpu_cores")
    for config in configs:
        for run in config.runs:
            where = f"repeat {run.repeat + 1}" + (f", re-run {run.attempt}" if run.attempt else "")
            if run.contended:
                share = (
                    "" if run.foreign_cpu_share is None else f": others used {run.foreign_cpu_share:.0%} of the CPUs"
                )
                flags.append(Flag("contended", config.name, f"{where}{share}"))
            if run.diverged:
                flags.append(Flag("diverged", config.name, f"{where}: {run.diverged}"))
        if config.efficiency is not None and superlinear(config.efficiency):
            interval = config.efficiency
            detail = f"efficiency {interval.value:.2f}"
            if interval.has_interval:
                detail += f" ({interval.low:.2f} to {interval.high:.2f})"
            flags.append(Flag("superlinear", config.name, f"{detail} on {config.world_size} processes"))
        cv = config.throughput.cv
        if cv is not None and cv > CV_HIGH:
            flags.append(Flag("high-variation", config.name, f"repeats vary by {cv:.0%} (sd / mean)"))
        node_cores = config.cpu_cores or cores
        per_node = config.config.get("nproc_per_node") or 1
        threads = config.threads_per_process
        if config.device_type == "cpu" and node_cores and threads and per_node * threads > node_cores:
            flags.append(
                Flag("oversubscribed", config.name, f"{per_node} processes x {threads} threads on {node_cores} cores")
            )
        if config.measured_iterations is not None and config.measured_iterations < FEW_ITERATIONS:
            flags.append(Flag("few-iterations", config.name, f"{config.measured_iterations} measured iterations"))
        if config.recompilations:
            flags.append(Flag("recompiled", config.name, _recompile_text(config)))
        if config.unsettled_runs:
            flags.append(Flag("unsettled", config.name, f"{config.unsettled_runs} run(s) never settled"))
        if config.utilisation_attainable is not None and config.utilisation_attainable > 1.0:
            flags.append(
                Flag(
                    "above-measured-peak",
                    config.name,
                    f"{100 * config.utilisation_attainable:.0f} % of the matmul peak measured on its machine",
                )
            )
        if config.flops_not_counted:
            said = ", ".join(config.flops_not_counted)
            flags.append(Flag("flops-not-counted", config.name, f"FLOPs not counted: {said} (no MFU given)"))
    return flags


def _recompile_text(config: ConfigResult) -> str:
    """ "recompiled 3 time(s): shapes changed (...)" for a configuration whose runs recompiled."""
    from ignite_ddl.measure.compilation import recompile_hint  # torch-free module-level code, imported lazily

    hint = recompile_hint(config.recompile_reasons)
    reason = config.recompile_reasons[0] if config.recompile_reasons else "reason not recorded"
    return f"recompiled {config.recompilations} time(s): {hint or reason}" + (f" ({reason})" if hint else "")
