"""raw-vs-ignite: the PyTorch DDP tutorial's program written twice, with raw ``torch.distributed`` and with Ignite.

What it teaches: DistributedDataParallel runs one process per device and keeps one model replica per process,
replicated once (rank 0's weights are broadcast when the model is wrapped); during backward it all-reduces the
gradients in buckets, overlapped with the rest of the backward pass, so every replica takes the same step. Raw DDP
asks for more code than DataParallel's one line: starting the processes, the rendezvous, the process group and its
teardown, and a DistributedSampler so that each process reads its own shard. ``ignite.distributed`` (``idist``)
does those parts: ``auto_model`` wraps in DDP, ``auto_dataloader`` shards the global batch, ``auto_optim`` adapts the
optimizer where a backend needs it, and ``idist.Parallel`` (here through ``ignite_ddl.launch``) starts the processes
with the process group set up and torn down, on any backend.

Both sides train the tutorial's ToyModel (Linear 10->10, ReLU, Linear 10->5) with MSE loss and SGD on the same
unshuffled regression data, with the same global batch; the lab checks that they reach the same weights and counts
the lines of each side's code (non-blank, neither comment nor docstring, counted by :func:`code_lines` on the
functions' source). The raw side always runs gloo on CPU, as the tutorial does; the Ignite side runs on the backend
asked for, unchanged.

Example:
    ignite-ddl raw-vs-ignite --nproc-per-node 2

or from Python: ``raw_vs_ignite.run(nproc_per_node=2)``.
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from ignite.engine import create_supervised_trainer
from torch import nn, optim
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ignite_ddl.core.config import LaunchOptions, TrainConfig
from ignite_ddl.core.environment import cpu_cores
from ignite_ddl.core.options import Role, option, option_like
from ignite_ddl.core.text import format_table
from ignite_ddl.labs import LabLaunchOptions, LabResult, at_least, check, format_checks, lab_logs, split_evenly
from ignite_ddl.labs._weights import max_abs_diff
from ignite_ddl.launcher.rendezvous import free_port
from ignite_ddl.launcher.settings import LaunchSettings, plan_launch
from ignite_ddl.launcher.spawn import in_fresh_thread, launch
from ignite_ddl.trainer.models import ToyModel

__all__ = [
    "CLAIM",
    "HELP",
    "LR",
    "NAME",
    "SEED",
    "Options",
    "Result",
    "code_lines",
    "format_result",
    "ignite_main",
    "ignite_worker",
    "raw_main",
    "raw_worker",
    "run",
]

NAME = "raw-vs-ignite"
HELP = "the DDP tutorial's ToyModel trained with raw torch.distributed and with Ignite: same weights, lines of code"
CLAIM = "the DDP tutorial's program reaches the same weights written with raw torch.distributed and with Ignite"

SEED = 0
LR = 0.01


class Result(LabResult):
    lab: str
    processes: int
    ignite_backend: str | None  # None: one process, no process group
    raw_backend: str
    steps: int
    global_batch: int
    tolerance: float
    max_abs_diff: float  # between the two sides' final weights
    weights_moved: float  # the largest change training made to a weight
    code_lines: dict[str, dict[str, int]]  # per side (raw, ignite), each function's lines of code


@dataclass(frozen=True, kw_only=True)
class Options(LabLaunchOptions):
    nproc_per_node: int = option_like(LaunchOptions, "nproc_per_node", 2, "processes to start")
    steps: int = option(10, "SGD steps", role=Role.TRAINING)
    batch_size: int = option_like(TrainConfig, "batch_size", 40, "GLOBAL batch")
    tolerance: float = option(1e-6, "max |weight difference| allowed", role=Role.MEASUREMENT, low=0)

    def check(self) -> None:
        at_least(1, nproc_per_node=self.nproc_per_node, steps=self.steps, batch_size=self.batch_size)
        split_evenly(self.batch_size, [self.nproc_per_node])


def _toy_dataset(steps: int, batch_size: int) -> TensorDataset:
    """``steps`` global batches of the tutorial's data: random inputs of 10 features, random targets of 5."""
    generator = torch.Generator().manual_seed(SEED)
    size = steps * batch_size
    return TensorDataset(torch.randn(size, 10, generator=generator), torch.randn(size, 5, generator=generator))


# -- (a) raw PyTorch, as in the tutorial: no Ignite


def raw_worker(rank: int, world_size: int, port: int, steps: int, batch_size: int, checkpoint: str) -> None:
    """One rank of the raw program: rendezvous, process group, DDP model, sharded loader, SGD steps, teardown."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(SEED)
    model = ToyModel()
    ddp_model = DistributedDataParallel(model)
    dataset = _toy_dataset(steps, batch_size)
    sampler: DistributedSampler[int] = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=batch_size // world_size, sampler=sampler)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=LR)
    for inputs, labels in loader:
        optimizer.zero_grad()
        loss_fn(ddp_model(inputs), labels).backward()
        optimizer.step()
    if rank == 0:
        torch.save(model.state_dict(), checkpoint)
    dist.destroy_process_group()


def raw_main(world_size: int, steps: int, batch_size: int, checkpoint: str, start_method: str = "spawn") -> dict:
    """Start one process per rank (the tutorial's ``mp.spawn``, with any start method) and read rank 0's weights."""
    args = (raw_worker, world_size, free_port(), steps, batch_size, checkpoint)
    mp.start_processes(_fresh_thread_rank, args=args, nprocs=world_size, join=True, start_method=start_method)
    return torch.load(checkpoint, weights_only=True)


# -- (b) Ignite: idist started by ignite_ddl's launcher


def ignite_worker(local_rank: int, steps: int, batch_size: int) -> dict[str, torch.Tensor]:
    """One rank of the Ignite program: auto_model / auto_optim / auto_dataloader and a supervised trainer."""
    torch.manual_seed(SEED)
    model = ToyModel()
    ddp_model = idist.auto_model(model)
    optimizer = idist.auto_optim(optim.SGD(ddp_model.parameters(), lr=LR))
    loader = idist.auto_dataloader(_toy_dataset(steps, batch_size), batch_size=batch_size, shuffle=False)
    trainer = create_supervised_trainer(ddp_model, optimizer, nn.MSELoss(), device=idist.device())
    trainer.run(loader, max_epochs=1)
    return {name: tensor.cpu() for name, tensor in model.state_dict().items()}


def ignite_main(backend: str, nproc: int, steps: int, batch_size: int, output_dir: str) -> dict:
    """Start the ranks (idist.Parallel, through ignite_ddl's launch) and return rank 0's weights."""
    settings = LaunchSettings(backend=backend, nproc_per_node=nproc, log_dir=lab_logs(output_dir))
    return launch(ignite_worker, settings, steps, batch_size)


# -- the comparison

_RAW_CODE = (raw_worker, raw_main)
_IGNITE_CODE = (ignite_worker, ignite_main)


def _fresh_thread_rank(rank: int, worker: Callable[..., None], world_size: int, *args: Any) -> None:
    """``start_processes`` target: ``worker(rank, world_size, *args)`` in a fresh thread of the new process, with
    the launcher's default intra-op threads (cores / processes).

    This parent may already have run multi-threaded torch ops (a notebook, the test suite, the Ignite side of this
    lab), so a forked child's main thread must not run torch ops (see ``launcher.in_fresh_thread``); the raw side
    does what ignite_ddl's launcher does. A standalone script that starts its processes before computing anything
    does not need it, so these lines are not counted as the raw side's code.
    """
    in_fresh_thread(max(1, cpu_cores() // world_size), worker, rank, world_size, *args)


def code_lines(fn: Callable[..., Any]) -> int:
    """Lines of ``fn``'s source that are code: not blank, not a comment, not its docstring.

    Example:
        >>> def f(x):
        ...     '''Double.'''
        ...     # why: nothing
        ...     return 2 * x
        >>> code_lines(f)
        2
    """
    source = textwrap.dedent(inspect.getsource(fn))
    node = ast.parse(source).body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise TypeError(f"code_lines counts the lines of a function, not of {fn!r}")
    body = node.body
    docstring: set[int] = set()
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        docstring = set(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    code = [line for i, line in enumerate(source.splitlines(), 1) if line.strip() and i not in docstring]
    return sum(1 for line in code if not line.lstrip().startswith("#"))


def run(**options: Any) -> Result:
    """Train the ToyModel the raw way and the Ignite way on ``nproc_per_node`` processes and compare the weights.
    ``options``: the fields of :class:`Options`."""
    opts = Options(**options)
    # The raw side gets the start method the Ignite side gets, and the same number of processes.
    plan = plan_launch(LaunchSettings(backend=opts.backend, nproc_per_node=opts.nproc_per_node))
    ours = ignite_main(opts.backend, opts.nproc_per_node, opts.steps, opts.batch_size, opts.output_dir)
    checkpoint = Path(opts.output_dir) / "raw_rank0.pt"
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    raw = raw_main(plan.world_size, opts.steps, opts.batch_size, str(checkpoint), plan.start_method)
    with torch.random.fork_rng():  # leaves the caller's random state alone
        torch.manual_seed(SEED)
        moved = max_abs_diff(raw, ToyModel().state_dict())
    lines = {
        side: {fn.__name__: code_lines(fn) for fn in fns}
        for side, fns in (("raw", _RAW_CODE), ("ignite", _IGNITE_CODE))
    }
    diff = max_abs_diff(raw, ours)
    return {
        "lab": NAME,
        "processes": plan.world_size,
        "ignite_backend": plan.backend,
        "raw_backend": "gloo",
        "steps": opts.steps,
        "global_batch": opts.batch_size,
        "tolerance": opts.tolerance,
        "max_abs_diff": diff,
        "weights_moved": moved,
        "code_lines": lines,
        "checks": [
            check(
                "raw torch.distributed and Ignite reach the same weights",
                diff <= opts.tolerance and moved > 100 * opts.tolerance,
                f"max |dw| {diff:.1e} (tolerance {opts.tolerance:g}; training moved the weights by up to {moved:.1e})",
            )
        ],
    }


def format_result(result: Result) -> str:
    rows = [[side, name, n] for side, fns in result["code_lines"].items() for name, n in fns.items()]
    rows += [[side, "total", sum(fns.values())] for side, fns in result["code_lines"].items()]
    return "\n".join(
        [
            f"{NAME}: ToyModel, {result['steps']} SGD steps, global batch {result['global_batch']}, "
            f"{result['processes']} processes (raw: {result['raw_backend']}, ignite: {result['ignite_backend']})",
            f"final weights: max |raw - ignite| = {result['max_abs_diff']:.1e}",
            "lines of code (non-blank, no comments or docstrings; the model and data are shared and not counted):",
            format_table(["side", "function", "lines"], rows),
            format_checks(result),
        ]
    )
