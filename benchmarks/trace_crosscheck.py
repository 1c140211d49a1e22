"""Our gradient communication timing against the ``torch.profiler`` trace of the same run, and what HTA reads.

One real profiled training run (``ignite_ddl.train`` with ``--profiler torch`` and small DDP buckets, so that
several all-reduces per step overlap backward) writes a Chrome trace per rank; at the end of the run each rank puts
the trace's communication beside ours on the traced iterations (``summary["profiler"]["ranks"][r]["trace_comm"]``,
:mod:`ignite_ddl.measure.traces`). This prints both, their ratios per rank and per iteration, and, where Holistic
Trace Analysis is installed (``pip install 'ignite-ddl[hta]'``), exactly what HTA reads from the same traces.

Usage:
    python benchmarks/trace_crosscheck.py                      # about 15 s on 2 cores
    python benchmarks/trace_crosscheck.py --bucket-cap-mb 25 --json trace_crosscheck.json
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
from bench_common import print_machine

from ignite_ddl import TrainConfig, train
from ignite_ddl.measure.traces import format_trace_comm, hta_reading


def _ms(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:7.2f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--bucket-cap-mb", type=float, default=0.03, help="DDP bucket size (default 0.03: 3 buckets)")
    parser.add_argument("--train-size", type=int, default=2048, help="training samples (default 2048)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.procs < 2:
        parser.error("--procs must be >= 2: one process has no gradient communication")

    info = print_machine()
    with tempfile.TemporaryDirectory(prefix="ignite_ddl_traces_") as tmp:
        out = Path(tmp) / "run"
        config = TrainConfig(
            nproc_per_node=args.procs,
            epochs=1,
            train_size=args.train_size,
            bucket_cap_mb=args.bucket_cap_mb,
            profiler="torch",
            output_dir=str(out),
            progress=False,
            overwrite=True,
        )
        summary = train(config)
        ranks = summary["profiler"]["ranks"]
        hta = hta_reading(out / "profile")

    buckets = sorted({r["buckets_per_step"] for r in summary["steps"]["ranks"]})
    print(f"{args.procs} processes, bucket cap {args.bucket_cap_mb} MiB: {'/'.join(map(str, buckets))} bucket(s)")
    for rank, result in enumerate(ranks):
        check = result.get("trace_comm")
        if not check:
            print(f"rank {rank}: no comparison (no trace or no timed communication)")
            continue
        print(f"rank {rank} ({check['collective']}), per iteration, ms: trace comm / ours | trace exposed / ours")
        for row in check["per_iteration"]:
            print(
                f"  iteration {row['iteration']:3d}: {_ms(row['trace_comm_ms'])} / {_ms(row['ours_comm_ms'])}"
                f" | {_ms(row['trace_exposed_ms'])} / {_ms(row['ours_exposed_ms'])}"
            )
    print("\nmeans over the traced iterations (ratio: ours / the trace's)")
    print(format_trace_comm(ranks) or "(no rank has a comparison)")
    print("\nHTA reading:")
    print(json.dumps(hta, indent=1, default=str))

    results = {"machine": info, "bucket_cap_mb": args.bucket_cap_mb, "trace_comm": [r.get("trace_comm") for r in ranks]}
    results["hta"] = hta
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return results


if __name__ == "__main__":
    main()
