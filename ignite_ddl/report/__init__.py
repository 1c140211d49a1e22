"""Profiling reports: what a sweep's ``results.jsonl`` says, and how sure it is.

- :mod:`~ignite_ddl.report.stats` — intervals over repeats, the verdict's separation rule, Welch's test;
- :mod:`~ignite_ddl.report.model` — what an analysis is, as data: its dataclasses and the thresholds it judges by;
- :mod:`~ignite_ddl.report.reading` — a sweep's records read into configurations, a few figures kept per run;
  with :mod:`~ignite_ddl.report.summaries` (a configuration's figures, a run's summary at a time),
  :mod:`~ignite_ddl.report.environments` (where a run ran) and :mod:`~ignite_ddl.report.values` (foreign data
  checked);
- :mod:`~ignite_ddl.report.analysis` — per configuration, workload and sweep, as plain data (:func:`load`,
  :func:`analyze`), for the report and for notebooks; its steps: :mod:`~ignite_ddl.report.comparisons` (speed-ups,
  an option against its plain twin), :mod:`~ignite_ddl.report.quality` (what a configuration learnt),
  :mod:`~ignite_ddl.report.verdicts` (best, tied or equivalent), :mod:`~ignite_ddl.report.recommendation` (the
  configuration to use), :mod:`~ignite_ddl.report.flags` (reasons to doubt a number) and
  :mod:`~ignite_ddl.report.notes` (where time is lost, what to try);
- :mod:`~ignite_ddl.report.render` — ``report.md`` / ``report.html`` / ``verdict.txt`` (:func:`write_report`),
  written with :mod:`~ignite_ddl.report.document` (Markdown and HTML), :mod:`~ignite_ddl.report.sections` (what
  the report says) and :mod:`~ignite_ddl.report.tables` (its tables of configurations);
- :mod:`~ignite_ddl.report.plots` — the PNG plots; :mod:`~ignite_ddl.report.hparams` — TensorBoard HParams;
- :mod:`~ignite_ddl.report.diagram` — a notebook's picture of one DDP step, from a run's own numbers.

Example:
    >>> from ignite_ddl.report import analyze
    >>> records = [{"key": f"k{i}-r{r}", "index": i, "repeat": r, "status": "completed", "grid": {"seed": i},
    ...             "config": {"seed": i}, "summary": {"world_size": 1, "samples_per_s": v}}
    ...            for i, runs in enumerate([[100, 104, 98], [101, 97, 103]]) for r, v in enumerate(runs)]
    >>> verdict = analyze(records).verdicts[0]
    >>> verdict.best, verdict.tied
    (None, ['cfg000', 'cfg001'])
"""

from __future__ import annotations

from ignite_ddl.core.exports import lazy_exports

__all__ = ["Analysis", "ConfigResult", "Flag", "Verdict", "analyze", "load", "verdict_lines", "write_report"]

# Imported when first used: the plots and the profilers' tables import torch and matplotlib, which a sweep spec
# reading its statistical defaults (report.stats) for ``--help`` must not pay for.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("Analysis", "ConfigResult", "Flag", "Verdict"), "model"),
        **dict.fromkeys(("analyze", "load"), "analysis"),
        **dict.fromkeys(("verdict_lines", "write_report"), "render"),
    },
)
