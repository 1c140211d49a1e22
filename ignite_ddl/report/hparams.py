"""TensorBoard HParams records of a sweep: one session per run, and one per configuration with its repeats
aggregated (mean, interval bounds, speed-up, efficiency, spread, contention), so that the HPARAMS tab can sort and
filter configurations by what the report says about them.

Sessions carry the configuration's grid values, ``world_size``, ``workload`` and ``repeat`` (the repeat's number,
or ``all`` for the aggregate): ``tensorboard --logdir tb_hparams`` in the sweep's directory.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ignite_ddl.core.outputs import quiet_writer_threads
from ignite_ddl.report.analysis import Analysis, ConfigResult
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


def config_metrics(config: ConfigResult, best: bool, tied: bool) -> dict[str, float]:
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
    }
    return _finite(metrics)


def write_hparams(analysis: Analysis, logdir: Path) -> None:
    """Write the sessions under ``logdir``: ``runs/<cfg>-r<repeat>[-a<attempt>]`` and ``configs/<cfg>``."""
    from torch.utils.tensorboard import SummaryWriter

    quiet_writer_threads()  # a failed write comes back from the writer's next call, as one line
    verdicts = {v.workload: v for v in analysis.verdicts}
    for config in analysis.configs:
        common = {k: _hparam(v) for k, v in config.grid.items()}
        common |= {"world_size": config.world_size, "workload": config.workload}
        for run in config.runs:
            if run.status != "completed" or run.samples_per_s is None:
                continue
            name = f"{config.name}-r{run.repeat}" + (f"-a{run.attempt}" if run.attempt else "")
            metrics = _finite(
                {
                    "hparam/samples_per_s": run.samples_per_s,
                    "hparam/contended": float(run.contended),
                    "hparam/foreign_cpu_share": run.foreign_cpu_share,
                    "hparam/used": float(run.used),
                }
            )
            with SummaryWriter(log_dir=str(logdir / "runs" / name)) as writer:
                writer.add_hparams({**common, "repeat": str(run.repeat + 1)}, metrics, run_name=".")
        if config.throughput.value is None:
            continue
        verdict = verdicts[config.workload]
        metrics = config_metrics(config, verdict.best == config.name, config.name in verdict.tied)
        with SummaryWriter(log_dir=str(logdir / "configs" / config.name)) as writer:
            writer.add_hparams({**common, "repeat": "all"}, metrics, run_name=".")
