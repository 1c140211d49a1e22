"""A package's public names, loaded on first use: ``import ignite_ddl.launcher`` (or the CLI listing its commands)
does not pay for importing torch until a name that needs it is asked for.

Example:
    >>> getattr_, dir_ = lazy_exports("ignite_ddl.core", {"TrainConfig": "config"})
    >>> getattr_("TrainConfig").__name__
    'TrainConfig'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose public names live in the modules ``homes`` names
    (relative to the package)."""

    def getattr_(name: str) -> Any:
        if name in homes:
            return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted(homes)

    return getattr_, dir_
