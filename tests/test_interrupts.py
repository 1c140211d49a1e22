"""SIGTERM and SIGHUP outside a run end a command as SIGINT does: one line, exit 128 + signal, and its scratch
folder (and this process's multiprocessing folder) removed; commands leave nothing in $TMPDIR, --help included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import run
from test_report import configs

from ignite_ddl.core.results import append_record

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_writing_a_report_ends_it_cleanly(tmp_path, signum):
    results = tmp_path / "results"
    results.mkdir()
    for r in configs([100.0, 101.0, 99.0], [150.0, 160.0, 155.0]):
        append_record(results / "results.jsonl", r)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ignite_ddl", "report", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
        start_new_session=True,
    )
    try:
        # The command's scratch folder exists once its handlers are installed: the signal then comes mid-report
        # (importing the plotting stack alone takes longer than this loop's step).
        while proc.poll() is None and not any(p.name.startswith("ignite-ddl-") for p in scratch.iterdir()):
            time.sleep(0.005)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum, stderr
    assert stderr.strip().splitlines()[-1] == f"ignite-ddl: interrupted by {signal.Signals(signum).name}: stopped"
    assert "Traceback" not in stderr
    assert list(scratch.iterdir()) == []  # neither ignite-ddl-* nor pymp-*


def test_help_leaves_nothing_in_the_temporary_folder(tmp_path):
    """Importing torch._dynamo (a lab's module, the trainer) creates $TMPDIR/torchinductor_<user> unless
    TORCHINDUCTOR_CACHE_DIR already points elsewhere: the scratch folder must exist before those imports."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = run([sys.executable, "-m", "ignite_ddl", "fsdp", "--help"], env={"TMPDIR": str(scratch)}, cwd=ROOT)
    assert result.returncode == 0 and "usage" in result.stdout, result.stderr
    assert list(scratch.iterdir()) == []


@pytest.mark.slow
def test_no_benchmark_leaves_anything_in_the_temporary_folder(tmp_path):
    """Every script of benchmarks/ with --help, each with a fresh $TMPDIR that must stay empty (the scripts that
    import torch enter their scratch folder through benchmarks/bench_scratch.py first). Four at a time: each pays
    for importing torch, and one by one they would take minutes."""
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(scripts) > 10

    def help_of(script: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
        scratch = tmp_path / script.stem
        scratch.mkdir()
        return scratch, run([sys.executable, str(script), "--help"], env={"TMPDIR": str(scratch)}, cwd=ROOT)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(scripts, pool.map(help_of, scripts)))
    for script, (_, result) in results.items():
        assert result.returncode == 0, f"{script.name}: {result.stderr}"
        if '__main__":' in script.read_text():  # bench_common and bench_scratch are modules the scripts import
            assert "usage" in result.stdout, f"{script.name}: {result.stdout}"
    left = {script.name: sorted(p.name for p in scratch.iterdir()) for script, (scratch, _) in results.items()}
    assert {name: files for name, files in left.items() if files} == {}


@pytest.mark.slow
def test_a_signal_while_a_sweep_waits_for_a_quiet_machine_ends_it_cleanly(tmp_path):
    """A sweep waiting for a busy machine to quieten (a CPU burner beside it) is stopped by SIGTERM: one line,
    exit 143, no scratch folder left, no run started."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    cmd = [sys.executable, "-m", "ignite_ddl", "sweep", "--grid", "seed=1", "--on-busy", "wait", "--wait-quiet", "300"]
    cmd += ["--contention-threshold", "0.01", "--no-report", "--output-dir", str(tmp_path / "sweep")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(scratch)}, start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("the machine is busy"):
                break
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        burner.kill()
        burner.wait()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1] == "ignite-ddl: interrupted by SIGTERM: stopped"
    assert list(scratch.iterdir()) == [] and not (tmp_path / "sweep" / "runs").exists()
