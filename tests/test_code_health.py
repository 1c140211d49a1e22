"""The library's public surface: each package's ``__all__`` lists the API a user calls and every name there can be
imported; every module's ``__all__`` names only what it defines; and every ``ignite_ddl`` name the README, the docs,
the notebooks and the experiments use exists."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "ignite_ddl"
MODULES = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for path in PACKAGE.rglob("*.py")
    if path.name != "__main__.py"
)
PACKAGES = sorted(m for m in MODULES if (ROOT / m.replace(".", "/") / "__init__.py").exists())


@pytest.mark.parametrize("name", MODULES)
def test_all_names_what_exists(name):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


@pytest.mark.parametrize("name", PACKAGES)
def test_each_package_exports_an_api(name):
    package = importlib.import_module(name)
    assert package.__doc__ and package.__all__, f"{name}: a docstring and the API it offers"
    for attr in package.__all__:
        assert getattr(package, attr) is not None


def _documented_names() -> set[tuple[str, str]]:
    """``(module, name)`` for every ``from ignite_ddl... import name`` in the README, docs, notebooks, experiments
    and benchmarks, and every dotted ``ignite_ddl.module.name`` they mention."""
    texts = [p.read_text() for p in ROOT.glob("*.md")]
    texts += [p.read_text() for folder in ("docs", "experiments") for p in (ROOT / folder).rglob("*.md")]
    texts += [p.read_text() for p in (ROOT / "benchmarks").glob("*.py")]
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        texts += ["".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"]]
    found = set()
    for text in texts:
        imports = re.findall(r"from (ignite_ddl[\w.]*) import \(([\w, \n#]+)\)", text)
        imports += re.findall(r"from (ignite_ddl[\w.]*) import ([\w, ]+)", text)
        for module, names in imports:
            found |= {(module, n.split(" as ")[0].strip()) for n in names.split(",") if n.strip()}
        for dotted in re.findall(r"\bignite_ddl(?:\.\w+)+(?![\w{])", text):
            module, _, attr = dotted.rpartition(".")
            found.add((module, attr))
    return found


def test_every_documented_name_exists():
    missing = []
    for module, name in sorted(_documented_names()):
        try:
            if not hasattr(importlib.import_module(module), name):
                importlib.import_module(f"{module}.{name}")  # a submodule
        except ImportError:
            missing.append(f"{module}.{name}")
    assert not missing, f"named in the docs but not in the library: {missing}"


def test_the_modules_are_found():
    assert {"ignite_ddl", "ignite_ddl.launcher.spawn", "ignite_ddl.labs", "ignite_ddl.labs.fsdp"} <= set(MODULES)
