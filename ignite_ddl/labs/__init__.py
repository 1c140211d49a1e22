"""The distributed-training lab: each module runs one experiment on real process groups, checks its own claim and
returns the result as plain data (for notebooks and reports) plus a readable printout.

A lab module is a :class:`Lab`: it defines

- ``NAME`` (its ``ignite-ddl`` subcommand), ``HELP`` (one line) and ``CLAIM`` (what it proves, one line);
- ``Options``: a frozen dataclass of its options, each field made with :func:`lab_option`: typed, with its default
  and help line. It is a :class:`LabOptions`, or a :class:`LaunchOptions` (``backend``, ``output_dir``) for a lab
  that starts its ranks on a process group. Building one checks every value (a one-line ``ConfigError``);
- ``run(**options) -> dict``: runs the lab with keyword arguments named as the fields of ``Options`` (the rest at
  their defaults) and returns the result, whose ``"checks"`` list holds one :func:`check` record per claim;
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
    ignite_ddl.core.config.ConfigError: batch_size 30 cannot be split evenly over [4] processes
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import pkgutil
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast, runtime_checkable

from ignite_ddl.core.config import ConfigError, option_kind

__all__ = [
    "LAB_BACKENDS",
    "Lab",
    "LabEntry",
    "LabOptions",
    "LaunchOptions",
    "OptionSpec",
    "at_least",
    "check",
    "claims_hold",
    "format_checks",
    "lab_index",
    "lab_logs",
    "lab_modules",
    "lab_option",
    "launch_lab",
    "load_lab",
    "option_specs",
    "output_dir_option",
    "split_evenly",
]

# -- what a lab is


@dataclass(frozen=True)
class LabOptions:
    """Base of every lab's ``Options``. Building one checks each field against its annotation (``int``, ``float``,
    ``str``, ``bool``, ``X | None``, ``tuple[X, ...]``) and its choices, stores a sequence as a tuple and an int
    given for a float as a float, then runs :meth:`check`."""

    def __post_init__(self) -> None:
        for name, spec in option_specs(type(self)).items():
            object.__setattr__(self, name, spec.coerce(name, getattr(self, name)))
        self.check()

    def check(self) -> None:
        """Refuse values that are wrong whatever the machine, with a one-line :class:`ConfigError`."""


@runtime_checkable
class Lab(Protocol):
    """What a lab module defines: every module of this package whose name does not start with ``_`` is one."""

    NAME: str
    HELP: str
    CLAIM: str

    @property
    def Options(self) -> type[LabOptions]: ...  # the module's class of that name

    def run(self, **options: Any) -> dict[str, Any]: ...

    def format_result(self, result: dict[str, Any]) -> str: ...


# -- options: typed dataclass fields, read from the command line


@dataclass(frozen=True)
class OptionSpec:
    """One option: its type, default and help line, and how the command line reads and shows it."""

    help: str
    kind: type  # int, float, str or bool: of the value, or of each item when ``many``
    default: Any = None
    optional: bool = False  # None is a value too
    many: bool = False  # a tuple of ``kind``, given on the command line as comma-separated values
    choices: tuple[str, ...] = ()
    parse: Callable[[str], Any] | None = None  # command-line text to value, when ``kind`` (or a list of it) won't do
    show: Callable[[Any], str] | None = None  # the default as the help shows it
    metavar: str | None = None

    def coerce(self, name: str, value: Any) -> Any:
        """``value`` checked against this option's type and choices (a ConfigError says what is wrong)."""
        if value is None and self.optional:
            return None
        if not self.many:
            return self._scalar(name, value)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ConfigError(f"option {name} expects a sequence of {self.kind.__name__}, got {value!r}")
        return tuple(self._scalar(name, item) for item in value)

    def _scalar(self, name: str, value: Any) -> Any:
        allowed = (int, float) if self.kind is float else (self.kind,)  # an int is a fine float
        if isinstance(value, bool) != (self.kind is bool) or not isinstance(value, allowed):
            many, optional = "a sequence of " if self.many else "", " or None" if self.optional else ""
            raise ConfigError(f"option {name} expects {many}{self.kind.__name__}{optional}, got {value!r}")
        if self.choices and value not in self.choices:
            raise ConfigError(f"unknown {name} '{value}' (choose from: {', '.join(self.choices)})")
        return float(value) if self.kind is float and isinstance(value, (int, float)) else value

    def reader(self) -> Callable[[str], Any]:
        """The ``argparse`` type of this option: ``parse``, comma-separated values of ``kind``, or ``kind``."""
        if self.parse is not None:
            return self.parse
        return functools.partial(_comma_separated, self.kind) if self.many else self.kind

    def shown_default(self) -> str | None:
        """The default as ``--help`` shows it (None: not shown, for a flag or an option without a default)."""
        if self.default is None or self.kind is bool:
            return None
        if self.show is not None:
            return self.show(self.default)
        return ",".join(map(str, self.default)) if self.many else str(self.default)

    def shown_metavar(self) -> str:
        if self.metavar is not None:
            return self.metavar
        if self.choices:
            return "{" + ",".join(self.choices) + "}"
        name = self.kind.__name__.upper()
        return f"{name}[,{name}...]" if self.many else name


def _comma_separated(kind: type, text: str) -> list[Any]:
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got {text!r}") from None


def lab_option(
    default: Any,
    help: str,
    *,
    choices: Sequence[str] = (),
    parse: Callable[[str], Any] | None = None,
    show: Callable[[Any], str] | None = None,
    metavar: str | None = None,
) -> Any:
    """A field of a lab's ``Options``: its default and help line (the help shows the default), and optionally the
    values allowed, how the command line reads the text (``parse``), shows the default (``show``) and names the
    value (``metavar``). The field's type is its annotation."""
    return field(
        default=default,
        metadata={"help": help, "choices": tuple(choices), "parse": parse, "show": show, "metavar": metavar},
    )


def output_dir_option() -> Any:
    return lab_option("runs/lab", "where the ranks write their logs", metavar="DIR")


LAB_BACKENDS = ("auto", "gloo", "nccl", "xla-tpu")


@dataclass(frozen=True, kw_only=True)
class LaunchOptions(LabOptions):
    """The options every lab that starts its ranks on a process group shares (its process counts are its own)."""

    backend: str = lab_option(
        "auto", "process group backend; auto: xla-tpu on a TPU, nccl on GPUs, else gloo", choices=LAB_BACKENDS
    )
    output_dir: str = output_dir_option()


def option_specs(options: type[LabOptions]) -> dict[str, OptionSpec]:
    """Each field of a lab's ``Options`` class as an :class:`OptionSpec`, in field order.

    Example:
        >>> from ignite_ddl.labs import ddp_sgd
        >>> spec = option_specs(ddp_sgd.Options)["procs"]
        >>> spec.kind, spec.many, spec.shown_default(), spec.shown_metavar()
        (<class 'int'>, True, '1,2,4', 'INT[,INT...]')
    """
    if options in _SPECS:
        return _SPECS[options]
    hints = typing.get_type_hints(options)
    specs = {}
    for f in dataclasses.fields(options):
        kind, optional, many = option_kind(hints[f.name])
        meta = f.metadata
        specs[f.name] = OptionSpec(
            help=meta["help"],
            kind=kind,
            default=f.default,
            optional=optional,
            many=many,
            choices=meta["choices"],
            parse=meta["parse"],
            show=meta["show"],
            metavar=meta["metavar"],
        )
    _SPECS[options] = specs
    return specs


_SPECS: dict[type[LabOptions], dict[str, OptionSpec]] = {}  # read once per class


# -- helpers of the labs


def check(claim: str, ok: bool, detail: str = "") -> dict[str, Any]:
    """One verified claim of a lab: what is claimed, whether it held, and the numbers behind the verdict."""
    return {"claim": claim, "ok": bool(ok), "detail": detail}


def claims_hold(result: dict[str, Any]) -> bool:
    return all(c["ok"] for c in result["checks"])


def format_checks(result: dict[str, Any]) -> str:
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
    ignite_ddl.core.config.ConfigError: procs must be one or more values >= 1, got ()
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


def launch_lab(fn: Callable[..., Any], options: LaunchOptions, nproc: int, *fn_args: Any) -> Any:
    """``fn(local_rank, *fn_args)`` on ``nproc`` processes with the lab's ``backend``; rank 0's return value.

    One process runs here, without a process group: plain single-process training, the reference of the labs.
    """
    # Imported here: the launcher imports torch, and listing the labs (lab_index) must not.
    from ignite_ddl.launcher.spawn import LaunchSettings, launch

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
