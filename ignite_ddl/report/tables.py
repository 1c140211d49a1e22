"""The report's tables of configurations: the decision table first, then one table per topic (timing,
communication, a faster step, FLOPs, memory), each without the columns no configuration has a figure for."""

from __future__ import annotations

from typing import Any

from ignite_ddl.report.analysis import superlinear
from ignite_ddl.report.document import Document, Table
from ignite_ddl.report.model import MIB, Analysis, ConfigResult
from ignite_ddl.report.stats import Estimate, positive_range

__all__ = ["config_tables", "decision_table", "interval_text", "options_text", "rate_text", "ratio_text"]


def rate_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


interval_text = positive_range


def ratio_text(e: Estimate | None) -> str:
    if e is None or e.value is None:
        return "-"
    return f"{e.value:.2f}" + (f" ({interval_text(e, '.2f')})" if e.has_interval and e.low != e.high else "")


def options_text(grid: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in grid.items())


def _mb(nbytes: float | None) -> float | None:
    return None if nbytes is None else nbytes / MIB


def _config_flags(analysis: Analysis, config: ConfigResult) -> str:
    kinds = list(dict.fromkeys(f.kind for f in analysis.flags if f.config == config.name))
    return ", ".join(kinds)


def decision_table(analysis: Analysis) -> Table:
    """What a decision needs, narrow enough for a laptop's screen: the configuration, its throughput with the
    interval, speed-up and efficiency, peak memory per rank, and its flags. The rest is in the detail tables."""
    grid_keys = list(dict.fromkeys(k for c in analysis.configs for k in c.grid))
    several = _workload_column(analysis, grid_keys)
    pct = round(100 * analysis.confidence)
    memory = any(c.peak_memory.value is not None for c in analysis.configs)
    header = [
        "config",
        *grid_keys,
        *(["workload"] if several else []),
        "samples/s",
        f"{pct}% interval",
        "speed-up",
        "efficiency",
        *(["peak memory/rank MiB"] if memory else []),
        "flags",
    ]
    rows = []
    for c in analysis.configs:
        rows.append(
            [
                c.name,
                *[c.grid.get(k) for k in grid_keys],
                *([c.workload] if several else []),
                rate_text(c.throughput.value),
                interval_text(c.throughput),
                ratio_text(c.speedup),
                _efficiency_cell(c),
                *([_memory_cell(c)] if memory else []),
                _config_flags(analysis, c),
            ]
        )
    return header, rows


def _workload_column(analysis: Analysis, grid_keys: list[str]) -> bool:
    """Whether the decision table needs a workload column: several workloads, told apart by something the grid's
    columns do not show (a workload option that is not a grid axis, or runs from different environments)."""
    if len(analysis.verdicts) <= 1:
        return False
    axes = analysis.workload_axes
    varying = {a for a in axes if len({repr(c.config.get(a)) for c in analysis.configs}) > 1}
    by_options = {tuple(repr(c.config.get(a)) for a in axes) for c in analysis.configs}
    return not varying <= set(grid_keys) or len({c.workload for c in analysis.configs}) > len(by_options)


def _efficiency_cell(c: ConfigResult) -> str:
    """Efficiency, never above 1 without its flag beside it (more than N times one process on N is suspect)."""
    text = ratio_text(c.efficiency)
    if superlinear(c.efficiency):
        text += " (superlinear: suspect)"
    if any(r.used and r.contended for r in c.runs):
        text += " (contended)"
    return text


def _memory_cell(c: ConfigResult) -> str:
    e = c.peak_memory
    if e.value is None:
        return "-"
    text = f"{e.value / MIB:.0f}"
    if e.has_interval:
        text += f" ({interval_text(e.scaled(1 / MIB))})"
    return text


def _drop_empty(header: list[str], rows: list[list[Any]], optional: tuple[str, ...]) -> Table:
    """The table without the optional columns no configuration has a figure for."""
    empty = {i for i, h in enumerate(header) if h in optional and all(row[i] is None for row in rows)}
    return [h for i, h in enumerate(header) if i not in empty], [
        [v for i, v in enumerate(r) if i not in empty] for r in rows
    ]


def _timing_table(analysis: Analysis) -> Table:
    header = ["config", "world", "runs", "cv %", "step p50 ms", "step p90 ms", "data wait %", "straggler", "val acc"]
    rows = []
    for c in analysis.configs:
        straggler = c.straggler
        used, total = len(c.samples_per_s), len({r.repeat for r in c.runs})
        cv = c.throughput.cv
        rows.append(
            [
                c.name,
                c.world_size,
                f"{used}/{total}",
                None if cv is None else 100 * cv,
                None if c.step_p50_s is None else 1e3 * c.step_p50_s,
                None if c.step_p90_s is None else 1e3 * c.step_p90_s,
                None if c.data_share is None else 100 * c.data_share,
                f"rank {straggler['rank']} {straggler['ratio']:.2f}x" if straggler else None,
                c.val_accuracy,
            ]
        )
    return header, rows


# Figures no configuration may have (one process: no communication; a CPU: no datasheet peak): a column only
# where some configuration has them.
_OPTIONAL_COLUMNS = (
    "overlap %",
    "exposed comm %",
    "busbw GB/s",
    "isolated GB/s",
    "GFLOP/s per rank",
    "% of matmul rate",
    "% of datasheet peak",
    "workers' own MiB",
    "held MiB",
)


def _communication_table(analysis: Analysis) -> Table:
    header = ["config", "strategy", "overlap %", "exposed comm %", "busbw GB/s", "isolated GB/s"]
    rows = []
    for c in analysis.configs:
        if c.world_size < 2:
            continue
        rows.append(
            [
                c.name,
                c.strategy or "-",
                None if c.overlap is None else 100 * c.overlap,
                None if c.exposed_share is None else 100 * c.exposed_share,
                None if c.busbw_Bps is None else c.busbw_Bps / 1e9,
                None if c.reference_busbw_Bps is None else c.reference_busbw_Bps / 1e9,
            ]
        )
    return _drop_empty(header, rows, _OPTIONAL_COLUMNS)


def _flops_table(analysis: Analysis) -> Table:
    header = ["config", "MFLOPs per sample", "GFLOP/s per rank", "% of matmul rate", "% of datasheet peak"]
    rows = [
        [
            c.name,
            c.flops_per_sample / 1e6,
            None if c.achieved_flops_per_s is None else c.achieved_flops_per_s / 1e9,
            _measured_share(c.utilisation_attainable),
            None if c.utilisation_peak is None else 100 * c.utilisation_peak,
        ]
        for c in analysis.configs
        if c.flops_per_sample is not None
    ]
    return _drop_empty(header, rows, _OPTIONAL_COLUMNS)


def _measured_share(fraction: float | None) -> float | str | None:
    """A utilisation of the measured matmul rate in percent; above 100 % (no step can do more arithmetic than the
    device's own largest matmul) flagged in words, never a plain figure."""
    if fraction is None:
        return None
    return 100 * fraction if fraction <= 1.0 else f"flagged: {100 * fraction:.0f}"


def _memory_table(analysis: Analysis) -> Table:
    header = [
        "config",
        "world",
        "strategy",
        "peak MiB/rank",
        "interval",
        "what",
        "held MiB",
        "workers' own MiB",
        "fits",
    ]
    rows = []
    for c in analysis.configs:
        e = c.peak_memory
        if e.value is None and not c.out_of_memory:
            continue
        rows.append(
            [
                c.name,
                c.world_size,
                c.strategy or "-",
                _mb(e.value),
                interval_text(e.scaled(1 / MIB)) if e.has_interval else "-",
                c.memory_kind or "-",
                _mb(c.held_bytes),
                _mb(c.workers_memory) or None,
                "yes" if c.fits else ("out of memory" if c.out_of_memory else "no"),
            ]
        )
    return _drop_empty(header, rows, _OPTIONAL_COLUMNS)


def _faster_step_table(analysis: Analysis) -> Table:
    """Each configuration that compiles or changes DDP's communication, against its plain twin."""
    header = ["config", "option", "vs", "speed-up", "compile s", "pays back after", "bytes/step MB", "val acc"]
    rows: list[list[Any]] = []
    for c in analysis.configs:
        for found in c.versus:
            payback = found.get("payback_iterations")
            bytes_ = found.get("bytes") or (None, c.comm_bytes_per_step)
            accuracy = found.get("val_accuracy") or (None, c.val_accuracy)
            rows.append(
                [
                    c.name,
                    f"{found['option']}={found['value']}",
                    found["plain"],
                    ratio_text(found["speedup"]),
                    found.get("compile_s"),
                    None
                    if "compile_s" not in found
                    else f"{payback:.0f} it."
                    if payback is not None
                    else "never"
                    if (found["speedup"].value or 0) <= 1
                    else "not separated",
                    None
                    if bytes_[1] is None
                    else f"{(bytes_[0] or 0) / 1e6:.3g} -> {bytes_[1] / 1e6:.3g}"
                    if bytes_[0] is not None
                    else f"{bytes_[1] / 1e6:.3g}",
                    None
                    if accuracy[1] is None
                    else f"{accuracy[0]:.3f} -> {accuracy[1]:.3f}"
                    if accuracy[0] is not None
                    else f"{accuracy[1]:.3f}",
                ]
            )
    return _drop_empty(header, rows, ("compile s", "pays back after", "bytes/step MB", "val acc"))


def _references(analysis: Analysis) -> str:
    """The one matmul rate per device that "% of matmul rate" is against, in words."""
    found = {
        (c.device_type or "?") + (f" ({c.environment})" if c.environment else ""): c.matmul_reference
        for c in analysis.configs
        if c.matmul_reference is not None
    }
    if not found:
        return ""
    rates = "; ".join(f"{device}: {rate / 1e9:.1f} GFLOP/s" for device, rate in found.items())
    return (
        "% of matmul rate is against one reference per device, the same for every row: the highest matmul rate any "
        f"run of the sweep measured on it ({rates})."
    )


def config_tables(doc: Document, analysis: Analysis) -> None:
    """The decision table, then one table per topic."""
    doc.table(*decision_table(analysis))
    for title, (header, rows), text in (
        ("Timing", _timing_table(analysis), "Runs = used / repeats; cv = standard deviation / mean."),
        (
            "Communication",
            _communication_table(analysis),
            "Gradient communication per step (configurations of 2 or more processes): the share of it hidden "
            "behind backward compute, what is exposed as a share of the step, the bus bandwidth achieved and that of "
            "an isolated all-reduce of the same size. FSDP's all-gathers and reduce-scatters are not split: "
            "their figures are blank.",
        ),
        (
            "A faster step",
            _faster_step_table(analysis),
            "Each configuration that compiles the model or changes DDP's communication, against the same "
            "configuration without it: the speed-up in samples/s with its 95 % interval; for torch.compile the "
            "compilation time (beyond a steady iteration, a cold cache: what a first run pays) and the iterations "
            "after which the faster steps have paid for it; for a communication hook the bytes a rank puts on the "
            "wire per step and the validation accuracy after the run, which is what compression may cost.",
        ),
        (
            "FLOPs",
            _flops_table(analysis),
            "Model FLOPs (forward + backward) and what each rank achieved. " + _references(analysis),
        ),
        (
            "Memory",
            _memory_table(analysis),
            "Peak memory of the largest rank (after warm-up; CUDA's peak reserved where there is a GPU, else the "
            "resident set), mean and interval over the runs used; held = parameters + gradients + optimizer "
            "state between steps; workers' own = what the DataLoader workers hold beyond the pages they share "
            "with their rank.",
        ),
    ):
        if rows and len(header) > 1:
            doc.heading(title, 3)
            doc.paragraph(text)
            doc.table(header, rows)
