"""The report's tables of configurations: the decision table first, then one table per topic (timing,
communication, a faster step, FLOPs (:mod:`.utilisation`), memory), each without the columns no configuration has a
figure for. A configuration's strategy has one label in every table (:func:`~ignite_ddl.report.model.strategy_label`):
the grid's ``ddp`` that one process ran as ``none`` is ``ddp -> none (one process)`` in the decision table, the
communication table and the memory table alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from ignite_ddl.core.schema import shown_figures
from ignite_ddl.core.strategies import StrategyInfo, strategy_infos
from ignite_ddl.report.analysis import step_model_accuracy, step_predictions
from ignite_ddl.report.comparisons import payback_verdict, versus_text
from ignite_ddl.report.document import Document, Table
from ignite_ddl.report.flags import superlinear
from ignite_ddl.report.model import MIB, Analysis, ConfigResult
from ignite_ddl.report.quality import loss_text
from ignite_ddl.report.stats import Estimate, positive_range, prediction_range
from ignite_ddl.report.utilisation import flops_rows, flops_text

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
                *[c.grid_shown.get(k) for k in grid_keys],
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
    # workload_args.KEY axes show how workload_args varies: its other arguments are the spec's base, everywhere alike
    shown = set(grid_keys) | {"workload_args" for k in grid_keys if k.startswith("workload_args.")}
    return not varying <= shown or len({c.workload for c in analysis.configs}) > len(by_options)


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


def _quality_figures(configs: list[ConfigResult]) -> list[tuple[str, Callable[[ConfigResult], float | None]]]:
    """The columns of what the configurations learnt, headed by what their quality is judged by: validation accuracy,
    or validation loss where a workload is judged by loss (:func:`~ignite_ddl.report.quality.judged_by`), with the
    perplexity of a language model's."""
    columns: list[tuple[str, Callable[[ConfigResult], float | None]]] = []
    by_loss = [c for c in configs if c.quality_by == "loss"]
    if len(by_loss) < len(configs) or not configs:
        columns.append(("val acc", lambda c: c.val_accuracy if c.quality_by == "accuracy" else None))
    if by_loss:
        columns.append(("val loss", lambda c: c.val_loss if c.quality_by == "loss" else None))
    if any(c.tokens for c in by_loss):
        columns.append(("val ppl", lambda c: c.perplexity if c.quality_by == "loss" else None))
    return columns


def _timing_table(analysis: Analysis) -> Table:
    shown = [mark.column for _, mark in shown_figures()]
    header = ["config", "world", "runs", "cv %", "step p50 ms", "step p90 ms", "data wait %", *shown, "straggler"]
    learnt = _quality_figures(analysis.configs)
    header += [column for column, _ in learnt]
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
                *(c.shown.get(column) for column in shown),
                f"rank {straggler['rank']} {straggler['ratio']:.2f}x" if straggler else None,
                *(figure(c) for _, figure in learnt),
            ]
        )
    return _drop_empty(header, rows, tuple(shown))  # a figure older runs lack: no empty column


# What the plan said it leaves out of a prediction (a phrase of its note -> the memory table's word for it).
_LEFT_OUT = (
    ("allocator's heap", "heap"),
    ("--compile", "compile"),
    ("--comm-hook", "hook"),
    ("CUDA context", "CUDA context"),
)

# Figures no configuration may have (one process: no communication; a CPU: no datasheet peak): a column only
# where some configuration has them.
_OPTIONAL_COLUMNS = (
    "overlap %",
    "exposed comm %",
    "busbw GB/s",
    "isolated GB/s",
    "units/s",
    "GFLOP/s per rank",
    "MFU %",
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
                c.strategy_label or "-",
                None if c.overlap is None else 100 * c.overlap,
                None if c.exposed_share is None else 100 * c.exposed_share,
                None if c.busbw_Bps is None else c.busbw_Bps / 1e9,
                None if c.reference_busbw_Bps is None else c.reference_busbw_Bps / 1e9,
            ]
        )
    return _drop_empty(header, rows, _OPTIONAL_COLUMNS)


def _flops_table(analysis: Analysis) -> Table:
    return _drop_empty(*flops_rows(analysis), _OPTIONAL_COLUMNS)


def _memory_limit(analysis: Analysis) -> float | None:
    """The spec's memory_limit_mb, MiB, or None where none was given."""
    limit = analysis.meta.get("spec", {}).get("memory_limit_mb")
    return float(limit) if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0 else None


def _memory_table(analysis: Analysis) -> Table:
    """Peak and held memory per rank, and in all; "fits" only where a limit was given (or a run ran out of memory):
    without one there is nothing to fit."""
    limit = _memory_limit(analysis)
    judged = limit is not None or any(c.out_of_memory for c in analysis.configs)
    fits = f"fits {limit:.0f} MiB/rank" if limit is not None else "fits (did not run out of memory)"
    header = [
        "config",
        "world",
        "strategy",
        "ZeRO stage",
        "peak MiB/rank",
        "interval",
        "what",
        "peak MiB in all",
        "held MiB",
        "workers' own MiB",
        "predicted MiB",
        "error %",
        *([fits] if judged else []),
    ]
    rows: list[list[Any]] = []
    for c in analysis.configs:
        e = c.peak_memory
        if e.value is None and not c.out_of_memory and c.predicted_memory is None:
            continue
        error = None
        if c.predicted_memory is not None and e.value and c.memory_kind == "resident":
            error = f"{100 * (c.predicted_memory - e.value) / e.value:+.1f}"
            left_out = [label for key, label in _LEFT_OUT if any(key in what for what in c.predicted_leaves_out)]
            if left_out:  # the plan said so before the run: the miss is not a surprise
                error += f" ({', '.join(left_out)} not predicted)"
        rows.append(
            [
                c.name,
                c.world_size,
                c.strategy_label or "-",
                zero_stage(c),
                _mb(e.value),
                interval_text(e.scaled(1 / MIB)) if e.has_interval else "-",
                c.memory_kind or "-",
                None if e.value is None else e.value * c.world_size / MIB,
                _mb(c.held_bytes),
                _mb(c.workers_memory) or None,
                _mb(c.predicted_memory),
                error,
                *(["yes" if c.fits else ("out of memory" if c.out_of_memory else "no")] if judged else []),
            ]
        )
    run = {c.index for c in analysis.configs}
    for planned in _dict_of(analysis.meta.get("plan")).get("configurations") or []:
        if judged and planned.get("unfit") and planned.get("index") not in run:  # skipped: predicted not to fit
            peak = _dict_of(planned.get("prediction")).get("peak_bytes")
            name = f"cfg{planned['index']:03d} ({options_text(_dict_of(planned.get('grid')))})"
            rows.append([name, *[None] * 9, _mb(peak), None, "not launched: " + str(planned["unfit"])])
    return _drop_empty(header, rows, (*_OPTIONAL_COLUMNS, "ZeRO stage", "predicted MiB", "error %"))


def _step_model_table(analysis: Analysis) -> Table:
    """Each configuration's step time predicted after the first round's one-process runs beside what it measured."""
    predicted = step_predictions(analysis)
    header = ["config", "predicted step ms", "interval", "measured step ms", "error %", "from"]
    rows: list[list[Any]] = []
    for c in analysis.configs:
        p = predicted.get(c.index)
        step = p.get("step_s") if p is not None else None
        if p is None or not step:
            continue  # nothing predicted (no one-process twin): counted in the text, not a row of blanks
        measured = c.global_batch / c.throughput.value if c.global_batch and c.throughput.value else None
        error = f"{100 * (step - measured) / measured:+.1f}" if measured else None
        low, high = p.get("low_s"), p.get("high_s")
        interval = prediction_range(low and 1e3 * low, high and 1e3 * high)  # none where it has no spread
        shown = measured and f"{1e3 * measured:.1f}"
        rows.append([c.name, f"{1e3 * step:.1f}", interval, shown, error, p.get("basis")])
    return header, rows


def _unpredicted_text(analysis: Analysis) -> str:
    """The configurations of several processes the step-time model could not predict, by reason."""
    predicted = step_predictions(analysis)
    by_reason: dict[str, list[str]] = {}
    for c in analysis.configs:
        p = predicted.get(c.index)
        if p and not p.get("step_s"):
            by_reason.setdefault(str(p.get("basis")), []).append(c.name)
    if not by_reason:
        return ""
    return " Not predicted: " + "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items()) + "."


def _accuracy_text(accuracy: dict[str, Any]) -> str:
    if accuracy["median_abs_error"] is None:
        return ""
    text = (
        f"Over {accuracy['configurations']} configuration(s): median |error| {100 * accuracy['median_abs_error']:.1f} %"
    )
    rho = accuracy["rank_correlation"]
    return text + (f", rank correlation {rho:.2f}." if rho is not None else ".")


def _dict_of(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strategy_info(c: ConfigResult) -> StrategyInfo | None:
    """What the configuration's strategy is, where it is described in this process (a user's own strategy
    described only in its runs' processes is not: its rows say nothing of it)."""
    infos = strategy_infos()
    return infos.get(c.strategy) if c.strategy else None


def zero_stage(c: ConfigResult) -> int | None:
    """The configuration's ZeRO stage (DDP 0, ZeRO-1 1, FSDP2 3, or 2 with ``reshard_after_forward`` false); None
    for one process or a strategy not described here."""
    info = _strategy_info(c)
    return None if info is None else info.zero_stage(bool(c.config.get("reshard_after_forward", True)))


def _shards_parameters(c: ConfigResult) -> bool:
    info = _strategy_info(c)
    return info is not None and info.shards_parameters


def _same_but_strategy(a: ConfigResult, b: ConfigResult) -> bool:
    """Whether two configurations differ only in their strategy (and where their files went)."""
    own = {"strategy", "output_dir", "run_dir"}
    return {k: v for k, v in a.config.items() if k not in own} == {k: v for k, v in b.config.items() if k not in own}


def _memory_unpredicted_text(analysis: Analysis) -> str:
    """The configurations run whose peak the plan could not predict, by reason."""
    run = {c.index: c.name for c in analysis.configs}
    by_reason: dict[str, list[str]] = {}
    for planned in _dict_of(analysis.meta.get("plan")).get("configurations") or []:
        problem = _dict_of(_dict_of(planned).get("prediction")).get("problem")
        if problem and planned.get("index") in run:
            why = str(problem).removeprefix("cannot predict: ")
            by_reason.setdefault(why, []).append(run[planned["index"]])
    if not by_reason:
        return ""
    return " Not predicted: " + "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items()) + "."


def memory_text(analysis: Analysis) -> str:
    """What the memory table's columns are, and, measured, why sharding can raise the resident peak on CPU."""
    limit = _memory_limit(analysis)
    text = (
        "Peak memory of the largest rank (after warm-up; CUDA's peak reserved where there is a GPU, else the "
        "resident set), mean and interval over the runs used, and times the ranks: in all. Held = parameters + "
        "gradients + optimizer state between steps, counted from the tensors: what sharding divides. Resident is "
        "everything the process has in RAM at its peak: what it holds, plus the runtime's own baseline (torch's "
        "libraries, the process group's buffers, the allocator's caches) and any temporary copies made during "
        "a step. Workers' own = what the DataLoader workers hold beyond the pages they share with their rank. "
        "Predicted = the peak per rank predicted before the sweep (ignite-ddl plan: the step traced on fake "
        "tensors, on CPU the heap its allocations leave replayed through glibc, plus the runtime measured once), "
        'error = (predicted - measured) / measured; "(heap, hook, '
        "compile not predicted)\": what the plan said before the run its figure leaves out, where a rank's "
        "resident peak may go above it: the C allocator's heap kept beside FSDP's freed buffers or a step's freed "
        "activations not replayed (glibc, CPU), a "
        "communication hook's own buffers, Inductor's compiler and compiled graph. "
    )
    text += (
        f"Fits: within the spec's memory_limit_mb of {limit:.0f} MiB per rank."
        if limit is not None
        else "No memory_limit_mb was given, so nothing is said to fit or not (set it to have the verdict pass over "
        "configurations above it)."
    )
    text += _memory_unpredicted_text(analysis)
    pairs = []  # (fsdp, ddp, held MiB of each, resident peak MiB of each) where sharding raised the peak
    for fsdp in (c for c in analysis.configs if _shards_parameters(c) and c.memory_kind == "resident"):
        ddp = next((c for c in analysis.configs if zero_stage(c) == 0 and _same_but_strategy(c, fsdp)), None)
        if ddp is None or None in (fsdp.peak_memory.value, ddp.peak_memory.value, fsdp.held_bytes, ddp.held_bytes):
            continue
        peaks = (cast(float, fsdp.peak_memory.value) / MIB, cast(float, ddp.peak_memory.value) / MIB)
        held = (cast(float, fsdp.held_bytes) / MIB, cast(float, ddp.held_bytes) / MIB)
        if peaks[0] > peaks[1]:
            pairs.append((fsdp.name, ddp.name, held, peaks))
    if pairs:
        # The explanation once, however many pairs show it (a sweep of 8 such pairs once repeated it 8 times).
        (fsdp_name, ddp_name, held, peaks), *others = pairs
        text += (
            f" {fsdp_name} (fsdp) holds {held[0]:.3g} MiB per rank against {ddp_name} (ddp)'s {held[1]:.3g}, yet "
            f"its resident peak is {peaks[0]:.0f} MiB against {peaks[1]:.0f}"
        )
        text += "".join(
            f"; {f} against {d}: holds {h[0]:.3g} against {h[1]:.3g}, peaks at {p[0]:.0f} against {p[1]:.0f}"
            for f, d, h, p in others
        )
        text += (
            ": on CPU, FSDP all-gathers each layer's full parameters for forward and again for backward, and those "
            "gathered copies (and the reduce-scatter's buffers) are temporary memory that the resident peak counts "
            "and held does not; with a baseline of a few hundred MiB per process the runtime's own share dominates "
            "models this small. Sharding saves what is held between steps, which is what grows with the model."
        )
    return text


def _quality_table(analysis: Analysis) -> Table:
    """The speed-quality trade: each configuration's throughput beside what it learnt (its validation accuracy, or
    its validation loss where its workload is judged by loss), against its workload's reference configuration."""
    judged = [c for c in analysis.configs if c.quality is not None]
    learnt = _quality_figures(judged)
    units = {c.quality_by for c in judged}
    # The difference's unit in its header where every row has the same, else in each cell.
    versus = ("vs reference, " + ("loss" if units == {"loss"} else "points")) if len(units) == 1 else "vs reference"
    header = ["config", "samples/s", "interval", *(column for column, _ in learnt), versus, "quality"]
    rows = []
    for c in judged:
        rows.append(
            [
                c.name,
                rate_text(c.throughput.value),
                interval_text(c.throughput),
                *(figure(c) for _, figure in learnt),
                _difference_cell(c, len(units) > 1),
                c.quality_note if c.quality != "reference" else "reference",
            ]
        )
    return header, rows


def _quality_text(analysis: Analysis, pct: int) -> str:
    """What the "Speed and quality" table shows: accuracy, loss or both, as its workloads are judged."""
    judged = {c.quality_by for c in analysis.configs if c.quality is not None}
    text = ""
    if judged != {"loss"}:
        text += (
            "What each configuration learnt, beside its speed: validation accuracy after the last epoch (mean over "
            "the runs used), and its difference from its workload's reference configuration (the first without "
            f"gradient compression) in percentage points, with the {pct} % interval of the difference of the means. "
            "A configuration whose whole interval lies below -quality_margin learns worse and is never recommended. "
        )
    if "loss" in judged:
        tokens = any(c.tokens for c in analysis.configs if c.quality_by == "loss")
        text += (
            ("A workload" if text else "What each configuration learnt, beside its speed. A workload")
            + " that reports no validation accuracy"
            + (", or a language model (its unit tokens)," if tokens else "")
            + " is judged by its validation loss after the last epoch (mean over the runs used"
            + ("; val ppl = its perplexity, exp(val loss)" if tokens else "")
            + f"): the difference from its workload's reference configuration, with the {pct} % interval of the "
            "difference of the means; a configuration whose whole interval lies above quality_margin_loss times the "
            "reference's mean loss learns worse and is never recommended. "
        )
    return text + "speed_vs_quality.png draws the same trade."


def _difference_cell(c: ConfigResult, unit: bool) -> str:
    """A configuration's difference from its workload's reference, with its interval: accuracy in points, or loss;
    its unit named where the table mixes both."""
    if c.quality_by == "loss":
        d = c.loss_difference
        if d is None or d.value is None or d.low is None or d.high is None:
            return "-"
        shown = f"{loss_text(d.value, True)} ({loss_text(d.low, True)} to {loss_text(d.high, True)})"
        return f"{shown}{' loss' if unit else ''} vs {c.quality_reference}"
    d = c.accuracy_difference
    if d is None or d.value is None or d.low is None or d.high is None:
        return "-"
    shown = f"{100 * d.value:+.1f} ({100 * d.low:+.1f} to {100 * d.high:+.1f})"
    return f"{shown}{' points' if unit else ''} vs {c.quality_reference}"


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
                    else payback_verdict(found),
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


PHASE_CAUSES = {  # what each warm-up phase is, in words
    "powersgd_start_iter": "comm_hook=powersgd: plain all-reduces until powersgd_start_iter",
    "compile": "compile=True: the first compilation",
}


def _phases_table(analysis: Analysis) -> Table:
    """Each configuration whose behaviour changes at an iteration: its warm-up phase beside its steady one."""
    header = ["config", "option", "warm-up phase", "bytes/step MB", "step p50 ms", "samples/s"]  # warm-up -> steady
    rows: list[list[Any]] = []
    for c in analysis.configs:
        phase = c.warmup_phase
        if phase is None:
            continue
        span = f"iterations {phase['first_iteration']} to {phase['last_iteration']}"
        before, steady = phase["comm_bytes_per_step"], c.comm_bytes_per_step
        early_ms, steady_ms = phase["step_s_p50"], c.step_p50_s
        rows.append(
            [
                c.name,
                PHASE_CAUSES.get(phase["cause"], phase["cause"]),
                span,
                None if before is None or steady is None else f"{before / 1e6:.3g} -> {steady / 1e6:.3g}",
                None if early_ms is None or steady_ms is None else f"{1e3 * early_ms:.1f} -> {1e3 * steady_ms:.1f}",
                f"{rate_text(phase['samples_per_s'])} -> {rate_text(c.throughput.value)}",
            ]
        )
    return _drop_empty(header, rows, ("bytes/step MB", "step p50 ms"))


def config_tables(doc: Document, analysis: Analysis) -> None:
    """The decision table, then one table per topic."""
    doc.table(*decision_table(analysis))
    pct = round(100 * analysis.confidence)
    # Rows read out in words under their table: what a cell cannot say (why a compilation shows no payback, ...).
    readings = {"A faster step": [versus_text(c, found) for c in analysis.configs for found in c.versus]}
    for title, (header, rows), text in (
        (
            "Speed and quality",
            _quality_table(analysis),
            _quality_text(analysis, pct),
        ),
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
            "Two phases",
            _phases_table(analysis),
            "An option that changes a run's behaviour at an iteration, measured in each phase apart: the warm-up "
            "phase (its iterations, in the first run; the first warmup_iters left out where the phase is longer) "
            "-> the steady phase, the measured window, which starts only after it (warmup_iters iterations after "
            "PowerSGD's start). Bytes per step, speed-ups, payback and every verdict of this report are the steady "
            "phase's; the warm-up phase is what every run pays first. Samples/s: global, over the phase's "
            "iterations (a compilation's include its compile time).",
        ),
        ("FLOPs", flops := _flops_table(analysis), flops_text(analysis, "units/s" in flops[0])),
        (
            "Step time, predicted",
            _step_model_table(analysis),
            "Each configuration of several processes predicted before its runs from its one-process twin's measured "
            "step and this machine's all-reduce (the sweep's step-time model), beside its measured step (global "
            "batch / samples per second); error = (predicted - measured) / measured. "
            + _accuracy_text(step_model_accuracy(analysis))
            + _unpredicted_text(analysis),
        ),
        ("Memory", _memory_table(analysis), memory_text(analysis)),
    ):
        if rows and len(header) > 1:
            doc.heading(title, 3)
            doc.paragraph(text)
            doc.table(header, rows)
            if reading := readings.get(title):
                doc.bullets(reading)
        elif title == "Step time, predicted" and (unpredicted := _unpredicted_text(analysis)):
            doc.heading(title, 3)  # nothing predicted: why, not nothing
            doc.paragraph(unpredicted.strip())
