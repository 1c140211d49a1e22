"""Starting the ranks of a distributed run, and nothing else: serially, as spawned processes on one node or several,
or as processes already started by torchrun / SLURM. :func:`launch` takes only distribution settings
(:class:`LaunchSettings`, as ``idist.Parallel`` takes them), validates them before any process starts, runs
``fn(local_rank, *args)`` on every rank and returns rank 0's result; a failure on any rank becomes
:class:`RunFailed` naming that rank.

What it guarantees on top of ``idist.Parallel``:

- **No hang.** Ranks wait for each other at most ``timeout`` seconds (rendezvous and every collective; torch's
  default is 30 minutes). A multi-node launch says which nodes it waits for and gives up after ``timeout``.
- **No listener on the network that need not be.** For spawned ranks the launcher itself hosts the rendezvous
  store on a socket bound to the rendezvous address (127.0.0.1 on one node), and the ranks join it as clients,
  as they would join torchrun's agent store; nothing listens on other interfaces.
- **Signals stop everything.** SIGINT or SIGTERM to the launcher stops every rank and its DataLoader workers
  within seconds and raises :class:`~ignite_ddl.launcher.signals.Interrupted`; ranks ignore the terminal's SIGINT so
  that only the launcher decides.
- **Clean failures.** A rank killed by a signal is reported as such (SIGKILL: out of memory?); torch's
  per-process error files go to a private folder that is removed afterwards.

Example:
    >>> import ignite.distributed as idist
    >>> def hello(local_rank, greeting):
    ...     return {"world_size": idist.get_world_size(), "greeting": greeting}
    >>> launch(hello, LaunchSettings(backend="gloo", nproc_per_node=2), "hi")
    {'world_size': 2, 'greeting': 'hi'}
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import gc
import logging
import multiprocessing as mp
import multiprocessing.util as mp_util
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch
from ignite.utils import setup_logger
from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

from ignite_ddl.core.errors import Interrupted, LaunchFailed, RunFailed
from ignite_ddl.launcher import xla
from ignite_ddl.launcher.backends import rules
from ignite_ddl.launcher.processes import STOP_GRACE_S, out_of_memory, stop_children, wait_children
from ignite_ddl.launcher.rendezvous import rendezvous, say
from ignite_ddl.launcher.settings import LaunchPlan, LaunchSettings, plan_launch
from ignite_ddl.launcher.signals import interruptible
from ignite_ddl.launcher.watchdog import clear_stall, read_stall

__all__ = ["in_fresh_thread", "launch"]

# Spawned ranks of one node join their process group within a second or two (imports included with 'spawn'):
# one that has not after this long never will, and the launch starts again, at most JOIN_ATTEMPTS times in all.
JOIN_TIMEOUT_S = 60.0
JOIN_ATTEMPTS = 2


def launch(fn: Callable[..., Any], settings: LaunchSettings | LaunchPlan, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(local_rank, *args, **kwargs)`` on every rank; return what rank 0 returned.

    Raises :class:`ConfigError` (nothing started), :class:`LaunchFailed` (the ranks could not be brought together),
    :class:`RunFailed` (a rank raised or died) or :class:`~ignite_ddl.launcher.signals.Interrupted` (SIGINT /
    SIGTERM: every rank was stopped). On the nodes other than the first one of a multi-node run the return value
    is None.
    """
    plan = settings if isinstance(settings, LaunchPlan) else plan_launch(settings)
    # Ignite 0.5.5's XLA support on torch_xla's PJRT runtime: installed by a launch, never by an import. Not only
    # for xla-tpu: where torch_xla is installed, Ignite's own XLA model claims every process (and fails on PJRT).
    # Without torch_xla this does nothing.
    xla.install()
    _quiet_ignite_loggers()
    if plan.mode == "serial":
        with interruptible():
            return _rank_main(0, fn, plan, None, args, kwargs)
    if plan.mode == "env":
        return _run_env(fn, plan, args, kwargs)
    return _run_spawned(fn, plan, args, kwargs)


def _run_env(fn: Callable, plan: LaunchPlan, args: tuple, kwargs: dict) -> Any:
    """This process is one rank started by torchrun / SLURM: join the process group with our timeout."""
    assert plan.backend is not None
    if not rules(plan.backend).external_launch:  # xla-tpu: PJRT joins its replicas itself
        with idist.Parallel(backend=plan.backend):
            return _rank_main(idist.get_local_rank(), fn, plan, None, args, kwargs)
    # idist.Parallel would initialise without a timeout (torch's default: 30 minutes); initialise here instead.
    idist.initialize(plan.backend, timeout=datetime.timedelta(seconds=plan.timeout))
    try:
        result = _rank_main(idist.get_local_rank(), fn, plan, None, args, kwargs)
        return result if idist.get_rank() == 0 else None  # as in a spawned run: what rank 0 returned, once
    finally:
        # Destroy the group while the interpreter is fully alive. Engines hold the DDP model (which holds the group)
        # in reference cycles that only the garbage collector frees; left to interpreter shutdown, a gloo worker
        # thread releasing a finished collective's tensors needs the GIL just as it is being torn down, and the
        # process aborts ("terminate called without an active exception").
        gc.collect()
        idist.finalize()


def _run_spawned(fn: Callable, plan: LaunchPlan, args: tuple, kwargs: dict) -> Any:
    for attempt in range(1, JOIN_ATTEMPTS + 1):
        try:
            return _spawn_once(fn, plan, args, kwargs)
        except _NotJoined as e:
            missing = ", ".join(map(str, e.ranks))
            if attempt == JOIN_ATTEMPTS:
                raise LaunchFailed(
                    f"rank(s) {missing} did not join the process group within {e.seconds:g} s, "
                    f"{JOIN_ATTEMPTS} times: nothing ran (is the machine overloaded?)"
                ) from None
            say(
                f"rank(s) {missing} did not join the process group within {e.seconds:g} s: nothing ran yet, "
                "so every rank was stopped and the run starts again"
            )
    raise AssertionError("unreachable")


class _NotJoined(Exception):
    """Some ranks never reached the process group: stopped before anything ran, so the launch can start again."""

    def __init__(self, ranks: list[int], seconds: float):
        super().__init__(ranks)
        self.ranks, self.seconds = ranks, seconds


class _JoinWatch:
    """Stops a single-node launch whose ranks do not all reach the process group within ``seconds``.

    A rank that joined sets its flag in shared memory. Ranks forked from a busy parent have (rarely) been seen to
    stop before joining, leaving the others waiting in the rendezvous until the full ``timeout``; nothing has
    trained at that point, so stopping everyone and starting again loses nothing.
    """

    def __init__(self, ctx: Any, plan: LaunchPlan):
        self.flags = ctx.Array("b", plan.nproc_per_node, lock=False)
        self.seconds = min(plan.timeout, JOIN_TIMEOUT_S)
        self.missing: list[int] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="join-watch", daemon=True)

    def __enter__(self) -> _JoinWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        deadline = time.monotonic() + self.seconds
        while not self._done.wait(0.1):
            if all(self.flags):
                return
            if time.monotonic() >= deadline:
                self.missing = [rank for rank, joined in enumerate(self.flags) if not joined]
                stop_children()
                return


def _spawn_once(fn: Callable, plan: LaunchPlan, args: tuple, kwargs: dict) -> Any:
    ctx = mp.get_context(plan.start_method)
    receiver, sender = ctx.Pipe(duplex=False)
    results: list[Any] = []
    # Rank 0 sends its result through the pipe; reading it while the ranks run keeps a large result from
    # filling the pipe and blocking rank 0 at exit.
    reader = threading.Thread(target=_drain, args=(receiver, results), daemon=True)
    reader.start()
    clear_stall(plan.log_dir)  # a diagnosis left by an earlier run in this folder is not this run's
    # Several nodes wait for each other in the rendezvous for as long as --timeout allows: no early restart there.
    assert plan.backend is not None  # spawned ranks have a process group
    rule = rules(plan.backend)
    watch = _JoinWatch(ctx, plan) if plan.nnodes == 1 and rule.join_watch else None
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_private_tempdir())
            rendezvous_plan = plan
            if rule.hosts_rendezvous:
                rendezvous_plan = stack.enter_context(rendezvous(plan))
            stack.enter_context(interruptible(stop=stop_children))
            if watch is not None:
                stack.enter_context(watch)
            spawn_options: dict[str, Any] = {"timeout": datetime.timedelta(seconds=plan.timeout)}
            with idist.Parallel(
                backend=plan.backend,
                nproc_per_node=plan.nproc_per_node,
                nnodes=plan.nnodes,
                node_rank=plan.node_rank,
                master_addr=rendezvous_plan.master_addr,
                master_port=rendezvous_plan.master_port,
                start_method=plan.start_method,
                **spawn_options,
            ) as parallel:
                flags = None if watch is None else watch.flags
                parallel.run(_rank_main, fn, rendezvous_plan, sender, args, kwargs, flags)
    except Interrupted:
        wait_children(STOP_GRACE_S + 2)
        raise
    except (ProcessRaisedException, ProcessExitedException) as e:
        stop_children()  # the others may still be running (torch stops them too; this reaches their workers)
        if watch is not None and watch.missing:
            wait_children(STOP_GRACE_S + 2)
            raise _NotJoined(watch.missing, watch.seconds) from None
        stall = read_stall(plan.log_dir)
        if stall is not None:  # a stall watchdog ended the run: the rank that held the others up is the culprit
            raise RunFailed(stall["rank"], stall["message"]) from None
        rank = plan.node_rank * plan.nproc_per_node + e.error_index
        log_file = _log_file(plan.log_dir, rank)
        message = _failure_message(e)
        killed = isinstance(e, ProcessExitedException) and e.signal_name == "SIGKILL"
        message = out_of_memory(message, plan.log_dir, rank, killed) or message
        raise RunFailed(rank, message, log_file if _holds_traceback(log_file) else None) from None
    finally:
        sender.close()
        reader.join(timeout=10)
    return results[0] if results else None


def _drain(receiver: Any, results: list[Any]) -> None:
    try:
        while True:
            results.append(pickle.loads(receiver.recv_bytes()))
    except (EOFError, OSError):
        pass


@contextlib.contextmanager
def _private_tempdir() -> Iterator[None]:
    """torch's spawn writes a temporary error file per process and leaves it behind when a rank fails: give it
    a folder of its own and remove it afterwards."""
    # multiprocessing's own temporary folder lives until this process exits and removes itself then: create it
    # now, in the usual place, not in the folder we remove when the launch ends.
    mp_util.get_temp_dir()
    folder = tempfile.mkdtemp(prefix="ignite-ddl-")
    previous, tempfile.tempdir = tempfile.tempdir, folder
    try:
        yield
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(folder, ignore_errors=True)


# -- inside each rank


def _rank_main(
    local_rank: int, fn: Callable, plan: LaunchPlan, sender: Any, args: tuple, kwargs: dict, joined: Any = None
) -> Any:
    if joined is not None:  # this rank is in the process group (see _JoinWatch)
        joined[local_rank] = 1
    _quiet_ignite_loggers()
    if plan.mode == "spawn" and threading.current_thread() is threading.main_thread():
        # Ctrl-C in a terminal reaches every process of the group: only the launcher decides what to stop, and
        # when it stops a rank with SIGTERM the rank just ends (a forked rank inherited the launcher's handler).
        # (PJRT runs XLA replicas in threads of one process, where the process's handlers already apply.)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    rank = idist.get_rank()
    # Rank 0 sends its result from where it ran: pickling tensors runs torch ops, which must not happen in the
    # forked main thread either (see in_fresh_thread).
    work = functools.partial(_call_and_send, fn, sender if rank == 0 else None)
    try:
        # PJRT already runs each XLA replica in a thread started after the fork, with its device set in that thread.
        if (
            plan.mode == "spawn"
            and plan.start_method == "fork"
            and plan.backend is not None
            and rules(plan.backend).fresh_thread_after_fork
        ):
            result = in_fresh_thread(plan.threads, work, local_rank, *args, **kwargs)
        else:
            torch.set_num_threads(plan.threads)
            result = work(local_rank, *args, **kwargs)
    except Exception as e:
        log_file = _log_file(plan.log_dir, rank)
        if log_file is not None:
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(log_file), exist_ok=True)
                with open(log_file, "a") as f:
                    f.write(traceback.format_exc())
        if plan.mode == "spawn":
            raise  # the parent reads the rank from the failed process's index
        message = f"{type(e).__name__}: {e}"
        message = out_of_memory(message, plan.log_dir, rank) or message
        raise RunFailed(rank, message, log_file if _holds_traceback(log_file) else None) from e
    return result


def _call_and_send(fn: Callable, sender: Any, *args: Any, **kwargs: Any) -> Any:
    result = fn(*args, **kwargs)
    if sender is not None:
        # Plain pickle, by value: the pipe's own pickler passes tensors as shared memory that the receiver fetches
        # from this process, which may have exited by then.
        sender.send_bytes(pickle.dumps(result))
    return result


def in_fresh_thread(threads: int, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` in a new thread of this forked process, with ``threads`` intra-op threads.

    GNU OpenMP does not survive fork: if the parent already ran a parallel region (any multi-threaded torch op in
    a notebook, say), the child's main thread hangs at its first parallel region with more than one thread. A
    thread created after the fork starts with its own OpenMP state and does not.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        torch.set_num_threads(threads)
        try:
            outcome["result"] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the main thread, which re-raises it
            outcome["error"] = e

    worker = threading.Thread(target=target, name="rank-main")
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


def _quiet_ignite_loggers() -> None:
    # Ignite logs every loader's kwargs and each launch step at INFO; our own log says what matters.
    for name in ("launcher.Parallel", "auto.auto_dataloader", "auto.auto_model", "auto.auto_optim"):
        setup_logger(f"ignite.distributed.{name}", level=logging.WARNING, distributed_rank=0, reset=True)


def _log_file(log_dir: str | None, rank: int) -> str | None:
    return os.path.join(log_dir, f"rank{rank}.log") if log_dir else None


def _holds_traceback(log_file: str | None) -> bool:
    """Whether a rank's log holds the traceback of its failure (a rank killed by a signal wrote none)."""
    if log_file is None:
        return False
    try:
        return "Traceback (most recent call last)" in Path(log_file).read_text(errors="replace")
    except OSError:
        return False


def _failure_message(e: Exception) -> str:
    if isinstance(e, ProcessExitedException):
        if e.signal_name:
            hint = " (out of memory?)" if e.signal_name == "SIGKILL" else ""
            return f"killed by {e.signal_name}{hint}"
        return f"the process exited with status {e.exit_code} without raising an exception"
    # The child's traceback ends, after its indented frames, with "package.module.ErrorType: message".
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    indented = [i for i, line in enumerate(lines) if line[0].isspace()]
    first = lines[indented[-1] + 1] if indented and indented[-1] + 1 < len(lines) else lines[-1]
    kind, _, message = first.partition(": ")
    return f"{kind.rsplit('.', 1)[-1]}: {message}" if message else first
