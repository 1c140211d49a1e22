"""Where a sweep's wall time goes, with runs started from a fresh interpreter vs the preloaded fork server.

Runs the quickstart as a user does (``python -m ignite_ddl sweep experiments/quickstart/spec.yaml``, its report
included) with ``--start fresh`` and ``--start preloaded``, alternating R rounds so that drifts of the machine hit
both sides alike, and prints per side the median over rounds of: the share of the command's wall time inside
measured windows; the sweep's own seconds (imports, the plan's probes, the report: the command's wall time less its
runs'); and per run the seconds of start-up and writing, warm-up, evaluation and measurement (from the report's
analysis). It also times a bare ``import`` of what a run needs in a fresh interpreter, the cost the fork server
removes.

Usage: python benchmarks/sweep_startup.py [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)

from ignite_ddl.core.environment import cpu_cores, cpu_name, versions
from ignite_ddl.report import load
from ignite_ddl.sweep.local import PRELOAD

SPEC = Path(__file__).parents[1] / "experiments" / "quickstart" / "spec.yaml"


def import_seconds() -> float:
    """Wall time of a fresh interpreter importing what a run imports."""
    code = "import " + ", ".join(PRELOAD)
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - began


def one_sweep(start: str, out: Path) -> dict[str, Any]:
    """The quickstart swept by the command line, runs started ``start``, into ``out``."""
    cmd = [sys.executable, "-m", "ignite_ddl", "sweep", str(SPEC), "--output-dir", str(out), "--start", start]
    began = time.perf_counter()
    subprocess.run([*cmd, "--rerun-contended", "0", "--on-busy", "run"], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    analysis = load(out)
    runs = [r for c in analysis.configs for r in c.runs]
    breakdown = {k: v / len(runs) for k, v in analysis.time_breakdown().items()}
    return {
        "wall_s": wall,
        "measured_share": analysis.measured_s / wall,
        "runs": len(runs),
        "sweep_own_s": wall - sum(float(r.elapsed_s or 0.0) for r in runs),
        "per_run_s": breakdown,
        "contended": sum(r.contended for r in runs),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    imports = [import_seconds() for _ in range(3)]
    print(f"fresh interpreter importing {', '.join(PRELOAD)}: median {statistics.median(imports):.2f} s")
    results: dict[str, list[dict[str, Any]]] = {"fresh": [], "preloaded": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for start in ("fresh", "preloaded") if round_ % 2 == 0 else ("preloaded", "fresh"):
                result = one_sweep(start, Path(tmp) / f"{start}{round_}")
                results[start].append(result)
                print(
                    f"round {round_ + 1} {start:9s}: {result['wall_s']:.1f} s, {result['runs']} runs, "
                    f"{100 * result['measured_share']:.0f} % measured, the sweep's own {result['sweep_own_s']:.1f} s, "
                    f"{result['contended']} contended runs"
                )

    summary = {}
    print(f"\nmedian over {args.rounds} rounds, per run (s):")
    heads = ["measured %", "sweep's own s", *results["fresh"][0]["per_run_s"]]
    print(f"{'start':10s} " + " ".join(f"{k:>28s}" for k in heads))
    for start, rounds in results.items():
        share = statistics.median(r["measured_share"] for r in rounds)
        own = statistics.median(r["sweep_own_s"] for r in rounds)
        parts = {k: statistics.median(r["per_run_s"][k] for r in rounds) for k in rounds[0]["per_run_s"]}
        summary[start] = {"measured_share": share, "sweep_own_s": own, "per_run_s": parts}
        print(f"{start:10s} " + " ".join(f"{v:28.2f}" for v in (100 * share, own, *parts.values())))
    report = {
        "benchmark": "sweep_startup",
        "machine": {"cpu": cpu_name(), "cores": cpu_cores(), **versions()},
        "import_s": imports,
        "rounds": results,
        "median": summary,
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
