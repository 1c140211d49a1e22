"""Throughput plots: per configuration with its interval, against processes (with ideal scaling) and against
the global batch."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from typing import Any

from ignite_ddl.core.config import LAYOUT_OPTIONS
from ignite_ddl.report.model import Analysis, ConfigResult
from ignite_ddl.report.plots.layout import (
    FONT,
    TITLE_FONT,
    bar_panels,
    describe,
    error_bars,
    line_panels,
    palette,
    varying,
    workloads,
    wrap,
)

__all__ = ["batch_plot", "scaling_plot", "throughput_plot"]


def throughput_plot(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.throughput.value is not None]
    if not measured:
        return None
    groups = workloads(analysis, measured)
    for _, rows in groups:
        rows.sort(key=lambda c: -(c.throughput.value or 0.0))
    verdicts = {v.workload: v for v in analysis.verdicts}
    pct = round(100 * analysis.confidence)
    # Counted contended runs can flip a ranking: then no bar gets the colours of a trusted verdict.
    trusted = analysis.contention_note is None
    legend = "green: best, olive: tied for best" if trusted else "orange: best or tied as measured, not trusted"
    fig, panels, _ = bar_panels(
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
            xerr=error_bars([rows[i].throughput for i in with_interval]),
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
    panels = workloads(analysis, everyone)
    keys = varying(everyone, set(exclude) | set(analysis.workload_axes))
    names = [wrap(describe(rows[0], keys)) for rows in series]
    styles = palette(list(dict.fromkeys(names)))
    fig, body, axes, add_legend = line_panels(plt, len(panels), legend=bool(keys))
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
                yerr=error_bars([c.throughput for c in rows]),
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
            ax.set_title(wrap(name, 36), fontsize=FONT)
    fig.suptitle(title, fontsize=TITLE_FONT)
    body.supxlabel(xlabel, fontsize=9)
    body.supylabel(f"global samples/s, mean with {round(100 * analysis.confidence)} % interval", fontsize=9)
    if add_legend:
        add_legend(list(handles.values()), list(handles))
    return fig, axes


def scaling_plot(analysis: Analysis, plt: Any) -> Any:
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


def batch_plot(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.throughput.value is not None and c.global_batch]
    if len({c.global_batch for c in measured}) < 2:
        return None
    keys = varying(measured, {"batch_size"})
    groups: dict[str, list[ConfigResult]] = defaultdict(list)
    for c in measured:
        groups[describe(c, keys)].append(c)
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
