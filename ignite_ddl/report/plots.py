"""The report's plots, readable from one configuration to dozens: error bars are the confidence intervals over
repeats, workloads get panels of their own (a configuration is compared only within its workload), bars are named
by configuration and the options that tell them apart, legends sit outside the data, panel grids wrap, figures
grow with what they show, and every figure uses constrained layout so titles and labels stay inside it.

:func:`figures` returns the matplotlib figures (for notebooks and tests); :func:`make_plots` writes them as PNGs.
"""

from __future__ import annotations

import csv
import math
import re
import textwrap
from collections import defaultdict
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, cast

from ignite_ddl.core.config import LAYOUT_OPTIONS
from ignite_ddl.core.figures import pyplot, save_figure
from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.report.model import MIB, STEP_PARTS, Analysis, ConfigResult, RunResult
from ignite_ddl.report.stats import Estimate

__all__ = [
    "PLOTS",
    "confusion_heatmap",
    "ddp_diagram",
    "ddp_step",
    "figures",
    "make_plots",
    "pareto_front",
]

PLOTS = {
    "throughput.png": "global throughput per configuration with its confidence interval, by workload",
    "throughput_vs_processes.png": "global throughput vs processes, with ideal scaling",
    "throughput_vs_batch.png": "global throughput vs global batch size",
    "step_breakdown.png": "where each step's time goes per rank: data, forward, backward compute, exposed "
    "communication, optimizer, handlers; with the communication overlap",
    "rank_step_times.png": "step-time distribution per rank, of the repeat each panel names",
    "confusion.png": "validation confusion matrix of each workload's most accurate configuration",
    "throughput_vs_memory.png": "global throughput against peak memory per rank, with intervals; the Pareto front "
    "(no other configuration is both faster and smaller) joined and ringed, configurations that do not fit crossed",
}
MAX_PANELS = 32
PANEL_COLUMNS = 4  # rank panels per row
LINE_COLUMNS = 3  # workload panels per row of the line plots
WRAP = 34  # characters per line of a panel title or legend entry
BAR_LABEL_WRAP = 56  # characters per line of a bar's label
BAR_WIDTH_IN = 10.0
FONT = 8  # tick labels, legends, panel titles
TITLE_FONT = 11
MARKERS = "osD^vPX*"


def make_plots(analysis: Analysis, out: Path) -> list[tuple[str, str]]:
    """Write the plots that apply into ``out``; (file name, description) of each one written."""
    made = []
    for name, fig in figures(analysis).items():
        save_figure(fig, out / name)
        made.append((name, PLOTS[name]))
    return made


def figures(analysis: Analysis) -> dict[str, Any]:
    """The plots that apply to this sweep, as open matplotlib figures (close them when done)."""
    plt = pyplot()
    made = {}
    for name, draw in (
        ("throughput.png", _throughput),
        ("throughput_vs_processes.png", _scaling),
        ("throughput_vs_batch.png", _batch),
        ("step_breakdown.png", _breakdown),
        ("rank_step_times.png", _ranks),
        ("confusion.png", _confusion),
        ("throughput_vs_memory.png", _memory),
    ):
        fig = draw(analysis, plt)
        if fig is not None:
            if analysis.omitted:  # a view of a large sweep (Analysis.shown): the figure says it is not all of it
                title = fig._suptitle.get_text() if fig._suptitle is not None else ""
                shown = f"{len(analysis.configs)} of {len(analysis.configs) + analysis.omitted} configurations shown"
                fig.suptitle(f"{title}\n({shown}: see the report)".strip(), fontsize=TITLE_FONT)
            if analysis.contention_note:
                _mark_contended(fig, analysis.contention_note)
            made[name] = fig
    return made


def _mark_contended(fig: Any, note: str) -> None:
    """A figure that counts contended runs says so twice: in its title and as a watermark across it."""
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    fig.suptitle(f"{title}\n{note}" if title else note, fontsize=TITLE_FONT, color="tab:red")
    fig.text(
        0.5,
        0.5,
        "MEASURED UNDER CONTENTION",
        ha="center",
        va="center",
        rotation=25,
        fontsize=28,
        color="tab:red",
        alpha=0.15,
        transform=fig.transFigure,
        zorder=10,
    )


def _wrap(text: str, width: int = WRAP) -> str:
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False)) or text


def _yerr(estimates: list[Estimate]) -> list[list[float]]:
    """Asymmetric error bars from intervals (zero where a configuration has none)."""
    lows = [e.value - e.low if e.has_interval and e.value is not None else 0.0 for e in estimates]  # type: ignore[operator]
    highs = [e.high - e.value if e.has_interval and e.value is not None else 0.0 for e in estimates]  # type: ignore[operator]
    return [lows, highs]


def _varying(configs: list[ConfigResult], exclude: Collection[str]) -> list[str]:
    """Grid options that take more than one value among ``configs`` (the ones worth naming in a legend)."""
    keys = list(dict.fromkeys(k for c in configs for k in c.grid if k not in exclude))
    return [k for k in keys if len({repr(c.grid.get(k)) for c in configs}) > 1]


def _describe(config: ConfigResult, keys: list[str]) -> str:
    return ", ".join(f"{k}={config.grid.get(k)}" for k in keys) or "all"


def _named(config: ConfigResult, keys: list[str]) -> str:
    """The configuration's short name, then the options that tell it apart from its neighbours."""
    return f"{config.name}: {_describe(config, keys)}" if keys else config.name


def _workloads(analysis: Analysis, configs: list[ConfigResult]) -> list[tuple[str | None, list[ConfigResult]]]:
    """``configs`` split by workload, in the verdicts' order, each with a title naming the workload options that
    differ between the workloads shown (None when there is only one)."""
    groups: dict[str, list[ConfigResult]] = defaultdict(list)
    for c in configs:
        groups[c.workload].append(c)
    order = {v.workload: i for i, v in enumerate(analysis.verdicts)}
    names = sorted(groups, key=lambda w: order.get(w, len(order)))
    if len(names) == 1:
        return [(None, groups[names[0]])]
    axes = [a for a in analysis.workload_axes if len({repr(c.config.get(a)) for c in configs}) > 1]
    return [("workload: " + ", ".join(f"{a}={groups[w][0].config.get(a)}" for a in axes), groups[w]) for w in names]


def _palette(labels: list[str]) -> dict[str, dict[str, Any]]:
    """A colour per series label, the same in every panel; beyond 20 series, markers tell same-coloured ones apart."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {
        label: {"color": cmap(i % cmap.N), "marker": MARKERS[(i // cmap.N) % len(MARKERS)]}
        for i, label in enumerate(labels)
    }


def _figure(plt: Any, width: float, height: float, legend: bool) -> tuple[Any, Any, Callable[..., None] | None]:
    """A figure in constrained layout, the (sub)figure its panels go in, and, if it has a legend, the function
    that adds it. The legend gets a column of its own beside the panels and below the figure's title (an outside
    figure legend would share the top and bottom margins with the title and the axis labels, and cover them);
    the figure is widened, and if need be made taller, to fit it."""
    fig = plt.figure(figsize=(width, height), layout="constrained")
    if not legend:
        return fig, fig, None
    grid = fig.add_gridspec(1, 2, width_ratios=[width, 1.0], wspace=0.0)
    body, side = fig.add_subfigure(grid[0]), fig.add_subfigure(grid[1])

    def add(handles: list[Any], labels: list[str]) -> None:
        legend = side.legend(handles, labels, loc="upper left", fontsize=FONT, borderaxespad=0.2)
        box = legend.get_window_extent(fig.canvas.get_renderer())  # its size is its own: no layout needed
        side_width = box.width / fig.dpi + 0.15
        grid.set_width_ratios([width, side_width])
        fig.set_size_inches(width + side_width, max(height, box.height / fig.dpi + 0.8))

    return fig, body, add


def _bar_panels(
    plt: Any,
    groups: list[tuple[str | None, list[ConfigResult]]],
    title: str,
    xlabel: str,
    legend: bool = False,
    per_rank: bool = False,
) -> tuple[Any, list[tuple[Any, list[Any]]], Callable[..., None] | None]:
    """A stack of horizontal-bar panels, one per group, each as tall as its bars and their labels need. A panel's
    rows are its configurations, or with ``per_rank`` a ``(configuration, rank)`` row per rank of each."""
    keys = [_varying(configs, set()) for _, configs in groups]
    rows: list[list[Any]] = [
        [(c, r) for c in configs for r in range(len(c.rank_phases))] if per_rank else list(configs)
        for _, configs in groups
    ]
    labels = [[_row_label(row, k) for row in panel_rows] for k, panel_rows in zip(keys, rows)]
    heights = [sum(0.17 + 0.14 * (label.count("\n") + 1) for label in panel) + 0.2 for panel in labels]
    overhead = 0.55 * len(groups) + (0.2 if groups[0][0] else 0.0)
    fig, body, add_legend = _figure(plt, BAR_WIDTH_IN, sum(heights) + overhead + 0.8, legend)
    axes = body.subplots(len(groups), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    panels = []
    for ax, (name, _), panel_rows, names in zip(axes, groups, rows, labels):
        ax.set_yticks(range(len(panel_rows)), names, fontsize=FONT)
        ax.set_ylim(len(panel_rows) - 0.5, -0.5)  # first row on top
        ax.tick_params(axis="x", labelsize=FONT)
        if name:
            ax.set_title(name, fontsize=9, loc="left")
        panels.append((ax, panel_rows))
    fig.suptitle(title, fontsize=TITLE_FONT)
    body.supxlabel(_wrap(xlabel, 110), fontsize=9)
    return fig, panels, add_legend


def _row_label(row: Any, keys: list[str]) -> str:
    """A bar's label: the configuration (named on its first rank's row only), then the rank."""
    if isinstance(row, ConfigResult):
        return _wrap(_named(row, keys), BAR_LABEL_WRAP)
    config, rank = row
    return (_wrap(_named(config, keys), BAR_LABEL_WRAP) + "  " if rank == 0 else "") + f"r{rank}"


def _throughput(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.throughput.value is not None]
    if not measured:
        return None
    groups = _workloads(analysis, measured)
    for _, rows in groups:
        rows.sort(key=lambda c: -(c.throughput.value or 0.0))
    verdicts = {v.workload: v for v in analysis.verdicts}
    pct = round(100 * analysis.confidence)
    # Counted contended runs can flip a ranking: then no bar gets the colours of a trusted verdict.
    trusted = analysis.contention_note is None
    legend = "green: best, olive: tied for best" if trusted else "orange: best or tied as measured, not trusted"
    fig, panels, _ = _bar_panels(
        plt,
        groups,
        f"Throughput per configuration ({legend})" + ("; each workload ranked on its own" if len(groups) > 1 else ""),
        f"global samples/s, mean with {pct} % interval over repeats",
    )
    for ax, rows in panels:
        colors = []
        for c in rows:
            verdict = verdicts.get(c.workload)
            if verdict is not None and (verdict.best == c.name or c.name in verdict.tied) and not trusted:
                colors.append("tab:orange")
            elif verdict is not None and verdict.best == c.name:
                colors.append("tab:green")
            elif verdict is not None and c.name in verdict.tied:
                colors.append("tab:olive")
            else:
                colors.append("tab:gray")
        y = list(range(len(rows)))
        values = [c.throughput.value for c in rows]
        ax.barh(y, values, color=colors, alpha=0.75)
        ax.errorbar(values, y, xerr=_yerr([c.throughput for c in rows]), fmt="none", ecolor="black", capsize=3)
        ax.set_xlim(left=0)
    return fig


def _line_panels(plt: Any, count: int, legend: bool) -> tuple[Any, Any, list[Any], Callable[..., None] | None]:
    columns = 2 if count == 4 else min(LINE_COLUMNS, count)  # 2 x 2 rather than 3 + 1
    rows = math.ceil(count / columns)
    size = (7.0, 4.4) if count == 1 else (3.6 * columns + 0.4, 2.9 * rows + 0.6)
    fig, body, add_legend = _figure(plt, *size, legend)
    axes = body.subplots(rows, columns, squeeze=False)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    return fig, body, list(axes.flat)[:count], add_legend


def _series_plot(
    analysis: Analysis,
    plt: Any,
    series: list[list[ConfigResult]],
    x: Any,
    exclude: Collection[str],
    title: str,
    xlabel: str,
    ideal: bool = False,
) -> tuple[Any, list[Any]]:
    """Throughput against ``x(config)``: one line per series, one panel per workload, one legend for all."""
    everyone = [c for rows in series for c in rows]
    panels = _workloads(analysis, everyone)
    keys = _varying(everyone, set(exclude) | set(analysis.workload_axes))
    names = [_wrap(_describe(rows[0], keys)) for rows in series]
    styles = _palette(list(dict.fromkeys(names)))
    fig, body, axes, add_legend = _line_panels(plt, len(panels), legend=bool(keys))
    handles: dict[str, Any] = {}
    for ax, (name, configs) in zip(axes, panels):
        members = {id(c) for c in configs}
        for label, whole in zip(names, series):
            rows = [c for c in whole if id(c) in members]  # a series stays within its workload's panel
            if not rows:
                continue
            xs = [x(c) for c in rows]
            style = styles[label]
            line = ax.errorbar(
                xs,
                [c.throughput.value for c in rows],
                yerr=_yerr([c.throughput for c in rows]),
                capsize=3,
                markersize=5,
                **style,
            )
            handles.setdefault(label, line)
            if ideal:
                base = next(c for c in whole if c.world_size == 1)
                ax.plot(xs, [base.throughput.value * n for n in xs], linestyle="--", color=style["color"], alpha=0.5)
        ax.set_ylim(bottom=0)
        ax.tick_params(labelsize=FONT)
        if name:
            ax.set_title(_wrap(name, 36), fontsize=FONT)
    fig.suptitle(title, fontsize=TITLE_FONT)
    body.supxlabel(xlabel, fontsize=9)
    body.supylabel(f"global samples/s, mean with {round(100 * analysis.confidence)} % interval", fontsize=9)
    if add_legend:
        add_legend(list(handles.values()), list(handles))
    return fig, axes


def _scaling(analysis: Analysis, plt: Any) -> Any:
    by_baseline: dict[str, list[ConfigResult]] = defaultdict(list)
    for c in analysis.configs:
        if c.baseline and c.throughput.value is not None:
            by_baseline[c.baseline].append(c)
    series = [sorted(v, key=lambda c: c.world_size) for v in by_baseline.values() if len({c.world_size for c in v}) > 1]
    if not series:
        return None
    fig, axes = _series_plot(
        analysis,
        plt,
        series,
        lambda c: c.world_size,
        LAYOUT_OPTIONS,
        "Throughput vs processes (dashed: ideal linear scaling)",
        "processes (world size)",
        ideal=True,
    )
    sizes = sorted({c.world_size for rows in series for c in rows})
    for ax in axes:
        ax.set_xticks(sizes)
    return fig


def _batch(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.throughput.value is not None and c.global_batch]
    if len({c.global_batch for c in measured}) < 2:
        return None
    keys = _varying(measured, {"batch_size"})
    groups: dict[str, list[ConfigResult]] = defaultdict(list)
    for c in measured:
        groups[_describe(c, keys)].append(c)
    series = sorted(
        (sorted(rows, key=lambda c: c.global_batch or 0) for rows in groups.values()), key=lambda r: r[0].index
    )
    fig, axes = _series_plot(
        analysis, plt, series, lambda c: c.global_batch, {"batch_size"}, "Throughput vs batch size", "global batch size"
    )
    batches = sorted({c.global_batch for c in measured if c.global_batch})
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.minorticks_off()
    return fig


PART_LABELS = {
    "data": "data wait",
    "forward": "forward",
    "backward_compute": "backward compute",
    "exposed_comm": "exposed communication",
    "optimizer": "optimizer",
    "handlers": "handlers",
}


def _breakdown(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.rank_phases]
    if not measured:
        return None
    untimed = [c.name for c in measured if not c.comm_timed and c.world_size > 1]
    note = f"; {', '.join(untimed)}: all-reduce not timed, inside backward" if untimed else ""
    fig, panels, add_legend = _bar_panels(
        plt,
        _workloads(analysis, measured),
        "Step-time breakdown per rank",
        f"ms per iteration, mean over repeats; overlap = communication hidden behind backward compute{note}",
        legend=True,
        per_rank=True,
    )
    for ax, rows in panels:
        y = list(range(len(rows)))
        left = [0.0] * len(rows)
        for i, part in enumerate(STEP_PARTS):
            widths = [1e3 * config.rank_phases[rank].get(part, 0.0) for config, rank in rows]
            ax.barh(y, widths, left=left, label=PART_LABELS[part], color=f"C{i}")
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


def _rank_times(config: ConfigResult) -> tuple[RunResult, list[list[float]]] | None:
    """The configuration's first used run and its measured step times (ms) per rank, from its steps_rank<r>.csv."""
    run = next((r for r in config.runs if r.used), None)
    if run is None:
        return None
    per_rank = []
    for rank in range(config.world_size):
        path = Path(run.run_dir) / f"steps_rank{rank}.csv"
        if not path.is_file():
            return None
        with open(path) as f:
            per_rank.append([1e3 * float(r["step_s"]) for r in csv.DictReader(f) if r["warmup"] == "0"])
    return run, per_rank


def _repeat_shown(config: ConfigResult, run: RunResult) -> str:
    """Which of the configuration's runs a per-run figure shows: ``repeat 2 of 3`` (1-based, as the report's flags
    count), with the re-run attempt where the repeat was re-run.

    >>> from ignite_ddl.report.model import RunResult
    >>> def run(repeat, attempt=0):
    ...     return RunResult(repeat, attempt, 0, "completed", 1.0, False, None, None, True, "", None, None, None)
    >>> config = type("Config", (), {"runs": [run(0), run(1), run(1, 1), run(2)]})()
    >>> _repeat_shown(config, config.runs[2])
    'repeat 2 of 3 (re-run 1)'
    """
    repeats = len({r.repeat for r in config.runs})
    return f"repeat {run.repeat + 1} of {repeats}" + (f" (re-run {run.attempt})" if run.attempt else "")


def _ranks(analysis: Analysis, plt: Any) -> Any:
    from matplotlib.ticker import MaxNLocator

    panels = []
    for c in analysis.configs:
        if c.world_size < 2:
            continue
        found = _rank_times(c)
        if found and all(found[1]):
            panels.append((c, *found))
    if not panels:
        return None
    shown = panels[:MAX_PANELS]
    keys = _varying([c for c, _, _ in shown], set()) or (list(shown[0][0].grid) if len(shown) == 1 else [])
    columns = min(PANEL_COLUMNS, len(shown))
    rows = math.ceil(len(shown) / columns)
    width = max(2.7 * columns + 0.6, 5.6)
    fig, axes = plt.subplots(rows, columns, figsize=(width, 2.9 * rows + 0.8), squeeze=False, layout="constrained")
    for ax, (config, run, times) in zip(axes.flat, shown):
        ax.boxplot(times, showfliers=False)
        ax.set_xticks(range(1, len(times) + 1), [f"r{i}" for i in range(len(times))], fontsize=FONT)
        ax.tick_params(axis="y", labelsize=FONT)
        ax.yaxis.set_major_locator(MaxNLocator(5, steps=[1, 2, 5, 10]))
        ax.set_title(_wrap(_named(config, keys), 32) + "\n" + _repeat_shown(config, run), fontsize=FONT)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("step ms", fontsize=FONT + 1)
    more = f"; first {MAX_PANELS} of {len(panels)}" if len(panels) > MAX_PANELS else ""
    title = f"Per-rank step time of one repeat (named per panel{more})"
    fig.suptitle(_wrap(title, int(width * 10)), fontsize=TITLE_FONT)
    return fig


def confusion_heatmap(
    matrix: list[list[int]], ax: Any = None, classes: list[str] | None = None, title: str | None = None
) -> Any:
    """Draw a confusion matrix (rows: true class, columns: predicted) as a heatmap of each row's shares (per-class
    recall on the diagonal), with the counts written in the cells up to 12 classes; returns the axes.

    Example:
        >>> ax = confusion_heatmap([[8, 2], [1, 9]], classes=["cat", "dog"])
        >>> ax.get_xlabel(), round(float(ax.images[0].get_array()[0][0]), 2)
        ('predicted', 0.8)
        >>> pyplot().close(ax.figure)
    """
    import numpy as np

    plt = pyplot()
    counts = np.asarray(matrix, dtype=float)
    if ax is None:
        size = min(9.0, 2.5 + 0.35 * len(counts))
        _, ax = plt.subplots(figsize=(size, size))
    totals = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    labels = classes or [str(i) for i in range(len(counts))]
    ticks = range(len(counts))
    ax.set_xticks(ticks, labels, fontsize=FONT, rotation=90 if max(map(len, labels)) > 3 else 0)
    ax.set_yticks(ticks, labels, fontsize=FONT)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if title:
        ax.set_title(_wrap(title), fontsize=FONT + 1)
    if len(counts) <= 12:
        for i in ticks:
            for j in ticks:
                color = "white" if shares[i, j] > 0.6 else "black"
                ax.text(j, i, f"{int(counts[i, j])}", ha="center", va="center", fontsize=FONT - 1, color=color)
    return ax


def _confusion(analysis: Analysis, plt: Any) -> Any:
    chosen = []
    for workload, configs in _workloads(analysis, analysis.configs):
        with_matrix = [c for c in configs if c.confusion_matrix]
        if with_matrix:
            best = max(with_matrix, key=lambda c: c.val_accuracy if c.val_accuracy is not None else -1.0)
            chosen.append((workload, best))
    if not chosen:
        return None
    chosen = chosen[:MAX_PANELS]
    columns = min(len(chosen), LINE_COLUMNS)
    rows = -(-len(chosen) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 4.2 * rows), squeeze=False)
    for ax, (workload, config) in zip(axes.flat, chosen):
        accuracy = f", accuracy {config.val_accuracy:.3f}" if config.val_accuracy is not None else ""
        shown = f"{workload}: {config.name}" if workload else f"{config.name}: {config.label}"
        matrix = cast(list[list[int]], config.confusion_matrix)  # chosen holds configurations with a matrix only
        confusion_heatmap(matrix, ax=ax, title=f"{shown}{accuracy}")
    for ax in list(axes.flat)[len(chosen) :]:
        ax.set_visible(False)
    fig.suptitle("Validation confusion matrix\n(row shares; counts summed over the runs)", fontsize=TITLE_FONT)
    fig.tight_layout()
    return fig


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points ``(memory, throughput)`` no other point beats on both (less or equal memory and more or
    equal throughput, one of them strictly), in order of memory.

    >>> pareto_front([(100, 10), (200, 12), (150, 9), (300, 12)])
    [0, 1]
    """
    front = [
        i for i, (m, t) in enumerate(points) if not any(m2 <= m and t2 >= t and (m2 < m or t2 > t) for m2, t2 in points)
    ]
    return sorted(front, key=lambda i: points[i][0])


def _memory(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.throughput.value is not None and c.peak_memory.value is not None]
    if len(measured) < 2:
        return None
    panels = _workloads(analysis, measured)
    keys = _varying(measured, set())
    labels = [_named(c, keys) for c in measured]
    style = _palette(labels)
    fig, _, axes, add_legend = _line_panels(plt, len(panels), legend=True)
    handles: dict[str, Any] = {}
    for ax, (title, rows) in zip(axes, panels):
        points = [(cast(float, c.peak_memory.value) / MIB, cast(float, c.throughput.value)) for c in rows]
        for c, (x, y) in zip(rows, points):
            label = _named(c, keys)
            xerr = _yerr([c.peak_memory.scaled(1 / MIB)])
            yerr = _yerr([c.throughput])
            mark = ax.errorbar(
                x, y, xerr=xerr, yerr=yerr, fmt=style[label]["marker"], color=style[label]["color"], capsize=3
            )
            handles.setdefault(label, mark)
            if not c.fits:
                ax.plot(x, y, "x", color="black", markersize=12)
        fitting = [i for i, c in enumerate(rows) if c.fits]
        front = [fitting[i] for i in pareto_front([points[i] for i in fitting])]
        ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "--", color="grey", linewidth=1)
        ax.scatter(
            [points[i][0] for i in front], [points[i][1] for i in front], s=160, facecolors="none", edgecolors="grey"
        )
        ax.set_xlabel(f"peak memory per rank, MiB ({rows[0].memory_kind or 'resident'})", fontsize=FONT)
        ax.set_ylabel("samples/s", fontsize=FONT)
        ax.tick_params(labelsize=FONT)
        if title:
            ax.set_title(_wrap(title), fontsize=FONT)
    fig.suptitle("Throughput vs peak memory per rank (ringed: the Pareto front; x: does not fit)", fontsize=TITLE_FONT)
    if add_legend is not None:
        add_legend(list(handles.values()), [_wrap(label) for label in handles])
    return fig


# -- what DDP does, drawn from one real run

BUCKET_LANES = 8  # rows of the buckets' all-reduce bars under each rank's step; more buckets share them in turn
BUCKET_BAND = 0.4  # the height the bucket rows share above each rank's step, in units of one rank's row

DDP_PARTS = (  # a step's parts in the order they happen, as steps_rank<r>.csv records them
    ("data_s", "waiting for data", "tab:gray"),
    ("forward_s", "forward", "tab:blue"),
    ("backward_compute_s", "backward: gradient compute", "tab:orange"),
    ("exposed_comm_s", "backward: waiting for the last all-reduce (exposed)", "tab:red"),
    ("optimizer_s", "optimizer step", "tab:green"),
)


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _number(row: dict[str, str], key: str) -> float | None:
    value = row.get(key)
    return float(value) if value not in (None, "") else None


def _bucket_spans(cell: str | None) -> list[tuple[float, float]]:
    """A ``bucket_spans_ms`` cell (``ready-done;ready-done``, ms after the step's start) as (ready, done) seconds;
    [] for a blank cell or a CSV written before the column existed."""
    spans = []
    for part in (cell or "").split(";"):
        if not part.strip():
            continue
        match = re.fullmatch(r"\s*(-?[0-9.]+)-(-?[0-9.]+)\s*", part)
        if match is None:
            raise ValueError(f"not a bucket's span in ms (ready-done): {part!r}")
        spans.append((float(match[1]) / 1e3, float(match[2]) / 1e3))
    return spans


def ddp_step(run_dir: str | Path, iteration: int | None = None) -> dict[str, Any]:
    """One measured step of a DDP run, on every rank, as its ``steps_rank<r>.csv`` recorded it: ``iteration`` (by
    default the measured iteration whose step time on rank 0 is the median) and, per rank, the seconds of data wait,
    forward, backward (and of it gradient compute and exposed communication), optimizer, the time some bucket's
    all-reduce was in flight (``comm_s``), the buckets and their bytes, and each bucket's all-reduce as (ready, done)
    seconds after the step's start, in ready order (``bucket_spans``, from the ``bucket_spans_ms`` column; [] where
    the CSV has none, as one written before that column existed)."""
    run = Path(run_dir)
    paths = sorted(run.glob("steps_rank*.csv"), key=lambda p: int(p.stem.removeprefix("steps_rank")))
    if len(paths) < 2:
        raise ValueError(f"{run} has {len(paths)} steps_rank<r>.csv file(s): a DDP step needs a run of 2+ processes")
    ranks = [_csv_rows(p) for p in paths]
    timed = [r for r in ranks[0] if r["warmup"] == "0" and _number(r, "comm_s") is not None]
    if not timed:
        raise ValueError(
            f"{run} recorded no communication times for its measured steps (run it with --comm-timing, and more "
            "iterations than --warmup-iters)"
        )
    if iteration is None:
        ordered = sorted(timed, key=lambda r: float(r["step_s"]))
        iteration = int(ordered[(len(ordered) - 1) // 2]["iteration"])
    per_rank = []
    for rank, rows in enumerate(ranks):
        row = next((r for r in rows if int(r["iteration"]) == iteration), None)
        if row is None or _number(row, "comm_s") is None:
            raise ValueError(f"{run}: rank {rank} has no timed iteration {iteration}")
        figures = {k: _number(row, k) or 0.0 for k in ("data_s", "step_s", "forward_s", "backward_s", "optimizer_s")}
        comm, exposed = _number(row, "comm_s") or 0.0, _number(row, "exposed_comm_s") or 0.0
        figures |= {"comm_s": comm, "exposed_comm_s": exposed, "backward_compute_s": figures["backward_s"] - exposed}
        figures |= {"buckets": int(float(row["buckets"] or 0)), "comm_bytes": float(row["comm_bytes"] or 0)}
        per_rank.append({**figures, "bucket_spans": _bucket_spans(row.get("bucket_spans_ms"))})
    return {"iteration": iteration, "ranks": per_rank}


def ddp_diagram(run_dir: str | Path, iteration: int | None = None) -> Any:
    """A picture of what DDP did in one real step of the run in ``run_dir`` (a run of 2 or more processes with
    communication timing, ``ignite-ddl train``'s output folder): above, the replicas, each with its share of the
    batch, its gradients in buckets and the all-reduce that averages them; below, the step's timeline on every rank
    from its ``steps_rank<r>.csv`` (:func:`ddp_step`): data wait, forward, backward compute, the exposed end of the
    all-reduce, optimizer, and above them each bucket's all-reduce as recorded, one bar per bucket from its
    gradients being ready to its reduction being done (b1, the first ready, on top; more than 8 buckets share 8 rows
    in turn). The step's start is placed where the data wait ends, as the parts above are. A CSV without the
    buckets' spans (written before ``bucket_spans_ms`` existed) gets one hatched span of the total time some
    bucket's all-reduce was in flight, placed to end where backward ends. An open matplotlib figure."""
    from matplotlib.patches import FancyArrowPatch, Rectangle

    plt = pyplot()
    run = Path(run_dir)
    step = ddp_step(run, iteration)
    ranks = step["ranks"]
    world = len(ranks)
    config = read_json(run / "config.json").get("config", {}) if (run / "config.json").is_file() else {}
    summary = read_json(run / "summary.json") if (run / "summary.json").is_file() else {}
    per_rank_batch = (summary.get("batch") or {}).get("per_rank")
    buckets, nbytes = ranks[0]["buckets"], ranks[0]["comm_bytes"]

    fig = plt.figure(figsize=(11.0, 3.4 + 1.9 * world), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0 + 0.75 * world, 0.9 + 0.75 * world])

    # What DDP does: replicas, buckets, the all-reduce.
    ax = top.subplots()
    ax.set_xlim(0, 100)
    ax.set_ylim(-0.8, world + 0.2)
    ax.axis("off")

    def box(x: float, y: float, w: float, h: float, text: str, color: str) -> None:
        ax.add_patch(Rectangle((x, y), w, h, fc=color, ec="black", lw=0.8))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=FONT)

    def arrow(x0: float, y0: float, x1: float, y1: float) -> None:
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=10, color="black"))

    shown_buckets = min(buckets, 8)
    for rank in range(world):
        y = world - 1 - rank
        share = f"{per_rank_batch} samples" if per_rank_batch else "its share"
        box(0, y + 0.1, 16, 0.65, f"rank {rank}: data,\n{share} of the batch", "#eeeeee")
        arrow(16, y + 0.42, 19, y + 0.42)
        box(19, y + 0.1, 17, 0.65, f"replica {rank} of the model\n(the same weights)", "#dbe9f6")
        arrow(36, y + 0.42, 39, y + 0.42)
        width = 26 / max(shown_buckets, 1)
        for b in range(shown_buckets):  # launch order: the output layer's gradients first
            label = f"b{b + 1}" if shown_buckets == buckets or b < shown_buckets - 1 else "..."
            box(39 + b * width, y + 0.1, width * 0.85, 0.65, label, "#fde0c5")
        arrow(65, y + 0.42, 68, y + 0.42)
    box(68, 0.1, 12, world - 0.45, "all-reduce of\neach bucket:\nsum over the\nranks / N", "#f8d0d0")
    for rank in range(world):
        y = world - 1 - rank
        arrow(80, y + 0.42, 83, y + 0.42)
        box(83, y + 0.1, 17, 0.65, "the averaged gradient:\nthe same optimizer step", "#d5efd5")
    size = f"{nbytes / 1e3:.0f} kB" if nbytes < 1e6 else f"{nbytes / 1e6:.1f} MB"
    cap = f" (bucket_cap_mb={config['bucket_cap_mb']:g})" if config.get("bucket_cap_mb") else ""
    ax.text(
        50,
        -0.45,
        f"gradients: {size} per step in {buckets} bucket(s){cap}, b1 the output layer's (ready first);\neach "
        "bucket's all-reduce starts as soon as all its gradients exist, while backward computes the rest",
        ha="center",
        va="center",
        fontsize=FONT,
    )
    top.suptitle(f"What DDP does: {world} processes, one replica each ({run.name})", fontsize=TITLE_FONT)

    # The timeline of one real step.
    tl = bottom.subplots()
    for rank, figures in enumerate(ranks):
        y = rank
        start = 0.0
        for key, label, color in DDP_PARTS:
            width_ms = 1e3 * max(figures[key], 0.0)
            tl.barh(y, width_ms, left=start, height=0.45, color=color, label=label if rank == 0 else None)
            start += width_ms
        end_backward = 1e3 * (figures["data_s"] + figures["forward_s"] + figures["backward_s"])
        comm_ms = 1e3 * figures["comm_s"]
        spans = figures["bucket_spans"]
        if spans:  # each bucket's all-reduce, as recorded: ready -> done, ms after the step's start
            lanes = min(len(spans), BUCKET_LANES)
            lane, top = BUCKET_BAND / lanes, y - 0.28 - BUCKET_BAND  # just above the step's bar
            for b, (ready, done) in enumerate(spans):
                tl.barh(
                    top + (b % lanes + 0.5) * lane,
                    1e3 * (done - ready),
                    left=1e3 * (figures["data_s"] + ready),
                    height=lane * 0.8,
                    color="tab:purple",
                    alpha=0.75,
                    label=(
                        "each bucket's all-reduce, from its gradients ready to reduced (b1, ready first, on top)"
                        if rank == 0 and b == 0
                        else None
                    ),
                )
                if lanes == len(spans):
                    tl.annotate(
                        f"b{b + 1}",
                        (1e3 * (figures["data_s"] + ready), top + (b + 0.5) * lane),
                        xytext=(-2, 0),
                        textcoords="offset points",
                        ha="right",
                        va="center",
                        fontsize=FONT - 1,
                    )
        else:  # no spans recorded (a CSV older than bucket_spans_ms): the total, placed to end with backward
            tl.barh(
                y - 0.42,
                comm_ms,
                left=end_backward - comm_ms,
                height=0.22,
                color="tab:purple",
                hatch="//",
                alpha=0.6,
                label="some bucket's all-reduce in flight (total, placed to end with backward)" if rank == 0 else None,
            )
        overlap = 1 - figures["exposed_comm_s"] / figures["comm_s"] if figures["comm_s"] > 0 else 0.0
        tl.text(
            end_backward + 0.5,
            y - 0.42,
            f"comm {comm_ms:.1f} ms, exposed {1e3 * figures['exposed_comm_s']:.1f} ms: overlap {100 * overlap:.0f} %",
            va="center",
            fontsize=FONT,
        )
    tl.set_yticks(range(world), [f"rank {r}" for r in range(world)], fontsize=FONT + 1)
    tl.set_ylim(world - 0.4, -0.8)
    longest = max(1e3 * (f["data_s"] + f["forward_s"] + f["backward_s"] + f["optimizer_s"]) for f in ranks)
    tl.set_xlim(0, (longest or 1.0) * 1.45)  # a step recorded as 0 ms still gets a range
    tl.tick_params(axis="x", labelsize=FONT)
    tl.set_xlabel(
        f"ms within iteration {step['iteration']} (the median measured step of rank 0), from steps_rank<r>.csv; "
        "these lengths are this machine's: another CPU or GPU, or a busy machine, draws others",
        fontsize=FONT,
    )
    bottom.legend(loc="outside lower center", fontsize=FONT, ncols=3)
    bottom.suptitle(
        "One real step: the all-reduce overlaps backward; its exposed end is what overlap does not hide",
        fontsize=TITLE_FONT,
    )
    return fig
