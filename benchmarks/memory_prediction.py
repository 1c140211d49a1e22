"""How far the memory prediction (``ignite-ddl plan``) is from what runs measure: every built-in workload x strategy
(one process, DDP and FSDP on 2 gloo processes) x gradient accumulation (1, 4) x AMP (none, bf16), one run each, as
a sweep with ``predict: true`` runs them; per run the predicted peak per rank beside the measured peak resident set
of the largest rank, and the distribution of the relative error (predicted - measured) / measured. The built-in GPT
workload (``gpt``) is swept apart, in float32, with activation checkpointing off and on instead of AMP.

Usage:
    python benchmarks/memory_prediction.py --output-dir runs/memory_prediction          # every built-in workload
    python benchmarks/memory_prediction.py --workloads cnn,gpt --output-dir runs/mp       # a subset
    python benchmarks/memory_prediction.py --from runs/memory_prediction                 # summarise a finished one

The runs are a sweep's: a sweep cut short is continued with ``--resume`` (its runs so far are kept).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
from bench_common import print_machine

from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.core.results import read_results
from ignite_ddl.sweep import parse_spec
from ignite_ddl.sweep.runner import sweep
from ignite_ddl.trainer.models import OWN_MODELS

GOAL = 0.15


# The GPT: 4 blocks of 128 over 256-token sequences, so that activations (what checkpointing trades) are most of a
# rank's tensors; 8 steps of a global batch of 32 sequences.
GPT_ARGS = {"n_layer": 4, "d_model": 128, "n_head": 4, "seq_len": 256, "vocab": 256, "train_sequences": 256}
WORKLOADS = (*OWN_MODELS, "gpt")


def gpt_spec(output_dir: str) -> dict[str, Any]:
    spec = spec_for([], output_dir)
    spec["workload"] = "gpt"
    spec["base"] = {**spec["base"], "workload_args": GPT_ARGS, "lr": 0.003}
    for dataset_option in ("train_size", "val_size"):
        del spec["base"][dataset_option]
    del spec["grid"]["model"], spec["grid"]["amp"]
    spec["grid"]["activation_checkpointing"] = [False, True]
    return spec


def spec_for(workloads: list[str], output_dir: str) -> dict[str, Any]:
    return {
        "name": "memory_prediction",
        "output_dir": output_dir,
        "predict": True,
        "base": {
            "optimizer": "adam",
            "lr": 0.0005,
            "batch_size": 32,
            "train_size": 256,
            "val_size": 64,
            "epochs": 1,
            "measure_flops": False,
        },
        "grid": {
            "model": workloads,
            "nproc_per_node": [1, 2],
            "strategy": ["ddp", "fsdp"],
            "accumulate": [1, 4],
            "amp": ["none", "bf16"],
        },
        "exclude": [{"strategy": "fsdp", "nproc_per_node": 1}],  # one process: ddp is "none"
        "repeats": 1,
        "on_busy": "run",
        "busy_stop_after": 0,
        "timeout_s": 900,
    }


def summarise(out: Path) -> dict[str, Any]:
    rows = []
    records = [r for folder in (out, out / "gpt") if folder.is_dir() for r in read_results(folder / "results.jsonl")]
    for record in records:
        prediction = record.get("prediction") or {}
        measured = (((record.get("summary") or {}).get("memory") or {}).get("max") or {}).get("peak_rss_bytes")
        predicted = prediction.get("peak_bytes")
        if record["status"] != "completed" or not measured or not predicted:
            continue
        grid = record["grid"]
        strategy = "none" if grid["nproc_per_node"] == 1 else grid["strategy"]
        rows.append(
            {
                "model": grid.get("model") or ("gpt+ckpt" if grid["activation_checkpointing"] else "gpt"),
                "strategy": strategy,
                "accumulate": grid["accumulate"],
                "amp": grid.get("amp", "none"),
                "predicted_mib": predicted / 2**20,
                "measured_mib": measured / 2**20,
                "error": (predicted - measured) / measured,
                "contended": record["contended"],
            }
        )
    errors = [abs(r["error"]) for r in rows]
    by_strategy = {}
    for strategy in ("none", "ddp", "fsdp"):
        mine = [r["error"] for r in rows if r["strategy"] == strategy]
        if mine:
            by_strategy[strategy] = {
                "runs": len(mine),
                "median": statistics.median(mine),
                "min": min(mine),
                "max": max(mine),
                "within_goal": sum(abs(e) <= GOAL for e in mine),
            }
    return {
        "runs": rows,
        "by_strategy": by_strategy,
        "median_abs_error": statistics.median(errors) if errors else None,
        "worst": max(rows, key=lambda r: abs(r["error"])) if rows else None,
        "within_goal": sum(e <= GOAL for e in errors),
        "host": read_json(out / "sweep.json").get("host") if (out / "sweep.json").exists() else None,
    }


def show(result: dict[str, Any]) -> None:
    print(f"{'model':>9} {'strategy':>8} {'acc':>3} {'amp':>4} {'predicted MiB':>13} {'measured MiB':>12} {'error':>7}")
    for r in result["runs"]:
        print(
            f"{r['model']:>9} {r['strategy']:>8} {r['accumulate']:>3} {r['amp']:>4} {r['predicted_mib']:>13.0f} "
            f"{r['measured_mib']:>12.0f} {100 * r['error']:>+6.1f}%" + (" (contended)" if r["contended"] else "")
        )
    print("\nerror (predicted - measured) / measured, by strategy:")
    for strategy, s in result["by_strategy"].items():
        print(
            f"  {strategy:>4}: {s['runs']} runs, median {100 * s['median']:+.1f}%, range {100 * s['min']:+.1f}% .. "
            f"{100 * s['max']:+.1f}%, {s['within_goal']} within +-{GOAL:.0%}"
        )
    if result["worst"]:
        w = result["worst"]
        print(
            f"median |error| {100 * result['median_abs_error']:.1f}%; {result['within_goal']} of {len(result['runs'])} "
            f"within +-{GOAL:.0%}; worst {100 * w['error']:+.1f}% ({w['model']}, {w['strategy']}, accumulate "
            f"{w['accumulate']}, amp {w['amp']})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated built-in models and gpt")
    parser.add_argument("--output-dir", default="runs/memory_prediction")
    parser.add_argument("--resume", action="store_true", help="continue a sweep cut short")
    parser.add_argument("--from", dest="done", metavar="DIR", help="only summarise the sweep in DIR")
    parser.add_argument("--json", type=Path, help="also write the result as JSON")
    args = parser.parse_args()
    print_machine()
    out = Path(args.done or args.output_dir)
    workloads = args.workloads.split(",")
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}: choose from {', '.join(WORKLOADS)}")
    models = [w for w in workloads if w != "gpt"]
    if not args.done and models:
        sweep(parse_spec(spec_for(models, str(out))), resume=args.resume)
    if not args.done and "gpt" in workloads:
        sweep(parse_spec(gpt_spec(str(out / "gpt"))), resume=args.resume)
    result = summarise(out)
    show(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
