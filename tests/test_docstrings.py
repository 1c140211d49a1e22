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
        "labs.collectives",
        "labs.shards",
        "labs.speedup",
    ],
)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(f"ignite_ddl.{module}"))
    assert result.attempted > 0 and result.failed == 0
