"""Where a sweep's wall time goes, with runs started from a fresh interpreter vs the preloaded fork server.

Runs the same small sweep (the quickstart's configurations, one repeat each by default) with ``start: fresh`` and
``start: preloaded``, alternating R rounds so that drifts of the machine hit both sides alike, and prints per side
the median over rounds of: the share of the sweep's wall time inside measured windows, and the per-run seconds of
start-up and writing, warm-up, evaluation and measurement (from the report's analysis). It also times a bare
``import`` of what a run needs in a fresh interpreter, the cost the fork server removes.

Usage: python benchmarks/sweep_startup.py [--rounds 3] [--repeats 1] [--json out.json]
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
from ignite_ddl.sweep.runner import sweep
from ignite_ddl.sweep.spec import load_spec, parse_spec

SPEC = Path(__file__).parents[1] / "experiments" / "quickstart" / "spec.yaml"


def import_seconds() -> float:
    """Wall time of a fresh interpreter importing what a run imports."""
    code = "import " + ", ".join(PRELOAD)
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - began


def one_sweep(start: str, repeats: int, out: Path) -> dict[str, Any]:
    spec = load_spec(SPEC).to_dict() | {"start": start, "repeats": repeats, "rerun_contended": 0}
    began = time.perf_counter()
    sweep(parse_spec(spec), output_dir=out, progress=lambda line: None)
    wall = time.perf_counter() - began
    analysis = load(out)
    runs = sum(len(c.runs) for c in analysis.configs)
    breakdown = {k: v / runs for k, v in analysis.time_breakdown().items()}
    contended = sum(r.contended for c in analysis.configs for r in c.runs)
    return {
        "wall_s": wall,
        "measured_share": analysis.measured_s / wall,
        "per_run_s": breakdown,
        "contended": contended,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1, help="repeats per configuration in each sweep")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    imports = [import_seconds() for _ in range(3)]
    print(f"fresh interpreter importing {', '.join(PRELOAD)}: median {statistics.median(imports):.2f} s")
    results: dict[str, list[dict[str, Any]]] = {"fresh": [], "preloaded": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for start in ("fresh", "preloaded") if round_ % 2 == 0 else ("preloaded", "fresh"):
                result = one_sweep(start, args.repeats, Path(tmp) / f"{start}{round_}")
                results[start].append(result)
                print(
                    f"round {round_ + 1} {start:9s}: {result['wall_s']:.1f} s, "
                    f"{100 * result['measured_share']:.0f} % measured, {result['contended']} contended runs"
                )

    summary = {}
    print(f"\nmedian over {args.rounds} rounds, per run (s):")
    print(f"{'start':10s} {'measured %':>10s} " + " ".join(f"{k:>28s}" for k in results["fresh"][0]["per_run_s"]))
    for start, rounds in results.items():
        share = statistics.median(r["measured_share"] for r in rounds)
        parts = {k: statistics.median(r["per_run_s"][k] for r in rounds) for k in rounds[0]["per_run_s"]}
        summary[start] = {"measured_share": share, "per_run_s": parts}
        print(f"{start:10s} {100 * share:10.0f} " + " ".join(f"{v:28.2f}" for v in parts.values()))
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
