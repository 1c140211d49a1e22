"""Sweeps: every configuration in its own launch, failures recorded, crash-safe results, resume, bad specs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import run_cli, start_marked, wait_gone

from ignite_ddl.cli import main
from ignite_ddl.core.results import read_results
from ignite_ddl.core.validation import record_problem
from ignite_ddl.sweep import expand, parse_spec

TINY = {"dataset": "synthetic", "train_size": 256, "val_size": 64, "batch_size": 64, "epochs": 1}


def write_spec(path, **spec):
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.fixture(scope="module")
def failing_sweep(tmp_path_factory):
    """Three configurations; inception_v3 cannot take 32x32 images and fails on its rank."""
    tmp = tmp_path_factory.mktemp("sweep")
    spec = write_spec(tmp / "spec.yaml", name="models", base=TINY, grid={"model": ["toy", "inception_v3", "mlp"]})
    result = run_cli("sweep", spec, "--output-dir", str(tmp / "out"), timeout=300)
    return result, tmp / "out"


@pytest.mark.slow
@pytest.mark.distributed
def test_a_failure_does_not_lose_the_others(failing_sweep):
    result, out = failing_sweep
    assert result.returncode == 1, result.stderr  # the sweep had a failure
    records = read_results(out / "results.jsonl")
    assert [r["grid"]["model"] for r in records] == ["toy", "inception_v3", "mlp"]
    ok = [r for r in records if r["status"] == "completed"]
    assert len(ok) == 2 and all(r["summary"]["samples_per_s"] > 0 and r["summary"]["iterations"] == 4 for r in ok)
    failed = records[1]
    assert failed["status"] == "failed" and failed["exit_code"] == 1 and failed["summary"] is None
    assert failed["error"].startswith("rank 0 failed: RuntimeError")
    assert "2 of 3 runs completed" in result.stdout


@pytest.mark.slow
@pytest.mark.distributed
def test_refused_combination_is_recorded_with_its_reason(tmp_path):
    result = run_cli(
        "sweep",
        "--grid",
        "backend=none,nccl",
        *[f"--set={k}={v}" for k, v in TINY.items()],
        "--name",
        "backends",
        "--output-dir",
        str(tmp_path),
        "--no-report",
    )
    assert result.returncode == 1
    none, nccl = read_results(tmp_path / "results.jsonl")
    assert none["status"] == "completed"
    assert nccl["status"] == "refused" and "nccl needs CUDA" in nccl["error"]
    assert not (tmp_path / "report.md").exists()


FSDP_ONE_PROCESS = "strategy fsdp needs 2 or more processes (one process: --strategy none)"


@pytest.mark.slow
@pytest.mark.distributed
def test_a_refused_grid_point_is_recorded_and_the_others_run(tmp_path):
    """fsdp with one process is refused, not the spec: the three other points run, the refused one is one record
    with its reason, said in the progress, the report and the verdict lines; the sweep exits 0. ddp with one
    process ran as none: the report labels it so in every table."""
    out = tmp_path / "out"
    tiny = [f"--set={k}={v}" for k, v in {**TINY, "model": "toy"}.items()]
    grid = ["--grid", "strategy=ddp,fsdp", "--grid", "nproc_per_node=1,2"]
    result = run_cli("sweep", *grid, *tiny, "--name", "points", "--output-dir", str(out), timeout=300)
    assert result.returncode == 0, result.stderr
    records = read_results(out / "results.jsonl")
    runs = sorted((r["grid"]["strategy"], r["grid"]["nproc_per_node"], r["status"]) for r in records)
    assert runs == [("ddp", 1, "completed"), ("ddp", 2, "completed"), ("fsdp", 1, "refused"), ("fsdp", 2, "completed")]
    (refused,) = [r for r in records if r["status"] == "refused"]
    assert refused["grid"] == {"strategy": "fsdp", "nproc_per_node": 1} and refused["index"] == 2
    assert (refused["status"], refused["error"], refused["exit_code"]) == ("refused", FSDP_ONE_PROCESS, None)
    assert not (out / "runs" / "cfg002-r0").exists(), "a refused configuration is never launched"
    said = f"cfg002 strategy=fsdp nproc_per_node=1: refused, not run: {FSDP_ONE_PROCESS}"
    assert said in result.stdout and "sweep done: 3 of 3 runs completed; 1 configuration(s) refused" in result.stdout
    assert f"refused, not run: cfg002 (strategy=fsdp, nproc_per_node=1): {FSDP_ONE_PROCESS}" in result.stdout
    report = (out / "report.md").read_text()
    assert f"| cfg002 | strategy=fsdp, nproc_per_node=1 | {FSDP_ONE_PROCESS} |" in report
    assert "| cfg002 |" not in report.split("## Refused")[0], "a refused configuration is no row of the results"
    ddp_one = [line for line in report.splitlines() if line.startswith("| cfg000 |") and "none" in line]
    assert len(ddp_one) == 2 and all("| ddp -> none (one process) |" in line for line in ddp_one)  # decision, memory


def test_a_refused_grid_point_is_planned_as_one_record_and_left_out_of_the_runs(tmp_path):
    """Refused before the first run: what the options cannot combine (TrainConfig's own checks) and what the
    strategy refuses for this many processes; the others are planned, each refusal is a valid record."""
    from ignite_ddl.sweep.plan import refused_configurations
    from ignite_ddl.sweep.records import launched, refused_record

    spec = parse_spec(
        {
            "grid": {"strategy": ["ddp", "fsdp"], "nproc_per_node": [1, 2], "early_stopping": [0, 2]},
            "exclude": [{"strategy": "ddp", "early_stopping": 2}],
            "base": {"model": "toy", "eval_every": 0},
        }
    )
    refused = refused_configurations(spec, output_dir=tmp_path)
    reasons = {(r.grid["strategy"], r.grid["nproc_per_node"], r.grid["early_stopping"]): r.reason for r in refused}
    assert reasons == {
        ("fsdp", 1, 0): FSDP_ONE_PROCESS,
        ("fsdp", 1, 2): "early_stopping needs evaluations to compare: set eval_every to 1 or more",
        ("fsdp", 2, 2): "early_stopping needs evaluations to compare: set eval_every to 1 or more",
    }
    runs = list(expand(spec, tmp_path, refused={r.index for r in refused}))
    assert sorted({(r.config.strategy, r.config.nproc_per_node) for r in runs}) == [("ddp", 1), ("ddp", 2), ("fsdp", 2)]
    for found in refused:
        record = refused_record(found)
        assert record_problem(record) is None and not launched(record) and record["error"] == found.reason
    keys = {refused_record(r)["key"] for r in refused} | {r.key for r in runs}
    assert len(keys) == len(refused) + len(runs)
    # Recorded once however often the sweep is resumed; never a run done: one refused earlier that a resumed sweep
    # no longer refuses (its dataset's files are there now) runs then.
    from ignite_ddl.sweep.session import Session

    for resume in (False, True):
        session = Session(spec, tmp_path, None, resume, print)  # no executor: no run is executed here
        session.refuse(refused)
    assert [r["status"] for r in session.records()] == ["refused"] * 3 and not session.done()


@pytest.mark.slow
@pytest.mark.distributed
def test_timeout_is_recorded(tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", base={**TINY, "train_size": 50000}, grid={"model": ["cnn"]}, timeout_s=4)
    result = run_cli("sweep", spec, "--output-dir", str(tmp_path / "out"), "--no-report")
    assert result.returncode == 1
    (record,) = read_results(tmp_path / "out" / "results.jsonl")
    assert record["status"] == "timeout" and record["error"] == "timed out after 4 s"


@pytest.mark.slow
@pytest.mark.distributed
def test_killed_sweep_resumes_without_running_anything_twice(tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", base=TINY, grid={"model": ["toy", "mlp"], "batch_size": [32, 64]})
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "ignite_ddl", "sweep", spec, "--output-dir", str(out), "--no-report"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(read_results(results)) < 1:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and the run in progress
    proc.wait()
    before = read_results(results)
    assert 1 <= len(before) < 4
    for line in results.read_text().splitlines():
        json.loads(line)  # whole lines only
    with open(results, "a") as f:
        f.write('{"key": "cut sho')  # as if killed in the middle of a write

    result = run_cli("sweep", spec, "--output-dir", str(out), "--resume", "--no-report", timeout=300)
    assert result.returncode == 0, result.stderr
    records = read_results(results)
    assert len(records) == 4 and len({r["key"] for r in records}) == 4
    assert records[: len(before)] == before and all(r["status"] == "completed" for r in records)
    assert f"resuming: {len(before)} of 4 runs already recorded" in result.stdout


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("start", ["preloaded", "fresh"])
def test_ctrl_c_stops_the_sweep_and_keeps_what_finished(tmp_path, start):
    # The second configuration trains long enough to be under way whenever the signal comes.
    spec = write_spec(tmp_path / "spec.yaml", base=TINY, grid={"train_size": [256, 60000, 256]}, start=start)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "ignite_ddl", "sweep", spec, "--output-dir", str(out)]
    marker = f"ctrl-c-{os.getpid()}-{start}"
    proc = start_marked(cmd, marker)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(read_results(out / "results.jsonl")) < 1:
        time.sleep(0.2)
    time.sleep(1.0)  # the second run is under way
    proc.send_signal(signal.SIGINT)  # to the sweep alone, as a terminal would (its runs have their own groups)
    try:
        _, stderr = proc.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "interrupted" in stderr
    records = read_results(out / "results.jsonl")
    # The finished run is kept; the one under way is recorded as interrupted, so --resume runs it again.
    assert [(r["grid"]["train_size"], r["status"]) for r in records] == [(256, "completed"), (60000, "interrupted")]
    # the interrupted run's processes were stopped, and the fork server noticed its parent is gone: nothing is left
    assert wait_gone(marker, seconds=10) == []


@pytest.mark.slow
@pytest.mark.distributed
def test_existing_results_need_resume(tmp_path):
    (tmp_path / "results.jsonl").write_text("")
    result = run_cli("sweep", "--grid", "model=toy", "--output-dir", str(tmp_path))
    assert result.returncode == 2 and "pass --resume" in result.stderr


BAD_SPECS = {
    "unknown key": ({"grid": {"model": ["toy"]}, "repeat": 2}, "unknown spec key(s): repeat"),
    "unknown train option": ({"grid": {"modell": ["toy"]}}, "unknown train option(s) in the spec: modell"),
    "empty grid": ({"grid": {}}, "spec 'grid' must map at least one"),
    "empty axis": ({"grid": {"model": []}}, "needs a non-empty list"),
    "wrong type": ({"grid": {"epochs": ["two"]}}, "option epochs expects int"),
    "wrong repeats": ({"grid": {"model": ["toy"]}, "repeats": 0}, "repeats must be >= 1, got 0"),
    "unknown backend": ({"grid": {"backend": ["gloo", "mpi3"]}}, "unknown backend 'mpi3'"),
    "not a mapping": (["grid"], "a sweep spec is a mapping"),
    # A spec whose every configuration is refused: nothing would run.
    "every point refused by its options": (
        {"grid": {"early_stopping": [2, 3]}},
        "all 2 configurations of the grid are refused, nothing to run; the first, configuration {'early_stopping': 2}: "
        "early_stopping needs evaluations",
    ),
    "every point refused by its strategy": (
        {"grid": {"seed": [1, 2]}, "base": {"strategy": "fsdp"}},
        f"the first, configuration {{'seed': 1}}: {FSDP_ONE_PROCESS}",
    ),
    "the one point refused": ({"grid": {"nproc_per_node": [1]}, "base": {"strategy": "fsdp"}}, FSDP_ONE_PROCESS),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_spec_is_refused_before_anything_runs(tmp_path, capsys, case):
    spec, message = BAD_SPECS[case]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [err.strip()] and message in err
    assert not (tmp_path / "out").exists()


def test_unreadable_specs(tmp_path, capsys):
    (tmp_path / "broken.yaml").write_text("grid: [unclosed")
    for spec, message in (
        (tmp_path / "missing.yaml", "cannot read spec"),
        (tmp_path / "broken.yaml", "not valid YAML"),
    ):
        assert main(["sweep", str(spec), "--output-dir", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.distributed
def test_bad_spec_from_the_command_line(tmp_path):
    result = run_cli("sweep", "--grid", "epochs=1,two", "--output-dir", str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2 and "option epochs expects int" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("order", ["interleaved", "shuffled", "grouped"])
def test_run_orders_cover_every_run_once_and_keep_their_keys(order):
    spec = {"grid": {"model": ["toy", "mlp", "cnn"]}, "repeats": 3, "order": order, "seed": 7}
    runs = list(expand(parse_spec(spec)))
    assert sorted((r.index, r.repeat) for r in runs) == [(i, r) for i in range(3) for r in range(3)]
    keys = {(r.index, r.repeat): r.key for r in runs}  # a run's identity does not depend on the order
    assert keys == {(r.index, r.repeat): r.key for r in expand(parse_spec({**spec, "order": "grouped"}))}
    rounds = [[r.index for r in runs if r.repeat == k] for k in range(3)]
    if order == "grouped":
        assert [(r.index, r.repeat) for r in runs][:3] == [(0, 0), (0, 1), (0, 2)]
    else:  # every configuration once per round, the rounds one after the other
        assert [r.repeat for r in runs] == [0, 0, 0, 1, 1, 1, 2, 2, 2] and all(sorted(x) == [0, 1, 2] for x in rounds)
    if order == "interleaved":
        assert rounds == [[0, 1, 2], [2, 1, 0], [0, 1, 2]]
    if order == "shuffled":
        assert rounds == [[r.index for r in expand(parse_spec(spec)) if r.repeat == k] for k in range(3)]  # seeded


@pytest.mark.parametrize("spec", sorted(Path(__file__).resolve().parents[1].glob("experiments/*/spec.yaml")))
def test_a_spec_file_reads_back_as_itself(spec):
    """The command line reads a spec file, adds its flags to the spec's plain data and parses that again: a spec
    without a search must stay one (it once came back asking for a search without a budget: every
    `ignite-ddl sweep SPEC.yaml` refused)."""
    from ignite_ddl.sweep.spec import load_spec, parse_spec

    loaded = load_spec(spec)
    assert parse_spec(loaded.to_dict(), default_name=loaded.name) == loaded
