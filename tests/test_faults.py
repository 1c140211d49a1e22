"""Faults, injected for real: damaged results files, bad values, bad checkpoints and dataset files, signals, hung
ranks, absent nodes, shared folders, a full disk. Each must end promptly with one clear line and lose no record."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    SMALL_SWEEP,
    check_ok,
    completed_record,
    processes_marked,
    run_cli,
    run_script,
    start_marked,
    wait_gone,
)

from ignite_ddl.cli import main
from ignite_ddl.core.results import append_record, load_results, read_results, rejected_path, repair_results
from ignite_ddl.launcher import free_port
from ignite_ddl.report import load, write_report


def good_record(index: int, repeat: int, rate: float) -> dict:
    return completed_record(
        f"k{index}-r{repeat}",
        index,
        repeat,
        grid={"seed": index},
        config={"seed": index, "model": "cnn"},
        run_dir="nowhere",
        elapsed_s=2.0,
        summary={"world_size": 1, "samples_per_s": rate},
    )


# -- results files: no valid record is ever dropped


def test_a_corrupt_middle_line_loses_no_record(tmp_path):
    path = tmp_path / "results.jsonl"
    for i in range(3):
        append_record(path, good_record(0, i, 100.0 + i))
    with open(path, "a") as f:
        f.write('{"key": "damaged", "ind\n')  # a line damaged in the middle of the file
        f.write("[1, 2, 3]\n")  # JSON, but not a run record
    for i in range(3, 6):
        append_record(path, good_record(0, i, 100.0 + i))
    with open(path, "a") as f:
        f.write('{"key": "cut sho')  # a write cut short at the end

    assert len(read_results(path)) == 6
    records, rejected = load_results(path)
    assert [r.line for r in rejected] == [4, 5, 9]
    assert [r.reason.split(" (")[0] for r in rejected] == ["not JSON", "not a run record", "incomplete last line"]

    moved = repair_results(path)
    assert len(moved) == 3 and [r["repeat"] for r in read_results(path)] == list(range(6))
    assert load_results(path)[1] == []  # the file now holds records only
    assert rejected_path(path).read_bytes().count(b"\n") == 3  # nothing thrown away: moved beside it
    append_record(path, good_record(0, 6, 106.0))
    assert len(read_results(path)) == 7


@pytest.mark.slow
@pytest.mark.distributed
def test_a_line_is_a_run_record_by_run_records_own_declaration():
    """The validator's keys are RunRecord's: without a key marked Essential (the run's identity and outcome) a line
    is no run record, without any other (an older release's record) it is one; every key of the wrong type is
    refused, by its name."""
    import typing

    from ignite_ddl.core.sweep_records import RunRecord
    from ignite_ddl.core.validation import record_problem

    record = good_record(0, 0, 100.0) | {"exit_code": 0, "slurm": {"job_id": "7"}, "prediction": {"peak_bytes": None}}
    assert record_problem(record) is None
    record |= {"status": "failed", "summary": None}  # a completed record's summary is no key it may lack
    hints = typing.get_type_hints(RunRecord, include_extras=True)
    assert set(record) == set(hints)  # every declared key is in the record tested
    essential = {"key", "index", "repeat", "status", "grid", "config"}
    for key in hints:
        lacking = {k: v for k, v in record.items() if k != key}
        assert (record_problem(lacking) is None) == (key not in essential), key
        assert repr(key) in str(record_problem(record | {key: [1]})), key  # no key of a record holds a list


def test_resume_keeps_records_after_a_corrupt_line_and_warns(tmp_path):
    out = tmp_path / "out"
    args = [
        "sweep",
        "--grid",
        "model=toy,mlp",
        "--set",
        "train_size=128",
        "--set",
        "val_size=32",
        "--set",
        "batch_size=32",
        "--set",
        "epochs=1",
        "--output-dir",
        str(out),
        "--no-report",
    ]
    assert run_cli(*args, timeout=300).returncode == 0
    results = out / "results.jsonl"
    first, second = results.read_text().splitlines(keepends=True)
    results.write_text(first + "garbage in the middle\n" + second)
    result = run_cli(*args, "--resume", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "warning: 1 unreadable line(s)" in result.stdout and "every valid record was kept" in result.stdout
    assert "resuming: 2 of 2 runs already recorded" in result.stdout  # nothing re-run
    assert [r["grid"]["model"] for r in read_results(results)] == ["toy", "mlp"]
    assert rejected_path(results).read_text() == "garbage in the middle\n"


def test_a_report_says_how_many_lines_it_skipped(tmp_path):
    path = tmp_path / "results.jsonl"
    for i, rate in enumerate([100.0, 101.0, 99.0]):
        append_record(path, good_record(0, i, rate))
    with open(path, "a") as f:
        f.write('{"not": "a record"}\n')
    report = write_report(tmp_path).read_text()
    assert "**unreadable** (1)" in report and "results.jsonl line 4: not a run record" in report


@pytest.mark.slow
@pytest.mark.distributed
def test_reports_over_foreign_json_end_in_one_line_never_a_traceback(tmp_path):
    """Well-formed JSON of the wrong shape, at random places of otherwise valid records and sweep.json."""
    rng = random.Random(3)
    junk = [None, 0, -1, 1e308, "x", [], [1, "a"], {}, {"a": 1}, True, float("nan")]
    base = [good_record(i, r, 100.0 + 10 * i + r) for i in range(2) for r in range(3)]
    for trial in range(20):
        records = copy.deepcopy(base)
        for record in rng.sample(records, 3):
            path, target = [], record
            while isinstance(target, dict) and target and rng.random() < 0.7:
                key = rng.choice(sorted(target))
                path.append(key)
                if not isinstance(target[key], dict):
                    break
                target = target[key]
            if isinstance(target, dict) and target:
                target[rng.choice(sorted(target))] = rng.choice(junk)
        out = tmp_path / f"t{trial}"
        out.mkdir()
        with open(out / "results.jsonl", "w") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
        (out / "sweep.json").write_text(json.dumps(rng.choice([{"spec": 3}, [], {"host": "x"}, "s", {}])))
        result = run_cli("report", str(out), timeout=120) if trial < 3 else None
        if result is not None:
            assert "Traceback" not in result.stderr and result.returncode in (0, 2), result.stderr
        try:
            analysis = load(out)
        except FileNotFoundError:
            continue
        assert analysis.configs  # the valid records were all read
        write_report(out)


@pytest.mark.slow
@pytest.mark.parametrize("content", ["", "[\n", '{"grid": 1}\n', '"just a string"\n'])
def test_a_report_over_nothing_usable_is_one_line(tmp_path, content):
    (tmp_path / "results.jsonl").write_text(content)
    result = run_cli("report", str(tmp_path), timeout=120)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "no results in" in result.stderr


# -- bad values, bad files: one line, exit 2, before anything starts


def refused(capsys, *argv: str) -> str:
    """Run the CLI in this process (the refusals come before any process starts); its one-line error."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ignite-ddl: error: "), err
    return err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lr", "nan"], "lr must be a finite number, got nan"),
        (["--lr", "inf"], "lr must be a finite number, got inf"),
        (["--weight-decay=-inf"], "weight_decay must be a finite number"),
        (["--output-dir", ""], "output_dir must not be empty"),
        (["--resume", ""], "resume must not be empty"),
        (["--data-dir", " "], "data_dir must not be empty"),
        (["--tracking-uri", ""], "tracking_uri must not be empty"),
        (["--resume", "."], "checkpoint to resume from is a folder: . (pass one of the files in checkpoints/)"),
        (["--timeout", "0"], "timeout must be >= 1, got 0.0"),
        (["--stall-timeout", "-1"], "stall_timeout must be >= 0, got -1.0"),
        (["--stall-timeout", "400"], "stall_timeout (400 s) must be shorter than timeout (300 s)"),
        (["--early-stopping", "2", "--eval-every", "0"], "early_stopping needs evaluations to compare"),
    ],
)
def test_bad_values_are_refused(tmp_path, capsys, args, message):
    output = [] if "--output-dir" in args else ["--output-dir", str(tmp_path / "out")]
    assert message in refused(capsys, "train", *output, *args)


@pytest.mark.parametrize(
    "grid, message",
    [("epochs=[1", "cannot read the value '[1' of epochs"), ("lr=.nan", "lr must be a finite number")],
)
def test_bad_sweep_values_are_refused(tmp_path, capsys, grid, message):
    assert message in refused(capsys, "sweep", "--grid", grid, "--output-dir", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def toy_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "run"
    result = run_cli(
        "train",
        "--model",
        "toy",
        "--epochs",
        "1",
        "--train-size",
        "128",
        "--val-size",
        "32",
        "--batch-size",
        "32",
        "--no-progress",
        "--output-dir",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, message",
    [
        ("text", "not a PyTorch checkpoint"),
        ("empty", "the file is empty"),
        ("other model", "it holds another model's weights than --model cnn"),
        ("other options", "it lacks lr_scheduler"),
        ("best model", "it holds only model weights (a best-model file?)"),
    ],
)
def test_bad_checkpoints_are_refused_in_one_line(tmp_path, capsys, toy_checkpoint, case, message):
    (tmp_path / "text.pt").write_text("hello\n")
    (tmp_path / "empty.pt").write_bytes(b"")
    resumable = next((toy_checkpoint / "checkpoints").glob("*.pt"))
    best = next((toy_checkpoint / "best").glob("*.pt"))
    path, extra = {
        "text": (tmp_path / "text.pt", ["--model", "toy"]),
        "empty": (tmp_path / "empty.pt", ["--model", "toy"]),
        "other model": (resumable, ["--model", "cnn"]),
        "other options": (resumable, ["--model", "toy", "--warmup-epochs", "1"]),
        "best model": (best, ["--model", "toy"]),
    }[case]
    out = tmp_path / "out"
    err = refused(capsys, "train", "--resume", str(path), *extra, "--output-dir", str(out))
    assert message in err and str(path) in err
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_damaged_mnist_files_are_named(tmp_path, capsys, damage):
    from test_datasets import write_mnist

    write_mnist(tmp_path / "data")
    images = tmp_path / "data" / "MNIST" / "raw" / "train-images-idx3-ubyte"
    if damage == "garbage":
        images.write_bytes(b"\x00not an idx file at all" * 10)
    else:
        images.write_bytes(images.read_bytes()[:-100])
    err = refused(
        capsys,
        "train",
        "--dataset",
        "mnist",
        "--data-dir",
        str(tmp_path / "data"),
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert f"mnist file {images} is damaged" in err and "--download" in err


# -- launching: the rendezvous, absent nodes, signals


@pytest.mark.slow
@pytest.mark.distributed
def test_the_rendezvous_store_listens_on_the_rendezvous_address_only(tmp_path):
    check_ok(run_script("scenarios.py", "listeners", str(tmp_path)))
    listeners = json.loads((tmp_path / "listeners.json").read_text())
    assert len(listeners) >= 2  # the store, and gloo's own sockets
    assert all(address.startswith("127.0.0.1:") for address in listeners), listeners


def _node_of_two(node_rank: int, port: int, tmp_path):
    """One node of a two-node run, alone, with a 4 s rendezvous timeout."""
    options = ["--nnodes", "2", "--node-rank", str(node_rank), "--master-addr", "127.0.0.1", "--master-port"]
    return run_cli("train", *options, str(port), "--timeout", "4", "--output-dir", str(tmp_path / "out"), timeout=120)


@pytest.mark.slow
@pytest.mark.distributed
def test_an_absent_node_ends_the_launch_within_its_timeout(tmp_path):
    port = free_port()
    result = _node_of_two(0, port, tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"waiting for nodes at 127.0.0.1:{port}: 1 of 2 present, missing node(s) 1" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"ignite-ddl: error: node(s) 1 of 2 did not join the rendezvous at 127.0.0.1:{port} within 4 s (--timeout); "
        f"start them with --node-rank N --master-addr 127.0.0.1 --master-port {port}"
    )


@pytest.mark.slow
@pytest.mark.distributed
def test_an_unreachable_rendezvous_ends_within_its_timeout_quietly(tmp_path):
    port = free_port()  # nobody listens there
    result = _node_of_two(1, port, tmp_path)
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ignite-ddl: error: cannot reach the rendezvous at 127.0.0.1:{port} within 4 s") and (
        "Connection refused" in last
    )
    assert "socket.cpp" not in result.stderr and "Traceback" not in result.stderr  # no C++ retry warnings


def test_node_0_must_listen_on_its_own_address(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # the interface is named: the address itself is then checked
    err = refused(
        capsys,
        "train",
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--master-addr",
        "192.0.2.1",
        "--master-port",
        "29500",
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert "cannot listen on 192.0.2.1:29500" in err and "must be an address of this machine" in err


def wait_for(path: Path, text: str, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}")


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize(
    "procs, sig, target",
    [
        (2, signal.SIGINT, "group"),
        (2, signal.SIGTERM, "launcher"),
        (1, signal.SIGTERM, "launcher"),
        (2, signal.SIGHUP, "launcher"),
        (2, signal.SIGKILL, "launcher"),
    ],
    ids=["ctrl-c-2-procs", "kill-2-procs", "kill-1-proc", "hangup-2-procs", "kill-9-2-procs"],
)
def test_a_signal_stops_every_rank_and_worker(tmp_path, procs, sig, target):
    out = tmp_path / "out"
    marker = f"signal-{os.getpid()}-{procs}-{sig}"
    cmd = [
        sys.executable,
        "-m",
        "ignite_ddl",
        "train",
        "--nproc-per-node",
        str(procs),
        "--num-workers",
        "2",
        "--train-size",
        "4096",
        "--epochs",
        "100",
        "--no-progress",
        "--output-dir",
        str(out),
    ]
    proc = start_marked(cmd, marker)
    try:
        wait_for(out / "logs" / "rank0.log", "batch ")  # the ranks are built and training
        ranks = procs if procs > 1 else 0  # one process trains in the launcher itself
        expected = 1 + ranks + 2  # the launcher, its ranks, and at least 2 DataLoader workers
        deadline = time.monotonic() + 60  # on a busy machine the workers may take a while to start
        while len(processes_marked(marker)) < expected and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(processes_marked(marker)) >= expected
        if target == "group":  # what a terminal's Ctrl-C does
            os.killpg(proc.pid, sig)
        else:  # what `kill PID` does
            proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    name = signal.Signals(sig).name
    if sig == signal.SIGKILL:  # nothing can run in the launcher: its ranks and workers die with it by themselves
        assert proc.returncode == -sig
    else:
        assert proc.returncode == 128 + sig, stderr
        assert stderr.strip().splitlines()[-1] == f"ignite-ddl: interrupted by {name}: stopped"
    assert "Traceback" not in stderr
    assert wait_gone(marker) == []


def test_a_worker_whose_rank_hung_up_stays_quiet(monkeypatch, capsys):
    """A DataLoader worker's hand-over thread reports its rank's hang-up through sys.excepthook (seen after a
    launcher was killed outright: a traceback in the terminal from a worker of a rank already gone). The worker's
    hook drops hang-ups and passes every other error on."""
    from ignite_ddl.trainer.data import _quiet_worker

    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    _quiet_worker(0)
    for error in (
        ConnectionResetError(104, "Connection reset by peer"),
        BrokenPipeError(32, "Broken pipe"),
        EOFError(),
    ):
        sys.excepthook(type(error), error, None)
    assert capsys.readouterr().err == ""
    sys.excepthook(ValueError, ValueError("a real error"), None)
    assert "ValueError: a real error" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.distributed
def test_sigterm_to_a_sweep_records_the_run_and_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    base = ["--set", "val_size=32", "--set", "batch_size=32", "--set", "epochs=1", "--output-dir", str(out)]
    # the second configuration trains long enough to be under way whenever the signal comes (125 iterations; the
    # signal follows its first logged batch within a poll), and short enough that the resumed sweep re-runs it soon
    args = ["sweep", "--grid", "train_size=128,4000,192", *base, "--no-report"]
    marker = f"sweep-term-{os.getpid()}"
    proc = start_marked([sys.executable, "-m", "ignite_ddl", *args], marker)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(read_results(out / "results.jsonl")) < 1:
            time.sleep(0.2)
        wait_for(out / "runs" / "cfg001-r0" / "logs" / "rank0.log", "batch ")
        proc.send_signal(signal.SIGTERM)  # to the sweep alone: its runs have sessions of their own
        _, stderr = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM and "interrupted by SIGTERM" in stderr, stderr
    first, second = read_results(out / "results.jsonl")
    assert first["status"] == "completed"
    assert second["status"] == "interrupted" and "interrupted by SIGTERM" in second["error"]
    assert wait_gone(marker) == []  # the run in progress did not train on as an orphan

    result = run_cli(*args, "--resume", timeout=600)
    assert result.returncode == 0, result.stderr
    records = read_results(out / "results.jsonl")
    assert [(r["index"], r["status"]) for r in records] == [
        (0, "completed"),
        (1, "interrupted"),
        (1, "completed"),
        (2, "completed"),
    ]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("start", ["preloaded", "fresh"])
def test_a_sweep_killed_outright_leaves_no_run_behind(tmp_path, start):
    # SIGKILL leaves the sweep no chance to stop its run: the run itself notices the sweep is gone (a pidfd watch
    # when preloaded from the fork server, the parent-death signal when started fresh) and stops its ranks.
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        json.dumps(
            {
                "base": {"train_size": 60000, "val_size": 64, "epochs": 1, "nproc_per_node": 2, "backend": "gloo"},
                "grid": {"seed": [1]},
                "repeats": 1,
                "start": start,
            }
        )
    )
    out = tmp_path / "out"
    marker = f"sweep-kill-{os.getpid()}-{start}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ignite_ddl", "sweep", str(spec), "--output-dir", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "IGNITE_DDL_TEST_MARK": marker},
    )
    try:
        wait_for(out / "runs" / "cfg000-r0" / "logs" / "rank1.log", "rank 1/2")  # both ranks are training
        proc.kill()
        proc.communicate(timeout=30)
        assert wait_gone(marker, seconds=20) == []
    finally:
        for pid in processes_marked(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# -- a full disk: one line naming the path, never a traceback, never a half-written record

WRITE_FAILED = re.compile(r"cannot write (?P<path>\S+): (No space left on device|File too large)")


@contextlib.contextmanager
def small_filesystem(tmp_path: Path, how: str, tmpfs_kb: int, file_limit_kb: int):
    """A folder that fills up: with ``how="tmpfs"`` a ``tmpfs_kb`` tmpfs where this test may mount one; otherwise an
    ordinary folder where the processes started with the returned ``preexec_fn`` cannot write a file past
    ``file_limit_kb`` (RLIMIT_FSIZE)."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = (
        how == "tmpfs"
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={tmpfs_kb}k", "tmpfs", str(folder)], capture_output=True
        ).returncode
        == 0
    )
    if mounted:
        try:
            yield folder, None
        finally:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)
        return

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit_kb * 1024, file_limit_kb * 1024))

    yield folder, limit_file_size


def assert_one_line_write_error(result: subprocess.CompletedProcess, folder: Path) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "Logging error" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    found = WRITE_FAILED.search(last)
    assert last.startswith("ignite-ddl: error: ") and found, result.stderr
    assert Path(found["path"]).is_relative_to(folder)


FULL = ["tmpfs", "file-size-limit"]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("how, procs", [("tmpfs", 1), ("tmpfs", 2), ("file-size-limit", 2)])
def test_a_full_disk_ends_a_run_in_one_line(tmp_path, how, procs):
    # The checkpoint (about 120 kB for the CNN) is the first file too large for what is left.
    with small_filesystem(tmp_path, how, tmpfs_kb=300, file_limit_kb=64) as (folder, limit):
        marker = f"full-disk-{os.getpid()}-{procs}"
        result = run_cli(
            "train",
            "--train-size",
            "512",
            "--val-size",
            "64",
            "--epochs",
            "2",
            "--no-progress",
            "--nproc-per-node",
            str(procs),
            "--backend",
            "gloo",
            "--output-dir",
            str(folder / "run"),
            preexec_fn=limit,
            env={"IGNITE_DDL_TEST_MARK": marker},
        )
        assert_one_line_write_error(result, folder / "run")
        assert wait_gone(marker) == []


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("how", FULL)
def test_a_full_disk_stops_a_sweep_in_one_line_with_whole_records(tmp_path, how):
    with small_filesystem(tmp_path, how, tmpfs_kb=160, file_limit_kb=12) as (folder, limit):
        out = folder / "sweep"
        result = run_cli(
            "sweep",
            "--grid",
            "seed=1,2,3,4,5,6,7,8",
            *SMALL_SWEEP,
            "--repeats",
            "1",
            "--no-report",
            "--output-dir",
            str(out),
            preexec_fn=limit,
            timeout=600,
        )
        assert_one_line_write_error(result, out)
        records, rejected = load_results(out / "results.jsonl")
        assert rejected == []  # no half line: what is there is whole records
        assert len(records) < 8


@pytest.mark.slow
@pytest.mark.parametrize("how", FULL)
def test_a_report_on_a_full_disk_is_one_line(tmp_path, how):
    with small_filesystem(tmp_path, how, tmpfs_kb=64, file_limit_kb=16) as (folder, limit):
        for index in range(4):
            for repeat in range(3):
                append_record(folder / "results.jsonl", good_record(index, repeat, 1000 + 10 * index + repeat))
        if limit is None:  # fill what is left of the tmpfs
            with contextlib.suppress(OSError), open(folder / "filler", "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        result = run_cli("report", str(folder), preexec_fn=limit)
        assert_one_line_write_error(result, folder)
        # the report says it in one line, nothing before it, and leaves no half-written image or temporary behind
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        written = [p for p in folder.rglob("*") if p.is_file() and p.name not in ("results.jsonl", "filler")]
        assert not [p for p in written if p.suffix == ".png" and p.stat().st_size == 0], written
        assert not [p for p in written if p.name.endswith(".tmp")], written


# -- output folders: one run or one sweep at a time, never mixed with an earlier run


@pytest.mark.slow
@pytest.mark.distributed
def test_a_second_sweep_on_the_same_folder_is_refused(tmp_path):
    out = tmp_path / "sweep"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        json.dumps({"base": {"train_size": 60000, "val_size": 64, "epochs": 1}, "grid": {"seed": [1, 2]}, "repeats": 1})
    )
    marker = f"second-sweep-{os.getpid()}"
    first = start_marked([sys.executable, "-m", "ignite_ddl", "sweep", str(spec), "--output-dir", str(out)], marker)
    try:
        wait_for(out / "runs" / "cfg000-r0" / "logs" / "rank0.log", "rank 0/1")  # the first sweep is training
        second = run_cli("sweep", str(spec), "--output-dir", str(out), "--resume")
        assert second.returncode == 2
        assert second.stderr.strip().splitlines() == [
            f"ignite-ddl: error: {out} is in use by a sweep (process {first.pid}); "
            "wait for it or choose another --output-dir"
        ]
    finally:
        os.killpg(first.pid, signal.SIGTERM)
        first.communicate(timeout=60)
    assert wait_gone(marker) == []
    # the first sweep's interrupted run is there for --resume, recorded once
    assert [r["status"] for r in read_results(out / "results.jsonl")] == ["interrupted"]


def test_train_refuses_a_previous_run_unless_told(tmp_path, capsys):
    out = tmp_path / "run"
    quick = ["--train-size", "128", "--val-size", "64", "--epochs", "1", "--no-progress", "--output-dir", str(out)]
    assert main(["train", *quick]) == 0
    first = json.loads((out / "config.json").read_text())
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    err = refused(capsys, "train", *quick, "--seed", "7")
    assert f"error: output directory '{out}' holds a previous run (best, checkpoints, config.json, ...)" in err
    assert "pass --overwrite to replace it, --resume CHECKPOINT to continue it" in err
    assert json.loads((out / "config.json").read_text()) == first  # refused before anything was written
    assert main(["train", *quick, "--seed", "7", "--overwrite"]) == 0
    # replaced: one run's files only (the previous best model is gone), and the user's own file kept
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 7
    assert len(list((out / "best").iterdir())) == 1 and (out / "notes.txt").read_text() == "mine"
    checkpoint = sorted((out / "checkpoints").iterdir())[-1]
    assert main(["train", *quick, "--epochs", "2", "--resume", str(checkpoint)]) == 0  # continuing is allowed
