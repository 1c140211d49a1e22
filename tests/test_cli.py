"""The command line itself: help without torch, --version, defaults and choices in help, the lab index."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import run_cli

from ignite_ddl import __version__
from ignite_ddl.cli import main
from ignite_ddl.labs import LabEntry, lab_index, lab_modules


def imports_torch(*argv: str) -> bool:
    """Whether running the CLI with ``argv`` imports torch (in a fresh interpreter)."""
    code = (
        "import sys\nfrom ignite_ddl.cli import main\n"
        f"try:\n    main({list(argv)!r})\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return done.stderr.strip().splitlines()[-1] == "True"


@pytest.mark.slow
@pytest.mark.distributed
def test_help_does_not_import_torch():
    assert not imports_torch("--help")
    assert not imports_torch("train", "--help")
    assert not imports_torch("sweep", "--help")
    assert imports_torch("collectives", "--help")  # a lab's options come from its module, which needs torch


def test_version(capsys):
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"ignite-ddl {__version__}"


def test_train_help_shows_defaults_and_choices():
    text = run_cli("train", "--help").stdout
    flat = " ".join(text.split())
    assert "--amp {none,bf16,fp16}" in flat and "--backend {auto,none,gloo,nccl,xla-tpu}" in flat
    assert "GLOBAL batch size; each rank gets batch_size // world_size [>= 1] (default: 128)" in flat
    assert "--checkpoints, --no-checkpoints save resumable checkpoints" in flat and "(default: on)" in flat


def test_every_lab_is_listed_without_importing_it():
    index = lab_index()
    modules = {lab.NAME: LabEntry(lab.__name__.rsplit(".", 1)[-1], lab.HELP, lab.CLAIM) for lab in lab_modules()}
    assert modules == index
    text = " ".join(run_cli("--help").stdout.split())
    for name in index:
        assert name in text


def test_sweep_without_a_spec_or_grid_says_what_it_needs(capsys):
    assert main(["sweep"]) == 2
    assert capsys.readouterr().err == (
        "ignite-ddl: error: sweep needs a spec file (ignite-ddl sweep SPEC.yaml) or a grid axis (--grid OPTION=V1,V2)\n"
    )


@pytest.mark.slow
def test_piped_output_has_no_progress_bar_redraws(tmp_path):
    # progress is on by default; with stderr going to a pipe, tqdm's redraws would fill a log file
    result = run_cli(
        "train", "--train-size", "256", "--val-size", "64", "--epochs", "1", "--output-dir", str(tmp_path / "run")
    )
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr and "it/s]" not in result.stderr


PROGRAM_EXIT = """
import atexit, sys, threading, time
from ignite_ddl.cli import run

atexit.register(lambda: print("exit handler ran", flush=True))
late = threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished")))
late.start()
sys.stdout.write("buffered, never flushed by us")
sys.argv = ["ignite-ddl", *sys.argv[1:]]
run()
"""


@pytest.mark.parametrize(("argv", "status"), [(["--version"], 0), (["sweep", "no-such-spec.yaml"], 2)])
def test_the_program_exits_with_its_status_and_nothing_lost(argv, status):
    """The program skips the interpreter's teardown (torch's modules took 1-2 s to free at every exit): its status,
    its buffered output, a thread still running and the exit handlers libraries registered all survive that."""
    done = subprocess.run([sys.executable, "-c", PROGRAM_EXIT, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == status, done.stderr
    assert "buffered, never flushed by us" in done.stdout
    assert "thread finished" in done.stdout and done.stdout.rstrip().endswith("exit handler ran")
