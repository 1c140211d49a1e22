"""A run folder's ``summary.json``: the one pair that writes it (the trainer, rank 0) and reads it back (the
sweep's record of the run, the DDP diagram, the projection), checked against the schema's :class:`Summary` by the
one validator (:func:`~ignite_ddl.core.validation.schema_problem`).

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> write_summary(folder, {"status": "completed", "samples_per_s": 1234.5, "world_size": 2})
    >>> read_summary(folder)["samples_per_s"]
    1234.5
    >>> _ = (Path(folder) / SUMMARY_FILE).write_text('{"world_size": "two"}')
    >>> read_summary(folder)
    Traceback (most recent call last):
    ...
    ValueError: its summary.json is not a run's (world_size: expected integer, got str)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from ignite_ddl.core.jsonfiles import read_json, write_json
from ignite_ddl.core.schema import Summary
from ignite_ddl.core.validation import schema_problem

__all__ = ["SUMMARY_FILE", "read_summary", "write_summary"]

SUMMARY_FILE = "summary.json"


def write_summary(run_dir: str | Path, summary: Summary | dict[str, Any]) -> None:
    """Write ``run_dir``'s summary.json atomically (NaN and infinities, figures not measured, as null)."""
    write_json(Path(run_dir) / SUMMARY_FILE, summary)


def read_summary(run_dir: str | Path) -> Summary:
    """``run_dir``'s summary.json. A file that is not JSON raises ValueError (a missing one OSError), and so does
    one that is not a run's summary, saying where it breaks the schema."""
    data = read_json(Path(run_dir) / SUMMARY_FILE)
    problem = f"a JSON {type(data).__name__}" if not isinstance(data, dict) else schema_problem(data, Summary)
    if problem:
        raise ValueError(f"its {SUMMARY_FILE} is not a run's ({problem})")
    return cast(Summary, data)
