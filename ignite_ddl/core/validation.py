"""Whether plain JSON data is what the schema (:mod:`.schema`) declares: one validator, asked of every record a
results file holds, that says where and why a value does not conform.

Example:
    >>> from ignite_ddl.core.schema import DeviceInfo
    >>> schema_problem({"type": "cpu", "name": 5}, DeviceInfo, "device")
    'device.name: expected string, got int'
"""

from __future__ import annotations

import contextlib
import types
import typing
from typing import Annotated, Any, Literal, Union

from typing_extensions import NotRequired  # typing's from Python 3.11

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import option_specs
from ignite_ddl.core.schema import Essential
from ignite_ddl.core.sweep_records import RunRecord

__all__ = ["LARGEST_FIGURE", "MAX_SAMPLES_PER_S", "record_problem", "schema_problem"]


def _json_types(hint: Any) -> tuple[type, ...]:
    """The Python types JSON data of schema type ``hint`` may have at its top level (an object is a dict, whatever
    its keys)."""
    origin = typing.get_origin(hint)
    if origin is Annotated or origin is NotRequired:
        return _json_types(typing.get_args(hint)[0])
    if origin is Union or origin is types.UnionType:
        return tuple(kind for arg in typing.get_args(hint) for kind in _json_types(arg))
    if hint is float:
        return (int, float)
    if origin is dict or hint is dict or typing.is_typeddict(hint):
        return (dict,)
    if origin is list or hint is list:
        return (list,)
    return (hint,)


def _record_keys(essential: bool) -> dict[str, tuple[type, ...]]:
    """:class:`RunRecord`'s keys that every record has (``essential``: marked :class:`Essential`) or the others,
    each with the types its value may have."""
    found = {}
    for key, hint in typing.get_type_hints(RunRecord, include_extras=True).items():
        declared = typing.get_args(hint)[0] if typing.get_origin(hint) is NotRequired else hint
        if any(isinstance(mark, Essential) for mark in getattr(declared, "__metadata__", ())) == essential:
            found[key] = _json_types(hint)
    return found


# The keys a line must hold to be a run record (the others may be missing: an older release's records lack the
# newer keys), each with the types its value may have, read off RunRecord.
REQUIRED_RECORD_KEYS = _record_keys(essential=True)
OPTIONAL_RECORD_KEYS = _record_keys(essential=False)

# The largest magnitude any recorded figure can have (bytes of memory on the largest machine are ~1e15; FLOP counts
# of a run ~1e21): beyond it a number is damage, not a measurement. Throughput has its own, tighter bound.
LARGEST_FIGURE = 1e24
MAX_SAMPLES_PER_S = 1e12


def schema_problem(value: Any, hint: Any, where: str = "") -> str | None:
    """Why ``value`` (plain JSON data) does not have the shape the schema type ``hint`` declares: a wrong type, a
    non-finite or out-of-range number, at any depth (None if it conforms). A key a schema declares may be missing
    (records of an older release lack the newer keys); a key it does not declare is left alone. ``where`` names
    ``value`` in the answer."""
    found = _check(hint)(value)
    if found is None:
        return None
    message, *path = found
    for part in reversed(path):
        where = f"{where}[{part}]" if isinstance(part, int) else f"{where}.{part}" if where else part
    return f"{where}: {message}"


# A check answers None for a value that conforms (the common case, answered without building any text: reading a
# large sweep asks it of every record), else ``[why, innermost key or index, ..., outermost]``: each container on
# the way out adds where the value sat in it, and schema_problem writes the path once.
_Found = list[Any]
_Check = typing.Callable[[Any], "_Found | None"]
_CHECKS: dict[Any, _Check] = {}


def _check(hint: Any) -> _Check:
    """The check of one schema type, built once per type (reading type hints is slow; records are many)."""
    try:
        return _CHECKS[hint]
    except (KeyError, TypeError):
        pass
    check = _build_check(hint)
    with contextlib.suppress(TypeError):  # an unhashable hint is rebuilt each time
        _CHECKS[hint] = check
    return check


def _got(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _build_check(hint: Any) -> _Check:  # noqa: C901 - one branch per kind of type, as the schema uses them
    if typing.get_origin(hint) is Annotated or typing.get_origin(hint) is NotRequired:
        return _check(typing.get_args(hint)[0])
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return lambda value: None
    if origin is Union or origin is types.UnionType:
        options = [_check(a) for a in args if a is not type(None)]
        nullable = type(None) in args

        def union(value: Any) -> _Found | None:
            if value is None and nullable:
                return None
            furthest: _Found | None = None
            for check in options:
                found = check(value)
                if found is None:
                    return None
                # the option the value got furthest into is the one it meant to be: a profiler result of kind
                # `torch` with a bad trace says so, not that its kind is not `timer`
                if furthest is None or len(found) > len(furthest):
                    furthest = found
            return furthest

        return union
    if origin is Literal:
        allowed = ", ".join(repr(a) for a in args)
        return lambda value: (
            None
            if value in args and type(value) in map(type, args)
            else [f"expected one of {allowed}, got {value!r:.30}"]
        )
    if hint is type(None):
        return lambda value: None if value is None else [f"expected null, got {_got(value)}"]
    if hint in (int, float):
        return _number_check(hint is int)
    if hint in (str, bool):
        name = "string" if hint is str else "boolean"
        return lambda value: None if isinstance(value, hint) else [f"expected {name}, got {_got(value)}"]
    if origin is list or hint is list:
        item = _check(args[0]) if args else _check(Any)

        def items(value: Any) -> _Found | None:
            if not isinstance(value, list):
                return [f"expected a list, got {_got(value)}"]
            for number, element in enumerate(value):
                found = item(element)
                if found is not None:
                    found.append(number)
                    return found
            return None

        return items
    if origin is dict or hint is dict:
        return lambda value: None if isinstance(value, dict) else [f"expected an object, got {_got(value)}"]
    if typing.is_typeddict(hint):
        fields = [(name, _check(kind)) for name, kind in typing.get_type_hints(hint, include_extras=True).items()]

        def mapping(value: Any) -> _Found | None:
            if not isinstance(value, dict):
                return [f"expected an object, got {_got(value)}"]
            for key, check in fields:
                if key in value:
                    found = check(value[key])
                    if found is not None:
                        found.append(key)
                        return found
            return None

        return mapping
    raise TypeError(f"no schema check for {hint!r}")


def _number_check(integer: bool) -> _Check:
    name = "integer" if integer else "number"

    def number(value: Any) -> _Found | None:
        kind = type(value)  # the common cases first, by exact type (a bool is no figure)
        if kind is float:  # NaN and infinities fail the comparison
            if -LARGEST_FIGURE <= value <= LARGEST_FIGURE and (not integer or value.is_integer()):
                return None
        elif kind is int:
            if -LARGEST_FIGURE <= value <= LARGEST_FIGURE:
                return None
        elif value is None and not integer:  # a figure not measured: NaN, which JSON writes as null
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return [f"expected {name}, got {_got(value)}"]
        if not -LARGEST_FIGURE <= value <= LARGEST_FIGURE:  # NaN and infinities fail it; a huge int cannot overflow
            return [f"{value!r:.30} is not a figure a run can produce"]
        if integer and isinstance(value, float) and not value.is_integer():  # 1e6 written as 1000000.0 is fine
            return [f"expected integer, got {value!r:.30}"]
        return None

    return number


def record_problem(record: Any) -> str | None:
    """Why plain JSON data is not a run record (None if it is one)."""
    if not isinstance(record, dict):
        return f"not a run record (a JSON {type(record).__name__})"
    for key, kinds in REQUIRED_RECORD_KEYS.items():
        if not isinstance(record.get(key), kinds) or isinstance(record.get(key), bool):
            return f"not a run record ({key!r} missing or not {' or '.join(kind.__name__ for kind in kinds)})"
    for key, kinds in OPTIONAL_RECORD_KEYS.items():
        value = record.get(key)
        if key in record and not (isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))):
            return f"not a run record ({key!r} has the wrong type)"
    if record["status"] == "completed":
        summary = record.get("summary")
        if not isinstance(summary, dict) or not isinstance(summary.get("samples_per_s"), (int, float)):
            return "a completed run record without a summary holding samples_per_s"
        rate = summary["samples_per_s"]
        if isinstance(rate, bool) or not 0 < rate <= MAX_SAMPLES_PER_S:
            return f"not a throughput a run can produce (samples_per_s {rate!r:.30})"
    problem = schema_problem(record, RunRecord) or _options_problem(record)
    if problem:
        return f"not a run record ({problem})"
    summary = record.get("summary")
    if isinstance(summary, dict) and isinstance(summary.get("memory"), dict):
        device = summary.get("device")
        problem = _memory_problem(summary["memory"], device.get("type") if isinstance(device, dict) else None)
        return f"not memory a run can have ({problem})" if problem else None
    return None


def _byte_counts(figures: dict[str, Any]) -> dict[str, float]:
    """The byte counts among a memory record's figures (``*_bytes``, and each part of ``held_bytes``)."""
    held = figures.get("held_bytes")
    found = {**figures, **held} if isinstance(held, dict) else figures
    return {
        k: v
        for k, v in found.items()
        if (k.endswith("_bytes") or k in ("params", "grads", "optimizer"))
        and isinstance(v, (int, float))
        and not isinstance(v, bool)
    }


def _memory_problem(memory: dict[str, Any], device: Any) -> str | None:
    """An impossible memory figure of a run (the schema has checked the types): a negative byte count, or on the
    CPU a peak resident set below the bytes the rank holds for parameters, gradients and optimizer state (they are
    resident; on an accelerator they are not in the host's figure)."""
    ranks = [r for r in memory.get("ranks") or [] if isinstance(r, dict)]
    top = memory.get("max")
    places = [(f"rank {r.get('rank')}", r) for r in ranks] + ([("max", top)] if isinstance(top, dict) else [])
    for where, figures in places:
        values = _byte_counts(figures)
        negative = next((k for k, v in values.items() if v < 0), None)
        if negative:
            return f"{where}: {negative} {values[negative]:g} is negative"
        held = figures.get("held_bytes")
        total = sum(values.get(k, 0) for k in held) if isinstance(held, dict) else values.get("held_bytes")
        peak = values.get("peak_rss_bytes")
        if device == "cpu" and peak is not None and total is not None and total > peak:
            return f"{where}: peak_rss_bytes {peak:g} below the {total:g} bytes it holds"
    return None


def _options_problem(record: dict[str, Any]) -> str | None:
    """The run's options checked against their one declaration (:class:`~ignite_ddl.core.config.TrainConfig`):
    a value no run could have been given is damage. Options this release does not know are left alone."""
    declared = option_specs(TrainConfig)
    for part in ("grid", "config"):
        for key, value in record[part].items():
            if key in declared:
                try:
                    if (key, type(value), value) in _ACCEPTED_OPTIONS:  # every run of a sweep repeats its options
                        continue
                except TypeError:  # a list or mapping: checked each time
                    pass
                try:
                    declared[key].coerce(key, value)
                except ConfigError as e:
                    return f"{part}.{e}" if str(e).startswith(key) else f"{part}: {e}"
                with contextlib.suppress(TypeError):
                    if len(_ACCEPTED_OPTIONS) >= 100_000:
                        _ACCEPTED_OPTIONS.clear()
                    _ACCEPTED_OPTIONS.add((key, type(value), value))
    return None


_ACCEPTED_OPTIONS: set[tuple[str, type, Any]] = set()  # (option, type, value) that coerce() accepted
