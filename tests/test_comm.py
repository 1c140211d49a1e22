"""Gradient communication timed per bucket on every rank: the timing hook reduces exactly as DDP does, and its
figures obey their definitions (real 2-process gloo groups)."""

from __future__ import annotations

import csv
import json
import math

import ignite.distributed as idist
import pytest
import torch
from conftest import QUICK, check_ok, run_cli
from torch import nn

from ignite_ddl.launcher import LaunchSettings, launch
from ignite_ddl.measure.comm import CommTimer, summarize, waits
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.trainer.engines import autocast

STEPS = 4


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 10))


def _train(timed: bool, amp: str, bucket_cap_mb: float) -> tuple[list[torch.Tensor], list]:
    model = nn.parallel.DistributedDataParallel(_net(), bucket_cap_mb=bucket_cap_mb)
    timer = CommTimer(torch.device("cpu")).attach(model) if timed else None
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(idist.get_rank())  # different batches per rank: the average matters
    steps = []
    for _ in range(STEPS):
        x, y = torch.randn(16, 32, generator=data), torch.randint(0, 10, (16,), generator=data)
        with autocast(torch.device("cpu"), amp):
            loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if timer is not None:
            steps.append(timer.take())
    return [p.detach().clone() for p in model.parameters()], steps


def _compare(local_rank: int, amp: str, bucket_cap_mb: float) -> dict:
    default, _ = _train(False, amp, bucket_cap_mb)
    hooked, steps = _train(True, amp, bucket_cap_mb)
    return gather_objects(
        {
            "same_weights": all(torch.equal(a, b) for a, b in zip(default, hooked)),
            "gradient_bytes": sum(p.numel() * p.element_size() for p in hooked),
            "steps": [(s.comm_s, s.exposed_s, s.bytes, s.buckets, s.overlap) for s in steps],
        }
    )


@pytest.mark.parametrize("amp, bucket_cap_mb", [("none", 0.05), ("bf16", 25.0)])
@pytest.mark.distributed
def test_timing_hook_reduces_like_ddp_and_its_figures_hold(amp, bucket_cap_mb):
    results = launch(_compare, LaunchSettings(backend="gloo", nproc_per_node=2), amp, bucket_cap_mb)
    assert len(results) == 2
    for result in results:
        assert result["same_weights"]  # bit for bit the weights of DDP's built-in all-reduce
        assert len(result["steps"]) == STEPS
        for comm, exposed, nbytes, _, overlap in result["steps"]:
            # gloo packs gradients without padding: every gradient byte crosses once per step
            assert nbytes == result["gradient_bytes"]
            assert 0 <= exposed <= comm
            assert 0 <= overlap <= 1
        if bucket_cap_mb < 1:  # after its first step DDP rebuilds buckets at the requested size
            assert all(buckets >= 2 for *_, buckets, _ in result["steps"][1:])
        else:
            assert all(buckets == 1 for *_, buckets, _ in result["steps"])


def _check_bucket_spans(path) -> None:
    """Every row of a real run's steps CSV holds one span per bucket, ``ready-done`` in ms after the step's start:
    ready first, in ready order, inside the step's backward (same clock as the phases, written with 1 µs
    rounding), and their union is the step's communication time."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for row in rows:
        spans = [tuple(float(t) for t in span.split("-")) for span in row["bucket_spans_ms"].split(";")]
        assert len(spans) == int(row["buckets"]) >= 1, row
        readies = [ready for ready, _ in spans]
        assert readies == sorted(readies), row
        backward_start, backward_end = (
            1e3 * float(row["forward_s"]),
            1e3 * (float(row["forward_s"]) + float(row["backward_s"])),
        )
        for ready, done in spans:
            assert 0 <= ready <= done <= 1e3 * float(row["step_s"]), row
            assert backward_start - 1e-3 <= ready and done <= backward_end + 1e-3, row
        assert 1e3 * float(row["comm_s"]) == pytest.approx(_union_ms(spans), abs=len(spans) * 2e-3), row


def _union_ms(spans: list) -> float:
    busy, (start, end) = 0.0, spans[0]
    for ready, done in spans[1:]:
        if ready > end:
            busy, start = busy + end - start, ready
        end = max(end, done)
    return busy + end - start


def test_summary_of_buckets_is_the_union_of_their_intervals():
    # 0 -> 4 ms and 1 -> 2 ms overlap (one interval, 4 ms), then 6 -> 7 ms; the last ready is at 6 ms
    from ignite_ddl.measure.comm import _Bucket

    step = summarize([_Bucket(0, 100, 0.000, 0.004), _Bucket(1, 50, 0.001, 0.002), _Bucket(2, 50, 0.006, 0.007)], 4)
    assert step.comm_s == pytest.approx(0.005)
    assert step.exposed_s == pytest.approx(0.001)
    assert step.bytes == 200 and step.buckets == 3
    assert step.busbw == pytest.approx(200 / 0.005 * 2 * 3 / 4)
    assert math.isnan(summarize([], 2).comm_s)
    assert waits([0.010, 0.002, 0.004]) == {"rank": 1, "wait_s": [0.008, 0.0, 0.002], "median_wait_s": 0.005}


@pytest.mark.slow
@pytest.mark.distributed
def test_bucket_size_option_reaches_ddp(tmp_path):
    """A trainer run: smaller buckets mean more all-reduce calls for the same bytes; figures in summary.json, and
    each bucket's all-reduce in steps_rank<r>.csv."""
    per_cap = {}
    for cap in ("0.02", "25"):
        out = tmp_path / cap
        check_ok(
            run_cli(
                "train",
                "--backend",
                "gloo",
                "--nproc-per-node",
                "2",
                "--model",
                "mlp",
                "--bucket-cap-mb",
                cap,
                *QUICK,
                "--output-dir",
                str(out),
            )
        )
        per_cap[cap] = json.loads((out / "summary.json").read_text())["steps"]
        for rank in range(2):
            _check_bucket_spans(out / f"steps_rank{rank}.csv")
    small, large = per_cap["0.02"], per_cap["25"]
    for steps in (small, large):
        for r in steps["ranks"]:
            assert 0 <= r["exposed_comm_s_mean"] <= r["comm_s_mean"]
            assert r["busbw_Bps"] > 0
        reference = steps["comm_reference"]
        assert reference["busbw_Bps"] > 0 and reference["message_bytes"] > 0
    assert small["ranks"][0]["comm_bytes_per_step"] == large["ranks"][0]["comm_bytes_per_step"]
    assert small["ranks"][0]["buckets_per_step"] > large["ranks"][0]["buckets_per_step"] >= 1
