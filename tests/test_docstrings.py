"""The runnable examples in the library's docstrings run and print what they say (the cheap ones)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "config",
        "data",
        "models",
        "recorder",
        "profilers",
        "sweep",
        "report",
        "report.analysis",
        "report.stats",
        "results",
        "contention",
        "labs.collectives",
        "labs.shards",
        "labs.speedup",
        "labs.buckets",
        "measuring",
        "labs",
        "folders",
        "outputs",
        "watchdog",
        "signals",
        "errors",
        "colab",
        "checkpoint",
        "report.plots",
        "flops",
        "comm",
        "slurm",
        "text",
        "gather",
        "clock",
        "tpu",
        "labs._steps",
        "labs._weights",
        "projection",
    ],
)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(f"ignite_ddl.{module}"))
    assert result.attempted > 0 and result.failed == 0


def test_results_doc_follows_the_schema():
    from pathlib import Path

    from ignite_ddl.results import schema_markdown

    doc = (Path(__file__).parents[1] / "docs" / "results.md").read_text()
    assert schema_markdown() in doc, (
        'docs/results.md is out of date: python -c "from ignite_ddl.results import write_schema_doc; '
        "write_schema_doc('docs/results.md')\""
    )
