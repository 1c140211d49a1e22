"""The ``torch.profiler`` trace as a second clock for our communication timing: the interval arithmetic on hand-made
Chrome traces (gloo and NCCL), the comparison with our per-iteration figures, HTA's absence said plainly, and a
real 2-process profiled run whose trace and CommTimer agree, shown in the report."""

from __future__ import annotations

import gzip
import json
import math
import os
import statistics
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
from conftest import run_cli

from ignite_ddl.measure.traces import (
    TRACE_COMM_HEADER,
    compare_with_steps,
    format_trace_comm,
    hta_reading,
    intersection,
    load_trace,
    read_step_rows,
    trace_comm,
    trace_comm_rows,
    union,
)

MAIN, RUNLOOP_A, RUNLOOP_B, PID = 100, 201, 202, 100


def x(name: str, ts: float, dur: float, tid: int = MAIN, cat: str = "cpu_op", **args) -> dict:
    """A complete event as torch's Chrome trace writes it: ts and dur in microseconds."""
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur, "args": args}


def gloo(ts: float, dur: float, tid: int) -> dict:
    return x("gloo:all_reduce", ts, dur, tid, cat="user_annotation")


def backward(function: str, ts: float, dur: float, tid: int = MAIN) -> dict:
    return x(f"autograd::engine::evaluate_function: {function}", ts, dur, tid)


def gloo_trace() -> dict:
    """Two profiler steps of a rank: three buckets in step 5 (two in flight together), one all-reduce that starts
    in step 5 and ends after it, one bucket in step 6; with the noise a real trace has around them."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": RUNLOOP_A, "ts": 0, "args": {"name": "pt_gloo_runloop"}},
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces", "tid": "T", "ts": 0},
        x("ProfilerStep#5", 1000, 10000, cat="user_annotation"),
        x("ProfilerStep#6", 11000, 4000, cat="user_annotation"),
        backward("ConvolutionBackward0", 3000, 4000),
        x("ConvolutionBackward0", 3010, 3980),  # nested in its evaluation: counted once
        # DDP's reducer runs (and launches a bucket's all-reduce) inside AccumulateGrad's evaluation: not compute.
        backward("torch::autograd::AccumulateGrad", 7000, 500),
        x("c10d::allreduce_", 7100, 80),
        backward("ReluBackward0", 7500, 500),
        backward("ReluBackward0", 8500, 500, tid=RUNLOOP_A),  # not the main thread: not this rank's backward
        gloo(2500, 1500, RUNLOOP_A),  # bucket 0: 2500-4000, hidden from 3000
        gloo(3500, 1500, RUNLOOP_B),  # bucket 1: 3500-5000, in flight with bucket 0: the union counts 2500-5000
        gloo(7200, 1800, RUNLOOP_A),  # bucket 2: 7200-9000, hidden 7500-8000 only
        x("gloo:broadcast", 9000, 300, RUNLOOP_B, cat="user_annotation"),  # not the gradients' all-reduce
        gloo(10500, 1300, RUNLOOP_B),  # starts in step 5, its event ends in step 6: step 5's, clipped to 11000
        {"ph": "s", "id": 1, "pid": PID, "tid": MAIN, "ts": 7100, "cat": "ac2g", "name": "ac2g"},
        gloo(12000, 600, RUNLOOP_A),  # step 6: one bucket, nothing to hide it
    ]
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": 1, "world_size": 2},
        "traceEvents": events,
    }


def test_interval_union_and_intersection():
    assert union([(3, 5), (0, 1), (1, 2), (4, 7), (8, 8)]) == [(0, 2), (3, 7)]
    assert intersection([(0, 2), (3, 7)], [(1, 4), (6, 10)]) == 1 + 1 + 1
    assert intersection([(0, 1)], []) == 0


def test_gloo_steps_count_each_instant_of_communication_once():
    traced = trace_comm(gloo_trace())
    assert traced.rank == 1 and traced.collective == "gloo:all_reduce"
    five, six = traced.steps
    # step 5: (5000 - 2500) + (9000 - 7200) + (11000 - 10500) in flight; hidden 3000-5000 and 7500-8000
    assert (five.step, five.start_us, five.dur_us, five.collectives) == (5, 1000, 10000, 4)
    assert five.comm_us == 2500 + 1800 + 500
    assert five.overlap_us == 2000 + 500
    assert five.exposed_us == 4800 - 2500
    assert (six.step, six.comm_us, six.overlap_us, six.exposed_us, six.collectives) == (6, 600, 0, 600, 1)
    assert traced.mean_ms() == pytest.approx({"comm": 2.7, "overlap": 1.25, "exposed": 1.45})


def test_a_gzipped_trace_reads_the_same(tmp_path):
    path = tmp_path / "rank1_torch.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(gloo_trace(), f)
    assert load_trace(path) == gloo_trace()
    assert trace_comm(path) == trace_comm(gloo_trace())


def test_nccl_kernels_belong_to_the_step_that_launched_them():
    """The CUDA path (no GPU here: a hand-made trace in kineto's format): kernels run after their launch, past the
    CPU step's end; communication is the NCCL kernels, overlap the other kernels running with them."""
    events = [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("ProfilerStep#2", 1000, 1000, cat="user_annotation"),
        x("ProfilerStep#1", 1100, 1000, tid=7, cat="gpu_user_annotation"),  # the GPU timeline's marker: not a step
        x("cudaLaunchKernel", 100, 5, cat="cuda_runtime", correlation=1),
        x("cudaLaunchKernel", 200, 5, cat="cuda_runtime", correlation=2),
        x("cudaLaunchKernel", 1500, 5, cat="cuda_runtime", correlation=3),
        x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 1200, 300, tid=7,
          cat="kernel", correlation=1),
        x("void at::native::vectorized_elementwise_kernel<4>", 1100, 200, tid=7, cat="kernel", correlation=2),
        x("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 2100, 100, tid=8, cat="kernel", correlation=3),
    ]  # fmt: skip
    traced = trace_comm({"traceEvents": events})
    assert traced.collective == "nccl kernels"
    assert [(s.step, s.comm_us, s.overlap_us, s.exposed_us) for s in traced.steps] == [
        (1, 300, 100, 200),
        (2, 100, 0, 100),
    ]


def test_the_comparison_pairs_each_traced_step_with_its_iteration(tmp_path):
    csv_path = tmp_path / "steps_rank1.csv"
    csv_path.write_text(
        "iteration,epoch,comm_s,exposed_comm_s,buckets\n"
        "6,1,0.0200,0.0100,3\n"  # not traced
        "7,1,0.0050,0.0020,3\n"
        "8,1,0.0007,0.0006,1\n"
        "9,1,,,0\n"  # a figure not measured: a blank cell
    )
    rows = read_step_rows(csv_path)
    assert rows[1] == {"iteration": 7, "comm_s": 0.005, "exposed_comm_s": 0.002} and math.isnan(rows[3]["comm_s"])
    check = compare_with_steps(trace_comm(gloo_trace()), rows, {5: 7, 6: 8})
    assert check is not None and check["collective"] == "gloo:all_reduce" and check["iterations"] == [7, 8]
    assert check["trace_ms"] == pytest.approx({"comm": 2.7, "exposed": 1.45, "overlap": 1.25})
    assert check["ours_ms"] == pytest.approx({"comm": 2.85, "exposed": 1.3})
    assert check["ratio"] == pytest.approx({"comm": 2.85 / 2.7, "exposed": 1.3 / 1.45})
    assert check["per_iteration"][0] == pytest.approx(
        {"iteration": 7, "trace_comm_ms": 4.8, "ours_comm_ms": 5.0, "trace_exposed_ms": 2.3, "ours_exposed_ms": 2.0}
    )
    # Steps whose iteration has no timed communication, or a trace without the collective: nothing to compare.
    assert compare_with_steps(trace_comm(gloo_trace()), rows, {5: 9, 6: 10}) is None
    alone = {"traceEvents": [x("ProfilerStep#5", 0, 100, cat="user_annotation")]}
    assert trace_comm(alone).collective is None and compare_with_steps(trace_comm(alone), rows, {5: 7}) is None
    assert trace_comm({"traceEvents": []}).steps == []

    ranks = [
        {"trace_comm": check},
        {"trace_comm": None},
        {"trace_comm": {**check, "ratio": {"comm": None, "exposed": None}}},
    ]
    rows_shown = trace_comm_rows(ranks)
    assert rows_shown[0] == ["0", "7-8", "2.70", "2.85", "1.056", "1.45", "1.30", "0.897"]
    assert [r[0] for r in rows_shown] == ["0", "2"] and rows_shown[1][4] == "-"  # null in summary.json: not measured
    table = format_trace_comm(ranks)
    assert table is not None and TRACE_COMM_HEADER[2] in table and format_trace_comm([{"trace_comm": None}]) is None


def test_without_hta_the_reading_says_so(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "hta", None)  # an import of hta now fails, as where it is not installed
    monkeypatch.setitem(sys.modules, "hta.trace_analysis", None)
    reading = hta_reading(tmp_path)
    assert reading["available"] is False and "ignite-ddl[hta]" in reading["reason"]


def profiled_sweep(tmp_path: Path) -> Path:
    """A real sweep of one 2-process run with ``--profiler torch`` and 3 buckets per step (0.03 MiB buckets on the
    CNN's 119 kB of gradients); its folder."""
    out = tmp_path / "sweep"
    options = {"profiler": "torch", "bucket_cap_mb": 0.03, "epochs": 1, "train_size": 2048, "progress": "false"}
    sets = [arg for key, value in options.items() for arg in ("--set", f"{key}={value}")]
    result = run_cli("sweep", "--grid", "nproc_per_node=2", *sets, "--output-dir", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.distributed
def test_a_profiled_two_process_run_agrees_with_its_trace_and_the_report_shows_it(tmp_path):
    """A real sweep of one 2-process run with ``--profiler torch`` and 3 buckets per step (0.03 MiB buckets on the
    CNN's 119 kB of gradients): per rank, the trace's gradient all-reduce time and ours on the 5 traced iterations.

    Tolerance, measured on the 2-core AMD EPYC VM (CPU, gloo, torch 2.14.1), 20 such runs (40 ranks; 9 runs
    through this test): ours / the trace's mean was 1.013-1.285 (ours - trace +0.39 to +3.11 ms per iteration); a
    single iteration differed by -3.5 to +6.5 ms. The two clocks bracket each all-reduce differently (see
    ignite_ddl.measure.traces), and on 2 cores shared by 2 ranks' main and gloo threads gloo's worker thread can wait
    milliseconds to start an all-reduce (in ours, not in the trace) or to close its event after our callback (in the
    trace, not in ours). So: the means agree within 20 % + 3 ms. The pairing of trace steps with iterations is checked
    by their correlation over the iterations (the all-reduce time swings 1-35 ms with the other rank's lateness):
    0.81-1.00 measured; pairing each step with the next iteration instead gave -0.95 to 0.88 (one in 40 above 0.7)."""
    out = profiled_sweep(tmp_path)
    summary = json.loads((out / "runs" / "cfg000-r0" / "summary.json").read_text())
    assert [r["buckets_per_step"] for r in summary["steps"]["ranks"]] == [3, 3]
    report = (out / "report.md").read_text()
    assert "Gradient all-reduce per iteration, measured twice" in report
    assert "| " + " | ".join(TRACE_COMM_HEADER) + " |" in report
    # The agreement is a claim about a quiet machine. Beside other busy processes gloo's worker threads and ours wait
    # for a core at different moments: seen with two CPU burners, ours 6 ms above the trace's 10; beside a second
    # test run, ours 2.2x the trace's, and a trace whose all-reduce overlapped nothing (gloo's thread started only
    # after backward). A run that measured other processes' load is checked for what it recorded, not for agreement.
    # Skipped, not passed, when the agreement went unchecked: the test report counts how often it really ran.
    share = summary["contention"]["foreign_cpu_share"]
    checks = [profile["trace_comm"] for profile in summary["profiler"]["ranks"]]
    for rank, check in enumerate(checks):
        assert check["collective"] == "gloo:all_reduce" and check["iterations"] == [7, 8, 9, 10, 11]
        trace, ours = check["trace_ms"]["comm"], check["ours_ms"]["comm"]
        assert trace > 0 and ours > 0 and len(check["per_iteration"]) == 5
        assert f"| {rank} | 7-11 | {trace:.2f} | {ours:.2f} | {ours / trace:.3f} |" in report
    if share is None or share > 0.1:
        load = "was not measured" if share is None else f"used {share:.0%} of the CPUs"
        pytest.skip(
            f"trace agreement not checked: other processes {load} while the run measured (the claim holds on a quiet "
            "machine, <= 10 %); the recorded figures and the report's table were checked"
        )
    for check in checks:
        trace, ours = check["trace_ms"]["comm"], check["ours_ms"]["comm"]
        assert check["trace_ms"]["overlap"] > 0  # 3 buckets: some all-reduce hidden by backward
        assert abs(ours - trace) <= 0.2 * trace + 3.0, check
        pairs = [(p["trace_comm_ms"], p["ours_comm_ms"]) for p in check["per_iteration"]]
        assert statistics.correlation(*zip(*pairs)) >= 0.7, check


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.hta
@pytest.mark.skipif(
    find_spec("hta") is None and os.environ.get("IGNITE_DDL_HTA_REQUIRED") != "1",
    reason="Holistic Trace Analysis is not installed (pip install -e '.[hta]'; .ci/other-torch runs this test)",
)
def test_hta_reads_our_traces_as_the_docs_say(tmp_path):
    """HTA, an independent reader of torch.profiler traces, on a real 2-process gloo run's: it finds both ranks and
    the profiled steps; on CPU-only traces (no GPU kernels, no NCCL) its temporal breakdown fails with an IndexError
    and its communication/computation overlap is NaN for every rank, as docs/measuring.md says. On GPU traces it
    should give its figures: not verified, no GPU here. If a release of HTA reads CPU traces, this test fails:
    docs/measuring.md must change."""
    profile = profiled_sweep(tmp_path) / "runs" / "cfg000-r0" / "profile"
    reading = hta_reading(profile)
    assert reading["available"] is True and reading["ranks"] == [0, 1], reading
    steps = reading["get_profiler_steps"]["result"]
    assert len(steps) >= 3 and steps == sorted(steps), reading
    assert reading["get_temporal_breakdown"] == {
        "error": "IndexError",
        "message": "single positional indexer is out-of-bounds",
    }, reading
    overlap = reading["get_comm_comp_overlap"]["result"]
    assert [r["rank"] for r in overlap] == [0, 1] and all(math.isnan(r["comp_comm_overlap_pctg"]) for r in overlap)
