"""The report's FLOPs table and what its MFU is against: model FLOPs per sample, what each rank achieved, and the
model FLOPs utilisation (MFU) of each configuration, each rank against its share of its machine's matmul peak
(:func:`~ignite_ddl.measure.flops.utilisation_record`); where FLOPs were not counted, which layers, never a low
figure."""

from __future__ import annotations

from typing import Any

from ignite_ddl.report.model import Analysis, ConfigResult
from ignite_ddl.report.stats import positive_range

__all__ = ["flops_rows", "flops_text"]


def flops_text(analysis: Analysis, units: bool) -> str:
    """The note above the table: what its columns are (``units``: whether it has the units/s column) and what MFU
    is against."""
    # The units/s column is dropped where no configuration has a unit of its own: no word on it then.
    text = "Model FLOPs (forward + backward) and what each rank achieved" + (
        "; units/s is the global throughput in the workload's own unit (tokens for the GPT workload), with its "
        "interval. "
        if units
        else ". "
    )
    return text + _references(analysis)


def _units_cell(c: ConfigResult) -> str | None:
    """Global throughput in a workload's own unit (the GPT's tokens), with its interval: samples/s times the units
    in one sample; None where the unit is the sample itself."""
    info = c.workload_info or {}
    unit, per = info.get("sample_unit"), info.get("units_per_sample")
    if not isinstance(unit, str) or not isinstance(per, int) or (unit == "samples" and per == 1):
        return None
    e = c.throughput.scaled(per)
    if e.value is None:
        return None
    return f"{e.value:.0f} {unit}/s" + (f", {positive_range(e)}" if e.has_interval else "")


def flops_rows(analysis: Analysis) -> tuple[list[str], list[list[Any]]]:
    """The FLOPs table, every column (the caller drops those no configuration has a figure for)."""
    header = ["config", "units/s", "MFLOPs per sample", "GFLOP/s per rank", "MFU %", "% of datasheet peak"]
    rows = [
        [
            c.name,
            _units_cell(c),
            c.flops_per_sample / 1e6,
            None if c.achieved_flops_per_s is None else c.achieved_flops_per_s / 1e9,
            _measured_share(c),
            None if c.utilisation_peak is None else 100 * c.utilisation_peak,
        ]
        for c in analysis.configs
        if c.flops_per_sample is not None
    ]
    return header, rows


def _measured_share(c: ConfigResult) -> float | str | None:
    """A configuration's MFU in percent; above 100 % (no step can do more arithmetic than the machine's own largest
    matmul) flagged in words, never a plain figure; where FLOPs were not counted, which, never a low figure."""
    if c.flops_not_counted:
        return "FLOPs not counted: " + ", ".join(c.flops_not_counted)
    fraction = c.utilisation_attainable
    if fraction is None:
        return None
    return 100 * fraction if fraction <= 1.0 else f"flagged: {100 * fraction:.0f}"


def _references(analysis: Analysis) -> str:
    """What "MFU %" is against, in words: each rank's share of its machine's measured matmul peak (named, with how
    it was measured), the configurations that left cores unused, what was counted by formula; for runs before
    schema 3, the one matmul rate per device they are against."""
    said = []
    peaks = {_where(c): c for c in analysis.configs if c.machine_peak is not None}
    if peaks:
        named = "; ".join(
            f"{where}: {c.machine_peak / 1e9:.1f} GFLOP/s" + ("" if c.machine_peak_stable else " (unstable)")
            for where, c in peaks.items()
            if c.machine_peak is not None
        )
        said.append(
            "MFU % is each run's model FLOP/s against the matmul peak of the part of the machine its ranks had: the "
            "machine's peak, measured once for the sweep (square matmuls on all its cores, repeated until two "
            f"successive estimates agree within 3 %; {named}), times each rank's share of it (on a CPU its threads "
            "out of the cores; on a GPU its device). One process of 2 threads and two of 1 thread on 2 cores are "
            "judged against the same peak, so within a workload MFU orders configurations on the same cores as "
            "their throughput does."
        )
    partial = [c for c in analysis.configs if c.machine_peak is not None and _cores_used(c) is not None]
    if partial:
        said.append(
            "; ".join(f"{c.name} used {_cores_used(c)} of {c.cpu_cores} cores" for c in partial)
            + ": MFU is against the cores used (it says how well they were used; throughput, how fast)."
        )
    formula = sorted({name for c in analysis.configs for name in c.flops_by_formula})
    if formula:
        said.append(f"FLOPs of {', '.join(formula)} (which the FLOP counter cannot see) are counted by formula.")
    old = {_where(c): c.matmul_reference for c in analysis.configs if c.matmul_reference is not None}
    if old:
        rates = "; ".join(f"{device}: {rate / 1e9:.1f} GFLOP/s" for device, rate in old.items())
        said.append(
            "Runs before schema 3 measured their own matmul rate: their MFU % is against one reference per device, "
            f"the same for every row: the highest matmul rate any run of the sweep measured on it ({rates})."
        )
    return " ".join(said)


def _where(c: ConfigResult) -> str:
    return (c.device_type or "?") + (f" ({c.environment})" if c.environment else "")


def _cores_used(c: ConfigResult) -> int | None:
    """The cores a CPU configuration's ranks had on each machine, where fewer than it has (None otherwise)."""
    per_node = c.config.get("nproc_per_node") or 1
    if c.device_type != "cpu" or not c.cpu_cores or not c.threads_per_process or not isinstance(per_node, int):
        return None
    used = min(per_node * c.threads_per_process, c.cpu_cores)
    return used if used < c.cpu_cores else None
