"""Sweeps on a SLURM cluster: each run of a sweep becomes a SLURM job, submitted through submitit, and its record
lands in the sweep's ``results.jsonl`` when the job ends, exactly as a local run's would.

Runs that need the same resources go in one job array. A run of ``nproc_per_node`` processes on ``nnodes`` nodes
is a job of ``nnodes`` nodes and ``nproc_per_node`` tasks per node, started by srun: every task is one rank,
launched by SLURM (``launch_mode`` env, ``launcher`` slurm), one process alone runs serially. The spec's ``slurm``
mapping (or the command line) gives the rest::

    slurm:
      partition: gpu          # default: the cluster's default partition
      time_limit_min: 30      # default: the spec's timeout_s, rounded up to whole minutes
      gpus_per_node: 4        # default: nproc_per_node for nccl runs, none otherwise
      cpus_per_task: 8        # default: SLURM's
      poll_s: 5               # how often the sweep asks SLURM about its jobs

The sweep's folder must be on a file system the nodes share (runs write their own folders there). Submitted
jobs are written down in ``slurm_jobs.json`` at once, so a sweep that is stopped leaves its jobs running and
``--resume`` waits for them instead of submitting them again. A job that ends without a summary is recorded with
SLURM's state and reason (``FAILED``, ``CANCELLED``, ``TIMEOUT`` ...), read with scontrol while SLURM remembers the
job and with sacct after that.

Example:
    >>> options = SlurmOptions(partition="debug", cpus_per_task=4)
    >>> job_resources(TrainConfig(nproc_per_node=2), options, timeout_s=600)
    {'nodes': 1, 'ntasks_per_node': 2, 'time': 10, 'partition': 'debug', 'cpus_per_task': 4}
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ignite_ddl.core.commands import run_command
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.jsonfiles import read_json, write_json
from ignite_ddl.core.outputs import write_bytes
from ignite_ddl.core.sweep_records import RunRecord
from ignite_ddl.launcher.backends import device_of
from ignite_ddl.sweep.plan import Progress, Recorded, Run, Where
from ignite_ddl.sweep.records import finish_record, last_error, new_record
from ignite_ddl.sweep.spec import SlurmOptions

__all__ = [
    "JobExit",
    "NEVER_RUNS",
    "JobState",
    "Outcome",
    "SlurmExecutor",
    "job_config",
    "job_resources",
    "never_runs",
    "run_job",
]

# States of a job that has ended (squeue's and sacct's names); anything else is still pending or running.
ENDED = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
    "SPECIAL_EXIT",
)
JOBS_FILE = "slurm_jobs.json"

# Reasons SLURM gives a pending job that waiting cannot fix: the job asks for more than its partition, account or
# QOS allows any one job, or for what no node has (SLURM's "Job Reason Codes", slurm.schedmd.com/job_reason_codes
# .html). Such a job stays pending forever: it is cancelled and recorded as failed with the reason, at once.
NEVER_RUNS = frozenset(
    {
        "PartitionNodeLimit",  # more nodes than the partition has (or may give one job)
        "PartitionTimeLimit",  # a time limit above the partition's
        "PartitionConfig",  # "until the partition's configuration changes": what SLURM says at submission
        "BadConstraints",  # constraints (features, GRES) no node satisfies
        "DependencyNeverSatisfied",
        "InvalidAccount",
        "InvalidQOS",
        "AccountNotAllowed",  # the account may not use the partition
        "QOSNotAllowed",
    }
)
# Per-job maxima of an association or a QOS (QOSMaxNodePerJobLimit, AssocMaxWallDurationPerJobLimit, ...) and QOS
# minima (QOSMinGRES, ...): limits on the job itself, not on what others are using; aggregate limits (*Grp*,
# *PerUser, *PerAccount) pass as other jobs end, and are waited on.
_NEVER_RUNS_LIMIT = re.compile(r"(Assoc|QOS)Max\w*PerJob\w*|QOSMin\w+")


def never_runs(reason: str | None) -> bool:
    """Whether a pending job with SLURM's ``reason`` can never start as it was submitted."""
    return reason is not None and (reason in NEVER_RUNS or _NEVER_RUNS_LIMIT.fullmatch(reason) is not None)


def _check_cluster(options: SlurmOptions) -> None:
    """Refuse before submitting anything: no SLURM client here, no submitit, or a partition SLURM does not know."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise ConfigError("the slurm executor needs submitit: pip install 'ignite-ddl[slurm]'") from None
    for command in ("sbatch", "scontrol"):
        if shutil.which(command) is None:
            raise ConfigError(f"the slurm executor submits with SLURM's {command}, which is not on PATH here")
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise ConfigError("SLURM's controller did not answer 'scontrol ping' within 30 s") from None
    if ping.returncode != 0 or "UP" not in ping.stdout:
        raise ConfigError(f"SLURM's controller is not reachable: {_first_line(ping.stdout + ping.stderr)}")
    if options.partition is not None:
        found = subprocess.run(["scontrol", "show", "partition", options.partition], capture_output=True, text=True)
        if found.returncode != 0:
            raise ConfigError(f"SLURM has no partition '{options.partition}'")


# A rank that fails ends its job's other ranks at once (srun's own default leaves them waiting on it in a collective
# until gloo's or NCCL's timeout, the job held): the job fails promptly with the failing rank's error.
SRUN_ARGS = ("--kill-on-bad-exit=1",)


def job_resources(config: TrainConfig, options: SlurmOptions, timeout_s: float) -> dict[str, Any]:
    """The submitit (sbatch) parameters of one run's job: its nodes and tasks from the run's configuration."""
    tasks = config.nproc_per_node or 1
    resources: dict[str, Any] = {
        "nodes": config.nnodes,
        "ntasks_per_node": tasks,
        "time": options.time_limit_min or max(1, math.ceil(timeout_s / 60)),
    }
    if options.partition:
        resources["partition"] = options.partition
    gpus = options.gpus_per_node or (tasks if device_of(config.backend) == "cuda" else None)
    if gpus:
        resources["gpus_per_node"] = gpus
    if options.cpus_per_task:
        resources["cpus_per_task"] = options.cpus_per_task
    return resources


def job_config(config: TrainConfig) -> dict[str, Any]:
    """A run's options as its job runs them: the processes and the rendezvous are SLURM's (srun's tasks)."""
    placed = dataclasses.replace(
        config, nproc_per_node=None, nnodes=1, node_rank=None, master_addr=None, master_port=None
    )
    return placed.to_dict()


class JobExit(Exception):
    """Raised by a job whose run did not succeed, so that SLURM records the job as failed (and submitit says why)."""

    def __init__(self, code: int):
        super().__init__(f"ignite-ddl exited with status {code}")
        self.code = code


def run_job(config: dict[str, Any]) -> int:
    """What a job runs, on every task: ``ignite-ddl train`` with ``config``; 0, or :class:`JobExit` with the
    status."""
    from ignite_ddl.launcher.scratch import drop_inherited
    from ignite_ddl.trainer.run import train_command

    drop_inherited()  # the sweep's scratch folder is not this node's, and goes when the sweep ends
    code = run_command(lambda: train_command(TrainConfig.from_dict(config)))
    if code != 0:
        raise JobExit(code)
    return code


def _submit(
    folder: Path, name: str, runs: list[tuple[str, TrainConfig]], options: SlurmOptions, timeout_s: float
) -> dict[str, str]:
    """Submit ``(key, config)`` runs, one job array per distinct set of resources; {key: job id}."""
    # One array per set of resources: the resources as a hashable key, the runs that need them.
    groups: dict[tuple[tuple[str, Any], ...], list[tuple[str, TrainConfig]]] = {}
    for key, config in runs:
        groups.setdefault(tuple(sorted(job_resources(config, options, timeout_s).items())), []).append((key, config))
    submitted: dict[str, str] = {}
    for resources, group in groups.items():
        executor = _executor_without_warning(folder)
        executor.update_parameters(job_name=f"ignite-ddl-{name}", array_parallelism=len(group), **dict(resources))
        jobs = executor.map_array(run_job, [job_config(config) for _, config in group])
        submitted.update({key: job.job_id for (key, _), job in zip(group, jobs)})
    return submitted


def _executor_without_warning(folder: Path) -> Any:
    """submitit's SLURM executor, whose jobs SLURM sends no warning signal before their time limit, and whose srun
    ends a job's other ranks when one fails (:data:`SRUN_ARGS`).

    submitit always asks for one (``--signal=USR2@90``) so that a job can checkpoint and be requeued. A measurement
    restarted is not the same run: the limit itself ends the job, recorded as TIMEOUT. And SLURM sends that signal
    up to a minute early, at its next check: with a limit under two minutes it can land while the job's Python is
    still starting, before any handler could ignore it, and the job fails on its own instead of timing out."""
    import submitit

    class Executor(submitit.SlurmExecutor):
        def _make_submission_file_text(self, command: str, uid: str) -> str:
            script = super()._make_submission_file_text(command, uid)
            return "\n".join(line for line in script.splitlines() if not line.startswith("#SBATCH --signal=")) + "\n"

    executor = Executor(folder=folder)
    executor.update_parameters(srun_args=list(SRUN_ARGS))
    return executor


@dataclass(frozen=True)
class JobState:
    """A job as SLURM reports it: state (``RUNNING``, ``FAILED`` ...), reason, exit code, run time in seconds."""

    state: str
    reason: str | None = None
    exit_code: str | None = None
    run_time_s: float | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def never_runs(self) -> bool:
        """Pending for a reason waiting cannot fix (:data:`NEVER_RUNS`)."""
        return self.state == "PENDING" and never_runs(self.reason)

    def describe(self, job_id: str) -> str:
        if self.never_runs:
            return f"SLURM job {job_id} can never run as submitted (reason {self.reason}): cancelled"
        reason = f", reason {self.reason}" if self.reason else ""
        code = f", exit code {self.exit_code}" if self.exit_code else ""
        return f"SLURM job {job_id} {self.state}{reason}{code}"


class NoAnswer(Exception):
    """SLURM's controller did not answer (busy, restarting, unreachable): ask again at the next poll."""


def _job_state(job_id: str) -> JobState | None:
    """What SLURM says of ``job_id``: scontrol while the controller remembers it, sacct after that; None if
    neither knows it. Raises :class:`NoAnswer` when the controller does not answer: a job is not taken for lost
    because its controller was busy for a moment."""
    try:
        shown = subprocess.run(
            ["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        raise NoAnswer(f"scontrol show job {job_id}: no answer within 60 s") from None
    if shown.returncode == 0 and shown.stdout.strip():
        fields = dict(re.findall(r"(\w+)=(\S*)", shown.stdout))
        state, reason = fields.get("JobState", "UNKNOWN"), fields.get("Reason")
        return JobState(
            state, None if reason == "None" else reason, fields.get("ExitCode"), _seconds(fields.get("RunTime"))
        )
    if "Invalid job id" not in shown.stderr + shown.stdout:
        # a socket timeout, "Unable to contact slurm controller", a restart in progress ...
        raise NoAnswer(f"scontrol show job {job_id}: {_first_line(shown.stderr + shown.stdout)}")
    try:
        accounted = subprocess.run(
            ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode,Elapsed"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = accounted.stdout.strip().splitlines()[0] if accounted.returncode == 0 and accounted.stdout.strip() else ""
    if not line:
        return None
    state, code, elapsed = (line.split("|") + ["", ""])[:3]
    # sacct writes "CANCELLED by 1000": the state is the first word
    return JobState(state.split()[0] if state else "UNKNOWN", None, code or None, _seconds(elapsed))


def _seconds(text: str | None) -> float | None:
    """SLURM's ``[days-]hours:minutes:seconds`` (or ``minutes:seconds``) as seconds."""
    if not text:
        return None
    days, _, clock = text.rpartition("-")
    try:
        parts = [float(p) for p in clock.split(":")]
        return (int(days) if days else 0) * 86400 + sum(p * 60**i for i, p in enumerate(reversed(parts)))
    except ValueError:
        return None


@dataclass
class Outcome:
    """A finished job: the exit status its run returned (None: it never returned one), and SLURM's word on it."""

    job_id: str
    exit_code: int | None
    slurm: JobState | None
    console: str | None  # what rank 0 printed (stdout and stderr)


def _job_outcome(folder: Path, job_id: str) -> Outcome | None:
    """The outcome of ``job_id`` once it has ended (None while it is pending or running)."""
    import submitit

    job: Any = submitit.SlurmJob(folder=folder, job_id=job_id)
    try:
        state = _job_state(job_id)
    except NoAnswer:
        return None  # asked again at the next poll
    if state is not None and state.never_runs:
        # Pending forever otherwise: cancel it, and record it now with SLURM's reason.
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # recorded either way
            subprocess.run(["scancel", job_id], capture_output=True, timeout=60)
        return Outcome(job_id, None, state, None)
    returned = job.paths.result_pickle.exists()
    if not returned and state is not None and not state.ended:
        return None
    exit_code = None
    if returned:
        if state is not None and not state.ended:  # the function returned: its task is finishing
            return None
        outcome, value = submitit.core.utils.pickle_load(job.paths.result_pickle)
        exit_code = value if outcome == "success" and isinstance(value, int) else _exit_status(str(value))
    console = "".join(_read(path) for path in (job.paths.stdout, job.paths.stderr)) or None
    return Outcome(job_id, exit_code, state, console)


def _exit_status(trace: str) -> int:
    """The status a failed job's run exited with, from the traceback submitit kept (1 for any other error)."""
    found = re.findall(r"JobExit: ignite-ddl exited with status (-?\d+)", trace)
    return int(found[-1]) if found else 1


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "no answer"


def _load_jobs(out: Path) -> dict[str, str]:
    """{run key: job id} of every job this sweep has submitted."""
    path = out / JOBS_FILE
    return dict(read_json(path)) if path.exists() else {}


def _save_jobs(out: Path, jobs: Mapping[str, str]) -> None:
    write_json(out / JOBS_FILE, dict(jobs))


class SlurmExecutor:
    """Runs as SLURM jobs: submits what the sweep has not submitted yet, waits for every job and records each as it
    ends. Stopping the sweep leaves the jobs running: ``--resume`` waits for them."""

    def __init__(self, out: Path, name: str, options: SlurmOptions, timeout_s: float, threshold: float):
        self.out, self.name, self.options = out, name, options
        self.timeout_s, self.threshold = timeout_s, threshold

    def check(self) -> None:
        _check_cluster(self.options)

    def submit(self, runs: Sequence[Run], progress: Callable[[str], None]) -> None:
        """Submit the runs not submitted yet (a resumed sweep finds its jobs in ``slurm_jobs.json``); returns at
        once. A search keeps several configurations in flight this way (:mod:`ignite_ddl.sweep.search`)."""
        jobs = _load_jobs(self.out)
        new = [run for run in runs if run.key not in jobs]
        if new:
            for run in new:
                Path(run.config.output_dir).mkdir(parents=True, exist_ok=True)
            configs = [(run.key, run.config) for run in new]
            submitted = _submit(self.out / "slurm", self.name, configs, self.options, self.timeout_s)
            jobs.update(submitted)
            _save_jobs(self.out, jobs)  # before waiting: a stopped sweep finds its jobs again
            progress(f"submitted {len(submitted)} SLURM job(s): {', '.join(submitted[run.key] for run in new)}")
        if len(runs) > len(new):
            progress(f"waiting for {len(runs) - len(new)} SLURM job(s) submitted before")

    def ended(self, runs: Sequence[Run]) -> list[tuple[RunRecord, Run]]:
        """The record of each of ``runs`` (submitted) whose job has ended, asked of SLURM once; returns at once."""
        jobs = _load_jobs(self.out)
        found = []
        for run in runs:
            outcome = _job_outcome(self.out / "slurm", jobs[run.key])
            if outcome is not None:
                found.append((_slurm_record(run, outcome, self.threshold), run))
        return found

    def execute(self, runs: Sequence[Run], recorded: Recorded, progress: Progress, where: Where) -> None:
        self.submit(runs, progress)
        waiting, number = list(runs), 0
        try:
            while waiting:
                for record, run in self.ended(waiting):
                    number += 1
                    waiting.remove(run)
                    recorded(record, run, number)
                if waiting:
                    time.sleep(self.options.poll_s)
        except KeyboardInterrupt:
            progress("the sweep stopped; its SLURM jobs go on (scancel to stop them): --resume waits for them")
            raise


def _slurm_record(run: Run, outcome: Outcome, threshold: float) -> RunRecord:
    """The record of a run that ran as a SLURM job: as a local run's, with SLURM's state and reason."""
    run_dir = Path(run.config.output_dir)
    if outcome.console is not None and run_dir.is_dir():
        write_bytes(run_dir / "console.log", outcome.console.encode())
    state = outcome.slurm
    elapsed = state.run_time_s if state is not None and state.run_time_s is not None else 0.0
    record = new_record(run, elapsed, outcome.exit_code)
    record["slurm"] = {
        "job_id": outcome.job_id,
        "state": state.state if state else None,
        "reason": state.reason if state else None,
        "exit_code": state.exit_code if state else None,
    }
    # SLURM stopped the job (time limit, scancel, a lost node ...) whatever the run managed to return: its state
    # says why. A job that ran its course is COMPLETED, or FAILED when the run itself failed.
    stopped = state is not None and state.state not in ("COMPLETED", "FAILED")
    if outcome.exit_code is None or stopped:
        said = state.describe(outcome.job_id) if state else f"SLURM job {outcome.job_id} is unknown to SLURM"
        status = "timeout" if state is not None and state.state == "TIMEOUT" else "failed"
        last = last_error(run_dir / "console.log")
        record.update({"status": status, "error": said + (f": {last}" if last else "")})
        return finish_record(record, threshold)
    record = finish_record(record, threshold)
    if record["status"] != "completed" and state is not None:
        record["error"] = f"{record['error']} ({state.describe(outcome.job_id)})"
    return record
