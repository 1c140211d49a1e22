"""The adversarial findings of issue #48 on the surfaces added last: a workload of one's own that misbehaves as it is
imported or read, workload arguments the records cannot hold, the search's journal damaged, a search's time budget,
and user text in the report's plots. Each is tested at its mechanism, in one process where the claim allows."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import processes_marked, run_cli, start_marked, wait_gone
from simulated import Simulated
from test_adversarial import one_line

from ignite_ddl.core.errors import ConfigError, MachineBusy
from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.core.results import append_record, read_results
from ignite_ddl.sweep.busy import wait_until_quiet
from ignite_ddl.sweep.plan import expand
from ignite_ddl.sweep.runner import _sweep
from ignite_ddl.sweep.search import run_search
from ignite_ddl.sweep.spec import parse_spec

WORKLOADS = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import Dataset, TensorDataset
    from ignite_ddl.trainer.workload import Workload

    def _data(n):
        return TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)))

    class NegativeLength(Dataset):
        def __len__(self):
            return -1

        def __getitem__(self, i):
            return torch.zeros(4), 0

    class Keyed(Dataset):  # items by key, not by position: [0] raises KeyError
        def __len__(self):
            return 64

        def __getitem__(self, key):
            return {"a": (torch.zeros(4), 0)}[key]

    def make(**arguments):
        return Workload(model=nn.Linear(4, 2), train=_data(64), val=_data(16))

    def negative_length():
        return Workload(model=nn.Linear(4, 2), train=NegativeLength(), val=_data(16))

    def keyed():
        return Workload(model=nn.Linear(4, 2), train=Keyed(), val=_data(16))

    def blocks_as_int():
        return Workload(model=nn.Linear(4, 2), train=_data(64), val=_data(16), blocks=5)
    """
)
TRAIN = ["train", "--batch-size=16", "--epochs=1", "--max-iters=8", "--no-progress"]


@pytest.fixture
def workloads(tmp_path):
    """A folder holding the workloads above (``adv_workloads``) and a script that exits as it is imported."""
    (tmp_path / "adv_workloads.py").write_text(WORKLOADS)
    (tmp_path / "adv_exits.py").write_text("import sys\n\nsys.exit(7)  # a script's unguarded main()\n")
    return tmp_path


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("adv_exits:make", "importing adv_exits called sys.exit(7)"),  # row 1: was exit 7, nothing said
        ("adv_workloads:negative_length", "the train dataset's len() raised ValueError"),  # row 2: was a traceback
        ("adv_workloads:keyed", "reading two samples of the train dataset raised KeyError: 0"),  # row 3
        ("adv_workloads:blocks_as_int", "field 'blocks' must be a list of torch.nn.Modules of the model, got int"),
    ],
)
def test_a_workload_that_misbehaves_before_training_is_refused_in_one_line(workloads, capsys, path, said):
    """Checked in the launching process: exit 2, one line naming the workload and what is wrong, nothing written."""
    out = workloads / "out"
    line = one_line(capsys, [*TRAIN, f"--workload={path}", f"--workload-dir={workloads}", f"--output-dir={out}"])
    assert f"workload {path}" in line and said in line, line
    assert not out.exists()


def test_a_workload_argument_json_cannot_hold_is_refused_before_the_run(workloads, capsys):
    """Row 5: YAML reads 2024-01-01 as a date; the run used to start, fail writing config.json (exit 1) and leave
    logs/ and tb/ behind. Refused in one line before anything; quoted, it is text and runs."""
    out = workloads / "out"
    argv = [*TRAIN, "--workload=adv_workloads:make", f"--workload-dir={workloads}", f"--output-dir={out}"]
    line = one_line(capsys, [*argv, "--workload-args=when=2024-01-01"])
    assert "workload argument when: datetime.date(2024, 1, 1) is of type date" in line and "quoted" in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    "spec",
    [
        "base: {workload_args.when: 2024-01-01}\ngrid: {lr: [0.1, 0.2]}",
        "grid: {workload_args.when: [2024-01-01, later]}",  # one configuration's value: its record could not hold it
        "grid: {workload_args.when: [now, later]}\nexclude: [{workload_args.when: 2024-01-01}]",
        "base: {workload_args.when: 2024-01-01}\ngrid: {lr: {low: 0.01, high: 0.1}}\nsearch: {budget_runs: 4}",
    ],
)
def test_a_spec_value_json_cannot_hold_is_refused_with_the_spec(spec):
    """Row 6: sweep.json holds the spec and each record its configuration; a date there used to end the sweep in a
    traceback from the first save. Refused as the spec is read, naming where."""
    data = {"workload": "adv_workloads:make", **yaml.safe_load(spec)}
    with pytest.raises(ConfigError, match=r"spec (base|grid|exclude).*datetime\.date\(2024, 1, 1\) is of type date"):
        parse_spec(data)


def test_a_sweep_with_a_date_in_its_base_leaves_nothing(workloads, capsys):
    """Row 6 through the command line: exit 2, one line, no output folder."""
    spec = workloads / "spec.yaml"
    out = workloads / "sweep"
    spec.write_text(
        "workload: adv_workloads:make\nbase: {epochs: 1, max_iters: 4, batch_size: 16, workload_args.when: 2024-01-01}"
        f"\ngrid: {{lr: [0.1, 0.2]}}\nrepeats: 1\noutput_dir: {out}\n"
    )
    line = one_line(capsys, ["sweep", str(spec)])
    assert "spec base workload_args.when" in line, line
    assert not out.exists()


def test_a_search_starts_no_repeat_that_would_end_past_its_time_budget(tmp_path):
    """Row 10: budget_s 0.5 and min_repeats 2, each run taking 0.4 s. The first run starts (no run time is known
    before it); the second would end past 0.5 s at the median so far, so it never starts (both used to run: a
    trial's repeats started without the budget's check)."""
    spec = parse_spec(
        {
            "name": "sim",
            "grid": {"batch_size": [16, 32, 64]},
            "search": {"sampler": "random", "budget_s": 0.5, "seed": 0},
            "min_repeats": 2,
            "rerun_contended": 0,
        }
    )
    executor = Simulated(lambda grid: 100.0, 0.02, run_s=0.4, sleep=True)
    run_search(spec, tmp_path, executor, False, lambda line: None)
    assert executor.started == [(0, 0)]
    assert read_json(tmp_path / "search.json")["search_ended"].startswith("budget")


def _small_search(budget_runs: int) -> Any:
    grid = {"batch_size": [16, 32, 64, 128], "threads": [1, 2]}
    search = {"sampler": "tpe", "budget_runs": budget_runs, "seed": 0}
    return parse_spec({"name": "sim", "grid": grid, "search": search, "min_repeats": 2, "rerun_contended": 0})


def _search(out: Path, budget_runs: int, resume: bool, seed: int = 0) -> list[str]:
    said: list[str] = []
    executor = Simulated(lambda grid: 100.0 + grid["batch_size"], 0.02, seed=seed)
    run_search(_small_search(budget_runs), out, executor, resume, said.append)
    return said


def _one_index_per_configuration(out: Path) -> None:
    """No configuration measured under two indices, no index holding two configurations."""
    pairs = {(r["index"], json.dumps(r["grid"], sort_keys=True)) for r in read_results(out / "results.jsonl")}
    assert len({index for index, _ in pairs}) == len({grid for _, grid in pairs}) == len(pairs), sorted(pairs)


@pytest.mark.parametrize("damaged", ["create_trial", "user_attr"])
def test_a_garbled_line_of_the_search_journal_is_set_aside_and_the_search_goes_on(tmp_path, damaged):
    """Row 11: one line in the middle of search.journal garbled, then --resume twice. Optuna's reader raised
    JSONDecodeError (exit 1); now the line is moved to search.journal.rejected with a warning, the search goes on,
    and every other line still reaches its own trial (a lost trial creation, which numbers every later trial, is
    stood in for)."""
    out = tmp_path / "search"
    _search(out, 8, resume=False)
    journal = out / "search.journal"
    lines = journal.read_bytes().splitlines(keepends=True)
    codes = [json.loads(line)["op_code"] for line in lines]
    creations = [n for n, code in enumerate(codes) if code == 4]  # Optuna's CREATE_TRIAL
    at = creations[1] if damaged == "create_trial" else creations[1] + codes[creations[1] :].index(8)
    trials_before = _trials(journal)
    lines[at] = lines[at][:12] + b"\x00garbled" + lines[at][30:]
    journal.write_bytes(b"".join(lines))

    said = _search(out, 12, resume=True, seed=1)
    warning = [line for line in said if line.startswith("warning:")]
    assert len(warning) == 1 and f"line {at + 1}, not JSON" in warning[0], said
    assert (out / "search.journal.rejected").read_bytes() == lines[at]
    after = {number: trial for number, trial in _trials(journal).items() if number in trials_before}
    changed = [n for n in trials_before if after[n] != trials_before[n]]
    assert changed == ([] if damaged == "create_trial" else [1]), changed  # only what the lost line held
    assert not [line for line in _search(out, 16, resume=True, seed=2) if line.startswith("warning:")]
    _one_index_per_configuration(out)


def test_a_journal_line_cut_short_is_set_aside_before_anything_is_appended_to_it(tmp_path):
    """Row 12: the journal's last line cut short (a killed write). Optuna's reader skips it, so the first resume
    used to append its first line onto it, and the second resume failed on the joined line. Now it is set aside
    at the first resume, the journal ends whole, and both resumes go on."""
    out = tmp_path / "search"
    _search(out, 8, resume=False)
    journal = out / "search.journal"
    whole = journal.read_bytes()
    last = whole.splitlines(keepends=True)[-1]
    partial = last[: len(last) // 2]
    journal.write_bytes(whole[: len(whole) - len(last)] + partial)
    said = _search(out, 12, resume=True, seed=1)
    assert any("incomplete last line (a write cut short)" in line for line in said), said
    assert (out / "search.journal.rejected").read_bytes() == partial + b"\n"
    assert journal.read_bytes().endswith(b"\n")
    assert not [line for line in _search(out, 16, resume=True, seed=2) if line.startswith("warning:")]
    _one_index_per_configuration(out)


def _trials(journal: Path) -> dict[int, tuple]:
    """Each trial of the study in ``journal``: its state, parameters, attributes and value, by number."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(study_name="sim", storage=JournalStorage(JournalFileBackend(str(journal))))
    return {t.number: (t.state, t.params, t.user_attrs, t.value) for t in study.get_trials()}


@pytest.mark.slow
def test_a_grid_value_that_reads_as_mathtext_is_shown_as_written(tmp_path):
    """Row 13: a workload argument "$\\foo{$" (any text a user may give) in the grid. Matplotlib read it as
    mathtext and `ignite-ddl report` ended in its ParseFatalException with no report written; now every plot shows
    it as written, and report.md and report.html are written."""
    from test_report import record

    from ignite_ddl.report import write_report

    evil = "$\\foo{$"
    for index, (procs, batch) in enumerate([(1, 32), (2, 64)]):
        for repeat in range(2):
            append_record(
                tmp_path / "results.jsonl",
                record(
                    index, repeat, 100.0 + 5 * index + repeat, procs=procs, batch=batch,
                    config={"workload": "own:make", "workload_args": {"tag": evil}},
                    grid={"workload_args.tag": evil}, summary={"confusion_matrix": [[5, 1], [2, 4]]},
                ),
            )  # fmt: skip
    write_report(tmp_path)
    assert evil.replace("\\", "\\\\") in (tmp_path / "report.md").read_text()  # as Markdown escapes a backslash
    assert evil in (tmp_path / "report.html").read_text()
    assert (tmp_path / "confusion.png").is_file() and (tmp_path / "throughput.png").is_file()


@pytest.mark.slow
def test_a_resumed_sweep_removes_the_temporary_folders_a_kill_left(tmp_path, monkeypatch):
    """Also found: a sweep killed outright (SIGKILL) left its scratch folder (ignite-ddl-*) and its multiprocessing
    folder (pymp-*) in $TMPDIR for good. Its session names them in sweep.json; --resume removes them, and the
    resumed sweep leaves nothing of its own."""
    scratch = Path(tempfile.mkdtemp(prefix="t"))  # short: a worker's socket path in it must stay under 107 bytes
    monkeypatch.setenv("TMPDIR", str(scratch))
    out = tmp_path / "sweep"
    sizes = ("--set", "model=toy", "--set", "train_size=256", "--set", "val_size=64", "--set", "epochs=1")
    args = ["sweep", "--grid", "seed=1", *sizes, "--repeats=1", "--no-report", "--output-dir", str(out)]
    marker = f"sweep-scratch-{os.getpid()}"
    proc = start_marked([sys.executable, "-m", "ignite_ddl", *args], marker)
    try:
        deadline = time.monotonic() + 180
        while not (out / "sweep.json").is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # written as the session starts, before its first run
        proc.kill()  # the sweep alone (a run would stop by itself, seeing the sweep gone)
        proc.communicate(timeout=60)
        assert wait_gone(marker, seconds=60) == []
        assert sorted(p.name.split("-")[0] for p in scratch.iterdir()) == ["ignite", "pymp"]  # what the kill left
        result = run_cli(*args, "--resume", timeout=600)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "removed 2 temporary folder(s) a killed session left" in result.stdout, result.stdout
        assert list(scratch.iterdir()) == []
    finally:
        for pid in processes_marked(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)


def test_a_process_started_elsewhere_makes_a_scratch_folder_of_its_own(tmp_path, monkeypatch):
    """Also found: a SLURM job inherited the sweep's scratch folder with the sweep's environment and wrote there, so it
    failed ("inductor-...: No such file or directory") when a sweep resumed after a kill removed the folder the kill
    left while the job still ran; on another node that folder does not exist at all. A job drops what it inherited
    and makes a folder of its own, in the temporary folder the sweep's was made in."""
    from ignite_ddl.launcher.scratch import scratch_folder

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    job = (
        "import os\n"
        "from ignite_ddl.launcher.scratch import drop_inherited, scratch_folder\n"
        "drop_inherited()\n"
        "with scratch_folder() as folder:\n"
        "    print(folder, os.environ['TORCHINDUCTOR_CACHE_DIR'], sep='\\n')\n"
    )
    with scratch_folder() as sweeps:
        shutil.rmtree(sweeps)  # gone, as on another node
        shown = subprocess.run([sys.executable, "-c", job], capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr
        folder, cache = shown.stdout.split()
        assert folder != sweeps and Path(folder).parent == tmp_path and not Path(folder).exists()  # removed at its end
        assert Path(cache).parent == Path(folder)


def test_only_a_dead_sessions_own_temporary_folders_are_removed(tmp_path, monkeypatch):
    """sweep.json is the user's to edit: a folder named there is removed only if it lies in the temporary folder,
    is named as a scratch or multiprocessing folder, is no link, and its process is gone."""
    from ignite_ddl.launcher.scratch import remove_left_behind

    monkeypatch.setenv("IGNITE_DDL_TMPDIR_OUTSIDE", str(tmp_path))
    kept = [tmp_path / "results", tmp_path / "pymp-abc" / "inner", tmp_path / "sub" / "pymp-x"]
    for folder in [*kept, tmp_path / "ignite-ddl-1", tmp_path / "elsewhere"]:
        folder.mkdir(parents=True)
    (tmp_path / "pymp-link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    named = [str(p) for p in [*kept, tmp_path / "pymp-link", tmp_path / "ignite-ddl-1"]]
    named += [f"{tmp_path}/sub/../ignite-ddl-1", "relative/pymp-1", 7]
    assert remove_left_behind(named, os.getpid()) == []  # this process: alive
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert remove_left_behind(named, int(dead.stdout)) == [str(tmp_path / "ignite-ddl-1")]
    assert all(p.is_dir() for p in kept) and (tmp_path / "elsewhere").is_dir() and (tmp_path / "pymp-link").is_symlink()


@pytest.mark.parametrize("command", [["train", "--max-iters=2"], ["sweep", "--grid=seed=1"]])
def test_a_torchvision_built_for_another_torch_is_named_in_one_line(tmp_path, command):
    """Also found: a torchvision whose compiled operators are another torch's fails as it is imported (`operator
    torchvision::nms does not exist`), and the command ended in that traceback. A package that fails so, first on
    the path, stands in for such a build: one line names both versions and the pip command that fixes it, exit 2,
    nothing written."""
    mismatched = tmp_path / "site" / "torchvision"
    mismatched.mkdir(parents=True)
    (mismatched / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    root = Path(__file__).parents[1]
    out = tmp_path / "out"
    result = run_cli(*command, f"--output-dir={out}", env={"PYTHONPATH": f"{mismatched.parent}{os.pathsep}{root}"})
    assert result.returncode == 2, result.stderr[-2000:]
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert line.startswith("ignite-ddl: error: torchvision ") and "does not work with torch" in line, line
    assert "operator torchvision::nms does not exist" in line and "pip install 'torch==" in line, line
    assert not out.exists()


def test_every_busy_machine_message_names_what_finishes_the_sweep():
    """Also found: on a busy machine the first refusal named --on-busy run, which then stopped after 3 contended
    runs in a row; no message named --busy-stop-after 0, which a user needs to finish the sweep there."""
    finish = "--on-busy run --busy-stop-after 0"
    now = [0.0]

    def pause(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(MachineBusy, match=finish):  # waited, and it stayed busy
        wait_until_quiet(0.1, "wait", 3.0, lambda _: None, probe=lambda: 0.6, pause=pause, clock=lambda: now[0])
    with pytest.raises(MachineBusy, match=finish):
        wait_until_quiet(0.1, "stop", 60.0, lambda _: None, probe=lambda: 0.6)
    said: list[str] = []
    wait_until_quiet(0.1, "run", 60.0, said.append, probe=lambda: 0.6, stop_after=3)
    assert said[0].endswith("flagged contended, and 3 contended runs in a row stop the sweep (never with "
                            "--busy-stop-after 0)"), said  # fmt: skip


def test_a_sweep_stopped_by_contention_names_how_to_finish_it(tmp_path):
    """The stop after busy_stop_after contended runs in a row names the resume that finishes the sweep."""

    class Busy(Simulated):
        def draw(self, run: Any) -> dict[str, Any]:
            record = super().draw(run)
            record["contended"], record["summary"]["contention"] = True, {"foreign_cpu_share": 0.6}
            return record

    spec = parse_spec({"name": "busy", "grid": {"seed": [1, 2]}, "repeats": 2, "busy_stop_after": 2})
    with pytest.raises(MachineBusy) as stopped:
        _sweep(spec, tmp_path, list(expand(spec, tmp_path)), Busy([100.0, 100.0], 0.02), False, lambda line: None)
    assert str(stopped.value).endswith(
        "in every one of the last 2 runs; 2 run(s) not started; to finish anyway: --resume --on-busy run "
        "--busy-stop-after 0"
    ), stopped.value


@pytest.mark.slow
def test_a_runs_peak_memory_does_not_depend_on_how_its_process_started(tmp_path):
    """Also found: one configuration peaked at 1.0 GB under `train` and at 670 MiB inside a sweep. A fresh
    interpreter counts some 300 MiB of torch's library pages it touched while importing torch; a sweep's run, forked
    from a fork server that imported it, counts only the pages it runs. Those file pages are no part of what the run
    trains with, and are left out: the same run, started both ways, peaks within 10 %."""
    options = {"train_size": 512, "val_size": 64, "batch_size": 32, "epochs": 1, "warmup_iters": 2}
    alone = tmp_path / "train"
    result = run_cli("train", *(f"--{k.replace('_', '-')}={v}" for k, v in options.items()), "--no-progress",
                     f"--output-dir={alone}", timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        json.dumps({"base": options, "grid": {"seed": [0]}, "repeats": 1, "output_dir": str(tmp_path / "s")})
    )
    result = run_cli("sweep", str(spec), "--no-report", timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    peaks = [
        json.loads((alone / "summary.json").read_text())["memory"]["max"]["peak_rss_bytes"],
        read_results(tmp_path / "s" / "results.jsonl")[0]["summary"]["memory"]["max"]["peak_rss_bytes"],
    ]
    assert abs(peaks[0] - peaks[1]) < 0.1 * max(peaks), [round(p / 2**20) for p in peaks]
