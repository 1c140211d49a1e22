"""A busy machine is said at once: a sweep started beside CPU-burning processes (real ones) stops with "cannot
compare on this machine" instead of spending every run, or waits for the machine to quieten; a report that counts
contended runs marks its verdict, its tables and every plot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from conftest import run_cli
from matplotlib.colors import to_hex
from test_plots import drawn
from test_report import configs, record

from ignite_ddl.core.errors import MachineBusy, exit_status
from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.core.results import append_record, read_results
from ignite_ddl.report import analyze, write_report
from ignite_ddl.report.plots import figures
from ignite_ddl.sweep.busy import BusyStreak, machine_share, wait_until_quiet

TINY = ["--set", "train_size=512", "--set", "val_size=64", "--set", "batch_size=32", "--set", "epochs=1"]


def _burn(count: int) -> list[subprocess.Popen]:
    """CPU-burning processes outside the sweep's process tree (their own sessions), for at most five minutes."""
    code = "import time\nend = time.time() + 300\nwhile time.time() < end: pass\n"
    return [subprocess.Popen([sys.executable, "-c", code], start_new_session=True) for _ in range(count)]


def _stop(burners: list[subprocess.Popen]) -> None:
    for burner in burners:
        if burner.poll() is None:
            os.killpg(burner.pid, signal.SIGKILL)
        burner.wait()


def _run_beside_burners(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """``python -m ignite_ddl ARGS`` started half a second after a CPU burner per core, which stop when it ends."""
    burners = _burn(os.cpu_count() or 1)
    try:
        time.sleep(0.5)
        return run_cli(*args, timeout=timeout)
    finally:
        _stop(burners)


# -- the rules, on given probes


def test_a_busy_start_is_said_and_waited_on_until_quiet():
    said: list[str] = []
    shares = iter([0.7, 0.6, 0.5, 0.03])
    share = wait_until_quiet(0.1, "wait", 30.0, said.append, probe=lambda: next(shares), pause=lambda s: None)
    assert share == 0.03 and len(said) == 2
    assert said[0].startswith("the machine is busy: other processes use 70% of its CPUs")
    assert said[1] == "quiet now (other processes use 3%): starting"


def test_a_machine_that_stays_busy_stops_the_sweep_with_the_range_seen():
    now = [0.0]

    def pause(seconds: float) -> None:
        now[0] += seconds

    shares = iter([0.52, 0.79, 0.6, 0.7, 0.55] * 10)
    with pytest.raises(MachineBusy) as stop:
        wait_until_quiet(
            0.1, "wait", 3.0, lambda _: None, probe=lambda: next(shares), pause=pause, clock=lambda: now[0]
        )
    assert str(stop.value).startswith("cannot compare on this machine now: other processes used 52-79% of its CPUs")
    assert exit_status(stop.value) == 3


def test_on_busy_stop_and_run():
    with pytest.raises(MachineBusy, match=r"not starting \(--on-busy stop\)"):
        wait_until_quiet(0.1, "stop", 60.0, lambda _: None, probe=lambda: 0.5)
    said: list[str] = []
    assert wait_until_quiet(0.1, "run", 60.0, said.append, probe=lambda: 0.5) == 0.5
    assert "running anyway (--on-busy run)" in said[0]
    assert wait_until_quiet(0.1, "stop", 60.0, said.append, probe=lambda: 0.05) == 0.05 and len(said) == 1


def test_only_contended_runs_in_a_row_stop_a_sweep():
    streak = BusyStreak(after=3)
    assert [streak.add(c, s) for c, s in [(True, 0.5), (True, 0.6), (False, 0.01), (True, 0.4), (True, 0.7)]] == [
        None
    ] * 5
    assert streak.add(True, 0.55) == (
        "cannot compare on this machine: other processes used 40-70% of the CPUs in every one of the last 3 runs"
    )
    never = BusyStreak(after=0)
    assert all(never.add(True, 0.9) is None for _ in range(10))


# -- real sweeps beside real burners


@pytest.mark.slow
@pytest.mark.distributed
def test_a_sweep_on_a_busy_machine_stops_promptly_and_says_why(tmp_path):
    result = _run_beside_burners(
        "sweep",
        "--grid",
        "batch_size=16,32,64",
        "--set",
        "model=mlp",
        *TINY[:4],
        *TINY[6:],
        "--repeats",
        "3",
        "--on-busy",
        "run",
        "--busy-stop-after",
        "2",
        "--rerun-contended",
        "2",
        "--output-dir",
        str(tmp_path),
        timeout=600,
    )
    assert result.returncode == 3, result.stderr
    assert "the machine is busy: other processes use" in result.stdout
    error = result.stderr.strip().splitlines()[-1]
    assert (
        error.startswith("ignite-ddl: error: cannot compare on this machine: other processes used")
        and "of the CPUs in every one of the last 2 runs; 7 run(s) not started; to finish anyway" in error
    ), result.stderr
    records = read_results(tmp_path / "results.jsonl")
    assert len(records) == 2 and all(r["contended"] for r in records)  # 2 of 9, and no re-run of them
    session = read_json(tmp_path / "sweep.json")["sessions"][-1]
    assert session["stopped"]["runs_left"] == 7 and session["runs"] == 2
    verdict = (tmp_path / "verdict.txt").read_text().splitlines()
    assert verdict[0].startswith("cannot compare on this machine: other processes used")
    report = (tmp_path / "report.md").read_text()
    assert "**Cannot compare on this machine: other processes used" in report


@pytest.mark.slow
@pytest.mark.distributed
def test_a_sweep_waits_for_a_busy_machine_to_quieten(tmp_path):
    """Burners until the sweep has said the machine is busy, then the machine as others leave it: the sweep waits,
    then runs once it is quiet. Where others keep the machine busy after the burners stop, the right outcome is
    "cannot compare ... now": the test then checks, with probes of its own taken while the sweep waited, that the
    machine really was busy."""
    burners = _burn(os.cpu_count() or 1)
    done, seen = threading.Event(), []

    def watch() -> None:  # the machine as the sweep sees it once the burners have stopped
        while not done.is_set():
            share = machine_share(1.0)
            if share is not None:
                seen.append(share)

    # Half the machine: the burners take all of it.
    cmd = [sys.executable, "-m", "ignite_ddl", "sweep", "--grid", "model=mlp", *TINY, "--on-busy", "wait"]
    cmd += ["--wait-quiet", "45", "--contention-threshold", "0.5", "--no-report", "--output-dir", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = threading.Thread(target=watch, daemon=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("the machine is busy"):
                _stop(burners)
                watcher.start()
                break
        lines += proc.stdout.read().splitlines()
        stderr = proc.stderr.read() if proc.stderr is not None else ""
        proc.wait(timeout=600)
    finally:
        done.set()
        _stop(burners)
        if proc.poll() is None:
            proc.kill()
        if watcher.is_alive():
            watcher.join()
    busy = next((i for i, line in enumerate(lines) if line.startswith("the machine is busy")), None)
    assert busy is not None, "\n".join(lines) + stderr
    assert "waiting up to 45 s for it to quieten (--wait-quiet)" in lines[busy]
    if proc.returncode == 3:  # others kept it busy: said so, and true
        assert "cannot compare on this machine now: other processes used" in stderr
        assert seen and max(seen) > 0.5, f"the sweep saw a busy machine; probes after the burners saw {seen}"
        assert not (tmp_path / "results.jsonl").exists()
        return
    assert proc.returncode == 0, stderr
    assert lines[busy + 1].startswith("quiet now (other processes use")
    (only,) = read_results(tmp_path / "results.jsonl")
    assert only["status"] == "completed"


@pytest.mark.slow
def test_on_busy_stop_refuses_at_once_and_starts_nothing(tmp_path):
    result = _run_beside_burners(
        "sweep", "--grid", "model=mlp", *TINY, "--on-busy", "stop", "--output-dir", str(tmp_path), timeout=120
    )
    assert result.returncode == 3
    assert result.stderr.strip().endswith(
        "; not starting (--on-busy stop); to measure anyway: --on-busy run --busy-stop-after 0"
    ), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "results.jsonl").exists()


# -- a report that counts contended runs


def _contended_sweep(tmp_path: Path) -> list[dict]:
    """1 and 2 processes, the 1-process runs slowed by a neighbour: counted, 2 processes look superlinear."""
    records = configs([40.0, 41.0, 39.0])
    records += [record(1, r, v, procs=2) for r, v in enumerate([160.0, 161.0, 159.0])]
    for r in records[:3]:
        r["contended"] = True
        r["summary"]["contention"]["foreign_cpu_share"] = 0.6
    for r in records:
        append_record(tmp_path / "results.jsonl", r)
    return records


def test_a_report_counting_contended_runs_marks_verdict_tables_and_plots(tmp_path):
    records = _contended_sweep(tmp_path)
    analysis = analyze(records, include_contended=True)
    assert analysis.contention_note == "MEASURED UNDER CONTENTION: 3 of the 6 runs counted were contended"
    report = write_report(tmp_path, include_contended=True).read_text()
    verdict = (tmp_path / "verdict.txt").read_text().splitlines()
    assert verdict and all("(MEASURED UNDER CONTENTION: 3 of the 6 runs counted were contended)" in v for v in verdict)
    assert "**MEASURED UNDER CONTENTION: 3 of the 6 runs counted were contended**" in report
    assert "counted in the figures and the verdict (3 of them used)" in report
    # Efficiency 2.0 on 2 processes is printed only with its flag beside it.
    decision = report.split("| config |")[1].split("\n\n")[0]
    assert "2.00 (" in decision and "(superlinear: suspect)" in decision and "(contended)" in decision
    made = figures(analysis)
    try:
        for name, fig in made.items():
            _, texts = drawn(fig)
            words = [t.get_text() for t in texts]
            assert any("MEASURED UNDER CONTENTION" in w for w in words), name
            if name == "throughput.png":
                bars = [to_hex(p.get_facecolor()) for ax in fig.axes for p in ax.patches]
                named = any(v.best or v.tied for v in analysis.verdicts)  # a counted contended run: not judged
                assert bars and to_hex("tab:green") not in bars and (to_hex("tab:orange") in bars) == named
    finally:
        for fig in made.values():
            plt.close(fig)


def test_a_report_leaving_contended_runs_out_marks_nothing(tmp_path):
    records = _contended_sweep(tmp_path)
    analysis = analyze(records)
    assert analysis.contention_note is None
    made = figures(analysis)
    try:
        for name, fig in made.items():
            _, texts = drawn(fig)
            assert not any("CONTENTION" in t.get_text() for t in texts), name
    finally:
        for fig in made.values():
            plt.close(fig)
    report = write_report(tmp_path).read_text()
    assert "left out of the figures and the verdict" in report and "MEASURED UNDER CONTENTION" not in report


def test_efficiency_above_one_never_appears_without_its_flag():
    """Every efficiency the decision table prints above 1.00 carries the superlinear flag beside it."""
    for ratio in (1.004, 1.006, 1.02, 1.3, 0.9):
        records = configs([100.0, 100.5, 99.5])
        records += [record(1, r, v * ratio * 2, procs=2) for r, v in enumerate([100.0, 100.5, 99.5])]
        analysis = analyze(records)
        efficiency = analysis.configs[1].efficiency
        printed = f"{efficiency.value:.2f}"
        flagged = any(f.kind == "superlinear" for f in analysis.flags)
        assert flagged == (float(printed) > 1.0), (ratio, printed)


def test_a_report_with_every_run_left_out_points_at_no_plot(tmp_path):
    """Every run contended and left out: no throughput, so no throughput plot, and the text does not send the
    reader to one."""
    records = configs([40.0, 41.0, 39.0], [80.0, 81.0, 79.0])
    for r in records:
        r["contended"] = True
        append_record(tmp_path / "results.jsonl", r)
    report = write_report(tmp_path).read_text()
    assert "throughput.png" not in report and not (tmp_path / "throughput.png").exists()
