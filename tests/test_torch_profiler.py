"""``--profiler torch``: a Chrome trace per rank and the top operators, from a real 2-process run; the profiler's
window on an engine cut short, errors that still propagate, and one profiler per engine."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import QUICK, check_ok, run_cli
from ignite.engine import Engine, Events

from ignite_ddl.measure.profile_text import format_profile
from ignite_ddl.measure.profilers import TOP_OPS_COLUMNS, attach_profiler

ITERATIONS = 20


def trace_events(path: Path) -> list[dict]:
    with open(path) as f:
        trace = json.load(f)
    return trace["traceEvents"]


def profiler_steps(path: Path) -> set[str]:
    """The iterations a trace holds: torch marks each one as a ``ProfilerStep#<n>`` range."""
    return {e["name"] for e in trace_events(path) if e.get("name", "").startswith("ProfilerStep#")}


def training_engine() -> tuple[Engine, list[torch.Tensor]]:
    """A small model trained on random batches: forward, backward and an optimizer step per iteration."""
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(engine: Engine, batch: torch.Tensor) -> None:
        optimizer.zero_grad()
        model(batch).pow(2).mean().backward()
        optimizer.step()

    return Engine(step), [torch.randn(8, 16) for _ in range(ITERATIONS)]


@pytest.mark.slow
@pytest.mark.distributed
def test_two_ranks_write_a_chrome_trace_each(tmp_path):
    out = tmp_path / "run"
    check_ok(run_cli("train", "--nproc-per-node", "2", "--profiler", "torch", *QUICK, "--output-dir", str(out)))
    summary = json.loads((out / "summary.json").read_text())
    profile = summary["profiler"]
    assert profile["kind"] == "torch" and len(profile["ranks"]) == 2
    for rank, result in enumerate(profile["ranks"]):
        assert result["trace"] == f"profile/rank{rank}_torch.json"
        events = trace_events(out / result["trace"])
        assert any(e.get("name", "").startswith("aten::") and e.get("ph") == "X" for e in events)
        # QUICK has 8 iterations per rank, fewer than warm-up + 1 + 5: the wait shrinks and 5 are still recorded.
        assert result["active_iterations"] == 5 and len(profiler_steps(out / result["trace"])) == 5
        ops = result["top_ops"]
        assert 0 < len(ops) <= 15 and any(op["name"].startswith("aten::") for op in ops)
        for op in ops:
            assert set(op) == set(TOP_OPS_COLUMNS) and op["calls"] > 0
            assert all(math.isfinite(op[c]) and op[c] >= 0 for c in TOP_OPS_COLUMNS[2:])
            assert op["cpu_ms"] >= op["self_cpu_ms"]
        assert [op["self_cpu_ms"] for op in ops] == sorted((op["self_cpu_ms"] for op in ops), reverse=True)
        with open(out / "profile" / f"rank{rank}_torch.csv") as f:
            rows = list(csv.DictReader(f))
        assert [r["name"] for r in rows] == [op["name"] for op in ops]
    table = format_profile("torch", profile["ranks"])
    assert ops[0]["name"] in table and "self CPU ms" in table


def test_a_run_stopped_while_recording_still_writes_its_trace(tmp_path):
    """A budget ends the run in the middle of its recording window: what was recorded is written."""
    engine, data = training_engine()
    # Planned from the epochs alone (no budget given): wait 5, warm up 1, record iterations 7-11.
    profiler = attach_profiler("torch", engine, output_dir=tmp_path, warmup=5)
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=9), lambda e: e.terminate())
    engine.run(data)
    assert engine.state.iteration == 9
    result = profiler.results()
    assert result["trace"] == "profile/rank0_torch.json" and result["active_iterations"] == 3
    assert {"ProfilerStep#6", "ProfilerStep#7", "ProfilerStep#8"} <= profiler_steps(tmp_path / result["trace"])
    assert result["step_iterations"] == {"6": 7, "7": 8, "8": 9}  # ProfilerStep#N is iteration N + 1
    assert result["top_ops"]


def test_a_known_budget_shrinks_the_wait(tmp_path):
    engine, data = training_engine()
    profiler = attach_profiler("torch", engine, output_dir=tmp_path, rank=3, warmup=5, max_iters=4)
    engine.add_event_handler(Events.ITERATION_COMPLETED(once=4), lambda e: e.terminate())
    engine.run(data)
    result = profiler.results()
    assert result["trace"] == "profile/rank3_torch.json" and result["active_iterations"] == 3
    assert (tmp_path / result["trace"]).is_file()


def test_an_error_in_the_engine_still_propagates(tmp_path):
    engine, data = training_engine()
    profiler = attach_profiler("torch", engine, output_dir=tmp_path, warmup=1)

    def fail(engine: Engine) -> None:
        raise RuntimeError("boom in iteration 4")

    engine.add_event_handler(Events.ITERATION_COMPLETED(once=4), fail)
    with pytest.raises(RuntimeError, match="boom in iteration 4"):
        engine.run(data)
    # Stopped while recording (iterations 3 and 4 of 3-7): the trace is written on the way out.
    assert profiler.results()["active_iterations"] == 2
    assert trace_events(tmp_path / "profile" / "rank0_torch.json")


@pytest.mark.parametrize("first", ["timer", "torch"])
def test_a_second_profiler_on_one_engine_is_refused(tmp_path, first):
    engine = Engine(lambda engine, batch: None)
    attach_profiler(first, engine, output_dir=tmp_path)
    with pytest.raises(ValueError, match=f"already has the {first} profiler"):
        attach_profiler("torch", engine, output_dir=tmp_path)
    with pytest.raises(ValueError, match=f"already has the {first} profiler"):
        attach_profiler("basic", engine)
    assert attach_profiler("none", engine) is None
    attach_profiler("timer", Engine(lambda engine, batch: None))  # another engine is free


def test_the_torch_profiler_needs_a_folder():
    with pytest.raises(ValueError, match="output_dir"):
        attach_profiler("torch", Engine(lambda engine, batch: None))
