"""SLURM for real: srun and sbatch runs, and sweeps submitted through submitit, on a running cluster.

``.ci/slurm`` starts a single-node cluster (munge, slurmctld, slurmd) and runs this file with
``IGNITE_DDL_SLURM_REQUIRED=1``, which turns a missing cluster into a failure. Elsewhere the cluster tests skip,
saying why; the option checks at the top run everywhere.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import QUICK, check_ok, load_summary, run, run_cli

from ignite_ddl.cli import build_parser, main
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import option_specs
from ignite_ddl.core.results import read_results
from ignite_ddl.launcher.settings import plan_launch
from ignite_ddl.sweep import expand, load_spec
from ignite_ddl.sweep.slurm import (
    JobState,
    NoAnswer,
    _executor_without_warning,
    _job_outcome,
    _job_state,
    _seconds,
    job_config,
    job_resources,
    never_runs,
)
from ignite_ddl.sweep.spec import SlurmOptions

pytestmark = [pytest.mark.slurm]

REPO = Path(__file__).parents[1]
TINY = {"dataset": "synthetic", "train_size": 256, "val_size": 64, "batch_size": 64, "epochs": 1}


# -- options: no cluster needed


def test_job_resources_follow_the_configuration():
    options = SlurmOptions(partition="gpu", cpus_per_task=8)
    two_nodes = TrainConfig(nproc_per_node=4, nnodes=2, backend="nccl")
    assert job_resources(two_nodes, options, timeout_s=90) == {
        "nodes": 2,
        "ntasks_per_node": 4,
        "time": 2,
        "partition": "gpu",
        "gpus_per_node": 4,
        "cpus_per_task": 8,
    }
    assert job_resources(TrainConfig(), SlurmOptions(time_limit_min=7), 600)["time"] == 7
    # the ranks are SLURM's tasks: process counts and rendezvous are not the job's to set
    config = job_config(TrainConfig(nproc_per_node=4, nnodes=2, node_rank=0, master_addr="n1", master_port=29500))
    assert config["nnodes"] == 1
    assert all(config[k] is None for k in ("nproc_per_node", "node_rank", "master_addr", "master_port"))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"partition": "a b"}, "partition name"),
        ({"cpus_per_task": 0}, "cpus_per_task must be >= 1"),
        ({"gpus_per_node": True}, "gpus_per_node expects int"),
        ({"queue": "x"}, "unknown option"),
        ({"poll_s": -1}, "poll_s"),
        ({"poll_s": float("nan")}, "poll_s must be a finite number, got nan"),
        ({"time_limit_min": float("inf")}, "time_limit_min expects int"),
        (["gpu"], "must be a mapping"),
    ],
)
def test_bad_slurm_options_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        SlurmOptions.from_dict(options)


def test_slurm_times_are_read():
    assert _seconds("1-02:03:04") == 93784 and _seconds("05:06") == 306 and _seconds("") is None
    state = JobState("TIMEOUT", "TimeLimit", "0:15")
    assert state.ended and state.describe("7_1") == "SLURM job 7_1 TIMEOUT, reason TimeLimit, exit code 0:15"


def test_a_nan_in_the_slurm_options_is_refused_before_submitting(tmp_path, capsys):
    spec = _write_spec(
        tmp_path / "spec.yaml", base=TINY, grid={"seed": [1]}, executor="slurm", slurm={"poll_s": math.nan}
    )
    for argv in (
        [spec],
        ["--executor", "slurm", "--grid", "seed=1", "--poll-s", "nan"],
        ["--executor", "slurm", "--grid", "seed=1", "--poll-s", "-inf"],
    ):
        assert main(["sweep", *argv, "--output-dir", str(tmp_path / "s")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "poll_s must be a finite number" in err, err
    assert not (tmp_path / "s").exists()  # nothing submitted, nothing written


def test_a_job_slurm_says_can_never_run_is_told_apart():
    for reason in ("PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "QOSMaxNodePerJobLimit"):
        state = JobState("PENDING", reason)
        assert (
            state.never_runs
            and state.describe("7") == f"SLURM job 7 can never run as submitted (reason {reason}): cancelled"
        )
    for reason in ("Resources", "Priority", "QOSGrpNodeLimit", "AssocGrpCpuLimit", "ReqNodeNotAvail", None):
        assert not JobState("PENDING", reason).never_runs and not never_runs(reason)
    assert not JobState("RUNNING", "PartitionNodeLimit").never_runs


def _batch_script(script: Path, environ: dict[str, str], *args: str) -> tuple[dict[str, str], list[str]]:
    """A batch script's ``#SBATCH --key=value`` options and its srun line's command, its variables expanded as the
    job's shell would expand them from ``environ`` and ``"$@"`` as the script's ``args``."""
    text = script.read_text()
    options = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)$", text, re.M))
    line = next(line for line in text.replace("\\\n", " ").splitlines() if line.startswith("srun "))
    line = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: environ.get(m.group(1), m.group(2)), line)
    words = [re.sub(r"\$(\w+)", lambda m: environ[m.group(1)], word) for word in shlex.split(line)]
    command = next(i for i, word in enumerate(words) if i and not word.startswith("-"))  # past srun's own options
    assert "--kill-on-bad-exit=1" in words[1:command], "a failing rank must end the job's others"
    return options, [expanded for word in words[command:] for expanded in (args if word == "$@" else [word])]


def test_the_gpu_batch_script_starts_one_nccl_rank_per_gpu():
    """experiments/slurm/train-gpus.sbatch, which no GPU cluster has run yet: valid bash, one task per GPU with every
    GPU of its node visible, and an srun line the launcher accepts as one rank of a 2-node nccl job, or refuses in
    one line where SLURM binds a single GPU to each task (Ignite gives local rank r the GPU cuda:r)."""
    script = REPO / "experiments/slurm/train-gpus.sbatch"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    options, command = _batch_script(script, {"SLURM_JOB_ID": "4242"}, "--strategy", "fsdp")
    assert options["ntasks-per-node"] == options["gpus-per-node"] == "8" and "gpus-per-task" not in options
    assert command[:4] == ["python", "-m", "ignite_ddl", "train"] and "--nproc-per-node" not in command
    args = build_parser(command="train").parse_args(command[3:])
    config = TrainConfig(**{name: getattr(args, name) for name in option_specs(TrainConfig)})
    assert (config.backend, config.output_dir, config.strategy) == ("nccl", "runs/gpus-4242", "fsdp")
    # rank 11 of a job of 2 nodes x 8 tasks, as srun starts it: node 1's local rank 3
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "11", "SLURM_NTASKS": "16", "SLURM_NTASKS_PER_NODE": "8"}
    slurm |= {"SLURM_NODEID": "1", "SLURM_LOCALID": "3"}
    plan = plan_launch(config, cuda_devices=8, environ=slurm)
    assert (plan.mode, plan.launcher, plan.backend, plan.world_size, plan.nnodes, plan.node_rank) == (
        "env", "slurm", "nccl", 16, 2, 1
    )  # fmt: skip
    with pytest.raises(ConfigError, match="nccl runs one process per GPU: 8 processes asked for, 1 GPU"):
        plan_launch(config, cuda_devices=1, environ=slurm)


def test_no_slurm_client_is_a_refusal(tmp_path):
    # only the interpreter's own folder on PATH: no sbatch, whatever this machine has installed
    result = run_cli(
        "sweep",
        "--executor",
        "slurm",
        "--grid",
        "batch_size=32,64",
        "--output-dir",
        str(tmp_path / "s"),
        env={"PATH": str(Path(sys.executable).parent)},
    )
    assert result.returncode == 2
    message = "the slurm executor submits with SLURM's sbatch, which is not on PATH here"
    assert result.stderr.strip() == f"ignite-ddl: error: {message}"
    assert not (tmp_path / "s").exists()  # refused before anything was written


# -- the cluster


def _cluster_problem() -> str | None:
    if shutil.which("scontrol") is None:
        return "SLURM's commands are not installed (.ci/slurm installs and starts a cluster)"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "scontrol ping did not answer within 30 s"
    if ping.returncode != 0 or "UP" not in ping.stdout:
        return "no SLURM controller answers 'scontrol ping' here; .ci/slurm starts one"
    return None


@pytest.fixture(scope="module")
def cluster():
    problem = _cluster_problem()
    if problem is not None:
        if os.environ.get("IGNITE_DDL_SLURM_REQUIRED") == "1":
            pytest.fail(f"the SLURM tests must run here: {problem}")
        pytest.skip(problem)


def _write_spec(path: Path, **spec) -> str:
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def _slurm_spec(tmp_path: Path, name: str, grid: dict, base: dict = TINY, **slurm) -> str:
    """tmp_path/spec.yaml: the sweep ``name`` of ``base`` over ``grid`` on SLURM, polled every second and with any
    other SLURM options in ``slurm``; its path."""
    return _write_spec(
        tmp_path / "spec.yaml", name=name, base=base, grid=grid, executor="slurm", slurm={"poll_s": 1, **slurm}
    )


def _sweep_on_slurm(
    tmp_path: Path, name: str, grid: dict, *, timeout: float, base: dict = TINY, **slurm
) -> subprocess.CompletedProcess:
    """The sweep of :func:`_slurm_spec` run into tmp_path/out, without a report."""
    spec = _slurm_spec(tmp_path, name, grid, base, **slurm)
    return run_cli("sweep", spec, "--output-dir", str(tmp_path / "out"), "--no-report", timeout=timeout)


def _jobs(out: Path) -> dict:
    return json.loads((out / "slurm_jobs.json").read_text())


@pytest.mark.slow
@pytest.mark.distributed
def test_srun_runs_two_ranks_in_env_mode(cluster, tmp_path):
    result = run(
        [
            "srun",
            "-N1",
            "-n2",
            "--kill-on-bad-exit=1",  # a rank that fails ends the other: the test fails with its error, not a hang
            sys.executable,
            "-m",
            "ignite_ddl",
            "train",
            *QUICK,
            "--output-dir",
            str(tmp_path / "run"),
        ],
        timeout=300,
    )
    check_ok(result)
    summary = load_summary(tmp_path / "run", 2)
    assert (summary["world_size"], summary["launch_mode"], summary["launcher"]) == (2, "env", "slurm")
    assert summary["backend"] == "gloo" and len(summary["steps"]["ranks"]) == 2
    assert result.stdout.count("-> ") == 1  # the final line once, from rank 0


def _batch_job(tmp_path: Path, script: Path, *args: str, export: str = "ALL", timeout: float) -> JobState:
    """``sbatch script args`` (output to tmp_path/job.out, environment ``export``), waited for; SLURM's end state.

    A job still queued or running at ``timeout`` is cancelled, and the test fails with what SLURM and the job said:
    the job's state and reason, its output so far, the tail of slurmd's log.
    """
    out = tmp_path / "job.out"
    sbatch = ["sbatch", "--parsable", f"--output={out}", f"--chdir={tmp_path}", f"--export={export}"]
    submitted = run([*sbatch, str(script), *args], timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = _job_state(job)
        except NoAnswer:  # a busy controller: ask again
            state = None
        if state is not None and state.ended:
            return state
        time.sleep(1)
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    subprocess.run(["scancel", job], check=False)
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    log = re.search(r"SlurmdLogFile\s*=\s*(\S+)", config)
    slurmd = Path(log.group(1)).read_text().splitlines()[-30:] if log and Path(log.group(1)).is_file() else []
    raise AssertionError(
        f"SLURM job {job} did not end within {timeout:g} s: cancelled\n{shown}\n"
        f"--- job output\n{out.read_text() if out.exists() else '(none)'}\n--- slurmd log\n" + "\n".join(slurmd)
    )


@pytest.mark.slow
@pytest.mark.distributed
def test_sbatch_example_runs_to_completion(cluster, tmp_path):
    state = _batch_job(
        tmp_path,
        REPO / "experiments/slurm/train.sbatch",
        *("--train-size", "256", "--val-size", "64", "--batch-size", "32"),
        # bounds the rendezvous and every collective: a rank that hangs ends the job, whose output says why
        *("--timeout", "120"),
        export=f"ALL,OUTPUT_DIR={tmp_path / 'run'}",
        timeout=300,
    )
    assert (state.state, state.exit_code) == ("COMPLETED", "0:0"), (state, (tmp_path / "job.out").read_text())
    summary = load_summary(tmp_path / "run", 2)
    assert (summary["world_size"], summary["launcher"], summary["status"]) == (2, "slurm", "completed")


@pytest.mark.slow
@pytest.mark.distributed
def test_a_sweep_on_slurm_is_recorded_completely(cluster, tmp_path):
    result = _sweep_on_slurm(tmp_path, "onslurm", {"nproc_per_node": [1, 2]}, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    records = read_results(tmp_path / "out/results.jsonl")
    assert sorted(r["grid"]["nproc_per_node"] for r in records) == [1, 2]
    jobs = _jobs(tmp_path / "out")
    for record in records:
        assert record["status"] == "completed" and record["summary"]["samples_per_s"] > 0
        assert record["slurm"]["state"] == "COMPLETED" and record["slurm"]["job_id"] == jobs[record["key"]]
        summary = record["summary"]
        world = record["grid"]["nproc_per_node"]
        assert summary["world_size"] == world
        assert summary["launch_mode"] == ("env" if world == 2 else "serial")  # one task per rank, srun-launched
    # one shape of job per process count: two job arrays
    assert len({job_id.split("_")[0] for job_id in jobs.values()}) == 2
    # the report is the same as a local sweep's
    check_ok(run_cli("report", str(tmp_path / "out")))
    assert (tmp_path / "out/report.md").is_file()


@pytest.mark.slow
@pytest.mark.distributed
def test_a_users_workload_runs_in_slurm_jobs(cluster, tmp_path):
    """examples/own_workload swept on SLURM with 2 tasks a job: each rank the job starts imports the user's module
    (found through workload_dir, not the job's working folder) and trains it, on 1 and 2 processes."""
    example = REPO / "examples" / "own_workload"
    base = {"epochs": 1, "max_iters": 6, "batch_size": 32, "warmup_iters": 2, "workload_dir": str(example)}
    spec = _write_spec(
        tmp_path / "spec.yaml",
        name="own",
        workload="bench:make",
        base=base,
        grid={"nproc_per_node": [1, 2], "workload_args.width": [16]},
        executor="slurm",
        slurm={"poll_s": 1},
    )
    result = run_cli("sweep", spec, "--output-dir", str(tmp_path / "out"), "--no-report", cwd=tmp_path, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    records = sorted(read_results(tmp_path / "out/results.jsonl"), key=lambda r: r["grid"]["nproc_per_node"])
    assert [(r["status"], r["slurm"]["state"]) for r in records] == [("completed", "COMPLETED")] * 2
    for record, world in zip(records, (1, 2)):
        summary = record["summary"]
        assert summary["world_size"] == world and summary["workload"]["file"] == str(example / "bench.py")
        assert summary["workload"]["args"] == {"width": 16} and summary["samples_per_s"] > 0


@pytest.mark.slow
@pytest.mark.distributed
def test_a_failing_job_is_recorded_with_slurms_reason(cluster, tmp_path):
    # inception_v3 cannot take 32x32 images: its run fails on rank 0, and the job with it
    result = _sweep_on_slurm(tmp_path, "failing", {"model": ["toy", "inception_v3"]}, timeout=400)
    assert result.returncode == 1, result.stdout + result.stderr
    ok, failed = sorted(read_results(tmp_path / "out/results.jsonl"), key=lambda r: r["index"])
    assert ok["status"] == "completed" and ok["slurm"]["state"] == "COMPLETED"
    assert failed["status"] == "failed" and failed["exit_code"] == 1 and failed["summary"] is None
    assert (failed["slurm"]["state"], failed["slurm"]["reason"]) == ("FAILED", "NonZeroExitCode")
    assert failed["error"].startswith("rank 0 failed: RuntimeError")
    job = failed["slurm"]["job_id"]
    assert failed["error"].endswith(f"(SLURM job {job} FAILED, reason NonZeroExitCode, exit code 1:0)")
    assert "Traceback" in (Path(failed["run_dir"]) / "console.log").read_text()  # the job's output, kept


def test_a_controller_that_does_not_answer_is_asked_again(cluster, tmp_path, monkeypatch):
    # the cluster's own configuration with the controller on a port nobody listens on: scontrol cannot reach it
    # (what a busy or restarting controller looks like), which is no news of the job, not "SLURM forgot it"
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")).read_text()
    dead = tmp_path / "slurm.conf"
    dead.write_text(re.sub(r"(?m)^SlurmctldPort=\d+", "SlurmctldPort=1", conf))
    monkeypatch.setenv("SLURM_CONF", str(dead))
    with pytest.raises(NoAnswer, match="Unable to contact slurm controller"):
        _job_state("1")
    assert _job_outcome(tmp_path, "1") is None  # still waited for


def test_jobs_ask_slurm_for_no_warning_signal(tmp_path):
    # submitit asks for USR2 90 s before the limit; SLURM may send it at the job's start, while Python is starting
    script = _executor_without_warning(tmp_path)._make_submission_file_text("python -m run", "uid")
    sbatch = [line for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert any(line.startswith("#SBATCH --output=") for line in sbatch), script  # the rest is still there
    assert not [line for line in sbatch if "--signal" in line], script
    # a rank that fails ends the job's others at once, not at a collective's timeout
    (srun,) = [line for line in script.splitlines() if line.startswith("srun ")]
    assert "--kill-on-bad-exit=1" in srun.split(), script


@pytest.mark.slow
@pytest.mark.distributed
def test_a_job_over_its_time_limit_is_recorded_as_timeout(cluster, tmp_path):
    # a run of thousands of epochs against a 1-minute limit: SLURM stops it (within its 30 s check period)
    result = _sweep_on_slurm(
        tmp_path, "overtime", {"seed": [0]}, timeout=400, base={**TINY, "epochs": 100_000}, time_limit_min=1
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (record,) = read_results(tmp_path / "out/results.jsonl")
    job = record["slurm"]["job_id"]
    said = {key: record[key] for key in ("status", "error", "slurm", "exit_code", "elapsed_s")}
    assert record["status"] == "timeout" and record["summary"] is None, said
    assert record["slurm"]["state"] == "TIMEOUT" and record["error"].startswith(f"SLURM job {job} TIMEOUT")
    assert record["slurm"]["reason"] == "TimeLimit"  # SLURM's own word: the job reached its limit


@pytest.mark.slow
@pytest.mark.distributed
def test_resume_after_a_killed_sweep_resubmits_nothing(cluster, tmp_path):
    out = tmp_path / "out"
    # the second run lasts long enough to be cancelled while the first completes
    spec = _slurm_spec(tmp_path, "killed", {"epochs": [1, 500]})
    sweep = subprocess.Popen(
        [sys.executable, "-m", "ignite_ddl", "sweep", spec, "--output-dir", str(out), "--no-report"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "slurm_jobs.json").exists():
            assert sweep.poll() is None and time.monotonic() < deadline, sweep.stdout.read() if sweep.stdout else ""
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        os.killpg(sweep.pid, signal.SIGKILL)  # the sweep dies; its jobs do not
        sweep.communicate()
    jobs = _jobs(out)
    assert len(jobs) == 2 and not read_results(out / "results.jsonl")  # killed before any job ended
    long_key = next(run.key for run in expand(load_spec(spec), out) if run.grid["epochs"] > 1)
    long_job = jobs[long_key]
    _wait_until_running(long_job)
    subprocess.run(["scancel", long_job], check=True)

    result = run_cli("sweep", spec, "--output-dir", str(out), "--resume", "--no-report", timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr  # one run was cancelled
    assert "waiting for 2 SLURM job(s) submitted before" in result.stdout and "submitted" not in result.stdout.replace(
        "submitted before", ""
    )
    assert _jobs(out) == jobs  # nothing submitted again
    records = {r["slurm"]["job_id"]: r for r in read_results(out / "results.jsonl")}
    assert set(records) == set(jobs.values())
    cancelled = records[long_job]
    assert cancelled["status"] == "failed" and cancelled["slurm"]["state"] == "CANCELLED"
    assert cancelled["error"].startswith(f"SLURM job {long_job} CANCELLED")
    assert [r["status"] for r in records.values()].count("completed") == 1

    again = run_cli("sweep", spec, "--output-dir", str(out), "--resume", "--no-report", timeout=120)
    assert "resuming: 2 of 2 runs already recorded" in again.stdout and "SLURM job" not in again.stdout
    assert _jobs(out) == jobs and len(read_results(out / "results.jsonl")) == 2


@pytest.mark.slow
@pytest.mark.distributed
def test_a_job_that_can_never_run_is_recorded_as_failed_at_once(cluster, tmp_path):
    # two nodes on the one-node partition of .ci/slurm: SLURM keeps the job pending with reason PartitionNodeLimit
    result = _sweep_on_slurm(tmp_path, "never", {"nnodes": [2]}, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    (record,) = read_results(tmp_path / "out/results.jsonl")
    job = record["slurm"]["job_id"]
    assert record["status"] == "failed" and record["summary"] is None
    # SLURM says PartitionConfig at submission ("until the partition's configuration changes"), PartitionNodeLimit
    # after its first scheduling pass: either way the job is failed at its first poll
    reason = record["slurm"]["reason"]
    assert record["slurm"]["state"] == "PENDING" and reason in ("PartitionConfig", "PartitionNodeLimit")
    assert record["error"] == f"SLURM job {job} can never run as submitted (reason {reason}): cancelled"
    shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True)
    assert "JobState=PENDING" not in shown.stdout  # cancelled, not left in the queue


def _wait_until_running(job_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True)
        if "JobState=RUNNING" in shown.stdout:
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not start within {timeout} s")


@pytest.mark.slow
@pytest.mark.distributed
def test_unknown_partition_is_refused(cluster, tmp_path):
    result = run_cli(
        "sweep",
        "--executor",
        "slurm",
        "--partition",
        "nosuch",
        "--grid",
        "batch_size=32",
        "--output-dir",
        str(tmp_path / "s"),
    )
    assert result.returncode == 2 and "SLURM has no partition 'nosuch'" in result.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
@pytest.mark.distributed
def test_a_search_on_slurm_keeps_configurations_in_flight(cluster, tmp_path):
    """search: with max_parallel 2: a second configuration is proposed and submitted before the first one's runs
    have ended (Optuna's ask and tell), the budget holds, and the search ends decided or out of budget."""
    spec = _write_spec(
        tmp_path / "spec.yaml",
        name="searched",
        base=TINY,
        grid={"batch_size": [32, 64, 128], "accumulate": [1, 2]},
        executor="slurm",
        slurm={"poll_s": 1},
        search={"sampler": "tpe", "budget_runs": 8, "seed": 0, "max_parallel": 2},
        min_repeats=2,
        max_repeats=3,
    )
    result = run_cli("sweep", spec, "--output-dir", str(tmp_path / "out"), timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    first_record = next(i for i, line in enumerate(lines) if line.startswith("[") and " trial 0]" in line)
    second_trial = next(i for i, line in enumerate(lines) if line.startswith("search: trial 1:"))
    assert second_trial < first_record  # in flight together
    records = read_results(tmp_path / "out/results.jsonl")
    assert 4 <= len(records) <= 8 and all(r["status"] == "completed" for r in records)
    state = json.loads((tmp_path / "out/search.json").read_text())
    assert state["phase"] == "done" and state["runs"] == len(records)
    assert "a search cannot prove the best" in (tmp_path / "out/report.md").read_text()
