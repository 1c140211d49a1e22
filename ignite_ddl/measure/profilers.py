"""Ignite's own time profilers, attached so that they measure what they claim to, on every rank.

- ``timer``: two ``Timer(average=True)``. The per-iteration one runs only between ``ITERATION_STARTED`` and
  ``ITERATION_COMPLETED`` (a Timer started at ``STARTED`` would also count the first batch fetch); the per-epoch
  one runs between ``EPOCH_STARTED`` and ``EPOCH_COMPLETED`` and is paused before evaluation handlers run (a Timer
  with only ``step=EPOCH_COMPLETED`` counts validation too).
- ``basic``: ``BasicTimeProfiler``: processing vs dataflow vs time in the handlers of each event.
- ``handlers``: ``HandlersTimeProfiler``: a table row per handler. In Ignite 0.5.5 attaching it makes
  ``Engine.run`` swallow exceptions (it creates an empty ``EXCEPTION_RAISED`` handler list, and the engine then
  "handles" errors by firing no handler); a handler that re-raises is registered so that a failing run still fails.
- ``torch``: ``torch.profiler`` (CPU operators, and CUDA kernels on a CUDA rank), not one of Ignite's: a Chrome
  trace per rank, ``<output_dir>/profile/rank<r>_torch.json`` (open it in Perfetto or chrome://tracing), and the
  operators that took the most self time. Its schedule skips the step recorder's warm-up iterations (the first
  iterations pay for lazy initialisation, allocator growth and autotuning, which would fill the trace and the top
  operators with one-off costs), warms the profiler up for one iteration (its own start-up stays out of the
  window), then records ``active`` iterations once and stops. A run too short for that waits less, so that something
  is recorded; a run that stops while recording (an iteration budget, early stopping, an error) still writes what it
  recorded. Each profiler step is one iteration: the wait for its batch, then the iteration (the end-of-epoch handlers
  before it, evaluation included, count in it too). At the end of the run each rank's trace is read back and its
  gradient all-reduce time put beside our own timing of the same iterations (:mod:`ignite_ddl.measure.traces`):
  two independent clocks on one run.

Only one profiler is attached to an engine, and :func:`attach_profiler` refuses a second: BasicTimeProfiler and
HandlersTimeProfiler on the same engine break each other's clean-up, and any profiler would measure the other.

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

import contextlib
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events
from ignite.handlers import BasicTimeProfiler, HandlersTimeProfiler, Timer
from torch.profiler import ProfilerAction, ProfilerActivity

from ignite_ddl.core.config import PROFILERS
from ignite_ddl.core.outputs import write_csv, writing
from ignite_ddl.core.schema import BasicProfile, HandlerRow, TimerProfile, TorchProfile, TraceCommCheck
from ignite_ddl.measure.traces import compare_with_steps, read_step_rows, trace_comm

__all__ = [
    "TOP_OPS_COLUMNS",
    "BasicProfiler",
    "HandlersProfiler",
    "Profiler",
    "TimerProfiler",
    "TorchProfiler",
    "attach_profiler",
]

TOP_OPS_COLUMNS = ("name", "calls", "cpu_ms", "self_cpu_ms", "device_ms", "self_device_ms")


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

    def results(self) -> TimerProfile:
        return {
            "iteration_mean_s": self.iteration.value(),
            "iterations": int(self.iteration.step_count),
            "epoch_mean_s": self.epoch.value(),
            "epochs": int(self.epoch.step_count),
        }

    def write_csv(self, path: Path) -> None:
        write_csv(path, ("metric", "value"), self.results().items())


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

    def results(self) -> BasicProfile:
        results = _plain(self.profiler.get_results())
        results.pop("event_handlers_names", None)
        return cast(BasicProfile, results)


class HandlersProfiler(_IgniteProfiler):
    kind, factory = "handlers", HandlersTimeProfiler

    def attach(self, engine: Engine) -> None:
        super().attach(engine)
        engine.add_event_handler(Events.EXCEPTION_RAISED, _reraise)

    def results(self) -> list[HandlerRow]:
        columns = ("handler", "event", "total_s", "min_s_index", "max_s_index", "mean_s", "std_s")
        return [cast(HandlerRow, dict(zip(columns, _plain(row)))) for row in self.profiler.get_results()]


class TorchProfiler:
    """``torch.profiler`` over a window of this rank's training iterations: a Chrome trace and the top operators.

    The first ``wait`` iterations of a run are skipped, one warms the profiler up and ``active`` are recorded, once;
    ``max_iters`` is the run's iteration budget when it ends the run before its epochs do (the window is planned
    within it). The trace goes to ``<output_dir>/profile/rank<rank>_torch.json``.
    """

    kind = "torch"
    top = 15  # operators kept in results()

    def __init__(
        self, output_dir: str | Path, rank: int = 0, wait: int = 0, active: int = 5, max_iters: int | None = None
    ) -> None:
        if wait < 0 or active < 1:
            raise ValueError(f"the torch profiler needs wait >= 0 and active >= 1, got wait={wait}, active={active}")
        self.output_dir = Path(output_dir)
        self.trace_name = f"profile/rank{rank}_torch.json"
        self.wait, self.active, self.max_iters = wait, active, max_iters
        self._stack = contextlib.ExitStack()
        self._profile: torch.profiler.profile | None = None
        self._schedule: Callable[[int], ProfilerAction] | None = None
        self._by_device = False
        self._recorded = 0  # iterations completed inside the recording window so far
        self._trace: str | None = None
        self._active_iterations = 0
        self._top_ops: list[dict[str, Any]] = []
        self._iterations: dict[int, int] = {}  # profiler step N (the trace's ProfilerStep#N) -> engine iteration
        self._trace_comm: TraceCommCheck | None = None

    @property
    def trace_path(self) -> Path:
        return self.output_dir / self.trace_name

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.STARTED, self._start)
        engine.add_event_handler(Events.ITERATION_COMPLETED, self._step)
        # TERMINATE comes before the handlers of COMPLETED (an end-of-run evaluation): stopping there keeps them out
        # of a window cut short by a budget; COMPLETED catches a run that ran its course.
        engine.add_event_handler(Events.TERMINATE, self._close)
        engine.add_event_handler(Events.COMPLETED, self._close)
        engine.add_event_handler(Events.EXCEPTION_RAISED, self._close_and_reraise)

    def _window(self, engine: Engine) -> tuple[int, int, int] | None:
        """(wait, warm-up, active) iterations for this run, shrunk to fit the iterations it has left; None if it
        has none left."""
        state = engine.state
        ends = [n for n in (state.max_iters, self.max_iters) if n]
        if state.epoch_length is not None and state.max_epochs is not None:
            ends.append(state.epoch_length * state.max_epochs)
        if not ends:  # an iterable of unknown length: plan the full window
            return self.wait, 1, self.active
        left = min(ends) - state.iteration  # a resumed run starts past 0
        if left < 1:
            return None
        warmup = 1 if left > 1 else 0
        active = min(self.active, left - warmup)
        return min(self.wait, left - warmup - active), warmup, active

    def _start(self, engine: Engine) -> None:
        self._close()  # a second run of the engine gets a window of its own
        self._recorded, self._trace, self._active_iterations, self._top_ops = 0, None, 0, []
        self._iterations, self._trace_comm = {}, None
        window = self._window(engine)
        if window is None:
            return
        wait, warmup, active = window
        with warnings.catch_warnings():
            # A one-iteration run has no iteration to spare for the warm-up torch advises.
            warnings.filterwarnings("ignore", "Profiler won't be using warmup")
            self._schedule = torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1)
        activities = [ProfilerActivity.CPU]
        self._by_device = torch.cuda.is_available() and idist.device().type == "cuda"
        if self._by_device:
            activities.append(ProfilerActivity.CUDA)
        self._profile = self._stack.enter_context(
            torch.profiler.profile(activities=activities, schedule=self._schedule, on_trace_ready=self._trace_ready)
        )

    def _step(self, engine: Engine) -> None:
        if self._profile is None:
            return
        assert self._schedule is not None
        if self._schedule(self._profile.step_num) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            self._recorded += 1
            self._iterations[self._profile.step_num] = engine.state.iteration  # what ProfilerStep#N recorded
        self._profile.step()
        if self._trace is not None:
            self._close()  # the window is written: the rest of the run goes unprofiled, at no cost

    def _trace_ready(self, profile: torch.profiler.profile) -> None:
        path = self.trace_path
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            profile.export_chrome_trace(str(path))
        self._trace, self._active_iterations = self.trace_name, self._recorded
        self._top_ops = _top_ops(profile.key_averages(), self._by_device)[: self.top]

    def _close(self, engine: Engine | None = None) -> None:
        """Stop profiling; stopped while recording, the profiler writes the trace of what it has recorded."""
        self._profile = None
        self._stack.close()

    def _close_and_reraise(self, engine: Engine, error: BaseException) -> None:
        try:
            self._close()
        except Exception as e:
            # A trace that cannot be written must not take the place of the error that ended the run.
            logging.getLogger(__name__).warning(f"torch profiler: no trace written: {e}")
        # An EXCEPTION_RAISED handler makes Ignite 0.5.5 treat the error as handled unless the handler raises it.
        raise error

    def crosscheck(self, steps_csv: Path) -> None:
        """Put the trace's communication beside ours on the traced iterations (:mod:`~ignite_ddl.measure.traces`):
        ``trace_comm`` in :meth:`results`. Ours is read from the step recorder's CSV (``steps_rank<r>.csv``); None
        without a trace, without timed communication, or when the trace cannot be read (a warning: the run's other
        results stand)."""
        self._trace_comm = None
        if self._trace is None or not steps_csv.is_file():
            return
        try:
            traced = trace_comm(self.trace_path)
            self._trace_comm = compare_with_steps(traced, read_step_rows(steps_csv), self._iterations)
        except (OSError, ValueError, KeyError, TypeError) as e:
            logging.getLogger(__name__).warning(f"torch profiler: trace not compared with our communication: {e}")

    def results(self) -> TorchProfile:
        return {
            "trace": self._trace,
            "active_iterations": self._active_iterations,
            # the trace's ProfilerStep#N -> the engine iteration it recorded (JSON keys are text)
            "step_iterations": {str(n): i for n, i in sorted(self._iterations.items())},
            "top_ops": self._top_ops,
            "trace_comm": self._trace_comm,
        }

    def write_csv(self, path: Path) -> None:
        write_csv(path, TOP_OPS_COLUMNS, ([op.get(c, "") for c in TOP_OPS_COLUMNS] for op in self._top_ops))


def _top_ops(averages: Any, by_device: bool) -> list[dict[str, Any]]:
    """``key_averages()`` as rows of :data:`TOP_OPS_COLUMNS` (milliseconds), most self time first: device time when
    the device was profiled, else CPU time."""
    rows = []
    for event in averages:
        if event.key.startswith("ProfilerStep"):  # whole iterations ("ProfilerStep*" once averaged), not operators
            continue
        # device_time_total is torch's newer name; older releases only have cuda_time_total.
        device: float | None = getattr(event, "device_time_total", None)  # microseconds, as every time here
        if device is not None:
            self_device = event.self_device_time_total  # torch names both alike
        else:
            device = getattr(event, "cuda_time_total", 0.0)
            self_device = getattr(event, "self_cuda_time_total", 0.0)
        times = (event.cpu_time_total, event.self_cpu_time_total, device, self_device)
        rows.append(dict(zip(TOP_OPS_COLUMNS, (event.key, int(event.count), *(round(t / 1e3, 4) for t in times)))))
    rows.sort(key=lambda row: row["self_device_ms" if by_device else "self_cpu_ms"], reverse=True)
    return rows


Profiler = TimerProfiler | BasicProfiler | HandlersProfiler | TorchProfiler

_ATTACHED = "_ignite_ddl_profiler"  # set on an engine by attach_profiler: the kind attached


def _reraise(engine: Engine, error: BaseException) -> None:
    raise error


def attach_profiler(
    kind: str,
    engine: Engine,
    *,
    output_dir: str | Path | None = None,
    rank: int = 0,
    warmup: int = 0,
    max_iters: int | None = None,
) -> Profiler | None:
    """Attach profiler ``kind`` (one of :data:`PROFILERS`) to ``engine``; None for "none".

    Only ``torch`` uses the options: its trace goes under ``output_dir`` (required for it) named after ``rank``; it
    skips the first ``warmup`` iterations (those the step recorder leaves out) and plans its window within
    ``max_iters`` (a budget that ends the run early). A second profiler on the same engine is refused.
    """
    if kind not in PROFILERS:
        raise ValueError(f"unknown profiler '{kind}' (choose from: {', '.join(PROFILERS)})")
    if kind == "none":
        return None
    attached = getattr(engine, _ATTACHED, None)
    if attached is not None:
        # Two profilers break each other's clean-up (Basic and Handlers) and each would measure the other.
        raise ValueError(f"cannot attach the {kind} profiler: this engine already has the {attached} profiler")
    profiler: Profiler
    if kind == "torch":
        if output_dir is None:
            raise ValueError("the torch profiler needs output_dir, the folder its trace goes to")
        profiler = TorchProfiler(output_dir, rank, wait=warmup, max_iters=max_iters)
    else:
        ignite_kinds: dict[str, type[TimerProfiler | BasicProfiler | HandlersProfiler]] = {
            "timer": TimerProfiler,
            "basic": BasicProfiler,
            "handlers": HandlersProfiler,
        }
        profiler = ignite_kinds[kind]()
    profiler.attach(engine)
    setattr(engine, _ATTACHED, kind)
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
