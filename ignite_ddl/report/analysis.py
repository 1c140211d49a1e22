"""What a sweep's results say: per configuration, throughput with its confidence interval over repeats, speed-up
and efficiency with theirs; per workload, a verdict that names a best configuration only when the data separates
it; and every reason to doubt a number. Plain data (dataclasses), for the report and for notebooks alike.

A **workload** is what fixes the work done per sample (by default: model, dataset, amp, optimizer, sync_bn;
a spec's ``workload`` key may name others). Configurations are ranked only against others of their workload, and
speed-up is always against the same configuration run with one process.

This module reads a sweep and runs the analysis's steps in order; each step is a module of its own: its data types
are in :mod:`~ignite_ddl.report.model`, reading the records into configurations in :mod:`~ignite_ddl.report.reading`,
speed-ups and an option against its plain twin in :mod:`~ignite_ddl.report.comparisons`, what a configuration learnt
in :mod:`~ignite_ddl.report.quality`, the verdict in :mod:`~ignite_ddl.report.verdicts`, the configuration to use in
:mod:`~ignite_ddl.report.recommendation`, the reasons to doubt a number in :mod:`~ignite_ddl.report.flags`, and
where time is lost in :mod:`~ignite_ddl.report.notes`.

Example:
    >>> def run(index, repeat, procs, rate):
    ...     config = {"model": "cnn", "nproc_per_node": procs, "batch_size": 64}
    ...     summary = {"world_size": procs, "samples_per_s": rate, "threads_per_process": 2 // procs}
    ...     return {"key": f"k{index}-r{repeat}", "index": index, "repeat": repeat, "status": "completed",
    ...             "grid": {"nproc_per_node": procs}, "config": config, "summary": summary}
    >>> records = [run(0, r, 1, v) for r, v in enumerate([100, 102, 98])]
    >>> records += [run(1, r, 2, v) for r, v in enumerate([150, 153, 147])]
    >>> analysis = analyze(records)
    >>> verdict = analysis.verdicts[0]
    >>> verdict.best, round(analysis.configs[1].speedup.value, 2)
    ('cfg001', 1.5)
"""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

# The ``name as name`` imports: names imported from this module before model.py and the modules split out of this
# one held them, by code (notebooks among it) that may still do so.
from ignite_ddl.core.config import WORKLOAD_OPTIONS
from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.core.results import RejectedLine, iter_results
from ignite_ddl.core.sweep_records import PredictedStep, RunRecord, StepModel
from ignite_ddl.core.validation import schema_problem
from ignite_ddl.measure.contention import CONTENTION_THRESHOLD
from ignite_ddl.report.comparisons import one_matmul_reference, speedups, versus
from ignite_ddl.report.comparisons import versus_text as versus_text
from ignite_ddl.report.flags import doubt_flags, memory_flags
from ignite_ddl.report.flags import superlinear as superlinear
from ignite_ddl.report.model import FLAG_MEANINGS as FLAG_MEANINGS
from ignite_ddl.report.model import FLAGS_LISTED as FLAGS_LISTED
from ignite_ddl.report.model import (
    MAX_UNREADABLE,
    MIB,
    MIN_REPEATS,
    QUALITY_MARGIN,
    QUALITY_MARGIN_LOSS,
    Analysis,
    ConfigResult,
    Flag,
    RunResult,
    Verdict,
)
from ignite_ddl.report.model import STEP_PARTS as STEP_PARTS
from ignite_ddl.report.model import TABLE_ROWS as TABLE_ROWS
from ignite_ddl.report.notes import notes as notes
from ignite_ddl.report.quality import judge_quality
from ignite_ddl.report.reading import Reader, workload_of
from ignite_ddl.report.recommendation import recommend
from ignite_ddl.report.stats import CONFIDENCE, EQUIVALENCE_MARGIN, rank_correlation
from ignite_ddl.report.values import is_number
from ignite_ddl.report.verdicts import mark_not_judged, pool_spread, rule_text, verdict_of
from ignite_ddl.report.verdicts import relative as relative

__all__ = [
    "Analysis",
    "ConfigResult",
    "Flag",
    "RunResult",
    "Verdict",
    "analyze",
    "load",
    "step_model_accuracy",
    "workload_of",
]


def _locate_run(record: RunRecord, out: Path) -> RunRecord:
    """A record whose ``run_dir`` (written relative to where the sweep was started) is found from here: a report made
    from another folder looks for the run in the sweep's own ``runs/``."""
    run_dir = record.get("run_dir")  # a string where there is one: the record was validated
    if run_dir and not Path(run_dir).is_dir():
        beside = out / "runs" / Path(run_dir).name
        if beside.is_dir():
            return record | {"run_dir": str(beside)}
    return record


def load(results_dir: str | Path, include_contended: bool = False) -> Analysis:
    """Analyse a sweep's directory (``results.jsonl`` and ``sweep.json``); lines of the results that are not run
    records are skipped and flagged, never the records around them.

    The records are read as a stream, each validated against the results schema, and each run's summary is added
    to its configuration's figures as it is read: per run only what the verdict and the flags need is kept (a few
    hundred bytes), so memory grows with the number of runs and configurations, not with the size of the results. A
    summary is read a second time only where a run already counted is superseded by a later attempt of its
    repeat."""
    out = Path(results_dir)
    problems: list[str] = []
    meta: Any = {}
    if (out / "sweep.json").exists():
        try:
            meta = read_json(out / "sweep.json")
        except (OSError, ValueError) as e:
            problems.append(f"sweep.json: cannot be read ({e}); the spec, host and timings it holds are missing")
        if not isinstance(meta, dict) or not all(isinstance(meta.get(k, {}), dict) for k in ("spec", "host")):
            problems.append("sweep.json: not a sweep's metadata; ignored")
            meta = {}
    spec = meta.get("spec", {})
    reader = Reader(list(spec.get("workload") or WORKLOAD_OPTIONS), include_contended)
    path = out / "results.jsonl"
    rejected: list[str] = []
    skipped = 0
    configs: list[ConfigResult] = []
    if path.exists():
        with open(path, "rb") as f, _collection_paused():
            for number, offset, line, found in iter_results(f):
                if isinstance(found, RejectedLine):
                    skipped += 1
                    if len(rejected) < MAX_UNREADABLE:
                        rejected.append(f"results.jsonl line {number}: {found.reason}")
                    continue
                reader.add(_locate_run(found, out), (offset, len(line)))

            def fetch(where: tuple[int, int]) -> RunRecord:
                f.seek(where[0])  # the same open file: a sweep appending meanwhile, or repairing, changes nothing
                return cast(RunRecord, json.loads(f.read(where[1])))  # validated as it was read above

            if reader.records:
                configs = reader.configs(fetch)
    if not reader.records:
        lines = f" ({skipped} line(s) that are not run records)" if skipped else ""
        raise FileNotFoundError(f"no results in {path}{lines}")
    if skipped > len(rejected):
        rejected.append(f"results.jsonl: {skipped - len(rejected)} more line(s) that are not run records")
    analysis = _analysis(configs, reader.flags, meta, include_contended, CONFIDENCE)
    analysis.flags += [Flag("unreadable", None, problem) for problem in problems + rejected]
    return analysis


def analyze(
    records: Sequence[RunRecord],
    meta: dict[str, Any] | None = None,
    include_contended: bool = False,
    confidence: float = CONFIDENCE,
) -> Analysis:
    """The analysis of a sweep's records (see the module docstring)."""
    meta = meta or {}
    reader = Reader(list(meta.get("spec", {}).get("workload") or WORKLOAD_OPTIONS), include_contended)
    for number, record in enumerate(records):
        reader.add(record, number)
    configs = reader.configs(lambda number: records[number])
    return _analysis(configs, reader.flags, meta, include_contended, confidence)


def _analysis(
    configs: list[ConfigResult], flags: list[Flag], meta: dict[str, Any], include_contended: bool, confidence: float
) -> Analysis:
    spec = meta.get("spec", {})
    # A configuration every run of which was refused never ran: it is listed with why, and neither compared nor
    # counted as one that might have been the fastest (it cannot run).
    refused = [c for c in configs if c.refusal is not None]
    configs = [c for c in configs if c.refusal is None]
    for config in configs:  # refused before an earlier session of the sweep, run by a later one: it ran
        config.runs = [r for r in config.runs if not (r.status == "refused" and r.position < 0)]
    axes = list(spec.get("workload") or WORKLOAD_OPTIONS)
    threshold = spec.get("contention_threshold", CONTENTION_THRESHOLD)
    limit_mb = spec.get("memory_limit_mb")
    limit = float(limit_mb) * MIB if is_number(limit_mb) and limit_mb > 0 else None
    for config in configs:
        config.out_of_memory = sum(r.status == "out_of_memory" for r in config.runs)
        too_big = limit is not None and config.peak_memory.value is not None and config.peak_memory.value > limit
        # Predicted above the limit and run anyway (run_unfit): never recommended, whatever this machine measured.
        predicted_big = limit is not None and config.predicted_memory is not None and config.predicted_memory > limit
        config.fits = not too_big and not predicted_big and not config.out_of_memory
    speedups(configs, confidence)
    versus(configs, confidence)
    one_matmul_reference(configs)
    flags = flags + doubt_flags(configs, meta)
    flags += memory_flags(configs, limit)
    margin = spec.get("equivalence_margin")
    margin = float(margin) if is_number(margin) and 0 < margin < 1 else EQUIVALENCE_MARGIN
    least = spec.get("min_repeats")
    least = int(least) if is_number(least) and least >= 1 else MIN_REPEATS
    quality_margin = spec.get("quality_margin")
    quality_margin = float(quality_margin) if is_number(quality_margin) and quality_margin >= 0 else QUALITY_MARGIN
    loss_margin = spec.get("quality_margin_loss")
    loss_margin = float(loss_margin) if is_number(loss_margin) and loss_margin >= 0 else QUALITY_MARGIN_LOSS
    mark_not_judged(configs, least)
    groups = _by_workload(configs)
    for rows in groups.values():
        judge_quality(rows, quality_margin, confidence, loss_margin)
    flags += [Flag("learns-worse", c.name, c.quality_note) for c in configs if c.learns_worse]
    for rows in groups.values():
        pool_spread(rows, confidence)
    verdicts = [verdict_of(name, rows, confidence, margin) for name, rows in groups.items()]
    for verdict in verdicts:
        recommend(verdict, groups[verdict.workload], limit, confidence)
    flags += [Flag("provisional", None, f"workload {v.workload}") for v in verdicts if v.provisional]
    measured = sum(r.measured_s or 0.0 for c in configs for r in c.runs if r.status == "completed")
    elapsed = sum(r.elapsed_s or 0.0 for c in configs for r in c.runs)
    sessions = meta.get("sessions") or []
    wall = sum(s.get("wall_s", 0.0) for s in sessions) or None
    return Analysis(
        configs,
        verdicts,
        flags,
        axes,
        confidence,
        rule_text(confidence),
        include_contended,
        threshold,
        measured,
        elapsed,
        wall,
        meta,
        refused=refused,
    )


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """The cyclic garbage collector off while records are read: they make no cycles, and each of its passes over the
    millions of objects a large sweep's runs hold would cost more than the reading itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _by_workload(configs: list[ConfigResult]) -> dict[str, list[ConfigResult]]:
    groups: dict[str, list[ConfigResult]] = defaultdict(list)
    for config in configs:
        groups[config.workload].append(config)
    return dict(groups)


def step_predictions(analysis: Analysis) -> dict[int, PredictedStep]:
    """The step-time model's prediction of each configuration (by index) as the sweep recorded it (``step_s``,
    ``low_s``, ``high_s``, ``basis``; no ``step_s`` where it could not predict, ``basis`` saying why). A model or
    a prediction that is not what the schema declares (a damaged ``sweep.json``) is left out; an earlier release's
    may lack keys."""
    model = analysis.meta.get("step_model")
    if schema_problem(model, StepModel) is not None:
        return {}
    predicted = cast(StepModel, model).get("configurations") or {}
    found = {c.index: predicted.get(str(c.index)) for c in analysis.configs}
    return {index: p for index, p in found.items() if p is not None and schema_problem(p, PredictedStep) is None}


def step_model_accuracy(analysis: Analysis) -> dict[str, Any]:
    """The step-time model's median absolute relative error and rank correlation (Spearman) with the measured step
    times, over the configurations it predicted."""
    predicted = step_predictions(analysis)
    pairs = []
    for c in analysis.configs:
        step = predicted[c.index].get("step_s") if c.index in predicted else None
        if step and c.global_batch and c.throughput.value:
            pairs.append((float(step), c.global_batch / c.throughput.value))
    errors = [abs(p - m) / m for p, m in pairs]
    return {
        "configurations": len(pairs),
        "median_abs_error": statistics.median(errors) if errors else None,
        "rank_correlation": rank_correlation([p for p, _ in pairs], [m for _, m in pairs]),
    }
