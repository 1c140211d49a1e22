"""Tests that start process groups say so: a test that launches ranks carries the ``distributed`` marker, on itself
or on its module (those that take more than a few seconds are also ``slow``, left out of the fast subset)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ignite_ddl.labs import lab_index

TESTS = Path(__file__).parent
# What starting a process group looks like in a test's own code: a launch, torchrun, a run of 2+ processes or of
# several nodes, a lab on the command line (every lab starts ranks). Runs started through tests/scenarios.py are
# marked by hand (the scenario's name says how many processes it runs).
STARTS_RANKS = re.compile(
    r"\blaunch\(|torchrun|idist\.Parallel|\btrain\(\s*TrainConfig\([^)]*nproc_per_node=[2-9]"
    r"|\.run\([^)]*(nproc_per_node|procs|workers)=|run_cli\(\s*\"train\"[^)]*--nproc-per-node\", \"[2-9]"
    r"|ranks_args\(\s*[2-9]|\"--nnodes\"|_node_of_two\("
    r"|run_cli\(\s*\"(" + "|".join(map(re.escape, lab_index())) + r")\""
)


def _marks(decorators: list[ast.expr]) -> set[str]:
    return {m.group(1) for d in decorators for m in re.finditer(r"mark\.(\w+)", ast.unparse(d))}


def _unmarked() -> list[str]:
    found = []
    for path in sorted(TESTS.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        source = path.read_text()
        tree = ast.parse(source)
        module = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
                module = {m.group(1) for m in re.finditer(r"mark\.(\w+)", ast.unparse(node.value))}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                body = ast.get_source_segment(source, node) or ""
                marks = module | _marks(node.decorator_list)
                # refused before any process starts
                refusal = any(word in body for word in ("raises(ConfigError", "refused(", "returncode != 0"))
                if STARTS_RANKS.search(body) and not refusal and "distributed" not in marks:
                    found.append(f"{path.name}::{node.name}")
    return found


def test_tests_that_start_ranks_are_marked():
    assert not _unmarked(), "start process groups without @pytest.mark.distributed: " + ", ".join(_unmarked())


def test_the_rule_can_fail(tmp_path, monkeypatch):
    (tmp_path / "test_example.py").write_text(
        "from ignite_ddl import TrainConfig, train\n\n"
        "def test_two(tmp_path):\n    train(TrainConfig(nproc_per_node=2))\n"
    )
    monkeypatch.setattr(f"{__name__}.TESTS", tmp_path)
    assert _unmarked() == ["test_example.py::test_two"]
