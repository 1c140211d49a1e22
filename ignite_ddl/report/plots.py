"""The report's plots, readable from one configuration to dozens: error bars are the confidence intervals over
repeats, configurations are named by their short name on the axes (the report's table gives their options),
legends sit outside the data, panel grids wrap, and every figure uses constrained layout so titles and labels
stay inside it.

:func:`figures` returns the matplotlib figures (for notebooks and tests); :func:`make_plots` writes them as PNGs.
"""

from __future__ import annotations

import csv
import math
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

from ignite_ddl.report.analysis import LAYOUT_OPTIONS, Analysis, ConfigResult
from ignite_ddl.report.stats import Estimate

__all__ = ["PLOTS", "figures", "make_plots"]

PLOTS = {
    "throughput.png": "global throughput per configuration with its confidence interval, by workload",
    "throughput_vs_processes.png": "global throughput vs processes, with ideal scaling",
    "throughput_vs_batch.png": "global throughput vs global batch size",
    "step_breakdown.png": "where each step's time goes, per configuration",
    "rank_step_times.png": "step-time distribution per rank",
}
MAX_PANELS = 32
PANEL_COLUMNS = 4
WRAP = 34  # characters per line of a panel title or legend entry


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def make_plots(analysis: Analysis, out: Path) -> list[tuple[str, str]]:
    """Write the plots that apply into ``out``; (file name, description) of each one written."""
    plt = _pyplot()
    made = []
    for name, fig in figures(analysis).items():
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        made.append((name, PLOTS[name]))
    return made


def figures(analysis: Analysis) -> dict[str, Any]:
    """The plots that apply to this sweep, as open matplotlib figures (close them when done)."""
    plt = _pyplot()
    made = {}
    for name, draw in (
        ("throughput.png", _throughput),
        ("throughput_vs_processes.png", _scaling),
        ("throughput_vs_batch.png", _batch),
        ("step_breakdown.png", _breakdown),
        ("rank_step_times.png", _ranks),
    ):
        fig = draw(analysis, plt)
        if fig is not None:
            made[name] = fig
    return made


def _wrap(text: str, width: int = WRAP) -> str:
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False)) or text


def _yerr(estimates: list[Estimate]) -> list[list[float]]:
    """Asymmetric error bars from intervals (zero where a configuration has none)."""
    lows = [e.value - e.low if e.has_interval and e.value is not None else 0.0 for e in estimates]  # type: ignore[operator]
    highs = [e.high - e.value if e.has_interval and e.value is not None else 0.0 for e in estimates]  # type: ignore[operator]
    return [lows, highs]


def _varying(configs: list[ConfigResult], exclude: frozenset[str] | set[str]) -> list[str]:
    """Grid options that take more than one value among ``configs`` (the ones worth naming in a legend)."""
    keys = list(dict.fromkeys(k for c in configs for k in c.grid if k not in exclude))
    return [k for k in keys if len({repr(c.grid.get(k)) for c in configs}) > 1]


def _describe(config: ConfigResult, keys: list[str]) -> str:
    return ", ".join(f"{k}={config.grid.get(k)}" for k in keys) or "all"


def _legend(fig: Any, ax: Any, entries: int) -> None:
    if entries:
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize=8)


def _throughput(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.throughput.value is not None]
    if not measured:
        return None
    order = {v.workload: i for i, v in enumerate(analysis.verdicts)}
    measured.sort(key=lambda c: (order.get(c.workload, 0), -(c.throughput.value or 0.0)))
    verdicts = {v.workload: v for v in analysis.verdicts}
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.3 * len(measured)), layout="constrained")
    colors = []
    for c in measured:
        verdict = verdicts.get(c.workload)
        if verdict is not None and verdict.best == c.name:
            colors.append("tab:green")
        elif verdict is not None and c.name in verdict.tied:
            colors.append("tab:olive")
        else:
            colors.append("tab:gray")
    y = list(range(len(measured)))
    ax.barh(y, [c.throughput.value for c in measured], color=colors, alpha=0.75)
    ax.errorbar(
        [c.throughput.value for c in measured],
        y,
        xerr=_yerr([c.throughput for c in measured]),
        fmt="none",
        ecolor="black",
        capsize=3,
    )
    ax.set_yticks(y, [c.name for c in measured], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"global samples/s, mean with {round(100 * analysis.confidence)} % interval over repeats")
    ax.set_title("Throughput per configuration (green: best, olive: tied for best)", fontsize=10)
    if len(analysis.verdicts) > 1:  # separate the workloads: a configuration is compared only within its own
        bounds = [i for i in range(1, len(measured)) if measured[i].workload != measured[i - 1].workload]
        for b in bounds:
            ax.axhline(b - 0.5, color="black", linewidth=0.8)
        ax.set_ylabel("configuration (lines separate workloads)")
    else:
        ax.set_ylabel("configuration")
    return fig


def _scaling(analysis: Analysis, plt: Any) -> Any:
    by_baseline: dict[str, list[ConfigResult]] = defaultdict(list)
    for c in analysis.configs:
        if c.baseline and c.throughput.value is not None:
            by_baseline[c.baseline].append(c)
    series = {
        k: sorted(v, key=lambda c: c.world_size) for k, v in by_baseline.items() if len({c.world_size for c in v}) > 1
    }
    if not series:
        return None
    everyone = [c for v in series.values() for c in v]
    keys = _varying(everyone, LAYOUT_OPTIONS)
    fig, ax = plt.subplots(figsize=(8, 4.8), layout="constrained")
    for rows in series.values():
        x = [c.world_size for c in rows]
        line = ax.errorbar(
            x,
            [c.throughput.value for c in rows],
            yerr=_yerr([c.throughput for c in rows]),
            marker="o",
            capsize=3,
            label=_wrap(_describe(rows[0], keys)),
        )
        base = next(c for c in rows if c.world_size == 1)
        ax.plot(x, [base.throughput.value * n for n in x], linestyle="--", color=line[0].get_color(), alpha=0.5)  # type: ignore[operator]
    ax.set_xlabel("processes (world size)")
    ax.set_ylabel("global samples/s")
    ax.set_title("Throughput vs processes (dashed: ideal linear scaling)", fontsize=10)
    ax.set_xticks(sorted({c.world_size for c in everyone}))
    _legend(fig, ax, len(series) if len(series) > 1 or keys else 0)
    return fig


def _batch(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.throughput.value is not None and c.global_batch]
    if len({c.global_batch for c in measured}) < 2:
        return None
    keys = _varying(measured, {"batch_size"})
    groups: dict[str, list[ConfigResult]] = defaultdict(list)
    for c in measured:
        groups[_describe(c, keys)].append(c)
    fig, ax = plt.subplots(figsize=(8, 4.8), layout="constrained")
    for label, rows in sorted(groups.items()):
        rows.sort(key=lambda c: c.global_batch or 0)
        ax.errorbar(
            [c.global_batch for c in rows],
            [c.throughput.value for c in rows],
            yerr=_yerr([c.throughput for c in rows]),
            marker="o",
            capsize=3,
            label=_wrap(label),
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("global batch size")
    ax.set_ylabel("global samples/s")
    ax.set_title("Throughput vs batch size", fontsize=10)
    _legend(fig, ax, len(groups) if len(groups) > 1 else 0)
    return fig


def _breakdown(analysis: Analysis, plt: Any) -> Any:
    measured = [c for c in analysis.configs if c.phases]
    if not measured:
        return None
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.3 * len(measured)), layout="constrained")
    y = list(range(len(measured)))
    left = [0.0] * len(measured)
    for phase in ("data", "forward", "backward", "optimizer"):
        widths = [1e3 * c.phases.get(phase, 0.0) for c in measured]
        ax.barh(y, widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(y, [c.name for c in measured], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per iteration, mean over ranks and repeats (backward includes the gradient all-reduce)")
    ax.set_title("Step-time breakdown", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    return fig


def _rank_times(config: ConfigResult) -> list[list[float]] | None:
    """Measured step times (ms) per rank of the configuration's first used run, from its steps_rank<r>.csv."""
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
    return per_rank


def _ranks(analysis: Analysis, plt: Any) -> Any:
    panels = []
    for c in analysis.configs:
        if c.world_size < 2:
            continue
        times = _rank_times(c)
        if times and all(times):
            panels.append((c, times))
    if not panels:
        return None
    shown = panels[:MAX_PANELS]
    keys = _varying([c for c, _ in shown], set())
    columns = min(PANEL_COLUMNS, len(shown))
    rows = math.ceil(len(shown) / columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(2.6 * columns + 0.6, 2.7 * rows + 0.8), squeeze=False, layout="constrained"
    )
    for ax, (config, times) in zip(axes.flat, shown):
        ax.boxplot(times, showfliers=False)
        ax.set_xticks(range(1, len(times) + 1), [f"r{i}" for i in range(len(times))], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(_wrap(f"{config.name}: {_describe(config, keys)}", 30), fontsize=7)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("step ms", fontsize=8)
    more = f"; first {MAX_PANELS} of {len(panels)}" if len(panels) > MAX_PANELS else ""
    fig.suptitle(f"Per-rank step time (measured iterations of one repeat{more})", fontsize=10)
    return fig
