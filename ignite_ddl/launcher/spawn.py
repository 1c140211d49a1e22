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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp
from ignite.distributed.comp_models.native import _NativeDistModel as NativeDistModel
from ignite.utils import setup_logger
from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

from ignite_ddl.core.errors import Interrupted, LaunchFailed, RunFailed
from ignite_ddl.core.outputs import open_output, write_bytes
from ignite_ddl.launcher import xla
from ignite_ddl.launcher.backends import rules
from ignite_ddl.launcher.processes import STOP_GRACE_S, die_with_parent, out_of_memory, stop_children, wait_children
from ignite_ddl.launcher.rendezvous import RendezvousHost, agent_store_env, gloo_interface_env, say
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
        if plan.apart:
            return _run_serial_apart(fn, plan, args, kwargs)
        with interruptible():
            return _rank_main(0, fn, plan, None, args, kwargs)
    if plan.mode == "env":
        return _run_env(fn, plan, args, kwargs)
    return _run_spawned(fn, plan, args, kwargs)


def _run_serial_apart(fn: Callable, plan: LaunchPlan, args: tuple, kwargs: dict) -> Any:
    """One process, but a forked child of this one: what the run does to its process stays there. A compiled run
    needs it: once torch.compile has run in a process, a backward there makes every process forked from it later
    unable to run backward (:func:`~ignite_ddl.launcher.settings.compiled_here`), so a notebook or a test suite that
    trained a compiled model in its own process could not launch ranks again."""
    ctx = mp.get_context("fork")
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(_private_tempdir())
        result = Path(folder) / "result.pickle"
        stack.enter_context(interruptible(stop=stop_children))
        child = ctx.Process(target=_serial_child, args=(fn, plan, str(result), args, kwargs), name="rank0")
        child.start()
        try:
            child.join()
        except Interrupted:
            wait_children(STOP_GRACE_S + 2)
            raise
        outcome = pickle.loads(result.read_bytes()) if result.exists() else None
    if outcome is None:  # killed, or it ended without a word
        code = child.exitcode or 0
        killed = code < 0 and signal.Signals(-code).name == "SIGKILL"
        message = f"killed by {signal.Signals(-code).name}" if code < 0 else f"the process exited with status {code}"
        message = out_of_memory(message, plan.log_dir, 0, killed) or message
        raise RunFailed(
            0, message, _log_file(plan.log_dir, 0) if _holds_traceback(_log_file(plan.log_dir, 0)) else None
        )
    kind, payload = outcome
    if kind == "failed":
        raise RunFailed(*payload)
    return payload


def _serial_child(fn: Callable, plan: LaunchPlan, result: str, args: tuple, kwargs: dict) -> None:
    """The child of :func:`_run_serial_apart`: the rank's work in a thread started after the fork (OpenMP, see
    :func:`in_fresh_thread`), its value or its failure written for the parent."""
    die_with_parent()
    try:
        value = in_fresh_thread(plan.threads, _rank_main, 0, fn, plan, None, args, kwargs)
    except RunFailed as e:
        write_bytes(result, pickle.dumps(("failed", (e.rank, e.message, e.log_file))))
        return
    write_bytes(result, pickle.dumps(("value", value)))


def _run_env(fn: Callable, plan: LaunchPlan, args: tuple, kwargs: dict) -> Any:
    """This process is one rank started by torchrun / SLURM: join the process group with our timeout."""
    assert plan.backend is not None
    if not rules(plan.backend).external_launch:  # xla-tpu: PJRT joins its replicas itself
        with idist.Parallel(backend=plan.backend):
            return _rank_main(idist.get_local_rank(), fn, plan, None, args, kwargs)
    # idist.Parallel would initialise without a timeout (torch's default: 30 minutes); initialise here instead.
    with gloo_interface_env(plan):
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


# Where a rank is, in shared memory its launcher reads after a failure: running its own code, inside a collective
# (1 + the index of the collective in _COLLECTIVES), or done.
_RUNNING, _DONE = 0, -1
_COLLECTIVES = (
    "barrier",
    "all_reduce",
    "all_gather",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "reduce_scatter",
    "all_to_all",
    "gather",
    "scatter",
    "reduce",
    "send",
    "recv",
)
_TIMED_OUT = ("timed out", "timeout", "time out")
_FOLLOWED = "_ignite_ddl_followed"  # marks a collective _follow_collectives wrapped


@dataclass
class _Shared:
    """Shared memory between a single-node launch and its ranks: whether each has joined its process group, and
    where each is (see _COLLECTIVES)."""

    joined: Any
    positions: Any


def _spawn_once(fn: Callable, plan: LaunchPlan, args: tuple, kwargs: dict) -> Any:
    assert plan.backend is not None  # spawned ranks have a process group
    if not rules(plan.backend).hosts_rendezvous:
        return _spawn_pjrt(fn, plan, args, kwargs)
    clear_stall(plan.log_dir)  # a diagnosis left by an earlier run in this folder is not this run's
    ctx = mp.get_context(plan.start_method)
    nproc = plan.nproc_per_node
    shared = _Shared(ctx.Array("b", nproc, lock=False), ctx.Array("i", nproc, lock=False))
    # Several nodes wait for each other in the rendezvous for as long as --timeout allows: no early restart there.
    watch_s = min(plan.timeout, JOIN_TIMEOUT_S) if plan.nnodes == 1 and rules(plan.backend).join_watch else None
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(_private_tempdir())
        result = Path(folder) / "result.pickle"  # rank 0's return value
        stack.enter_context(interruptible(stop=stop_children))
        try:
            ready = stack.enter_context(RendezvousHost(plan))
            stack.enter_context(agent_store_env())
            stack.enter_context(gloo_interface_env(plan))
            context = torch_mp.start_processes(
                NativeDistModel._dist_worker_task_fn,  # what idist.Parallel runs in each rank
                nprocs=nproc,
                args=(
                    plan.backend,
                    _rank_main,
                    (fn, ready, str(result), args, kwargs, shared),
                    {},
                    plan.world_size,
                    nproc,
                    plan.node_rank,
                    ready.master_addr,
                    ready.master_port,
                    "env://",
                    {"timeout": datetime.timedelta(seconds=plan.timeout)},
                ),
                join=False,
                start_method=plan.start_method,
            )
            _supervise(context, shared, watch_s)
        except Interrupted:
            wait_children(STOP_GRACE_S + 2)
            raise
        except (ProcessRaisedException, ProcessExitedException) as e:
            stop_children()  # the others may still be running (torch stops them too; this reaches their workers)
            raise _failure(e, plan, shared) from None
        if not result.exists():
            return None
        return pickle.loads(result.read_bytes())  # written by this launch's own rank 0, in its private folder


def _supervise(context: Any, shared: _Shared, watch_s: float | None) -> None:
    """Wait for the ranks in this (main) thread: until all have ended, one failed (raises torch's exception), or
    ``watch_s`` passed with a rank still outside its process group (raises _NotJoined)."""
    deadline = time.monotonic() + watch_s if watch_s is not None else None
    while not context.join(timeout=0.1):
        if deadline is None:
            continue
        missing = [rank for rank, joined in enumerate(shared.joined) if not joined]
        if not missing:
            deadline = None
        elif time.monotonic() >= deadline:
            stop_children(wait_s=STOP_GRACE_S)  # no timer thread: the restart forks next
            wait_children(2)
            raise _NotJoined(missing, cast(float, watch_s))


def _failure(e: Exception, plan: LaunchPlan, shared: _Shared) -> Exception:
    """The error a failed launch ends with, naming the rank to blame."""
    stall = read_stall(plan.log_dir)
    if stall is not None:  # a stall watchdog ended the run: the rank that held the others up is the culprit
        return RunFailed(stall["rank"], stall["message"])
    local = cast(int, getattr(e, "error_index", 0))
    rank = plan.node_rank * plan.nproc_per_node + local
    log_file = _log_file(plan.log_dir, rank)
    message = _failure_message(e)
    killed = isinstance(e, ProcessExitedException) and e.signal_name == "SIGKILL"
    message = out_of_memory(message, plan.log_dir, rank, killed) or message
    traceback_file = log_file if _holds_traceback(log_file) else None
    waited = shared.positions[local]
    if any(word in message.lower() for word in _TIMED_OUT) and waited > 0:
        # The rank timed out inside a collective: the ranks of this node that were not in one never reached it.
        absent = [r for r, where in enumerate(shared.positions) if r != local and where == _RUNNING]
        if absent:
            culprit = plan.node_rank * plan.nproc_per_node + absent[0]
            others = [plan.node_rank * plan.nproc_per_node + r for r in absent[1:]]
            also = f" (nor did rank(s) {', '.join(map(str, others))})" if others else ""
            said = (
                f"never reached the collective rank {rank} waited in ({_COLLECTIVES[waited - 1]}){also}; "
                f"rank {rank} failed: {message}"
            )
            return RunFailed(culprit, said, traceback_file)
    return RunFailed(rank, message, traceback_file)


def _spawn_pjrt(fn: Callable, plan: LaunchPlan, args: tuple, kwargs: dict) -> Any:
    """XLA replicas: PJRT starts them (threads of one process on the CPU runtime) and finds its own peers."""
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(_private_tempdir())
        result = Path(folder) / "result.pickle"
        stack.enter_context(interruptible(stop=stop_children))
        try:
            with idist.Parallel(backend=plan.backend, nproc_per_node=plan.nproc_per_node) as parallel:
                parallel.run(_rank_main, fn, plan, str(result), args, kwargs, None)
        except Interrupted:
            wait_children(STOP_GRACE_S + 2)
            raise
        except (ProcessRaisedException, ProcessExitedException) as e:
            stop_children()
            local = cast(int, getattr(e, "error_index", 0))
            log_file = _log_file(plan.log_dir, local)
            raise RunFailed(local, _failure_message(e), log_file if _holds_traceback(log_file) else None) from None
        return pickle.loads(result.read_bytes()) if result.exists() else None


@contextlib.contextmanager
def _private_tempdir() -> Iterator[str]:
    """torch's spawn writes a temporary error file per process and leaves it behind when a rank fails: give it
    a folder of its own and remove it afterwards."""
    # multiprocessing's own temporary folder lives until this process exits and removes itself then: create it
    # now, in the usual place, not in the folder we remove when the launch ends.
    mp_util.get_temp_dir()
    folder = tempfile.mkdtemp(prefix="ignite-ddl-")
    previous, tempfile.tempdir = tempfile.tempdir, folder
    try:
        yield folder
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(folder, ignore_errors=True)


# -- inside each rank


def _rank_main(
    local_rank: int,
    fn: Callable,
    plan: LaunchPlan,
    result: str | None,
    args: tuple,
    kwargs: dict,
    shared: _Shared | None = None,
) -> Any:
    if shared is not None:  # this rank is in the process group; its launcher follows where it is
        shared.joined[local_rank] = 1
        _follow_collectives(shared.positions, local_rank)
    _quiet_ignite_loggers()
    if plan.mode == "spawn" and threading.current_thread() is threading.main_thread():
        # Ctrl-C in a terminal reaches every process of the group: only the launcher decides what to stop, and
        # when it stops a rank with SIGTERM the rank just ends. A launcher killed outright (SIGKILL) takes its
        # ranks with it. (PJRT runs XLA replicas in threads of one process, whose handlers already apply.)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent(signal.SIGKILL)
    rank = idist.get_rank()
    # Rank 0 writes its result from where it ran: pickling tensors runs torch ops, which must not happen in the
    # forked main thread either (see in_fresh_thread).
    work = functools.partial(_call_and_keep, fn, result if rank == 0 else None)
    try:
        # PJRT already runs each XLA replica in a thread started after the fork, with its device set in that thread.
        if (
            plan.mode == "spawn"
            and plan.start_method == "fork"
            and plan.backend is not None
            and rules(plan.backend).fresh_thread_after_fork
        ):
            value = in_fresh_thread(plan.threads, work, local_rank, *args, **kwargs)
        else:
            torch.set_num_threads(plan.threads)
            value = work(local_rank, *args, **kwargs)
    except Exception as e:
        log_file = _log_file(plan.log_dir, rank)
        if log_file is not None:
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(log_file), exist_ok=True)
                with open(open_output(log_file), "a") as f:  # never through a link planted there
                    f.write(traceback.format_exc())
        if plan.mode == "spawn":
            raise  # the parent reads the rank from the failed process's index
        message = f"{type(e).__name__}: {e}"
        message = out_of_memory(message, plan.log_dir, rank) or message
        raise RunFailed(rank, message, log_file if _holds_traceback(log_file) else None) from e
    if shared is not None:
        shared.positions[local_rank] = _DONE
    return value


def _call_and_keep(fn: Callable, result: str | None, *args: Any, **kwargs: Any) -> Any:
    value = fn(*args, **kwargs)
    if result is not None:
        # Plain pickle, by value, to a file of the launch's private folder: the launcher reads it after the ranks
        # ended (a pipe would need a thread reading it while they run).
        write_bytes(result, pickle.dumps(value))
    return value


def _follow_collectives(positions: Any, local_rank: int) -> None:
    """Record in ``positions[local_rank]`` when this rank is inside one of torch.distributed's collectives (left
    set if the collective raised), so that a launcher whose rank timed out in one can tell which ranks never
    reached it. Idist's collectives call these functions; DDP's own all-reduces (C++) are the stall watchdog's."""

    def follow(code: int, collective: Callable) -> Callable:
        @functools.wraps(collective)
        def followed(*args: Any, **kwargs: Any) -> Any:
            positions[local_rank] = code
            value = collective(*args, **kwargs)
            positions[local_rank] = _RUNNING
            return value

        setattr(followed, _FOLLOWED, True)
        return followed

    for code, name in enumerate(_COLLECTIVES, 1):
        original = getattr(dist, name, None)
        if original is not None and not getattr(original, _FOLLOWED, False):  # a forked rank inherits the wrappers
            setattr(dist, name, follow(code, original))


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
