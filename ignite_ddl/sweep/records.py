"""A run's record in a sweep's ``results.jsonl``: the configuration and its summary, or why it failed, read from the
run's folder however the run was executed (here or as a SLURM job).

Example:
    >>> _exit_reason(-9), _exit_reason(3)
    ('killed by SIGKILL (out of memory?)', 'exited with status 3')
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ignite_ddl.core.runfiles import SUMMARY_FILE, read_summary
from ignite_ddl.core.sweep_records import RunRecord
from ignite_ddl.launcher.processes import out_of_memory
from ignite_ddl.sweep.plan import Refused, Run, launched, options_key

__all__ = ["describe_outcome", "finish_record", "last_error", "launched", "new_record", "refused_record"]


def new_record(run: Run, elapsed_s: float, code: int | None) -> RunRecord:
    """A run's record as it ended (status completed until :func:`finish_record` reads the run's folder)."""
    return {
        "key": run.key,
        "index": run.index,
        "repeat": run.repeat,
        "attempt": run.attempt,
        "position": run.position,
        "grid": run.grid,
        "config": run.config.to_dict(),
        "run_dir": str(run.config.output_dir),
        "elapsed_s": elapsed_s,
        "exit_code": code,
        "status": "completed",
        "error": None,
        "contended": False,
        "summary": None,
    }


def refused_record(refused: Refused) -> RunRecord:
    """The record of a configuration refused before the sweep started (:func:`~ignite_ddl.sweep.plan.
    refused_configurations`): status ``refused``, its reason, no exit status, no run folder and no place in the run
    order (-1): it was never launched."""
    return {
        "key": f"{options_key(refused.config)}-r0",
        "index": refused.index,
        "repeat": 0,
        "attempt": 0,
        "position": -1,
        "grid": refused.grid,
        "config": refused.config,
        "run_dir": "",
        "elapsed_s": 0.0,
        "exit_code": None,
        "status": "refused",
        "error": refused.reason,
        "contended": False,
        "summary": None,
    }


def finish_record(record: RunRecord, threshold: float) -> RunRecord:
    """Complete a run's record from its folder: its summary if it ended well, else why it did not."""
    code, run_dir = record["exit_code"], Path(record["run_dir"])
    if code == 0 and (run_dir / SUMMARY_FILE).is_file():
        try:
            summary = read_summary(run_dir)
        except ValueError as e:  # a run that exited well and left a summary no run writes
            record.update({"status": "failed", "error": f"{run_dir}: {e}"})
            return record
        contention = summary.get("contention")
        share = (contention.get("foreign_cpu_share") if contention else None) or 0.0
        gpu = (contention.get("foreign_gpu_share") if contention else None) or 0.0
        record.update({"summary": summary, "contended": max(share, gpu) > threshold})
        return record
    if record["status"] == "completed":
        if code is None:
            record.update({"status": "failed", "error": "the run returned no exit status"})
        else:
            # A run killed by a signal printed nothing about it: its last line would be a stale log line.
            reason = _exit_reason(code) if code < 0 else last_error(run_dir / "console.log") or _exit_reason(code)
            status = "refused" if code == 2 else "failed"
            if code == -signal.SIGKILL:  # the whole run killed (the kernel's OOM killer picks the largest process)
                reason = _killed_for_memory(run_dir) or reason
            if _OUT_OF_MEMORY.search(reason):
                status = "out_of_memory"
            record.update({"status": status, "error": reason})
    return record


# How the launcher words a rank that ran out of memory: "rank 1 failed: out of memory ..."
_OUT_OF_MEMORY = re.compile(r"^(rank \d+ failed: )?out of memory")


def _killed_for_memory(run_dir: Path) -> str | None:
    """Why a run killed by SIGKILL ran out of memory, from the last reading its ranks left (None if none was near
    its limit)."""
    for reading in sorted((run_dir / "logs").glob("memory_rank*.txt")):
        rank = int(reading.stem.removeprefix("memory_rank"))
        said = out_of_memory("", run_dir / "logs", rank, killed=True)
        if said is not None:
            return f"rank {rank} failed: {said}"
    return None


def last_error(console: Path) -> str | None:
    """The one-line error the run printed last (or its last line; None if it printed nothing, or died before it
    opened its console file)."""
    try:
        text = console.read_text(errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ignite-ddl: error: ")]
    if errors:
        return errors[-1].removeprefix("ignite-ddl: error: ")
    return lines[-1] if lines else None


def _exit_reason(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with status {code}"


def describe_outcome(record: RunRecord) -> str:
    """A finished run in a few words, for the progress line."""
    if record["status"] != "completed" or record["summary"] is None:
        return f"{record['status'].upper()}: {record['error']}"
    # The run's summary.json as read back: looked up defensively, as plain data.
    summary: Mapping[str, Any] = record["summary"]
    window = ((summary.get("steps") or {}).get("global") or {}).get("window_s")
    measured = f", {window:.1f} s measured" if window else ""
    contended = ""
    if record["contended"]:
        share = (summary.get("contention") or {}).get("foreign_cpu_share") or 0.0
        contended = f"; CONTENDED: other processes used {share:.0%} of the CPUs"
    return f"ok: {summary['samples_per_s']:.0f} samples/s in {record['elapsed_s']:.1f} s{measured}{contended}"
