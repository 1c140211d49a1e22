"""What recording memory costs: per-step time of the trainer with memory recording on and off.

Two measurements, both on the same model, data and batch:

- **Step pairs in one run** (the fine grain): one engine built from the library's own pieces (the train step, the
  step recorder, the memory monitor) takes N pairs of steps, memory recording on for one step of a pair and off for
  the other, the order flipping every pair. Each iteration is timed from its start to the next one's start, so the
  monitor's handler and the recorder's reading per step are inside it. The cost is the ratio of the medians, with a
  95 % interval of the paired mean ratio (the pairs of one run taken as independent: it says how precisely the cost
  is resolved, not how it varies between runs).
- **Whole runs** (``--repeats R``): ``train(config)`` with ``measure_memory`` on and off, alternating, R rounds;
  each round's window of M measured iterations, as ``overhead.py`` times ours; the paired ratio per round.

Usage:
    python benchmarks/memory_overhead.py                     # step pairs only, about 1 minute on 2 cores
    python benchmarks/memory_overhead.py --repeats 7 --json memory_overhead.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
import torch
from bench_common import finish, print_machine
from ignite.engine import Events
from overhead import Window, bench_config, run_ours
from torch import nn

from ignite_ddl.measure.contention import ForeignLoad
from ignite_ddl.measure.memory import MemoryMonitor
from ignite_ddl.measure.recorder import StepRecorder
from ignite_ddl.report.stats import mean_interval
from ignite_ddl.trainer.engines import create_trainer
from ignite_ddl.trainer.models import build_model


def step_pairs(model: str, batch: int, pairs: int, warmup: int, log_dir: Path) -> dict[str, Any]:
    """Per-iteration seconds with memory recording on and off, alternating in one engine."""
    torch.manual_seed(0)
    device = torch.device("cpu")
    net = build_model(model, 3, 32, 10)
    recorder = StepRecorder(warmup=0, device=device)
    monitor = MemoryMonitor(warmup=warmup, device=device, log_dir=log_dir)
    trainer = create_trainer(
        net, torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9), nn.CrossEntropyLoss(), device, recorder=recorder
    )
    recorder.attach(trainer)
    on_iteration = monitor._on_iteration  # the handler the trainer attaches: toggled per iteration below
    sample = monitor.sample
    state = {"on": True, "start": 0.0}
    times: dict[str, list[float]] = {"on": [], "off": []}

    @trainer.on(Events.ITERATION_STARTED)
    def _start(engine: Any) -> None:
        now = time.perf_counter()
        it = engine.state.iteration  # already the new iteration's number
        if it > 1 and it - 1 > 2 * warmup:
            times["on" if state["on"] else "off"].append(now - state["start"])
        pair, first = divmod(it - 1, 2)
        state["on"] = (first == 0) == (pair % 2 == 0)  # on/off, then off/on: the order flips every pair
        recorder.memory = sample if state["on"] else None
        state["start"] = now

    @trainer.on(Events.ITERATION_COMPLETED)
    def _monitor() -> None:
        if state["on"]:
            on_iteration()

    data = [(torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))) for _ in range(8)]
    trainer.run(data, max_epochs=(2 * pairs + 2 * warmup + 2) // len(data) + 1)
    n = min(len(times["on"]), len(times["off"]))
    on, off = times["on"][:n], times["off"][:n]
    ratios = mean_interval([a / b for a, b in zip(on, off)])
    return {
        "pairs": n,
        "median_on_s": statistics.median(on),
        "median_off_s": statistics.median(off),
        "median_ratio": statistics.median(on) / statistics.median(off),
        "paired_ratio": {"mean": ratios.value, "low": ratios.low, "high": ratios.high},
        "cost_per_step_s": statistics.median(on) - statistics.median(off),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300, help="step pairs in one run (default 300)")
    parser.add_argument("--repeats", type=int, default=0, help="rounds of whole runs, on and off (default 0)")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up iterations (default 10)")
    parser.add_argument("--iters", type=int, default=100, help="measured iterations per whole run (default 100)")
    parser.add_argument("--model", default="cnn", help="model name as in TrainConfig (default cnn)")
    parser.add_argument("--batch-size", type=int, default=128, help="batch size (default 128)")
    parser.add_argument("--procs", type=int, default=1, help="processes of the whole runs (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.pairs < 10 and args.repeats < 1:
        parser.error("nothing to measure: give --pairs 10 or more, or --repeats")
    info = print_machine()
    results: dict[str, Any] = {"machine": info, "options": vars(args) | {"json": str(args.json) if args.json else None}}
    busiest = 0.0
    with tempfile.TemporaryDirectory(prefix="ignite_ddl_memory_overhead_") as tmp:
        if args.pairs >= 10:
            with ForeignLoad() as other:
                pairs = step_pairs(args.model, args.batch_size, args.pairs, args.warmup, Path(tmp))
            busiest = max(busiest, other.share or 0.0)
            results["step_pairs"] = pairs
            p = pairs["paired_ratio"]
            print(
                f"step pairs ({pairs['pairs']}, {args.model}, batch {args.batch_size}, 1 process): median "
                f"{pairs['median_on_s'] * 1e3:.2f} ms/step with memory recording, {pairs['median_off_s'] * 1e3:.2f} "
                f"without: ratio {pairs['median_ratio']:.4f}; paired mean {p['mean']:.4f} (95 % interval "
                f"{p['low']:.4f} to {p['high']:.4f}); {pairs['cost_per_step_s'] * 1e6:+.0f} us per step"
            )
        if args.repeats:
            window = Window(args.warmup, args.iters)
            base = replace(bench_config(args.procs, args, window), measure_flops=False)
            steps: dict[str, list[float]] = {"on": [], "off": []}
            for repeat in range(args.repeats):
                for name in ("on", "off") if repeat % 2 == 0 else ("off", "on"):
                    with ForeignLoad() as other:
                        config = replace(base, measure_memory=name == "on")
                        steps[name].append(run_ours(config, window, Path(tmp) / f"{name}-{repeat}"))
                    busiest = max(busiest, other.share or 0.0)
            paired = mean_interval([a / b for a, b in zip(steps["on"], steps["off"])])
            medians = {k: statistics.median(v) for k, v in steps.items()}
            results["runs"] = {
                "steps_s": steps,
                "median_ratio": medians["on"] / medians["off"],
                "paired_ratio": {"mean": paired.value, "low": paired.low, "high": paired.high, "n": paired.n},
            }
            print(
                f"whole runs ({args.repeats} rounds, {args.procs} process(es)): median {medians['on'] * 1e3:.2f} vs "
                f"{medians['off'] * 1e3:.2f} ms/step, ratio {medians['on'] / medians['off']:.3f}; paired "
                f"{paired.value:.3f} (95 % interval {paired.low:.3f} to {paired.high:.3f})"
            )
    return finish(results, busiest, args.json)


if __name__ == "__main__":
    main()
