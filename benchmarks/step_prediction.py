"""How far the step-time model is from what a sweep measured: the model of a predicting sweep (``predict: true``),
fitted to its first round's one-process runs and this machine's all-reduce, against each predicted configuration's
measured step (global batch / its mean samples per second over all its runs, contended ones included: on a shared
machine there may be no other); the median absolute relative error and Spearman's rank correlation of predicted and
measured step times.

Usage:
    python benchmarks/step_prediction.py experiments/quickstart/spec.yaml --output-dir runs/step_quickstart
    python benchmarks/step_prediction.py --from runs/step_quickstart     # a finished sweep (refitted if it has to)
    python benchmarks/step_prediction.py --from runs/step_quickstart --refit   # its first round, the model fitted again

A sweep whose ``step_model`` predicted nothing (its first round was all contended on a release that counted only
uncontended runs) is refitted from its records exactly as the sweep fits it.
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
from ignite_ddl.report.analysis import analyze
from ignite_ddl.report.stats import prediction_range, rank_correlation
from ignite_ddl.sweep import parse_spec
from ignite_ddl.sweep.forecast import fit_step_model
from ignite_ddl.sweep.runner import sweep
from ignite_ddl.sweep.spec import load_spec


def summarise(out: Path, refit: bool = False, every_round: bool = False) -> dict[str, Any]:
    """The sweep in ``out``: its step model's predictions against what it measured. ``refit``: the model fitted again
    to the first round's one-process runs; ``every_round``: fitted to the one-process runs of every round, the twins'
    median against the predicted configurations' (their rounds interleaved, a drift of the machine's speed between
    rounds moves both alike; the probes and the link are the sweep's own, kept in its ``plan/``)."""
    meta = read_json(out / "sweep.json")
    records = read_results(out / "results.jsonl")
    spec = parse_spec(meta["spec"])
    model = meta.get("step_model") or {}
    if every_round or refit or not any((p or {}).get("step_s") for p in (model.get("configurations") or {}).values()):
        twins = [r for r in records if (r["config"].get("nproc_per_node") or 1) == 1]
        kept = twins if every_round else [r for r in twins if r["repeat"] == 0]
        # the layout probes as the sweep kept them, whatever their revision: a finished sweep is read, not probed
        model = fit_step_model(spec, out, kept, print, kept_only=True)
    configs = {c.index: c for c in analyze(records, meta, include_contended=True).configs}
    rows = []
    for index, predicted in sorted((int(i), p) for i, p in (model.get("configurations") or {}).items()):
        c = configs.get(index)
        step = predicted.get("step_s")
        if not step or c is None or not c.throughput.value or not c.global_batch:
            continue
        measured = c.global_batch / c.throughput.value
        rows.append(
            {
                "config": c.name,
                "grid": c.grid,
                "predicted_ms": 1e3 * step,
                "low_ms": 1e3 * predicted["low_s"] if predicted.get("low_s") else None,
                "high_ms": 1e3 * predicted["high_s"] if predicted.get("high_s") else None,
                "measured_ms": 1e3 * measured,
                "runs": len(c.samples_per_s),
                "error": (step - measured) / measured,
            }
        )
    errors = [abs(r["error"]) for r in rows]
    return {
        "link": model.get("link"),
        "rows": rows,
        "median_abs_error": statistics.median(errors) if errors else None,
        "rank_correlation": rank_correlation([r["predicted_ms"] for r in rows], [r["measured_ms"] for r in rows]),
    }


def show(result: dict[str, Any]) -> None:
    link = result["link"] or {}
    if link:
        print(f"link: alpha {1e6 * link['alpha_s']:.0f} us, beta {link['beta_Bps'] / 1e9:.2f} GB/s (2 gloo processes)")
    print(f"{'config':>8} {'predicted ms':>12} {'interval':>17} {'measured ms':>11} {'runs':>4} {'error':>7}  grid")
    for r in result["rows"]:
        # none where the twin's single run gives it no width: the report table's own rule
        interval = prediction_range(r["low_ms"], r["high_ms"], ".0f") or "-"
        print(
            f"{r['config']:>8} {r['predicted_ms']:>12.1f} {interval:>17} {r['measured_ms']:>11.1f} {r['runs']:>4} "
            f"{100 * r['error']:>+6.1f}%  {' '.join(f'{k}={v}' for k, v in r['grid'].items())}"
        )
    if result["median_abs_error"] is not None:
        rho = result["rank_correlation"]
        print(
            f"median |error| {100 * result['median_abs_error']:.1f}% over {len(result['rows'])} configuration(s); "
            f"rank correlation {'n/a (fewer than 3)' if rho is None else f'{rho:.2f}'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", help="a sweep spec to run with predict: true")
    parser.add_argument("--output-dir", default="runs/step_prediction")
    parser.add_argument("--repeats", type=int, help="fixed repeats instead of the spec's")
    parser.add_argument("--from", dest="done", metavar="DIR", help="only summarise the sweep in DIR")
    parser.add_argument(
        "--refit", action="store_true", help="with --from: fit the model again to the sweep's first round"
    )
    parser.add_argument("--json", type=Path, help="also write the result as JSON")
    args = parser.parse_args()
    print_machine()
    out = Path(args.done or args.output_dir)
    if not args.done:
        if not args.spec:
            parser.error("give a spec, or --from DIR")
        spec = {**load_spec(args.spec).to_dict(), "predict": True, "output_dir": str(out)}
        if args.repeats:
            spec.update({"repeats": args.repeats, "adaptive": False})
        sweep(parse_spec(spec))
    result = summarise(out, refit=args.refit)
    show(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
