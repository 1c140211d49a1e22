"""The rendezvous of a spawned launch: node 0 hosts a TCPStore on a socket bound to the rendezvous address only
(127.0.0.1 on one node), other nodes wait until it answers, and every rank joins it as a client, as ranks join
torchrun's agent store. Nothing listens on other interfaces.

Example:
    >>> 1024 <= free_port() < 65536
    True
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any, cast

import torch.distributed as dist

from ignite_ddl.core.errors import ConfigError, LaunchFailed
from ignite_ddl.launcher.settings import LaunchPlan

__all__ = ["free_port", "rendezvous", "say"]

_KEYS = "ignite_ddl/"  # our keys in the rendezvous store (torch's own live under a prefix of their own)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now (another process may take it before it is used)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def say(message: str) -> None:
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
def rendezvous(plan: LaunchPlan) -> Iterator[LaunchPlan]:
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
        yield plan.with_port(port)
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
