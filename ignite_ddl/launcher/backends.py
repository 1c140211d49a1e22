"""One computation model per backend, as in Ignite's ``ignite.distributed``: what each process group needs from the
machine, and how the launcher and the trainer treat it. Every rule that differs between gloo, nccl and xla lives
here; the rest of the code asks :func:`rules` instead of comparing backend names.

Example:
    >>> rules("nccl").device, rules("gloo").one_process_per_device, rules("xla-tpu").hosts_rendezvous
    ('cuda', False, False)
    >>> resolve_backend("auto", world=2, cuda_devices=0, environ={})
    'gloo'
    >>> resolve_backend("auto", world=1, cuda_devices=0, environ={}) is None  # one process: no process group
    True
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ignite_ddl.core.errors import ConfigError
from ignite_ddl.launcher.tpu import tpu_available

__all__ = ["Backend", "check_backend", "device_of", "resolve_backend", "rules"]


@dataclass(frozen=True)
class Backend:
    """A process-group backend's rules."""

    name: str
    device: str  # the device type its ranks compute on
    one_process_per_device: bool  # nccl refuses two ranks on one GPU (ncclInvalidUsage)
    external_launch: bool  # may run as ranks started by torchrun / SLURM
    multi_node: bool  # may span several nodes
    hosts_rendezvous: bool  # the launcher hosts the TCPStore rendezvous (PJRT finds its peers itself)
    join_watch: bool  # single-node launches restart ranks that never join (PJRT replicas are threads)
    fresh_thread_after_fork: bool  # forked ranks compute in a thread started after the fork (see in_fresh_thread)
    ddp_bucket_cap: bool  # the model is wrapped in torch's DistributedDataParallel, which takes bucket_cap_mb
    torch_group: bool  # a torch.distributed process group that FSDP2 and ZeroRedundancyOptimizer run on
    # collectives issued from several threads run in the order each rank issues them (NCCL orders them on its
    # stream); gloo needs every rank to issue them in one order
    orders_threaded_collectives: bool
    socket_interface: bool  # binds its sockets to a network interface (GLOO_SOCKET_IFNAME), loopback on one node
    runtime_replicas: bool  # the runtime decides how many replicas a host runs (PJRT: every device of the host)


_TORCH_GROUP = {  # what the two torch.distributed process groups share
    "external_launch": True,
    "multi_node": True,
    "hosts_rendezvous": True,
    "join_watch": True,
    "fresh_thread_after_fork": True,
    "ddp_bucket_cap": True,
    "torch_group": True,
    "runtime_replicas": False,
}
_RULES = {
    "gloo": Backend(
        "gloo",
        "cpu",
        one_process_per_device=False,
        orders_threaded_collectives=False,
        socket_interface=True,
        **_TORCH_GROUP,
    ),
    "nccl": Backend(
        "nccl",
        "cuda",
        one_process_per_device=True,
        orders_threaded_collectives=True,
        socket_interface=False,
        **_TORCH_GROUP,
    ),
    "xla-tpu": Backend(
        "xla-tpu",
        "xla",
        one_process_per_device=True,
        external_launch=False,
        multi_node=False,
        hosts_rendezvous=False,
        join_watch=False,
        fresh_thread_after_fork=False,
        ddp_bucket_cap=False,
        torch_group=False,
        orders_threaded_collectives=True,
        socket_interface=False,
        runtime_replicas=True,
    ),
}


def rules(backend: str) -> Backend:
    """The rules of a resolved backend (gloo, nccl or xla-tpu)."""
    return _RULES[backend]


def device_of(backend: str | None) -> str | None:
    """The device type a backend's ranks compute on; None where ``backend`` names none yet (None, ``auto``,
    ``none``: decided when the run is planned)."""
    return _RULES[backend].device if backend in _RULES else None


def resolve_backend(backend: str, world: int, cuda_devices: int, environ: Mapping[str, str] = os.environ) -> str | None:
    """The backend ``auto`` stands for here (None: one process, no process group)."""
    if backend == "none":
        return None
    if backend != "auto":
        return backend
    if tpu_available(environ):
        return "xla-tpu"
    if world == 1:
        return None
    return "nccl" if cuda_devices > 0 else "gloo"


def check_backend(
    backend: str | None, world: int, nproc: int, nnodes: int, cuda_devices: int, external: str | None
) -> None:
    """Refuse (:class:`ConfigError`) what a backend cannot do on this machine, before any process starts."""
    if backend is None:
        if world > 1:
            raise ConfigError(
                f"backend 'none' runs a single process; use gloo (CPU) or nccl (GPU) for {world} processes"
            )
        return
    rule = rules(backend)
    if rule.device == "cuda":
        if cuda_devices == 0:
            raise ConfigError(f"backend {backend} needs CUDA GPUs and none is visible (use gloo on CPU)")
        if rule.one_process_per_device and nproc > cuda_devices:
            raise ConfigError(
                f"{backend} runs one process per GPU: {nproc} processes asked for, {cuda_devices} GPU(s) visible"
            )
    elif backend == "gloo" and cuda_devices and nproc > cuda_devices:
        # Ignite's native model calls torch.cuda.set_device(local_rank) in every process wherever CUDA is available,
        # whatever the backend: process 1 on a one-GPU machine fails with "invalid device ordinal" (seen on an H200).
        raise ConfigError(
            f"Ignite gives process r of a node the GPU cuda:r: {nproc} processes asked for, {cuda_devices} GPU(s) "
            "visible (hide the GPUs with CUDA_VISIBLE_DEVICES= to run more processes on the CPU)"
        )
    if rule.device == "xla":
        if importlib.util.find_spec("torch_xla") is None:
            raise ConfigError(f"backend {backend} needs torch_xla (see docs/tpu.md)")
        if external or (nnodes > 1 and not rule.multi_node):
            raise ConfigError(
                f"{backend} runs one host's XLA devices, started by ignite-ddl itself (not torchrun/SLURM)"
            )
