"""TensorBoard HParams records of a sweep: one session per run, and one per configuration with its repeats
aggregated (mean, interval bounds, speed-up, efficiency, spread, contention), so that the HPARAMS tab can sort and
filter configurations by what the report says about them.

Sessions carry the configuration's grid values, ``world_size``, ``workload``, ``repeat`` (the repeat's number, or
``all`` for the aggregate) and ``attempt`` (0 for a first run, N for the N-th re-run of a contended one):
``tensorboard --logdir tb_hparams`` in the sweep's directory.

Each kind of flag the report can raise on a configuration (:data:`CONFIG_FLAGS`: contended, superlinear,
high-variation, ...) is a metric of every configuration's session of its own, ``flag/<kind>``: 1 where the report
raises it on that configuration, else 0, so that the tab can filter flagged configurations out (or in). Every tag is
listed, with its meaning, in docs/results.md ("TensorBoard tags").

TensorBoard shows the metric columns of the one experiment description it finds (the first, if there are
several), so the sessions are written without one, and a single description at the root of ``tb_hparams``
declares every hyperparameter and every metric of every session.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import os
import socket
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from ignite_ddl.core.outputs import open_output, writing
from ignite_ddl.report.model import FLAG_MEANINGS, MIB, Analysis, ConfigResult
from ignite_ddl.report.stats import Estimate

__all__ = [
    "CONFIG_FLAGS",
    "MAX_SESSIONS",
    "METRIC_DESCRIPTIONS",
    "config_flags",
    "config_metrics",
    "metric_description",
    "write_hparams",
]

# Sessions written at most: each is a folder and an event file (a few ms), and TensorBoard lists them all. Every
# configuration's aggregate comes first, then the runs, in the configurations' order.
MAX_SESSIONS = 1000

# The kinds of flag a configuration can carry, each the metric flag/<kind> of every configuration's session: every
# kind the report raises but "unreadable", which is about lines of the results file, not about any configuration.
# "provisional" is raised per workload (on each of its configurations here), and "mixed-environments" on the
# configurations split by environment or by intra-op thread count.
CONFIG_FLAGS: tuple[str, ...] = tuple(kind for kind in FLAG_MEANINGS if kind != "unreadable")


# What each metric means, shown by TensorBoard beside its column (a flag's meaning is the report's, FLAG_MEANINGS).
METRIC_DESCRIPTIONS = {
    "hparam/samples_per_s": "global throughput, samples/s: the run's, or the mean over a configuration's runs used",
    "hparam/contended": "1 when other processes used the machine while the run measured",
    "hparam/foreign_cpu_share": "the share of the CPUs other processes used while the run measured",
    "hparam/used": "1 when the run counts in its configuration's figures and the verdict",
    "hparam/speedup": "throughput over its workload's 1-process configuration's",
    "hparam/efficiency": "speed-up / processes",
    "hparam/cv": "the repeats' spread: standard deviation / mean of the throughputs used",
    "hparam/runs_used": "runs counted in its figures",
    "hparam/contended_runs": "its runs (every attempt) that were contended",
    "hparam/best": "1 when the verdict names it the best, 0.5 when it is tied with the fastest, else 0",
    "hparam/step_p50_ms": "median step time, ms",
    "hparam/val_accuracy": "validation accuracy after the last epoch, mean over the runs used",
    "hparam/accuracy_difference": "validation accuracy minus its workload's reference configuration's, mean over "
    "repeats (a share: 0.01 is one point)",
    "hparam/comm_overlap": "share of the gradient communication hidden behind backward compute",
    "hparam/exposed_comm_share": "exposed communication / iteration time",
    "hparam/busbw_GBps": "achieved all-reduce bus bandwidth during training, GB/s",
    "hparam/utilisation_attainable": "MFU: model FLOP/s / the matmul peak of the part of the machine its ranks had "
    "(each rank its share of the machine's one measured peak)",
    "hparam/utilisation_peak": "achieved FLOP/s per rank / the GPU's datasheet peak",
    "hparam/peak_memory_mib": "the largest rank's peak memory per run (resident, or CUDA reserved), MiB",
    "hparam/held_mib": "parameters, gradients and optimizer state of the largest rank, MiB",
    "hparam/fits": "1 when within the spec's memory_limit_mb and no run ran out of memory",
    "hparam/recommended": "1 for the configuration the verdict recommends",
}


def metric_description(tag: str) -> str:
    """What the metric ``tag`` means, in a sentence (an interval's bounds say which bound of what)."""
    for end, bound in (("_low", "low"), ("_high", "high")):
        if tag.endswith(end) and tag[: -len(end)] in METRIC_DESCRIPTIONS:
            return (
                f"the {bound} end of the confidence interval over repeats of: {METRIC_DESCRIPTIONS[tag[: -len(end)]]}"
            )
    if tag.startswith("flag/") and tag[5:] in FLAG_MEANINGS:
        return f"1 when the report raises this flag on the configuration: {FLAG_MEANINGS[tag[5:]]}"
    return METRIC_DESCRIPTIONS.get(tag, "")


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
        **_estimate("accuracy_difference", config.accuracy_difference),
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


def config_flags(analysis: Analysis) -> dict[str, dict[str, float]]:
    """Per configuration (by name), ``flag/<kind>`` of each kind of :data:`CONFIG_FLAGS`: 1.0 where the report
    raises that flag on the configuration (the flags naming it; for "provisional", its workload's; for
    "mixed-environments", the sweep's split by environment too, and a thread-count split's named on its base
    configuration), else 0.0."""
    named: dict[str, set[str]] = defaultdict(set)
    for flag in analysis.flags:
        if flag.config is not None:
            named[flag.config].add(flag.kind)
    provisional = {v.workload for v in analysis.verdicts if v.provisional}
    flags = {}
    for config in analysis.configs:
        kinds = set(named.get(config.name, ()))
        base = config.name.partition("@threads=")[0]  # cfgNNN[@envE]: where a thread-count split is flagged
        if config.environment is not None or "mixed-environments" in named.get(base, ()):
            kinds.add("mixed-environments")
        if config.workload in provisional:
            kinds.add("provisional")
        flags[config.name] = {f"flag/{kind}": 1.0 if kind in kinds else 0.0 for kind in CONFIG_FLAGS}
    return flags


def write_hparams(analysis: Analysis, logdir: Path, max_sessions: int = MAX_SESSIONS) -> str | None:
    """Write the sessions under ``logdir``: ``runs/<cfg>-r<repeat>[-a<attempt>]`` and ``configs/<cfg>``, and the
    experiment description that declares all of them at ``logdir``; at most ``max_sessions`` of them (the
    configurations' first). Returns what was left out, in words (None: nothing)."""
    verdicts = {v.workload: v for v in analysis.verdicts}
    flags = config_flags(analysis)
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
        metrics = config_metrics(config, best, tied, verdict.recommended == config.name) | flags[config.name]
        sessions.append((f"configs/{config.name}", {**common, "repeat": "all", "attempt": "all"}, metrics))
    if not sessions:
        return None
    left_out = None
    if len(sessions) > max_sessions:
        kept = sorted(sessions, key=lambda session: not session[0].startswith("configs/"))[:max_sessions]
        left_out = (
            f"(the first {len(kept)} of {len(sessions)} sessions: every configuration's before any run's, in the "
            "configurations' order)"
        )
        sessions = kept
    previous = _event_files(logdir)  # an earlier report's: replaced once this one's are written
    # One value per hyperparameter for the description: the plugin takes each one's type from it.
    every_hparam: dict[str, Any] = {}
    for _, values, _ in sessions:
        for key, value in values.items():
            every_hparam.setdefault(key, value)
    every_metric = sorted({metric for _, _, metrics in sessions for metric in metrics})
    _write_events(logdir, [_plugin_summary("experiment", _experiment(every_hparam, every_metric))])
    for name, values, metrics in sessions:
        start = _plugin_summary("session_start_info", _session_start(values))
        end = _plugin_summary("session_end_info", _session_end())
        _write_events(logdir / name, [start, end, *(_scalar(metric, value) for metric, value in metrics.items())])
    for path in previous:
        with contextlib.suppress(OSError):
            path.unlink()
    return left_out


def _event_files(logdir: Path) -> list[Path]:
    """The event files under ``logdir``: a report run again replaces them (TensorBoard shows every file's
    sessions, so each earlier report's would appear as duplicates). Links are not followed."""
    if logdir.is_symlink() or not logdir.is_dir():
        return []
    found = []
    for folder, _, files in os.walk(logdir):  # os.walk does not descend into linked folders
        found += [Path(folder) / name for name in files if name.startswith("events.out.tfevents.")]
    return found


# What torch.utils.tensorboard's SummaryWriter and its hparams() write, written here with TensorBoard's own protocol
# buffers, in one synchronous write per session: no writer thread per session, and no torch to import (its import
# alone is most of a report's memory).


def _hparam_values(values: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """(name, value, field) of each hyperparameter, typed as torch's hparams() types them (a bool as a number)."""
    typed: list[tuple[str, Any, str]] = []
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, (int, float)):
            typed.append((key, float(value), "number_value"))
        elif isinstance(value, str):
            typed.append((key, value, "string_value"))
        else:
            raise ValueError("value should be one of int, float, str or bool")
    return typed


def _session_start(values: dict[str, Any]) -> Any:
    from tensorboard.plugins.hparams.plugin_data_pb2 import SessionStartInfo  # type: ignore[import-untyped]

    info = SessionStartInfo()
    for key, value, kind in _hparam_values(values):
        setattr(info.hparams[key], kind, value)
    return info


def _session_end() -> Any:
    from tensorboard.plugins.hparams.api_pb2 import Status  # type: ignore[import-untyped]
    from tensorboard.plugins.hparams.plugin_data_pb2 import SessionEndInfo

    return SessionEndInfo(status=Status.Value("STATUS_SUCCESS"))


def _experiment(values: dict[str, Any], metrics: list[str]) -> Any:
    from tensorboard.plugins.hparams.api_pb2 import DataType, Experiment, HParamInfo, MetricInfo, MetricName

    types = {"number_value": "DATA_TYPE_FLOAT64", "string_value": "DATA_TYPE_STRING"}
    infos = [HParamInfo(name=key, type=DataType.Value(types[kind])) for key, _, kind in _hparam_values(values)]
    described = [MetricInfo(name=MetricName(tag=m), description=metric_description(m)) for m in metrics]
    return Experiment(hparam_infos=infos, metric_infos=described)


def _plugin_summary(part: str, message: Any) -> Any:
    """A Summary holding one part of the HParams plugin's data (``experiment``, ``session_start_info``, ...)."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata  # type: ignore[import-untyped]
    from tensorboard.plugins.hparams import metadata  # type: ignore[import-untyped]
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    content = HParamsPluginData(version=metadata.PLUGIN_DATA_VERSION, **{part: message}).SerializeToString()
    plugin = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME, content=content))
    tags = {
        "experiment": metadata.EXPERIMENT_TAG,
        "session_start_info": metadata.SESSION_START_INFO_TAG,
        "session_end_info": metadata.SESSION_END_INFO_TAG,
    }
    return Summary(value=[Summary.Value(tag=tags[part], metadata=plugin)])


def _scalar(name: str, value: float) -> Any:
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary(value=[Summary.Value(tag=name, simple_value=float(value))])


_EVENT_FILES = itertools.count()


def _write_events(logdir: Path, summaries: list[Any]) -> None:
    """One event file in ``logdir``, named as TensorBoard's writers name theirs, holding ``summaries``."""
    from tensorboard.compat.proto.event_pb2 import Event  # type: ignore[import-untyped]
    from tensorboard.summary.writer.record_writer import RecordWriter  # type: ignore[import-untyped]

    logdir.mkdir(parents=True, exist_ok=True)
    now = time.time()
    name = f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}.{next(_EVENT_FILES)}"
    records = [Event(wall_time=now, file_version="brain.Event:2").SerializeToString()]
    records += [Event(wall_time=now, summary=summary).SerializeToString() for summary in summaries]
    buffer = io.BytesIO()
    writer = RecordWriter(buffer)
    for record in records:
        writer.write(record)
    path = logdir / name
    fd = open_output(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)  # a new file: nothing planted is written through
    try:
        with writing(path):
            os.write(fd, buffer.getvalue())
    finally:
        os.close(fd)
