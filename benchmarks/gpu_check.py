"""The GPU check: one prepared command that runs every CUDA check of the suite on a GPU machine, in two parts of at
most 5 minutes each.

Each step runs in a process of its own with its own time budget (seconds, on a GPU; set from what the steps took on
one NVIDIA H200, docs/gpu/):

Part 1 (``--part 1``):

1. ``environment`` (15): device, driver, torch, CUDA and cuDNN versions; the achievable bf16 / fp16 / tf32 / fp32
   matmul rate, measured once (:func:`ignite_ddl.measure.peak.measured_peak`) and kept in
   ``<out>/runs/matmul_peak.json`` (a later run into the same folder reads it back), beside the datasheet peak.
   Both parts run it: each part's summary names its machine.
2. ``tests`` (120): ``pytest -m gpu`` over the test files that hold GPU tests, in three pytest-xdist workers sharing
   the GPU; the figures the tests measure are collected from ``IGNITE_DDL_GPU_FIGURES``. A failed test fails the
   step.
3. ``overhead`` (75): ours vs a raw PyTorch loop by step pairs inside one process (``benchmarks/overhead.py``, its
   default mode: blocks of steps of each side alternating, the paired ratio with its 95 % interval): ResNet-18 at
   CIFAR size, batch 256, AMP bf16, channels_last; then the built-in GPT (6 layers of 512, 512 tokens, bf16).
4. ``gpu_single`` (70): ``experiments/gpu_single`` cut to fit (AMP none / bf16 / fp16 at batch 512, 3 repeats of
   30 iterations) and its report's verdict.

Part 2 (``--part 2``):

5. ``environment`` (15) again.
6. ``resnet50`` (25): ResNet-50 at 224 px (32 at toy size), AMP bf16, channels_last, one process, the suite's train
   step and step recorder on a batch kept on the GPU (synthetic data, no loader): samples/s beside Lambda's published
   single-H100 figure for ResNet-50 with AMP (about 2,600-2,800 images/s), a range to read against, not a pass/fail.
7. ``what_fits`` (50): the plan's memory prediction against the GPU (``benchmarks/cuda_memory.py``): ResNet-18,
   ResNet-50, the built-in GPT at GPT-2-small shape and the own-workload example, one process, AMP bf16, Adam: the
   traced tensors against ``max_memory_allocated`` of a real run, with the CUDA context and the caching allocator's
   reserve said apart, and whether each fits the device.
8. ``gpt`` (70): the built-in GPT at GPT-2-small shape (12 layers of 768, 1024 tokens, vocabulary 50304, batch 8,
   bf16), eager then ``torch.compile``: tokens/s, compile time and MFU against the measured bf16 matmul rate and the
   datasheet's.
9. ``faster_step`` (125): ``experiments/faster_step`` cut to fit: ResNet-18, AMP bf16, one process, eager vs
   ``torch.compile`` vs ``compile reduce-overhead`` (CUDA graphs), 2 repeats: samples/s with intervals, compile
   time, recompilations, MFU against the measured and the datasheet peak, whether compilation pays back, and the
   report's recommendation.

A step that runs past its budget is stopped (its process group killed) and reported as timed out with what it had
finished; the next step runs. Budgets shrink to what is left of the whole part's (285 s on a GPU), so each part
ends within 5 minutes. Without ``--part`` every step runs (about 10 minutes: one command of the device's longest).
``--steps`` runs some of them, ``--budget NAME=SECONDS`` changes one.

``--cpu`` runs the same steps on the CPU at toy size (tiny models, a few iterations, CUDA hidden from every
process): the figures mean nothing, what it tests is the script itself (tests/test_gpu_check.py does, in CI). Without
``--cpu`` a machine without a CUDA GPU is refused.

It writes ``summary.md`` and ``figures.json`` at the top of the output folder and everything else (each step's log,
the sweeps' folders, the matmul-peak cache) under ``<out>/runs/``.

Usage:
    python benchmarks/gpu_check.py OUT --part 1     # on a CUDA machine; then --part 2 into another folder
    python benchmarks/gpu_check.py OUT --cpu        # toy size on the CPU
    benchmarks/gpu_check OUT --part 1               # with the wheels of benchmarks/gpu_wheels.sh (no network)
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("environment", "tests", "overhead", "gpu_single", "resnet50", "what_fits", "gpt", "faster_step")
# Each part fits one call of 5 minutes on the GPU machine; both name their machine (environment).
PARTS = {
    "1": ("environment", "tests", "overhead", "gpu_single"),
    "2": ("environment", "resnet50", "what_fits", "gpt", "faster_step"),
}
# Seconds on a GPU, from the H200 runs (docs/gpu/): the gpu tests 75 s in 3 workers, a sweep's run 3.5 s (12 s the
# first), a faster_step run 11 s eager and about 30 s compiled, the GPT-2-small eager and compiled runs 54 s, a
# step's own process ends some seconds after its figures are written.
GPU_BUDGET_S = {
    "environment": 15,
    "tests": 120,
    "overhead": 75,
    "gpu_single": 70,
    "resnet50": 25,
    "what_fits": 50,
    "gpt": 70,
    "faster_step": 125,
}
GPU_TOTAL_S = 285  # a part: 5 minutes, less room for starting and ending the steps' processes
# On a CPU the same steps at toy size; the budgets only bound a run on a busy machine.
# (A CPU compile of the toy model took 118-161 s on a 2-core VM that other processes kept 90 % busy.)
CPU_BUDGET_S = {name: 240 for name in STEPS} | {"environment": 60, "gpt": 420, "faster_step": 420}
CPU_TOTAL_S = 1800  # a part, on a busy 2-core machine
STOP_GRACE_S = 3  # between SIGTERM and SIGKILL of a step's process group
# Lambda's PyTorch training benchmark, ResNet-50 with AMP on one H100 SXM5 80GB (images/s): the range read off it.
LAMBDA_RESNET50_H100 = {
    "low": 2600,
    "high": 2800,
    "source": "https://lambdalabs.com/gpu-benchmarks (PyTorch training, ResNet-50, AMP, 1x H100 SXM5)",
}


# -- the driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output folder: summary.md, figures.json, runs/")
    parser.add_argument("--cpu", action="store_true", help="the same steps on the CPU at toy size (tests the script)")
    parser.add_argument("--part", choices=tuple(PARTS), help="one of the two parts of at most 5 minutes each")
    parser.add_argument("--steps", help=f"comma-separated steps (default: the part's, or all of {STEPS})")
    parser.add_argument("--budget", action="append", default=[], metavar="NAME=SECONDS", help="a step's budget")
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)  # a step's own process
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)  # its end, time.time() seconds
    args = parser.parse_args(argv)
    if args.step is not None:
        return run_step(args.step, args.out, args.cpu, args.deadline or math.inf)
    if args.steps is not None:
        steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    else:
        steps = list(PARTS[args.part]) if args.part else list(dict.fromkeys(STEPS))
    unknown = sorted(set(steps) - set(STEPS))
    if unknown or not steps:
        parser.exit(2, f"gpu_check: unknown step(s) {', '.join(unknown) or '(none given)'}: choose from {STEPS}\n")
    budgets = dict(CPU_BUDGET_S if args.cpu else GPU_BUDGET_S)
    for item in args.budget:
        name, _, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if name not in budgets or not seconds > 0:
            parser.exit(2, f"gpu_check: --budget expects NAME=SECONDS with a step name and seconds > 0, got {item!r}\n")
        budgets[name] = seconds
    if not args.cpu:
        import torch

        if not torch.cuda.is_available():
            parser.exit(2, "gpu_check: no CUDA GPU is visible here; --cpu runs the same steps at toy size\n")
    out = args.out
    if out.exists() and not out.is_dir():
        parser.exit(2, f"gpu_check: {out} exists and is not a folder\n")
    if out.is_dir() and any(out.iterdir()) and not (out / "figures.json").is_file():
        parser.exit(2, f"gpu_check: {out} holds files of something else; give an empty or new folder\n")
    (out / "runs" / "steps").mkdir(parents=True, exist_ok=True)
    (out / "runs" / "logs").mkdir(parents=True, exist_ok=True)
    total = CPU_TOTAL_S if args.cpu else GPU_TOTAL_S
    if args.part is None and args.steps is None:
        total *= len(PARTS)  # every step: the parts' time together
    started = time.time()
    results: dict[str, Any] = {}
    for name in steps:
        left = total - (time.time() - started)
        if left < 5:
            results[name] = {"status": "not run", "reason": f"the whole run's {total} s were spent"}
            continue
        budget = min(budgets[name], left)
        print(f"gpu_check: {name} (budget {budget:.0f} s)", flush=True)
        results[name] = run_child(name, out, args.cpu, budget)
        print(f"gpu_check: {name}: {results[name]['status']} in {results[name]['seconds']:.0f} s", flush=True)
    figures = {
        "check": "benchmarks/gpu_check.py",
        "mode": "cpu (toy size)" if args.cpu else "gpu",
        "part": args.part,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_s": time.time() - started,
        "budgets_s": {name: budgets[name] for name in steps},
        "steps": results,
    }
    (out / "figures.json").write_text(json.dumps(figures, indent=1, default=str) + "\n")
    (out / "summary.md").write_text(render(figures))
    print(f"gpu_check: {out / 'summary.md'} and {out / 'figures.json'} written in {figures['wall_s']:.0f} s")
    return 0


def run_child(name: str, out: Path, cpu: bool, budget: float) -> dict[str, Any]:
    """Run step ``name`` in a process group of its own; stop it at ``budget``. Its figures, or why it has none."""
    deadline = time.time() + budget
    argv = [sys.executable, str(Path(__file__).resolve()), str(out), f"--step={name}", f"--deadline={deadline}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if cpu:
        argv.append("--cpu")
        env["CUDA_VISIBLE_DEVICES"] = ""  # every process of the step computes on the CPU, GPU or not
    log = out / "runs" / "logs" / f"{name}.log"
    fragment = out / "runs" / "steps" / f"{name}.json"
    fragment.unlink(missing_ok=True)
    begin = time.time()
    with open(log, "w") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            code = None
            _stop_group(proc)
    record: dict[str, Any] = {"seconds": time.time() - begin, "log": str(log.relative_to(out))}
    figures = _read_json(fragment)
    if figures is not None:
        record["figures"] = figures
    if code is None:
        record |= {"status": "timed out", "reason": f"stopped after its budget of {budget:.0f} s"}
    elif code != 0:
        record |= {"status": "failed", "reason": _last_line(log) or f"exit status {code}"}
    elif figures is None:
        record |= {"status": "failed", "reason": "the step wrote no figures"}
    elif isinstance(figures, dict) and figures.get("problem"):
        record |= {"status": "failed", "reason": figures["problem"]}
    else:
        record["status"] = "ok"
    return record


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the step's whole process group (its sweeps and ranks too), then SIGKILL to what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=STOP_GRACE_S)
            if sig == signal.SIGTERM:
                os.killpg(proc.pid, signal.SIGKILL)  # ranks that outlived their parent
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _last_line(path: Path) -> str | None:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


# -- the steps (each in its own process)


class Step:
    """What a step's process needs: the output folder, the mode, the deadline, and where its figures go. Figures
    are written after every part (:meth:`save`), so a step stopped at its deadline still reports what it did."""

    def __init__(self, name: str, out: Path, cpu: bool, deadline: float):
        self.name, self.out, self.cpu, self.deadline = name, out, cpu, deadline
        self.runs = out / "runs"
        self.figures: dict[str, Any] = {}

    def left(self) -> float:
        return self.deadline - time.time()

    def save(self) -> None:
        path = self.runs / "steps" / f"{self.name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.figures, indent=1, default=str) + "\n")
        tmp.replace(path)

    def run(self, argv: list[str], share: float = 1.0, env: dict[str, str] | None = None) -> tuple[int | None, str]:
        """A command of the step in its own process group, stopped ``STOP_GRACE_S`` before the step's deadline (or
        after ``share`` of the time left); ``(exit status or None when stopped, its output)``."""
        timeout = max(1.0, share * (self.left() - 2 * STOP_GRACE_S))
        print("$", " ".join(argv), flush=True)
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, **(env or {})),
            start_new_session=True,
            cwd=ROOT,
        )
        try:
            output, _ = proc.communicate(timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            output, _ = proc.communicate()
            code = None
        print(output, flush=True)
        return code, output


def run_step(name: str, out: Path, cpu: bool, deadline: float) -> int:
    step = Step(name, out, cpu, deadline)
    STEP_FUNCTIONS[name](step)
    step.save()
    return 0


def _estimate(values: list[float]) -> dict[str, Any]:
    """A figure over repeats: mean, its 95 % interval (Student t), n, standard deviation, min and max."""
    from ignite_ddl.report.stats import mean_interval

    e = mean_interval(values)
    return {
        "mean": e.value,
        "low": e.low,
        "high": e.high,
        "n": e.n,
        "sd": e.sd,
        "min": min(values, default=None),
        "max": max(values, default=None),
    }


def _device() -> Any:
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _peak_for(step: Step, precision: str) -> dict[str, Any]:
    """The measured matmul peak of ``precision`` (from the environment step's cache, measured here if missing)
    and the datasheet's, for :func:`~ignite_ddl.measure.flops.mfu`."""
    import torch

    from ignite_ddl.measure.flops import datasheet_peak
    from ignite_ddl.measure.peak import measured_peak

    device = _device()
    size = None if device.type == "cuda" else 256
    rate, _ = measured_peak(device, precision, step.runs / "matmul_peak.json", size=size, seconds=0.3)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    return {"measured": rate, "datasheet": datasheet_peak(name, precision)}


def _mfu(step: Step, achieved_flops_per_s: float | None, precision: str) -> dict[str, Any] | None:
    from ignite_ddl.measure.flops import format_mfu, mfu

    if achieved_flops_per_s is None:
        return None
    peaks = _peak_for(step, precision)
    record = mfu(achieved_flops_per_s, precision, peaks["measured"], peaks["datasheet"])
    record["text"] = format_mfu(record)
    return record


def step_environment(step: Step) -> None:
    import platform

    import ignite
    import torch

    from ignite_ddl.core.environment import cpu_cores, cpu_name
    from ignite_ddl.measure.flops import datasheet_peak
    from ignite_ddl.measure.peak import measured_peak

    device = _device()
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "ignite": ignite.__version__,
        "cpu": cpu_name(),
        "cpu_cores": cpu_cores(),
        "device": device.type,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env |= {
            "gpu": torch.cuda.get_device_name(device),
            "gpu_memory_bytes": props.total_memory,
            "multiprocessors": props.multi_processor_count,
            "compute_capability": f"{props.major}.{props.minor}",
            "driver": _driver_version(),
        }
    step.figures["environment"] = env
    step.save()
    precisions = ("bf16", "fp16", "tf32", "fp32") if device.type == "cuda" else ("fp32", "bf16")
    peaks = {}
    for precision in precisions:
        if step.left() < 3:
            break
        rate, cached = measured_peak(
            device,
            precision,
            step.runs / "matmul_peak.json",
            size=None if device.type == "cuda" else 256,
            seconds=0.5 if device.type == "cuda" else 0.3,  # each estimate; repeated until two agree within 3 %
        )
        sheet = datasheet_peak(env.get("gpu", ""), precision)
        peaks[precision] = {
            "measured_flops_per_s": rate.flops_per_s if rate else None,
            "matmul_size": rate.size if rate else None,
            "repetitions": rate.repetitions if rate else None,
            "from_cache": cached,
            "datasheet_flops_per_s": sheet.flops_per_s if sheet else None,
            "datasheet_family": sheet.family if sheet else None,
            "measured_over_datasheet": rate.flops_per_s / sheet.flops_per_s if rate and sheet else None,
        }
        step.figures["matmul_peak"] = peaks
        step.save()


def _driver_version() -> str | None:
    """The NVIDIA driver's version: NVML where the package is there, else nvidia-smi (no shell)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML binding or no driver library: ask nvidia-smi
        pass
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


# pytest -v: "tests/x.py::name PASSED [ 10%]"; with pytest-xdist: "[gw0] [ 10%] PASSED tests/x.py::name"
_TEST_LINE = re.compile(r"^(tests/\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")
_XDIST_LINE = re.compile(r"^\[gw\d+\] \[\s*\d+%\] (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (tests/\S+::\S+)")
_SKIP_LINE = re.compile(r"^SKIPPED \[\d+\] (\S+): (.*)$")
_DURATION_LINE = re.compile(r"^(\d+\.\d+)s (call|setup|teardown)\s+(tests/\S+::\S+)")
# The files that hold tests marked gpu (collecting every test module would import what the GPU machine lacks).
GPU_TEST_FILES = ("tests/test_gpu_cuda.py", "tests/test_lab_dp_vs_ddp.py")
GPU_TEST_WORKERS = 3  # pytest-xdist workers sharing the GPU: the tests are small, the time is start-up and CPU


def test_outcomes(output: str) -> dict[str, str]:
    """Each test's outcome, read off pytest's verbose output (with or without xdist)."""
    outcomes: dict[str, str] = {}
    for line in output.splitlines():
        line = line.strip()
        plain, xdist = _TEST_LINE.match(line), _XDIST_LINE.match(line)
        if plain:
            outcomes[plain.group(1)] = plain.group(2).lower()
        elif xdist:
            outcomes[xdist.group(2)] = xdist.group(1).lower()
    return outcomes


def step_tests(step: Step) -> None:
    figures_dir = step.runs / "test_figures"
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-rs", "-p", "no:cacheprovider", "--durations=0"]
    if not step.cpu:
        argv += ["-n", str(GPU_TEST_WORKERS)]
    # a test module whose optional imports the GPU machine lacks (a browser driver, Jupyter) must not stop the rest
    argv.append("--continue-on-collection-errors")
    code, output = step.run([*argv, *GPU_TEST_FILES], env={"IGNITE_DDL_GPU_FIGURES": str(figures_dir)})
    outcomes = test_outcomes(output)
    skipped = [{"where": m.group(1), "reason": m.group(2)} for m in map(_SKIP_LINE.match, output.splitlines()) if m]
    counts = {kind: sum(v == kind for v in outcomes.values()) for kind in ("passed", "failed", "skipped", "error")}
    durations: dict[str, float] = {}
    for match in map(_DURATION_LINE.match, output.splitlines()):
        if match:
            durations[match.group(3)] = durations.get(match.group(3), 0.0) + float(match.group(1))
    measured = {p.stem: _read_json(p) for p in sorted(figures_dir.glob("*.json"))} if figures_dir.is_dir() else {}
    step.figures["tests"] = {
        "exit_status": code,
        "stopped_at_deadline": code is None,
        "workers": 1 if step.cpu else GPU_TEST_WORKERS,
        "counts": counts,
        "outcomes": outcomes,
        "seconds": durations,
        "skip_reasons": skipped,
        "measured": measured,
    }
    bad = [name.split("::", 1)[-1] for name, outcome in outcomes.items() if outcome in ("failed", "error")]
    if bad:
        step.figures["problem"] = f"{len(bad)} test(s) failed: {', '.join(bad)}"[:300]
    elif code is None:
        step.figures["problem"] = "pytest was stopped at the step's budget"
    elif code not in (0, 5) or not outcomes:  # 5: nothing collected
        step.figures["problem"] = f"pytest ended with exit status {code}"


# The built-in GPT of the overhead step on a GPU: large enough that a step is GPU work, small enough to start fast.
OVERHEAD_GPT = "n_layer=6,d_model=512,n_head=8,seq_len=512,vocab=8192"


def overhead_runs(cpu: bool) -> dict[str, list[str]]:
    """benchmarks/overhead.py's arguments per workload of the overhead step: step pairs in one process."""
    if cpu:
        common = ["--device=cpu", "--amp=bf16", "--warmup=2", "--pairs=4", "--block=2"]
        return {
            "resnet18": [*common, "--model=toy", "--batch-size=16", "--channels-last"],
            "gpt": [
                *common,
                "--model=gpt",
                "--gpt=n_layer=1,d_model=32,n_head=4,seq_len=16,vocab=64",
                "--batch-size=8",
            ],
        }
    common = ["--device=cuda", "--amp=bf16", "--warmup=10"]
    return {
        "resnet18": [*common, "--model=resnet18", "--batch-size=256", "--channels-last", "--pairs=30", "--block=8"],
        "gpt": [*common, "--model=gpt", f"--gpt={OVERHEAD_GPT}", "--batch-size=16", "--pairs=30", "--block=5"],
    }


def step_overhead(step: Step) -> None:
    runs = overhead_runs(step.cpu)
    for i, (workload, extra) in enumerate(runs.items()):
        path = step.runs / f"overhead_{workload}.json"
        share = 1.0 / (len(runs) - i)  # each workload its share of what is left
        code, _ = step.run(
            [sys.executable, "benchmarks/overhead.py", "--procs=1", "--mode=pairs", *extra, f"--json={path}"], share
        )
        report = _read_json(path)
        if report is None:
            step.figures[workload] = {"status": "stopped" if code is None else f"failed (exit {code})"}
            step.figures["problem"] = f"{workload}: {step.figures[workload]['status']}"
            step.save()
            continue
        result = report["results"][0]
        value, low, high = result["ratio_paired"]
        step.figures[workload] = {
            "settings": report["settings"],
            "machine": report["machine"],
            "ours_step_s": _estimate(result["ours_s"]),
            "raw_step_s": _estimate(result["raw_s"]),
            "ours_median_step_s": result["ours_median_s"],
            "raw_median_step_s": result["raw_median_s"],
            "ours_over_raw": {"mean_ratio": value, "low": low, "high": high},
            "ours_over_raw_median": result["ratio_median"],
            "pairs": result["pairs"],
            "block": result["block"],
            "foreign_cpu": result["ours"]["foreign_cpu"][0],
        }
        step.save()


def _sweep(step: Step, name: str, spec: dict[str, Any], share: float = 1.0) -> tuple[int | None, Path]:
    """Run ``spec`` as a sweep into ``runs/<name>`` (with its report); ``(exit status or None, folder)``."""
    folder = step.runs / name
    spec_path = step.runs / f"{name}.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    code, output = step.run(
        [sys.executable, "-m", "ignite_ddl", "sweep", str(spec_path), f"--output-dir={folder}"], share
    )
    if code not in (0, 1):  # 1: a run failed (an out-of-memory, say), the sweep went on and reported
        lines = [line for line in output.splitlines() if line.strip()]
        step.figures["problem"] = lines[-1] if lines else f"the sweep ended with exit status {code}"
    return code, folder


def _base_spec(experiment: str) -> dict[str, Any]:
    spec = yaml.safe_load((ROOT / "experiments" / experiment / "spec.yaml").read_text())
    assert isinstance(spec, dict)
    return spec


def _analysis(folder: Path) -> Any:
    """The sweep's analysis (its report's figures) counting contended runs too (each row says how many were), or
    None where it recorded no run. The sweep's own report.md leaves contended runs out of its verdict."""
    from ignite_ddl.report import load

    if not (folder / "results.jsonl").is_file():
        return None
    try:
        return load(folder, include_contended=True)
    except Exception as e:  # a sweep stopped mid-write: say why instead of losing the step's other figures
        print(f"no analysis of {folder}: {type(e).__name__}: {e}")
        return None


def _config_row(config: Any) -> dict[str, Any]:
    t = config.throughput
    return {
        "name": config.name,
        "grid": config.grid,
        "runs": len([r for r in config.runs if r.status == "completed"]),
        "contended_runs": sum(r.contended for r in config.runs),
        "statuses": sorted({r.status for r in config.runs}),
        "samples_per_s": {"mean": t.value, "low": t.low, "high": t.high, "n": t.n, "sd": t.sd},
        "fits": config.fits,
        "out_of_memory": config.out_of_memory,
        "peak_memory_bytes": config.peak_memory.value,
        "memory_kind": config.memory_kind,
        "held_bytes": config.held_bytes,
        "achieved_flops_per_s": config.achieved_flops_per_s,
        "utilisation_attainable": config.utilisation_attainable,
        "utilisation_peak": config.utilisation_peak,
        "compile_s": None if config.compile_s is None else config.compile_s.value,
        "recompilations": config.recompilations,
        "versus": [{k: _plain(v) for k, v in found.items()} for found in config.versus],
    }


def _plain(value: Any) -> Any:
    """An estimate (a dataclass) as a dict, for figures.json; anything else as it is."""
    import dataclasses

    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value


def _verdicts(analysis: Any) -> list[dict[str, Any]]:
    return [
        {
            "workload": v.workload,
            "recommended": v.recommended,
            "recommendation": v.recommendation,
            "reason": v.reason,
            "provisional": v.provisional,
        }
        for v in analysis.verdicts
    ]


def gpu_single_spec(cpu: bool) -> dict[str, Any]:
    """experiments/gpu_single cut to fit: AMP none / bf16 / fp16 at one batch size, 3 repeats of 30 iterations (the
    report judges runs of 20 measured iterations or more: the first H200 run's 17 were too few)."""
    spec = _base_spec("gpu_single")
    spec["name"] = "gpu_single_cut"
    if cpu:
        spec["base"] |= {"model": "toy", "train_size": 128, "val_size": 16, "epochs": 1, "num_workers": 0}
        spec["base"]["warmup_iters"] = 1  # 4-8 iterations a run: leave some measured
        spec["grid"] = {"batch_size": [32], "amp": ["none", "bf16"]}  # fp16 needs a GPU (its GradScaler)
        spec |= {"repeats": 1, "timeout_s": 120}
    else:
        spec["base"] |= {"train_size": 512 * 30, "val_size": 512, "epochs": 1, "num_workers": 0, "warmup_iters": 5}
        spec["grid"] = {"batch_size": [512], "amp": ["none", "bf16", "fp16"]}
        spec |= {"repeats": 3, "timeout_s": 60}
    spec.pop("max_repeats", None)
    return _checked_anyway(spec)


def _checked_anyway(spec: dict[str, Any]) -> dict[str, Any]:
    # The check runs whatever else the machine does: a busy machine flags its runs (contended), it never waits out
    # the step's budget nor stops the sweep.
    # Nor does it predict memory first: the plan's runtime probes cost a run of the toy model per configuration
    # (seen on an H200: they used a whole step's budget); benchmarks/memory_prediction.py checks predictions.
    return spec | {"on_busy": "run", "busy_stop_after": 0, "predict": False}


def step_gpu_single(step: Step) -> None:
    spec = gpu_single_spec(step.cpu)
    code, folder = _sweep(step, "gpu_single", spec)
    analysis = _analysis(folder)
    step.figures |= {
        "spec": spec,
        "sweep_exit_status": code,
        "stopped_at_deadline": code is None,
        "report": str((folder / "report.md").relative_to(step.out)) if (folder / "report.md").is_file() else None,
        "configs": [_config_row(c) for c in analysis.configs] if analysis else [],
        "verdicts": _verdicts(analysis) if analysis else [],
    }


def step_resnet50(step: Step) -> None:
    """ResNet-50 at 224 px (32 px at toy size), AMP bf16, channels_last: the suite's train step and step recorder on
    one batch kept on the device, as synthetic-data benchmarks feed a GPU (no loader in the way)."""
    import torch

    from ignite_ddl.measure.flops import count_flops
    from ignite_ddl.measure.recorder import StepRecorder
    from ignite_ddl.trainer.engines import create_trainer
    from ignite_ddl.trainer.models import build_model

    device = _device()
    size, batch, warmup, iters = (32, 2, 1, 3) if step.cpu else (224, 256, 8, 30)
    torch.manual_seed(0)
    model = build_model("resnet50", 3, size, 1000).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    recorder = StepRecorder(warmup=warmup, device=device)
    trainer = create_trainer(model, optimizer, criterion, device, "bf16", recorder=recorder, channels_last=True)
    recorder.attach(trainer)
    trainer.run([(x, y)] * (warmup + iters), max_epochs=1)
    rows = recorder.measured()
    per_step = [r["samples"] / r["step_s"] for r in rows]
    gathered = recorder.gather()["global"]
    flops = count_flops(model, x[:2], y[:2], criterion)
    samples_per_s = gathered["samples_per_s"]
    step.figures = {
        "settings": {
            "image_px": size,
            "batch": batch,
            "amp": "bf16",
            "channels_last": True,
            "measured_steps": len(rows),
        },
        "samples_per_s": samples_per_s,
        "per_step_samples_per_s": _estimate(per_step),
        "flops_per_sample": flops.total,
        "mfu": _mfu(step, flops.total * samples_per_s, "bf16"),
        "reference": LAMBDA_RESNET50_H100 if not step.cpu else None,
    }


def step_what_fits(step: Step) -> None:
    """The plan's memory prediction against the device (benchmarks/cuda_memory.py), and whether each fits it."""
    import torch

    path = step.runs / "cuda_memory.json"
    argv = [sys.executable, "benchmarks/cuda_memory.py", f"--json={path}"]
    # at toy size on a CPU ResNet-50 adds only time: the script is the same for every workload
    argv += ["--device=cpu", "--toy", "--workloads=resnet18,gpt,own_workload"] if step.cpu else ["--device=cuda"]
    code, _ = step.run(argv)
    found = _read_json(path)
    if found is None:
        step.figures["problem"] = "stopped at its budget" if code is None else f"cuda_memory.py failed (exit {code})"
        return
    capacity = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None
    for row in found["rows"]:
        need = row.get("device_total_bytes")
        row["fits"] = None if need is None or capacity is None else need <= capacity
    step.figures |= found | {"device_bytes": capacity}
    failed = [r["workload"] for r in found["rows"] if r.get("problem")]
    if failed:
        step.figures["problem"] = f"the run of {', '.join(failed)} failed"


# GPT-2 small's shape (vocabulary padded to a multiple of 64, as nanoGPT does), the GPT step's workload.
GPT2_SMALL = {"n_layer": 12, "d_model": 768, "n_head": 12, "seq_len": 1024, "vocab": 50304}
# torchtitan's published MFU for Llama 3.1 8B on H100s (docs/performance.md): a reference, not a pass/fail.
TORCHTITAN_MFU = {"low": 0.33, "high": 0.39, "source": "torchtitan docs/performance.md, Llama 3.1 8B, H100"}


def gpt_config(cpu: bool, compiled: bool, output_dir: Path) -> Any:
    """The GPT step's run: the built-in GPT at GPT-2-small shape (tiny on a CPU), bf16, one process."""
    from ignite_ddl import TrainConfig

    sizes = {"n_layer": 1, "d_model": 32, "n_head": 4, "seq_len": 16, "vocab": 64} if cpu else GPT2_SMALL
    batch, iterations, warmup = (4, 8, 2) if cpu else (8, 40, 5)
    return TrainConfig(
        backend="none",
        workload="gpt",
        workload_args=sizes | {"train_sequences": batch * iterations, "val_sequences": batch},
        batch_size=batch,
        amp="bf16",
        optimizer="adam",
        lr=3e-4,
        epochs=1,
        warmup_iters=warmup,
        compile=compiled,
        progress=False,
        checkpoints=False,
        best_model=False,
        measure_flops=True,
        output_dir=str(output_dir),
    )


def step_gpt(step: Step) -> None:
    """GPT-2-small shape, eager then compiled: tokens/s, compile time and MFU against both peaks."""
    from ignite_ddl import train

    step.figures = {"reference": TORCHTITAN_MFU if not step.cpu else None, "runs": {}}
    # On a CPU the compiled run adds half a minute of compilation and nothing the faster_step step does not test.
    for compiled in (False,) if step.cpu else (False, True):
        mode = "compiled" if compiled else "eager"
        config = gpt_config(step.cpu, compiled, step.runs / f"gpt_{mode}")
        summary = train(config)
        flops = summary.get("flops") or {}
        achieved = flops.get("achieved_flops_per_s")
        steps = summary["steps"]
        step.figures["settings"] = {
            "workload_args": config.workload_args,
            "batch_size": config.batch_size,
            "amp": config.amp,
            "iterations": summary["iterations"],
        }
        step.figures["runs"][mode] = {
            "tokens_per_s": (summary.get("workload") or {}).get("units_per_s"),
            "samples_per_s": steps["global"]["samples_per_s"],
            "step_s_p50": steps["global"]["step_s_p50"],
            "measured_iterations": steps["global"].get("iterations"),
            "flops_per_sequence": (flops.get("per_sample") or {}).get("total"),
            "achieved_flops_per_s": achieved,
            "mfu": _mfu(step, achieved, "bf16"),
            "compile": steps.get("compile"),
            "cuda_max_allocated_bytes": ((summary.get("memory") or {}).get("max") or {}).get(
                "cuda_max_allocated_bytes"
            ),
        }
        step.save()


def faster_step_spec(cpu: bool) -> dict[str, Any]:
    """experiments/faster_step cut to fit: one process, AMP bf16, eager vs compile vs compile reduce-overhead."""
    spec = _base_spec("faster_step")
    spec["name"] = "faster_step_gpu"
    spec["base"] |= {"nproc_per_node": 1, "backend": "none", "amp": "bf16", "warmup_iters": 3, "epochs": 1}
    spec["base"].pop("powersgd_rank", None)
    spec["base"].pop("powersgd_start_iter", None)
    if cpu:
        spec["base"] |= {"model": "toy", "train_size": 32 * 12, "val_size": 32, "batch_size": 32}
        # CUDA graphs (reduce-overhead) are a GPU's: on the CPU the comparison is eager vs compiled
        spec["grid"] = {"compile": [False, True]}
        spec["exclude"] = []
        spec |= {"repeats": 1, "timeout_s": 200}
    else:
        spec["base"] |= {"model": "resnet18", "train_size": 256 * 40, "val_size": 256, "batch_size": 256}
        spec["grid"] = {"compile": [False, True], "compile_mode": ["default", "reduce-overhead"]}
        spec["exclude"] = [{"compile": False, "compile_mode": "reduce-overhead"}]
        # 2 repeats judged: three of each mode (about 190 s on an H200) do not fit the part's 5 minutes
        spec |= {"repeats": 2, "min_repeats": 2, "timeout_s": 120}
    for key in ("max_repeats", "rerun_contended"):
        spec.pop(key, None)
    if cpu:
        spec.pop("min_repeats", None)
    return _checked_anyway(spec)


def step_faster_step(step: Step) -> None:
    spec = faster_step_spec(step.cpu)
    code, folder = _sweep(step, "faster_step", spec)
    analysis = _analysis(folder)
    rows = [_config_row(c) for c in analysis.configs] if analysis else []
    for row in rows:
        achieved = row["achieved_flops_per_s"]
        row["mfu"] = _mfu(step, achieved, "bf16") if achieved else None
        found = next((v for v in row["versus"] if "compile_s" in v), None)
        row["payback_iterations"] = found.get("payback_iterations") if found else None
    step.figures |= {
        "spec": spec,
        "sweep_exit_status": code,
        "stopped_at_deadline": code is None,
        "configs": rows,
        "verdicts": _verdicts(analysis) if analysis else [],
        "iterations_per_run": spec["base"]["train_size"] // spec["base"]["batch_size"],
    }


STEP_FUNCTIONS: dict[str, Callable[[Step], None]] = {
    "environment": step_environment,
    "tests": step_tests,
    "overhead": step_overhead,
    "gpu_single": step_gpu_single,
    "resnet50": step_resnet50,
    "what_fits": step_what_fits,
    "gpt": step_gpt,
    "faster_step": step_faster_step,
}


# -- the summary


def _f(value: Any, fmt: str = ".3g", scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value * scale, fmt)


def _interval(e: dict[str, Any] | None, fmt: str = ".0f", scale: float = 1.0) -> str:
    """``mean (low-high, n=N)``: a figure with its 95 % interval; ``mean (n=1)`` without one."""
    if not e or e.get("mean") is None:
        return "-"
    if e.get("low") is None:
        return f"{_f(e['mean'], fmt, scale)} (n={e.get('n', 1)})"
    return f"{_f(e['mean'], fmt, scale)} ({_f(e['low'], fmt, scale)}-{_f(e['high'], fmt, scale)}, n={e['n']})"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def render(figures: dict[str, Any]) -> str:
    """summary.md: every step's status and figures, each with its spread."""
    steps = figures["steps"]
    env = (steps.get("environment", {}).get("figures") or {}).get("environment", {})
    where = env.get("gpu") or (f"CPU {env['cpu']}" if env.get("cpu") else "the environment step did not run")
    lines = [
        f"# GPU check: {where}",
        "",
        f"{figures['date']}, mode {figures['mode']}, {figures['wall_s']:.0f} s in all. "
        f"torch {env.get('torch', '?')}, CUDA {env.get('cuda') or '-'}, cuDNN {env.get('cudnn') or '-'}, "
        f"driver {env.get('driver') or '-'}, Python {env.get('python', '?')}, ignite {env.get('ignite', '?')}.",
        "",
    ]
    if figures["mode"] != "gpu":
        lines += ["Toy size on the CPU: these figures test the script, they say nothing about a GPU.", ""]
    lines += _table(
        ["step", "status", "seconds", "budget s", "why"],
        [
            [
                name,
                r["status"],
                _f(r.get("seconds"), ".0f"),
                _f(figures["budgets_s"].get(name), ".0f"),
                r.get("reason", ""),
            ]
            for name, r in steps.items()
        ],
    )
    for name, record in steps.items():
        data = record.get("figures")
        if data:
            lines += ["", f"## {name}", "", *SECTIONS[name](data)]
    return "\n".join(lines) + "\n"


def _render_environment(data: dict[str, Any]) -> list[str]:
    env = data.get("environment", {})
    lines = [", ".join(f"{k} {v}" for k, v in env.items() if v is not None), ""]
    peaks = data.get("matmul_peak", {})
    rows = [
        [
            precision,
            _f(p["measured_flops_per_s"], ".4g", 1e-12),
            _f(p["datasheet_flops_per_s"], ".4g", 1e-12),
            _f(p["measured_over_datasheet"], ".0%"),
            str(p["matmul_size"]),
            "cache" if p["from_cache"] else "measured now",
        ]
        for precision, p in peaks.items()
    ]
    return lines + _table(
        ["matmul", "measured TFLOP/s", "datasheet TFLOP/s", "measured / datasheet", "size", "from"], rows
    )


def _render_tests(data: dict[str, Any]) -> list[str]:
    t = data["tests"]
    lines = [
        f"pytest -m gpu: {t['counts']['passed']} passed, {t['counts']['failed']} failed, "
        f"{t['counts']['error']} errors, {t['counts']['skipped']} skipped"
        + (" (stopped at its budget)" if t["stopped_at_deadline"] else ""),
        "",
    ]
    lines += _table(["test", "outcome"], [[k.split("::", 1)[-1], v] for k, v in t["outcomes"].items()])
    reasons = sorted({s["reason"] for s in t["skip_reasons"]})
    if reasons:
        lines += ["", "Skipped because: " + "; ".join(reasons)]
    for name, measured in t["measured"].items():
        lines += ["", f"- {name}: `{json.dumps(measured, default=str)[:400]}`"]
    return lines


def _render_overhead(data: dict[str, Any]) -> list[str]:
    rows = []
    for workload, r in data.items():
        if not isinstance(r, dict):
            continue
        if "ours_step_s" not in r:
            rows.append([workload, r.get("status", "-"), "-", "-", "-", "-"])
            continue
        ratio = r["ours_over_raw"]
        spread = "" if ratio["low"] is None else f" ({ratio['low']:.3f}-{ratio['high']:.3f})"
        settings = r["settings"]
        what = settings["model"] if settings["model"] != "gpt" else f"gpt {settings.get('gpt')}"
        rows.append(
            [
                workload,
                f"{what}, batch {settings['global_batch']}, amp {settings['amp']}"
                + (", channels_last" if settings.get("channels_last") else ""),
                _f(r["ours_median_step_s"], ".2f", 1e3),
                _f(r["raw_median_step_s"], ".2f", 1e3),
                f"{r['pairs']} x {r['block']}",
                f"{_f(ratio['mean_ratio'], '.3f')}{spread}",
            ]
        )
    return [
        "Per-step time of ignite_ddl's trainer (ours) and a hand-written loop (raw), by step pairs: blocks of steps "
        "of each side alternating in one process (the clock read after a device synchronisation at each block's "
        "edges); medians of the blocks' ms per step, and ours/raw as the geometric mean of the pairs with its 95 % "
        "interval. Goal: 1.02 or less, the interval's upper end 1.04 or less.",
        "",
        *_table(
            ["workload", "settings", "ours ms/step", "raw ms/step", "pairs x steps", "ours/raw (95 % interval)"], rows
        ),
    ]


def _config_rows(
    configs: list[dict[str, Any]], columns: list[tuple[str, Callable[[dict[str, Any]], str]]]
) -> list[str]:
    return _table([c[0] for c in columns], [[fn(c) for _, fn in columns] for c in configs])


def _grid(c: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in c["grid"].items())


def _render_sweep_verdicts(data: dict[str, Any]) -> list[str]:
    contended = sum(c.get("contended_runs", 0) for c in data.get("configs", []))
    lines = []
    if contended:
        lines += [
            "",
            f"{contended} run(s) were contended (other processes used the machine meanwhile): they are counted in "
            "these figures and this verdict, and left out of the sweep's own report.md.",
        ]
    for v in data.get("verdicts", []):
        lines += [
            "",
            f"Verdict ({v['workload']}): {v['reason']}",
            f"Recommended: {v['recommended'] or '-'}. {v['recommendation']}",
        ]
    if data.get("stopped_at_deadline"):
        lines += ["", "The sweep was stopped at its budget: the figures are those of the runs it finished."]
    return lines


def _render_gpu_single(data: dict[str, Any]) -> list[str]:
    columns = [
        ("config", lambda c: c["name"]),
        ("grid", _grid),
        ("runs", lambda c: str(c["runs"])),
        ("contended", lambda c: str(c.get("contended_runs", 0))),
        ("samples/s (95 % interval)", lambda c: _interval(c["samples_per_s"])),
        ("% of matmul rate", lambda c: _f(c["utilisation_attainable"], ".0%")),
        ("% of datasheet", lambda c: _f(c["utilisation_peak"], ".1%")),
    ]
    return [*_config_rows(data["configs"], columns), *_render_sweep_verdicts(data)]


def _render_resnet50(data: dict[str, Any]) -> list[str]:
    s = data["settings"]
    lines = [
        f"ResNet-50 at {s['image_px']} px, batch {s['batch']}, AMP bf16, channels_last, {s['measured_steps']} measured "
        f"steps: {data['samples_per_s']:.0f} samples/s (per-step {_interval(data['per_step_samples_per_s'])}).",
    ]
    if data.get("mfu"):
        lines += ["", f"MFU: {data['mfu']['text']}."]
    ref = data.get("reference")
    if ref:
        lines += [
            "",
            f"Published reference, read as a range and not a pass/fail: {ref['low']:,}-{ref['high']:,} images/s "
            f"({ref['source']}).",
        ]
    return lines


def _render_what_fits(data: dict[str, Any]) -> list[str]:
    mib = 1 / 2**20
    rows = [
        [
            r["workload"],
            str(r["batch_size"]),
            _f(r["predicted_bytes"], ".1f", mib) if r["predicted_bytes"] is not None else r["prediction_problem"],
            _f(r.get("allocated_bytes"), ".1f", mib),
            _f(r.get("error"), "+.1%"),
            _f(r.get("reserved_bytes"), ".1f", mib),
            _f(r.get("reserve_bytes"), ".1f", mib),
            _f(r.get("device_total_bytes"), ".1f", mib),
            "-" if r.get("fits") is None else ("yes" if r["fits"] else "no"),
        ]
        for r in data.get("rows", [])
    ]
    context = data.get("context_bytes")
    return [
        "The plan's prediction of a rank's tensors (the step traced on fake tensors: parameters, gradients, optimizer "
        "state, activations) against `max_memory_allocated` of a real run after warm-up, one process, AMP bf16, "
        f"Adam; the caching allocator's reserve (reserved - allocated at the peak) and the CUDA context "
        f"({_f(context, '.0f', mib)} MiB here) said apart: a rank needs about predicted + context + reserve. "
        f"Goal: within +-{data.get('goal', 0.1):.0%} of allocated; {data.get('within_goal', 0)} of "
        f"{data.get('compared', 0)} were.",
        "",
        *_table(
            [
                "workload",
                "batch",
                "predicted MiB",
                "allocated peak MiB",
                "error",
                "reserved peak MiB",
                "reserve MiB",
                "device total MiB",
                "fits",
            ],
            rows,
        ),
    ]


def _render_gpt(data: dict[str, Any]) -> list[str]:
    s = data.get("settings", {})
    rows = []
    for mode, r in data.get("runs", {}).items():
        compile_s = (r.get("compile") or {}).get("compile_s")
        rows.append(
            [
                mode,
                _f(r["tokens_per_s"], ".0f"),
                _f(r["step_s_p50"], ".2f", 1e3),
                _f(compile_s, ".1f"),
                r["mfu"]["text"] if r.get("mfu") else "-",
                _f(r.get("cuda_max_allocated_bytes"), ".0f", 1 / 2**20),
            ]
        )
    lines = [
        f"The built-in GPT, {s.get('workload_args')}, batch {s.get('batch_size')} sequences, AMP {s.get('amp')}, Adam, "
        f"one process, {s.get('iterations')} iterations a run; FLOPs by the workload's formula (6N + 12LTd).",
        "",
        *_table(["mode", "tokens/s", "step p50 ms", "compile s", "MFU", "CUDA peak allocated MiB"], rows),
    ]
    ref = data.get("reference")
    if ref:
        lines += ["", f"For scale, not a pass/fail: {ref['low']:.0%}-{ref['high']:.0%} MFU ({ref['source']})."]
    return lines


def _render_faster_step(data: dict[str, Any]) -> list[str]:
    columns = [
        ("config", lambda c: c["name"]),
        ("grid", _grid),
        ("samples/s (95 % interval)", lambda c: _interval(c["samples_per_s"])),
        ("compile s", lambda c: _f(c["compile_s"], ".1f")),
        ("recompiles", lambda c: str(c["recompilations"])),
        ("pays back after", lambda c: "-" if c["compile_s"] is None else _payback(c["payback_iterations"])),
        ("MFU", lambda c: c["mfu"]["text"] if c.get("mfu") else "-"),
    ]
    return [
        f"Each run trains {data['iterations_per_run']} iterations.",
        "",
        *_config_rows(data["configs"], columns),
        *_render_sweep_verdicts(data),
    ]


def _payback(iterations: float | None) -> str:
    return "never" if iterations is None else f"{iterations:.0f} iterations"


SECTIONS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "environment": _render_environment,
    "tests": _render_tests,
    "overhead": _render_overhead,
    "gpu_single": _render_gpu_single,
    "resnet50": _render_resnet50,
    "what_fits": _render_what_fits,
    "gpt": _render_gpt,
    "faster_step": _render_faster_step,
}


if __name__ == "__main__":
    sys.exit(main())
