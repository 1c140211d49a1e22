"""The rendezvous of a spawned launch: node 0 hosts a TCPStore on a socket bound to the rendezvous address only
(127.0.0.1 on one node), other nodes wait until it answers, and every rank joins it as a client, as ranks join
torchrun's agent store. Nothing listens on other interfaces. The store lives in a process of its own
(:class:`RendezvousHost`), so that the launcher forks its ranks from a process without threads.

Example:
    >>> 1024 <= free_port() < 65536
    True
"""

from __future__ import annotations

import contextlib
import datetime
import multiprocessing as mp
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any, cast

import torch.distributed as dist

from ignite_ddl.core.errors import ConfigError, LaunchFailed
from ignite_ddl.launcher.backends import rules
from ignite_ddl.launcher.processes import die_with_parent
from ignite_ddl.launcher.settings import GLOO_INTERFACE_VAR, LaunchPlan, bind_address, needs_named_interface

__all__ = ["RendezvousHost", "agent_store_env", "free_port", "gloo_interface_env", "loopback_interface", "say"]

_KEYS = "ignite_ddl/"  # our keys in the rendezvous store (torch's own live under a prefix of their own)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now (another process may take it before it is used)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def say(message: str) -> None:
    print(f"ignite-ddl: {message}", file=sys.stderr, flush=True)


def _listen(address: str, port: int | None) -> socket.socket:
    """A listening socket on the rendezvous address only (port None: a free one)."""
    family, numeric = bind_address(address)
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


class RendezvousHost:
    """The rendezvous of a spawned launch, kept in a small process of its own, started before any rank: on node 0 it
    hosts the TCPStore (whose server runs threads) and waits until every other node has announced itself; on the
    other nodes it waits for node 0's store and announces its node. The launching process itself then holds no
    thread and no server when it forks its ranks, so no rank can inherit a lock held at fork time.

    Used as a context manager, it yields the plan with its port once the rendezvous is ready; it raises
    :class:`ConfigError` (the address or port cannot be used) or :class:`LaunchFailed` (nodes never came).
    """

    def __init__(self, plan: LaunchPlan):
        self.plan = plan
        self.process: Any = None

    def __enter__(self) -> LaunchPlan:
        methods = mp.get_all_start_methods()
        ctx: Any = mp.get_context("fork" if "fork" in methods else "spawn")
        receiver, sender = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_host, args=(self.plan, sender), name="ignite-ddl-rendezvous", daemon=True)
        self.process.start()
        sender.close()
        try:
            while not receiver.poll(0.5):
                if not self.process.is_alive():
                    raise LaunchFailed(f"the rendezvous ended with status {self.process.exitcode} before it was ready")
            kind, value = receiver.recv()
        except EOFError:
            raise LaunchFailed("the rendezvous ended before it was ready") from None
        except BaseException:
            self._stop()
            raise
        if kind != "ready":
            self._stop()
            raise (ConfigError if kind == "refused" else LaunchFailed)(value)
        return self.plan.with_port(value)

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)


def _host(plan: LaunchPlan, sender: Any) -> None:
    """The rendezvous process: report ("ready", port), ("refused", why) or ("failed", why), then (node 0) keep the
    store up until the launcher ends it."""
    die_with_parent(signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the launcher decides
    timeout = datetime.timedelta(seconds=plan.timeout)
    try:
        if plan.node_rank == 0:
            sock = _listen(plan.master_addr, plan.master_port)
            port = sock.getsockname()[1]
            store = dist.TCPStore(
                plan.master_addr,
                port,
                is_master=True,
                master_listen_fd=sock.fileno(),
                wait_for_workers=False,
                timeout=timeout,
            )
            sock.detach()  # the store owns the socket now
            if plan.nnodes > 1:
                _await_nodes(store, plan, port)
        else:
            port = cast(int, plan.master_port)  # checked when the launch was planned
            _await_store(plan.master_addr, port, plan.timeout)
            store = dist.TCPStore(plan.master_addr, port, is_master=False, timeout=timeout)
            store.set(f"{_KEYS}node/{plan.node_rank}", "1")
    except ConfigError as e:
        sender.send(("refused", str(e)))
        return
    except LaunchFailed as e:
        sender.send(("failed", str(e)))
        return
    sender.send(("ready", port))
    sender.close()
    if plan.node_rank == 0:
        while True:  # until the launcher ends the launch (SIGTERM), or dies (SIGKILL)
            time.sleep(3600)
    del store


@contextlib.contextmanager
def agent_store_env() -> Iterator[None]:
    """While inside, ranks started here join the rendezvous store as clients, as they join torchrun's agent store."""
    saved = {k: os.environ.get(k) for k in ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT")}
    os.environ.update(TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_IFF_LOOPBACK = 0x8  # <linux/if.h>


def loopback_interface() -> str:
    """The name of this machine's loopback interface: the one flagged IFF_LOOPBACK (``lo`` on Linux, ``lo0`` on
    macOS and the BSDs)."""
    names = [name for _, name in socket.if_nameindex()]
    for name in names:
        with contextlib.suppress(OSError, ValueError):
            with open(f"/sys/class/net/{name}/flags") as f:
                if int(f.read().strip(), 16) & _IFF_LOOPBACK:
                    return name
    return next((n for n in ("lo", "lo0") if n in names), "lo")


@contextlib.contextmanager
def gloo_interface_env(plan: LaunchPlan) -> Iterator[None]:
    """While inside, gloo process groups created here (or in ranks started here) bind their sockets to loopback
    when every rank runs on this machine; across machines to the interface the user named in GLOO_SOCKET_IFNAME
    (kept as it is; :func:`~ignite_ddl.launcher.settings.plan_launch` refuses such a run without it)."""
    if plan.backend is None or not rules(plan.backend).socket_interface or needs_named_interface(plan):
        yield
        return
    saved = os.environ.get(GLOO_INTERFACE_VAR)
    os.environ[GLOO_INTERFACE_VAR] = loopback_interface()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(GLOO_INTERFACE_VAR, None)
        else:
            os.environ[GLOO_INTERFACE_VAR] = saved


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
            say(
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
            say(f"waiting for the rendezvous at {address}:{port} (node 0): {reason} ({remaining:.0f} s left)")
            next_report = time.monotonic() + _progress_interval(timeout)
        time.sleep(0.5)
