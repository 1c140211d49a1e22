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
STEPS = ("environment", "tests", "overhead", "gpu_single", "resnet50", "what_fits", "gpt", "faster_step")
PARTS = {
    "1": ("environment", "tests", "overhead", "gpu_single"),
    "2": ("environment", "resnet50", "what_fits", "gpt", "faster_step"),
}


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
    for name in ("gpu_single", "faster_step"):
        spec = parse_spec(getattr(module, f"{name}_spec")(cpu))
        assert spec.on_busy == "run" and spec.busy_stop_after == 0 and not spec.predict
        grids[name] = configurations(spec)
        for grid in grids[name]:
            TrainConfig(**run_options(spec, grid))
    amps = {"none", "bf16"} if cpu else {"none", "bf16", "fp16"}
    assert {g["amp"] for g in grids["gpu_single"]} == amps
    assert parse_spec(module.gpu_single_spec(cpu)).repeats == (1 if cpu else 3)
    modes = {(g["compile"], g.get("compile_mode", "default")) for g in grids["faster_step"]}
    expected = {(False, "default"), (True, "default")} | (set() if cpu else {(True, "reduce-overhead")})
    assert modes == expected
    # the GPT step's runs are valid configurations of the GPT-2-small shape on a GPU
    gpt = module.gpt_config(cpu, True, Path("unused"))
    assert gpt.workload == "gpt" and gpt.compile and gpt.amp == "bf16"
    assert cpu or {k: gpt.workload_args[k] for k in module.GPT2_SMALL} == module.GPT2_SMALL


def test_the_parts_cover_every_step_and_fit_five_minutes_each_on_a_gpu():
    module = _module()
    assert {k: tuple(v) for k, v in module.PARTS.items()} == PARTS
    assert set(STEPS) == {name for part in module.PARTS.values() for name in part}
    for part in module.PARTS.values():
        assert sum(module.GPU_BUDGET_S[name] for name in part) <= module.GPU_TOTAL_S <= 300


def test_pytest_outcomes_are_read_with_and_without_xdist():
    module = _module()
    output = "\n".join(
        [
            "tests/test_gpu_cuda.py::test_a PASSED                [ 50%]",
            "[gw1] [ 75%] FAILED tests/test_gpu_cuda.py::test_b[bf16] ",
            "[gw0] [100%] SKIPPED tests/test_lab_dp_vs_ddp.py::test_c ",
            "12.50s call     tests/test_gpu_cuda.py::test_a",
        ]
    )
    assert module.test_outcomes(output) == {
        "tests/test_gpu_cuda.py::test_a": "passed",
        "tests/test_gpu_cuda.py::test_b[bf16]": "failed",
        "tests/test_lab_dp_vs_ddp.py::test_c": "skipped",
    }


@pytest.mark.parametrize(
    "args, said",
    [
        (["--cpu", "--steps", "environment,warp"], "unknown step(s) warp"),
        (["--cpu", "--part", "3"], "invalid choice: '3'"),
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
@pytest.mark.parametrize("part", ["1", "2"])
def test_each_part_runs_every_step_at_toy_size_on_the_cpu(tmp_path, part):
    out = tmp_path / "out"
    result = gpu_check(str(out), "--cpu", "--part", part, timeout=1900)  # a toy part's own limit is 1800 s
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads((out / "figures.json").read_text())
    assert figures["mode"] == "cpu (toy size)" and figures["part"] == part
    assert list(figures["steps"]) == list(PARTS[part])
    steps = {name: s["figures"] for name, s in figures["steps"].items() if s["status"] == "ok"}
    assert set(steps) == set(PARTS[part]), {name: s.get("reason") for name, s in figures["steps"].items()}
    # the matmul peak: measured once on this CPU, kept in the part's folder
    peaks = steps["environment"]["matmul_peak"]
    assert peaks["fp32"]["measured_flops_per_s"] > 0 and not peaks["fp32"]["from_cache"]
    assert json.loads((out / "runs" / "matmul_peak.json").read_text())["entries"]
    summary = (out / "summary.md").read_text()
    assert "Toy size on the CPU: these figures test the script, they say nothing about a GPU." in summary
    for name in PARTS[part]:
        assert f"## {name}" in summary
    if part == "1":
        # the GPU tests skip here, each saying why
        tests = steps["tests"]["tests"]
        assert tests["counts"]["skipped"] > 0 and tests["counts"]["passed"] == tests["counts"]["failed"] == 0
        assert all("needs a CUDA GPU" in s["reason"] or "GPU" in s["reason"] for s in tests["skip_reasons"])
        # ours vs raw by step pairs in one process, the CNN and the GPT
        for workload in ("resnet18", "gpt"):
            found = steps["overhead"][workload]
            assert found["settings"]["mode"] == "pairs" and found["pairs"] == 4
            assert found["ours_over_raw"]["mean_ratio"] > 0 and found["ours_step_s"]["n"] == 4
        assert steps["gpu_single"]["configs"] and steps["gpu_single"]["verdicts"]
        return
    mfu = steps["resnet50"]["mfu"]
    assert mfu["of_measured"] > 0 and mfu["of_datasheet"] is None  # no datasheet for a CPU
    assert steps["resnet50"]["per_step_samples_per_s"]["n"] >= 3
    # the plan's memory against the run: predicted for the built-ins, said why not for a user's workload
    rows = {r["workload"]: r for r in steps["what_fits"]["rows"]}
    assert rows["resnet18"]["predicted_bytes"] > 0 and rows["gpt"]["predicted_bytes"] > 0
    assert all("problem" not in r for r in rows.values())
    own = rows["own_workload"]
    assert own["predicted_bytes"] is not None or own["prediction_problem"].startswith("cannot predict")
    eager = steps["gpt"]["runs"]["eager"]
    assert eager["tokens_per_s"] > 0 and eager["mfu"]["of_measured"] > 0
    compiled = [c for c in steps["faster_step"]["configs"] if c["grid"].get("compile")]
    assert compiled and compiled[0]["compile_s"] > 0
