"""The import direction of the package: layers declared once, here, and checked on every import statement of every
module (function-level imports included): a module imports only from its own package or from a lower layer, and no
two modules import each other, directly or in a circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "ignite_ddl"

# Bottom to top. Packages on one line are peers: neither may import the other.
LAYERS: list[tuple[str, ...]] = [
    ("core",),
    ("launcher",),
    ("measure",),
    ("trainer",),
    ("report", "predict"),
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


def _module_level(tree: ast.Module) -> list[ast.AST]:
    """The nodes a module runs when it is imported: everything outside function bodies (and TYPE_CHECKING blocks)."""
    skip = _type_checking_lines(tree)
    found: list[ast.AST] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or node.lineno in skip:
            continue
        found.append(node)
        todo += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
    return found


def _third_party(module: str, imported_only: bool = False) -> set[str]:
    """The top-level names of the packages outside ignite_ddl that ``module`` imports: anywhere in it (function-level
    imports included), or with ``imported_only`` only those importing it runs; ``TYPE_CHECKING`` blocks excluded."""
    tree = ast.parse(MODULES[module].read_text())
    skip = _type_checking_lines(tree)
    nodes = _module_level(tree) if imported_only else [n for n in ast.walk(tree) if getattr(n, "lineno", 0) not in skip]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found - {"ignite_ddl"}


def _imported_with(module: str) -> set[str]:
    """Every ignite_ddl module importing ``module`` imports, itself and the packages on the way included: module-level
    imports, followed as far as they go."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen or current not in MODULES:
            continue
        seen.add(current)
        parts = current.split(".")
        todo += [".".join(parts[:i]) for i in range(2, len(parts))]  # importing a.b.c runs a.b's __init__ first
        tree = ast.parse(MODULES[current].read_text())
        for node in _module_level(tree):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.startswith("ignite_ddl")]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ignite_ddl"):
                todo += [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                    for a in node.names
                ]
    return seen


TORCH = {"torch", "torchvision", "ignite"}  # pytorch-ignite imports torch


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _package(m) == "report"))
def test_the_report_imports_no_torch(module):
    """Reading results and writing a report needs no torch: a report module imports neither torch nor a package
    built on it, not even inside a function, and no module it imports (from the report or, however late, from a
    report function) does when it is imported."""
    assert not _third_party(module) & TORCH, f"{module} imports {sorted(_third_party(module) & TORCH)}"
    reached = set().union(*(_imported_with(m) for m in {module} | _imports(module)))
    found = {m: sorted(_third_party(m, imported_only=True) & TORCH) for m in sorted(reached)}
    found = {m: names for m, names in found.items() if names}
    assert not found, f"{module} reaches torch through {found}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _package(m) == "measure"))
def test_measurements_do_not_import_the_launcher(module):
    """What a rank measures stands on core alone: a process helper or a device wait it shares with the launcher
    lives in core."""
    launcher = sorted(m for m in _imports(module) if _package(m) == "launcher")
    assert not launcher, f"{module} imports the launcher: {launcher}"


def test_a_report_is_written_without_torch(tmp_path):
    """The static rule above, seen running: a fresh interpreter imports every report module and writes the report
    of a results file an earlier release wrote, and torch was never imported."""
    (tmp_path / "results.jsonl").write_bytes(
        (Path(__file__).parent / "data" / "results_first_sweeps.jsonl").read_bytes()
    )
    modules = sorted(m for m in MODULES if _package(m) == "report")
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "from ignite_ddl.report import write_report\n"
        f"write_report({str(tmp_path)!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'torchvision', 'ignite'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "report.md").read_text().count("cfg00") >= 2


# -- names only their owners compare


def _owned_names() -> list[tuple[frozenset[str], set[str], str]]:
    """(names, the modules that may compare them, what they are): a strategy's name is compared only by its
    description and its torch side, a backend's only by the launcher's rules table; every other module asks them."""
    from ignite_ddl.core.strategies import strategy_infos

    strategies = frozenset(strategy_infos()) - {"none"}  # "none" is also amp's, comm_hook's, ... value
    return [
        (strategies, {"ignite_ddl.core.strategies", "ignite_ddl.trainer.strategies"}, "strategy"),
        (frozenset({"gloo", "nccl", "xla-tpu"}), {"ignite_ddl.launcher.backends"}, "backend"),
    ]


# The fsdp lab compares its own two modes (a hand-written DDP and FSDP side by side), not --strategy's choices.
_OWN_MODES = {"ignite_ddl.labs.fsdp"}


def _compared_strings(tree: ast.Module) -> list[tuple[int, str]]:
    """Every string constant a comparison (==, !=, in, not in) is made against, with its line."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            found += [(node.lineno, i.value) for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_strategy_and_backend_names_are_compared_only_by_their_owners(module):
    """A third strategy or a fourth backend is described in its own module: no other module compares names (the
    house's rule; issue: 11 strategy-name and 8 backend-name comparisons were spread over 11 modules)."""
    tree = ast.parse(MODULES[module].read_text())
    compared = _compared_strings(tree)
    for names, owners, what in _owned_names():
        if module in owners or (what == "strategy" and module in _OWN_MODES):
            continue
        bad = [f"line {line}: {value!r}" for line, value in compared if value in names]
        assert not bad, f"{module} compares {what} names (ask the {what}'s description instead): {bad}"


def test_the_name_rule_can_fail():
    tree = ast.parse('if config.strategy == "fsdp" or backend in ("gloo", "nccl"):\n    pass\n')
    assert [v for _, v in _compared_strings(tree)] == ["fsdp", "gloo", "nccl"]


def test_the_layers_are_drawn_as_declared():
    """The layer order is declared once, above; docs/development.md's drawing and the package docstring's list
    follow it (top to bottom, bottom to top)."""
    import ignite_ddl

    doc = (PACKAGE.parent / "docs" / "development.md").read_text()
    drawing = doc.split("```\n__main__", 1)[1].split("```", 1)[0]
    rows = [line.split("  ", 1)[0].strip() for line in ("__main__" + drawing).splitlines() if line[:1].strip()]
    drawn = [tuple(p.strip() for p in row.split("·")) for row in rows]
    declared = [tuple(p for p in layer if p != "__init__") for layer in reversed(LAYERS)]  # the package itself
    assert drawn == declared, drawn
    listed = [line.split("``")[1] for line in (ignite_ddl.__doc__ or "").splitlines() if line.startswith("- ``")]
    firsts = [layer[0] for layer in LAYERS if layer[0] not in ("__init__", "__main__")]
    assert listed == firsts, listed
