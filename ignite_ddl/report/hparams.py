"""TensorBoard HParams records of a sweep: one session per run, and one per configuration with its repeats
aggregated (mean, interval bounds, speed-up, efficiency, spread, contention), so that the HPARAMS tab can sort and
filter configurations by what the report says about them.

Sessions carry the configuration's grid values, ``world_size``, ``workload``, ``repeat`` (the repeat's number, or
``all`` for the aggregate) and ``attempt`` (0 for a first run, N for the N-th re-run of a contended one):
``tensorboard --logdir tb_hparams`` in the sweep's directory.

TensorBoard shows the metric columns of the one experiment description it finds (the first, if there are
several), so the sessions are written without one, and a single description at the root of ``tb_hparams``
declares every hyperparameter and every metric of every session.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ignite_ddl.core.outputs import quiet_writer_threads
from ignite_ddl.report.analysis import MIB, Analysis, ConfigResult
from ignite_ddl.report.stats import Estimate

__all__ = ["config_metrics", "write_hparams"]


def _hparam(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool)) else str(value)


def _finite(metrics: dict[str, float | None]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(v)}


def _estimate(name: str, estimate: Estimate | None) -> dict[str, float | None]:
    if estimate is None:
        return {}
    return {f"hparam/{name}": estimate.value, f"hparam/{name}_low": estimate.low, f"hparam/{name}_high": estimate.high}


def config_metrics(config: ConfigResult, best: bool, tied: bool, recommended: bool = False) -> dict[str, float]:
    """The aggregate session's metrics of one configuration."""
    metrics: dict[str, float | None] = {
        **_estimate("samples_per_s", config.throughput),
        **_estimate("speedup", config.speedup),
        **_estimate("efficiency", config.efficiency),
        "hparam/cv": config.throughput.cv,
        "hparam/runs_used": float(len(config.used_runs)),
        "hparam/contended_runs": float(sum(r.contended for r in config.runs)),
        "hparam/best": 1.0 if best else (0.5 if tied else 0.0),
        "hparam/step_p50_ms": None if config.step_p50_s is None else 1e3 * config.step_p50_s,
        "hparam/val_accuracy": config.val_accuracy,
        "hparam/comm_overlap": config.overlap,
        "hparam/exposed_comm_share": config.exposed_share,
        "hparam/busbw_GBps": None if config.busbw_Bps is None else config.busbw_Bps / 1e9,
        "hparam/utilisation_attainable": config.utilisation_attainable,
        "hparam/utilisation_peak": config.utilisation_peak,
        **_estimate("peak_memory_mib", config.peak_memory.scaled(1 / MIB) if config.peak_memory.value else None),
        "hparam/held_mib": None if config.held_bytes is None else config.held_bytes / MIB,
        "hparam/fits": 1.0 if config.fits else 0.0,
        "hparam/recommended": 1.0 if recommended else 0.0,
    }
    return _finite(metrics)


def write_hparams(analysis: Analysis, logdir: Path) -> None:
    """Write the sessions under ``logdir``: ``runs/<cfg>-r<repeat>[-a<attempt>]`` and ``configs/<cfg>``, and the
    experiment description that declares all of them at ``logdir``."""
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    quiet_writer_threads()  # a failed write comes back from the writer's next call, as one line
    verdicts = {v.workload: v for v in analysis.verdicts}
    sessions: list[tuple[str, dict[str, Any], dict[str, float]]] = []
    for config in analysis.configs:
        common = {k: _hparam(v) for k, v in config.grid.items()}
        common |= {"world_size": config.world_size, "workload": config.workload}
        for run in config.runs:
            if run.status != "completed" or run.samples_per_s is None:
                continue
            name = f"runs/{config.name}-r{run.repeat}" + (f"-a{run.attempt}" if run.attempt else "")
            metrics = _finite(
                {
                    "hparam/samples_per_s": run.samples_per_s,
                    "hparam/contended": float(run.contended),
                    "hparam/foreign_cpu_share": run.foreign_cpu_share,
                    "hparam/used": float(run.used),
                }
            )
            sessions.append((name, {**common, "repeat": str(run.repeat + 1), "attempt": str(run.attempt)}, metrics))
        if config.throughput.value is None:
            continue
        verdict = verdicts[config.workload]
        best, tied = verdict.best == config.name, config.name in verdict.tied
        metrics = config_metrics(config, best, tied, verdict.recommended == config.name)
        sessions.append((f"configs/{config.name}", {**common, "repeat": "all", "attempt": "all"}, metrics))
    if not sessions:
        return
    # One value per hyperparameter for the description: the plugin takes each one's type from it.
    every_hparam: dict[str, Any] = {}
    for _, values, _ in sessions:
        for key, value in values.items():
            every_hparam.setdefault(key, value)
    every_metric = sorted({metric for _, _, metrics in sessions for metric in metrics})
    experiment, _, _ = hparams(every_hparam, dict.fromkeys(every_metric, 0.0))
    with SummaryWriter(log_dir=str(logdir)) as writer:
        writer.file_writer.add_summary(experiment)
    for name, values, metrics in sessions:
        _, start, end = hparams(values, metrics)
        with SummaryWriter(log_dir=str(logdir / name)) as writer:
            writer.file_writer.add_summary(start)
            writer.file_writer.add_summary(end)
            for metric, value in metrics.items():
                writer.add_scalar(metric, value)
