"""The trades a choice makes: throughput against peak memory in all (with the Pareto front of the configurations
that can be recommended) and against validation accuracy."""

from __future__ import annotations

from typing import Any, cast

from ignite_ddl.report.model import MIB, Analysis
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


def memory_plot(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.throughput.value is not None and c.peak_memory.value is not None]
    if len(measured) < 2:
        return None
    panels = workloads(analysis, measured)
    keys = varying(measured, set())
    labels = [named(c, keys) for c in measured]
    style = palette(labels)
    fig, _, axes, add_legend = line_panels(plt, len(panels), legend=True)
    handles: dict[str, Any] = {}
    recommended = {v.recommended for v in analysis.verdicts if v.recommended is not None}
    for ax, (title, rows) in zip(axes, panels):
        # In all, as the recommendation weighs it: one process at 525 MiB is less than two at 556 MiB each.
        points = [(cast(float, memory_in_all(c).value) / MIB, cast(float, c.throughput.value)) for c in rows]
        for c, (x, y) in zip(rows, points):
            label = named(c, keys)
            xerr = error_bars([memory_in_all(c).scaled(1 / MIB)])
            yerr = error_bars([c.throughput])
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
            ax.set_title(wrap(title), fontsize=FONT)
    title = (
        "Throughput vs peak memory in all (ringed: the Pareto front of those that can be recommended; star: "
        "recommended; x: does not fit)"
    )
    fig.suptitle(wrap(title, int(10 * fig.get_size_inches()[0])), fontsize=TITLE_FONT)  # wrapped to its width
    if add_legend is not None:
        add_legend(list(handles.values()), [wrap(label) for label in handles])
    return fig


def speed_quality_plot(analysis: Analysis, plt: Any) -> Any:
    """Throughput against validation accuracy, each with its interval over repeats, a panel per workload."""
    measured = [c for c in analysis.configs if c.throughput.value is not None and c.val_accuracies]
    if not measured:
        return None
    panels = workloads(analysis, measured)
    keys = varying(measured, set())
    labels = [named(c, keys) for c in measured]
    style = palette(labels)
    fig, _, axes, add_legend = line_panels(plt, len(panels), legend=True)
    handles: dict[str, Any] = {}
    for ax, (title, rows) in zip(axes, panels):
        for c in rows:
            label = named(c, keys)
            accuracy = mean_interval(c.val_accuracies, analysis.confidence)
            x, y = cast(float, accuracy.value), cast(float, c.throughput.value)
            mark = ax.errorbar(
                x,
                y,
                xerr=error_bars([accuracy]),
                yerr=error_bars([c.throughput]),
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
            ax.set_title(wrap(title), fontsize=FONT)
    fig.suptitle(
        f"Speed vs quality, {round(100 * analysis.confidence)} % intervals over repeats (ringed: the workload's "
        "reference; x: learns worse)",
        fontsize=TITLE_FONT,
    )
    if add_legend is not None:
        add_legend(list(handles.values()), [wrap(label) for label in handles])
    return fig
