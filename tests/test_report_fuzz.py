"""The report never raises on records of the wrong shape: every field of a real run's record (and of its summary,
one level down) replaced by values a run cannot produce — the wrong type, null, NaN, infinities, huge, negative —
or removed. A record the schema refuses is skipped with a count; impossible figures never reach a verdict."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_report import configs

from ignite_ddl.core.results import load_results
from ignite_ddl.report import load, verdict_lines, write_report

MISSING = object()
# 10**400: an integer too large for a float (math.isfinite on it overflows)
VALUES: list[Any] = [None, "x", True, float("nan"), float("inf"), -float("inf"), 1e308, 10**400, -500, 0, [], {}]
VALUES.append(MISSING)


@pytest.fixture(scope="module")
def real_summary(spawn_run: Path) -> dict[str, Any]:
    """The summary of a real 2-process run: every field a report reads, as the trainer writes it."""
    return json.loads((spawn_run / "summary.json").read_text())


def sweep_records(summary: dict[str, Any]) -> list[dict[str, Any]]:
    records = configs([100.0, 101.0, 99.0], [120.0, 121.0, 119.0], procs=2)
    for record in records:
        rate = record["summary"]["samples_per_s"]
        record["summary"] = {**copy.deepcopy(summary), "samples_per_s": rate}
    return records


def paths(record: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every field of a record, and of its summary and config one level down."""
    found = [(key,) for key in record]
    for parent in ("summary", "config"):
        for key, value in record[parent].items():
            found.append((parent, key))
            if parent == "summary" and isinstance(value, dict):
                found += [(parent, key, inner) for inner in value]
    return found


def mutated(record: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    copy_ = copy.deepcopy(record)
    holder = copy_
    for key in path[:-1]:
        holder = holder[key]
    if value is MISSING:
        holder.pop(path[-1], None)
    else:
        holder[path[-1]] = value
    return copy_


def write(folder: Path, records: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    # NaN and infinities as Python's json writes them (a hand-edited or foreign file may hold them)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_every_field_mutated_never_raises_and_skips_with_a_count(tmp_path, real_summary):
    base = sweep_records(real_summary)
    cases = [(path, value) for path in paths(base[0]) for value in VALUES]
    assert len(cases) > 300
    for number, (path, value) in enumerate(cases):
        folder = tmp_path / f"case{number}"
        records = copy.deepcopy(base)
        records[0] = mutated(records[0], path, value)
        write(folder, records)
        where = f"{'.'.join(path)} = {'missing' if value is MISSING else value!r}"
        try:
            analysis = load(folder)
            lines = verdict_lines(analysis)
        except Exception as e:  # noqa: BLE001 - the point is that nothing escapes
            pytest.fail(f"{where}: {type(e).__name__}: {e}")
        skipped = len(load_results(folder / "results.jsonl")[1])
        unreadable = [f for f in analysis.flags if f.kind == "unreadable"]
        assert len(unreadable) == skipped, where
        for line in lines:  # no impossible figure reaches a verdict line
            assert "nan" not in line.lower() and "inf " not in line and "-5" not in line.split("samples/s")[0], where


def test_impossible_throughputs_are_refused_on_read(tmp_path):
    records = configs([100.0, 101.0, 99.0], [120.0, 121.0, 119.0])
    for bad, record in zip([-500.0, 1e200, 0.0], records[3:]):
        record["summary"]["samples_per_s"] = bad
    write(tmp_path, records)
    analysis = load(tmp_path)
    assert len([f for f in analysis.flags if f.kind == "unreadable"]) == 3
    text = "\n".join(verdict_lines(analysis))
    assert "-50" not in text and "e+" not in text and "99999" not in text
    assert all(c.throughput.value is None or 0 < c.throughput.value < 1e12 for c in analysis.configs)


def test_a_report_with_every_kind_of_bad_record_is_written_whole(tmp_path, real_summary):
    """One sweep holding many bad records at once: the whole report, plots and HParams included, is written."""
    base = sweep_records(real_summary)
    records = list(base)
    for number, path in enumerate(paths(base[0])):
        value = VALUES[number % len(VALUES)]
        bad = mutated(base[number % len(base)], path, value)
        bad["key"] = f"bad{number}-r0" if path != ("key",) else bad.get("key")
        records.append(bad)
    write(tmp_path, records)
    report = write_report(tmp_path)
    assert report.is_file() and (tmp_path / "report.html").is_file()
    for png in tmp_path.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not any(math.isnan(c.throughput.value or 0.0) for c in load(tmp_path).configs)


def test_a_run_too_short_to_measure_is_a_valid_record(tmp_path):
    """Every step figure of a run with no iteration past warm-up is NaN, which JSON writes as null: still a run
    record (its throughput is the epochs' figure), never moved aside as damage."""
    import torch
    from ignite.engine import Engine

    from ignite_ddl.core.jsonfiles import write_json
    from ignite_ddl.measure.recorder import StepRecorder

    engine = Engine(lambda engine, batch: None)
    recorder = StepRecorder(warmup=10, device=torch.device("cpu")).attach(engine)
    engine.run([(torch.zeros(4, 3), torch.zeros(4))] * 3)
    write_json(tmp_path / "steps.json", recorder.gather())
    steps = json.loads((tmp_path / "steps.json").read_text())
    assert steps["ranks"][0]["samples_per_s"] is None  # NaN, written as null
    records = configs([100.0, 101.0, 99.0])
    records[0]["summary"]["steps"] = steps
    write(tmp_path, records)
    good, rejected = load_results(tmp_path / "results.jsonl")
    assert rejected == [] and len(good) == 3


def nested_paths(value: Any, prefix: tuple = (), depth: int = 4) -> list[tuple]:
    """Every field of a record down to ``depth`` levels (the first two items of each list)."""
    found = [prefix] if prefix else []
    if depth and isinstance(value, dict):
        for key, inner in value.items():
            found += nested_paths(inner, (*prefix, key), depth - 1)
    elif depth and isinstance(value, list):
        for number, inner in enumerate(value[:2]):
            found += nested_paths(inner, (*prefix, number), depth - 1)
    return found


def test_the_validator_names_where_a_record_breaks_the_schema(real_summary):
    """One validator reads every record of a sweep: a value put anywhere in a real record is refused exactly when
    it breaks the schema, and the refusal names the place it was put, one above it (a union's choice) or one inside
    the value put there."""
    from ignite_ddl.core.sweep_records import RunRecord
    from ignite_ddl.core.validation import schema_problem

    record = sweep_records(real_summary)[0]
    assert schema_problem(record, RunRecord) is None
    values = [*VALUES, 3, 2.5, 1e25, -1e25, 10**30, 10**400, "", [1], {"a": 1}, [[1, 2], [3, 4]], [None]]
    cases = refused = 0
    for path in nested_paths(record):
        for value in values:
            changed = copy.deepcopy(record)
            holder = changed
            for key in path[:-1]:
                holder = holder[key]
            if value is MISSING:
                if not isinstance(holder, dict):
                    continue
                holder.pop(path[-1], None)
            else:
                holder[path[-1]] = value
            problem = schema_problem(changed, RunRecord)
            cases += 1
            if problem is None:
                continue
            refused += 1
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
            place = problem.partition(": ")[0]
            assert where.startswith(place) or place.startswith(where), (path, value, problem)
    assert cases > 3000 and 0 < refused < cases
    # a number where a string belongs, deep down, is named to the field
    broken = copy.deepcopy(record)
    broken["summary"]["device"]["name"] = 5
    assert schema_problem(broken, RunRecord) == "summary.device.name: expected string, got int"
    broken = copy.deepcopy(record)
    broken["summary"]["history"][0]["samples_per_s"] = float("nan")
    expected = "summary.history[0].samples_per_s: nan is not a figure a run can produce"
    assert schema_problem(broken, RunRecord) == expected


def test_results_are_read_as_a_stream_line_by_line_as_before(tmp_path):
    """iter_results reads the file a block at a time and cuts its lines where bytes.splitlines does (a \\r\\n split
    across two blocks too); each line's offset finds it again; load_results keeps its answers."""
    from ignite_ddl.core.results import RejectedLine, _lines, iter_results

    good = [json.dumps(r) for r in configs([100.0, 101.0, 99.0])]
    text = f"{good[0]}\r\n\n  \n{{cut\n{good[1]}\rnot json\n{good[2]}".encode()
    path = tmp_path / "results.jsonl"
    path.write_bytes(text)
    for block in (1, 7, 64, 1 << 20):
        with open(path, "rb") as f:
            assert list(_lines(f, block)) == text.splitlines(keepends=True)
    read = list(iter_results(path))
    records, rejected = load_results(path)
    assert [found for *_, found in read if not isinstance(found, RejectedLine)] == [r for r, _ in records]
    assert [found.line for *_, found in read if isinstance(found, RejectedLine)] == [r.line for r in rejected]
    assert [r.line for r in rejected] == [4, 6]  # "{cut" and "not json"; the last line, unterminated, is a record
    for _, offset, line, _ in read:
        assert text[offset : offset + len(line.rstrip(b"\r\n"))] == line.rstrip(b"\r\n")
    assert list(iter_results(tmp_path / "missing.jsonl")) == []
