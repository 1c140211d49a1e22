"""What a configuration learnt: its validation accuracy against its workload's reference configuration (the first
without gradient compression), judged with the difference's interval over repeats."""

from __future__ import annotations

from ignite_ddl.core.config import declared_default
from ignite_ddl.report.model import QUALITY_MIN_EPOCHS, ConfigResult
from ignite_ddl.report.stats import difference_interval

__all__ = ["judge_quality"]


def judge_quality(configs: list[ConfigResult], margin: float, confidence: float) -> None:
    """What each configuration of one workload learnt against the workload's reference configuration (the first
    without gradient compression, comm_hook=none): the validation accuracy's difference over repeats, with its
    interval. "learns worse" when the whole interval lies below ``-margin``, "diverged" when a run diverged; not
    judged when the runs trained fewer than QUALITY_MIN_EPOCHS epochs or have too few accuracies to compare."""
    plain = [
        c for c in configs if c.option("comm_hook") == declared_default("comm_hook") and len(c.val_accuracies) >= 2
    ]
    reference = min(plain, key=lambda c: (c.index, c.suffix), default=None)
    points = f"{100 * margin:g} point{'' if 100 * margin == 1 else 's'}"
    for config in configs:
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
        accuracies = config.val_accuracies
        if reference is None or len(accuracies) < 2:
            config.quality = "not judged"
            config.quality_note = (
                "quality not judged: no reference configuration with 2 or more runs (comm_hook=none)"
                if reference is None
                else f"quality not judged: {len(accuracies)} run(s) with a validation accuracy (2 needed)"
            )
            continue
        d = difference_interval(accuracies, reference.val_accuracies, confidence)
        config.accuracy_difference = d
        assert d.value is not None and d.low is not None and d.high is not None  # 2 or more runs of each
        pct = round(100 * confidence)
        shown = (
            f"validation accuracy {100 * d.value:+.1f} points against {reference.name} "
            f"({pct} % interval {100 * d.low:+.1f} to {100 * d.high:+.1f})"
        )
        if d.high < -margin:
            config.quality = "learns worse"
            config.quality_note = f"learns worse: {shown}, beyond the margin of {points}"
        else:
            config.quality = "no worse"
            config.quality_note = f"not shown worse by more than {points}: {shown}"
