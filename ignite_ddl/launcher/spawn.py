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
import importlib.util
import ipaddress
import logging
import math
import multiprocessing as mp
import multiprocessing.util as mp_util
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import torch
import torch.distributed as dist
from ignite.utils import setup_logger
from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

from ignite_ddl.core.config import BACKENDS, START_METHODS, ConfigError
from ignite_ddl.core.environment import cpu_cores
from ignite_ddl.core.errors import LaunchFailed, RunFailed
from ignite_ddl.launcher import xla
from ignite_ddl.launcher.signals import Interrupted, interruptible
from ignite_ddl.launcher.tpu import tpu_available
from ignite_ddl.launcher.watchdog import clear_stall, read_stall
from ignite_ddl.measure.contention import process_tree_pids

__all__ = [
    "LaunchFailed",
    "LaunchPlan",
    "LaunchSettings",
    "RunFailed",
    "free_port",
    "in_fresh_thread",
    "launch",
    "launched_externally",
    "plan_launch",
]

DEFAULT_TIMEOUT_S = 300.0
STOP_GRACE_S = 3.0  # after SIGTERM, what is left of a stopped rank gets SIGKILL
# Spawned ranks of one node join their process group within a second or two (imports included with 'spawn'):
# one that has not after this long never will, and the launch starts again, at most JOIN_ATTEMPTS times in all.
JOIN_TIMEOUT_S = 60.0
JOIN_ATTEMPTS = 2
_KEYS = "ignite_ddl/"  # our keys in the rendezvous store (torch's own live under a prefix of their own)


@dataclass(frozen=True)
class LaunchSettings:
    """How to start a run's processes: distribution settings only (what ``idist.Parallel`` takes, plus limits)."""

    backend: str = "auto"  # none | gloo | nccl | xla-tpu | auto
    nproc_per_node: int | None = None  # processes to spawn on this node (None: 1, or PJRT's device count)
    nnodes: int = 1
    node_rank: int | None = None
    master_addr: str | None = None  # default 127.0.0.1 on a single node
    master_port: int | None = None  # default: a free port on a single node
    start_method: str = "auto"  # auto (fork where available) | fork | spawn | forkserver
    threads: int | None = None  # intra-op CPU threads per process (default: cores / processes on this node)
    timeout: float = DEFAULT_TIMEOUT_S  # seconds ranks wait for each other: rendezvous, nodes, collectives
    log_dir: str | None = None  # a failing rank appends its traceback to <log_dir>/rank<r>.log

    def check(self) -> None:
        """Refuse values that are wrong whatever the machine."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown backend '{self.backend}' (choose from: {', '.join(BACKENDS)})")
        if self.start_method not in START_METHODS:
            raise ConfigError(f"unknown start_method '{self.start_method}' (choose from: {', '.join(START_METHODS)})")
        for name in ("nproc_per_node", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        if self.nnodes < 1:
            raise ConfigError(f"nnodes must be >= 1, got {self.nnodes}")
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ConfigError(f"timeout must be a positive number of seconds, got {self.timeout}")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise ConfigError(f"master_port must be between 1 and 65535, got {self.master_port}")
        if self.node_rank is not None and not 0 <= self.node_rank < self.nnodes:
            raise ConfigError(
                f"node_rank must be in [0, {self.nnodes - 1}] for nnodes={self.nnodes}, got {self.node_rank}"
            )
        if self.master_addr is not None and not self.master_addr.strip():
            raise ConfigError("master_addr must not be empty")


@dataclass(frozen=True)
class LaunchPlan:
    """How a run is launched, resolved from :class:`LaunchSettings` and the machine before anything starts."""

    mode: str  # "serial": this process alone; "spawn": start processes here; "env": started by torchrun / SLURM
    backend: str | None  # None when serial
    nproc_per_node: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int | None
    start_method: str
    threads: int  # intra-op threads per process
    timeout: float = DEFAULT_TIMEOUT_S
    log_dir: str | None = None
    cuda_devices: int = 0
    launcher: str | None = field(default=None)  # "torchrun" or "slurm" in env mode

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


def launched_externally(environ: Mapping[str, str] = os.environ) -> str | None:
    """'torchrun' or 'slurm' when this process was started as one rank of a distributed job, else None."""
    if all(k in environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return "torchrun"
    if "SLURM_JOB_ID" in environ and "SLURM_PROCID" in environ and int(environ.get("SLURM_NTASKS", "1")) > 1:
        return "slurm"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def plan_launch(
    settings: LaunchSettings, cuda_devices: int | None = None, environ: Mapping[str, str] = os.environ
) -> LaunchPlan:
    """Resolve backend, process counts, rendezvous and threads; raise :class:`ConfigError` for impossible setups.

    ``cuda_devices`` defaults to the GPUs visible here (counted without initialising CUDA, so forking stays safe).
    """
    settings.check()
    if cuda_devices is None:
        cuda_devices = torch.cuda.device_count()
    external = launched_externally(environ)
    if external:
        if settings.nproc_per_node is not None or settings.nnodes != 1 or settings.node_rank is not None:
            raise ConfigError(
                f"started by {external}: process counts and node rank come from {external}, do not pass them"
            )
        world = int(environ["WORLD_SIZE"] if external == "torchrun" else environ["SLURM_NTASKS"])
        nproc = int(environ.get("LOCAL_WORLD_SIZE", environ.get("SLURM_NTASKS_PER_NODE", world)))
        nnodes, node_rank = max(1, world // nproc), int(environ.get("GROUP_RANK", environ.get("SLURM_NODEID", 0)))
    else:
        nproc, nnodes = settings.nproc_per_node or 1, settings.nnodes
        world = nproc * nnodes
        if nnodes > 1 and (settings.node_rank is None or settings.master_addr is None or settings.master_port is None):
            raise ConfigError("nnodes > 1 needs --node-rank, --master-addr and --master-port on every node")
        node_rank = settings.node_rank or 0

    backend = _resolve_backend(settings.backend, world, cuda_devices, environ)
    if backend is None and world > 1:
        raise ConfigError(f"backend 'none' runs a single process; use gloo (CPU) or nccl (GPU) for {world} processes")
    if backend == "nccl":
        if cuda_devices == 0:
            raise ConfigError("backend nccl needs CUDA GPUs and none is visible (use gloo on CPU)")
        if nproc > cuda_devices:
            raise ConfigError(
                f"nccl runs one process per GPU: {nproc} processes asked for, {cuda_devices} GPU(s) visible "
                "(use gloo to put several processes on one device)"
            )
    if backend == "xla-tpu":
        if importlib.util.find_spec("torch_xla") is None:
            raise ConfigError("backend xla-tpu needs torch_xla (see README, section TPU)")
        if external or nnodes > 1:
            raise ConfigError("xla-tpu runs one host's XLA devices, started by ignite-ddl itself (not torchrun/SLURM)")
        nproc = world = xla.replicas(settings.nproc_per_node, environ)

    mode = "env" if external else ("serial" if backend is None else "spawn")
    start_method = _resolve_start_method(settings.start_method)
    if mode == "spawn" and start_method == "fork" and torch.cuda.is_initialized():
        raise ConfigError(
            "CUDA is already initialised in this process, so forked ranks cannot use it: "
            "launch before touching CUDA (restart the notebook kernel) or use start_method='spawn'"
        )
    master_addr = settings.master_addr or environ.get("MASTER_ADDR", "127.0.0.1")
    threads = settings.threads or max(1, cpu_cores() // nproc)
    return LaunchPlan(
        mode,
        backend,
        nproc,
        nnodes,
        node_rank,
        master_addr,
        settings.master_port,
        start_method,
        threads,
        settings.timeout,
        settings.log_dir,
        cuda_devices,
        external,
    )


def _resolve_backend(backend: str, world: int, cuda_devices: int, environ: Mapping[str, str]) -> str | None:
    if backend == "none":
        return None
    if backend != "auto":
        return backend
    if tpu_available(environ):
        return "xla-tpu"
    if world == 1:
        return None
    return "nccl" if cuda_devices > 0 else "gloo"


def _resolve_start_method(requested: str) -> str:
    if requested != "auto":
        if requested not in mp.get_all_start_methods():
            raise ConfigError(f"start method '{requested}' is not available on {sys.platform}")
        return requested
    # fork starts ranks in milliseconds and works with functions defined in notebooks; macOS makes it unsafe.
    return "fork" if "fork" in mp.get_all_start_methods() and sys.platform != "darwin" else "spawn"


# -- running


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
    if plan.backend == "xla-tpu":
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
            _say(
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
                _stop_children()
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
    watch = _JoinWatch(ctx, plan) if plan.nnodes == 1 and plan.backend != "xla-tpu" else None
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_private_tempdir())
            rendezvous = plan
            if plan.backend != "xla-tpu":
                rendezvous = stack.enter_context(_rendezvous(plan))
            stack.enter_context(interruptible(stop=_stop_children))
            if watch is not None:
                stack.enter_context(watch)
            spawn_options: dict[str, Any] = {"timeout": datetime.timedelta(seconds=plan.timeout)}
            with idist.Parallel(
                backend=plan.backend,
                nproc_per_node=plan.nproc_per_node,
                nnodes=plan.nnodes,
                node_rank=plan.node_rank,
                master_addr=rendezvous.master_addr,
                master_port=rendezvous.master_port,
                start_method=plan.start_method,
                **spawn_options,
            ) as parallel:
                flags = None if watch is None else watch.flags
                parallel.run(_rank_main, fn, rendezvous, sender, args, kwargs, flags)
    except Interrupted:
        _wait_children(STOP_GRACE_S + 2)
        raise
    except (ProcessRaisedException, ProcessExitedException) as e:
        _stop_children()  # the others may still be running (torch stops them too; this reaches their workers)
        if watch is not None and watch.missing:
            _wait_children(STOP_GRACE_S + 2)
            raise _NotJoined(watch.missing, watch.seconds) from None
        stall = read_stall(plan.log_dir)
        if stall is not None:  # a stall watchdog ended the run: the rank that held the others up is the culprit
            raise RunFailed(stall["rank"], stall["message"]) from None
        rank = plan.node_rank * plan.nproc_per_node + e.error_index
        log_file = _log_file(plan.log_dir, rank)
        raise RunFailed(rank, _failure_message(e), log_file if _holds_traceback(log_file) else None) from None
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


def _stop_children() -> None:
    """SIGTERM every process this launcher started, and their descendants (DataLoader workers); SIGKILL what is
    left after a grace period (from a timer thread: this may run inside a signal handler)."""
    # A live child has been started, so it has a pid (typed int | None for a process not started yet).
    pids = [pid for child in mp.active_children() for pid in process_tree_pids(cast(int, child.pid))]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

    def finish() -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    if pids:
        timer = threading.Timer(STOP_GRACE_S, finish)
        timer.daemon = True
        timer.start()


def _wait_children(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for child in mp.active_children():
        child.join(max(0.0, deadline - time.monotonic()))


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


# -- rendezvous


def _say(message: str) -> None:
    print(f"ignite-ddl: {message}", file=sys.stderr, flush=True)


def _bind_address(address: str) -> tuple[int, str]:
    """(address family, numeric address) to listen on for ``address`` (a name resolves to its first address)."""
    try:
        ip = ipaddress.ip_address(address)
        return (socket.AF_INET6 if ip.version == 6 else socket.AF_INET), str(ip)
    except ValueError:
        pass
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise ConfigError(f"cannot resolve the rendezvous address '{address}': {e.strerror}") from None
    return family, cast(str, sockaddr[0])  # an IPv4 or IPv6 address: the host is a string (typed str | int)


def _listen(address: str, port: int | None) -> socket.socket:
    """A listening socket on the rendezvous address only (port None: a free one)."""
    family, numeric = _bind_address(address)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((numeric, port or 0))
        sock.listen(1024)
    except OSError as e:
        sock.close()
        if e.errno == 98:  # EADDRINUSE
            message = f"port {port} on {address} is in use (another run?): choose another --master-port"
            raise ConfigError(message) from None
        raise ConfigError(
            f"cannot listen on {address}:{port or 0} ({e.strerror}): on node 0, --master-addr must be an address "
            "of this machine"
        ) from None
    return sock


@contextlib.contextmanager
def _rendezvous(plan: LaunchPlan) -> Iterator[LaunchPlan]:
    """Host (node 0) or reach (other nodes) the rendezvous store, wait until every node is there, and let the
    ranks join the store as clients, the way torchrun's agent store works. Yields the plan with its port."""
    timeout = datetime.timedelta(seconds=plan.timeout)
    if plan.node_rank == 0:
        sock = _listen(plan.master_addr, plan.master_port)
        port = sock.getsockname()[1]
        try:
            store = dist.TCPStore(
                plan.master_addr,
                port,
                is_master=True,
                master_listen_fd=sock.fileno(),
                wait_for_workers=False,
                timeout=timeout,
            )
        except BaseException:
            sock.close()
            raise
        sock.detach()  # the store owns the socket now, and closes it when it goes
        if plan.nnodes > 1:
            _await_nodes(store, plan, port)
    else:
        port = plan.master_port
        assert port is not None
        _await_store(plan.master_addr, port, plan.timeout)
        store = dist.TCPStore(plan.master_addr, port, is_master=False, timeout=timeout)
        store.set(f"{_KEYS}node/{plan.node_rank}", "1")
    saved = {k: os.environ.get(k) for k in ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT")}
    os.environ.update(TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
    try:
        yield LaunchPlan(**{**plan.__dict__, "master_port": port})
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        del store


def _progress_interval(timeout: float) -> float:
    return max(1.0, min(10.0, timeout / 3))


def _await_nodes(store: Any, plan: LaunchPlan, port: int) -> None:
    """Node 0: wait until every other node has announced itself in the store, saying who is awaited."""
    where = f"{plan.master_addr}:{port}"
    deadline = time.monotonic() + plan.timeout
    next_report = time.monotonic()
    while True:
        missing = [n for n in range(1, plan.nnodes) if not store.check([f"{_KEYS}node/{n}"])]
        if not missing:
            return
        now = time.monotonic()
        if now >= deadline:
            raise LaunchFailed(
                f"node(s) {', '.join(map(str, missing))} of {plan.nnodes} did not join the rendezvous at {where} "
                f"within {plan.timeout:g} s (--timeout); start them with --node-rank N --master-addr "
                f"{plan.master_addr} --master-port {port}"
            )
        if now >= next_report:
            present = plan.nnodes - len(missing)
            _say(
                f"waiting for nodes at {where}: {present} of {plan.nnodes} present, missing node(s) "
                f"{', '.join(map(str, missing))} ({deadline - now:.0f} s left)"
            )
            next_report = now + _progress_interval(plan.timeout)
        time.sleep(0.2)


def _await_store(address: str, port: int, timeout: float) -> None:
    """Other nodes: wait until node 0's rendezvous accepts connections (plain sockets: no C++ retry warnings)."""
    deadline = time.monotonic() + timeout
    next_report = time.monotonic() + 2.0
    reason = ""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LaunchFailed(
                f"cannot reach the rendezvous at {address}:{port} within {timeout:g} s (--timeout): {reason}; "
                "is node 0 started, and are --master-addr and --master-port right?"
            )
        try:
            with socket.create_connection((address, port), timeout=min(2.0, remaining)):
                return
        except OSError as e:
            reason = e.strerror or str(e) or type(e).__name__
        if time.monotonic() >= next_report:
            _say(f"waiting for the rendezvous at {address}:{port} (node 0): {reason} ({remaining:.0f} s left)")
            next_report = time.monotonic() + _progress_interval(timeout)
        time.sleep(0.5)


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
        if plan.mode == "spawn" and plan.start_method == "fork" and plan.backend != "xla-tpu":
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
        raise RunFailed(rank, f"{type(e).__name__}: {e}", log_file if _holds_traceback(log_file) else None) from e
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
