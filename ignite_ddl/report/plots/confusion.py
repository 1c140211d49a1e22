"""What a workload's most accurate configuration confuses: its validation confusion matrix as a heatmap."""

from __future__ import annotations

from typing import Any, cast

from ignite_ddl.core.figures import pyplot
from ignite_ddl.report.model import Analysis
from ignite_ddl.report.plots.layout import FONT, LINE_COLUMNS, MAX_PANELS, TITLE_FONT, workloads, wrap

__all__ = ["confusion_plot", "confusion_heatmap"]


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
        ax.set_title(wrap(title), fontsize=FONT + 1)
    if len(counts) <= 12:
        for i in ticks:
            for j in ticks:
                color = "white" if shares[i, j] > 0.6 else "black"
                ax.text(j, i, f"{int(counts[i, j])}", ha="center", va="center", fontsize=FONT - 1, color=color)
    return ax


def confusion_plot(analysis: Analysis, plt: Any) -> Any:
    chosen = []
    for workload, configs in workloads(analysis, analysis.configs):
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
    fig.suptitle(wrap(title, int(4.2 * columns * 9)), fontsize=TITLE_FONT)  # wrapped to the figure's width
    fig.tight_layout()
    return fig
