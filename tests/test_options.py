"""One declaration per option: every option of the suite (train, launch, sweep, SLURM, each lab) is a field made with
``option()`` and a role, and the command line, the sweep's workload axes and the report's layout axes are derived
from those declarations alone."""

from __future__ import annotations

import argparse
import dataclasses
import math

import pytest

from ignite_ddl.cli import build_parser
from ignite_ddl.core import config
from ignite_ddl.core.config import LaunchOptions, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import Options, Role, names_with_role, option, option_flag, option_specs
from ignite_ddl.labs import lab_index, load_lab
from ignite_ddl.sweep.spec import SlurmOptions, Spec

DECLARED = [TrainConfig, Spec, SlurmOptions]


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")}


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser(command=command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


@pytest.mark.parametrize("options", [*DECLARED, *[load_lab(name).Options for name in lab_index()]])
def test_every_field_has_a_role(options):
    specs = option_specs(options)
    assert set(specs) == {f.name for f in dataclasses.fields(options)}
    assert all(isinstance(spec.role, Role) for spec in specs.values())


def test_a_field_without_a_role_is_an_error():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Undeclared(Options):
        steps: int = 3

    with pytest.raises(TypeError, match="Undeclared.steps is not declared with option"):
        Undeclared()
    with pytest.raises(TypeError, match="role is a Role"):
        option(1, "steps", role="training")


def test_train_flags_are_the_declarations():
    flags = _flags(_subparser("train"))
    for name, spec in option_specs(TrainConfig).items():
        assert option_flag(name) in flags
        if spec.kind is bool:
            assert "--no-" + option_flag(name)[2:] in flags
    declared = {option_flag(n) for n in option_specs(TrainConfig)}
    declared |= {"--no-" + option_flag(n)[2:] for n, s in option_specs(TrainConfig).items() if s.kind is bool}
    assert flags - {"--help"} == declared  # nothing on the command line that is not declared


def test_sweep_flags_are_the_spec_keys():
    flags = _flags(_subparser("sweep"))
    for options in (Spec, SlurmOptions):
        for name, spec in option_specs(options).items():
            if spec.kind not in (dict, list):  # base, grid, slurm, exclude: their own flags or only in a spec
                assert option_flag(name) in flags, name
    assert {"--workload", "--contention-threshold"} <= flags


@pytest.mark.parametrize("command", sorted(lab_index()))
def test_lab_flags_are_its_options(command):
    flags = _flags(_subparser(command))
    for name in option_specs(load_lab(command).Options):
        assert option_flag(name) in flags


def test_sweep_workload_and_report_layout_axes_are_derived():
    from ignite_ddl.report import analysis, comparisons
    from ignite_ddl.report.plots import throughput

    assert config.WORKLOAD_OPTIONS == names_with_role(TrainConfig, Role.WORKLOAD)
    assert option_specs(Spec)["workload"].default == config.WORKLOAD_OPTIONS
    layout = set(names_with_role(TrainConfig, Role.LAUNCH, Role.LAYOUT, Role.OUTPUT))
    assert set(config.LAYOUT_OPTIONS) == layout
    assert {"nproc_per_node", "backend", "strategy", "output_dir"} <= layout
    assert not layout & set(config.WORKLOAD_OPTIONS)
    assert comparisons.LAYOUT_OPTIONS is config.LAYOUT_OPTIONS and throughput.LAYOUT_OPTIONS is config.LAYOUT_OPTIONS
    assert not hasattr(analysis, "DEFAULT_WORKLOAD")


def test_launch_settings_are_the_launch_fields():
    from ignite_ddl.launcher.settings import LaunchSettings

    launch_fields = set(names_with_role(TrainConfig, Role.LAUNCH))
    assert launch_fields == {f.name for f in dataclasses.fields(LaunchOptions)}
    assert {f.name for f in dataclasses.fields(LaunchSettings)} == launch_fields | {"log_dir"}
    settings = LaunchSettings.of(TrainConfig(nproc_per_node=2, timeout=60, output_dir="out"))
    assert (settings.nproc_per_node, settings.timeout, settings.log_dir) == (2, 60.0, "out/logs")


@pytest.mark.parametrize(
    "values, message",
    [
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"lr": math.nan}, "lr must be a finite number"),
        ({"timeout": 1e30}, "timeout must be <= 2592000"),
        ({"seed": -1}, "seed must be >= 0, got -1"),
        ({"master_port": 70000}, "master_port must be <= 65535"),
        ({"amp": "fp8"}, "unknown amp 'fp8' (choose from: none, bf16, fp16)"),
        ({"epochs": "3"}, "option epochs expects int, got '3'"),
        ({"shuffle": 1}, "option shuffle expects bool, got 1"),
        ({"output_dir": " "}, "output_dir must not be empty"),
        ({"stall_timeout": 400.0}, "stall_timeout (400 s) must be shorter than timeout (300 s)"),
    ],
)
def test_values_are_checked_where_they_are_declared(values, message):
    with pytest.raises(ConfigError) as caught:
        TrainConfig(**values)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_from_dict_and_argv_round_trip():
    cfg = TrainConfig.from_dict({"nproc_per_node": 2, "lr": 1, "output_dir": "x"})
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float)
    parsed = _subparser("train").parse_args(cfg.to_argv())
    assert TrainConfig(**{n: getattr(parsed, n) for n in option_specs(TrainConfig)}) == cfg
    with pytest.raises(ConfigError, match="unknown option"):
        TrainConfig.from_dict({"no_such_option": 1})


def test_a_new_axis_is_its_declaration_and_the_code_that_acts_on_it():
    """pin_memory was added as one declaration (core/config.py) and two lines that act on it (trainer/data.py):
    the train flag, the sweep axis and the check of its values came with the declaration."""
    from ignite_ddl.sweep import expand, parse_spec
    from ignite_ddl.trainer.data import build_loaders

    assert "--pin-memory" in _flags(_subparser("train")) and "--no-pin-memory" in _flags(_subparser("train"))
    runs = list(expand(parse_spec({"grid": {"pin_memory": [True, False]}})))
    assert [run.config.pin_memory for run in runs] == [True, False]
    with pytest.raises(ConfigError, match="option pin_memory expects bool or null"):
        parse_spec({"grid": {"pin_memory": ["yes"]}})
    for pinned in (True, False):
        loaders = build_loaders(TrainConfig(pin_memory=pinned, train_size=64, val_size=16, batch_size=16))
        assert loaders.train.pin_memory is pinned


def test_a_spec_excludes_combinations_of_its_grid():
    from ignite_ddl.sweep import expand, parse_spec

    spec = parse_spec(
        {
            "grid": {"strategy": ["ddp", "fsdp"], "nproc_per_node": [1, 2]},
            "exclude": [{"strategy": "fsdp", "nproc_per_node": 1}],
        }
    )
    assert [run.label for run in expand(spec)] == [
        "strategy=ddp nproc_per_node=1",
        "strategy=ddp nproc_per_node=2",
        "strategy=fsdp nproc_per_node=2",
    ]
    with pytest.raises(ConfigError, match="'exclude' holds mappings of grid options"):
        parse_spec({"grid": {"strategy": ["ddp"]}, "exclude": [{"model": "cnn"}]})
    with pytest.raises(ConfigError, match="leaves no configuration"):
        parse_spec({"grid": {"strategy": ["ddp"]}, "exclude": [{"strategy": "ddp"}]})
