"""One launcher for every backend: serial, spawned processes (one node or several), or processes started by
torchrun / SLURM. It validates the whole setup before any process starts, runs ``fn(local_rank, config)`` through
``idist.Parallel`` and turns a failure on any rank into :class:`RunFailed` naming that rank.

Example:
    >>> import ignite.distributed as idist
    >>> from ignite_ddl import TrainConfig, launch
    >>> def hello(local_rank, config):
    ...     return {"world_size": idist.get_world_size()}
    >>> launch(hello, TrainConfig(backend="gloo", nproc_per_node=2, output_dir="/tmp/hello"))
    {'world_size': 2}
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import multiprocessing as mp
import os
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch
from ignite.utils import setup_logger
from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

from ignite_ddl import xla
from ignite_ddl.checkpoint import check_checkpoint
from ignite_ddl.config import ConfigError, TrainConfig
from ignite_ddl.data import check_dataset
from ignite_ddl.environment import cpu_cores
from ignite_ddl.models import check_model

xla.install()  # Ignite 0.5.5's XLA support on torch_xla's PJRT runtime (nothing happens without torch_xla)


class RunFailed(RuntimeError):
    """A launched run ended with an error on one rank."""

    def __init__(self, rank: int, message: str, log_file: str | None = None):
        self.rank, self.message, self.log_file = rank, message, log_file
        detail = f" (traceback in {log_file})" if log_file else ""
        super().__init__(f"rank {rank} failed: {message}{detail}")


@dataclass(frozen=True)
class LaunchPlan:
    """How a run is launched, resolved from a config and the machine before anything starts."""

    mode: str  # "serial": this process alone; "spawn": start processes here; "env": started by torchrun / SLURM
    backend: str | None  # None when serial
    nproc_per_node: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int | None
    start_method: str
    threads: int  # intra-op threads per process

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


def tpu_available(environ: Mapping[str, str] = os.environ) -> bool:
    if importlib.util.find_spec("torch_xla") is None:
        return False
    # TPU v2-v4 show as /dev/accel*, v5e and later as VFIO devices.
    on_tpu = Path("/dev/accel0").exists() or any(Path("/dev/vfio").glob("[0-9]*"))
    return environ.get("PJRT_DEVICE") == "TPU" or on_tpu or "COLAB_TPU_ADDR" in environ


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def plan_launch(
    config: TrainConfig, cuda_devices: int | None = None, environ: Mapping[str, str] = os.environ
) -> LaunchPlan:
    """Resolve backend, process counts, rendezvous and threads; raise :class:`ConfigError` for impossible setups.

    ``cuda_devices`` defaults to the GPUs visible here (counted without initialising CUDA, so forking stays safe).
    """
    config.check()
    if cuda_devices is None:
        cuda_devices = torch.cuda.device_count()
    external = launched_externally(environ)
    if external:
        if config.nproc_per_node is not None or config.nnodes != 1 or config.node_rank is not None:
            raise ConfigError(
                f"started by {external}: process counts and node rank come from {external}, do not pass them"
            )
        world = int(environ["WORLD_SIZE"] if external == "torchrun" else environ["SLURM_NTASKS"])
        nproc = int(environ.get("LOCAL_WORLD_SIZE", environ.get("SLURM_NTASKS_PER_NODE", world)))
        nnodes, node_rank = max(1, world // nproc), int(environ.get("GROUP_RANK", environ.get("SLURM_NODEID", 0)))
    else:
        nproc, nnodes = config.nproc_per_node or 1, config.nnodes
        world = nproc * nnodes
        if nnodes > 1 and (config.node_rank is None or config.master_addr is None or config.master_port is None):
            raise ConfigError("nnodes > 1 needs --node-rank, --master-addr and --master-port on every node")
        node_rank = config.node_rank or 0

    backend = _resolve_backend(config.backend, world, cuda_devices, environ)
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
        nproc = world = xla.replicas(config.nproc_per_node, environ)
    if config.batch_size < world:
        raise ConfigError(f"batch_size is the global batch: {config.batch_size} cannot be split over {world} processes")
    if config.amp == "fp16" and cuda_devices == 0:
        raise ConfigError("amp fp16 needs a CUDA GPU (use --amp bf16 on CPU)")

    mode = "env" if external else ("serial" if backend is None else "spawn")
    start_method = _resolve_start_method(config.start_method)
    if mode == "spawn" and start_method == "fork" and torch.cuda.is_initialized():
        raise ConfigError(
            "CUDA is already initialised in this process, so forked ranks cannot use it: "
            "launch before touching CUDA (restart the notebook kernel) or use start_method='spawn'"
        )
    master_addr = config.master_addr or environ.get("MASTER_ADDR", "127.0.0.1")
    master_port = config.master_port
    if mode == "spawn" and master_port is None:
        master_port = free_port(master_addr)
    threads = config.threads or max(1, cpu_cores() // nproc)
    return LaunchPlan(mode, backend, nproc, nnodes, node_rank, master_addr, master_port, start_method, threads)


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


def prepare(config: TrainConfig, cuda_devices: int | None = None) -> LaunchPlan:
    """Every check that can be made before starting processes; creates the output directory last."""
    plan = plan_launch(config, cuda_devices)
    check_dataset(config)
    check_model(config.model)
    if config.resume is not None:
        check_checkpoint(config.resume, config)
    _check_writable(Path(config.output_dir))
    return plan


def _check_writable(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"output directory '{path}' is not writable: {e.strerror or e}") from None


def launch(fn: Callable[..., Any], config: TrainConfig, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(local_rank, config, *args, **kwargs)`` on every rank; return what rank 0 returned.

    Raises :class:`ConfigError` (nothing started) or :class:`RunFailed` (a rank raised or died). On the nodes other
    than the first one of a multi-node run the return value is None.
    """
    plan = prepare(config)
    _quiet_ignite_loggers()
    if plan.mode != "spawn":
        with idist.Parallel(backend=plan.backend):
            return _rank_main(idist.get_local_rank(), fn, plan, config, None, args, kwargs)

    ctx = mp.get_context(plan.start_method)
    receiver, sender = ctx.Pipe(duplex=False)
    results: list[Any] = []
    # Rank 0 sends its result through the pipe; reading it while the ranks run keeps a large result from
    # filling the pipe and blocking rank 0 at exit.
    reader = threading.Thread(target=_drain, args=(receiver, results), daemon=True)
    reader.start()
    try:
        with idist.Parallel(
            backend=plan.backend,
            nproc_per_node=plan.nproc_per_node,
            nnodes=plan.nnodes,
            node_rank=plan.node_rank,
            master_addr=plan.master_addr,
            master_port=plan.master_port,
            start_method=plan.start_method,
        ) as parallel:
            parallel.run(_rank_main, fn, plan, config, sender, args, kwargs)
    except (ProcessRaisedException, ProcessExitedException) as e:
        rank = plan.node_rank * plan.nproc_per_node + e.error_index
        raise RunFailed(rank, _failure_message(e), _log_file(config.output_dir, rank)) from None
    finally:
        sender.close()
        reader.join(timeout=10)
    return results[0] if results else None


def _drain(receiver: Any, results: list[Any]) -> None:
    try:
        while True:
            results.append(receiver.recv())
    except (EOFError, OSError):
        pass


_active_plan: LaunchPlan | None = None


def active_plan() -> LaunchPlan | None:
    """The plan this rank was launched with (None outside :func:`launch`)."""
    return _active_plan


def _rank_main(
    local_rank: int, fn: Callable, plan: LaunchPlan, config: TrainConfig, sender: Any, args: tuple, kwargs: dict
) -> Any:
    global _active_plan
    _active_plan = plan
    _quiet_ignite_loggers()
    rank = idist.get_rank()
    # Rank 0 sends its result from where it ran: pickling tensors runs torch ops, which must not happen in the
    # forked main thread either (see in_fresh_thread).
    work = functools.partial(_call_and_send, fn, sender if rank == 0 else None)
    try:
        # PJRT already runs each XLA replica in a thread started after the fork, with its device set in that thread.
        if plan.mode == "spawn" and plan.start_method == "fork" and plan.backend != "xla-tpu":
            result = in_fresh_thread(plan.threads, work, local_rank, config, *args, **kwargs)
        else:
            torch.set_num_threads(plan.threads)
            result = work(local_rank, config, *args, **kwargs)
    except Exception as e:
        log_file = _log_file(config.output_dir, rank)
        os.makedirs(os.path.dirname(log_file), exist_ok=True)
        with open(log_file, "a") as f:
            f.write(traceback.format_exc())
        if plan.mode == "spawn":
            raise  # the parent reads the rank from the failed process's index
        raise RunFailed(rank, f"{type(e).__name__}: {e}", log_file) from e
    return result


def _call_and_send(fn: Callable, sender: Any, *args: Any, **kwargs: Any) -> Any:
    result = fn(*args, **kwargs)
    if sender is not None:
        sender.send(result)
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


def _log_file(output_dir: str, rank: int) -> str:
    return os.path.join(output_dir, "logs", f"rank{rank}.log")


def _failure_message(e: Exception) -> str:
    if isinstance(e, ProcessExitedException):
        how = f"signal {e.signal_name}" if e.signal_name else f"exit code {e.exit_code}"
        return f"process exited with {how}"
    # The child's traceback ends, after its indented frames, with "package.module.ErrorType: message".
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    indented = [i for i, line in enumerate(lines) if line[0].isspace()]
    first = lines[indented[-1] + 1] if indented and indented[-1] + 1 < len(lines) else lines[-1]
    kind, _, message = first.partition(": ")
    return f"{kind.rsplit('.', 1)[-1]}: {message}" if message else first
