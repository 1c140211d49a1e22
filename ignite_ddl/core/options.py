"""One declaration per option: its type (the dataclass annotation), default, help line, choices, range and *role*.

Every option of the suite — a training run's, a launch's, a sweep spec's and each lab's — is a field of an
:class:`Options` dataclass made with :func:`option`. Everything else is derived from that one declaration: the
command-line flags (:func:`add_to_parser`), the type, choice and range checks of a value from the command line,
Python or a YAML spec (:meth:`OptionSpec.coerce`, run when an ``Options`` is built), the sweep's workload axes and
the report's layout axes (:func:`names_with_role`). Adding an axis is one declaration plus the code that acts on it.

A **role** says what an option changes, which decides how runs that differ in it are compared:

======================  ==================================================================================
``launch``              how the ranks are started (backend, process counts, rendezvous, timeouts): the fields
                        of ``LaunchSettings``
``layout``              how the same work is laid out over the ranks (the strategy): like ``launch``, the
                        speed-up baseline of a configuration ignores it
``workload``            what fixes the work done per sample (model, dataset, precision, optimizer):
                        configurations are ranked only within one workload
``execution``           how each step's work is executed (``torch.compile``): the same work, compared like any
                        recipe choice, and never part of the speed-up baseline's difference
``training``            the rest of the recipe (batch, learning rate, epochs, seed, ...)
``measurement``         what is measured and how (step recording, profilers, warm-up)
``output``              where results go and what is kept (folders, checkpoints, trackers)
``sweep``               a key of a sweep spec (repeats, order, time limits)
======================  ==================================================================================

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True, kw_only=True)
    ... class Demo(Options):
    ...     steps: int = option(10, "optimizer steps", role=Role.TRAINING, low=1)
    ...     mode: str = option("fast", "how to run", role=Role.MEASUREMENT, choices=("fast", "exact"))
    ...     rate: float = option(0.5, "a share", role=Role.TRAINING, low=0, high=1)
    >>> Demo(rate=1).rate  # an int is a fine float, stored as one
    1.0
    >>> Demo(steps=0)
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: steps must be >= 1, got 0
    >>> Demo(mode="slow")
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: unknown mode 'slow' (choose from: fast, exact)
    >>> sorted(names_with_role(Demo, Role.TRAINING))
    ['rate', 'steps']
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import math
import types
import typing
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ignite_ddl.core.errors import ConfigError

__all__ = [
    "OptionSpec",
    "Options",
    "Role",
    "add_to_parser",
    "names_with_role",
    "option",
    "option_flag",
    "option_like",
    "option_specs",
]


class Role(str, enum.Enum):
    """What an option changes (see the module docstring)."""

    LAUNCH = "launch"
    LAYOUT = "layout"
    WORKLOAD = "workload"
    EXECUTION = "execution"
    TRAINING = "training"
    MEASUREMENT = "measurement"
    OUTPUT = "output"
    SWEEP = "sweep"


# The largest magnitude a number option accepts where no range says otherwise: beyond it, values stop being
# meaningful (and C integers and float arithmetic overflow), so they are refused instead of failing later.
HUGE = 1e15


@dataclass(frozen=True)
class OptionSpec:
    """One option as declared: its type, default and help line, what values it accepts, its role, and how the
    command line reads and shows it."""

    help: str | Callable[[], str]  # a line, or what writes it when it is shown (from a registry, say)
    role: Role
    kind: type  # int, float, str, bool or dict (a mapping, checked by its owner): of the value, or of each item
    default: Any = None
    optional: bool = False  # None is a value too
    many: bool = False  # a tuple of ``kind``, given on the command line as comma-separated values
    choices: Sequence[str] = ()  # a tuple, or a live view of a registry (the strategies described)
    low: float | None = None  # smallest value allowed (inclusive unless low_open)
    high: float | None = None  # largest value allowed (inclusive)
    low_open: bool = False  # ``low`` itself is refused: a value must be > low
    path: bool = False  # a file or folder path: must not be empty or hold a NUL byte
    parse: Callable[[str], Any] | None = None  # command-line text to value, when ``kind`` (or a list of it) won't do
    show: Callable[[Any], str] | None = None  # the default as the help shows it
    metavar: str | None = None

    def coerce(self, name: str, value: Any) -> Any:
        """``value`` checked against this option's type, choices and range (a one-line :class:`ConfigError` says
        what is wrong); a sequence is stored as a tuple and an int given for a float as a float."""
        if value is None and self.optional:
            return None
        if not self.many:
            return self._scalar(name, value)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ConfigError(f"option {name} expects a sequence of {self.kind.__name__}, got {_shown(value)}")
        return tuple(self._scalar(name, item) for item in value)

    def _scalar(self, name: str, value: Any) -> Any:
        if self.kind in (dict, list):  # checked by the options' own check()
            if not isinstance(value, self.kind):
                what = "a mapping" if self.kind is dict else "a list"
                raise ConfigError(f"{name} must be {what}, got {_shown(value)}")
            return value
        allowed = (int, float) if self.kind is float else (self.kind,)  # an int is a fine float
        if isinstance(value, bool) != (self.kind is bool) or not isinstance(value, allowed):
            many, optional = "a sequence of " if self.many else "", " or null" if self.optional else ""
            raise ConfigError(f"option {name} expects {many}{self.kind.__name__}{optional}, got {_shown(value)}")
        if self.choices and value not in self.choices:
            raise ConfigError(f"unknown {name} '{_shown(value, quote=False)}' (choose from: {', '.join(self.choices)})")
        if isinstance(value, (int, float)) and self.kind is not bool:
            self._check_range(name, value)
            return float(value) if self.kind is float else value
        text = cast(str, value)  # the checks above leave a str here (or a bool, which is no path)
        if self.path and not text.strip():
            raise ConfigError(f"{name} must not be empty")
        if self.path and "\0" in text:
            raise ConfigError(f"{name} must be a path, got {_shown(value)}")
        return value

    def _check_range(self, name: str, value: int | float) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number, got {value}")
        if isinstance(value, int) and abs(value) > 1e300:  # 10**400 from YAML or int(): no float holds it
            digits = str(abs(value))
            shown_big = f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
            if value < 0 and self.low is not None:
                raise ConfigError(
                    f"{name} must be {'>' if self.low_open else '>='} {_number(self.low)}, got {shown_big}"
                )
            raise ConfigError(f"{name} must be <= {_number(HUGE if self.high is None else self.high)}, got {shown_big}")
        shown = float(value) if self.kind is float else value  # as the option holds it: -1.0 for a float
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            raise ConfigError(f"{name} must be {'>' if self.low_open else '>='} {_number(self.low)}, got {shown}")
        high = HUGE if self.high is None else self.high
        if value > high or value < -HUGE:
            raise ConfigError(f"{name} must be <= {_number(high)}, got {shown:g}")

    def reader(self) -> Callable[[str], Any]:
        """The ``argparse`` type of this option: ``parse``, comma-separated values of ``kind``, or ``kind``."""
        if self.parse is not None:
            return self.parse
        return functools.partial(_comma_separated, self.kind) if self.many else _reader(self.kind)

    def shown_default(self) -> str | None:
        """The default as ``--help`` shows it (None: no default to show)."""
        if self.default is None:
            return None
        if self.show is not None:
            return self.show(self.default)
        if self.kind is bool:
            return "on" if self.default else "off"
        return ",".join(map(str, self.default)) if self.many else str(self.default)

    def help_line(self) -> str:
        """The help line as it reads now."""
        return self.help() if callable(self.help) else self.help

    def shown_metavar(self) -> str:
        if self.metavar is not None:
            return self.metavar
        if self.choices:
            return "{" + ",".join(self.choices) + "}"
        kind = self.kind.__name__.upper()
        return f"{kind}[,{kind}...]" if self.many else kind


def _number(x: float) -> str:
    """A bound as people write it: 65535, 2592000, 0.1 (not 2.592e+06)."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _shown(value: Any, quote: bool = True) -> str:
    """A value as an error message shows it: cut short, on one line (a spec may hold a 10 MB string)."""
    text = repr(value) if quote else str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= 80 else text[:77] + "..."


def _reader(kind: type) -> Callable[[str], Any]:
    return kind


def _comma_separated(kind: type, text: str) -> list[Any]:
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got {text!r}") from None


def option(
    default: Any = None,
    help: str | Callable[[], str] = "",
    *,
    role: Role,
    factory: Callable[[], Any] | None = None,
    choices: Sequence[str] = (),
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    path: bool = False,
    parse: Callable[[str], Any] | None = None,
    show: Callable[[Any], str] | None = None,
    metavar: str | None = None,
) -> Any:
    """A field of an :class:`Options` dataclass: its default, help line (or a function writing it when it is shown:
    an option whose choices are a registry's describes each of them) and role, and optionally the values it
    accepts (``choices``; ``low`` / ``high``, ``low_open`` to refuse ``low`` itself; ``path``), how the command
    line reads the text (``parse``), shows the default (``show``) and names the value (``metavar``). The field's
    type is its annotation: ``int``, ``float``, ``str``, ``bool``, ``X | None``, ``tuple[X, ...]`` or a mapping
    (``dict[str, Any]``, with ``factory`` making its default: its contents are checked by the options' ``check``)."""
    if not isinstance(role, Role):
        raise TypeError(f"an option's role is a Role, not {role!r}")
    meta = {
        "help": help,
        "role": role,
        "choices": choices if not isinstance(choices, (list, str)) else tuple(choices),  # a tuple or a live view
        "low": low,
        "high": high,
        "low_open": low_open,
        "path": path,
        "parse": parse,
        "show": show,
        "metavar": metavar,
    }
    if factory is not None:
        return field(default_factory=factory, metadata={"option": meta})
    return field(default=default, metadata={"option": meta})


@dataclass(frozen=True, kw_only=True)
class Options:
    """Base of every options dataclass. Building one checks each field against its declaration (type, choices,
    range), stores a sequence as a tuple and an int given for a float as a float, then runs :meth:`check` for the
    rules that involve several fields."""

    def __post_init__(self) -> None:
        for name, spec in option_specs(type(self)).items():
            object.__setattr__(self, name, spec.coerce(name, getattr(self, name)))
        self.check()

    def check(self) -> None:
        """Refuse combinations that are wrong whatever the machine, with a one-line :class:`ConfigError`."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Any:
        """Build from plain data (a spec, a JSON record), refusing unknown keys and wrongly typed values."""
        if not isinstance(values, dict):
            raise ConfigError(f"options must be a mapping, got {_shown(values)}")
        unknown = sorted(set(values) - set(option_specs(cls)), key=str)
        if unknown:
            raise ConfigError(f"unknown option(s): {_shown(', '.join(map(str, unknown)), quote=False)}")
        return cls(**values)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def option_kind(hint: Any) -> tuple[type, bool, bool]:
    """``(kind, optional, many)`` of an option's annotation: ``int | None`` -> (int, True, False),
    ``tuple[float, ...]`` -> (float, False, True).

    >>> option_kind(int | None), option_kind(tuple[float, ...])
    ((<class 'int'>, True, False), (<class 'float'>, False, True))
    """
    args = typing.get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        (hint,) = [a for a in args if a is not type(None)]
        args = typing.get_args(hint)
    if typing.get_origin(hint) in (dict, list) or hint in (dict, list):
        return typing.get_origin(hint) or hint, optional, False
    many = typing.get_origin(hint) is tuple
    if many:
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"an option's tuple is tuple[X, ...], not {hint}")
        hint = args[0]
    if hint not in (int, float, str, bool):
        raise TypeError(f"an option is an int, float, str or bool (or a tuple of them, or None): not {hint}")
    return hint, optional, many


def option_specs(options: type) -> dict[str, OptionSpec]:
    """Each field of an :class:`Options` class as an :class:`OptionSpec`, in field order (read once per class).
    A field not made with :func:`option` is an error: every option has a role."""
    if options not in _SPECS:
        _SPECS[options] = _read_specs(options)
    return _SPECS[options]


_SPECS: dict[type, dict[str, OptionSpec]] = {}


def _read_specs(options: type) -> dict[str, OptionSpec]:
    hints = typing.get_type_hints(options)
    specs = {}
    for f in dataclasses.fields(options):
        meta = f.metadata.get("option")
        if meta is None:
            raise TypeError(f"{options.__name__}.{f.name} is not declared with option(): it has no role")
        kind, optional, many = option_kind(hints[f.name])
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        specs[f.name] = OptionSpec(kind=kind, default=default, optional=optional, many=many, **meta)
    return specs


def option_like(source: type, name: str, default: Any, help: str | None = None) -> Any:
    """A field declared as ``source``'s option ``name`` is (its role, choices, range, how the command line reads and
    shows it), with a default and help line of its own: a lab's ``nproc_per_node`` or ``batch_size`` takes the run's
    declaration, ranges included, instead of typing it again.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True, kw_only=True)
    ... class Base(Options):
    ...     batch_size: int = option(128, "global batch", role=Role.TRAINING, low=1)
    >>> @dataclass(frozen=True, kw_only=True)
    ... class Lab(Options):
    ...     batch_size: int = option_like(Base, "batch_size", 32)
    >>> Lab(batch_size=0)
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: batch_size must be >= 1, got 0
    """
    (declared,) = [f for f in dataclasses.fields(source) if f.name == name]
    meta = dict(declared.metadata["option"])
    if help is not None:
        meta["help"] = help
    return field(default=default, metadata={"option": meta})


def names_with_role(options: type, *roles: Role) -> tuple[str, ...]:
    """The fields of ``options`` with one of ``roles``, in declaration order."""
    return tuple(name for name, spec in option_specs(options).items() if spec.role in roles)


def option_flag(name: str) -> str:
    """The command-line flag of option ``name``: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def add_to_parser(
    parser: argparse.ArgumentParser, options: type, skip: Collection[str] = (), overrides: bool = False
) -> None:
    """One command-line option per field of ``options`` (but ``skip``, and mappings, which have flags of their
    own): a bool as ``--name`` / ``--no-name``, anything else as a typed value; the help shows the default and the
    allowed range. With ``overrides``, an option not given is None, so that a value from a file (a sweep spec)
    stands unless the command line overrides it."""
    for name, spec in option_specs(options).items():
        if name in skip or spec.kind in (dict, list):
            continue
        flag = option_flag(name)
        shown = spec.shown_default()
        help_text = spec.help_line() + _range_text(spec) + ("" if shown is None else f" (default: {shown})")
        default = None if overrides else spec.default
        if spec.kind is bool and not spec.many:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        else:
            parser.add_argument(flag, type=spec.reader(), default=default, metavar=spec.shown_metavar(), help=help_text)


def _range_text(spec: OptionSpec) -> str:
    if spec.low is None and spec.high is None:
        return ""
    low = "" if spec.low is None else f"{'>' if spec.low_open else '>='} {_number(spec.low)}"
    high = "" if spec.high is None else f"<= {_number(spec.high)}"
    return f" [{', '.join(x for x in (low, high) if x)}]"
