"""The import direction of the package: layers declared once, here, and checked on every import statement of every
module (function-level imports included): a module imports only from its own package or from a lower layer, and no
two modules import each other, directly or in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "ignite_ddl"

# Bottom to top. Packages on one line are peers: neither may import the other.
LAYERS: list[tuple[str, ...]] = [
    ("core",),
    ("launcher",),
    ("measure",),
    ("trainer",),
    ("report", "projection"),
    ("sweep",),
    ("labs",),
    ("cli", "colab", "__init__"),
    ("__main__",),
]
LAYER_OF = {package: index for index, packages in enumerate(LAYERS) for package in packages}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts).removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _package(module: str) -> str:
    """The layer package of ``ignite_ddl.X.Y``: X (``__init__`` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(module: str, runtime_only: bool = False) -> set[str]:
    """The ignite_ddl modules ``module`` imports (a name imported from a package counts as its submodule when
    there is one)."""
    tree = ast.parse(MODULES[module].read_text())
    skip = _type_checking_lines(tree) if runtime_only else set()
    found = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ignite_ddl")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ignite_ddl"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return found - {module}


def test_every_package_has_a_layer():
    packages = {_package(m) for m in MODULES}
    assert packages <= set(LAYER_OF), f"packages without a layer: {sorted(packages - set(LAYER_OF))}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_downwards(module):
    mine = _package(module)
    upward = [
        imported
        for imported in sorted(_imports(module))
        if _package(imported) != mine and LAYER_OF[_package(imported)] >= LAYER_OF[mine]
    ]
    assert not upward, f"{module} imports from its own layer or above: {upward}"


def test_no_import_circles():
    graph = {m: _imports(m, runtime_only=True) & set(MODULES) for m in MODULES}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for module in sorted(MODULES):
        if module not in state and (cycle := visit(module)):
            pytest.fail("import circle: " + " -> ".join(cycle))
