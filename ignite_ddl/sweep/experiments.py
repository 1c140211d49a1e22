"""The shipped experiments: sweep specs runnable by name, with or without a clone of the repository.

Each experiment is a folder holding ``spec.yaml`` and a ``README.md`` whose ``**Question:**`` line says what it
answers. The folders live once, in ``experiments/`` at the repository's root; building the package copies them
into ``ignite_ddl/experiments/`` (``setup.py``), so an installed ignite-ddl finds them as package data and a clone
(or an editable install) reads them from the checkout.

Example:
    >>> from ignite_ddl.sweep.experiments import experiments, spec_path
    >>> "quickstart" in experiments()
    True
    >>> spec_path("quickstart").name
    'spec.yaml'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ignite_ddl.core.errors import ConfigError

__all__ = ["Experiment", "experiments", "experiments_folder", "spec_path"]

_PACKAGE = Path(__file__).resolve().parents[1]


def experiments_folder() -> Path:
    """Where the shipped experiments are: the package's data in an installed wheel, else the checkout's
    ``experiments/`` (a clone, an editable install)."""
    shipped = _PACKAGE / "experiments"
    return shipped if shipped.is_dir() else _PACKAGE.parent / "experiments"


@dataclass(frozen=True)
class Experiment:
    """One shipped experiment: its name (the folder's), its spec file and the question it answers."""

    name: str
    spec: Path
    question: str


def _question(readme: Path) -> str:
    """The README's ``**Question:**`` sentence on one line (up to its question mark), or '' without one."""
    try:
        text = readme.read_text(encoding="utf-8")
    except OSError:
        return ""
    found = re.search(r"\*\*Question:\*\*\s*(.+?\?)", text, flags=re.DOTALL)
    return " ".join(found.group(1).split()) if found else ""


def experiments() -> dict[str, Experiment]:
    """Every shipped experiment by name, sorted."""
    folder = experiments_folder()
    specs = sorted(folder.glob("*/spec.yaml")) if folder.is_dir() else []
    return {p.parent.name: Experiment(p.parent.name, p, _question(p.parent / "README.md")) for p in specs}


def spec_path(spec: str | Path) -> Path:
    """The spec file ``spec`` names: a file that exists; else a shipped experiment, by its name (``quickstart``) or by
    its path in the repository (``experiments/quickstart/spec.yaml``, as the docs write it, run where there is no
    clone); else the path itself when it looks like one (reading it says what is wrong), and otherwise
    :class:`ConfigError` naming the shipped experiments."""
    path = Path(spec)
    if path.exists():
        return path
    shipped = experiments()
    if len(path.parts) == 3 and path.parts[0] == "experiments" and path.parts[1] in shipped:
        found = shipped[path.parts[1]].spec.parent / path.parts[2]  # a shipped experiment's spec, or another of its
        if found.is_file():
            return found
    name = str(spec)
    if name in shipped:
        return shipped[name].spec
    if path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path
    names = ", ".join(shipped) or "none found"
    raise ConfigError(f"no spec file {spec!r} and no shipped experiment of that name (shipped: {names})")
