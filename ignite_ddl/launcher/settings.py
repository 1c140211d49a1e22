"""What a launch is asked for (:class:`LaunchSettings`: the launch options of a training run, plus where ranks log)
and what it resolves to on this machine (:class:`LaunchPlan`), before any process starts.

Example:
    >>> plan = plan_launch(LaunchSettings(backend="gloo", nproc_per_node=2), cuda_devices=0, environ={})
    >>> plan.mode, plan.backend, plan.world_size, plan.master_addr
    ('spawn', 'gloo', 2, '127.0.0.1')
    >>> plan_launch(LaunchSettings(backend="nccl", nproc_per_node=2), cuda_devices=0, environ={})
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: backend nccl needs CUDA GPUs and none is visible (use gloo on CPU)
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import multiprocessing as mp
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import torch

from ignite_ddl.core.commands import say
from ignite_ddl.core.config import DEFAULT_TIMEOUT_S, LaunchOptions
from ignite_ddl.core.environment import cpu_cores
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import Role, names_with_role, option
from ignite_ddl.launcher import xla
from ignite_ddl.launcher.backends import check_backend, resolve_backend, rules

__all__ = [
    "GLOO_INTERFACE_VAR",
    "compiled_here",
    "bind_address",
    "LaunchPlan",
    "LaunchSettings",
    "launched_externally",
    "needs_named_interface",
    "plan_launch",
    "rank_threads",
]

# gloo's own setting: the interface(s) its per-rank sockets bind to. Left unset, gloo binds to whatever this host's
# name resolves to, which is the LAN address on many machines (seen: "LISTEN 192.0.2.2:40553" for a one-node run).
GLOO_INTERFACE_VAR = "GLOO_SOCKET_IFNAME"


@dataclass(frozen=True, kw_only=True)
class LaunchSettings(LaunchOptions):
    """How to start a run's processes: a training run's launch options (:class:`~ignite_ddl.core.config.
    LaunchOptions`, what ``idist.Parallel`` takes, plus limits) and where a failing rank writes its traceback."""

    log_dir: str | None = option(
        None, "a failing rank appends its traceback to <log_dir>/rank<r>.log", role=Role.OUTPUT, path=True
    )

    @classmethod
    def of(cls, options: LaunchOptions, log_dir: str | None = None) -> LaunchSettings:
        """The launch settings of a run's options (a ``TrainConfig``): its launch fields; ranks log to ``log_dir``,
        else to ``<output_dir>/logs`` where the options have an output folder."""
        fields = {name: getattr(options, name) for name in names_with_role(LaunchOptions, Role.LAUNCH)}
        output_dir = getattr(options, "output_dir", None)
        if log_dir is None and output_dir is not None:
            log_dir = str(Path(output_dir) / "logs")
        return cls(**fields, log_dir=log_dir)


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
    # "serial" in a child process rather than this one: what it runs must not leave this process changed (a
    # compiled run: see ignite_ddl.launcher.spawn._run_serial_apart)
    apart: bool = False

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def with_port(self, port: int) -> LaunchPlan:
        return dataclasses.replace(self, master_port=port)


def launched_externally(environ: Mapping[str, str] = os.environ) -> str | None:
    """'torchrun' or 'slurm' when this process was started as one rank of a distributed job, else None."""
    if all(k in environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return "torchrun"
    if "SLURM_JOB_ID" in environ and "SLURM_PROCID" in environ and int(environ.get("SLURM_NTASKS", "1")) > 1:
        return "slurm"
    return None


def plan_launch(
    settings: LaunchOptions, cuda_devices: int | None = None, environ: Mapping[str, str] = os.environ
) -> LaunchPlan:
    """Resolve backend, process counts, rendezvous and threads; raise :class:`ConfigError` for impossible setups.

    ``settings`` are :class:`LaunchSettings`, or any options with the launch fields (a ``TrainConfig``: its ranks
    log to ``<output_dir>/logs``). ``cuda_devices`` defaults to the GPUs visible here (counted without initialising
    CUDA, so forking stays safe).
    """
    if not isinstance(settings, LaunchSettings):
        settings = LaunchSettings.of(settings)
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

    backend = resolve_backend(settings.backend, world, cuda_devices, environ)
    check_backend(backend, world, nproc, nnodes, cuda_devices, external)
    if backend is not None and rules(backend).runtime_replicas:  # PJRT: every device of the host, or one
        nproc = world = xla.replicas(settings.nproc_per_node, environ)

    mode = "env" if external else ("serial" if backend is None else "spawn")
    start_method = _resolve_start_method(settings.start_method)
    if mode == "spawn" and start_method == "fork" and torch.cuda.is_initialized():
        raise ConfigError(
            "CUDA is already initialised in this process, so forked ranks cannot use it: "
            "launch before touching CUDA (restart the notebook kernel) or use start_method='spawn'"
        )
    if mode == "spawn" and start_method == "fork" and compiled_here():
        raise ConfigError(
            "torch.compile has run in this process, so forked ranks cannot run backward (torch refuses autograd "
            "after such a fork): launch before compiling anything here (restart the notebook kernel) or use "
            "start_method='spawn'"
        )
    master_addr = settings.master_addr or environ.get("MASTER_ADDR", "127.0.0.1")
    cores = cpu_cores()
    threads = rank_threads(settings.threads, nproc)
    first_here = environ.get("LOCAL_RANK", environ.get("SLURM_LOCALID", "0")) == "0"  # one warning per node
    if settings.threads and threads * nproc > cores and first_here:
        # Threads beyond the cores wait for one: each step is slower and noisier (57x slower at 1000 on 2 cores),
        # which no figure of the run says by itself.
        say(
            f"warning: {threads} thread(s) x {nproc} process(es) oversubscribe the {cores} core(s) this process may "
            f"use: steps wait for a core (use --threads {rank_threads(None, nproc)}, or leave it out)"
        )
    plan = LaunchPlan(
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
    socket = plan.backend is not None and rules(plan.backend).socket_interface
    if socket and needs_named_interface(plan) and not environ.get(GLOO_INTERFACE_VAR):
        raise ConfigError(
            f"gloo over several nodes binds to the network interface you name: set {GLOO_INTERFACE_VAR} to the "
            "interface this node reaches the others through (e.g. eth0) on every node"
        )
    return plan


def bind_address(address: str) -> tuple[int, str]:
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


def needs_named_interface(plan: LaunchPlan) -> bool:
    """Whether gloo's ranks talk across machines (several nodes, rendezvous not on a loopback address): then only
    the user knows which interface they share; on one machine loopback is always the right one."""
    if plan.nnodes == 1:
        return False
    with contextlib.suppress(ConfigError):
        _, address = bind_address(plan.master_addr)
        return not ipaddress.ip_address(address).is_loopback
    return True


def rank_threads(threads: int | None, nproc: int) -> int:
    """The intra-op threads each of ``nproc`` ranks on this node gets: ``threads`` where given, else an even share of
    the cores this process may use (at least one)."""
    return threads or max(1, cpu_cores() // nproc)


def compiled_here() -> bool:
    """Whether TorchDynamo has compiled anything in this process. After that, a backward run here leaves autograd
    in a state a forked child inherits and refuses ("Unable to handle autograd's threading in combination with
    fork-based multiprocessing", seen with torch 2.14 even for a forward-only function compiled with the eager
    backend), so ranks must not be forked from it."""
    utils = sys.modules.get("torch._dynamo.utils")
    return utils is not None and int(getattr(utils, "counters", {}).get("frames", {}).get("total", 0)) > 0


def _resolve_start_method(requested: str) -> str:
    if requested != "auto":
        if requested not in mp.get_all_start_methods():
            raise ConfigError(f"start method '{requested}' is not available on {sys.platform}")
        return requested
    # fork starts ranks in milliseconds and works with functions defined in notebooks; macOS makes it unsafe.
    return "fork" if "fork" in mp.get_all_start_methods() and sys.platform != "darwin" else "spawn"
