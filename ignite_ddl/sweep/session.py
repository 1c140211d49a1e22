"""One session of a sweep or a search on its folder: the crash-safe ``results.jsonl`` repaired and read back, the
session written into ``sweep.json``, and batches of runs handed to the executor, each record appended as it ends,
with the busy-machine stop and the re-runs of contended runs (:mod:`ignite_ddl.sweep.runner` describes them). A grid
sweep (:mod:`~ignite_ddl.sweep.runner`) and a search (:mod:`~ignite_ddl.sweep.search`) record their runs the same way.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ignite_ddl.core.environment import host, versions
from ignite_ddl.core.errors import ConfigError, MachineBusy
from ignite_ddl.core.jsonfiles import read_json, write_json
from ignite_ddl.core.results import append_record, read_results, rejected_path, repair_results
from ignite_ddl.core.sweep_records import MemoryPrediction, RunRecord, SweepMeta, SweepSession
from ignite_ddl.launcher.scratch import left_if_killed, remove_left_behind
from ignite_ddl.sweep.busy import FINISH_ANYWAY, BusyStreak
from ignite_ddl.sweep.plan import Progress, Recorded, Refused, Run, Where, contended_reruns, launched
from ignite_ddl.sweep.records import describe_outcome, refused_record
from ignite_ddl.sweep.spec import Spec

__all__ = ["Executor", "Session", "where_text"]


class Executor(Protocol):
    """Where a sweep's runs are executed."""

    def check(self) -> None: ...

    def execute(self, runs: Sequence[Run], recorded: Recorded, progress: Progress, where: Where) -> None: ...


def where_text(run: Run, number: int, total: int, what: str, repeats: str) -> str:
    """A run's place in its batch, for the progress lines: ``[3/8 round 4] cfg002 batch_size=64 (repeat 4/...)``."""
    again = f", re-run {run.attempt} of a contended run" if run.attempt else ""
    return f"[{number}/{total}{what}] cfg{run.index:03d} {run.label} (repeat {run.repeat + 1}/{repeats}{again})"


class Session:
    """This session on the sweep's folder ``out``: refuses an existing sweep without ``resume``, keeps every valid
    record of an earlier one, and records each run as it ends."""

    def __init__(self, spec: Spec, out: Path, executor: Executor, resume: bool, progress: Callable[[str], None]):
        self.spec, self.out, self.executor, self.progress = spec, out, executor, progress
        self.results = out / "results.jsonl"
        if self.results.exists() and not resume:
            raise ConfigError(
                f"{self.results} exists: pass --resume to continue that sweep, or choose another --output-dir"
            )
        rejected = repair_results(self.results)
        if rejected:
            progress(
                f"warning: {len(rejected)} unreadable line(s) of {self.results} moved to "
                f"{rejected_path(self.results)} (first: line {rejected[0].line}, {rejected[0].reason}); every valid "
                "record was kept"
            )
        self.meta_path = out / "sweep.json"
        earlier = read_json(self.meta_path).get("sessions", []) if self.meta_path.exists() else []
        self.earlier: list[SweepSession] = earlier
        for before in earlier:  # the temporary folders of a session killed outright (SIGKILL), still there
            removed = remove_left_behind(before.get("scratch", []), before.get("pid"))
            if removed:
                progress(f"removed {len(removed)} temporary folder(s) a killed session left: {', '.join(removed)}")
        self.session: SweepSession = {
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "wall_s": 0.0,
            "runs": 0,
            "pid": os.getpid(),
            "scratch": left_if_killed(),
        }
        self.meta: SweepMeta = {
            "spec": spec.to_dict(),
            "versions": versions(),
            "host": host(),
            "sessions": [*self.earlier, self.session],
        }
        self.predictions: dict[
            int, MemoryPrediction
        ] = {}  # configuration index -> its predicted memory, in its records
        self.save()
        self.began = time.monotonic()
        self.streak = BusyStreak(spec.busy_stop_after if spec.executor == "local" else 0)

    def save(self) -> None:
        write_json(self.meta_path, self.meta)

    def records(self) -> list[RunRecord]:
        return read_results(self.results)

    def done(self) -> set[str]:
        """The keys of the runs recorded (an interrupted run is run again, and so is a configuration an earlier
        session refused before it started, where this one does not: its files are there now, say)."""
        return {r["key"] for r in self.records() if r["status"] != "interrupted" and launched(r)}

    def elapsed_s(self) -> float:
        """The sweep's wall time, its earlier sessions included."""
        earlier = sum(float(s.get("wall_s") or 0.0) for s in self.earlier)
        return earlier + time.monotonic() - self.began

    def refuse(self, refused: Sequence[Refused]) -> None:
        """Record each configuration refused before the sweep started, once (a resumed sweep finds them again and
        keeps the records it has): not runs, so the session's count of runs and the busy streak leave them out."""
        said = {r["key"] for r in self.records() if not launched(r)}
        for found in refused:
            record = refused_record(found)
            if record["key"] not in said:
                append_record(self.results, record)

    def execute(self, batch: list[Run], what: str, repeats: str) -> None:
        """Run ``batch``; ``what`` and ``repeats`` say in each progress line which part of the sweep it is and how
        many repeats a configuration gets."""

        def where(run: Run, number: int) -> str:
            return where_text(run, number, len(batch), what, repeats)

        def recorded(record: RunRecord, run: Run, number: int) -> None:
            self.record(record, run, where(run, number), runs_left=len(batch) - number)

        self.executor.execute(batch, recorded, self.progress, where)

    def record(self, record: RunRecord, run: Run, where: str, runs_left: int = 0) -> None:
        """Append a run's record (with its configuration's predicted memory, where there is one), say it, and stop
        (:class:`MachineBusy`) when contention persists."""
        if run.index in self.predictions:
            record["prediction"] = self.predictions[run.index]
        append_record(self.results, record)
        self.session.update({"wall_s": round(time.monotonic() - self.began, 3), "runs": self.session["runs"] + 1})
        self.save()
        self.progress(f"{where} {describe_outcome(record)}")
        if record["status"] == "completed":
            summary: dict[str, Any] = dict(record.get("summary") or {})
            share = (summary.get("contention") or {}).get("foreign_cpu_share")
            reason = self.streak.add(record["contended"], share)
            if reason:
                self.session["stopped"] = {"reason": reason, "runs_left": runs_left}
                self.save()
                raise MachineBusy(
                    f"{reason}; {runs_left} run(s) not started; to finish anyway: --resume {FINISH_ANYWAY}"
                )

    def rerun_contended(self, repeats: str, room: Callable[[int], int] | None = None) -> None:
        """Re-run the runs whose attempts were all contended, up to ``rerun_contended`` times; ``room(n)``: how many
        of ``n`` re-runs a budget leaves room for (all, without one)."""
        for _ in range(self.spec.rerun_contended):
            reruns = contended_reruns(self.spec, self.records(), self.out)
            if room is not None:
                reruns = reruns[: room(len(reruns))]
            if not reruns:
                break
            self.execute(reruns, " re-runs", repeats)
