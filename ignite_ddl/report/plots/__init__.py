"""The report's plots, readable from one configuration to dozens: error bars are the confidence intervals over
repeats, workloads get panels of their own (a configuration is compared only within its workload), bars are named
by configuration and the options that tell them apart, legends sit outside the data, panel grids wrap, figures
grow with what they show, and every figure uses constrained layout so titles and labels stay inside it.

Each kind of plot is a module: :mod:`.throughput` (per configuration, against processes and batch),
:mod:`.steps` (where a step's time goes), :mod:`.confusion`, :mod:`.tradeoffs` (memory and quality against
speed); :mod:`.layout` is what they are all drawn with.

:func:`figures` returns the matplotlib figures (for notebooks and tests); :func:`make_plots` writes them as PNGs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ignite_ddl.core.figures import plain_text, pyplot, save_figure
from ignite_ddl.report.model import Analysis
from ignite_ddl.report.plots.confusion import confusion_heatmap, confusion_plot
from ignite_ddl.report.plots.layout import TITLE_FONT, mark_contended
from ignite_ddl.report.plots.steps import breakdown_plot, ranks_plot
from ignite_ddl.report.plots.throughput import batch_plot, scaling_plot, throughput_plot
from ignite_ddl.report.plots.tradeoffs import memory_plot, pareto_front, speed_quality_plot

# confusion_heatmap and pareto_front: imported from here by notebooks and tests.
__all__ = ["PLOTS", "confusion_heatmap", "figures", "make_plots", "pareto_front"]

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
    "speed_vs_quality.png": "global throughput against validation accuracy (validation loss for a workload judged "
    "by it: no accuracy, or a language model), with intervals over repeats: the trade "
    "between speed and what training learns; each workload's reference configuration ringed, those that learn worse "
    "crossed",
}


def make_plots(analysis: Analysis, out: Path) -> list[tuple[str, str]]:
    """Write the plots that apply into ``out``; (file name, description) of each one written."""
    made = []
    with plain_text():  # saved as drawn: a tick label made as the figure is saved is plain as well
        for name, fig in figures(analysis).items():
            save_figure(fig, out / name)
            made.append((name, PLOTS[name]))
    return made


def figures(analysis: Analysis) -> dict[str, Any]:
    """The plots that apply to this sweep, as open matplotlib figures (close them when done)."""
    plt = pyplot()
    made = {}
    with plain_text():  # grid values and workload names are the user's text, never mathtext
        for name, draw in (
            ("throughput.png", throughput_plot),
            ("throughput_vs_processes.png", scaling_plot),
            ("throughput_vs_batch.png", batch_plot),
            ("step_breakdown.png", breakdown_plot),
            ("rank_step_times.png", ranks_plot),
            ("confusion.png", confusion_plot),
            ("throughput_vs_memory.png", memory_plot),
            ("speed_vs_quality.png", speed_quality_plot),
        ):
            fig = draw(analysis, plt)
            if fig is None:
                continue
            if analysis.omitted:  # a view of a large sweep (Analysis.shown): the figure says it is not all of it
                title = fig._suptitle.get_text() if fig._suptitle is not None else ""
                shown = f"{len(analysis.configs)} of {len(analysis.configs) + analysis.omitted} configurations shown"
                fig.suptitle(f"{title}\n({shown}: see the report)".strip(), fontsize=TITLE_FONT)
            if analysis.contention_note:
                mark_contended(fig, analysis.contention_note)
            made[name] = fig
    return made
