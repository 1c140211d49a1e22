"""Ignite's ``xla-tpu`` backend on torch_xla's PJRT runtime: every version-specific piece of XLA support lives here.

Why this module exists: pytorch-ignite 0.5.5's XLA support was written for torch_xla's XRT runtime. With torch_xla
>= 2.7 (PJRT only) ``xm.xrt_world_size`` is gone (so every ``idist`` call fails once the XLA computation model
starts), ``idist.auto_optim`` raises ``TypeError: super(type, obj)``, ``xmp.spawn`` refuses ``nprocs`` other than 1
or None, ``idist.all_gather`` of objects is not implemented, and the XLA model claims any process that merely imports
torch_xla, starting the runtime there (after which PJRT refuses to spawn). Older torch_xla releases work too where
an API only moved (``xm.mark_step``, ``xm.get_ordinal``, ...). Verified with torch_xla 2.9.0 on its CPU runtime.
Delete this module and the :func:`install` call in ``launcher.launch`` once Ignite's XLA computation model supports
PJRT.

:func:`install` (a no-op without torch_xla) puts :class:`PjrtModel` in place of Ignite's XLA computation model and
wraps three ``idist.auto_*`` helpers and ``DiskSaver``; Ignite's code paths are otherwise unchanged:

- ranks come from ``torch_xla.runtime``; only PJRT replicas join the XLA model (Ignite's claims every process);
- :func:`spawn` starts one replica per local device through PJRT and refuses any other count with a clear message;
  a failing replica is reported as the launcher reports any failed rank;
- collectives are Ignite's, each followed by :func:`sync` so that its graph is executed where it is called; objects
  are gathered pickled, as ``torch.distributed`` does;
- checkpoints: ``DiskSaver`` writes from one rank (Ignite's XLA path can leave an empty file, and takes every
  backend's ranks through ``xm.save``);
- ``auto_optim``: the optimizer's ``step`` first averages gradients over replicas and then launches the step's
  graph, as ``xm.optimizer_step(optimizer, barrier=True)``; ``auto_model`` broadcasts rank 0's parameters (what DDP
  does at wrap time); ``auto_dataloader``'s ``MpDeviceLoader`` forwards ``batch_size``, ``sampler``, ... to its loader.

The CPU PJRT runtime (``PJRT_DEVICE=CPU``, ``CPU_NUM_DEVICES`` devices) runs its replicas as threads of one
process, and XLA:CPU collectives are not supported upstream (pytorch/xla#9089): a collective only completes when every
replica runs the very same executable, while two threads compiling a graph get two executables whose collectives wait
for each other forever. There the replicas compile one at a time (the later ones find the first one's executable in
the cache), a collective's input is computed before it (so that its graph does not depend on the rank), each launch
is waited for before the next one and parameter aliasing is off (a launch that blocks on an execution while holding
the compile lock would keep the other replicas from launching their part of it), the execution pool has a thread per
replica, and the first ``.item()`` is taken one replica at a time (two at once can crash torch_xla). A TPU needs none
of this.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import tempfile
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch
from ignite.distributed import auto as idist_auto
from ignite.distributed import utils as idist_utils
from ignite.distributed.comp_models import xla as ignite_xla
from ignite.handlers.checkpoint import DiskSaver

from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.xla_sync import compile_lock, sync, threaded_cpu, wait

__all__ = [
    "auto_dataloader",
    "auto_model",
    "auto_optim",
    "available",
    "install",
    "local_device_count",
    "replicas",
    "spawn",
    "sync",
    "wait",
]

_XLA_TPU = "xla-tpu"
available = ignite_xla.has_xla_support  # Ignite imported torch_xla successfully

if available:
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_multiprocessing as xmp
    from torch.multiprocessing import ProcessRaisedException
    from torch_xla.distributed.parallel_loader import MpDeviceLoader

    try:
        import torch_xla.runtime as xr
    except ImportError:  # torch_xla < 2.1: ranks from xla_model
        xr = None


def local_device_count(environ: Mapping[str, str] = os.environ) -> int | None:
    """Devices PJRT will find on this host, read without starting the XLA runtime (None where it cannot be told)."""
    kind = environ.get("PJRT_DEVICE", "").split("_")[0]
    if kind == "CPU":
        return int(environ.get("CPU_NUM_DEVICES", "1"))
    if kind in ("TPU", ""):  # PJRT picks the TPU when no device is named and one is there
        try:
            from torch_xla._internal import tpu

            return tpu.num_available_devices() or None
        except Exception:  # not a TPU host, or a torch_xla without this helper
            return None
    return None


def replicas(requested: int | str | None, environ: Mapping[str, str] = os.environ) -> int:
    """The replicas to start on this host: PJRT runs one per local device, so ``requested`` must be None, "all",
    the device count, or 1 (the first device alone); raises :class:`ConfigError` otherwise."""
    if available and torch_xla._XLAC._xla_runtime_is_initialized() and not _in_replica():
        raise ConfigError(
            "this process already uses an XLA device (ignite.utils.manual_seed does), so PJRT cannot start replicas: "
            "launch before touching XLA (restart the notebook kernel)"
        )
    devices = local_device_count(environ)
    if requested in (None, "all") or requested == devices:
        return devices or 1
    if requested == 1:  # one device: spawn() narrows PJRT to it
        return 1
    what = f"{devices} XLA device(s) here" if devices else "an unknown number of XLA devices here"
    hint = " (or set CPU_NUM_DEVICES)" if environ.get("PJRT_DEVICE") == "CPU" else ""
    raise ConfigError(
        f"xla-tpu runs one process per XLA device (PJRT): {requested} asked for, {what}; "
        f"leave the process count out (every device) or ask for 1{hint}"
    )


def spawn(
    fn: Callable,
    args: tuple,
    kwargs_dict: Mapping | None = None,
    nproc_per_node: int | str | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    backend: str = _XLA_TPU,
    start_method: str = "fork",
    **ignored: Any,  # master_addr / master_port: PJRT finds its peers itself
) -> None:
    """Run ``fn(local_rank, *args, **kwargs_dict)`` on every local XLA device, through PJRT.

    A replica that raises writes its traceback and ends its process at once (the others would wait in their next
    collective forever); the failure is raised here as ``ProcessRaisedException`` with the replica's rank.
    """
    if nnodes != 1:
        raise ConfigError("xla-tpu runs on the devices of one host (nnodes 1)")
    one_device = replicas(nproc_per_node) == 1
    with tempfile.TemporaryDirectory(prefix="ignite-ddl-xla-") as failures, _device_limit(one_device):
        try:
            xmp.spawn(_replica, args=(backend, fn, args, kwargs_dict or {}, failures), start_method=start_method)
        except Exception:
            reports = sorted(Path(failures).glob("rank*"), key=lambda p: int(p.name[4:]))
            if not reports:
                raise
            raise ProcessRaisedException(reports[0].read_text(), int(reports[0].name[4:]), os.getpid()) from None


@contextlib.contextmanager
def _device_limit(one_device: bool) -> Iterator[None]:
    """Within the block, PJRT sees one device if ``one_device``: torch_xla's ``<KIND>_NUM_DEVICES`` variable (its
    ``spawn`` takes every device or runs a single one in the calling process, which is no replica)."""
    name = f"{os.environ.get('PJRT_DEVICE', 'TPU').split('_')[0]}_NUM_DEVICES"
    before = os.environ.get(name)
    if one_device:
        os.environ[name] = "1"
    try:
        yield
    finally:
        if one_device:
            if before is None:
                del os.environ[name]
            else:
                os.environ[name] = before


def _replica(_ordinal: int, backend: str, fn: Callable, args: tuple, kwargs: Mapping, failures: str) -> None:
    install()  # a replica started with "spawn" imports this module afresh
    try:
        if threaded_cpu():  # both variables are read when first needed, after this
            os.environ["XLA_ENABLE_PARAM_ALIASING"] = "0"
            # Each replica's execution holds a pool thread while it waits for the others in a collective.
            threads = max(os.cpu_count() or 1, int(os.environ["CPU_NUM_DEVICES"]) + 1)
            os.environ.setdefault("XLA_THREAD_POOL_SIZE", str(threads))
            with compile_lock:  # the first .item() of two threads at once can crash torch_xla (its op counters)
                torch.zeros(1, device=torch_xla.device()).item()
        idist_utils._set_model(PjrtModel.create_from_backend(backend))
        fn(_ordinals()[1], *args, **kwargs)  # Ignite passes the local rank; PJRT gives the global one
    except BaseException:
        Path(failures, f"rank{_ordinals()[0]}").write_text(traceback.format_exc())
        os._exit(1)


def _in_replica() -> bool:
    """Whether this process (thread) is a replica started by PJRT. Ignite's XLA model claims any process where
    torch_xla imports, and asking it for ranks starts the XLA runtime, after which PJRT can no longer spawn."""
    return torch_xla._XLAC._xla_runtime_is_initialized() and torch_xla._XLAC._xla_get_replication_devices_count() > 0


def _ordinals() -> tuple[int, int, int]:
    """(rank, local rank, world size) of this replica."""
    if xr is not None:
        return xr.global_ordinal(), xr.local_ordinal(), xr.world_size()
    return xm.get_ordinal(), xm.get_local_ordinal(), xm.xrt_world_size()


def _local_replicas() -> int:
    if xr is not None:
        return xr.local_device_count() if hasattr(xr, "local_device_count") else xr.addressable_device_count()
    return len(xm.get_xla_supported_devices())


if available:

    class PjrtModel(ignite_xla._XlaDistModel):
        """Ignite's XLA computation model on PJRT (see the module docstring)."""

        @staticmethod
        def create_from_context() -> PjrtModel | None:
            return PjrtModel() if _in_replica() else None

        @staticmethod
        def create_from_backend(backend: str = _XLA_TPU, **kwargs: Any) -> PjrtModel:
            if backend != _XLA_TPU:
                raise ValueError(f"Backend should be one of '{PjrtModel.available_backends}'")
            return PjrtModel(backend=backend, **kwargs)

        def _create_from_backend(self, backend: str, **kwargs: Any) -> None:
            self.barrier()
            self._backend = backend
            self._setup_attrs()

        def _compute_nproc_per_node(self) -> int:
            return _local_replicas()

        def get_rank(self) -> int:
            return _ordinals()[0]

        def get_local_rank(self) -> int:
            return _ordinals()[1]

        def get_world_size(self) -> int:
            return _ordinals()[2]

        spawn = staticmethod(spawn)

        def _do_all_reduce(self, tensor: torch.Tensor, op: str = "SUM", group: Any | None = None) -> torch.Tensor:
            if threaded_cpu():
                sync()  # the collective's graph is then the same on every replica: its input is data
            tensor = super()._do_all_reduce(tensor, op, group)
            sync()
            return tensor

        def _do_all_gather(self, tensor: torch.Tensor, group: Any | None = None) -> torch.Tensor:
            output = torch.zeros((self.get_world_size(), *tensor.shape), dtype=tensor.dtype, device=tensor.device)
            output[self.get_rank()] = tensor
            return self._do_all_reduce(output, "SUM", group).reshape(-1, *tensor.shape[1:])

        def _do_broadcast(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
            if src != self.get_rank():
                tensor.fill_(0)
            return self._do_all_reduce(tensor, "SUM")

        def _do_all_gather_object(self, tensor: Any, group: Any | None = None) -> list[Any]:
            data = torch.frombuffer(bytearray(pickle.dumps(tensor)), dtype=torch.uint8).int()
            sizes = self._do_all_gather(torch.tensor([len(data)], device=self.device()), group).tolist()
            padded = torch.zeros(max(sizes), dtype=torch.int32)
            padded[: len(data)] = data
            rows = self._do_all_gather(padded.to(self.device()), group).cpu().view(len(sizes), -1)
            return [pickle.loads(bytes(row[:size].tolist())) for row, size in zip(rows, sizes)]

        def barrier(self) -> None:
            self._do_all_reduce(torch.zeros(1, device=self.device())).item()  # returns once every replica is there

    class _SyncedStep:
        """Put before an optimizer's class by ``auto_optim`` on XLA: ``xm.optimizer_step(optimizer, barrier=True)``."""

        def step(self, closure: Callable | None = None) -> Any:
            xm.reduce_gradients(self)
            loss = super().step(closure)  # type: ignore[misc]
            sync()
            return loss

    class DeviceLoader(MpDeviceLoader):
        """``MpDeviceLoader`` that answers ``batch_size``, ``sampler``, ``dataset``, ... for the loader it wraps."""

        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):  # unpickling, or a private attribute not set yet
                raise AttributeError(name)
            return getattr(self._loader, name)


_ignite: dict[str, Callable[..., Any]] = {
    "auto_model": idist_auto.auto_model,
    "auto_optim": idist_auto.auto_optim,
    "auto_dataloader": idist_auto.auto_dataloader,
}


def _on_xla() -> bool:
    return idist.backend() == _XLA_TPU


def auto_model(model: torch.nn.Module, sync_bn: bool = False, **kwargs: Any) -> torch.nn.Module:
    model = _ignite["auto_model"](model, sync_bn=sync_bn, **kwargs)
    if _on_xla() and idist.get_world_size() > 1:
        xm.collective_broadcast([*model.parameters(), *model.buffers()])
        sync()
    return model


def auto_optim(optimizer: torch.optim.Optimizer, **kwargs: Any) -> torch.optim.Optimizer:
    if not _on_xla():
        return _ignite["auto_optim"](optimizer, **kwargs)
    if not isinstance(optimizer, _SyncedStep):  # the same object keeps its state and its schedulers
        optimizer.__class__ = type(type(optimizer).__name__, (_SyncedStep, type(optimizer)), {})
    return optimizer


def auto_dataloader(dataset: Any, **kwargs: Any) -> Any:
    loader = _ignite["auto_dataloader"](dataset, **kwargs)
    if isinstance(loader, MpDeviceLoader) and not isinstance(loader, DeviceLoader):
        loader = DeviceLoader(loader._loader, loader._device)
    return loader


def _save_checkpoint(saver: DiskSaver, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None:
    """``DiskSaver.__call__`` writing from ``save_on_rank`` alone. Ignite's saves through ``xm.save`` on every rank of
    any backend once torch_xla is installed (starting the XLA runtime in gloo and nccl ranks), and each XLA replica
    moves a temporary file of its own over the checkpoint while only the master's holds data."""
    if idist.get_rank() == saver.save_on_rank:
        save = functools.partial(xm.save, master_only=False) if _on_xla() else torch.save
        saver._save_func(checkpoint, saver.dirname / filename, save)
    elif _on_xla():
        xm.save(checkpoint, os.devnull)  # older torch_xla releases synchronise the replicas in it


def install() -> None:
    """Put the PJRT model and helpers in place of Ignite's (idempotent; nothing happens without torch_xla)."""
    if not available:
        return
    idist_utils.registered_computation_models = tuple(
        PjrtModel if model is ignite_xla._XlaDistModel else model for model in idist_utils.registered_computation_models
    )
    for name, helper in (("auto_model", auto_model), ("auto_optim", auto_optim), ("auto_dataloader", auto_dataloader)):
        setattr(idist_auto, name, helper)
        setattr(idist, name, helper)
    # Replacing Ignite's method on its class is the point here (see _save_checkpoint); mypy refuses any method
    # assignment, and compares the plain function with the bound method's signature.
    DiskSaver.__call__ = _save_checkpoint  # type: ignore[method-assign, assignment]
