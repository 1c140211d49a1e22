"""The distributed-training lab: each module runs one experiment on real process groups, checks its own claim and
returns the result as plain data (for notebooks and reports) plus a readable printout.

A lab module is a :class:`Lab`: it defines

- ``NAME`` (its ``ignite-ddl`` subcommand), ``HELP`` (one line) and ``CLAIM`` (what it proves, one line);
- ``Options``: a frozen dataclass of its options, each field declared with :func:`~ignite_ddl.core.options.option`
  as every option of the suite is: typed, with its default, help line and role. It is a :class:`LabOptions`, or a
  :class:`LabLaunchOptions` (``backend``, ``output_dir``) for a lab that starts its ranks on a process group.
  Building one checks every value (a one-line ``ConfigError``);
- ``run(**options) -> Result``: runs the lab with keyword arguments named as the fields of ``Options`` (the rest at
  their defaults) and returns the result, plain data typed by the module's ``Result`` (a :class:`LabResult`: its
  ``"checks"`` list holds one :class:`Check` per claim);
- ``format_result(result) -> str``: the printout.

The ``ignite-ddl <lab>`` options are generated from ``Options``, as ``train``'s are from ``TrainConfig``: field
``nproc_per_node`` is ``--nproc-per-node``, a bool is a flag (``--bench`` / ``--no-bench``) and a tuple is given as
comma-separated values (``--procs 1,2,4``). The CLI prints the result, writes it as JSON with ``--json PATH`` and
exits with status 1 when a claim failed.

Example:
    >>> from ignite_ddl.labs import ddp_sgd
    >>> ddp_sgd.Options(procs=[1, 2], steps=3).procs  # a list given for a tuple is kept as a tuple
    (1, 2)
    >>> ddp_sgd.run(procs=[4], batch_size=30)  # refused before any process starts
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: batch_size 30 cannot be split evenly over [4] processes
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypedDict, cast, runtime_checkable

from ignite_ddl.core.config import BACKENDS
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import Options, Role, option

__all__ = [
    "Check",
    "Lab",
    "LabEntry",
    "LabLaunchOptions",
    "LabOptions",
    "LabResult",
    "at_least",
    "check",
    "claims_hold",
    "format_checks",
    "lab_index",
    "lab_logs",
    "lab_modules",
    "launch_lab",
    "load_lab",
    "output_dir_option",
    "split_evenly",
]

# -- what a lab is


@dataclass(frozen=True, kw_only=True)
class LabOptions(Options):
    """Base of every lab's ``Options``: fields declared with :func:`~ignite_ddl.core.options.option` (typed, with
    a default, a help line and a role); building one checks every value, then runs :meth:`check`."""


class Check(TypedDict):
    """One claim of a lab, verified: what is claimed, whether it held, and the numbers behind the verdict."""

    claim: str
    ok: bool
    detail: str


class LabResult(TypedDict):
    """What every lab's result holds; each lab's ``Result`` adds its own figures."""

    checks: list[Check]


@runtime_checkable
class Lab(Protocol):
    """What a lab module defines: every module of this package whose name does not start with ``_`` is one."""

    NAME: str
    HELP: str
    CLAIM: str

    @property
    def Options(self) -> type[LabOptions]: ...  # the module's class of that name

    def run(self, **options: Any) -> LabResult: ...

    def format_result(self, result: Any) -> str: ...  # the result its run returned (its module's Result)


def output_dir_option() -> Any:
    return option("runs/lab", "where the ranks write their logs", role=Role.OUTPUT, path=True, metavar="DIR")


@dataclass(frozen=True, kw_only=True)
class LabLaunchOptions(LabOptions):
    """The options every lab that starts its ranks on a process group shares (its process counts are its own)."""

    backend: str = option(
        "auto",
        "process group backend; auto: xla-tpu on a TPU, nccl on GPUs, else gloo",
        role=Role.LAUNCH,
        choices=tuple(b for b in BACKENDS if b != "none"),  # a lab's process group is its subject
    )
    output_dir: str = output_dir_option()


# -- helpers of the labs


def check(claim: str, ok: bool, detail: str = "") -> Check:
    """One verified claim of a lab: what is claimed, whether it held, and the numbers behind the verdict."""
    return {"claim": claim, "ok": bool(ok), "detail": detail}


def claims_hold(result: LabResult) -> bool:
    return all(c["ok"] for c in result["checks"])


def format_checks(result: LabResult) -> str:
    return "\n".join(
        f"[{'ok' if c['ok'] else 'FAILED'}] {c['claim']}" + (f": {c['detail']}" if c["detail"] else "")
        for c in result["checks"]
    )


def at_least(low: int, **values: int | Sequence[int]) -> None:
    """Refuse (ConfigError) a value below ``low``, or a sequence that is empty or holds one.

    >>> at_least(1, steps=3, procs=(1, 2))
    >>> at_least(1, procs=())
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: procs must be one or more values >= 1, got ()
    """
    for name, value in values.items():
        if isinstance(value, int):
            if value < low:
                raise ConfigError(f"{name} must be >= {low}, got {value}")
        elif not value or min(value) < low:
            raise ConfigError(f"{name} must be one or more values >= {low}, got {tuple(value)}")


def split_evenly(batch_size: int, counts: Iterable[int], what: str = "processes") -> None:
    """Refuse (ConfigError) a global batch that one of the process counts ``counts`` does not divide."""
    bad = sorted(n for n in set(counts) if batch_size % n)
    if bad:
        raise ConfigError(f"batch_size {batch_size} cannot be split evenly over {bad} {what}")


def lab_logs(output_dir: str) -> str:
    """Where a lab's ranks append their tracebacks when they fail: ``<output_dir>/logs``."""
    return str(Path(output_dir) / "logs")


def launch_lab(fn: Callable[..., Any], options: LabLaunchOptions, nproc: int, *fn_args: Any) -> Any:
    """``fn(local_rank, *fn_args)`` on ``nproc`` processes with the lab's ``backend``; rank 0's return value.

    One process runs here, without a process group: plain single-process training, the reference of the labs.
    """
    # Imported here: the launcher imports torch, and listing the labs (lab_index) must not.
    from ignite_ddl.launcher.settings import LaunchSettings
    from ignite_ddl.launcher.spawn import launch

    backend = "none" if nproc == 1 else options.backend
    settings = LaunchSettings(backend=backend, nproc_per_node=nproc, log_dir=lab_logs(options.output_dir))
    return launch(fn, settings, *fn_args)


# -- finding the labs


class LabEntry(NamedTuple):
    """A lab as the CLI lists it, read from its module's source: module name, one-line help, claim."""

    module: str
    help: str
    claim: str


def lab_modules() -> list[Lab]:
    """Every lab module of this package, in name order (modules named ``_*`` hold shared helpers, not labs)."""
    return [cast(Lab, importlib.import_module(f"{__name__}.{module}")) for module in _lab_module_names()]


def _lab_module_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


@functools.cache
def lab_index() -> dict[str, LabEntry]:
    """``{command: LabEntry}`` of every lab, read from the modules' ``NAME``, ``HELP`` and ``CLAIM`` constants
    without importing them (they import torch): the CLI lists the labs at the cost of reading a few files.

    Example:
        >>> lab_index()["collectives"].module
        'collectives'
    """
    index = {}
    for module in _lab_module_names():
        tree = ast.parse(Path(__path__[0], f"{module}.py").read_text())
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        index[constants["NAME"]] = LabEntry(module, constants["HELP"], constants["CLAIM"])
    return index


def load_lab(command: str) -> Lab:
    """The lab module behind ``ignite-ddl <command>``."""
    return cast(Lab, importlib.import_module(f"{__name__}.{lab_index()[command].module}"))


if TYPE_CHECKING:  # mypy checks every lab module against the Lab protocol
    from ignite_ddl.labs import (
        allreduce_vs_ps,
        buckets,
        collectives,
        ddp_sgd,
        dp_vs_ddp,
        fsdp,
        raw_vs_ignite,
        shards,
        speedup,
    )

    _LABS: tuple[Lab, ...] = (
        allreduce_vs_ps,
        buckets,
        collectives,
        ddp_sgd,
        dp_vs_ddp,
        fsdp,
        raw_vs_ignite,
        shards,
        speedup,
    )
