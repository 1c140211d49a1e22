"""Shared helpers: run the real CLI in a subprocess and check the files a run leaves behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# The suite must pass on a machine other programs keep busy: sweeps run anyway and never stop for contention
# (their runs are still flagged). tests/test_busy.py sets these per sweep to test the busy-machine behaviour.
os.environ.setdefault("IGNITE_DDL_ON_BUSY", "run")
os.environ.setdefault("IGNITE_DDL_BUSY_STOP_AFTER", "0")
# A sweep's memory prediction runs a probe per launch layout (seconds each, in every fresh output folder): off for the
# suite's many sweeps, on in the tests of the prediction itself (spec key predict: true).
os.environ.setdefault("IGNITE_DDL_PREDICT", "0")

# A run small enough for CI yet going through every part of the trainer.
QUICK = ["--train-size", "512", "--val-size", "128", "--batch-size", "64", "--epochs", "1", "--no-progress"]
# A sweep's runs kept small (``--set`` options of ``sweep``): 256 training and 64 validation samples, one epoch.
SMALL_SWEEP = ["--set", "train_size=256", "--set", "val_size=64", "--set", "epochs=1"]

SUMMARY_KEYS = {
    "schema_version": int,
    "status": str,
    "world_size": int,
    "backend": str,
    "device": dict,
    "threads_per_process": int,
    "batch": dict,
    "epochs": int,
    "iterations": int,
    "epoch_length": int,
    "wall_time_s": float,
    "train_time_s": float,
    "train_samples": int,
    "samples_per_s": float,
    "final_train_loss": float,
    "val_accuracy": float,
    "val_loss": float,
    "history": list,
}


def run(
    cmd: list[str],
    timeout: float = 180,
    env: dict | None = None,
    cwd: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
):
    """Run ``cmd`` in its own session; on timeout kill the whole group, so that a hung rank it forked dies too."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def run_cli(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 180,
    env: dict | None = None,
    preexec_fn: Callable[[], None] | None = None,
):
    """``python -m ignite_ddl ARGS`` in a fresh interpreter, as a user would run it."""
    return run([sys.executable, "-m", "ignite_ddl", *args], timeout=timeout, env=env, cwd=cwd, preexec_fn=preexec_fn)


def run_script(name: str, *args: str, timeout: float = 180, env: dict | None = None):
    """``python tests/NAME ARGS``: one of the helper scripts beside the tests."""
    return run([sys.executable, str(Path(__file__).with_name(name)), *args], timeout=timeout, env=env)


def start_marked(cmd: list[str], marker: str) -> subprocess.Popen:
    """Start ``cmd`` in its own session with its output piped, it and every descendant marked with ``marker``
    (found again by :func:`processes_marked`)."""
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "IGNITE_DDL_TEST_MARK": marker},
    )


def processes_marked(marker: str) -> list[int]:
    """Live processes whose environment holds ``IGNITE_DDL_TEST_MARK=<marker>`` (every descendant inherits it,
    however it was started: fork server, forked ranks, DataLoader workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"IGNITE_DDL_TEST_MARK={marker}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_gone(marker: str, seconds: float = 15.0) -> list[int]:
    """The processes marked ``marker`` still alive after waiting up to ``seconds`` for them to end."""
    deadline = time.monotonic() + seconds
    while processes_marked(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return processes_marked(marker)


def completed_record(key: str, index: int, repeat: int, /, **fields: Any) -> dict:
    """A completed run's record as the results file holds it: ``key``, ``index``, ``repeat``, the fields of a first
    attempt that ended well, then ``fields`` (grid, config, summary, run_dir, elapsed_s, ...) in their order; a field
    of ``fields`` already there replaces its value."""
    return {
        "key": key,
        "index": index,
        "repeat": repeat,
        "attempt": 0,
        "position": 0,
        "status": "completed",
        "error": None,
        "contended": False,
        **fields,
    }


def output_from(stdout: str, first_line: str) -> list[str]:
    """The lines of a command's ``stdout`` from the first that starts with ``first_line`` on (it must be there).

    What comes before is not the command's: on some torch releases (2.9) each gloo rank prints "[Gloo] Rank 0 is
    connected to 1 peer ranks. Expected number of connected peer ranks is : 1" while its process group forms, in
    pieces that the ranks' writes scramble together ("1 is connected to 1 peer ranks. 0Expected ..."), so no pattern
    can take them out. They all end before the ranks do, and a lab prints its result after its ranks have ended."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(first_line)]
    assert starts, f"no line starts with {first_line!r}:\n{stdout}"
    return lines[starts[0] :]


def rank_steps(rank: int, exposed: float | None, comm: float | None) -> dict:
    """One rank's step statistics as summary.json holds them (seconds): 40 iterations, 2 ms data, 10 forward, 20
    backward, 1 optimizer, 0.5 handlers, 2 buckets a step, ``exposed`` and ``comm`` communication."""
    return {
        "rank": rank,
        "iterations": 40,
        "data_s_mean": 0.002,
        "forward_s_mean": 0.010,
        "backward_s_mean": 0.020,
        "optimizer_s_mean": 0.001,
        "handlers_s_mean": 0.0005,
        "exposed_comm_s_mean": exposed,
        "comm_s_mean": comm,
        "buckets_per_step": 2.0,
    }


def check_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def load_summary(out: Path, world_size: int) -> dict:
    """Read summary.json and check it against the documented schema."""
    summary = json.loads((out / "summary.json").read_text())
    for key, kind in SUMMARY_KEYS.items():
        assert isinstance(summary[key], kind), f"{key}: {summary[key]!r} is not {kind.__name__}"
    assert summary["status"] == "completed"
    assert summary["world_size"] == world_size
    assert summary["batch"]["global"] == summary["batch"]["per_rank"] * world_size
    assert summary["iterations"] == summary["epochs"] * summary["epoch_length"]
    assert summary["train_samples"] == summary["iterations"] * summary["batch"]["global"]
    assert summary["samples_per_s"] > 0 and summary["train_time_s"] <= summary["wall_time_s"]
    assert len(summary["history"]) == summary["epochs"]
    config = json.loads((out / "config.json").read_text())
    assert config["world_size"] == world_size and "torch" in config["versions"]
    return summary


@pytest.fixture(scope="session")
def spawn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 2-process gloo run shared by the tests that only read its outputs."""
    out = tmp_path_factory.mktemp("spawn") / "run"
    check_ok(
        run_cli(
            "train",
            "--backend",
            "gloo",
            "--nproc-per-node",
            "2",
            "--epochs",
            "2",
            *QUICK[:-3],
            "--no-progress",
            "--log-every",
            "2",
            "--output-dir",
            str(out),
        )
    )
    return out


# What Chromium must not do on a CI machine: reach the network, update itself, sync, ask first-run questions.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _browser_or_skip() -> tuple[str, str]:
    """Chromium and its driver, or skip (fail where CI requires them) saying what is missing."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing = "selenium (pip install -e '.[test]')"
    else:
        missing = ", ".join(name for name, found in (("chromium", chromium), ("chromedriver", driver)) if found is None)
        missing = missing and f"{missing} (apt-get install chromium chromium-driver)"
    if missing:
        reason = f"no real browser here: {missing} not found"
        if os.environ.get("IGNITE_DDL_BROWSER_REQUIRED") == "1":
            pytest.fail(reason + "; IGNITE_DDL_BROWSER_REQUIRED=1")
        pytest.skip(reason)
    assert chromium is not None and driver is not None
    return chromium, driver


@pytest.fixture
def chromium(tmp_path: Path):
    binary, driver_path = _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path, prefix='chromium-')}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        yield driver
    finally:
        driver.quit()
