"""A rank that stops making progress ends the run, named, instead of leaving the others waiting in a collective.

:class:`StallWatchdog` is an Ignite handler plus a thread on every rank. The handler notes where the rank is:
waiting for its batch, in forward, backward (where DDP all-reduces gradients) or the optimizer step (from the step
recorder's marks), between iterations, or evaluating. Once a second the thread publishes that position in the
rendezvous store. When the rank has completed no iteration (training or evaluation) for ``timeout`` seconds, it
reads every rank's position: the rank that is least far along is the one that is stuck, and the others are
waiting for it (a fast rank blocked in the gradient all-reduce is a victim, not the culprit). It writes the
diagnosis to ``<log_dir>/stalled.json`` and ends its process; the launcher reports it as that rank's failure.

The clock starts when training starts (the first iteration, with its data loader start-up, gets the same limit)
and stops when training completes: call :meth:`StallWatchdog.stop` when ``run`` ends otherwise (an exception).
Engines of a single process need no watchdog: nothing waits for another rank.

Example:
    >>> import time
    >>> from ignite.engine import Engine
    >>> engine = Engine(lambda e, b: time.sleep(0.001))
    >>> watchdog = StallWatchdog(timeout=60).attach(engine)
    >>> _ = engine.run(range(3))
    >>> watchdog.position()
    (3, 5, 'between iterations of iteration 3')
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ignite.engine import Engine, Events

from ignite_ddl.core.outputs import write_bytes

__all__ = ["StallWatchdog", "clear_stall", "read_stall"]

_STALL_EXIT = 86  # a spawned rank ended by the watchdog exits with this; the launcher then reads stalled.json
STALL_FILE = "stalled.json"
_KEY = "ignite_ddl/position/"
# Where a rank can be, in the order an iteration goes through them.
WHERE = (
    "waiting for its batch",
    "in forward",
    "in backward (the gradient all-reduce)",
    "in the optimizer step",
    "in the iteration's handlers",
    "between iterations",
    "evaluating",
    "gathering the evaluation's metrics (its own batches done)",
    "past the evaluation",
)
BETWEEN, EVALUATING, GATHERING, EVALUATED = 5, 6, 7, 8


class StallWatchdog:
    """See the module docstring. ``recorder`` (a :class:`~ignite_ddl.measure.recorder.StepRecorder`) refines "in the
    step" into forward / backward / optimizer; ``report`` prints the diagnosis and exits with status 1 (a process
    of its own, not a spawned rank whose launcher reports it)."""

    def __init__(self, timeout: float, log_dir: str | Path | None = None, recorder: Any = None, report: bool = True):
        self.timeout, self.recorder, self.report = timeout, recorder, report
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.iteration, self.where = 0, BETWEEN
        self.last_progress: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def attach(self, trainer: Engine, evaluator: Engine | None = None) -> StallWatchdog:
        trainer.add_event_handler(Events.GET_BATCH_STARTED, self._at, 0, 1)
        trainer.add_event_handler(Events.ITERATION_STARTED, self._at, 1)
        trainer.add_event_handler(Events.ITERATION_COMPLETED, self._completed)
        trainer.add_event_handler(Events.STARTED, self.start)
        trainer.add_event_handler(Events.COMPLETED, self.stop)
        # Not on EXCEPTION_RAISED: an engine with a handler there no longer raises the exception (Ignite 0.5).
        if evaluator is not None:
            # A rank that has evaluated all its batches and waits in the metrics' all-reduce is further along than
            # one still evaluating (ranks hold different numbers of validation batches): a victim, not the culprit.
            evaluator.add_event_handler(Events.STARTED, self._at, EVALUATING)
            evaluator.add_event_handler(Events.ITERATION_COMPLETED, self._evaluated)
            evaluator.add_event_handler(Events.COMPLETED, self._at, EVALUATED)
        return self

    # -- the handlers: attribute writes only, a few microseconds per iteration

    def _at(self, engine: Engine, where: int, ahead: int = 0) -> None:
        self.where = where
        if ahead:
            self.iteration = engine.state.iteration + ahead

    def _evaluated(self, engine: Engine) -> None:
        self.last_progress = time.monotonic()
        if engine.state.epoch_length is not None and engine.state.iteration >= engine.state.epoch_length:
            self.where = GATHERING  # its last batch: next come the metrics' collectives

    def _completed(self, engine: Engine) -> None:
        self.iteration, self.where = engine.state.iteration, BETWEEN
        self.last_progress = time.monotonic()

    def position(self) -> tuple[int, int, str]:
        """(iteration, stage, description) of this rank; stages follow :data:`WHERE`."""
        where = self.where
        if where == 1 and self.recorder is not None:  # in the step: the recorder knows which phases ended
            done = self.recorder.phases_done()
            where = 4 if "optimizer" in done else 3 if "backward" in done else 2 if "forward" in done else 1
        return self.iteration, where, f"{WHERE[where]} of iteration {self.iteration}"

    # -- the thread

    def start(self) -> None:
        self.last_progress = time.monotonic()
        if self.timeout > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="stall-watchdog", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        import ignite.distributed as idist

        rank, world = idist.get_rank(), idist.get_world_size()
        store = _store() if world > 1 else None
        interval = max(0.2, min(1.0, self.timeout / 5))
        while not self._stop.wait(interval):
            iteration, where, text = self.position()
            if store is not None:
                try:
                    store.set(f"{_KEY}{rank}", json.dumps([iteration, where, text]))
                except Exception:  # the store went away: the run is ending anyway
                    store = None
            if self.last_progress is not None and time.monotonic() - self.last_progress > self.timeout:
                self._fire(rank, world, store)

    def _fire(self, rank: int, world: int, store: Any) -> None:
        # rank -> [iteration, stage, description]: this rank's position and the others' as they published it (JSON)
        positions: dict[int, list[Any]] = {rank: list(self.position())}
        for other in range(world):
            if other != rank and store is not None:
                try:
                    if store.check([f"{_KEY}{other}"]):
                        positions[other] = json.loads(store.get(f"{_KEY}{other}"))
                except Exception:
                    pass
        # A rank that never published is the furthest behind of all (without a store, e.g. XLA, nothing is known of
        # the others: this rank speaks for itself).
        missing = [r for r in range(world) if r not in positions] if store is not None else []
        if missing:
            culprits, ahead = missing, sorted(positions)
            where = "before its first iteration"
        else:
            lowest = min((p[0], p[1]) for p in positions.values())
            culprits = sorted(r for r, p in positions.items() if (p[0], p[1]) == lowest)
            ahead = sorted(r for r in positions if r not in culprits)
            where = positions[culprits[0]][2]
        message = f"stuck {where}: no iteration completed for {self.timeout:g} s (--stall-timeout)"
        if len(culprits) > 1:
            message += f"; so are ranks {', '.join(map(str, culprits[1:]))}"
        if ahead:
            waiting = "; ".join(sorted({positions[r][2] for r in ahead}))
            others = f"rank {ahead[0]} waits" if len(ahead) == 1 else f"ranks {', '.join(map(str, ahead))} wait"
            message += f"; {others} for it, {waiting}"
        if self.log_dir is not None:
            try:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                stall = {"rank": culprits[0], "ranks": culprits, "message": message}
                write_bytes(self.log_dir / STALL_FILE, json.dumps(stall).encode())
            except OSError:
                pass
        if self.report:
            print(f"ignite-ddl: error: rank {culprits[0]} failed: {message}", file=sys.stderr, flush=True)
        os._exit(1 if self.report else _STALL_EXIT)


def _store() -> Any:
    """The default process group's store (None where there is none, e.g. XLA)."""
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:
        return None


def read_stall(log_dir: str | Path | None) -> dict[str, Any] | None:
    """The diagnosis a watchdog left in ``log_dir`` (None if none)."""
    if log_dir is None:
        return None
    try:
        return json.loads((Path(log_dir) / STALL_FILE).read_text())
    except (OSError, ValueError):
        return None


def clear_stall(log_dir: str | Path | None) -> None:
    """Remove a diagnosis an earlier run left in ``log_dir``."""
    if log_dir is not None:
        Path(log_dir, STALL_FILE).unlink(missing_ok=True)
