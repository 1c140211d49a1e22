"""The labs' typed interface: Options dataclasses, run(**options), and the command line generated from them.

Nothing here starts a process: every call is refused, or only parsed, before a lab would launch its ranks.
"""

from __future__ import annotations

import dataclasses

import pytest

from ignite_ddl.cli import build_parser, main
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import option_specs
from ignite_ddl.labs import Lab, LabOptions, collectives, ddp_sgd, lab_modules, shards, speedup


def test_every_lab_module_is_a_lab():
    for lab in lab_modules():
        assert isinstance(lab, Lab), lab.__name__
        assert issubclass(lab.Options, LabOptions) and dataclasses.is_dataclass(lab.Options)
        assert lab.CLAIM and "\n" not in lab.CLAIM
        lab.Options()  # the defaults are valid


def test_options_are_typed_and_checked():
    assert ddp_sgd.Options(procs=[2, 1], lr=1).procs == (2, 1)  # a list is kept as a tuple
    assert isinstance(ddp_sgd.Options(lr=1).lr, float)  # an int is a fine float
    assert shards.Options(image_grid=None).image_grid is None
    with pytest.raises(ConfigError, match="option nproc_per_node expects int, got '2'"):
        collectives.run(nproc_per_node="2")
    with pytest.raises(ConfigError, match="option bench expects bool, got 1"):
        collectives.run(bench=1)
    with pytest.raises(ConfigError, match="option procs expects a sequence of int, got '1,2'"):
        speedup.run(procs="1,2")
    with pytest.raises(ConfigError, match=r"unknown backend 'mpi' \(choose from: auto, gloo, nccl, xla-tpu\)"):
        collectives.run(backend="mpi")
    with pytest.raises(TypeError, match="nproc"):
        collectives.run(nproc=2)  # not an option: Python refuses the keyword
    with pytest.raises(dataclasses.FrozenInstanceError):
        ddp_sgd.Options().steps = 3


def test_cli_options_come_from_the_dataclass():
    specs = option_specs(ddp_sgd.Options)
    args = build_parser("ddp-sgd").parse_args(["ddp-sgd"])
    assert {name: getattr(args, name) for name in specs} == dataclasses.asdict(ddp_sgd.Options())
    args = build_parser("ddp-sgd").parse_args(["ddp-sgd", "--procs", "1,2", "--lr", "0.5", "--backend", "gloo"])
    assert (args.procs, args.lr, args.backend) == ([1, 2], 0.5, "gloo")
    args = build_parser("collectives").parse_args(["collectives", "--bench", "--max-size", "64K"])
    assert args.bench is True and args.max_size == 64 << 10


def test_lab_help_shows_defaults_choices_and_the_claim(capsys):
    with pytest.raises(SystemExit):
        main(["collectives", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    assert "--backend {auto,gloo,nccl,xla-tpu}" in flat and "--nproc-per-node INT" in flat
    assert "(default: 64M)" in flat and "--bench, --no-bench" in flat and "--json PATH" in flat
    assert f"Claim: {collectives.CLAIM}." in flat
    with pytest.raises(SystemExit):
        main(["speedup", "--help"])
    assert "--procs INT[,INT...] process counts, with 1 (default: 1,2,4,8)" in " ".join(capsys.readouterr().out.split())


def test_cli_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["ddp-sgd", "--procs", "1,two"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "ignite-ddl: error: argument --procs: expected comma-separated int values, got '1,two'\n"
    )
    assert main(["ddp-sgd", "--procs", "4", "--batch-size", "30"]) == 2  # refused before any process starts
    assert capsys.readouterr().err == "ignite-ddl: error: batch_size 30 cannot be split evenly over [4] processes\n"
