"""The schema of the files a sweep writes: one :class:`RunRecord` per run appended to ``results.jsonl`` (holding
the run's :class:`~.schema.Summary`), :class:`SweepMeta` in ``sweep.json`` (with the step-time model,
:class:`StepModel`) and the memory plan (:class:`MemoryPlan`, ``plan/plan.json``). Kept apart from :mod:`.schema`,
the records a run writes, because they describe the sweep's bookkeeping rather than what a rank measured; documented
and checked the same way (:mod:`.schema_doc`, :mod:`.validation`).

Example:
    >>> "summary" in RunRecord.__annotations__ and "sessions" in SweepMeta.__annotations__
    True
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from typing_extensions import NotRequired  # typing's from Python 3.11

from ignite_ddl.core.schema import Essential, Summary

__all__ = [
    "MemoryPlan",
    "MemoryPrediction",
    "PlannedConfiguration",
    "PredictedStep",
    "RunRecord",
    "SlurmJobInfo",
    "StepLink",
    "StepModel",
    "SweepAdaptive",
    "SweepMeta",
    "SweepSession",
    "SweepStop",
]


class SlurmJobInfo(TypedDict):
    job_id: Annotated[str, "the job's id (`<array>_<index>` in a job array)"]
    state: Annotated[str | None, "SLURM's last state of the job (`COMPLETED`, `FAILED`, `TIMEOUT` ...; null: unknown)"]
    reason: Annotated[str | None, "SLURM's reason for that state (null: none given)"]
    exit_code: Annotated[str | None, "SLURM's `exit status:signal` of the job"]


class MemoryPrediction(TypedDict):
    peak_bytes: Annotated[int | None, "predicted peak memory per rank, bytes (null: cannot predict, see `problem`)"]
    parts: Annotated[
        dict[str, int],
        "its parts, bytes: params, grads, optimizer, activations (one micro-batch's, with the backward's "
        "temporaries), heap (what glibc's heap keeps beyond the tensors, a CPU rank's step replayed through it), "
        "buckets (DDP), checkpoint (FSDP rank 0's gathered full state while it saves), data (the "
        "datasets a rank holds), runtime (measured by a tiny model's run)",
    ]
    problem: Annotated[str | None, "`cannot predict: <why>` where the training step could not be traced"]
    unpredicted: Annotated[list[str], "what the figure leaves out (e.g. --compile's own memory)"]
    method: Annotated[str, "the tracker that followed the step on fake tensors (MemTracker, FSDPMemTracker)"]


class PlannedConfiguration(TypedDict):
    index: Annotated[int, "the configuration's position in the grid"]
    grid: Annotated[dict[str, Any], "its grid values"]
    prediction: Annotated[MemoryPrediction, "its predicted peak memory per rank"]
    unfit: Annotated[str | None, "`predicted not to fit: 9.4 GiB > 8 GiB` (null: fits, or no limit)"]


class MemoryPlan(TypedDict):
    memory_limit_mb: Annotated[float | None, "the spec's memory_limit_mb"]
    configurations: Annotated[
        list[PlannedConfiguration], "every configuration of the grid, launched or not (but those refused before it)"
    ]


class RunRecord(TypedDict):
    key: Annotated[str, "the run's identity across restarts: a digest of its options and `-r<repeat>`", Essential()]
    index: Annotated[int, "the configuration's position in the grid (`cfg<index>`)", Essential()]
    repeat: Annotated[int, "which repeat of the configuration (0-based)", Essential()]
    attempt: Annotated[int, "0, or the re-run number of a repeat re-run because it was contended"]
    position: Annotated[int, "the run's place in the sweep's run order (-1: a configuration refused before the sweep)"]
    grid: Annotated[dict[str, Any], "this configuration's grid values", Essential()]
    config: Annotated[dict[str, Any], "the run's full `TrainConfig`", Essential()]
    run_dir: Annotated[str, "the run's output directory (empty: a configuration refused before the sweep, never run)"]
    elapsed_s: Annotated[float, "the run's wall time seen by the sweep: start-up, training, evaluation, writing"]
    exit_code: Annotated[
        int | None, "the run's exit status (null: timed out, or a configuration refused before the sweep: never run)"
    ]
    status: Annotated[
        str,
        "`completed`, `failed`, `out_of_memory` (a rank's allocation failed, or it was killed near its memory "
        "limit), `refused` (by the run's checks as it started, exit status 2; or, exit status null, the "
        "configuration was refused before the sweep started: one record, never run), `timeout` or `interrupted` "
        "(stopped with the sweep: run again on resume)",
        Essential(),
    ]
    error: Annotated[str | None, "why the run did not complete"]
    contended: Annotated[bool, "other processes used more than the sweep's `contention_threshold` of the machine"]
    summary: Annotated[Summary | None, "the run's summary.json (null unless completed)"]
    slurm: NotRequired[Annotated[SlurmJobInfo, "the run's SLURM job (only with `executor: slurm`)"]]
    prediction: NotRequired[
        Annotated[MemoryPrediction, "its configuration's predicted peak memory per rank (only with `predict`)"]
    ]


class SweepStop(TypedDict):
    reason: Annotated[str, "one line: what was seen, e.g. the range of CPU shares other processes used"]
    runs_left: Annotated[int, "runs of the sweep (or of its re-runs) that were not started"]


class SweepAdaptive(TypedDict):
    rounds: Annotated[int, "rounds run so far (the most repeats any configuration has)"]
    outcome: Annotated[
        dict[str, str],
        "per workload: separated (a best is named), equivalent (the contenders are within the margin), "
        "out_of_reach (stopped undecided: the rounds left could not settle it at the spread measured), "
        "max_repeats or budget (cut short undecided), undecided (more rounds were due)",
    ]


class SweepSession(TypedDict):
    started: Annotated[str, "when the sweep (or a resumed part of it) started, ISO 8601"]
    wall_s: Annotated[float, "wall time from its start to its last recorded run"]
    runs: Annotated[int, "runs it recorded"]
    stopped: NotRequired[
        Annotated[
            SweepStop,
            "why the sweep stopped before its last run (other processes kept the machine busy); absent otherwise",
        ]
    ]
    adaptive: NotRequired[Annotated[SweepAdaptive, "adaptive repeats (repeats: auto): where the comparison stands"]]
    pid: NotRequired[Annotated[int, "the process that ran it"]]
    scratch: NotRequired[
        Annotated[
            list[str],
            "its temporary folders (its scratch folder, its own multiprocessing folder): removed as it ends; where a "
            "kill left them, the next `--resume` removes them",
        ]
    ]


class StepLink(TypedDict):
    alpha_s: Annotated[float, "the latency of one all-reduce on this machine, seconds (fitted to 2 gloo processes)"]
    beta_Bps: Annotated[float, "its bandwidth, bytes/s"]
    busy_factor: NotRequired[
        Annotated[
            float,
            "how many times its time at the link a collective costs a step of CPU ranks sharing the cores "
            "(DDP's step less the step without it, measured on 2 gloo processes; absent: not measured)",
        ]
    ]
    fsdp_busy_factor: NotRequired[
        Annotated[
            float,
            "the same for the bytes of FSDP's gathers and reduce-scatters, at the link's bandwidth (an MLP of 4 "
            "units' FSDP2 step less its plain step and its collectives' own cost; absent: not measured)",
        ]
    ]
    fsdp_large_busy_factor: NotRequired[
        Annotated[
            float,
            "the same for a unit above glibc's largest mmap threshold, 32 MiB (one such unit's FSDP2 step less its "
            "plain step; absent: not measured)",
        ]
    ]
    fsdp_collective_s: NotRequired[
        Annotated[
            float,
            "seconds each FSDP2 gather or reduce-scatter costs whatever its bytes, on CPU ranks sharing the cores "
            "(a stack of 32 small units' FSDP2 step less its plain step; absent: not measured)",
        ]
    ]
    fsdp_optimizer_per_tensor_s: NotRequired[
        Annotated[
            float,
            "seconds FSDP2's optimizer step takes per parameter tensor beyond its 1/N share of the plain step's, on "
            "CPU ranks sharing the cores (a stack of small layers; absent: not measured)",
        ]
    ]


class PredictedStep(TypedDict):
    step_s: Annotated[float | None, "the predicted seconds per optimizer step (null: not predicted, `basis` says why)"]
    low_s: Annotated[float | None, "the faster end of its interval, seconds"]
    high_s: Annotated[float | None, "the slower end of its interval, seconds"]
    compute_s: Annotated[float | None, "its compute: forward, backward and optimizer step, from the twin's"]
    comm_s: Annotated[float | None, "its communication and DDP's own bucket work left exposed"]
    basis: Annotated[str, "the twin it came from (`one-process twin cfg000`), or why there is no prediction"]


class StepModel(TypedDict):
    link: Annotated[StepLink | None, "this machine's all-reduce (null: not measured, or nothing needed it)"]
    configurations: Annotated[
        dict[str, PredictedStep], "per configuration of several processes, by its index (as text), its prediction"
    ]


class SweepMeta(TypedDict):
    spec: Annotated[dict[str, Any], "the sweep's spec, as run"]
    versions: Annotated[dict[str, str], "software versions of the sweep's process"]
    host: Annotated[dict[str, Any], "the machine"]
    sessions: Annotated[list[SweepSession], "one entry per start of the sweep (resumes add one)"]
    plan: NotRequired[Annotated[MemoryPlan, "every configuration's predicted peak memory (only with `predict`)"]]
    step_model: NotRequired[
        Annotated[
            StepModel,
            "the step-time model fitted after the first round's one-process runs (only with `predict`)",
        ]
    ]
