"""The trades a choice makes: throughput against peak memory in all (with the Pareto front of the configurations
that can be recommended) and against validation accuracy (or loss, where a workload is judged by it)."""

from __future__ import annotations

from typing import Any, cast

from ignite_ddl.report.model import MIB, Analysis, ConfigResult
from ignite_ddl.report.plots.layout import (
    FONT,
    TITLE_FONT,
    error_bars,
    line_panels,
    named,
    palette,
    varying,
    workloads,
    wrap,
)
from ignite_ddl.report.recommendation import memory_in_all
from ignite_ddl.report.stats import mean_interval

__all__ = ["memory_plot", "pareto_front", "speed_quality_plot"]


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


class _Scatter:
    """A scatter plot of configurations, one panel per workload: each point with its intervals on both axes, one
    colour and marker per configuration across panels, a legend of each once. What the two trade-off plots share."""

    def __init__(self, analysis: Analysis, plt: Any, measured: list[ConfigResult]) -> None:
        self.panels = workloads(analysis, measured)
        self.keys = varying(measured, set(analysis.workload_axes))  # each panel title names its workload
        self.style = palette([named(c, self.keys) for c in measured])
        self.fig, _, self.axes, self._add_legend = line_panels(plt, len(self.panels), legend=True)
        self._handles: dict[str, Any] = {}

    def point(self, ax: Any, c: ConfigResult, xy: tuple[float, float], xerr: Any, yerr: Any) -> None:
        label = named(c, self.keys)
        style = self.style[label]
        mark = ax.errorbar(*xy, xerr=xerr, yerr=yerr, fmt=style["marker"], color=style["color"], capsize=3)
        self._handles.setdefault(label, mark)

    @staticmethod
    def label(ax: Any, title: str | None, xlabel: str) -> None:
        ax.set_xlabel(xlabel, fontsize=FONT)
        ax.set_ylabel("samples/s", fontsize=FONT)
        ax.tick_params(labelsize=FONT)
        if title:
            ax.set_title(wrap(title), fontsize=FONT)

    def finish(self, title: str) -> Any:
        self.fig.suptitle(title, fontsize=TITLE_FONT)
        if self._add_legend is not None:
            self._add_legend(list(self._handles.values()), [wrap(label) for label in self._handles])
        return self.fig


def memory_plot(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.throughput.value is not None and c.peak_memory.value is not None]
    if len(measured) < 2:
        return None
    plot = _Scatter(analysis, plt, measured)
    recommended = {v.recommended for v in analysis.verdicts if v.recommended is not None}
    for ax, (title, rows) in zip(plot.axes, plot.panels):
        # In all, as the recommendation weighs it: one process at 525 MiB is less than two at 556 MiB each.
        points = [(cast(float, memory_in_all(c).value) / MIB, cast(float, c.throughput.value)) for c in rows]
        for c, (x, y) in zip(rows, points):
            plot.point(ax, c, (x, y), error_bars([memory_in_all(c).scaled(1 / MIB)]), error_bars([c.throughput]))
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
        plot.label(ax, title, f"peak memory in all, MiB (per rank x processes, {kind})")
    title = (
        "Throughput vs peak memory in all (ringed: the Pareto front of those that can be recommended; star: "
        "recommended; x: does not fit)"
    )
    return plot.finish(wrap(title, int(10 * plot.fig.get_size_inches()[0])))  # wrapped to its width


def _learnt(c: ConfigResult) -> list[float]:
    """What a configuration's quality is judged by, per run used: validation accuracy, or loss."""
    return c.val_losses if c.quality_by == "loss" else c.val_accuracies


def _readable_quality_axis(ax: Any, values: list[float]) -> None:
    """Plain tick labels on the quality axis, and at least 2 % of its values' size across: configurations that
    learnt alike (a seeded run's loss the same to 1e-7) otherwise read as "1e-7 + 1.986322", matplotlib's offset
    over a span of nothing, which makes equal figures look different."""
    ax.ticklabel_format(axis="x", useOffset=False, style="plain")
    low, high = min(values), max(values)
    centre, least = (low + high) / 2, max(0.02 * abs((low + high) / 2), 1e-3)
    shown_low, shown_high = ax.get_xlim()
    if shown_high - shown_low < least:
        ax.set_xlim(centre - least / 2, centre + least / 2)


def speed_quality_plot(analysis: Analysis, plt: Any) -> Any:
    """Throughput against validation accuracy (or loss, where its workload is judged by it), each with its interval
    over repeats, a panel per workload."""
    measured = [c for c in analysis.configs if c.throughput.value is not None and _learnt(c)]
    if not measured:
        return None
    plot = _Scatter(analysis, plt, measured)
    for ax, (title, rows) in zip(plot.axes, plot.panels):
        xs = []
        for c in rows:
            learnt = mean_interval(_learnt(c), analysis.confidence)
            xs.append(cast(float, learnt.value))
            x, y = cast(float, learnt.value), cast(float, c.throughput.value)
            plot.point(ax, c, (x, y), error_bars([learnt]), error_bars([c.throughput]))
            if c.quality == "reference":
                ax.scatter([x], [y], s=160, facecolors="none", edgecolors="grey")
            if c.learns_worse:
                ax.plot(x, y, "x", color="black", markersize=12)
        _readable_quality_axis(ax, xs)
        by_loss = any(c.quality_by == "loss" for c in rows)
        plot.label(ax, title, f"validation {'loss (lower is better)' if by_loss else 'accuracy'} after the last epoch")
    return plot.finish(
        f"Speed vs quality, {round(100 * analysis.confidence)} % intervals over repeats (ringed: the workload's "
        "reference; x: learns worse)"
    )
