"""Every shipped experiment spec is valid, and each experiment folder explains itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from ignite_ddl.sweep import expand, load_spec

EXPERIMENTS = sorted(p.parent for p in (Path(__file__).parents[1] / "experiments").glob("*/spec.yaml"))


def test_the_experiments_are_there():
    names = {p.name for p in EXPERIMENTS}
    assert {"quickstart", "cpu_scaling", "gpu_single", "gpu_multi", "tpu", "cifar10_resnet18"} <= names


@pytest.mark.parametrize("folder", EXPERIMENTS, ids=lambda p: p.name)
def test_spec_is_valid_and_documented(folder):
    spec = load_spec(folder / "spec.yaml")
    assert spec.name == folder.name and list(expand(spec))
    readme = (folder / "README.md").read_text()
    assert readme.startswith(f"# {folder.name}") and "**Question:**" in readme
    assert f"experiments/{folder.name}/spec.yaml" in readme
