"""Ignite's own time profilers, attached so that they measure what they claim to, on every rank.

- ``timer``: two ``Timer(average=True)``. The per-iteration one runs only between ``ITERATION_STARTED`` and
  ``ITERATION_COMPLETED`` (a Timer started at ``STARTED`` would also count the first batch fetch); the per-epoch
  one runs between ``EPOCH_STARTED`` and ``EPOCH_COMPLETED`` and is paused before evaluation handlers run (a Timer
  with only ``step=EPOCH_COMPLETED`` counts validation too).
- ``basic``: ``BasicTimeProfiler``: processing vs dataflow vs time in the handlers of each event.
- ``handlers``: ``HandlersTimeProfiler``: a table row per handler. In Ignite 0.5.5 attaching it makes
  ``Engine.run`` swallow exceptions (it creates an empty ``EXCEPTION_RAISED`` handler list, and the engine then
  "handles" errors by firing no handler); a handler that re-raises is registered so that a failing run still fails.

Only one profiler is attached to an engine: BasicTimeProfiler and HandlersTimeProfiler on the same engine break
each other's clean-up.

Example:
    >>> import torch
    >>> from ignite.engine import Engine
    >>> engine = Engine(lambda engine, batch: None)
    >>> profiler = attach_profiler("timer", engine)
    >>> _ = engine.run([torch.zeros(2)] * 3, max_epochs=2)
    >>> profiler.results()["iterations"], profiler.results()["epochs"]
    (6, 2)
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from ignite.engine import Engine, Events
from ignite.handlers import BasicTimeProfiler, HandlersTimeProfiler, Timer

from ignite_ddl.config import PROFILERS
from ignite_ddl.text import format_table


class TimerProfiler:
    """Mean training time per iteration and per epoch, from Ignite ``Timer`` s attached the right way."""

    kind = "timer"

    def __init__(self) -> None:
        self.iteration = Timer(average=True)
        self.epoch = Timer(average=True)

    def attach(self, engine: Engine) -> None:
        for timer, begin, end in (
            (self.iteration, Events.ITERATION_STARTED, Events.ITERATION_COMPLETED),
            (self.epoch, Events.EPOCH_STARTED, Events.EPOCH_COMPLETED),
        ):
            timer.attach(engine, start=Events.STARTED, resume=begin, pause=end, step=end)
            # Timer.reset leaves the clock running: stop it until the first `begin`.
            engine.add_event_handler(Events.STARTED, timer.pause)

    def results(self) -> dict[str, Any]:
        return {
            "iteration_mean_s": self.iteration.value(),
            "iterations": int(self.iteration.step_count),
            "epoch_mean_s": self.epoch.value(),
            "epochs": int(self.epoch.step_count),
        }

    def write_csv(self, path: Path) -> None:
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(("metric", "value"))
            writer.writerows(self.results().items())


class _IgniteProfiler:
    """One of Ignite's profiler objects, attached and written out the way Ignite does it."""

    kind: str
    factory: Callable[[], Any]

    def __init__(self) -> None:
        self.profiler = self.factory()

    def attach(self, engine: Engine) -> None:
        self.profiler.attach(engine)

    def write_csv(self, path: Path) -> None:
        self.profiler.write_results(str(path))


class BasicProfiler(_IgniteProfiler):
    kind, factory = "basic", BasicTimeProfiler

    def results(self) -> dict[str, Any]:
        results = _plain(self.profiler.get_results())
        results.pop("event_handlers_names", None)
        return results


class HandlersProfiler(_IgniteProfiler):
    kind, factory = "handlers", HandlersTimeProfiler

    def attach(self, engine: Engine) -> None:
        super().attach(engine)
        engine.add_event_handler(Events.EXCEPTION_RAISED, _reraise)

    def results(self) -> list[dict[str, Any]]:
        columns = ("handler", "event", "total_s", "min_s_index", "max_s_index", "mean_s", "std_s")
        return [dict(zip(columns, _plain(row))) for row in self.profiler.get_results()]


Profiler = TimerProfiler | BasicProfiler | HandlersProfiler


def _reraise(engine: Engine, error: BaseException) -> None:
    raise error


def attach_profiler(kind: str, engine: Engine) -> Profiler | None:
    """Attach profiler ``kind`` (one of :data:`PROFILERS`) to ``engine``; None for "none"."""
    if kind not in PROFILERS:
        raise ValueError(f"unknown profiler '{kind}' (choose from: {', '.join(PROFILERS)})")
    classes = {"timer": TimerProfiler, "basic": BasicProfiler, "handlers": HandlersProfiler}
    if kind == "none":
        return None
    profiler = classes[kind]()
    profiler.attach(engine)
    return profiler


def _plain(value: Any) -> Any:
    """Profiler output as JSON-ready data: tensors become numbers, tuples lists."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def format_profile(kind: str, ranks: list[Any]) -> str:
    """A table with a row per rank of what profiler ``kind`` measured (times in milliseconds)."""
    if kind == "timer":
        header = ("rank", "iteration ms", "epoch s")
        rows = [(i, f"{1e3 * r['iteration_mean_s']:.2f}", f"{r['epoch_mean_s']:.3f}") for i, r in enumerate(ranks)]
    elif kind == "basic":
        header = ("rank", "processing ms", "dataflow ms", "handlers total s")
        rows = [
            (i, _ms(r["processing_stats"].get("mean")), _ms(r["dataflow_stats"].get("mean")),
             f"{r['event_handlers_stats']['total_time']:.3f}")
            for i, r in enumerate(ranks)
        ]  # fmt: skip
    else:
        header = ("rank", "handler", "event", "total s", "mean ms")
        rows = [
            (i, row["handler"], row["event"], row["total_s"], _ms(row["mean_s"]))
            for i, r in enumerate(ranks)
            for row in r
            if isinstance(row["total_s"], float) and row["handler"] != "Total"
        ]
    return format_table(header, rows)


def _ms(seconds: Any) -> str:
    return f"{1e3 * seconds:.3f}" if isinstance(seconds, (int, float)) else str(seconds)
