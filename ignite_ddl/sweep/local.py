"""The local executor: a sweep's runs one after another on this machine, each in a fresh process group with a
wall-time limit, started from a fork server that has already imported torch, Ignite and the trainer
(``start: preloaded``; ``fresh`` runs a new interpreter per run). The fork server never runs a torch operation, so
its forks are safe (see ``launcher.spawn.in_fresh_thread``). A run gets SIGTERM when the sweep ends, however it ends.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from ignite_ddl.core.commands import run_command
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.outputs import open_output
from ignite_ddl.core.sweep_records import RunRecord
from ignite_ddl.launcher.signals import end_with, sigterm_with_parent
from ignite_ddl.measure.contention import CONTENTION_THRESHOLD
from ignite_ddl.sweep.plan import Progress, Recorded, Run, Where
from ignite_ddl.sweep.records import finish_record, new_record

__all__ = ["LocalExecutor", "RunInterrupted", "preloaded_context", "run_one", "start_preloading"]

# Imported once by the fork server, so that runs start without importing the trainer and TensorBoard again.
PRELOAD = ("ignite_ddl.sweep.preload",)


def preloaded_context() -> Any:
    """The fork server's start method, its server importing :data:`PRELOAD` when it starts: every child of it (a
    run, a plan's probe) starts with torch, Ignite and the trainer imported (:mod:`ignite_ddl.sweep.preload`)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def start_preloading() -> None:
    """Start the fork server now, without waiting for it: its imports (about 5 s here) run beside the sweep's own
    planning instead of before its first run or probe."""
    from multiprocessing import forkserver

    preloaded_context()
    try:
        forkserver.ensure_running()
    except OSError:  # its socket's path too long under a deep $TMPDIR: the first run starts it, or says why not
        return


class LocalExecutor:
    """Runs one after another here: each with ``timeout_s``, started as ``start`` says, its contention judged
    against ``threshold``."""

    def __init__(self, timeout_s: float, start: str = "preloaded", threshold: float = CONTENTION_THRESHOLD):
        self.timeout_s, self.start, self.threshold = timeout_s, start, threshold

    def check(self) -> None:
        """Nothing to check before a local sweep starts."""

    def execute(self, runs: Sequence[Run], recorded: Recorded, progress: Progress, where: Where) -> None:
        """Run ``runs`` in order; ``recorded(record, run, number)`` as each ends. Interrupted (SIGINT / SIGTERM),
        the run going is stopped, recorded as interrupted, and the interruption raised."""
        for number, run in enumerate(runs, 1):
            progress(f"{where(run, number)} ...")
            try:
                record = run_one(run, self.timeout_s, self.start, self.threshold)
            except RunInterrupted as stop:
                recorded(stop.record, run, number)
                raise stop.cause from None
            recorded(record, run, number)


class _Started:
    """A run's process, whichever way it was started: wait for it, or take its whole process group down."""

    def __init__(self, run: Run, console: Path, start: str):
        if start == "preloaded":
            self.process: Any = preloaded_context().Process(
                target=_preloaded_main, args=(run.config.to_dict(), str(console), os.getpid()), daemon=False
            )
            self.process.start()
            self.pid = cast(int, self.process.pid)  # started: it has a pid (typed int | None for one not started)
        else:
            with open(open_output(console, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as out:  # never via a link
                cmd = [sys.executable, "-m", "ignite_ddl", "train", *run.config.to_argv()]
                # The run gets SIGTERM when the sweep ends, however it ends (SIGKILL included).
                self.process = subprocess.Popen(
                    cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=sigterm_with_parent
                )
            self.pid = self.process.pid

    def wait(self, timeout: float | None) -> int | None:
        """The exit status (negative: killed by that signal), or None if still running after ``timeout``."""
        if isinstance(self.process, subprocess.Popen):
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
        self.process.join(timeout)
        return self.process.exitcode

    def kill_group(self) -> None:
        """SIGTERM the run's whole process group, SIGKILL what is left after a grace period."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:  # gone, or not yet the leader of its own group
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    return
            if self.wait(5) is not None:
                return


def _preloaded_main(config: dict[str, Any], console: str, sweep_pid: int) -> None:
    """A run started by the fork server: its own session (so it can be killed as a group), output to console,
    and it ends when the sweep does (the fork server, its parent, outlives a sweep killed with SIGKILL)."""
    os.setsid()
    end_with(sweep_pid)
    fd = open_output(console, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # never through a link planted there
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    from ignite_ddl.trainer.run import train_command

    sys.exit(run_command(lambda: train_command(TrainConfig.from_dict(config))))


class RunInterrupted(KeyboardInterrupt):
    """The sweep was interrupted while a run was going: ``record`` says so (status ``interrupted``)."""

    def __init__(self, record: RunRecord, cause: KeyboardInterrupt):
        self.record, self.cause = record, cause
        super().__init__(str(cause))


def run_one(run: Run, timeout_s: float, start: str = "preloaded", threshold: float = CONTENTION_THRESHOLD) -> RunRecord:
    """Train one configuration in a fresh process group; its record for results.jsonl."""
    run_dir = Path(run.config.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    process = _Started(run, run_dir / "console.log", start)
    interrupted: KeyboardInterrupt | None = None
    try:
        code = process.wait(timeout_s)
        if code is None:
            process.kill_group()
    except KeyboardInterrupt as e:  # SIGINT / SIGTERM: take the run's processes down with the sweep, say so
        process.kill_group()
        interrupted, code = e, process.wait(0)
    except BaseException:
        process.kill_group()
        raise
    record = new_record(run, round(time.monotonic() - began, 3), code)
    if interrupted is not None:
        name = getattr(interrupted, "name", "SIGINT")
        record.update(
            {"status": "interrupted", "error": f"the sweep was interrupted by {name}; --resume runs it again"}
        )
        raise RunInterrupted(record, interrupted)
    if code is None:
        record.update({"status": "timeout", "error": f"timed out after {timeout_s:g} s"})
    return finish_record(record, threshold)
