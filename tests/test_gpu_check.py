"""benchmarks/gpu_check.py tested where CI runs: its refusals, a step stopped at its budget, and every step at toy
size on the CPU (``--cpu``), the summary and the figures file it writes. The figures of a CPU run mean nothing about
a GPU; what is checked is that each step ran and reported what it measured, with its spread."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import run

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "gpu_check.py"
STEPS = ("environment", "tests", "overhead", "gpu_single", "resnet50", "what_fits", "faster_step")


def _module():
    """benchmarks/gpu_check.py as a module (the benchmarks folder is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_check(*args: str, timeout: float = 120):
    return run([sys.executable, str(SCRIPT), *args], timeout=timeout)


@pytest.mark.parametrize("cpu", [False, True])
def test_the_sweeps_it_runs_are_valid_specs_of_the_cut_it_promises(cpu):
    """The GPU specs are checked here, where CI runs, not first on a lent GPU: each parses as a sweep spec, every
    configuration's options are a valid TrainConfig, and the grids are the ones the docs promise."""
    from ignite_ddl.core.config import TrainConfig
    from ignite_ddl.sweep.spec import configurations, parse_spec, run_options

    module = _module()
    grids = {}
    for name in ("gpu_single", "what_fits", "faster_step"):
        spec = parse_spec(getattr(module, f"{name}_spec")(cpu))
        assert spec.on_busy == "run" and spec.busy_stop_after == 0
        grids[name] = configurations(spec)
        for grid in grids[name]:
            TrainConfig(**run_options(spec, grid))
    amps = {"none", "bf16"} if cpu else {"none", "bf16", "fp16"}
    assert {g["amp"] for g in grids["gpu_single"]} == amps and len({g["batch_size"] for g in grids["gpu_single"]}) == 2
    assert parse_spec(module.gpu_single_spec(cpu)).repeats == (1 if cpu else 3)
    layout = {(g["strategy"], g["accumulate"], g["nproc_per_node"]) for g in grids["what_fits"]}
    assert layout == {("ddp", 1, 1), ("ddp", 4, 1), ("fsdp", 1, 2), ("fsdp", 4, 2)}
    if not cpu:  # one GPU: two ranks cannot share it (Ignite gives process r the GPU cuda:r), DDP's rows alone
        one = configurations(parse_spec(module.what_fits_spec(cpu, gpus=1)))
        assert {(g["strategy"], g["accumulate"], g["nproc_per_node"]) for g in one} == {("ddp", 1, 1), ("ddp", 4, 1)}
    modes = {(g["compile"], g.get("compile_mode", "default")) for g in grids["faster_step"]}
    expected = {(False, "default"), (True, "default")} | (set() if cpu else {(True, "reduce-overhead")})
    assert modes == expected


@pytest.mark.parametrize(
    "args, said",
    [
        (["--cpu", "--steps", "environment,warp"], "unknown step(s) warp"),
        (["--cpu", "--budget", "tests=soon"], "--budget expects NAME=SECONDS"),
        (["--cpu", "--budget", "nothing=5"], "--budget expects NAME=SECONDS"),
        (["--cpu", "--budget", "tests=-1"], "--budget expects NAME=SECONDS"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(tmp_path, args, said):
    result = gpu_check(str(tmp_path / "out"), *args)
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without a CUDA GPU")
def test_without_a_gpu_only_the_toy_run_is_offered(tmp_path):
    result = gpu_check(str(tmp_path / "out"))
    assert result.returncode == 2 and "no CUDA GPU is visible here; --cpu runs the same steps" in result.stderr


def test_a_folder_of_something_else_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = gpu_check(str(tmp_path), "--cpu")
    assert result.returncode == 2 and "holds files of something else" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_step_past_its_budget_is_stopped_and_reported(tmp_path):
    out = tmp_path / "out"
    result = gpu_check(str(out), "--cpu", "--steps", "resnet50", "--budget", "resnet50=1")
    assert result.returncode == 0, result.stderr
    figures = json.loads((out / "figures.json").read_text())
    step = figures["steps"]["resnet50"]
    assert step["status"] == "timed out" and "budget of 1 s" in step["reason"]
    summary = (out / "summary.md").read_text()
    assert "| resnet50 | timed out |" in summary


@pytest.mark.slow
@pytest.mark.distributed
def test_every_step_runs_at_toy_size_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    result = gpu_check(str(out), "--cpu", timeout=1900)  # the toy run's own limit is 1800 s
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads((out / "figures.json").read_text())
    assert figures["mode"] == "cpu (toy size)" and list(figures["steps"]) == list(STEPS)
    steps = {name: s["figures"] for name, s in figures["steps"].items() if s["status"] == "ok"}
    assert set(steps) == set(STEPS), {name: s.get("reason") for name, s in figures["steps"].items()}
    # the matmul peak: measured once on this CPU, kept, read back by the steps that report MFU
    peaks = steps["environment"]["matmul_peak"]
    assert peaks["fp32"]["measured_flops_per_s"] > 0 and not peaks["fp32"]["from_cache"]
    assert json.loads((out / "runs" / "matmul_peak.json").read_text())["entries"]
    mfu = steps["resnet50"]["mfu"]
    assert mfu["of_measured"] > 0 and mfu["of_datasheet"] is None  # no datasheet for a CPU
    assert steps["resnet50"]["per_step_samples_per_s"]["n"] >= 3
    # the GPU tests skip here, each saying why
    tests = steps["tests"]["tests"]
    assert tests["counts"]["skipped"] > 0 and tests["counts"]["passed"] == tests["counts"]["failed"] == 0
    assert all("needs a CUDA GPU" in s["reason"] for s in tests["skip_reasons"])
    # ours vs raw in both layouts: contiguous in fresh processes, channels_last within one (a fresh CUDA process
    # took 15-25 s to start on an H200)
    for layout, fresh in (("contiguous", True), ("channels_last", False)):
        assert steps["overhead"][layout]["settings"]["fresh_processes"] is fresh
        assert steps["overhead"][layout]["ours_over_raw"]["mean_ratio"] > 0
    # the sweeps ran and were reported
    assert steps["gpu_single"]["configs"] and steps["gpu_single"]["verdicts"]
    fits = steps["what_fits"]["configs"]
    assert {(c["grid"]["strategy"], c["grid"]["accumulate"]) for c in fits} == {
        ("ddp", 1),
        ("ddp", 4),
        ("fsdp", 1),
        ("fsdp", 4),
    }
    assert all(c["peak_memory_bytes"] and c["held_bytes"] and c["predicted_held_bytes"] for c in fits)
    compiled = [c for c in steps["faster_step"]["configs"] if c["grid"].get("compile")]
    assert compiled and compiled[0]["compile_s"] > 0
    summary = (out / "summary.md").read_text()
    assert "Toy size on the CPU: these figures test the script, they say nothing about a GPU." in summary
    for name in STEPS:
        assert f"## {name}" in summary
