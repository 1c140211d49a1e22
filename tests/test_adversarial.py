"""The adversarial findings of issues #24, #26 and #27, each tested at its mechanism: a folder's lock and what holds
it, outputs never written through a planted link, a sweep that keeps to its own folder, bounds on what a spec and the
projection may ask for, refusals before the first run, and a property test over every numeric option."""

from __future__ import annotations

import errno
import http.server
import json
import logging
import math
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml
from conftest import completed_record, run_cli

from ignite_ddl.cli import build_parser, main
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.environment import cpu_cores
from ignite_ddl.core.errors import ConfigError, OutputError
from ignite_ddl.core.folders import claim_run_folder, claim_sweep_folder, lock
from ignite_ddl.core.options import Options, option_flag, option_specs
from ignite_ddl.core.outputs import OutputFileHandler, output_errors, write_bytes
from ignite_ddl.core.results import append_record, load_results, read_results, repair_results
from ignite_ddl.launcher.settings import LaunchSettings, plan_launch
from ignite_ddl.predict.projection.model import ProjectOptions
from ignite_ddl.report.document import Document
from ignite_ddl.sweep.plan import expand
from ignite_ddl.sweep.runner import executor_for
from ignite_ddl.sweep.spec import MAX_CONFIGURATIONS, MAX_RUNS, SlurmOptions, Spec, load_spec, parse_spec
from ignite_ddl.trainer.checkpoint import check_checkpoint, load_checkpoint

TINY = ["--train-size", "128", "--val-size", "64", "--batch-size", "64", "--epochs", "1", "--no-progress"]


def one_line(capsys, argv: list[str], status: int = 2) -> str:
    """Run the CLI in this process: its exit status is ``status`` and it said one line on stderr; that line."""
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ignite-ddl: error: "), err
    assert "Traceback" not in err
    return err.strip()


def record(index: int, repeat: int, grid: dict | None = None) -> dict:
    grid = grid if grid is not None else {"seed": index}
    return completed_record(
        f"k{index}-r{repeat}",
        index,
        repeat,
        grid=grid,
        config=dict(grid),
        run_dir="nowhere",
        elapsed_s=2.0,
        summary={"world_size": 1, "samples_per_s": 100.0 + index + repeat},
    )


# -- #27.1: the lock names what holds it, and a sweep holds it until its report's last file


def _lock_from_another_process(folder: Path, what: str) -> subprocess.CompletedProcess:
    code = (
        "import sys\nfrom ignite_ddl.core.commands import run_command\nfrom ignite_ddl.core.folders import lock\n"
        f"sys.exit(run_command(lambda: lock({str(folder)!r}, {what!r}).__enter__() or 0))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_a_lock_is_the_processes_and_names_its_holder(tmp_path):
    with lock(tmp_path, "sweep"):
        with lock(tmp_path, "sweep"):  # taken again by its holder: the same lock
            pass
        taken = _lock_from_another_process(tmp_path, "run")  # the inner `with` did not release it
    assert taken.returncode == 2
    assert taken.stderr.strip().splitlines() == [
        f"ignite-ddl: error: {tmp_path} is in use by a sweep (process {os.getpid()}); wait for it or choose "
        "another --output-dir"
    ]
    assert _lock_from_another_process(tmp_path, "run").returncode == 0  # released by the outer one


@pytest.mark.slow
@pytest.mark.distributed
def test_a_sweep_holds_its_folder_until_the_report_is_written(tmp_path, monkeypatch, capsys):
    import ignite_ddl.report

    out = tmp_path / "sweep"
    write_report, tried = ignite_ddl.report.write_report, []

    def report_after_a_run_tried_the_folder(results_dir, *args, **kwargs):
        tried.append(run_cli("train", *TINY, "--output-dir", str(out), timeout=300))
        return write_report(results_dir, *args, **kwargs)

    monkeypatch.setattr(ignite_ddl.report, "write_report", report_after_a_run_tried_the_folder)
    grid = ["--grid", "seed=1", *[f"--set={k}={v}" for k, v in (("train_size", 128), ("val_size", 64))]]
    assert main(["sweep", *grid, "--set", "epochs=1", "--output-dir", str(out)]) == 0
    (train,) = tried
    assert train.returncode == 2, train.stderr
    assert train.stderr.strip() == (
        f"ignite-ddl: error: {out} is in use by a sweep (process {os.getpid()}); wait for it or choose another "
        "--output-dir"
    )
    assert not (out / "config.json").exists() and (out / "report.md").is_file()


# -- #27.2, #24 F7: no output is written through a link planted in the output folder


def _planted(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """``tmp_path/out/<name>`` a symbolic link to a file outside the folder; (the link, its target)."""
    target = tmp_path / "target.txt"
    target.write_text("the user's file")
    out = tmp_path / "out"
    (out / Path(name).parent).mkdir(parents=True, exist_ok=True)
    (out / name).symlink_to(target)
    return out / name, target


def test_a_planted_lock_link_is_refused(tmp_path):
    link, target = _planted(tmp_path, ".lock")
    with pytest.raises(ConfigError, match=r"\.lock is a symbolic link: refused") as refused, lock(link.parent, "run"):
        pass
    assert "\n" not in str(refused.value) and target.read_text() == "the user's file"


def test_a_planted_fifo_lock_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / ".lock")
    with pytest.raises(ConfigError, match="not a regular file"), lock(tmp_path, "run"):
        pass


@pytest.mark.parametrize("name", ["config.json", "checkpoints/checkpoint_8.pt"])
def test_an_output_is_never_written_through_a_link(tmp_path, name):
    link, target = _planted(tmp_path, name)
    with pytest.raises(OutputError, match="it is a symbolic link") as refused:
        write_bytes(link, b"{}")
    assert str(refused.value).startswith(f"cannot write {link}: ") and "\n" not in str(refused.value)
    assert target.read_text() == "the user's file" and link.is_symlink()


def test_a_planted_temporary_file_is_not_used(tmp_path):
    link, target = _planted(tmp_path, ".config.json.tmp")  # the name the temporary file used to have
    write_bytes(link.parent / "config.json", b"{}")
    assert (link.parent / "config.json").read_bytes() == b"{}" and target.read_text() == "the user's file"
    assert sorted(p.name for p in link.parent.iterdir()) == [".config.json.tmp", "config.json"]  # nothing left over


def test_logs_and_records_are_never_appended_through_a_link(tmp_path):
    log, target = _planted(tmp_path, "logs/rank0.log")
    with pytest.raises(OutputError, match="it is a symbolic link"):
        OutputFileHandler(log)
    results = log.parent.parent / "results.jsonl"
    results.symlink_to(target)
    with pytest.raises(OutputError, match="it is a symbolic link"):
        append_record(results, record(0, 0))
    assert target.read_text() == "the user's file"


def test_a_record_is_never_appended_to_another_users_file_or_a_hard_link(tmp_path):
    """An output file planted by someone else, or a second name of a file elsewhere, is refused, not appended to."""
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("the user's file")
    results = tmp_path / "sweep" / "results.jsonl"
    results.parent.mkdir()
    os.link(outside, results)
    with pytest.raises(OutputError, match="it is a hard link to another file"):
        append_record(results, record(0, 0))
    assert outside.read_text() == "the user's file"
    results.unlink()
    results.write_text("")
    try:
        os.chown(results, 65534, 65534)  # nobody's: only root can give a file away
    except PermissionError:
        pytest.skip("giving a file to another user needs root (CI runs as root)")
    with pytest.raises(OutputError, match="it belongs to another user"):
        append_record(results, record(0, 0))
    assert results.read_text() == ""


@pytest.mark.slow
def test_a_run_that_is_all_warm_up_says_so_and_prints_no_nan(tmp_path):
    result = run_cli("train", *TINY, "--warmup-iters", "1000000", "--output-dir", str(tmp_path / "run"), timeout=120)
    assert result.returncode == 0, result.stderr
    printed = result.stdout + result.stderr
    assert "global: no measured iterations: all " in printed and "nan" not in printed.lower()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"]["global"]["samples"] == 0 and summary["steps"]["global"]["samples_per_s"] is None
    assert summary["samples_per_s"] > 0  # the epochs' figure, which the line names


@pytest.mark.slow
def test_train_refuses_a_planted_lock_in_one_line(tmp_path):
    link, target = _planted(tmp_path, ".lock")
    result = run_cli("train", *TINY, "--output-dir", str(link.parent), timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"ignite-ddl: error: {link} is a symbolic link: refused (a lock is never written through a link); remove it"
    ]
    assert target.read_text() == "the user's file"


def test_overwrite_removes_only_the_files_a_run_wrote(tmp_path):
    written = [
        "config.json",
        "summary.json",
        "steps_rank0.csv",
        "logs/rank0.log",
        "logs/memory_rank0.txt",
        "checkpoints/checkpoint_8.pt",
        "best/best_model_1_val_accuracy=0.5.pt",
        "profile/rank0_torch.json",
        "profile/rank0_torch.csv",
        "tb/events.out.tfevents.1.host.1.0",
    ]
    mine = ["notes.txt", "logs/app.log", "profile/notes.txt", "tb/mine/readme.md"]
    for name in written + mine:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    claim_run_folder(tmp_path, resume=False, overwrite=True)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == sorted(mine)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "best").exists()  # emptied: gone


# -- #24 F7: a sweep keeps to a folder of its own; a record that only lacks its newline is kept


def test_a_sweep_refuses_a_folder_that_is_not_a_sweeps(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my own report")
    err = one_line(capsys, ["sweep", "--grid", "seed=1", "--output-dir", str(out)])
    assert "holds files that are not a sweep's (report.md)" in err
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]  # no lock left behind either
    assert (out / "report.md").read_text() == "my own report"


@pytest.mark.slow
def test_a_sweep_with_loader_workers_leaves_nothing_in_the_temporary_folder(tmp_path):
    """multiprocessing's pymp-* folders (with the workers' sockets) and Inductor's torchinductor_<user> once stayed in
    $TMPDIR after a sweep ended well: every process of a sweep keeps its temporary files in one private folder."""
    # A short $TMPDIR of its own: under pytest's numbered folders (pytest-234/popen-gw0/...) a worker's socket
    # (pymp-*/listener-*) can pass the 107 characters an AF_UNIX path may have, whatever the suite does.
    scratch = Path(tempfile.mkdtemp(prefix="t"))
    result = run_cli(
        "sweep",
        "--grid",
        "num_workers=2",
        *("--set", "train_size=256", "--set", "val_size=64", "--set", "epochs=1", "--set", "batch_size=64"),
        "--output-dir",
        str(tmp_path / "sweep"),
        env={"TMPDIR": str(scratch)},
        timeout=180,
    )
    left = list(scratch.iterdir())
    shutil.rmtree(scratch)
    assert result.returncode == 0, result.stderr
    assert left == []


def test_a_sweep_refuses_a_file_as_its_folder(tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    err = one_line(capsys, ["sweep", "--grid", "seed=1", "--output-dir", str(tmp_path / "a-file")])
    assert err.endswith("is a file, not a folder: choose another --output-dir")


def test_a_sweeps_own_folder_is_claimed_again(tmp_path):
    claim_sweep_folder(tmp_path / "new")  # not there yet
    (tmp_path / "report.md").write_text("the sweep's report")
    with pytest.raises(ConfigError, match="holds files that are not a sweep's"):  # a user's report.md: refused
        claim_sweep_folder(tmp_path)
    (tmp_path / "results.jsonl").write_text("")
    claim_sweep_folder(tmp_path)  # now a sweep's folder: its report is its own to replace
    assert (tmp_path / "report.md").read_text() == "the sweep's report"  # claiming touches nothing


def test_a_last_record_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "results.jsonl"
    for repeat in range(2):
        append_record(path, record(0, repeat))
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # a hand edit dropped the last newline
    records, rejected = load_results(path)
    assert [r["repeat"] for r, _ in records] == [0, 1] and rejected == []
    assert repair_results(path) == [] and path.read_bytes().endswith(b"}\n")
    append_record(path, record(0, 2))  # the next record lands on a line of its own
    assert [r["repeat"] for r in read_results(path)] == [0, 1, 2]
    assert not (tmp_path / "results.jsonl.rejected").exists()


# -- #24 F7, #26.4: bounds on what a spec may ask for, refused in one short line


def _alias_bomb(key: str) -> str:
    """0.5 kB of YAML that expands to 10^6 strings under ``key`` (by anchors and aliases)."""
    lines = ['a: &a ["xxxxxxxx","xxxxxxxx","xxxxxxxx","xxxxxxxx","xxxxxxxx","xxxxxxxx","xxxxxxxx","xxxxxxxx"]']
    for prev, name in zip("abcdef", "bcdefg"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 8) + "]")
    anchors = "anchors: {" + ", ".join(lines) + "}\n"
    return anchors + key


SPEC_BOUNDS = {
    "10^6 configurations": ({"grid": {"seed": list(range(1000)), "batch_size": list(range(1, 1001))}}, "at most"),
    "10^18 configurations": (
        {"grid": {name: list(range(1000)) for name in ("seed", "epochs", "batch_size", "lr", "momentum", "threads")}},
        "the grid has 1e+18 configurations",
    ),
    "too many runs": ({"grid": {"seed": list(range(MAX_CONFIGURATIONS))}, "repeats": 11}, f"at most {MAX_RUNS}"),
    "repeats 10^9": ({"grid": {"seed": [1]}, "repeats": 1_000_000_000}, "repeats must be <= 10000"),
    "repeats 1.5": ({"grid": {"seed": [1]}, "repeats": 1.5}, "option repeats expects int"),
    "a name that is a path": ({"grid": {"seed": [1]}, "name": "../../x"}, "a sweep's name is a folder name"),
    "timeout_s .inf": ({"grid": {"seed": [1]}, "timeout_s": math.inf}, "timeout_s must be a finite number"),
    "timeout_s .nan": ({"grid": {"seed": [1]}, "timeout_s": math.nan}, "timeout_s must be a finite number"),
    "output_dir 5": ({"grid": {"seed": [1]}, "output_dir": 5}, "option output_dir expects str or null"),
    "slurm poll_s .nan": ({"grid": {"seed": [1]}, "slurm": {"poll_s": math.nan}}, "poll_s must be a finite number"),
}


@pytest.mark.parametrize("case", sorted(SPEC_BOUNDS))
def test_a_spec_past_its_bounds_is_refused_in_one_line(case):
    spec, message = SPEC_BOUNDS[case]
    with pytest.raises(ConfigError) as refused:
        parse_spec(spec)
    said = str(refused.value)
    assert message in said and "\n" not in said and len(said) < 300, said


@pytest.mark.parametrize("key", ["name: *g", "grid: {seed: *g}", "grid: {seed: [1]}\nbase: {model: *g}"])
def test_a_yaml_alias_bomb_is_refused_in_one_short_line(tmp_path, key):
    path = tmp_path / "spec.yaml"
    path.write_text(_alias_bomb(key))
    data = yaml.safe_load(path.read_text())
    del data["anchors"]
    path.write_text(yaml.safe_dump(data))  # the expansion itself, 10^6 strings, as a spec
    with pytest.raises(ConfigError) as refused:
        load_spec(path)
    said = str(refused.value)
    assert "\n" not in said and len(said) < 300, said[:500]


def test_a_huge_grid_from_the_command_line_is_refused_before_anything(tmp_path, capsys):
    values = ",".join(map(str, range(1, 1001)))
    argv = ["sweep", "--grid", f"seed={values}", "--grid", f"batch_size={values}", "--output-dir", str(tmp_path / "o")]
    assert "the grid has 1e+06 configurations (1000 x 1000): at most" in one_line(capsys, argv)
    assert not (tmp_path / "o").exists()


# -- #26.3: refused before the first run


def test_an_unknown_model_in_a_grid_is_refused_before_any_run(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["sweep", "--grid", "model=toy,no_such_model", "--set", "epochs=1", "--output-dir", str(out)]
    err = one_line(capsys, argv)
    assert "configuration {'model': 'no_such_model'}: unknown model 'no_such_model'" in err
    assert not out.exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tracking_server_that_does_not_answer_is_refused_before_training(tmp_path):
    pytest.importorskip("mlflow")
    from ignite_ddl.trainer.tracking import check_tracker

    uri = f"http://127.0.0.1:{_free_port()}/"  # nothing listens there
    with pytest.raises(ConfigError, match="does not answer") as refused:
        check_tracker(TrainConfig(tracker="mlflow", tracking_uri=uri, output_dir=str(tmp_path)))
    assert str(refused.value).startswith(f"the MLflow tracking server {uri} does not answer (")

    class Up(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Up)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        up = f"http://127.0.0.1:{server.server_address[1]}"
        check_tracker(TrainConfig(tracker="mlflow", tracking_uri=up, output_dir=str(tmp_path)))  # answers: accepted
    finally:
        server.shutdown()


# -- #26.2, #27.5: --resume


@pytest.mark.slow
def test_resuming_a_finished_run_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--model", "toy", *TINY, "--output-dir", str(out)]) == 0
    capsys.readouterr()
    final = max((out / "checkpoints").glob("*.pt"), key=lambda p: int(p.stem.split("_")[-1]))
    summary = (out / "summary.json").read_bytes()
    err = one_line(capsys, ["train", "--model", "toy", *TINY, "--output-dir", str(out), "--resume", str(final)])
    assert err == (
        f"ignite-ddl: error: cannot resume from {final}: nothing left to do, its run is finished (iteration 2 of "
        "2, epoch 1 of --epochs 1); pass a larger --epochs to train on"
    )
    assert (out / "summary.json").read_bytes() == summary  # nothing trained, nothing written
    check_checkpoint(final, TrainConfig(model="toy", train_size=128, val_size=64, batch_size=64, epochs=2))


def test_a_checkpoint_that_is_not_a_file_or_not_torchs_is_named_so(tmp_path):
    with pytest.raises(ConfigError, match=r"^checkpoint to resume from is not a regular file: /dev/zero"):
        load_checkpoint("/dev/zero")
    text = tmp_path / "notes.pt"
    text.write_text("hello\n")
    with pytest.raises(ConfigError) as refused:
        load_checkpoint(text)
    assert str(refused.value) == f"cannot resume from a file that is not a PyTorch checkpoint: {text}"


# -- #26.4, #27.3, #27.5: the projection's inputs, through their declarations


def _run_folder(tmp_path: Path, summary: object) -> str:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "config.json").write_text("{}")
    return str(run)


PROJECT = ["--link", "10gbe", "--compute-ms", "30", "--grad-mb", "100", "--batch-size", "32"]


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--max-workers", "99999999999999999999"], "--max-workers must be <= 1048576"),
        (["--bucket-mb", "1e-6"], "--bucket-mb must be >= 0.001"),
        (["--bucket-mb", "1e-300"], "--bucket-mb must be >= 0.001"),
        (["--bucket-mb", "nan"], "--bucket-mb must be a finite number"),
        (["--compute-ms", "1e308"], "--compute-ms must be <= 10000000"),
        (["--grad-mb", "1e308"], "--grad-mb must be <= 10000000"),
        (["--beta-gbps", "-inf"], "--beta-gbps must be a finite number"),
        (["--grad-mb", "100000", "--bucket-mb", "0.001"], "at most 10000 are modelled (a larger bucket size"),
    ],
)
def test_projection_inputs_are_refused_in_one_line_naming_the_flag(tmp_path, capsys, argv, said):
    out = tmp_path / "out"
    err = one_line(capsys, ["project", *PROJECT, *argv, "--output-dir", str(out)])
    assert said in err and "grad_bytes" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "summary, said",
    [
        ([1, 2], "its summary.json is not a run's (a JSON list)"),
        ({"world_size": 1, "steps": [1]}, "its summary.json is not a run's (steps: expected an object, got list)"),
        ({"world_size": 1, "steps": {"ranks": []}}, "has no per-phase step times"),
        ({"world_size": 2}, "ran 2 processes: a projection starts from a 1-process run"),
    ],
)
def test_projecting_a_run_whose_summary_is_not_a_runs_is_refused(tmp_path, capsys, summary, said):
    run = _run_folder(tmp_path, summary)
    err = one_line(capsys, ["project", "--link", "10gbe", "--run", run, "--output-dir", str(tmp_path / "out")])
    assert said in err and run in err


# -- #27.5: messages


@pytest.mark.parametrize("value, said", [("-inf", "lr must be a finite number, got -inf"), ("-1e-3", "lr must be >=")])
def test_a_negative_value_reaches_the_options_own_check(tmp_path, capsys, value, said):
    assert said in one_line(capsys, ["train", "--lr", value, "--output-dir", str(tmp_path / "out")])


def test_threads_beyond_the_cores_warn_in_one_line(capsys):
    plan_launch(LaunchSettings(threads=cpu_cores() * 4), cuda_devices=0, environ={})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ignite-ddl: warning: ") and "oversubscribe" in err
    plan_launch(LaunchSettings(threads=1), cuda_devices=0, environ={})
    assert capsys.readouterr().err == ""


def test_a_failed_write_is_not_preceded_by_ignites_engine_lines(tmp_path, capsys):
    from ignite.engine import Engine, Events

    def engine_failing_with(error: Exception) -> Engine:
        engine = Engine(lambda e, b: None)

        @engine.on(Events.ITERATION_COMPLETED)
        def _fail(_: Engine) -> None:
            raise error

        return engine

    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "checkpoint.pt"))
    with pytest.raises(OutputError), output_errors(tmp_path):
        engine_failing_with(full).run([1, 2], max_epochs=1)
    assert "terminating due to exception" not in capsys.readouterr().err
    # any other error is Ignite's to say, as before
    logger = logging.getLogger("ignite.engine.engine.Engine")
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        with pytest.raises(RuntimeError), output_errors(tmp_path):
            engine_failing_with(RuntimeError("boom")).run([1, 2], max_epochs=1)
    finally:
        logger.removeHandler(handler)
    assert any("terminating due to exception: boom" in line for line in said)


# -- #24 F7: a grid value cannot inject Markdown or HTML into the report


def test_grid_values_cannot_inject_markdown_or_html(tmp_path):
    evil = "x\n# injected heading <script>alert(1)</script> a|b"
    doc = Document()
    doc.heading(f"Sweep report: {evil}", 1)
    doc.bullets([f"**Best: cfg000 ({evil})**"])
    doc.table(["config", "options"], [["cfg000", f"model={evil}"]])
    markdown = doc.markdown()
    assert not any(line.startswith("# injected") for line in markdown.splitlines())
    assert "<script>" not in markdown.replace("\\<script>", "") and "\\<script>" in markdown
    assert "| cfg000 | model=x # injected heading \\<script>alert(1)\\</script> a/b |" in markdown
    page = doc.html("t")
    assert "<script>" not in page and "&lt;script&gt;" in page


@pytest.mark.slow
def test_a_report_of_a_grid_value_with_html_and_a_newline_is_escaped(tmp_path):
    from ignite_ddl.report import write_report

    evil = "<script>alert(1)</script>\n# injected"
    for repeat in range(2):
        append_record(tmp_path / "results.jsonl", record(0, repeat, {"model": evil}))
    write_report(tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    assert not any(line.startswith("# injected") for line in markdown.splitlines())
    assert "<script>" not in markdown.replace("\\<script>", "")
    assert "<script>" not in (tmp_path / "report.html").read_text()
    verdict = (tmp_path / "verdict.txt").read_text().splitlines()
    assert not any(line.startswith("# injected") for line in verdict)  # one verdict a line, never split


# -- #26: every numeric option given NaN, infinities, 0, negative, huge or a wrong type is accepted and honoured,
# or refused in one line: never another exception


EDGES = [math.nan, math.inf, -math.inf, 0, 0.0, -1, -1e-3, 1.5, 1e300, 2**63, 10**400, "x", "", True, [1], {"a": 1}]


def _values(rng: random.Random) -> list:
    drawn = [rng.choice([-1, 1]) * 10 ** rng.uniform(-12, 40) for _ in range(12)]
    drawn += [rng.choice([-1, 1]) * 2 ** rng.randint(0, 90) for _ in range(12)]
    return EDGES + drawn


def _refused_in_one_line(error: ConfigError) -> None:
    said = str(error)
    assert said and "\n" not in said and len(said) < 400, said[:500]


def _honoured(options: Options, name: str, value: object) -> None:
    """An accepted value is the value the options hold (an int given for a float, as a float; a list as a tuple)."""
    held = getattr(options, name)
    if isinstance(value, list):
        value = tuple(value)
    if isinstance(options, Spec) and name == "name" and isinstance(value, (int, float)):
        value = str(value)  # a YAML name like 2024 reads as a number: the folder is named by its text
    assert held == value or (isinstance(held, float) and held == float(value)), (name, value, held)  # type: ignore[arg-type]


@pytest.mark.parametrize("options", [TrainConfig, SlurmOptions, ProjectOptions])
def test_every_option_honours_or_refuses_any_value(options):
    rng = random.Random(27)
    for name in option_specs(options):
        for value in _values(rng):
            try:
                built = options(**{name: value})
            except ConfigError as e:
                _refused_in_one_line(e)
                continue
            _honoured(built, name, value)
            if options is TrainConfig:  # planned as a launch would be: refused in one line, or planned
                try:
                    plan_launch(built, cuda_devices=0, environ={})
                except ConfigError as e:
                    _refused_in_one_line(e)


def test_every_spec_key_honours_or_refuses_any_value(tmp_path):
    rng = random.Random(26)
    for name in option_specs(Spec):
        if name in ("grid", "base", "slurm", "exclude"):
            continue
        for value in _values(rng):
            try:
                spec = parse_spec({"grid": {"seed": [1, 2]}, name: value})
            except ConfigError as e:
                _refused_in_one_line(e)
                continue
            _honoured(spec, name, value)
            runs = list(expand(spec, tmp_path))  # planned, with an executor, as a sweep would before its first run
            assert len(runs) == 2 * spec.repeats
            executor_for(spec, tmp_path)


@pytest.mark.parametrize("options, command", [(TrainConfig, "train"), (ProjectOptions, "project")])
def test_every_numeric_flag_honours_or_refuses_any_text(options, command, capsys, tmp_path):
    """The same through the command line, as the user sees it: argparse never answers a number with "expected one
    argument"; a value the options refuse makes the command itself say the refusal in one line and exit 2 before
    anything starts; a value they accept is the number the text says."""
    texts = ["nan", "inf", "-inf", "0", "-1", "-1e-3", "1.5", "1e308", "-1e308", "1e400", "x", ""]
    parser = build_parser()
    honoured = refused = 0
    for name, spec in option_specs(options).items():
        if spec.kind not in (int, float) or spec.many:
            continue
        for text in texts:
            flag = option_flag(name)
            argv = [command, flag, text]
            try:
                args = parser.parse_args(argv)
            except SystemExit as e:
                err = capsys.readouterr().err
                assert e.code == 2 and err.count("\n") == 1 and "expected one argument" not in err, err
                continue
            try:
                built = options(**{key: getattr(args, key) for key in option_specs(options)})
            except ConfigError as e:
                _refused_in_one_line(e)
                said = one_line(capsys, [*argv, "--output-dir", str(tmp_path / "never-written")])
                # the options' own words, naming the option as a field (train) or as its flag (project)
                assert said in {f"ignite-ddl: error: {e}", f"ignite-ddl: error: {e}".replace(name, flag, 1)}, said
                refused += 1
                continue
            held = getattr(built, name)
            assert held == (float(text) if spec.kind is float else int(text)), (argv, held)
            honoured += 1
    assert honoured and refused and not (tmp_path / "never-written").exists()


def test_the_property_test_can_fail():
    """A refusal that is not one line, or another exception, fails it."""
    with pytest.raises(AssertionError):
        _refused_in_one_line(ConfigError("two\nlines"))
    with pytest.raises(AssertionError):
        _honoured(TrainConfig(epochs=2), "epochs", 3)


def test_step_tables_profiles_and_consoles_are_never_written_through_a_link(tmp_path):
    """Every other file a run writes goes through the same refusal: the per-rank step table, a profiler's table, the
    projection's CSV, a sweep run's console (all written whole, or opened without following links)."""
    import os

    import torch
    from ignite.engine import Engine

    from ignite_ddl.core.outputs import open_output, write_csv
    from ignite_ddl.measure.recorder import StepRecorder

    steps, target = _planted(tmp_path, "steps_rank0.csv")
    engine = Engine(lambda engine, batch: None)
    recorder = StepRecorder(warmup=0, device=torch.device("cpu")).attach(engine)
    engine.run([(torch.zeros(2, 1), torch.zeros(2))] * 2)
    with pytest.raises(OutputError, match="it is a symbolic link"):
        recorder.write_csv(steps)
    profile = steps.parent / "profile.csv"
    profile.symlink_to(target)
    with pytest.raises(OutputError, match="it is a symbolic link"):
        write_csv(profile, ("metric", "value"), [("a", 1)])
    console = steps.parent / "console.log"
    console.symlink_to(target)
    with pytest.raises(OutputError, match="it is a symbolic link"):
        open_output(console, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    assert target.read_text() == "the user's file"


# -- #37.8: a refusal names the option (or the environment variable) that caused it


def test_min_repeats_is_refused_under_its_own_name(capsys, tmp_path):
    err = one_line(capsys, ["sweep", "--grid", "seed=1", "--repeats", "auto", "--min-repeats", "0",
                            "--output-dir", str(tmp_path / "s")])  # fmt: skip
    assert err == "ignite-ddl: error: min_repeats must be >= 2, got 0"


def test_a_spec_reads_auto_repeats_as_the_command_line_does():
    assert parse_spec({"grid": {"seed": [1]}, "repeats": "auto "}).adaptive
    assert build_parser("sweep").parse_args(["sweep", "--repeats", "auto "]).repeats == "auto"


def test_a_lab_refuses_a_negative_tolerance(capsys):
    assert one_line(capsys, ["fsdp", "--tolerance", "-1"]) == "ignite-ddl: error: tolerance must be >= 0, got -1.0"


@pytest.mark.parametrize(
    "variable, value, said",
    [
        (
            "IGNITE_DDL_ON_BUSY",
            "bogus",
            "unknown on_busy 'bogus' (choose from: wait, run, stop), from $IGNITE_DDL_ON_BUSY",
        ),
        (
            "IGNITE_DDL_BUSY_STOP_AFTER",
            "x",
            "option busy_stop_after expects int, got 'x', from $IGNITE_DDL_BUSY_STOP_AFTER",
        ),
    ],
)
def test_a_bad_busy_variable_is_named(tmp_path, variable, value, said):
    result = run_cli("sweep", "--grid", "seed=1", "--output-dir", str(tmp_path / "s"), env={variable: value})
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [f"ignite-ddl: error: {said} (fix or "
        f"unset it, or pass {option_flag(variable.removeprefix('IGNITE_DDL_').lower())})"]  # fmt: skip


def test_a_busy_stop_set_by_the_environment_says_so(monkeypatch):
    from ignite_ddl.core.errors import MachineBusy
    from ignite_ddl.sweep.busy import wait_until_quiet

    monkeypatch.setenv("IGNITE_DDL_ON_BUSY", "stop")
    with pytest.raises(MachineBusy, match=r"not starting \(--on-busy stop, as \$IGNITE_DDL_ON_BUSY sets it\)"):
        wait_until_quiet(0.5, "stop", 60, print, probe=lambda: 0.9)
