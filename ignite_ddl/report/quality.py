"""What a configuration learnt against its workload's reference configuration (the first without gradient
compression), judged with the difference's interval over repeats: its validation accuracy, or its validation loss
where the workload reports no accuracy or is a language model (:func:`judged_by`)."""

from __future__ import annotations

import math
import statistics

from ignite_ddl.core.config import declared_default
from ignite_ddl.report.model import QUALITY_MARGIN_LOSS, QUALITY_MIN_EPOCHS, ConfigResult
from ignite_ddl.report.stats import difference_interval

__all__ = ["judge_quality", "judged_by", "loss_text"]


def judged_by(configs: list[ConfigResult]) -> str:
    """What one workload's quality is judged by: ``"loss"`` where its runs report a validation loss and either no
    validation accuracy (a regression, a workload of its own with ``accuracy=False`` or its own training step) or
    the workload is a language model (sample_unit ``tokens``: its next-token accuracy counts the top token only,
    its loss and perplexity measure the whole predicted distribution); ``"accuracy"`` otherwise."""
    runs = [r for c in configs for r in c.used_runs]
    has_loss = any(r.val_loss is not None for r in runs)
    has_accuracy = any(r.val_accuracy is not None for r in runs)
    return "loss" if has_loss and (not has_accuracy or any(c.tokens for c in configs)) else "accuracy"


def loss_text(value: float, sign: bool = False) -> str:
    """A validation loss (or a difference of two) as the report writes it: 3 significant figures.

    >>> loss_text(0.12345, sign=True), loss_text(3.2946), loss_text(1234.5)
    ('+0.123', '3.29', '1234')
    """
    return format(value, "+.3g" if sign else ".3g") if abs(value) < 1000 else format(value, "+.0f" if sign else ".0f")


def judge_quality(
    configs: list[ConfigResult], margin: float, confidence: float, loss_margin: float = QUALITY_MARGIN_LOSS
) -> None:
    """What each configuration of one workload learnt against the workload's reference configuration (the first
    without gradient compression, comm_hook=none, with 2 or more runs of the figure judged): the difference of the
    means over repeats, with its Welch interval, of the validation accuracy, or of the validation loss where the
    workload is judged by loss (:func:`judged_by`). "learns worse" when the whole interval lies below ``-margin``
    (accuracy, a share), or above ``loss_margin`` times the reference's mean loss (loss); "diverged" when a run
    diverged; not judged when the runs trained fewer than QUALITY_MIN_EPOCHS epochs or have too few figures to
    compare."""
    by = judged_by(configs)

    def figures(c: ConfigResult) -> list[float]:
        return c.val_losses if by == "loss" else c.val_accuracies

    plain = [c for c in configs if c.option("comm_hook") == declared_default("comm_hook") and len(figures(c)) >= 2]
    reference = min(plain, key=lambda c: (c.index, c.suffix), default=None)
    for config in configs:
        config.quality_by = by
        if not config.used_runs:
            continue
        config.quality_reference = reference.name if reference is not None else None
        diverged = [r for r in config.used_runs if r.diverged]
        epochs = [r.epochs for r in config.used_runs if r.epochs is not None]
        if diverged:
            config.quality = "diverged"
            config.quality_note = f"diverged in {len(diverged)} run(s): {diverged[0].diverged}"
            continue
        if epochs and min(epochs) < QUALITY_MIN_EPOCHS:
            config.quality = "not judged"
            config.quality_note = f"quality not judged: {min(epochs)} epoch{'s' if min(epochs) != 1 else ''}"
            continue
        if config is reference:
            config.quality = "reference"
            config.quality_note = "the reference of its workload's quality (the first without gradient compression)"
            continue
        found = figures(config)
        if reference is None or len(found) < 2:
            config.quality = "not judged"
            config.quality_note = (
                "quality not judged: no reference configuration with 2 or more runs (comm_hook=none)"
                if reference is None
                else f"quality not judged: {len(found)} run(s) with a validation {by} (2 needed)"
            )
            continue
        if by == "loss":
            _by_loss(config, reference, loss_margin, confidence)
        else:
            _by_accuracy(config, reference, margin, confidence)


def _by_accuracy(config: ConfigResult, reference: ConfigResult, margin: float, confidence: float) -> None:
    """Learns worse when the whole interval of the difference in validation accuracy lies below ``-margin``."""
    d = difference_interval(config.val_accuracies, reference.val_accuracies, confidence)
    config.accuracy_difference = d
    assert d.value is not None and d.low is not None and d.high is not None  # 2 or more runs of each
    points = f"{100 * margin:g} point{'' if 100 * margin == 1 else 's'}"
    shown = (
        f"validation accuracy {100 * d.value:+.1f} points against {reference.name} "
        f"({round(100 * confidence)} % interval {100 * d.low:+.1f} to {100 * d.high:+.1f})"
    )
    if d.high < -margin:
        config.quality = "learns worse"
        config.quality_note = f"learns worse: {shown}, beyond the margin of {points}"
    else:
        config.quality = "no worse"
        config.quality_note = f"not shown worse by more than {points}: {shown}"


def _by_loss(config: ConfigResult, reference: ConfigResult, loss_margin: float, confidence: float) -> None:
    """Learns worse when the whole interval of the difference in validation loss lies above ``loss_margin`` times
    the reference's mean loss (a loss has no scale of its own: the margin is a share of the reference's)."""
    d = difference_interval(config.val_losses, reference.val_losses, confidence)
    config.loss_difference = d
    assert d.value is not None and d.low is not None and d.high is not None  # 2 or more runs of each
    base = statistics.fmean(reference.val_losses)
    allowed = loss_margin * abs(base)
    margin = f"{loss_text(allowed)} ({100 * loss_margin:g} % of {reference.name}'s mean loss {loss_text(base)})"
    shown = (
        f"validation loss {loss_text(d.value, sign=True)} against {reference.name} "
        f"({round(100 * confidence)} % interval {loss_text(d.low, sign=True)} to {loss_text(d.high, sign=True)})"
    )
    if config.tokens and max(base, base + d.value) < 700:  # a language model: its perplexity beside its loss
        shown += f", perplexity {math.exp(base + d.value):.3g} against {math.exp(base):.3g}"
    if d.low > allowed:
        config.quality = "learns worse"
        config.quality_note = f"learns worse: {shown}, beyond the margin of {margin}"
    else:
        config.quality = "no worse"
        config.quality_note = f"not shown worse by more than {margin}: {shown}"
