"""A failure on one rank ends the whole run promptly, names the rank, and leaves no process behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run, run_script

from ignite_ddl.launcher import free_port


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("how", ["raise", "exit"])
def test_failure_on_rank1_ends_the_run(tmp_path, how):
    # The deadline is the check that the run ended promptly: rank 0, blocked in an all-reduce, would otherwise wait
    # for the collective timeout (5 minutes) and run() would raise TimeoutExpired.
    result = run_script("scenarios.py", f"fail-{how}", str(tmp_path / "run"), timeout=60)
    assert result.returncode == 1, result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("error: rank 1 failed:"), result.stderr
    if how == "raise":
        assert "RuntimeError: injected failure at iteration 3" in message
        assert "injected failure" in (tmp_path / "run" / "logs" / "rank1.log").read_text()
    else:  # died without an exception: no traceback to point to
        assert "exited with status 3 without raising an exception" in message and "traceback in" not in message
    # rank 0 was blocked in a gradient all-reduce waiting for rank 1: it must be gone too
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert leftovers == []


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("launcher", ["spawn", "torchrun"])
def test_a_stuck_rank_ends_the_run_named(tmp_path, launcher):
    # Rank 1 sleeps in forward at iteration 6; rank 0 waits for it in the gradient all-reduce. Without the watchdog
    # both would wait for the collective timeout (5 minutes) and the error would come from rank 0, the victim.
    out = tmp_path / "run"
    cmd = [str(Path(__file__).with_name("scenarios.py")), "hang", str(out)]
    if launcher == "torchrun":
        cmd = [
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(free_port()),
            *cmd,
        ]
    # The deadline (well under the 5-minute collective timeout) is the check that the watchdog ended the run.
    result = run([sys.executable, *cmd], timeout=120, env={"OMP_NUM_THREADS": "1"})
    assert result.returncode == 1, result.stderr
    assert "rank 1 failed: stuck in forward of iteration 6: no iteration completed for 3 s" in result.stderr
    assert "rank 0 waits for it, in backward (the gradient all-reduce) of iteration 6" in result.stderr
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert leftovers == []


@pytest.mark.slow
def test_handlers_profiler_does_not_swallow_errors(tmp_path):
    # stock HandlersTimeProfiler makes Engine.run return normally after an exception (Ignite 0.5.5)
    result = run_script("scenarios.py", "handlers-raise", str(tmp_path / "run"), timeout=60)
    assert result.returncode == 1
    assert "RuntimeError: injected failure at iteration 3" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run" / "summary.json").exists()
