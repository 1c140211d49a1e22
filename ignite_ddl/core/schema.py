"""The schema of the files a run writes: the records a rank measures and a run gathers, every field with its meaning.

The trainer writes :class:`RunConfig` (``config.json``) and :class:`Summary` (``summary.json``), whose parts
(step statistics, communication, memory, FLOPs, steady state, contention) are built where they are measured; the
files of a sweep, which holds one summary per run, are typed in :mod:`.sweep_records`. Every field carries its
meaning (``Annotated``): ``docs/results.md`` is generated from these types (:mod:`.schema_doc`) and records are
checked against them (:mod:`.validation`).

Example:
    >>> "samples_per_s" in Summary.__annotations__ and "contention" in Summary.__annotations__
    True
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypedDict

from typing_extensions import NotRequired  # typing's from Python 3.11

__all__ = [
    "SCHEMA_VERSION",
    "Essential",
    "Shown",
    "shown_figures",
    "BatchInfo",
    "WorkloadInfo",
    "CommReference",
    "CommWait",
    "CompileStats",
    "Contention",
    "CudaMemory",
    "DeviceInfo",
    "EpochRecord",
    "Flops",
    "FlopsRank",
    "GradScalerRecord",
    "GlobalStats",
    "HeldBytes",
    "MachinePeak",
    "Memory",
    "MemoryMax",
    "NodeContention",
    "PhaseStats",
    "BasicProfile",
    "BasicResult",
    "BasicStats",
    "HandlerRow",
    "HandlersResult",
    "ProfilerResult",
    "RankMemory",
    "RankStats",
    "RunConfig",
    "SteadyState",
    "StepStats",
    "Straggler",
    "Summary",
    "TimerProfile",
    "TimerResult",
    "TorchProfile",
    "TorchResult",
    "TraceCommCheck",
]

SCHEMA_VERSION = 3  # 3: each rank against its share of its machine's matmul peak, measured once


@dataclass(frozen=True)
class Shown:
    """Put beside a figure's meaning (``Annotated[float | None, "meaning", Shown("column")]``), it makes the report
    show the figure: the mean over a configuration's runs, in a column of the timing table headed ``column``, times
    ``scale``. Declaring a figure so is all the report needs: a new measured figure is measured (where the rank
    measures it), declared here, and shown, with no reading or table code of its own."""

    column: str
    scale: float = 1.0


@dataclass(frozen=True)
class Essential:
    """Put beside a key's meaning (``Annotated[str, "meaning", Essential()]``), it says every record of every release
    has the key: a record without it is not one. Other keys may be missing (an older release's records lack the
    newer keys); the validator (:func:`~ignite_ddl.core.validation.record_problem`) reads which are which here."""


def shown_figures(kind: Any = None) -> list[tuple[tuple[str, ...], Shown]]:
    """Every figure of ``kind`` (default: :class:`Summary`) marked :class:`Shown`, as its path of keys from the
    top (``("steps", "global", "samples_per_s")``), in declaration order; lists are not entered."""
    found: list[tuple[tuple[str, ...], Shown]] = []
    for name, hint in typing.get_type_hints(kind or Summary, include_extras=True).items():
        marks: tuple[Any, ...] = ()
        while typing.get_origin(hint) in (Annotated, NotRequired):
            if typing.get_origin(hint) is Annotated:
                marks += hint.__metadata__
            hint = typing.get_args(hint)[0]
        found += [((name,), mark) for mark in marks if isinstance(mark, Shown)]
        for inner in typing.get_args(hint) or (hint,):
            if typing.is_typeddict(inner):
                found += [((name, *path), mark) for path, mark in shown_figures(inner)]
    return found


class DeviceInfo(TypedDict):
    type: Annotated[str, "`cpu`, `cuda` or `xla`"]
    name: Annotated[str, "the device's name (CPU model, GPU name, `XLA <PJRT_DEVICE>`)"]


BatchInfo = TypedDict(
    "BatchInfo",
    {
        "requested_global": Annotated[int, "the `--batch-size` asked for (the *global* batch)"],
        "per_rank": Annotated[int, "`requested_global // world_size`, as `auto_dataloader` computes it"],
        "global": Annotated[int, "the effective global batch per optimizer step: `per_rank * world_size`"],
        "accumulate": NotRequired[Annotated[int, "micro-batches per optimizer step (`--accumulate`)"]],
        "micro": NotRequired[Annotated[int, "samples in one micro-batch of a rank: `per_rank // accumulate`"]],
    },
)


class EpochRecord(TypedDict):
    epoch: Annotated[int, "Ignite's epoch counter"]
    iteration: Annotated[int, "iterations done at the end of the epoch"]
    train_loss: Annotated[float | None, "mean training loss over the epoch, all ranks (null if not finite)"]
    train_samples: Annotated[int, "samples trained on in the epoch, all ranks"]
    train_time_s: Annotated[float, "the slowest rank's training time in the epoch, evaluation excluded"]
    samples_per_s: Annotated[float, "`train_samples / train_time_s`"]
    val_accuracy: Annotated[float | None, "validation accuracy after the epoch (null: not evaluated then)"]
    val_loss: Annotated[float | None, "validation loss after the epoch (null: not evaluated then)"]


class RankStats(TypedDict):
    rank: Annotated[int, "the rank"]
    iterations: Annotated[int, "iterations measured (warm-up excluded)"]
    samples: Annotated[int, "samples in the measured iterations"]
    window_s: Annotated[float, "sum of the measured iterations' wall time"]
    samples_per_s: Annotated[float, "`samples / window_s`"]
    step_s_mean: Annotated[float, "mean step time"]
    step_s_p50: Annotated[float, "median step time"]
    step_s_p90: Annotated[float, "90th percentile of step time"]
    step_s_p99: Annotated[float, "99th percentile of step time"]
    data_s_mean: Annotated[float, "mean wait for the batch"]
    data_share: Annotated[float, "data wait / iteration time"]
    forward_s_mean: Annotated[float | None, "mean forward time"]
    backward_s_mean: Annotated[float | None, "mean backward time (includes DDP's gradient all-reduce)"]
    optimizer_s_mean: Annotated[float | None, "mean optimizer-step time"]
    own_s_mean: Annotated[float, "data + forward + optimizer: what the rank spends without waiting for others"]
    comm_s_mean: Annotated[
        float | None,
        "mean gradient communication per step: time at least one bucket's all-reduce was in flight "
        "(null: not timed: one process, `--no-comm-timing`, or no DDP)",
    ]
    exposed_comm_s_mean: Annotated[
        float | None,
        "mean exposed communication: last gradient ready -> last all-reduce done, the part of backward "
        "no compute hides (a fast rank's wait for a slow one shows here)",
    ]
    backward_compute_s_mean: Annotated[float | None, "`backward_s_mean - exposed_comm_s_mean`"]
    overlap: Annotated[float | None, "`1 - exposed / communication` over the measured steps (0-1)"]
    comm_bytes_per_step: Annotated[float | None, "gradient bytes all-reduced per step"]
    buckets_per_step: Annotated[float | None, "DDP gradient buckets per step"]
    busbw_Bps: Annotated[
        float | None, "achieved all-reduce bus bandwidth, bytes/s: bytes / communication time x 2(N-1)/N"
    ]
    handlers_s_mean: Annotated[
        float | None,
        "mean time per iteration in other handlers (inside the step but outside its phases, and "
        "between one iteration's end and the next batch; epoch boundaries excluded)",
    ]


class GlobalStats(TypedDict):
    samples: Annotated[int, "all ranks' measured samples"]
    window_s: Annotated[float, "the slowest rank's measured window"]
    samples_per_s: Annotated[float, "global throughput: `samples / window_s`"]
    optimizer_steps_per_s: Annotated[
        float | None,
        "optimizer steps per second: the measured iterations (each one optimizer step, whatever `--accumulate`) / "
        "`window_s`",
        Shown("optimizer steps/s"),
    ]
    step_s_p50: Annotated[float, "median step time over every rank's iterations"]
    step_s_p90: Annotated[float, "90th percentile, every rank's iterations"]
    step_s_p99: Annotated[float, "99th percentile, every rank's iterations"]
    data_share: Annotated[float, "mean data-wait share over ranks"]
    comm_s_mean: Annotated[float | None, "mean over ranks of `comm_s_mean`"]
    exposed_comm_s_mean: Annotated[float | None, "mean over ranks of `exposed_comm_s_mean`"]
    overlap: Annotated[float | None, "mean over ranks of `overlap`"]
    busbw_Bps: Annotated[float | None, "mean over ranks of `busbw_Bps`"]


class Straggler(TypedDict):
    rank: Annotated[int, "the rank with the largest own time"]
    own_s_mean: Annotated[float, "its own time per iteration"]
    median_own_s_mean: Annotated[float, "the median rank's own time"]
    ratio: Annotated[float | None, "`own_s_mean / median_own_s_mean`"]


class CommWait(TypedDict):
    rank: Annotated[int, "the rank the others wait for in the all-reduce: the least exposed communication"]
    wait_s: Annotated[list[float], "per rank, exposed communication beyond that rank's (0 for it)"]
    median_wait_s: Annotated[float, "the median wait of the other ranks"]


class CommReference(TypedDict):
    message_bytes: Annotated[int, "the run's mean bucket size"]
    seconds: Annotated[float, "median time of one all-reduce of that size after a barrier, on the run's ranks"]
    busbw_Bps: Annotated[float, "its bus bandwidth: what the run's `busbw_Bps` is compared with"]


class SteadyState(TypedDict):
    method: Annotated[str, "`MSER-5`: the cut that minimises the standard error of the kept batch means of 5"]
    fixed_warmup_iterations: Annotated[int, "`--warmup-iters`: always left out"]
    detected_warmup_iterations: Annotated[
        list[int], "per rank, iterations MSER-5 found still settling after the fixed warm-up and compilation"
    ]
    settled: Annotated[bool, "false when a rank's step times never settled (best cut in the run's second half)"]
    tested: Annotated[bool, "false when the run was too short to look for a cut (fewer than 20 iterations)"]
    first_measured_iteration: Annotated[int, "the first iteration in the statistics (1-based)"]


class CompileStats(TypedDict):
    compile_s: Annotated[
        float, "time the iterations that compiled took beyond a steady iteration, slowest rank (`--compile`)"
    ]
    compile_s_per_rank: Annotated[list[float], "the same, per rank"]
    iterations: Annotated[list[int], "the iterations during which something was compiled (on any rank)"]
    recompilations: Annotated[
        int, "iterations that compiled again: a guard failed (a new shape, ...) or anything compiled after the first"
    ]
    reasons: Annotated[list[str], "TorchDynamo's reasons for recompiling (guard failures), first lines"]


class PhaseStats(TypedDict):
    cause: Annotated[
        str,
        "what makes these iterations behave otherwise than the steady phase: `powersgd_start_iter` (PowerSGD's plain "
        "all-reduces before it starts compressing) or `compile` (the iterations of the first compilation)",
    ]
    first_iteration: Annotated[int, "the phase's first iteration (1-based; after `--warmup-iters` where it can be)"]
    last_iteration: Annotated[int, "its last iteration: the steady phase's window starts after it"]
    samples_per_s: Annotated[float, "global throughput over the phase: all ranks' samples / the slowest rank's time"]
    step_s_p50: Annotated[float, "median step time over every rank's iterations of the phase"]
    comm_bytes_per_step: Annotated[float | None, "bytes a rank sent per step in the phase (null: not timed)"]


class DDPCrossCheck(TypedDict):
    iterations: Annotated[int, "the iterations DDP averaged that had our communication timed"]
    ours_ms: Annotated[dict[str, float], "ours, mean per iteration: `comm`, `exposed`, `backward_compute`, `backward`"]
    ddp_ms: Annotated[dict[str, float], "DDP's own runtime statistics of the same iterations, the same keys"]
    ratio: Annotated[dict[str, float | None], "ours / DDP's, per key"]


StepStats = TypedDict(
    "StepStats",
    {
        "warmup_iterations": Annotated[
            int,
            "iterations at the start left out of every statistic: `--warmup-iters`, then until compilation ended, "
            "then as long as MSER-5 finds the step times settling",
        ],
        "ranks": Annotated[list[RankStats], "one record per rank"],
        "global": Annotated[GlobalStats, "figures over all ranks"],
        "straggler": Annotated[Straggler | None, "with 2 or more ranks, the rank doing the most on its own"],
        "comm_wait": Annotated[CommWait | None, "with timed communication: who waits for whom in the all-reduce"],
        "comm_reference": Annotated[
            CommReference | None, "an isolated all-reduce of the run's bucket size (null when not timed)"
        ],
        "steady": NotRequired[Annotated[SteadyState, "how the measured window was found"]],
        "compile": NotRequired[Annotated[CompileStats | None, "what `torch.compile` cost (null: not compiled)"]],
        "warmup_phase": NotRequired[
            Annotated[
                PhaseStats | None,
                "the iterations before an option changes the run's behaviour, measured apart from the steady phase "
                "the other figures come from (null: no option does)",
            ]
        ],
        "ddp_crosscheck": NotRequired[
            Annotated[
                list[DDPCrossCheck | None] | None,
                "per rank, our communication timing against DDP's own statistics (null: not DDP, not timed, or "
                "with gradient accumulation)",
            ]
        ],
    },
)


class NodeContention(TypedDict):
    node: Annotated[int, "node rank"]
    cpus: Annotated[int, "CPUs counted in `/proc/stat`"]
    window_s: Annotated[float, "the window over which CPU use was counted"]
    busy_cpu_s: Annotated[float, "CPU seconds all processes of the machine used in the window (steal included)"]
    own_cpu_s: Annotated[float, "CPU seconds this run's ranks and their DataLoader workers used"]
    foreign_cpu_share: Annotated[float, "`(busy - own) / (window * cpus)`: the machine's share others used"]


class Contention(TypedDict):
    foreign_cpu_share: Annotated[
        float | None, "the largest share of a node's CPU capacity used by other processes while the run measured"
    ]
    foreign_gpu_share: Annotated[
        float | None, "the largest GPU utilisation (0-1) by other processes on this run's GPUs (NVML; else null)"
    ]
    nodes: Annotated[list[NodeContention], "the CPU accounting per node"]


class TraceCommCheck(TypedDict):
    collective: Annotated[
        str, "what the trace counted as communication: `gloo:all_reduce` events (CPU) or `nccl kernels` (CUDA)"
    ]
    iterations: Annotated[list[int], "the traced iterations compared (those with our communication timed)"]
    trace_ms: Annotated[
        dict[str, float],
        "from the trace, mean per iteration: `comm` (union of the collective's intervals in the step), `overlap` "
        "(the part during backward compute), `exposed` (comm - overlap)",
    ]
    ours_ms: Annotated[dict[str, float], "ours on the same iterations: `comm` (`comm_s`), `exposed` (`exposed_comm_s`)"]
    ratio: Annotated[dict[str, float | None], "ours / the trace's: `comm`, `exposed`"]
    per_iteration: Annotated[
        list[dict[str, float]],
        "each iteration's `iteration`, `trace_comm_ms`, `ours_comm_ms`, `trace_exposed_ms`, `ours_exposed_ms`",
    ]


class TimerProfile(TypedDict):
    iteration_mean_s: Annotated[float, "mean time of an iteration (Ignite's Timer)"]
    iterations: Annotated[int, "iterations timed"]
    epoch_mean_s: Annotated[float, "mean time of an epoch"]
    epochs: Annotated[int, "epochs timed"]


class TorchProfile(TypedDict):
    trace: Annotated[str | None, "the rank's Chrome trace, relative to the run folder (null: nothing recorded)"]
    active_iterations: Annotated[int, "iterations recorded"]
    step_iterations: Annotated[dict[str, int], "the trace's `ProfilerStep#N` -> the engine iteration it recorded"]
    top_ops: Annotated[list[dict[str, Any]], "the operators with the most self time, each a row of the top-ops CSV"]
    trace_comm: Annotated[TraceCommCheck | None, "the trace's gradient communication beside ours (null: not timed)"]


# Ignite's BasicTimeProfiler statistics of one kind of time (its keys hold a slash: the functional form)
BasicStats = TypedDict(
    "BasicStats",
    {
        "total": Annotated[float | str, "seconds in all (`not yet triggered`: never timed)"],
        "min/index": NotRequired[Annotated[list[float], "the shortest time and the iteration it came at"]],
        "max/index": NotRequired[Annotated[list[float], "the longest time and the iteration it came at"]],
        "mean": NotRequired[Annotated[float, "mean seconds"]],
        "std": NotRequired[Annotated[float, "standard deviation, seconds"]],
    },
)


class BasicProfile(TypedDict):
    processing_stats: Annotated[BasicStats, "the engine's process function, per iteration"]
    dataflow_stats: Annotated[BasicStats, "the wait for each batch"]
    event_handlers_stats: Annotated[
        dict[str, Any], "each event's handlers (`ITERATION_COMPLETED`, ...) as BasicStats, and their `total_time`"
    ]


class HandlerRow(TypedDict):
    handler: Annotated[str, "the handler (`Total`, `Processing` and `Dataflow` rows close the table)"]
    event: Annotated[str, "the event it is attached to"]
    total_s: Annotated[float | str, "seconds in all (`not triggered`: never ran)"]
    min_s_index: Annotated[
        list[float | str] | str, "the shortest call and its index (`None` strings: never ran; empty on `Total`)"
    ]
    max_s_index: Annotated[list[float | str] | str, "the longest call and its index (empty on `Total`)"]
    mean_s: Annotated[float | str, "mean seconds a call"]
    std_s: Annotated[float | str, "standard deviation (`None`: fewer than two calls)"]


class TimerResult(TypedDict):
    kind: Annotated[Literal["timer"], "Ignite's Timer, per iteration and per epoch"]
    ranks: Annotated[list[TimerProfile], "each rank's results, in rank order"]


class BasicResult(TypedDict):
    kind: Annotated[Literal["basic"], "Ignite's BasicTimeProfiler: processing, dataflow and handlers"]
    ranks: Annotated[list[BasicProfile], "each rank's results, in rank order"]


class HandlersResult(TypedDict):
    kind: Annotated[Literal["handlers"], "Ignite's HandlersTimeProfiler: a row per handler"]
    ranks: Annotated[list[list[HandlerRow]], "each rank's table, in rank order"]


class TorchResult(TypedDict):
    kind: Annotated[Literal["torch"], "`torch.profiler` over a window of iterations"]
    ranks: Annotated[list[TorchProfile], "each rank's results, in rank order"]


# What `--profiler` recorded, told apart by its `kind` (the validator checks each kind's ranks as that kind's).
ProfilerResult = TimerResult | BasicResult | HandlersResult | TorchResult


class FlopsRank(TypedDict):
    rank: Annotated[int, "the rank"]
    share: Annotated[
        float,
        "the share of its machine's matmul peak the rank is judged against: on a CPU its intra-op threads / the "
        "machine's cores (at most an even share among the ranks on it); on a GPU 1, its device (since schema 3)",
    ]
    achieved_flops_per_s: Annotated[float | None, "model FLOPs per sample x the rank's measured samples/s"]
    attainable_flops_per_s: Annotated[
        float | None,
        "the rank's reference: its share x its machine's matmul peak (before schema 3: the matmul rate the rank "
        "measured on its own threads before training)",
    ]
    utilisation_attainable: Annotated[float | None, "achieved / attainable (null where FLOPs were not counted)"]
    utilisation_peak: Annotated[float | None, "achieved / the datasheet peak (null: no datasheet for the device)"]


class MachinePeak(TypedDict):
    flops_per_s: Annotated[
        float,
        "the machine's matmul peak: square matmuls on all the cores of a CPU (or on the GPU), estimated until two "
        "successive estimates agreed within 3 %, the higher of the two",
    ]
    precision: Annotated[str, "the precision of the matmuls"]
    size: Annotated[int, "side of the square matmuls"]
    threads: Annotated[int | None, "CPU threads the matmuls ran on: the cores the process may use (null on a GPU)"]
    tries: Annotated[int, "estimates made"]
    stable: Annotated[
        bool, "two successive estimates agreed within 3 % (false: none did, and the figure is the highest estimate)"
    ]
    from_cache: Annotated[
        bool,
        "read back from the cache (`--matmul-peak-cache`: a sweep's runs share one figure), not measured by this run",
    ]


class Flops(TypedDict):
    per_sample: Annotated[
        dict[str, float],
        "model FLOPs per sample (`forward`, `backward`, `total`), counted with FlopCounterMode: matmuls and "
        "convolutions only (recurrent layers by formula: `by_formula`)",
    ]
    by_formula: Annotated[
        list[str],
        "layers the FLOP counter cannot see, counted by formula: recurrent layers (`nn.LSTM`, `nn.GRU`, `nn.RNN`) at "
        "2 FLOPs per multiply-add of their gates, backward twice the forward (since schema 3)",
    ]
    not_counted: Annotated[
        list[str],
        "layers holding a weight matrix whose FLOPs nothing counted: the utilisation is withheld (null), not given "
        "low (since schema 3)",
    ]
    precision: Annotated[str, "the precision the matmuls run in: `fp32`, `tf32`, `bf16` or `fp16`"]
    datasheet_peak: Annotated[
        dict[str, Any] | None, "the GPU's dense datasheet peak: `family`, `precision`, `flops_per_s`, `source`"
    ]
    matmul_size: Annotated[int | None, "side of the square matmuls of the rate measurement"]
    machine_peak: Annotated[
        MachinePeak | None, "rank 0's machine's matmul peak, the utilisation's reference (since schema 3)"
    ]
    ranks: Annotated[list[FlopsRank], "one record per rank"]
    achieved_flops_per_s: Annotated[float | None, "mean over ranks"]
    utilisation_attainable: Annotated[
        float | None,
        "the run's MFU: model FLOPs per sample x its global samples/s over the sum of its ranks' references (before "
        "schema 3: the mean over ranks of each one's own measured rate)",
    ]
    utilisation_peak: Annotated[float | None, "the same against each rank's GPU datasheet peak"]
    above_measured_peak: Annotated[
        bool, "a rank or the run achieved more than its reference (impossible: flagged, not a figure to read)"
    ]


class RunConfig(TypedDict, total=False):
    schema_version: Annotated[int, "version of this schema"]
    config: Annotated[dict[str, Any], "every `TrainConfig` field as given"]
    world_size: Annotated[int, "processes in the run"]
    backend: Annotated[str, "the backend used (`none` when serial)"]
    device: Annotated[DeviceInfo, "rank 0's device"]
    threads_per_process: Annotated[int, "intra-op CPU threads each rank used"]
    cpu_cores: Annotated[int, "CPU cores available to rank 0's node"]
    launch_mode: Annotated[str, "`serial`, `spawn` (started by ignite-ddl) or `env` (torchrun / SLURM)"]
    launcher: Annotated[str | None, "in env mode, who started the ranks: `torchrun` or `slurm` (else null)"]
    nproc_per_node: Annotated[int, "processes per node"]
    nnodes: Annotated[int, "nodes"]
    start_method: Annotated[str | None, "how spawned ranks were started (null unless spawned)"]
    versions: Annotated[dict[str, str], "python, torch, torchvision, ignite, cuda (and torch_xla)"]
    host: Annotated[dict[str, Any], "hostname, platform, CPU model, CPU cores available"]


class HeldBytes(TypedDict):
    params: Annotated[int, "bytes of this rank's parameters (its shard, under FSDP)"]
    grads: Annotated[int, "bytes of its gradients"]
    optimizer: Annotated[int, "bytes of its optimizer state (momentum, Adam's moments, step counters)"]


class CudaMemory(TypedDict):
    max_allocated_bytes: Annotated[int, "`torch.cuda.max_memory_allocated` over the measured window"]
    max_reserved_bytes: Annotated[int, "`torch.cuda.max_memory_reserved` over the measured window"]
    alloc_retries: Annotated[int, "`num_alloc_retries`: allocations that freed cached blocks and tried again"]
    ooms: Annotated[int, "`num_ooms`: allocations that failed"]


class RankMemory(TypedDict):
    rank: Annotated[int, "the rank"]
    peak_rss_bytes: Annotated[
        int,
        "peak resident memory of the rank's process (VmHWM) less its resident file pages (`file_rss_bytes`), which "
        "depend on how it started, not on what it trains",
    ]
    file_rss_bytes: NotRequired[
        Annotated[
            int,
            "its resident pages mapped from files at the end (RssFile: shared libraries' code and data, shared with "
            "every process that maps them): a fresh process counts those its imports touched, a forked one only "
            "those it ran; left out of `peak_rss_bytes` (absent in records written before it was)",
        ]
    ]
    workers: Annotated[int, "its live child processes at the end (DataLoader workers)"]
    workers_peak_rss_bytes: Annotated[
        int, "sum of the workers' peak resident memory (forked workers count the pages they share with the rank)"
    ]
    workers_private_bytes: Annotated[int, "the workers' private memory at the end (Private_Clean + Private_Dirty)"]
    held_bytes: Annotated[HeldBytes | None, "what the rank holds between steps"]
    cuda: Annotated[CudaMemory | None, "the CUDA allocator's figures (null off CUDA)"]
    reset_after_warmup: Annotated[bool, "whether the peaks were reset when warm-up ended"]


class MemoryMax(TypedDict):
    peak_rss_bytes: Annotated[int | None, "largest rank peak resident memory"]
    workers_peak_rss_bytes: Annotated[int | None, "largest workers' peak (one rank's workers together)"]
    held_bytes: Annotated[int | None, "largest total of parameter, gradient and optimizer bytes held"]
    cuda_max_allocated_bytes: Annotated[int | None, "largest CUDA peak allocated"]
    cuda_max_reserved_bytes: Annotated[int | None, "largest CUDA peak reserved"]


class Memory(TypedDict):
    source: Annotated[
        str, "where host memory was read: `/proc (VmHWM less RssFile)`, or getrusage (whole run) without /proc"
    ]
    window: Annotated[str, "`after warm-up` (peaks reset when warm-up ended) or `whole run`"]
    limit_bytes: Annotated[int | None, "the memory a rank may use: RAM, cgroup memory.max, RLIMIT_AS / DATA"]
    ranks: Annotated[list[RankMemory], "per rank"]
    max: Annotated[MemoryMax, "the largest figure of each over the ranks"]


class GradScalerRecord(TypedDict):
    initial_scale: Annotated[float | None, "the loss scale before the first step"]
    final_scale: Annotated[float | None, "the loss scale after the last step"]
    steps: Annotated[int, "optimizer steps recorded"]
    backoffs: Annotated[int, "steps that lowered the scale: inf/NaN gradients found, the optimizer step skipped"]
    growths: Annotated[int, "steps that raised the scale (after `growth_interval` clean steps)"]


class WorkloadInfo(TypedDict):
    path: Annotated[str, "the workload as given: `gpt` or `package.module:function`"]
    module: Annotated[str, "the module imported (its code ran in every rank)"]
    function: Annotated[str, "the function called"]
    file: Annotated[str | None, "the file the module was imported from"]
    args: Annotated[dict[str, Any], "the function's keyword arguments (`workload_args`)"]
    sample_unit: Annotated[str, "what a throughput counts: `tokens`, `images`, `samples` ..."]
    units_per_sample: Annotated[int, "units in one dataset item (a sequence's tokens)"]
    parameters: Annotated[int, "the model's parameters"]
    blocks: Annotated[int, "blocks the workload marked (FSDP units, activation checkpointing)"]
    flops_source: Annotated[str, "`workload` (its own formula) or `counted` (torch.utils.flop_counter)"]
    step: Annotated[
        str,
        "whose step ran: `process_function` (the workload's whole Ignite step, timed whole), `training_step` or "
        "`loss` (inside the suite's step)",
    ]
    units_per_s: Annotated[float, "global throughput in `sample_unit`s: samples_per_s x units_per_sample"]


class Summary(TypedDict, total=False):
    schema_version: Annotated[int, "version of this schema"]
    status: Annotated[str, "`completed`"]
    world_size: Annotated[int, "as in config.json"]
    backend: Annotated[str, "as in config.json"]
    device: Annotated[DeviceInfo, "as in config.json"]
    threads_per_process: Annotated[int, "as in config.json"]
    cpu_cores: Annotated[int, "CPU cores available to rank 0's node"]
    launch_mode: Annotated[str, "as in config.json"]
    launcher: Annotated[str | None, "as in config.json"]
    nproc_per_node: Annotated[int, "as in config.json"]
    nnodes: Annotated[int, "as in config.json"]
    start_method: Annotated[str | None, "as in config.json"]
    dataset: Annotated[str, "the dataset trained on"]
    model: Annotated[str, "the model trained"]
    amp: Annotated[str, "the mixed-precision mode"]
    strategy: Annotated[str, "how the model was held across ranks: `none`, `ddp` or `fsdp` (`auto` resolved)"]
    batch: Annotated[BatchInfo, "the batch, requested and effective"]
    epochs: Annotated[int, "epochs begun"]
    iterations: Annotated[int, "iterations done"]
    epoch_length: Annotated[int, "iterations per epoch"]
    wall_time_s: Annotated[float, "the whole `Engine.run` (training and evaluation), slowest rank"]
    train_time_s: Annotated[float, "sum over epochs of the slowest rank's training time, evaluation excluded"]
    train_samples: Annotated[int, "samples trained on by all ranks together"]
    samples_per_s: Annotated[
        float, "global throughput: all ranks' samples / the measured window (from `steps`, warm-up excluded)"
    ]
    samples_per_s_source: Annotated[
        str, "`steps`, or `epochs` where nothing was measured (`train_samples / train_time_s`)"
    ]
    final_train_loss: Annotated[float | None, "mean training loss over the last epoch, all ranks"]
    initial_train_loss: Annotated[float | None, "loss of the first iteration (before any update), mean over ranks"]
    diverged: Annotated[str | None, "why the run is judged diverged (a non-finite or exploding loss), else null"]
    val_accuracy: Annotated[float | None, "validation accuracy after the last epoch"]
    val_loss: Annotated[float | None, "validation loss after the last epoch"]
    best_val_accuracy: Annotated[float | None, "best validation accuracy over the evaluations"]
    stopped_early_at_epoch: Annotated[
        int | None, "the epoch after which early stopping ended the run (--early-stopping), else null"
    ]
    confusion_matrix: Annotated[
        list[list[int]] | None,
        "last evaluation, summed over all ranks: row = true class, column = predicted class (sums to the "
        "validation set size)",
    ]
    last_checkpoint: Annotated[str | None, "path of the final checkpoint (null with `--no-checkpoints`)"]
    resumed_from: Annotated[str | None, "the checkpoint this run resumed from"]
    history: Annotated[list[EpochRecord], "one record per epoch"]
    steps: Annotated[StepStats | None, "the step recorder's gathered statistics (null with `--no-record-steps`)"]
    contention: Annotated[Contention | None, "what other processes used while the run measured"]
    profiler: Annotated[ProfilerResult | None, "with `--profiler`: every rank's profiler results"]
    flops: Annotated[Flops | None, "model FLOPs and utilisation (null with `--no-measure-flops` or on XLA)"]
    memory: Annotated[Memory | None, "memory on every rank (null with `--no-measure-memory`)"]
    grad_scaler: Annotated[GradScalerRecord | None, "with `--amp fp16`: the GradScaler's loss scale (else null)"]
    workload: Annotated[WorkloadInfo | None, "with `--workload`: what ran, its unit and its throughput in it"]
