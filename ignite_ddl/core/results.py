"""``results.jsonl``, a sweep's one record per run: appended a whole line at a time, read as a stream, and
repaired without ever dropping a valid record (a line that is not a run record, by :mod:`.validation`'s rules, is
moved aside to ``<name>.rejected``).

Example:
    >>> rejected_path("out/results.jsonl").name
    'results.jsonl.rejected'
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ignite_ddl.core.jsonfiles import finite
from ignite_ddl.core.outputs import open_output, write_bytes, writing
from ignite_ddl.core.sweep_records import RunRecord
from ignite_ddl.core.validation import record_problem

__all__ = [
    "RejectedLine",
    "append_record",
    "iter_results",
    "load_results",
    "read_results",
    "rejected_path",
    "repair_results",
]


@dataclass(frozen=True)
class RejectedLine:
    """A line of a results file that is not a run record: where, what, and why."""

    line: int
    text: bytes
    reason: str


def load_results(path: str | Path) -> tuple[list[tuple[RunRecord, bytes]], list[RejectedLine]]:
    """The run records of a results file with their lines as written, and every line that is not one (a line cut
    short by a killed writer, text that is not JSON, JSON that is not a run record). Blank lines are ignored.

    A last line without its newline is a record if it reads as one (a hand edit that dropped the newline: a write
    cut short leaves JSON that does not parse); its line is given with the newline it lacks, as it is to be kept."""
    records, rejected = [], []
    for _, _, line, found in iter_results(path):
        if isinstance(found, RejectedLine):
            rejected.append(found)
        else:
            records.append((found, line))
    return records, rejected


def iter_results(
    source: str | Path | typing.BinaryIO,
) -> typing.Iterator[tuple[int, int, bytes, RunRecord | RejectedLine]]:
    """Each non-blank line of a results file, read as it comes (the file is never held whole): ``(line number,
    byte offset, line, its record or the RejectedLine saying why it is not one)``, by :func:`load_results`'s rules.
    ``source`` is a path (a missing file has no lines) or a file opened in binary mode, read from where it is."""
    if not isinstance(source, (str, Path)):
        yield from _results_lines(source)
        return
    if not Path(source).exists():
        return
    with open(source, "rb") as f:
        yield from _results_lines(f)


def _results_lines(f: typing.BinaryIO) -> typing.Iterator[tuple[int, int, bytes, RunRecord | RejectedLine]]:
    offset = f.tell()
    for number, line in enumerate(_lines(f), 1):
        at, offset = offset, offset + len(line)
        if not line.strip():
            continue
        terminated = line.endswith(b"\n")
        try:
            record = json.loads(line)
        except ValueError as e:
            reason = f"not JSON ({e})" if terminated else "incomplete last line (a write cut short)"
            yield number, at, line, RejectedLine(number, line, reason)
            continue
        if not terminated:
            line += b"\n"
        problem = record_problem(record)  # none: the line is a RunRecord, as the schema declares it
        yield number, at, line, RejectedLine(number, line, problem) if problem else cast(RunRecord, record)


def _lines(f: typing.BinaryIO, block: int = 1 << 20) -> typing.Iterator[bytes]:
    """The lines of a binary file as ``bytes.splitlines(keepends=True)`` cuts them, a block at a time."""
    pending = b""
    while chunk := f.read(block):
        pieces = (pending + chunk).splitlines(keepends=True)
        pending = pieces.pop()  # it may go on in the next block (a line ending in \r, too: \r\n split)
        yield from pieces
    if pending:
        yield pending


def read_results(path: str | Path) -> list[RunRecord]:
    """Every run record of a results file (lines that are not records are skipped: :func:`load_results`)."""
    return [record for record, _ in load_results(path)[0]]


def rejected_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".rejected")


def repair_results(path: str | Path) -> list[RejectedLine]:
    """Move the lines of a results file that are not run records to ``<name>.rejected`` (appended, each on a line of
    its own) and rewrite the file atomically with every record kept as written; return the lines moved."""
    path = Path(path)
    records, rejected = load_results(path)
    if not rejected:
        if records and not path.read_bytes().endswith(b"\n"):
            # A valid last record without its newline: give it one, or the next record appended would join it.
            fd = open_output(path)
            try:
                with writing(path):
                    os.write(fd, b"\n")
                    os.fsync(fd)
            finally:
                os.close(fd)
        return []
    side_path = rejected_path(path)
    with writing(side_path), open(open_output(side_path), "ab") as side:
        for bad in rejected:
            side.write(bad.text if bad.text.endswith(b"\n") else bad.text + b"\n")
        side.flush()
        os.fsync(side.fileno())
    write_bytes(path, b"".join(line for _, line in records))
    return rejected


def append_record(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append one record as a single line in one write, then sync it to disk."""
    line = (json.dumps(finite(record), allow_nan=False) + "\n").encode()
    with writing(path):
        fd = open_output(path)  # never through a symbolic link planted in the sweep's folder
        try:
            size = os.fstat(fd).st_size
            try:
                if os.write(fd, line) != len(line):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # no half line left behind: the file keeps only whole records
                raise
        finally:
            os.close(fd)
