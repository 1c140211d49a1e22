"""The GPU check: one prepared command that runs every CUDA check of the suite on a GPU machine within 5 minutes.

It runs, in this order, each step in a process of its own with its own time budget (seconds, on a GPU):

1. ``environment`` (15): device, driver, torch, CUDA and cuDNN versions; the achievable bf16 / fp16 / tf32 / fp32
   matmul rate, measured once (:func:`ignite_ddl.measure.flops.measured_peak`) and kept in
   ``<out>/runs/matmul_peak.json`` (a later run into the same folder reads it back), beside the datasheet peak.
2. ``tests`` (100): ``pytest -m gpu`` (``tests/test_gpu_cuda.py`` and every other test marked ``gpu``), the figures
   the tests measure collected from ``IGNITE_DDL_GPU_FIGURES``.
3. ``overhead`` (60): ours vs a raw PyTorch loop per step on the GPU (``benchmarks/overhead.py --device cuda``):
   ResNet-18 at CIFAR size, batch 256, AMP bf16, each run in a fresh process, 5 runs a side alternating; then the
   same with ``channels_last``, alternating within one process (a fresh CUDA process takes 15-25 s to start).
4. ``gpu_single`` (30): ``experiments/gpu_single`` cut to fit (AMP none / bf16 / fp16 x batch 256 / 512, 3 repeats,
   one short epoch) and its report's verdict.
5. ``resnet50`` (15): ResNet-50 at 224 px (32 at toy size), AMP bf16, channels_last, one process, the suite's train
   step and step recorder on a batch kept on the GPU (synthetic data, no loader): samples/s beside Lambda's published
   single-H100 figure for ResNet-50 with AMP (about 2,600-2,800 images/s), a range to read against, not a pass/fail.
6. ``what_fits`` (20): ``experiments/ddp_vs_fsdp`` on the GPU (wide_mlp, Adam: the memory is the model's):
   CUDA peak allocated per rank for DDP (1 process) and FSDP (2 gloo ranks sharing the GPU), accumulation 1 and 4,
   beside the bytes held for parameters, gradients and optimizer state and what the fsdp lab predicts for FSDP
   (DDP's held bytes / N).
7. ``faster_step`` (45): ``experiments/faster_step`` cut to fit: ResNet-18, AMP bf16, one process, eager vs
   ``torch.compile`` vs ``compile reduce-overhead`` (CUDA graphs), 2 repeats: samples/s with intervals, compile
   time, recompilations, MFU against the measured and the datasheet peak, whether compilation pays back, and the
   report's recommendation.

A step that runs past its budget is stopped (its process group killed) and reported as timed out with what it had
finished; the next step runs. Budgets shrink to what is left of the whole run's (285 s on a GPU), so the command
ends within 5 minutes. ``--steps`` runs some of them, ``--budget NAME=SECONDS`` changes one.

``--cpu`` runs the same steps on the CPU at toy size (tiny models, a few iterations, CUDA hidden from every
process): the figures mean nothing, what it tests is the script itself (tests/test_gpu_check.py does, in CI). Without
``--cpu`` a machine without a CUDA GPU is refused.

It writes ``summary.md`` and ``figures.json`` at the top of the output folder and everything else (each step's log,
the sweeps' folders, the matmul-peak cache) under ``<out>/runs/``.

Usage:
    python benchmarks/gpu_check.py OUT              # on a CUDA machine
    python benchmarks/gpu_check.py OUT --cpu        # toy size on the CPU
    benchmarks/gpu_check OUT                        # with the wheels of benchmarks/gpu_wheels.sh (no network)
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
STEPS = ("environment", "tests", "overhead", "gpu_single", "resnet50", "what_fits", "faster_step")
GPU_BUDGET_S = {
    "environment": 15,
    "tests": 100,
    "overhead": 60,
    "gpu_single": 30,
    "resnet50": 15,
    "what_fits": 20,
    "faster_step": 45,
}
GPU_TOTAL_S = 285  # 5 minutes, less room for starting and ending the steps' processes
# On a CPU the same steps at toy size; the budgets only bound a run on a busy machine.
# (A CPU compile of the toy model took 118-161 s on a 2-core VM that other processes kept 90 % busy.)
CPU_BUDGET_S = {name: 240 for name in STEPS} | {"environment": 60, "faster_step": 420}
CPU_TOTAL_S = 1800
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
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated steps (default all: {STEPS})")
    parser.add_argument("--budget", action="append", default=[], metavar="NAME=SECONDS", help="a step's budget")
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)  # a step's own process
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)  # its end, time.time() seconds
    args = parser.parse_args(argv)
    if args.step is not None:
        return run_step(args.step, args.out, args.cpu, args.deadline or math.inf)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
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

    from ignite_ddl.measure.flops import datasheet_peak, measured_peak

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
    from ignite_ddl.measure.flops import datasheet_peak, measured_peak

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
            seconds=1.0 if device.type == "cuda" else 0.3,
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


_TEST_LINE = re.compile(r"^(tests/\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")
_SKIP_LINE = re.compile(r"^SKIPPED \[\d+\] (\S+): (.*)$")


def step_tests(step: Step) -> None:
    figures_dir = step.runs / "test_figures"
    targets = ["tests/test_gpu_cuda.py"] if step.cpu else ["tests"]  # toy size: the GPU tests' file alone
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist"]
    # a test module whose optional imports the GPU machine lacks (a browser driver, Jupyter) must not stop the rest
    argv.append("--continue-on-collection-errors")
    code, output = step.run([*argv, *targets], env={"IGNITE_DDL_GPU_FIGURES": str(figures_dir)})
    outcomes: dict[str, str] = {}
    for line in output.splitlines():
        match = _TEST_LINE.match(line.strip())
        if match:
            outcomes[match.group(1)] = match.group(2).lower()
    skipped = [{"where": m.group(1), "reason": m.group(2)} for m in map(_SKIP_LINE.match, output.splitlines()) if m]
    counts = {kind: sum(v == kind for v in outcomes.values()) for kind in ("passed", "failed", "skipped", "error")}
    measured = {p.stem: _read_json(p) for p in sorted(figures_dir.glob("*.json"))} if figures_dir.is_dir() else {}
    step.figures["tests"] = {
        "exit_status": code,
        "stopped_at_deadline": code is None,
        "counts": counts,
        "outcomes": outcomes,
        "skip_reasons": skipped,
        "measured": measured,
    }


def step_overhead(step: Step) -> None:
    common = ["--procs=1", "--amp=bf16"]
    if step.cpu:
        common += ["--device=cpu", "--model=toy", "--batch-size=32", "--repeats=1", "--warmup=1", "--iters=3"]
    else:
        common += ["--device=cuda", "--model=resnet18", "--batch-size=256", "--repeats=5", "--warmup=10", "--iters=40"]
    from ignite_ddl.report.stats import ratio_interval

    # A fresh CUDA process costs 15-25 s to start (seen on an H200), so ten of them take most of the check's five
    # minutes: the contiguous layout alternates fresh processes, channels_last alternates within one process.
    layouts = (("contiguous", ["--fresh"], 0.75), ("channels_last", ["--channels-last"], 1.0))
    for layout, extra, share in layouts:
        path = step.runs / f"overhead_{layout}.json"
        code, _ = step.run([sys.executable, "benchmarks/overhead.py", *common, *extra, f"--json={path}"], share=share)
        report = _read_json(path)
        if report is None:
            step.figures[layout] = {"status": "stopped" if code is None else f"failed (exit {code})"}
            step.save()
            continue
        result = report["results"][0]
        ours, raw = result["ours"]["runs_s"], result["raw"]["runs_s"]
        ratio = ratio_interval(ours, raw)
        step.figures[layout] = {
            "settings": report["settings"],
            "machine": report["machine"],
            "ours_step_s": _estimate(ours),
            "raw_step_s": _estimate(raw),
            "ours_over_raw": {"mean_ratio": ratio.value, "low": ratio.low, "high": ratio.high},
            "ours_over_raw_median": result["ratio_median"],
            "foreign_cpu": {side: result[side]["foreign_cpu"] for side in ("ours", "raw")},
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
    """experiments/gpu_single cut to fit: AMP none / bf16 / fp16 x two batch sizes, 3 repeats, one short epoch."""
    spec = _base_spec("gpu_single")
    spec["name"] = "gpu_single_cut"
    if cpu:
        spec["base"] |= {"model": "toy", "train_size": 128, "val_size": 16, "epochs": 1, "num_workers": 0}
        spec["base"]["warmup_iters"] = 1  # 4-8 iterations a run: leave some measured
        spec["grid"] = {"batch_size": [16, 32], "amp": ["none", "bf16"]}  # fp16 needs a GPU (its GradScaler)
        spec |= {"repeats": 1, "timeout_s": 120}
    else:
        spec["base"] |= {"train_size": 512 * 10, "val_size": 512, "epochs": 1, "num_workers": 0, "warmup_iters": 3}
        spec["grid"] = {"batch_size": [256, 512], "amp": ["none", "bf16", "fp16"]}
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


def what_fits_spec(cpu: bool, gpus: int = 2) -> dict[str, Any]:
    """experiments/ddp_vs_fsdp on one GPU: DDP on 1 process, FSDP on 2 gloo ranks sharing the GPU (nccl refuses
    two ranks on one device), accumulation 1 and 4, one repeat (memory figures barely vary)."""
    spec = _base_spec("ddp_vs_fsdp")
    spec["name"] = "what_fits_gpu"
    spec["base"] |= {"backend": "gloo", "epochs": 1, "warmup_iters": 2}
    if cpu:
        spec["base"] |= {"model": "toy", "train_size": 128, "val_size": 32, "batch_size": 32}
    spec["grid"] = {"strategy": ["ddp", "fsdp"], "accumulate": [1, 4], "nproc_per_node": [1, 2]}
    spec["exclude"] = [{"strategy": "ddp", "nproc_per_node": 2}, {"strategy": "fsdp", "nproc_per_node": 1}]
    if not cpu and gpus < 2:
        # Ignite pins process r of a node to cuda:r, so two ranks cannot share one GPU (the launcher refuses it):
        # on one GPU only DDP's rows run; FSDP's held bytes on one GPU come from the world-size-1 nccl test.
        spec["grid"] = {"strategy": ["ddp"], "accumulate": [1, 4], "nproc_per_node": [1]}
        spec["exclude"] = []
    spec |= {"repeats": 1, "timeout_s": 120}
    for key in ("min_repeats", "max_repeats"):
        spec.pop(key, None)
    return _checked_anyway(spec)


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()


def step_what_fits(step: Step) -> None:
    spec = what_fits_spec(step.cpu, 0 if step.cpu else _cuda_devices())
    code, folder = _sweep(step, "what_fits", spec)
    analysis = _analysis(folder)
    rows = [_config_row(c) for c in analysis.configs] if analysis else []
    allocated = _cuda_allocated_peaks(folder)
    ddp_held = next((r["held_bytes"] for r in rows if r["grid"].get("strategy") == "ddp" and r["held_bytes"]), None)
    for row, config in zip(rows, analysis.configs if analysis else []):
        row["cuda_max_allocated_bytes"] = _estimate(allocated[config.index]) if allocated.get(config.index) else None
    for row in rows:
        world = 2 if row["grid"].get("strategy") == "fsdp" else 1
        # the fsdp lab's prediction: each of N ranks holds about 1/N of DDP's parameters, gradients, optimizer state
        row["predicted_held_bytes"] = ddp_held / world if ddp_held else None
        row["ranks"] = world
    step.figures |= {
        "spec": spec,
        "sweep_exit_status": code,
        "stopped_at_deadline": code is None,
        "configs": rows,
        "prediction": "the fsdp lab's: FSDP over N ranks holds DDP's held bytes / N per rank",
    }


def _cuda_allocated_peaks(folder: Path) -> dict[int, list[float]]:
    """Per configuration (its index), each completed run's CUDA peak allocated bytes of its largest rank (the
    report's peak is the allocator's reserved bytes, which include its cache)."""
    from ignite_ddl.core.results import read_results

    peaks: dict[int, list[float]] = {}
    path = folder / "results.jsonl"
    for record in read_results(path) if path.is_file() else []:
        memory = (record.get("summary") or {}).get("memory") or {}
        value = (memory.get("max") or {}).get("cuda_max_allocated_bytes")
        if value is not None:
            peaks.setdefault(record["index"], []).append(float(value))
    return peaks


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
        spec |= {"repeats": 2, "timeout_s": 120}
    for key in ("min_repeats", "max_repeats", "rerun_contended"):
        spec.pop(key, None)
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
    where = env.get("gpu") or f"CPU {env.get('cpu', '?')}"
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
    for layout, r in data.items():
        if "ours_step_s" not in r:
            rows.append([layout, r.get("status", "-"), "-", "-", "-"])
            continue
        ratio = r["ours_over_raw"]
        spread = "" if ratio["low"] is None else f" ({ratio['low']:.3f}-{ratio['high']:.3f})"
        rows.append(
            [
                layout,
                f"{r['settings']['model']}, batch {r['settings']['global_batch']}, amp {r['settings']['amp']}",
                _interval(r["ours_step_s"], ".2f", 1e3),
                _interval(r["raw_step_s"], ".2f", 1e3),
                f"{_f(ratio['mean_ratio'], '.3f')}{spread}",
            ]
        )
    return [
        "Per-step time of ignite_ddl's trainer (ours) and a hand-written loop (raw), alternating (contiguous: each "
        "run in a fresh process; channels_last: within one process); mean with its 95 % interval over the runs, "
        "ms per step.",
        "",
        *_table(["layout", "workload", "ours ms/step", "raw ms/step", "ours/raw (95 % interval)"], rows),
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
    columns = [
        ("config", lambda c: c["name"]),
        ("grid", _grid),
        ("ranks", lambda c: str(c["ranks"])),
        ("peak per rank MiB", lambda c: _f(c["peak_memory_bytes"], ".1f", 1 / 2**20)),
        ("what", lambda c: c["memory_kind"] or "-"),
        ("CUDA peak allocated MiB", lambda c: _interval(c.get("cuda_max_allocated_bytes"), ".1f", 1 / 2**20)),
        ("held MiB", lambda c: _f(c["held_bytes"], ".1f", 1 / 2**20)),
        ("predicted held MiB", lambda c: _f(c["predicted_held_bytes"], ".1f", 1 / 2**20)),
        ("fits", lambda c: "yes" if c["fits"] else ("out of memory" if c["out_of_memory"] else "no")),
    ]
    return [
        "Peak per rank: the CUDA allocator's reserved peak on a GPU (the resident set on a CPU) and its allocated "
        "peak (the tensors alone; '-' on a CPU); held: parameters, gradients and optimizer state between steps. "
        f"Prediction: {data['prediction']}.",
        "",
        *_config_rows(data["configs"], columns),
    ]


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
    "faster_step": _render_faster_step,
}


if __name__ == "__main__":
    sys.exit(main())
