"""How far the scaling projection is from a measured run: 2 processes projected from 1 on this machine, against 2
measured processes (gloo, CPU).

Three runs of the real trainer (``ignite_ddl.trainer.run.train``: synthetic data, the quickstart's model and sizes,
the same batch per worker): 2 processes with the launcher's threads per process (cores / 2); 1 process with *those*
threads, the compute a worker of the 2-process run has; and 1 process with the default threads (every core), the
naive starting point. On a CPU a single process already uses every core through intra-op threads, so projecting 2
workers from it counts the cores twice.

Each of ``--repeats`` rounds fits alpha and beta to all-reduce times of 2 gloo processes
(``projection.measure_allreduce`` and ``projection.fit_alpha_beta``), then runs the three (slow drifts of the machine
hit them alike), projects N = 2 from each 1-process run (``projection.compute_from_run`` and ``projection.project``)
and compares it with the round's 2-process run. A round that other processes disturbed (the fit or a run above the
contention threshold) is run again, up to ``--rerun-contended`` times, and its last attempt kept.

It prints the fitted link and the comparison per round, and the medians over all rounds and over the undisturbed
ones; everything, every round's figures included, goes to ``<output-dir>/validation.json`` next to the runs.

Usage:
    python benchmarks/projection_validation.py --repeats 3        # the figures in docs/projection.md
    python benchmarks/projection_validation.py --repeats 1 --train-size 512 --epochs 1 --output-dir runs/pv-tiny
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.environment import host, versions
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.jsonfiles import write_json
from ignite_ddl.core.text import format_table, milliseconds
from ignite_ddl.launcher import plan_launch
from ignite_ddl.measure.contention import CONTENTION_THRESHOLD, ForeignLoad
from ignite_ddl.predict.projection import compute_from_run, fit_alpha_beta, measure_allreduce, project
from ignite_ddl.trainer.models import check_model
from ignite_ddl.trainer.run import train

PROG = Path(__file__).name
# The two starting points compared, each a 1-process run, and how the table names them.
COMPARED = {
    "one_process_matched_threads": "1 process, threads of each of the 2",
    "one_process_all_cores": "1 process, default threads",
}


def workload(
    model: str, batch_per_worker: int, train_size: int, epochs: int
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], int]:
    """The options every run shares, each run's own (1 process with matched threads, 1 with all cores, 2), and the
    threads of each of the 2 processes; the configs are checked here, before anything starts."""
    base: dict[str, Any] = {
        "dataset": "synthetic",
        "model": model,
        "epochs": epochs,
        "train_size": train_size,
        "val_size": 512,
        "progress": False,
        "overwrite": True,
        "checkpoints": False,
        "best_model": False,
    }
    two: dict[str, Any] = {"backend": "gloo", "nproc_per_node": 2, "batch_size": 2 * batch_per_worker}
    two_config = TrainConfig(**base, **two)
    two_config.check()
    threads = plan_launch(two_config).threads  # each of the 2 ranks' threads
    kinds: dict[str, dict[str, Any]] = {
        "one_process_matched_threads": {"nproc_per_node": 1, "threads": threads, "batch_size": batch_per_worker},
        "one_process_all_cores": {"nproc_per_node": 1, "batch_size": batch_per_worker},
        "two_processes": two,
    }
    for options in kinds.values():
        TrainConfig(**base, **options).check()
    check_model(model)
    return base, kinds, threads


def _contention(summary: dict[str, Any]) -> float | None:
    return (summary.get("contention") or {}).get("foreign_cpu_share")


def one_round(
    out: Path, repeat: int, base: dict[str, Any], kinds: dict[str, dict[str, Any]], batch_per_worker: int
) -> dict[str, Any]:
    """Fit the link, run the three, project N = 2 from each 1-process run and compare with the 2-process one."""
    # Each round fits its own link first: the all-reduce latency of this VM moves with its load.
    with ForeignLoad() as fit_load:
        sizes, times = measure_allreduce(2, iters=20, warmup=5, log_dir=str(out / f"fit-r{repeat}" / "logs"))
    link = fit_alpha_beta(sizes, times, 2)
    runs = {}
    for kind, options in kinds.items():
        run_dir = out / f"{kind}-r{repeat}"
        summary = train(TrainConfig(**base, **options, output_dir=str(run_dir)))
        if summary is None:
            raise RuntimeError(f"the {kind} run returned no summary")
        runs[kind] = (run_dir, summary)
    measured = runs["two_processes"][1]
    measured_tp = measured["samples_per_s"]
    record: dict[str, Any] = {
        "link": dataclasses.asdict(link),
        "allreduce": {"sizes_bytes": sizes, "seconds": times, "foreign_cpu_share": fit_load.share},
        "measured_2": {
            "samples_per_s": measured_tp,
            "step_s": 2 * batch_per_worker / measured_tp,  # a rank's mean step, from the global throughput
            "exposed_comm_s": measured["steps"]["global"]["exposed_comm_s_mean"],
            "foreign_cpu_share": _contention(measured),
        },
    }
    for kind in COMPARED:
        run_dir, summary = runs[kind]
        compute = compute_from_run(run_dir)
        row = project(compute, link, max_workers=2).row(2)
        record[kind] = {
            "threads": summary["threads_per_process"],
            "measured_1_samples_per_s": summary["samples_per_s"],
            "foreign_cpu_share": _contention(summary),
            "compute": dataclasses.asdict(compute),
            "projected_2_step_s": row["ring_step_s"],
            "projected_2_exposed_s": row["ring_comm_s"],
            "projected_2_samples_per_s": row["ring_samples_per_s"],
            "step_error": row["ring_step_s"] / record["measured_2"]["step_s"] - 1,
            "throughput_error": row["ring_samples_per_s"] / measured_tp - 1,
        }
    shares = [fit_load.share, *(_contention(summary) for _, summary in runs.values())]
    record["contended"] = any(share is None or share > CONTENTION_THRESHOLD for share in shares)
    return record


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The median of each compared figure over ``rounds`` (None when there is none)."""
    if not rounds:
        return None
    keys = ("step_error", "throughput_error", "projected_2_samples_per_s", "projected_2_exposed_s")
    return {
        "rounds": len(rounds),
        "measured_2_samples_per_s": statistics.median(r["measured_2"]["samples_per_s"] for r in rounds),
        "measured_2_exposed_comm_s": statistics.median(r["measured_2"]["exposed_comm_s"] for r in rounds),
        "alpha_s": statistics.median(r["link"]["alpha_s"] for r in rounds),
        "beta_Bps": statistics.median(r["link"]["beta_Bps"] for r in rounds),
        **{kind: {key: statistics.median(r[kind][key] for r in rounds) for key in keys} for kind in COMPARED},
    }


def validate_this_machine(
    output_dir: str | Path = "runs/projection-validation",
    batch_per_worker: int = 64,
    train_size: int = 3072,
    epochs: int = 2,
    model: str = "cnn",
    repeats: int = 3,
    rerun_contended: int = 2,
) -> dict[str, Any]:
    """Every round (see the module docstring), the medians, the machine and the workload; also written to
    ``output_dir/validation.json``."""
    out = Path(output_dir)
    base, kinds, threads = workload(model, batch_per_worker, train_size, epochs)
    records = []
    for repeat in range(repeats):
        for attempt in range(1 + rerun_contended):  # as a sweep does: a disturbed round is run again
            record = {**one_round(out, repeat, base, kinds, batch_per_worker), "attempt": attempt}
            if not record["contended"]:
                break
        records.append(record)
    result: dict[str, Any] = {
        "machine": {**host(), "torch": versions()["torch"]},
        "workload": {**base, "batch_per_worker": batch_per_worker, "repeats": repeats},
        "threads_per_process_at_2": threads,
        "contention_threshold": CONTENTION_THRESHOLD,
        "rounds": records,
        "median": medians(records),
        "median_uncontended": medians([r for r in records if not r["contended"]]),
    }
    write_json(out / "validation.json", result)
    return result


def _percent(error: float) -> str:
    return f"{error * 100:+.1f} %"


def format_validation(result: dict[str, Any]) -> str:
    """The fitted link and the measured 2-process run per round, then the projections against it."""
    rounds = result["rounds"]
    links = [
        [
            i + 1,
            r["attempt"],
            f"{r['link']['alpha_s'] * 1e6:.0f}",
            f"{r['link']['beta_Bps'] / 1e9:.2f}",
            f"{r['link']['residual'] * 100:.0f} %",
            f"{r['measured_2']['samples_per_s']:.0f}",
            milliseconds(r["measured_2"]["exposed_comm_s"]),
            "yes" if r["contended"] else "no",
        ]
        for i, r in enumerate(rounds)
    ]
    compared = []
    for kind, label in COMPARED.items():
        for i, r in enumerate(rounds):
            p = r[kind]
            compared.append(
                [
                    label,
                    i + 1,
                    p["threads"],
                    f"{p['projected_2_samples_per_s']:.0f}",
                    f"{r['measured_2']['samples_per_s']:.0f}",
                    _percent(p["throughput_error"]),
                    _percent(p["step_error"]),
                    milliseconds(p["projected_2_exposed_s"]),
                ]
            )
    lines = [
        f"{result['machine']['cpu']}, {result['machine']['cpu_cores']} cores, torch {result['machine']['torch']}; "
        f"{result['workload']['model']}, batch {result['workload']['batch_per_worker']} per worker, "
        f"{result['threads_per_process_at_2']} thread(s) per process at 2",
        format_table(
            [
                "round",
                "attempt",
                "alpha us",
                "beta GB/s",
                "fit residual",
                "2 measured: samples/s",
                "exposed ms",
                "contended",
            ],
            links,
        ),
        "",
        format_table(
            [
                "projected from",
                "round",
                "threads",
                "projected 2 samples/s",
                "measured",
                "throughput error",
                "step error",
                "exposed ms",
            ],
            compared,
        ),
    ]
    for name, label in (("median", "all rounds"), ("median_uncontended", "undisturbed rounds")):
        summary = result[name]
        if summary is None:
            lines.append(f"median over {label}: none")
            continue
        errors = "; ".join(f"{_percent(summary[k]['throughput_error'])} from {COMPARED[k]}" for k in COMPARED)
        lines.append(f"median throughput error over {label} ({summary['rounds']}): {errors}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--rerun-contended", type=int, default=2, help="reruns of a disturbed round (default 2)")
    parser.add_argument("--batch-per-worker", type=int, default=64, help="batch of each worker (default 64)")
    parser.add_argument("--train-size", type=int, default=3072, help="synthetic training samples (default 3072)")
    parser.add_argument("--epochs", type=int, default=2, help="epochs per run (default 2)")
    parser.add_argument("--model", default="cnn", help="model name as in TrainConfig (default cnn)")
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path("runs/projection-validation"),
        help="where the runs and validation.json go (default runs/projection-validation)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.rerun_contended < 0:
        parser.exit(2, f"{PROG}: error: --repeats must be >= 1 and --rerun-contended >= 0\n")
    try:
        workload(args.model, args.batch_per_worker, args.train_size, args.epochs)  # refused before anything starts
    except ConfigError as e:
        parser.exit(2, f"{PROG}: error: {e}\n")
    result = validate_this_machine(
        args.output_dir,
        batch_per_worker=args.batch_per_worker,
        train_size=args.train_size,
        epochs=args.epochs,
        model=args.model,
        repeats=args.repeats,
        rerun_contended=args.rerun_contended,
    )
    print(format_validation(result))
    print(f"{PROG}: {args.output_dir / 'validation.json'}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
