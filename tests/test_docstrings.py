"""The runnable examples in the library's docstrings run and print what they say.

Every module is collected; those whose examples start processes (the headline examples of the package, the
launcher and the trainer) are marked slow.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "ignite_ddl"
MODULES = sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for path in PACKAGE.rglob("*.py")
    if path.name != "__main__.py" and ">>>" in path.read_text()
)
# Examples that launch ranks or train: real process groups, seconds each.
SLOW = {"ignite_ddl", "ignite_ddl.launcher.spawn", "ignite_ddl.trainer.run"}


@pytest.mark.parametrize(
    "module", [pytest.param(m, marks=[pytest.mark.slow, pytest.mark.distributed]) if m in SLOW else m for m in MODULES]
)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_the_headline_examples_are_collected():
    assert SLOW <= set(MODULES)


def test_results_doc_follows_the_schema():
    from ignite_ddl.core.schema_doc import schema_markdown

    doc = (PACKAGE.parent / "docs" / "results.md").read_text()
    assert schema_markdown() in doc, (
        'docs/results.md is out of date: python -c "from ignite_ddl.core.schema_doc import write_schema_doc; '
        "write_schema_doc('docs/results.md')\""
    )


def test_every_schema_type_is_in_the_results_doc():
    """A record type nobody lists in the doc leaves its fields undocumented (PowerSGD's warm-up phase did)."""
    import typing

    from ignite_ddl.core import schema, sweep_records
    from ignite_ddl.core.schema_doc import schema_markdown

    doc = schema_markdown()
    declared = [
        name
        for module in (schema, sweep_records)
        for name, value in vars(module).items()
        if typing.is_typeddict(value) and value.__module__ == module.__name__
    ]
    assert len(declared) > 30
    assert [name for name in declared if f"({name})\n" not in doc] == []
