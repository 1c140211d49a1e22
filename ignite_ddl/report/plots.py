"""The report's plots, readable from one configuration to dozens: error bars are the confidence intervals over
repeats, workloads get panels of their own (a configuration is compared only within its workload), bars are named
by configuration and the options that tell them apart, legends sit outside the data, panel grids wrap, figures
grow with what they show, and every figure uses constrained layout so titles and labels stay inside it.

:func:`figures` returns the matplotlib figures (for notebooks and tests); :func:`make_plots` writes them as PNGs.
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, cast

from ignite_ddl.core.config import LAYOUT_OPTIONS
from ignite_ddl.core.figures import pyplot, save_figure
from ignite_ddl.core.steps_csv import read_steps
from ignite_ddl.report.model import MIB, PHASE_COLOURS, STEP_PARTS, Analysis, ConfigResult, RunResult
from ignite_ddl.report.recommendation import memory_in_all
from ignite_ddl.report.stats import Estimate, mean_interval

__all__ = [
    "PLOTS",
    "confusion_heatmap",
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
    "throughput_vs_memory.png": "global throughput against peak memory in all (the largest rank's peak x "
    "processes), with intervals; the Pareto front of the configurations that can be recommended (judged, fit, do not "
    "learn worse: no other of them is both faster and smaller) joined and ringed, the recommended one starred, "
    "configurations that do not fit crossed",
    "speed_vs_quality.png": "global throughput against validation accuracy, with intervals over repeats: the trade "
    "between speed and what training learns; each workload's reference configuration ringed, those that learn worse "
    "crossed",
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
        ("speed_vs_quality.png", _speed_quality),
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
    """Asymmetric error bars from intervals (zero where a configuration has none); the quantities drawn are
    positive, so a low end below zero (a t-interval over a few noisy runs) is drawn clipped at 0."""
    lows = [e.value - max(e.low, 0.0) if e.has_interval and e.value is not None else 0.0 for e in estimates]  # type: ignore[operator,type-var]
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
        with_interval = [i for i, c in enumerate(rows) if c.throughput.has_interval]
        ax.errorbar(
            [values[i] for i in with_interval],
            with_interval,
            xerr=_yerr([rows[i].throughput for i in with_interval]),
            fmt="none",
            ecolor="black",
            capsize=3,
        )
        for i, c in enumerate(rows):  # what the bar alone does not say: no interval, passed over by the verdict
            said = ["1 run: no interval"] if not c.throughput.has_interval else []
            said += ["not judged"] if c.not_judged else []
            said += [c.quality] if c.learns_worse and c.quality else []
            if said:
                ax.text(values[i] or 0.0, i, "  " + ", ".join(said), va="center", fontsize=FONT - 1)
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
        per_rank.append([1e3 * r["step_s"] for r in read_steps(path) if not r["warmup"] and r["step_s"] is not None])
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
    title = (
        "Validation confusion matrix: numbers are counts summed over the runs used; colour is each true class's "
        "(row's) share"
    )
    fig.suptitle(_wrap(title, int(4.2 * columns * 9)), fontsize=TITLE_FONT)  # wrapped to the figure's width
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
    recommended = {v.recommended for v in analysis.verdicts if v.recommended is not None}
    for ax, (title, rows) in zip(axes, panels):
        # In all, as the recommendation weighs it: one process at 525 MiB is less than two at 556 MiB each.
        points = [(cast(float, memory_in_all(c).value) / MIB, cast(float, c.throughput.value)) for c in rows]
        for c, (x, y) in zip(rows, points):
            label = _named(c, keys)
            xerr = _yerr([memory_in_all(c).scaled(1 / MIB)])
            yerr = _yerr([c.throughput])
            mark = ax.errorbar(
                x, y, xerr=xerr, yerr=yerr, fmt=style[label]["marker"], color=style[label]["color"], capsize=3
            )
            handles.setdefault(label, mark)
            if not c.fits:
                ax.plot(x, y, "x", color="black", markersize=12)
            if c.name in recommended:
                ax.plot(x, y, "*", color="black", markersize=16, markerfacecolor="none")
        # The front of the configurations the recommendation may choose: one it passes over rings nothing.
        eligible = [i for i, c in enumerate(rows) if c.fits and c.not_judged is None and not c.learns_worse]
        front = [eligible[i] for i in pareto_front([points[i] for i in eligible])]
        ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "--", color="grey", linewidth=1)
        ax.scatter(
            [points[i][0] for i in front], [points[i][1] for i in front], s=160, facecolors="none", edgecolors="grey"
        )
        kind = rows[0].memory_kind or "resident"
        ax.set_xlabel(f"peak memory in all, MiB (per rank x processes, {kind})", fontsize=FONT)
        ax.set_ylabel("samples/s", fontsize=FONT)
        ax.tick_params(labelsize=FONT)
        if title:
            ax.set_title(_wrap(title), fontsize=FONT)
    title = (
        "Throughput vs peak memory in all (ringed: the Pareto front of those that can be recommended; star: "
        "recommended; x: does not fit)"
    )
    fig.suptitle(_wrap(title, int(10 * fig.get_size_inches()[0])), fontsize=TITLE_FONT)  # wrapped to its width
    if add_legend is not None:
        add_legend(list(handles.values()), [_wrap(label) for label in handles])
    return fig


def _speed_quality(analysis: Analysis, plt: Any) -> Any:
    """Throughput against validation accuracy, each with its interval over repeats, a panel per workload."""
    measured = [c for c in analysis.configs if c.throughput.value is not None and c.val_accuracies]
    if not measured:
        return None
    panels = _workloads(analysis, measured)
    keys = _varying(measured, set())
    labels = [_named(c, keys) for c in measured]
    style = _palette(labels)
    fig, _, axes, add_legend = _line_panels(plt, len(panels), legend=True)
    handles: dict[str, Any] = {}
    for ax, (title, rows) in zip(axes, panels):
        for c in rows:
            label = _named(c, keys)
            accuracy = mean_interval(c.val_accuracies, analysis.confidence)
            x, y = cast(float, accuracy.value), cast(float, c.throughput.value)
            mark = ax.errorbar(
                x,
                y,
                xerr=_yerr([accuracy]),
                yerr=_yerr([c.throughput]),
                fmt=style[label]["marker"],
                color=style[label]["color"],
                capsize=3,
            )
            handles.setdefault(label, mark)
            if c.quality == "reference":
                ax.scatter([x], [y], s=160, facecolors="none", edgecolors="grey")
            if c.learns_worse:
                ax.plot(x, y, "x", color="black", markersize=12)
        ax.set_xlabel("validation accuracy after the last epoch", fontsize=FONT)
        ax.set_ylabel("samples/s", fontsize=FONT)
        ax.tick_params(labelsize=FONT)
        if title:
            ax.set_title(_wrap(title), fontsize=FONT)
    fig.suptitle(
        f"Speed vs quality, {round(100 * analysis.confidence)} % intervals over repeats (ringed: the workload's "
        "reference; x: learns worse)",
        fontsize=TITLE_FONT,
    )
    if add_legend is not None:
        add_legend(list(handles.values()), [_wrap(label) for label in handles])
    return fig
