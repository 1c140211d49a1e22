"""Time to a verdict: the quickstart with adaptive repeats against fixed repeats, both checked against a long
reference, then on a busy machine.

Runs ``experiments/quickstart/spec.yaml`` (its four configurations, runs interleaved) as

1. ``repeats: auto`` (the spec as shipped: 3 rounds, more only for the configurations still in the race),
2. ``repeats: 5`` (the fixed count the quickstart used before), and
3. ``repeats: 15``, the reference,

one after the other on this machine, and prints each sweep's wall time and verdict. A verdict **agrees** with the
reference when it names the same best, or names no best while the reference names none either (tied or
equivalent); naming a best the reference does not name, or another one, is a **disagreement** (a wrong answer);
naming none where the reference names one is **undecided** (no answer, but not a wrong one). Then, unless
``--no-busy``, the adaptive sweep again with two CPU-burning processes beside it: its wall time and the last line
it printed.

The goal the suite sets itself: adaptive repeats take at least 40 % less wall time than 5 fixed repeats, with no
disagreement.

Usage: python benchmarks/time_to_verdict.py [--reference 15] [--no-busy] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)

from ignite_ddl.core.environment import cpu_cores, cpu_name, versions
from ignite_ddl.report import load

SPEC = Path(__file__).parents[1] / "experiments" / "quickstart" / "spec.yaml"


def run_sweep(out: Path, *flags: str) -> dict[str, Any]:
    """``ignite-ddl sweep`` of the quickstart spec into ``out`` with ``flags``: wall time, exit status, last line,
    and the verdict of its report."""
    cmd = [sys.executable, "-m", "ignite_ddl", "sweep", str(SPEC), "--output-dir", str(out), *flags]
    began = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - began
    lines = (done.stdout + done.stderr).strip().splitlines()
    result: dict[str, Any] = {"wall_s": round(wall, 1), "exit": done.returncode}
    result["last_line"] = lines[-1] if lines else ""
    if (out / "results.jsonl").exists():
        analysis = load(out)
        verdict = analysis.verdicts[0] if analysis.verdicts else None
        result.update(
            runs=sum(len(c.runs) for c in analysis.configs),
            best=verdict.best if verdict else None,
            tied=verdict.tied if verdict else [],
            equivalent=bool(verdict and verdict.equivalent),
        )
    return result


def agreement(sweep: dict[str, Any], reference: dict[str, Any]) -> str:
    """``agrees``, ``disagrees`` or ``undecided`` (see the module docstring)."""
    if sweep.get("best") == reference.get("best"):
        return "agrees"
    if sweep.get("best") is None:
        return "undecided"
    return "disagrees"


def _burners(count: int) -> list[subprocess.Popen]:
    code = "while True: pass\n"
    return [subprocess.Popen([sys.executable, "-c", code], start_new_session=True) for _ in range(count)]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=int, default=15, help="fixed repeats of the reference sweep")
    parser.add_argument("--no-busy", action="store_true", help="skip the sweep beside two CPU burners")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="time-to-verdict-"))
    figures: dict[str, Any] = {"machine": f"{cpu_name()}, {cpu_cores()} cores", "versions": versions()}
    figures["auto"] = run_sweep(root / "auto")
    figures["fixed5"] = run_sweep(root / "fixed5", "--repeats", "5")
    figures["reference"] = run_sweep(root / "reference", "--repeats", str(args.reference))
    for side in ("auto", "fixed5"):
        figures[side]["agreement"] = agreement(figures[side], figures["reference"])
    figures["time_saved"] = round(1 - figures["auto"]["wall_s"] / figures["fixed5"]["wall_s"], 3)
    if not args.no_busy:
        burning = _burners(2)
        try:
            figures["busy"] = run_sweep(root / "busy")
        finally:
            for burner in burning:
                os.killpg(burner.pid, signal.SIGKILL)
                burner.wait()
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()
