"""Every shipped experiment spec is valid, each experiment folder explains itself, and each runs by name."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import ignite_ddl
from ignite_ddl.cli import main
from ignite_ddl.sweep import expand, load_spec
from ignite_ddl.sweep.experiments import spec_path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted(p.parent for p in (ROOT / "experiments").glob("*/spec.yaml"))


def test_the_experiments_are_there():
    names = {p.name for p in EXPERIMENTS}
    assert {"quickstart", "cpu_scaling", "gpu_single", "gpu_multi", "tpu", "cifar10_resnet18"} <= names


@pytest.mark.parametrize("folder", EXPERIMENTS, ids=lambda p: p.name)
def test_spec_is_valid_and_documented(folder):
    spec = load_spec(folder / "spec.yaml")
    assert spec.name == folder.name and (spec.search or list(expand(spec)))  # a search's runs are proposed
    readme = (folder / "README.md").read_text()
    assert readme.startswith(f"# {folder.name}") and "**Question:**" in readme
    assert f"experiments/{folder.name}/spec.yaml" in readme


def test_experiments_lists_each_with_its_question(capsys):
    assert main(["experiments"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = {line.split()[0]: line.split(None, 1)[1] for line in lines[:-1]}
    assert set(listed) == {p.name for p in EXPERIMENTS}
    assert listed["quickstart"].endswith("?") and "second CPU process" in listed["quickstart"]
    assert lines[-1].startswith("run one: ignite-ddl sweep NAME")


def test_a_spec_is_found_by_name_or_by_its_path_in_the_repository(tmp_path, monkeypatch):
    quickstart = EXPERIMENTS[[p.name for p in EXPERIMENTS].index("quickstart")] / "spec.yaml"
    assert spec_path("quickstart") == quickstart
    monkeypatch.chdir(tmp_path)  # no experiments/ here: the docs' path names the shipped spec
    assert spec_path("experiments/quickstart/spec.yaml") == quickstart
    second = quickstart.parents[1] / "ddp_zero_fsdp" / "wide_mlp.yaml"  # an experiment's other spec, shipped too
    assert spec_path("experiments/ddp_zero_fsdp/wide_mlp.yaml") == second and second.is_file()
    (tmp_path / "quickstart").write_text("name: mine\ngrid: {batch_size: [32]}\n")
    assert spec_path("quickstart") == Path("quickstart")  # a file of that name comes first
    assert spec_path("missing.yaml") == Path("missing.yaml")  # a path: reading it says it is missing


def test_an_unknown_experiment_is_refused_in_one_line(capsys):
    assert main(["sweep", "quickstrat"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ignite-ddl: error: no spec file 'quickstrat' and no shipped experiment of that name")
    assert "quickstart" in err and len(err.splitlines()) == 1


def test_the_version_is_written_once():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    attr = pyproject["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attr.rpartition(".")
    assert getattr(importlib.import_module(module), name) == ignite_ddl.__version__
