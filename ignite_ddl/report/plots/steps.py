"""Where a step's time goes: per rank and part of the step, and the distribution of each rank's step times in one
repeat (read from its steps_rank<r>.csv)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ignite_ddl.core.steps_csv import read_steps
from ignite_ddl.report.model import PHASE_COLOURS, STEP_PARTS, Analysis, ConfigResult, RunResult
from ignite_ddl.report.plots.layout import (
    FONT,
    MAX_PANELS,
    PANEL_COLUMNS,
    TITLE_FONT,
    bar_panels,
    named,
    varying,
    workloads,
    wrap,
)

__all__ = ["PART_LABELS", "breakdown_plot", "ranks_plot"]


PART_LABELS = {
    "data": "data wait",
    "forward": "forward",
    "backward_compute": "backward compute",
    "exposed_comm": "exposed communication",
    "optimizer": "optimizer",
    "handlers": "handlers",
}


def breakdown_plot(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.rank_phases]
    if not measured:
        return None
    untimed = [c.name for c in measured if not c.comm_timed and c.world_size > 1]
    note = f"; {', '.join(untimed)}: all-reduce not timed, inside backward" if untimed else ""
    fig, panels, add_legend = bar_panels(
        plt,
        workloads(analysis, measured),
        "Step-time breakdown per rank",
        f"ms per iteration, mean over repeats; overlap = communication hidden behind backward compute{note}",
        legend=True,
        per_rank=True,
    )
    for ax, rows in panels:
        y = list(range(len(rows)))
        left = [0.0] * len(rows)
        for part in STEP_PARTS:
            widths = [1e3 * config.rank_phases[rank].get(part, 0.0) for config, rank in rows]
            ax.barh(y, widths, left=left, label=PART_LABELS[part], color=PHASE_COLOURS[part])
            left = [a + b for a, b in zip(left, widths)]
        for row, ((config, rank), end) in enumerate(zip(rows, left)):
            if rank == 0 and config.overlap is not None:  # once per configuration, on its first rank's bar
                buckets = f", {config.buckets_per_step:.0f} bucket(s)" if config.buckets_per_step else ""
                ax.text(end, row, f" overlap {100 * config.overlap:.0f} %{buckets}", va="center", fontsize=FONT - 1)
        # room for the overlap figure; a panel of steps measured at 0 ms (nothing recorded) still gets a range
        ax.set_xlim(0, (max(left, default=0.0) or 1.0) * 1.35)
    assert add_legend is not None
    add_legend(*panels[0][0].get_legend_handles_labels())
    return fig


def rank_times(config: ConfigResult) -> tuple[RunResult, list[list[float]]] | None:
    """The configuration's first used run and its measured step times (ms) per rank, from its steps_rank<r>.csv."""
    run = next((r for r in config.runs if r.used), None)
    if run is None:
        return None
    per_rank = []
    for rank in range(config.world_size):
        path = Path(run.run_dir) / f"steps_rank{rank}.csv"
        if not path.is_file():
            return None
        per_rank.append([1e3 * r["step_s"] for r in read_steps(path) if not r["warmup"] and r["step_s"] is not None])
    return run, per_rank


def repeat_shown(config: ConfigResult, run: RunResult) -> str:
    """Which of the configuration's runs a per-run figure shows: ``repeat 2 of 3`` (1-based, as the report's flags
    count), with the re-run attempt where the repeat was re-run.

    >>> from ignite_ddl.report.model import RunResult
    >>> def run(repeat, attempt=0):
    ...     return RunResult(repeat, attempt, 0, "completed", 1.0, False, None, None, True, "", None, None, None)
    >>> config = type("Config", (), {"runs": [run(0), run(1), run(1, 1), run(2)]})()
    >>> repeat_shown(config, config.runs[2])
    'repeat 2 of 3 (re-run 1)'
    """
    repeats = len({r.repeat for r in config.runs})
    return f"repeat {run.repeat + 1} of {repeats}" + (f" (re-run {run.attempt})" if run.attempt else "")


def ranks_plot(analysis: Analysis, plt: Any) -> Any:
    from matplotlib.ticker import MaxNLocator

    panels = []
    for c in analysis.configs:
        if c.world_size < 2:
            continue
        found = rank_times(c)
        if found and all(found[1]):
            panels.append((c, *found))
    if not panels:
        return None
    shown = panels[:MAX_PANELS]
    keys = varying([c for c, _, _ in shown], set()) or (list(shown[0][0].grid) if len(shown) == 1 else [])
    columns = min(PANEL_COLUMNS, len(shown))
    rows = math.ceil(len(shown) / columns)
    width = max(2.7 * columns + 0.6, 5.6)
    fig, axes = plt.subplots(rows, columns, figsize=(width, 2.9 * rows + 0.8), squeeze=False, layout="constrained")
    for ax, (config, run, times) in zip(axes.flat, shown):
        ax.boxplot(times, showfliers=False)
        ax.set_xticks(range(1, len(times) + 1), [f"r{i}" for i in range(len(times))], fontsize=FONT)
        ax.tick_params(axis="y", labelsize=FONT)
        ax.yaxis.set_major_locator(MaxNLocator(5, steps=[1, 2, 5, 10]))
        ax.set_title(wrap(named(config, keys), 32) + "\n" + repeat_shown(config, run), fontsize=FONT)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("step ms", fontsize=FONT + 1)
    more = f"; first {MAX_PANELS} of {len(panels)}" if len(panels) > MAX_PANELS else ""
    title = f"Per-rank step time of one repeat (named per panel{more})"
    fig.suptitle(wrap(title, int(width * 10)), fontsize=TITLE_FONT)
    return fig
