"""The library's public surface is declared: every module names what it exports in ``__all__``, every name there
exists, and no public function or class is left out of it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "ignite_ddl"
MODULES = sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for path in PACKAGE.rglob("*.py")
    if path.name != "__main__.py"
)


def _public_definitions(path: Path) -> set[str]:
    """Top-level functions and classes not named ``_*``: what a reader takes for the module's interface."""
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_")
    }


@pytest.mark.parametrize("name", MODULES)
def test_module_declares_its_public_names(name):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
    path = Path(module.__file__)
    left_out = sorted(_public_definitions(path) - set(exported))
    assert not left_out, f"{name}: public but not in __all__ (add them, or name them _private): {left_out}"


def test_the_modules_are_found():
    assert {"ignite_ddl", "ignite_ddl.launcher.spawn", "ignite_ddl.labs", "ignite_ddl.labs.fsdp"} <= set(MODULES)
