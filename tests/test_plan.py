"""Memory predicted before anything runs (ignite-ddl plan), checked against what real runs measure; configurations
predicted not to fit are not launched unless asked; a model that cannot be traced is still listed."""

from __future__ import annotations

import json
import platform
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli
from torch import nn

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.core.procfs import current_rss_bytes
from ignite_ddl.core.results import read_results
from ignite_ddl.predict import memory
from ignite_ddl.predict.projection.model import Link
from ignite_ddl.predict.steptime import Observed, predict_steps
from ignite_ddl.sweep import layout_probe as layout
from ignite_ddl.sweep.layout_probe import LAYOUT_REVISION, LAYOUT_ROUNDS, probe_iterations

# The stated tolerance, (predicted - measured) / measured per strategy. The goal is 15 % either way; one process and
# DDP met it in this test's runs (-7 % and -8 %); DDP on 2 processes fell short by up to 19 % in longer runs
# (experiments/ddp_vs_fsdp: glibc keeps gloo's and the buckets' freed blocks too), hence -25 %. An FSDP rank's
# resident set on CPU holds more than its tensors: glibc's main heap keeps the holes FSDP's gathered units and
# gradients leave on every micro-batch, which the trace cannot see and the plan says it does not predict (measured:
# 1372 MiB where a fixed MALLOC_MMAP_THRESHOLD_ gives 702 MiB, -5 % from the prediction; docs/plan.md), so FSDP's
# prediction may fall short by as much as measured (-51 % worst), never exceed it by more than the goal.
TOLERANCE = {"ddp": (-0.25, 0.15), "fsdp": (-0.60, 0.15)}

# wide_mlp: 14.7 M parameters, so that the model's own share of a rank's memory is large enough to be judged.
WIDE = {
    "model": "wide_mlp",
    "optimizer": "adam",
    "lr": 0.0005,
    "batch_size": 64,
    "train_size": 512,
    "val_size": 64,
    "epochs": 1,
    "nproc_per_node": 2,
    "measure_flops": False,
}


def write_spec(path, **spec):
    path.write_text(yaml.safe_dump({"predict": True, **spec}))
    return str(path)


def test_a_model_too_large_for_the_machine_is_predicted_not_built(monkeypatch):
    """Eight 65536 x 65536 layers (34 G parameters, 137 GB of float32 weights alone): traced on fake tensors, the
    prediction counts every byte while this process's memory hardly moves."""

    def build(name, in_channels, image_size, num_classes):
        layers: list[nn.Module] = [nn.Flatten(), nn.Linear(in_channels * image_size * image_size, 65536)]
        layers += [nn.Linear(65536, 65536, bias=False) for _ in range(8)]
        return nn.Sequential(*layers, nn.Linear(65536, num_classes))

    monkeypatch.setattr(memory, "build_model", build)
    before = current_rss_bytes()
    prediction = memory.predict(TrainConfig(model="mlp", batch_size=8, optimizer="sgd", momentum=0), 0)
    grown = current_rss_bytes() - before
    weights = (8 * 65536 * 65536 + 3072 * 65536 + 65536 + 65536 * 10 + 10) * 4
    assert prediction.parts["params"] == weights and prediction.peak_bytes > 2 * weights > 2.7e11
    assert grown < 300e6, f"the prediction grew this process by {grown / 1e6:.0f} MB"


PLAN_GROWTH = """
import resource, subprocess, sys
done = subprocess.run([sys.executable, "-m", "ignite_ddl", "plan", sys.argv[1], "--no-measure"], capture_output=True,
                      text=True, timeout=600)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)  # the largest process of the plan, bytes
print(done.returncode)
print(done.stdout)
"""


def test_plan_of_a_50g_parameter_gpt_says_it_does_not_fit_without_building_it(tmp_path):
    """The built-in GPT at d_model 65536 (51.5 G parameters, 206 GB of float32 weights): ``plan`` calls the workload's
    function with its model on the meta device, so neither the pre-check nor the trace allocates it; the parts it
    traces already exceed the 4 GiB limit, so it is predicted not to fit though the runtime is not measured, and no
    process of the plan grows by 1 GB more than the same plan of a small GPT's does."""
    peaks = {}
    for name, d_model in (("small", 64), ("huge", 65536)):
        spec = {"name": name, "workload": "gpt", "memory_limit_mb": 4096, "grid": {"strategy": ["none"]},
                "base": {"workload_args": {"n_layer": 1, "d_model": d_model}, "batch_size": 8}}  # fmt: skip
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(spec))
        result = subprocess.run(
            [sys.executable, "-c", PLAN_GROWTH, f"{name}.yaml"], capture_output=True, text=True, cwd=tmp_path,
            timeout=900,
        )  # fmt: skip
        peak, code, out = result.stdout.split("\n", 2)
        assert code == "0" and "Traceback" not in result.stderr, out + result.stderr[-2000:]
        row = next(line for line in out.splitlines() if line.startswith("cfg000 "))
        peaks[name] = int(peak)
        if name == "huge":
            assert row.split()[-1] == "NO" and "cfg000: predicted not to fit: at least " in out, out  # the fits column
            params_mib = float(row.split()[2])
            assert params_mib * 2**20 > 200e9, row
    assert peaks["huge"] - peaks["small"] < 1e9, peaks


def test_a_model_that_cannot_be_traced_is_listed_with_why(tmp_path):
    """inception_v3 cannot take 32x32 images (its stem shrinks them below a 3x3 kernel): its trace meets the error
    its run would, and the plan says why and still lists it beside the configuration it can predict. --no-measure:
    no process is started at all."""
    spec = write_spec(
        tmp_path / "spec.yaml",
        name="models",
        base={"train_size": 64, "val_size": 16, "batch_size": 16, "epochs": 1},
        grid={"model": ["toy", "inception_v3"]},
    )
    result = run_cli("plan", spec, "--output-dir", str(tmp_path / "out"), "--no-measure", timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split()[:2] == ["cfg000", "model=toy"] for line in lines), result.stdout
    assert any(line.split()[:2] == ["cfg001", "model=inception_v3"] for line in lines), result.stdout
    assert "cfg001: cannot predict: RuntimeError: Calculated padded input size per channel" in result.stdout
    plan = read_json(tmp_path / "out" / "plan" / "plan.json")["configurations"]
    toy, inception = plan[0]["prediction"], plan[1]["prediction"]
    assert toy["parts"]["params"] == (3 * 32 * 32 * 10 + 10 + 10 * 10 + 10) * 4 and toy["parts"]["activations"] > 0
    assert toy["problem"] == "cannot predict: the runtime's own memory was not measured" and toy["peak_bytes"] is None
    assert inception["problem"].startswith("cannot predict: RuntimeError") and inception["parts"] == {}


def test_a_plan_of_a_space_too_large_to_list_is_refused_in_one_line(tmp_path):
    """A search's space may be far larger than a grid may list: ``plan --no-measure`` of one whose grid lists
    100 x 100 x 100 values enumerated every configuration, printing nothing for a minute. The plan lists at most
    MAX_CONFIGURATIONS, counted from the axes' lengths before one is built: exit 2, one line, nothing written."""
    values = list(range(1, 101))
    grid = {"seed": values, "batch_size": values, "max_iters": values}
    spec = write_spec(tmp_path / "spec.yaml", name="huge", grid=grid, search={"budget_runs": 10})
    result = run_cli("plan", spec, "--output-dir", str(tmp_path / "out"), "--no-measure", timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stderr.strip()
    assert "\n" not in said and "1e+06 configurations (100 x 100 x 100)" in said and "Traceback" not in said
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.distributed
def test_predictions_are_within_tolerance_of_what_runs_measure(tmp_path):
    """DDP and FSDP on 2 gloo processes, accumulation 1 and 4, float32 and bf16 (four configurations, paired so
    that each factor is seen with each strategy): every run records its prediction beside its measured peak, and
    they agree within the tolerance (a comparison of memory on this machine, not of time)."""
    spec = write_spec(
        tmp_path / "spec.yaml",
        name="paired",
        base=WIDE,
        grid={"strategy": ["ddp", "fsdp"], "accumulate": [1, 4], "amp": ["none", "bf16"]},
        exclude=[
            {"strategy": "ddp", "accumulate": 1, "amp": "bf16"},
            {"strategy": "ddp", "accumulate": 4, "amp": "none"},
            {"strategy": "fsdp", "accumulate": 1, "amp": "none"},
            {"strategy": "fsdp", "accumulate": 4, "amp": "bf16"},
        ],
        repeats=1,
        timeout_s=600,
    )
    out = tmp_path / "out"
    result = run_cli("sweep", spec, "--output-dir", str(out), timeout=1500)
    assert result.returncode == 0, result.stdout + result.stderr
    records = read_results(out / "results.jsonl")
    assert len(records) == 4
    errors = {}
    for record in records:
        predicted = record["prediction"]["peak_bytes"]
        measured = record["summary"]["memory"]["max"]["peak_rss_bytes"]
        errors[json.dumps(record["grid"])] = (record["grid"]["strategy"], (predicted - measured) / measured)
    assert all(TOLERANCE[s][0] <= e <= TOLERANCE[s][1] for s, e in errors.values()), errors
    strategies = {r["grid"]["strategy"]: r["prediction"]["method"] for r in records}
    assert strategies == {"ddp": "MemTracker", "fsdp": "FSDPMemTracker"}
    report = (out / "report.md").read_text()
    assert "predicted MiB" in report and "error %" in report


def _cap_data_segment():
    """The sweep and everything it starts get a 2.5 GB data segment: its processes fit, a rank training resnet18
    on a batch of 2048 does not (see test_memory for why RLIMIT_DATA)."""
    resource.setrlimit(resource.RLIMIT_DATA, (int(2.5e9), resource.RLIM_INFINITY))


@pytest.mark.slow
@pytest.mark.distributed
def test_a_configuration_predicted_not_to_fit_is_launched_only_when_asked(tmp_path):
    base = {"model": "resnet18", "train_size": 2048, "val_size": 32, "epochs": 1, "max_iters": 3}
    spec = write_spec(
        tmp_path / "spec.yaml",
        name="big",
        base={**base, "measure_flops": False},
        grid={"batch_size": [16, 2048]},
        memory_limit_mb=2000,
        repeats=1,
    )
    out = tmp_path / "out"
    skipped = run_cli("sweep", spec, "--output-dir", str(out), timeout=900)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    said = [line for line in skipped.stdout.splitlines() if "predicted not to fit: " in line]
    assert said and said[0].startswith("cfg001 batch_size=2048: predicted not to fit: ") and "> 1.95 GiB" in said[0]
    assert "not launched" in said[0] and "1 of 1 runs completed" in skipped.stdout
    assert [r["grid"]["batch_size"] for r in read_results(out / "results.jsonl")] == [16]
    plan = read_json(out / "sweep.json")["plan"]["configurations"]
    assert plan[0]["unfit"] is None and plan[1]["unfit"].startswith("predicted not to fit")
    assert "not launched: predicted not to fit" in (out / "report.md").read_text()

    forced = run_cli(
        "sweep", spec, "--output-dir", str(out), "--resume", "--run-unfit", timeout=900, preexec_fn=_cap_data_segment
    )
    assert "launched anyway (run_unfit)" in forced.stdout, forced.stdout + forced.stderr
    big = [r for r in read_results(out / "results.jsonl") if r["grid"]["batch_size"] == 2048]
    assert len(big) == 1 and big[0]["status"] == "out_of_memory", big
    assert big[0]["prediction"]["peak_bytes"] > 2000 * 2**20


FORK_AFTER_PLAN = """
import os, sys, torch
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.predict import memory

config = TrainConfig(model="toy", batch_size=8, nproc_per_node=2, strategy="fsdp")
first = memory.predict(config, 0).parts
pid = os.fork()  # as the launcher forks ranks
if pid == 0:
    try:
        x = torch.ones(3, requires_grad=True)
        (2 * x).sum().backward()
        print("forked rank: backward ok", flush=True)
    except RuntimeError as e:
        print("forked rank:", e, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
memory._trace_here(config)  # this process now in the state torch refuses forked autograd from
print("again:", memory.predict(config, 0).parts == first, flush=True)
"""


def test_a_plan_leaves_this_process_able_to_fork_ranks(tmp_path):
    """A backward on fake tensors starts autograd's device threads, and torch then refuses autograd in every process
    forked from that one: a notebook that planned, then launched forked ranks, saw its ranks fail. The trace runs in
    a forked child of its own, so a rank forked after a plan trains; a process already in that state traces in
    itself and gets the same parts."""
    result = subprocess.run([sys.executable, "-c", FORK_AFTER_PLAN], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "forked rank: backward ok" in result.stdout and "again: True" in result.stdout, result.stdout


def test_a_hooks_work_is_measured_in_a_process_of_its_own():
    """A hook's work is measured in a fresh spawned process: PowerSGD leaves the process it ran in unable to fork
    (a child forked after it aborted in its first backward), so this one still plans (its trace runs in a forked
    child) after measuring it; what the child cannot measure comes back as its error, in one line."""
    from ignite_ddl.predict.hook_cost import ddp_buckets, hook_cost

    config = TrainConfig(model="mlp", nproc_per_node=2, comm_hook="powersgd")
    costs = hook_cost(config, threads=1)
    assert len(costs) == len(ddp_buckets(config)) and all(
        b.compute_s > 0 and len(b.allreduce_bytes) == 3 for b in costs
    )
    assert memory.predict(TrainConfig(model="toy", batch_size=8), 0).problem is None
    # Without a hook: DDP's own copies and division, and the whole bucket all-reduced.
    plain = TrainConfig(model="mlp", nproc_per_node=2)
    assert [b.allreduce_bytes for b in hook_cost(plain, threads=1)] == [
        (4 * sum(g.numel() for g in bucket),) for bucket in ddp_buckets(plain)
    ]
    huge = TrainConfig(workload="gpt", workload_args={"d_model": 4096, "n_layer": 8}, nproc_per_node=2)
    with pytest.raises(RuntimeError, match=r"ValueError: the hook's work is measured on real gradients, \d"):
        hook_cost(huge, threads=1)  # counted on the meta device, refused before a byte is allocated


def _backward_in_a_child() -> bool:
    import torch

    x = torch.ones(8, 8, requires_grad=True)
    (x @ x).sum().backward()
    return x.grad is not None


def test_a_sweeps_hook_is_measured_by_a_child_of_its_fork_server():
    """A sweep whose runs start preloaded measures a hook in a child of its fork server (torch imported there, no
    interpreter started: 0.3 s instead of 5.7 s for the quickstart's): PowerSGD's child cannot fork, the server it
    came from still starts children that train."""
    from ignite_ddl.core.apart import call_apart
    from ignite_ddl.predict.hook_cost import ddp_buckets, hook_cost
    from ignite_ddl.sweep.forecast import _start_method

    config = TrainConfig(model="mlp", nproc_per_node=2, comm_hook="powersgd")
    costs = hook_cost(config, threads=1, start_method=_start_method("preloaded"))
    assert len(costs) == len(ddp_buckets(config)) and all(b.compute_s > 0 for b in costs)
    assert call_apart(_backward_in_a_child, start_method="forkserver", timeout_s=120) is True
    assert _start_method("fresh") == "spawn"


HOOK_FROM_STDIN = """
import sys
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.predict.hook_cost import ddp_buckets, hook_cost
from ignite_ddl.sweep.local import preloaded_context

preloaded_context()
config = TrainConfig(model="mlp", nproc_per_node=2, comm_hook="bf16")
costs = hook_cost(config, threads=1, start_method=sys.argv[1])
print("every bucket measured:", len(costs) == len(ddp_buckets(config)) and all(b.compute_s > 0 for b in costs))
"""


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_driver_read_from_standard_input_still_measures_a_hook(tmp_path, start_method):
    """The spawned child (or the fork server's) runs the caller's main script again before it measures; a main read
    from standard input (``python - <<EOF``) names "<stdin>", which the child cannot open: it exited and the hook
    went "not measured"."""
    result = subprocess.run(
        [sys.executable, "-", start_method],
        input=HOOK_FROM_STDIN,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "every bucket measured: True" in result.stdout, result.stdout


def test_the_step_model_recovers_known_costs():
    """Simulated first-round runs with known costs: 2 ms of compute per sample (one process), a tenth of it the
    optimizer step, a link of 50 us and 1 GB/s, 10 MB of gradients. Each configuration of 2 processes is predicted
    from its one-process twin (same accumulation) as the costs say: forward and backward unchanged (the two CPU
    ranks share the cores), the optimizer step twice under DDP (each rank's whole) and once under FSDP (a shard
    each), plus DDP's all-reduce, or FSDP's two gathers per micro-batch and one reduce-scatter."""
    c, alpha, beta, grads, batch = 2e-3, 50e-6, 1e9, 10_000_000, 64
    link = Link("simulated", alpha, beta, "test")

    def config(n, strategy, accumulate):
        return {"nproc_per_node": n, "strategy": strategy, "accumulate": accumulate, "batch_size": batch}

    one = [
        Observed(i, config(1, "ddp", a), 1, "cpu", c * batch * a, None, None, 0.5, 0.1 / a) for i, a in ((0, 1), (1, 4))
    ]
    many = [
        Observed(2, config(2, "ddp", 1), 2, None, None, None, None, None),
        Observed(3, config(2, "fsdp", 1), 2, None, None, None, None, None),
        Observed(4, config(2, "fsdp", 4), 2, None, None, None, None, None),
        Observed(5, {**config(2, "ddp", 1), "batch_size": 128}, 2, None, None, None, None, None),
    ]
    found = predict_steps(one + many, link, {i: grads for i in range(2, 6)})
    ring = 2 * alpha + grads / beta  # 2(N-1) alpha + 2(N-1)/N M / beta, N = 2
    gather = alpha + grads / 2 / beta  # (N-1) alpha + (N-1)/N M / beta
    optimizer = 0.1 * c * batch
    assert found[2].step_s == pytest.approx(c * batch + optimizer + ring)
    assert found[2].basis == "one-process twin cfg000"
    assert found[3].step_s == pytest.approx(c * batch + 3 * gather)
    assert found[4].step_s == pytest.approx(4 * c * batch + 9 * gather) and found[4].basis.endswith("cfg001")
    assert found[5].step_s is None and found[5].basis == "no one-process twin measured"
    assert 0 not in found and 1 not in found  # one process is measured, not predicted


def test_only_ranks_with_their_own_device_hide_ddps_all_reduce_behind_backward():
    """Two buckets of 10 MB, a backward of 0.6 of a 100 ms step. CPU ranks share the cores gloo's copies and sums need:
    the whole all-reduce is added. A GPU rank has its own device: compute is a half, the optimizer step (10 ms)
    stays whole, and the first bucket's all-reduce hides behind the rest of backward."""
    from ignite_ddl.predict.projection.model import bucketed_exposed_s, ring_allreduce_s

    link = Link("simulated", 50e-6, 1e9, "test")
    grads, bucket = 20 * 2**20, {"bucket_cap_mb": 10.0}
    hidden = bucketed_exposed_s(0.03, grads, 10 * 2**20, 2, link)
    whole = 2 * ring_allreduce_s(10 * 2**20, 2, link)
    assert hidden < whole  # the scenario shows the difference
    for device, compute, comm in (("cpu", 0.1 + 0.01, whole), ("cuda", 0.09 / 2 + 0.01, hidden)):
        one = Observed(0, {"nproc_per_node": 1, **bucket}, 1, device, 0.1, None, None, 0.6, 0.1)
        two = Observed(1, {"nproc_per_node": 2, "strategy": "ddp", **bucket}, 2, device, None, None, None, None)
        found = predict_steps([one, two], link, {1: grads})[1]
        assert found.compute_s == pytest.approx(compute) and found.comm_s == pytest.approx(comm), device


def test_cpu_ranks_pay_the_measured_busy_factors_on_every_collective():
    """On CPU ranks sharing the cores every collective costs its factor times its time at the link: DDP's and
    ZeRO-1's the DDP factor, DDP's copies in it (the measured hook work of a plain DDP is then not added again);
    FSDP's gathers and reduce-scatter the FSDP factor; a hook of one's own keeps its measured work and pays the
    factor on its all-reduces; a GPU rank, with its own device, is predicted as without them."""
    from ignite_ddl.predict.hook_cost import BucketCost
    from ignite_ddl.predict.projection.model import ring_allreduce_s
    from ignite_ddl.predict.steptime import Busy

    alpha, beta, grads = 50e-6, 1e9, 10_000_000
    busy = Busy(ddp=2.0, fsdp=7.0)
    link = Link("simulated", alpha, beta, "test")
    gather = alpha + grads / 2 / beta

    def observed(device, strategy, hook="none"):
        one = Observed(0, {"nproc_per_node": 1, "comm_hook": hook}, 1, device, 0.1, None, None, 0.6, 0.0)
        two = Observed(1, {"nproc_per_node": 2, "strategy": strategy, "comm_hook": hook}, 2, device, *[None] * 4)
        return [one, two]

    copies = [BucketCost(0.004, (grads,))]
    ddp = predict_steps(observed("cpu", "ddp"), link, {1: grads}, {1: copies}, busy)[1]
    assert ddp.comm_s == pytest.approx(2.0 * ring_allreduce_s(grads, 2, link))
    fsdp = predict_steps(observed("cpu", "fsdp"), link, {1: grads}, None, busy)[1]
    assert fsdp.comm_s == pytest.approx(7.0 * 3 * gather)
    unmeasured = predict_steps(observed("cpu", "fsdp"), link, {1: grads}, None, Busy(ddp=2.0))[1]
    assert unmeasured.comm_s == pytest.approx(3 * gather)
    half = [BucketCost(0.006, (grads // 2,))]
    bf16 = predict_steps(observed("cpu", "ddp", "bf16"), link, {1: grads}, {1: half}, busy)[1]
    assert bf16.comm_s == pytest.approx(0.006 + 2.0 * ring_allreduce_s(grads // 2, 2, link))
    gpu = predict_steps(observed("cuda", "fsdp"), link, {1: grads}, None, busy)[1]
    assert gpu.comm_s == pytest.approx(3 * gather)


def test_a_probed_layouts_step_is_the_compute_of_every_strategy_on_shared_cores():
    """Where the layout probe measured a configuration's step without communication, that step is its compute on
    CPU ranks sharing the cores (the twin's rule no longer applies), a sharded optimizer's step a 1/N share of the
    probe's, the twin's interval carried over; a GPU rank, with its own device, keeps the twin's rule."""
    link = Link("simulated", 50e-6, 1e9, "test")
    twin_s, probed_s, optimizer_s = 0.1, 0.15, 0.02

    def observed(device, strategy):
        one = Observed(0, {"nproc_per_node": 1}, 1, device, twin_s, 0.09, 0.12, 0.6, 0.1)
        two = Observed(1, {"nproc_per_node": 2, "strategy": strategy}, 2, device, *[None] * 5, probed_s, optimizer_s)
        return [one, two]

    ddp = predict_steps(observed("cpu", "ddp"), link, {1: 10_000})[1]
    assert ddp.compute_s == pytest.approx(probed_s) and ddp.basis.endswith("compute probed at the layout")
    assert ddp.low_s - ddp.comm_s == pytest.approx(probed_s * 0.09 / twin_s)
    assert ddp.high_s - ddp.comm_s == pytest.approx(probed_s * 0.12 / twin_s)
    for sharded in ("zero1", "fsdp"):
        found = predict_steps(observed("cpu", sharded), link, {1: 10_000})[1]
        assert found.compute_s == pytest.approx(probed_s - optimizer_s / 2), sharded
    gpu = predict_steps(observed("cuda", "ddp"), link, {1: 10_000})[1]
    assert gpu.compute_s == pytest.approx((twin_s - 0.01) / 2 + 0.01) and "probed" not in gpu.basis


def test_fsdp_on_cpu_ranks_pays_every_units_collectives():
    """FSDP's collectives on CPU ranks sharing the cores are priced unit by unit: each unit holding parameters
    gathers them in forward, again in backward (not the root, nor any with ``reshard_after_forward`` off) and
    reduce-scatters once a step, every micro-batch gathering; each collective pays its own cost and its bytes at the
    link's bandwidth times the factor, the large factor for a unit above 32 MiB."""
    from ignite_ddl.predict.projection.inputs import fsdp_collectives
    from ignite_ddl.predict.steptime import Busy, fsdp_busy_s

    mib = 2**20
    units = (4 * mib, 0, 40 * mib, 1 * mib)  # the root last; a unit without parameters of its own makes none
    assert fsdp_collectives(units) == [4 * mib, 40 * mib, 1 * mib, 4 * mib, 40 * mib, 4 * mib, 40 * mib, 1 * mib]
    assert fsdp_collectives(units, reshard_after_forward=False) == [4 * mib, 40 * mib, 1 * mib] * 2
    assert len(fsdp_collectives(units, accumulate=4)) == 5 * 4 + 3
    link = Link("simulated", 50e-6, 1e9, "test")
    busy = Busy(ddp=2.0, fsdp=3.0, fsdp_large=6.0, fsdp_collective_s=0.002)

    def at(factor: float, nbytes: int) -> float:
        return 0.002 + factor * nbytes / 2 / 1e9

    expected = 3 * at(3.0, 4 * mib) + 3 * at(6.0, 40 * mib) + 2 * at(3.0, 1 * mib)
    assert fsdp_busy_s(units, 2, link, busy) == pytest.approx(expected)
    observed = [
        Observed(0, {"nproc_per_node": 1}, 1, "cpu", 0.1, None, None, 0.6, 0.0),
        Observed(1, {"nproc_per_node": 2, "strategy": "fsdp"}, 2, "cpu", *[None] * 4),
    ]
    found = predict_steps(observed, link, {1: sum(units)}, None, busy, {1: 8}, {1: units})[1]
    assert found.comm_s == pytest.approx(expected)
    # without the collectives' own cost measured: the link's latency times the factor, as for the other strategies
    assert fsdp_busy_s((4 * mib, 0), 2, link, Busy(fsdp=3.0)) == pytest.approx(3 * 3.0 * (50e-6 + 4 * mib / 2 / 1e9))


def test_the_plan_counts_what_each_fsdp_unit_gathers():
    """The step model's FSDP units are the ones the strategy shards, counted on the meta device: the workload's
    blocks (each direct child holding parameters where none are marked) and the model last with what no unit
    holds; a weight two modules share is gathered once; under bf16 each batch norm layer is a unit of its own."""
    from ignite_ddl.trainer.strategies import FSDPStrategy, unit_bytes

    embed = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = embed.weight  # tied, as a language model's head and embedding
    model = nn.Sequential(embed, nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), nn.ReLU(), head)
    fsdp = FSDPStrategy()
    units = fsdp.unit_modules(model, TrainConfig(model="toy", strategy="fsdp", nproc_per_node=2))
    assert units == [model[0], model[1], model[3], model]  # the ReLU holds nothing
    assert unit_bytes(units) == [40 * 4, (16 + 4 + 8) * 4, 0, 0]
    bf16 = fsdp.unit_modules(model, TrainConfig(model="toy", strategy="fsdp", nproc_per_node=2, amp="bf16"))
    assert bf16[0] is model[1][1] and unit_bytes(bf16)[:3] == [8 * 4, 40 * 4, 20 * 4]
    fsdp.units = ("1",)  # a workload's blocks
    assert fsdp.unit_modules(model, TrainConfig(model="toy")) == [model[1], model]
    layout = memory.gradient_layout(
        TrainConfig(model="resnet18", dataset="synthetic", strategy="fsdp", nproc_per_node=2)
    )
    assert sum(layout.units) == layout.bytes and len(layout.units) == 8  # conv1, bn1, layer1-4, fc; the root


@pytest.mark.distributed
def test_a_busy_factor_an_earlier_probe_kept_is_measured_again(tmp_path):
    """plan/link.json keeps the busy factors across sweeps of one output folder; an entry written by an earlier
    revision of its probe (no revision, or another) means something else and is measured again, on real ranks; the
    current revision's is read as kept."""
    from ignite_ddl.predict.projection.inputs import PROBE_REVISIONS
    from ignite_ddl.sweep.forecast import _Cache, measured_busy

    link = Link("made up", 1e-4, 1e9, "test")
    said: list[str] = []
    _Cache(tmp_path / "plan", "link").put("busy-gloo-2", {"factor": 99.0, "revision": PROBE_REVISIONS["ddp"]})
    assert measured_busy(tmp_path, link, False, said.append).ddp == 99.0 and not said
    _Cache(tmp_path / "plan", "link").put("busy-gloo-2", {"factor": 99.0})  # before revisions were kept
    again = measured_busy(tmp_path, link, False, said.append).ddp
    assert again is not None and again != 99.0 and any("measuring DDP's step" in line for line in said), said
    assert read_json(tmp_path / "plan" / "link.json")["entries"]["busy-gloo-2"]["revision"] == PROBE_REVISIONS["ddp"]


@pytest.mark.distributed
def test_the_busy_factor_is_measured_on_real_ddp_ranks():
    """The probe trains its MLP under DDP on 2 real gloo processes, steps with and without the all-reduce
    alternating: the DDP steps are the slower, and the factor is their difference over the all-reduce of its
    gradients at the link given (16 MiB: the probe's model, counted)."""
    from ignite_ddl.predict.projection import measure_busy_factor
    from ignite_ddl.predict.projection.inputs import BUSY_PROBE
    from ignite_ddl.predict.projection.model import ring_allreduce_s

    link = Link("made up", 1e-4, 1e9, "test")
    found = measure_busy_factor(link, 2)
    width, depth = BUSY_PROBE["width"], BUSY_PROBE["depth"]
    assert found["grad_bytes"] == 4 * (depth * width * (width + 1) + 10 * (width + 1))
    assert found["allreduce_s"] == pytest.approx(ring_allreduce_s(found["grad_bytes"], 2, link))
    assert found["ddp_s"] > found["no_comm_s"] > 0 and found["factor"] > 0


@pytest.mark.distributed
def test_the_fsdp_factor_is_measured_on_real_fsdp_ranks():
    """The FSDP probe trains its three models plain and under FSDP2 on 2 real gloo processes, steps alternating:
    the FSDP steps are the slower, each collective has a cost of its own, and a byte costs a positive factor of its
    time at the link, in units below and above glibc's mmap threshold."""
    from ignite_ddl.predict.projection import measure_fsdp_factor

    link = Link("made up", 1e-4, 1e9, "test")
    found = measure_fsdp_factor(link, 2)
    assert found["fsdp_s"] > found["plain_s"] > 0 and found["factor"] > 0 and found["large_factor"] > 0
    # a gather or reduce-scatter's own cost: positive, far below a step (95 of them in the small stack's step)
    assert 0 < found["collective_s"] < 0.05, found
    # Adam on FSDP2's sharded parameters: a cost per tensor, positive and far below a step (64 tensors of 32 x 32)
    assert found["optimizer_tensors"] == 64 and 0 < found["optimizer_per_tensor_s"] < 0.05, found


def test_fsdps_optimizer_step_on_cpu_ranks_pays_per_parameter_tensor():
    """On CPU ranks sharing the cores, FSDP's optimizer step costs the measured seconds per parameter tensor beyond
    its 1/N share of the probe's (Adam on sharded parameters): added to FSDP's compute for each of its tensors, not
    to DDP's or ZeRO-1's (whose parameters are whole), nor where it was not measured, nor on a GPU rank."""
    from ignite_ddl.predict.steptime import Busy

    link = Link("simulated", 50e-6, 1e9, "test")
    busy = Busy(ddp=2.0, fsdp=7.0, fsdp_optimizer_per_tensor_s=0.001)

    def observed(device, strategy):
        one = Observed(0, {"nproc_per_node": 1}, 1, device, 0.1, 0.09, 0.12, 0.6, 0.1)
        two = Observed(1, {"nproc_per_node": 2, "strategy": strategy}, 2, device, *[None] * 5, 0.15, 0.02)
        return [one, two]

    def compute(device, strategy, measured=busy):
        return predict_steps(observed(device, strategy), link, {1: 10_000}, None, measured, {1: 40})[1].compute_s

    assert compute("cpu", "fsdp") == pytest.approx(0.15 - 0.02 / 2 + 40 * 0.001)
    assert compute("cpu", "zero1") == pytest.approx(0.15 - 0.02 / 2)
    assert compute("cpu", "ddp") == pytest.approx(0.15)
    assert compute("cpu", "fsdp", Busy(ddp=2.0, fsdp=7.0)) == pytest.approx(0.15 - 0.02 / 2)
    assert compute("cuda", "fsdp") == pytest.approx((0.1 - 0.01) / 2 + 0.01 / 2)
    fsdp = predict_steps(observed("cpu", "fsdp"), link, {1: 10_000}, None, busy, {1: 40})[1]
    assert fsdp.low_s - fsdp.comm_s == pytest.approx((0.15 - 0.01) * 0.09 / 0.1 + 0.04)


def test_the_step_model_adds_a_hooks_work_and_its_all_reduces():
    """A hooked step (PowerSGD's steady phase, bf16): the twin's compute, plus every bucket's measured work (not
    hidden behind backward), plus its all-reduces, bucket after bucket, each once its bucket is ready: with a
    backward of 0 (CPU ranks) all of them show."""
    from ignite_ddl.predict.hook_cost import BucketCost
    from ignite_ddl.predict.steptime import hook_s

    alpha, beta = 50e-6, 1e9
    link = Link("simulated", alpha, beta, "test")
    buckets = [BucketCost(0.010, (400, 4000, 0)), BucketCost(0.030, (800, 8000, 16000))]
    ring = lambda nbytes: 2 * alpha + nbytes / beta  # noqa: E731 - N = 2
    assert hook_s(buckets, 0.0, 2, link) == pytest.approx(0.040 + sum(ring(b) for b in (400, 4000, 800, 8000, 16000)))
    # A long backward hides the first bucket's all-reduces; the last one's come after it.
    assert hook_s(buckets, 1.0, 2, link) == pytest.approx(0.040 + sum(ring(b) for b in (800, 8000, 16000)))
    one = Observed(0, {"nproc_per_node": 1, "batch_size": 64}, 1, "cpu", 0.1, 0.09, 0.11, 0.5)
    hooked = {"nproc_per_node": 2, "batch_size": 64, "comm_hook": "powersgd"}
    two = Observed(1, hooked, 2, None, None, None, None, None)
    three = Observed(2, {**hooked, "powersgd_rank": 4}, 2, None, None, None, None, None)
    half = Observed(3, {**hooked, "comm_hook": "bf16"}, 2, None, None, None, None, None)
    costs = {1: buckets, 2: "ValueError: too big", 3: [BucketCost(0.002, (5000,))]}
    found = predict_steps([one, two, three, half], link, {i: 10_000 for i in (1, 2, 3)}, costs)
    assert found[3].step_s == pytest.approx(0.1 + 0.002 + ring(5000))  # a half-precision hook: its cast, half bytes
    assert found[1].step_s == pytest.approx(0.1 + hook_s(buckets, 0.0, 2, link))  # CPU ranks: nothing hidden
    assert found[1].low_s == pytest.approx(0.09 + found[1].comm_s)
    assert found[2].step_s is None and found[2].basis == "PowerSGD's work not measured: ValueError: too big"


@pytest.mark.slow
@pytest.mark.distributed
def test_a_real_sweep_records_its_step_prediction_beside_the_measurement(tmp_path, monkeypatch):
    spec = write_spec(
        tmp_path / "spec.yaml",
        name="steps",
        base={
            "model": "cnn",
            "train_size": 512,
            "val_size": 64,
            "batch_size": 64,
            "epochs": 1,
            "powersgd_start_iter": 2,
        },
        grid={"nproc_per_node": [1, 2], "comm_hook": ["none", "powersgd"]},
        exclude=[{"nproc_per_node": 1, "comm_hook": "powersgd"}],  # one process ignores the hook: the same run
        repeats=1,
    )
    out = tmp_path / "out"
    result = run_cli("sweep", spec, "--output-dir", str(out), timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "one-process runs first" in result.stdout
    # PowerSGD's work is measured; DDP's own copies and division are priced by the busy factor: not measured apart.
    assert "measuring DDP's own work on the gradients a step, powersgd hook" in result.stdout, result.stdout
    assert "measuring DDP's own work on the gradients a step, none hook" not in result.stdout, result.stdout
    assert read_json(out / "sweep.json")["step_model"]["link"].get("busy_factor"), "no busy factor: DDP's work unpriced"
    # One layout probe for both: the hook is communication, the probe has none.
    assert result.stdout.count("compute at its layout (2 processes, no communication)") == 1, result.stdout
    (probe,) = read_json(out / "plan" / "layout.json")["entries"].values()
    model = read_json(out / "sweep.json")["step_model"]
    assert model["link"]["beta_Bps"] > 0 and set(model["configurations"]) == {"1", "2"}
    # the twin probed right after the layout: the compute is their ratio times the twin's measured step
    (twin_run,) = [r for r in read_results(out / "results.jsonl") if r["config"]["nproc_per_node"] == 1]
    twin_s = twin_run["config"]["batch_size"] / twin_run["summary"]["samples_per_s"]
    assert probe["twin_step_s"] > 0 and probe["revision"] == LAYOUT_REVISION
    assert probe["iterations"] == probe_iterations(twin_s)  # about a second of the twin's steps, at least 10
    # probe and twin alternate LAYOUT_ROUNDS times: the round kept is the one whose ratio is the median of them
    ratios = sorted(step / twin for step, twin in probe["rounds"])
    assert len(ratios) == LAYOUT_ROUNDS and probe["step_s"] / probe["twin_step_s"] == ratios[len(ratios) // 2]
    for predicted in model["configurations"].values():  # DDP's own all-reduce, and PowerSGD's steady phase
        assert predicted["basis"] == "one-process twin cfg000, compute probed at the layout", predicted
        assert predicted["compute_s"] == pytest.approx(probe["step_s"] * twin_s / probe["twin_step_s"])
        assert predicted["low_s"] <= predicted["step_s"] <= predicted["high_s"] and predicted["comm_s"] > 0
    assert len(read_results(out / "results.jsonl")) == 3  # the probe is not one of the runs
    predicted = model["configurations"]["1"]
    # On a shared machine its runs may be contended: the report counts them when asked, to show the measurement.
    assert run_cli("report", str(out), "--include-contended").returncode == 0
    report = (out / "report.md").read_text()
    table = report[report.index("Step time, predicted") :]
    row = next(line for line in table.splitlines() if line.startswith("| cfg001"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert float(cells[1]) == pytest.approx(1e3 * predicted["step_s"], abs=0.06) and float(cells[3]) > 0
    # benchmarks/step_prediction.py refits the model to every round's one-process runs with the sweep's own probes
    # and link, kept in plan/: of a sweep of one round, the sweep's own prediction (of the configuration without a
    # hook: PowerSGD's work is measured again), and nothing probed again.
    kept = {name: (out / "plan" / name).read_bytes() for name in ("layout.json", "link.json")}
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks"))  # no package: its modules import so
    from step_prediction import summarise

    refitted = {row["config"]: row["predicted_ms"] for row in summarise(out, every_round=True)["rows"]}
    assert refitted["cfg001"] == pytest.approx(1e3 * predicted["step_s"]) and "cfg002" in refitted
    assert {name: (out / "plan" / name).read_bytes() for name in kept} == kept
    # a sweep's probe of an earlier revision is read back as the sweep used it, not measured again
    layouts = read_json(out / "plan" / "layout.json")
    (key,) = layouts["entries"]
    layouts["entries"][key]["revision"] = LAYOUT_REVISION - 1
    (out / "plan" / "layout.json").write_text(json.dumps(layouts))
    older = (out / "plan" / "layout.json").read_bytes()
    again = {row["config"]: row["predicted_ms"] for row in summarise(out, every_round=True)["rows"]}
    assert again["cfg001"] == pytest.approx(refitted["cfg001"])  # (cfg002's PowerSGD work is measured again)
    assert (out / "plan" / "layout.json").read_bytes() == older


def test_the_layout_probe_keeps_the_median_round_so_one_drifted_run_moves_nothing(monkeypatch):
    """The layout probe and its twin alternate; a drift that slows one run (here the second twin, as in a run of
    benchmarks/own_model_prediction.py) moves its round's ratio only, and the median round is kept. A round that
    fails after the first is left out; a twin that never completes leaves the probe alone (the twin's runs then)."""
    probe = TrainConfig(model="mlp", nproc_per_node=2, batch_size=32, output_dir="probe")
    twin = TrainConfig(model="mlp", nproc_per_node=1, batch_size=32, output_dir="twin")
    seconds: list[float | None] = [0.20, 0.10, 0.21, 0.14, 0.19, 0.10]  # probe, twin, probe, twin (drifted), ...

    def run_probe(config, spec):
        step = seconds.pop(0)
        if step is None:
            return None, {"error": "killed"}
        summary = {"samples_per_s": config.batch_size / step, "steps": {"ranks": [{"optimizer_s_mean": step / 10}]}}
        return summary, {"contended": False, "measured": "now"}

    monkeypatch.setattr(layout, "run_probe", run_probe)
    entry = layout.measure_layout(probe, None, twin)
    assert not seconds and entry["revision"] == LAYOUT_REVISION and len(entry["rounds"]) == LAYOUT_ROUNDS
    assert (entry["step_s"], entry["twin_step_s"]) == pytest.approx((0.19, 0.10))  # ratios 2.0, 1.5, 1.9: 1.9 kept
    seconds[:] = [0.20, 0.10, None, 0.30, 0.11]
    entry = layout.measure_layout(probe, None, twin)
    assert len(entry["rounds"]) == 2 and (entry["step_s"], entry["twin_step_s"]) == pytest.approx((0.20, 0.10))
    seconds[:] = [0.20, None, 0.22, None, 0.21, None]
    entry = layout.measure_layout(probe, None, twin)
    assert "twin_step_s" not in entry and entry["step_s"] == pytest.approx(0.20)
    seconds[:] = [None]
    assert layout.measure_layout(probe, None, twin) == {"error": "killed"}


VALUED_WORKLOAD = """
import torch
from torch import nn
from torch.utils.data import TensorDataset
from ignite_ddl.trainer.workload import Workload

def make():
    x = torch.randn(64, 4)
    width = int(x.abs().max() * 0 + 8)  # a value read while building: no meta device for this function
    data = TensorDataset(x, torch.randint(0, 3, (64,)))
    return Workload(model=nn.Sequential(nn.Linear(4, width), nn.Linear(width, 3)), train=data, val=data)
"""


def test_a_workload_the_plan_cannot_build_is_not_predicted_and_says_why(tmp_path, monkeypatch):
    """A workload whose function reads a value of a tensor it made without naming a device cannot be built on the
    meta device: the step-time model leaves its configuration of 2 processes unpredicted with why, said in one line,
    measuring nothing for it (no all-reduce, no hook's work); a step-time model that fails outright leaves every
    configuration of several processes unpredicted with why, and the sweep goes on."""
    from ignite_ddl.sweep import runner
    from ignite_ddl.sweep.forecast import fit_step_model
    from ignite_ddl.sweep.plan import expand
    from ignite_ddl.sweep.spec import parse_spec

    (tmp_path / "valued.py").write_text(VALUED_WORKLOAD)
    spec = parse_spec(
        {
            "name": "own",
            "workload": "valued:make",
            "base": {"workload_dir": str(tmp_path), "batch_size": 32},
            "grid": {"nproc_per_node": [1, 2]},
        }
    )
    said: list[str] = []
    model = fit_step_model(spec, tmp_path, [], said.append)
    assert model["link"] is None and model["configurations"]["1"]["step_s"] is None
    why = model["configurations"]["1"]["basis"]
    assert why.startswith("valued:make: its function cannot build on the meta device: ") and "device=" in why, why
    assert said == [f"plan: cfg001: step time not predicted: {why}"]

    def fails(*args):
        raise RuntimeError("the link's fit diverged\nsecond line")

    monkeypatch.setattr(runner, "fit_step_model", fails)
    said.clear()
    model = runner._step_model(spec, tmp_path, [], said.append, list(expand(spec, tmp_path)))
    assert set(model["configurations"]) == {"1"} and model["configurations"]["1"]["step_s"] is None
    assert model["configurations"]["1"]["basis"] == "RuntimeError: the link's fit diverged"
    assert said == ["plan: step time not predicted: RuntimeError: the link's fit diverged"]


BROKEN_WORKLOAD = """
def make(**kwargs):
    raise RuntimeError("no model here")
"""


@pytest.mark.slow
def test_a_probe_that_fails_runs_once_a_sweep_and_is_not_kept(tmp_path):
    """A layout probe whose run fails (a real run of a workload that raises) is answered with its error for the rest
    of the sweep without running again, is not written to the plan's files, and runs again once a sweep starts."""
    from ignite_ddl.sweep.forecast import _Cache
    from ignite_ddl.sweep.layout_probe import layout_probe, measure_layout
    from ignite_ddl.sweep.probes import forget_failures
    from ignite_ddl.sweep.spec import parse_spec

    (tmp_path / "broken.py").write_text(BROKEN_WORKLOAD)
    spec = parse_spec(
        {"name": "own", "workload": "broken:make", "base": {"workload_dir": str(tmp_path)}, "grid": {"threads": [1, 2]}}
    )
    config = TrainConfig(workload="broken:make", workload_dir=str(tmp_path), nproc_per_node=2, output_dir="x")
    probe = layout_probe(config, tmp_path / "plan")
    entry = measure_layout(probe, spec)
    assert "no model here" in entry["error"], entry
    cache = _Cache(tmp_path / "plan", "layout")
    cache.put("k", entry)
    assert not cache.path.exists()  # not kept: the next sweep tries again
    assert _Cache(tmp_path / "plan", "layout").get("k") == entry  # this sweep does not
    forget_failures()  # as a sweep starts
    assert _Cache(tmp_path / "plan", "layout").get("k") is None
    cache.put("k", {"step_s": 0.1})  # a figure is kept
    assert _Cache(tmp_path / "plan", "layout").get("k") == {"step_s": 0.1}


def test_configurations_the_step_model_could_not_predict_are_named_not_listed_blank():
    """A configuration without a one-process twin gets no row of blanks in the report's table: the text names it
    and why (a sweep of 2-process configurations only had a table of nothing but such rows). A prediction that is
    not one (a damaged sweep.json) is neither."""
    from types import SimpleNamespace

    from ignite_ddl.report import tables

    configs = [
        SimpleNamespace(index=i, name=f"cfg00{i}", global_batch=64, throughput=SimpleNamespace(value=640.0))
        for i in range(5)
    ]
    meta = {
        "step_model": {
            "configurations": {
                "0": {"step_s": 0.1, "low_s": 0.09, "high_s": 0.11, "basis": "one-process twin cfg009"},
                "1": {"step_s": None, "basis": "no one-process twin measured"},
                "2": {"step_s": None, "basis": "no one-process twin measured"},
                "3": {"step_s": "fast", "basis": "one-process twin cfg009"},
                "4": "damaged",
            }
        }
    }
    analysis = SimpleNamespace(meta=meta, configs=configs)
    _, rows = tables._step_model_table(analysis)
    assert [row[0] for row in rows] == ["cfg000"] and rows[0][1] == "100.0"
    assert tables._unpredicted_text(analysis) == " Not predicted: cfg001, cfg002 (no one-process twin measured)."
    analysis.configs = configs[:1]
    assert tables._unpredicted_text(analysis) == ""


def test_the_memory_table_marks_a_miss_the_plan_said_it_would_not_predict(tmp_path):
    """An FSDP rank's resident peak above its prediction, where the plan said before the run that the C allocator's
    heap is left out, is marked in the error cell; a DDP rank's miss, with nothing said, is not."""
    from test_report import _with_memory, record

    from ignite_ddl.core.results import append_record
    from ignite_ddl.report import write_report

    heap = "the C allocator's heap kept beside FSDP's freed gathered units and gradients (glibc, CPU): ..."
    for index, (strategy, left_out) in enumerate((("ddp", []), ("fsdp", [heap]))):
        prediction = {"peak_bytes": 600 * 2**20, "parts": {}, "problem": None, "unpredicted": left_out}
        for repeat in range(3):
            rec = record(index, repeat, 100.0, procs=2, grid={"strategy": strategy}, config={"strategy": strategy})
            rec["prediction"] = prediction
            append_record(tmp_path / "results.jsonl", _with_memory(rec, 1000.0))
    report = write_report(tmp_path).read_text()
    table = report.split("### Memory", 1)[1].split("##", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| cfg")}
    assert "-40.0 (heap not predicted)" in rows["cfg001"] and "heap not predicted" not in rows["cfg000"]
    assert "-40.0" in rows["cfg000"]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's heaps are what the note is about")
def test_an_fsdp_rank_on_cpu_says_what_the_allocator_keeps_is_not_predicted():
    """glibc's heaps keep FSDP's freed buffers resident beyond the traced tensors (docs/plan.md): an FSDP rank's
    prediction on CPU names it as not predicted; DDP's does not."""
    fsdp = memory.predict(TrainConfig(model="toy", strategy="fsdp", nproc_per_node=2, batch_size=8), 0)
    ddp = memory.predict(TrainConfig(model="toy", strategy="ddp", nproc_per_node=2, batch_size=8), 0)
    assert fsdp.peak_bytes and ddp.peak_bytes
    assert any("C allocator's heap" in u for u in fsdp.unpredicted), fsdp.unpredicted
    assert not any("C allocator" in u for u in ddp.unpredicted), ddp.unpredicted


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's heaps are what the note is about")
@pytest.mark.skipif(memory.on_cuda(TrainConfig()), reason="a CUDA rank's memory is the caching allocator's")
def test_a_cpu_rank_whose_heap_is_not_replayed_says_so_where_its_step_is_mostly_activations(monkeypatch):
    """Where the traced allocations cannot be replayed (here: none may be, its share of the memory available 0),
    glibc's heap goes unpredicted: a CPU rank whose activations are a tenth of its peak or more says so (glibc kept
    0.55-0.9 times a GPT's activations beyond its traced peak, docs/plan.md); one whose activations are a small
    share of it, or whose peak is its optimizer's step, does not. FSDP's own note covers its heap whole."""
    from ignite_ddl.predict import heap as replay

    monkeypatch.setattr(replay, "REPLAY_SHARE", 0.0)
    mib = 2**20
    gpt = TrainConfig(workload="gpt", batch_size=32)
    alone = memory.predict(gpt, runtime_bytes=0)  # the activations nearly all of the peak
    beside = memory.predict(gpt, runtime_bytes=400 * mib)  # the same activations, under a tenth beside a runtime
    assert alone.parts["activations"] >= 0.1 * (alone.peak_bytes or 0)
    assert beside.parts["activations"] < 0.1 * (beside.peak_bytes or 0)
    heap = [u for u in alone.unpredicted if "activations each step frees" in u]
    assert len(heap) == 1 and "docs/plan.md" in heap[0]
    assert not any("allocator" in u for u in beside.unpredicted), beside.unpredicted
    mlp = memory.predict(TrainConfig(model="toy", batch_size=8), runtime_bytes=0)  # its data and state dominate
    assert not any("allocator" in u for u in mlp.unpredicted), mlp.unpredicted
    sharded = memory.predict(TrainConfig(workload="gpt", batch_size=32, strategy="fsdp", nproc_per_node=2), 0)
    assert [u for u in sharded.unpredicted if "allocator" in u] == [memory._HEAP_NOTE]


def test_the_built_in_gpt_is_predicted_with_its_blocks_and_checkpointing():
    """--workload gpt is traced as the trainer builds it: its parameters counted once (the head is tied to the token
    embedding), its datasets' bytes, FSDP sharding its blocks (each rank holds about half the weights of DDP), and
    activation checkpointing lowering the activations of long sequences (256 tokens, 32 a rank, 4 layers of 128).
    A workload of the user's is predicted as built: its parameters and data counted as its function makes them."""
    from ignite_ddl.trainer.gpt import GPT

    sizes = {"n_layer": 4, "d_model": 128, "n_head": 4, "seq_len": 256, "vocab": 256, "train_sequences": 96}
    base = {"workload": "gpt", "workload_args": sizes, "batch_size": 64, "nproc_per_node": 2, "optimizer": "adam"}
    ddp, fsdp, checkpointed = (
        memory.predict(TrainConfig.from_dict({**base, **extra}), 0)
        for extra in ({"strategy": "ddp"}, {"strategy": "fsdp"}, {"strategy": "ddp", "activation_checkpointing": True})
    )
    assert not (ddp.problem or fsdp.problem or checkpointed.problem), (ddp, fsdp, checkpointed)
    weights = sum(p.numel() * 4 for p in GPT(4, 128, 4, 256, 256).parameters())  # the tied matrix once
    assert ddp.parts["params"] == weights and ddp.parts["buckets"] == weights
    assert ddp.parts["data"] == 2 * (96 + 128) * 256 * 8  # inputs and targets, int64, train and validation
    # FSDP: a rank's shard of every block, plus the units it has gathered at the peak
    assert weights / 2 <= fsdp.parts["params"] < 0.8 * weights and fsdp.method == "FSDPMemTracker"
    assert checkpointed.parts["activations"] < 0.6 * ddp.parts["activations"], (checkpointed.parts, ddp.parts)
    assert checkpointed.parts["params"] == weights

    # A workload of the user's, built with its model on the meta device: its parameters and its data are counted
    # exactly as they are when the function runs for real.
    from ignite_ddl.trainer.workload import load_workload

    example = Path(__file__).parents[1] / "examples" / "own_workload"
    own = TrainConfig.from_dict(
        {"workload": "bench:make", "workload_args": {"width": 32}, "workload_dir": str(example), "batch_size": 32}
    )
    prediction = memory.predict(own, 0)
    built: Any = load_workload(own).workload  # built for real, to count what the plan counted without building
    assert prediction.problem is None, prediction.problem
    assert prediction.parts["params"] == sum(p.numel() * 4 for p in built.model.parameters())
    assert prediction.parts["data"] == sum(t.numel() * 4 for d in (built.train, built.val) for t in (d.x, d.y))
    assert prediction.parts["activations"] > 0 and prediction.parts["optimizer"] > 0


def test_a_communication_hook_is_named_as_left_out_and_marked_in_the_memory_table(tmp_path):
    """A DDP hook's own buffers are not modelled (faster_step measured +80 MiB a rank for bf16, +245 for PowerSGD on
    wide_mlp): the plan says so for a hooked DDP configuration, not for one process nor without a hook, and the
    memory table marks that configuration's miss with what was left out."""
    from test_report import _with_memory, record

    from ignite_ddl.core.results import append_record
    from ignite_ddl.report import write_report

    hooked = memory.predict(TrainConfig(model="toy", nproc_per_node=2, batch_size=8, comm_hook="powersgd"), 0)
    plain = memory.predict(TrainConfig(model="toy", nproc_per_node=2, batch_size=8), 0)
    alone = memory.predict(TrainConfig(model="toy", batch_size=8, comm_hook="bf16"), 0)
    assert [u.split(" (")[0] for u in hooked.unpredicted] == ["--comm-hook powersgd"]
    assert not plain.unpredicted and not alone.unpredicted  # one process: no hook runs
    for index, leaves_out in enumerate(([], list(hooked.unpredicted))):
        prediction = {"peak_bytes": 600 * 2**20, "parts": {}, "problem": None, "unpredicted": leaves_out}
        for repeat in range(3):
            rec = record(index, repeat, 100.0, procs=2, grid={"hook": index}, config={"strategy": "ddp"})
            rec["prediction"] = prediction
            append_record(tmp_path / "results.jsonl", _with_memory(rec, 1000.0))
    table = write_report(tmp_path).read_text().split("### Memory", 1)[1].split("##", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| cfg")}
    assert "-40.0 (hook not predicted)" in rows["cfg001"] and "not predicted" not in rows["cfg000"]


def test_the_docs_table_of_a_users_models_is_the_benchmarks_json():
    # docs/plan.md's "Your model, measured" rows come from benchmarks/own_model_prediction.py's JSON, figure for figure
    root = Path(__file__).parents[1]
    data = json.loads((root / "docs/data/own_model_prediction.json").read_text())
    doc = (root / "docs/plan.md").read_text()
    names = {"own": "own example", "timm": "timm:resnet18", "hf": "hf:gpt2"}
    assert len(data["rows"]) == 9
    for row in data["rows"]:
        layout = "one process" if row["nproc"] == 1 else f"{row['strategy'].upper()} x {row['nproc']}"
        memory = f"{row['memory_predicted_mib']:.0f} / {row['memory_measured_mib']:.0f}"
        cells = f"| {names[row['model']]} | {layout} | {memory} | {100 * row['memory_error']:+.1f} %".replace("-", "−")
        if row["step_error"] is not None:
            cells += f" | {row['step_predicted_ms']:.1f} / {row['step_measured_ms']:.1f}"
            cells += f" | {100 * row['step_error']:+.1f} % |".replace("-", "−")
        assert cells.replace("+", "") in doc, cells
    # the goal is judged over the runs together, beside how far the measured steps moved between runs
    pooled, moved = data["pooled"], data["reproducibility"]["median_abs_change"]
    prose = " ".join(doc.split())
    assert f"{100 * pooled['step_median_abs_error']:.1f} % over their {pooled['predictions']} predictions" in prose
    assert f"median {100 * moved:.1f} % from the run before" in prose
