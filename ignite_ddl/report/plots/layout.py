"""What every plot of the report is drawn with: its sizes and fonts, panels per workload, bar and line panels in
constrained layout, a colour per series, names that tell configurations apart, and the mark of a contended sweep."""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from collections.abc import Callable, Collection
from typing import Any, cast

from ignite_ddl.report.model import Analysis, ConfigResult
from ignite_ddl.report.stats import Estimate

__all__ = [
    "BAR_LABEL_WRAP",
    "BAR_WIDTH_IN",
    "FONT",
    "LINE_COLUMNS",
    "MARKERS",
    "MAX_PANELS",
    "PANEL_COLUMNS",
    "TITLE_FONT",
    "WRAP",
    "bar_panels",
    "describe",
    "figure",
    "line_panels",
    "mark_contended",
    "named",
    "palette",
    "row_label",
    "varying",
    "workloads",
    "wrap",
    "error_bars",
]

MAX_PANELS = 32
PANEL_COLUMNS = 4  # rank panels per row
LINE_COLUMNS = 3  # workload panels per row of the line plots
WRAP = 34  # characters per line of a panel title or legend entry
BAR_LABEL_WRAP = 56  # characters per line of a bar's label
BAR_WIDTH_IN = 10.0
FONT = 8  # tick labels, legends, panel titles
TITLE_FONT = 11
MARKERS = "osD^vPX*"


def mark_contended(fig: Any, note: str) -> None:
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


def wrap(text: str, width: int = WRAP) -> str:
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False)) or text


def error_bars(estimates: list[Estimate]) -> list[list[float]]:
    """Asymmetric error bars from intervals (zero where a configuration has none); the quantities drawn are
    positive, so a low end below zero (a t-interval over a few noisy runs) is drawn clipped at 0."""
    lows = [e.value - max(e.low, 0.0) if e.has_interval and e.value is not None else 0.0 for e in estimates]  # type: ignore[operator,type-var]
    highs = [e.high - e.value if e.has_interval and e.value is not None else 0.0 for e in estimates]  # type: ignore[operator]
    return [lows, highs]


def varying(configs: list[ConfigResult], exclude: Collection[str]) -> list[str]:
    """Grid options that take more than one value among ``configs`` (the ones worth naming in a legend)."""
    keys = list(dict.fromkeys(k for c in configs for k in c.grid if k not in exclude))
    return [k for k in keys if len({repr(c.grid.get(k)) for c in configs}) > 1]


def describe(config: ConfigResult, keys: list[str]) -> str:
    return ", ".join(f"{k}={config.grid_shown.get(k)}" for k in keys) or "all"


def named(config: ConfigResult, keys: list[str]) -> str:
    """The configuration's short name, then the options that tell it apart from its neighbours."""
    return f"{config.name}: {describe(config, keys)}" if keys else config.name


def workloads(analysis: Analysis, configs: list[ConfigResult]) -> list[tuple[str | None, list[ConfigResult]]]:
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
    parts: dict[str, list[str]] = {w: [] for w in names}
    for axis in axes:
        values = {w: groups[w][0].config.get(axis) for w in names}
        if all(isinstance(v, dict) for v in values.values()):
            # a workload's arguments (workload_args): only the ones that differ, as d_model=64, not the whole dict
            arguments = {w: cast(dict[str, Any], v) for w, v in values.items()}
            keys = dict.fromkeys(k for a in arguments.values() for k in a)
            differ = [k for k in keys if len({repr(a.get(k)) for a in arguments.values()}) > 1]
            for w in names:
                parts[w] += [f"{k}={arguments[w].get(k)}" for k in differ]
        else:
            for w in names:
                parts[w].append(f"{axis}={values[w]}")
    return [("workload: " + ", ".join(parts[w]), groups[w]) for w in names]


def palette(labels: list[str]) -> dict[str, dict[str, Any]]:
    """A colour per series label, the same in every panel; beyond 20 series, markers tell same-coloured ones apart."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {
        label: {"color": cmap(i % cmap.N), "marker": MARKERS[(i // cmap.N) % len(MARKERS)]}
        for i, label in enumerate(labels)
    }


def figure(plt: Any, width: float, height: float, legend: bool) -> tuple[Any, Any, Callable[..., None] | None]:
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


def bar_panels(
    plt: Any,
    groups: list[tuple[str | None, list[ConfigResult]]],
    title: str,
    xlabel: str,
    legend: bool = False,
    per_rank: bool = False,
) -> tuple[Any, list[tuple[Any, list[Any]]], Callable[..., None] | None]:
    """A stack of horizontal-bar panels, one per group, each as tall as its bars and their labels need. A panel's
    rows are its configurations, or with ``per_rank`` a ``(configuration, rank)`` row per rank of each."""
    keys = [varying(configs, set()) for _, configs in groups]
    rows: list[list[Any]] = [
        [(c, r) for c in configs for r in range(len(c.rank_phases))] if per_rank else list(configs)
        for _, configs in groups
    ]
    labels = [[row_label(row, k) for row in panel_rows] for k, panel_rows in zip(keys, rows)]
    heights = [sum(0.17 + 0.14 * (label.count("\n") + 1) for label in panel) + 0.2 for panel in labels]
    overhead = 0.55 * len(groups) + (0.2 if groups[0][0] else 0.0)
    fig, body, add_legend = figure(plt, BAR_WIDTH_IN, sum(heights) + overhead + 0.8, legend)
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
    body.supxlabel(wrap(xlabel, 110), fontsize=9)
    return fig, panels, add_legend


def row_label(row: Any, keys: list[str]) -> str:
    """A bar's label: the configuration (named on its first rank's row only), then the rank."""
    if isinstance(row, ConfigResult):
        return wrap(named(row, keys), BAR_LABEL_WRAP)
    config, rank = row
    return (wrap(named(config, keys), BAR_LABEL_WRAP) + "  " if rank == 0 else "") + f"r{rank}"


def line_panels(plt: Any, count: int, legend: bool) -> tuple[Any, Any, list[Any], Callable[..., None] | None]:
    columns = 2 if count == 4 else min(LINE_COLUMNS, count)  # 2 x 2 rather than 3 + 1
    rows = math.ceil(count / columns)
    size = (7.0, 4.4) if count == 1 else (3.6 * columns + 0.4, 2.9 * rows + 0.6)
    fig, body, add_legend = figure(plt, *size, legend)
    axes = body.subplots(rows, columns, squeeze=False)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    return fig, body, list(axes.flat)[:count], add_legend
