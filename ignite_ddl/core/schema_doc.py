"""``docs/results.md``'s schema section, generated from the types of :mod:`.schema` and :mod:`.sweep_records` so
that the documentation cannot drift from what is written.

Example:
    >>> from ignite_ddl.core.schema import Summary
    >>> "samples_per_s" in _schema_fields(Summary)
    True
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from typing_extensions import NotRequired  # typing's from Python 3.11

from ignite_ddl.core.schema import (
    SCHEMA_VERSION,
    BasicProfile,
    BasicResult,
    BasicStats,
    BatchInfo,
    CommReference,
    CommWait,
    CompileStats,
    Contention,
    CudaMemory,
    DDPCrossCheck,
    DeviceInfo,
    EpochRecord,
    Flops,
    FlopsRank,
    GlobalStats,
    GradScalerRecord,
    HandlerRow,
    HandlersResult,
    HeldBytes,
    MachinePeak,
    Memory,
    MemoryMax,
    NodeContention,
    PhaseStats,
    RankMemory,
    RankStats,
    RunConfig,
    SteadyState,
    StepStats,
    Straggler,
    Summary,
    TimerProfile,
    TimerResult,
    TorchProfile,
    TorchResult,
    TraceCommCheck,
    WorkloadInfo,
)
from ignite_ddl.core.sweep_records import (
    MemoryPlan,
    MemoryPrediction,
    PlannedConfiguration,
    PredictedStep,
    RunRecord,
    SlurmJobInfo,
    StepLink,
    StepModel,
    SweepAdaptive,
    SweepMeta,
    SweepSession,
    SweepStop,
)

__all__ = ["schema_markdown", "write_schema_doc"]


def _schema_fields(kind: type) -> dict[str, tuple[Any, str]]:
    """Each field of a schema type: ``name -> (type, meaning)``."""
    hints = typing.get_type_hints(kind, include_extras=True)
    fields = {}
    for name, hint in hints.items():
        if typing.get_origin(hint) is NotRequired:  # a key only some records have
            hint = typing.get_args(hint)[0]
        if typing.get_origin(hint) is Annotated:
            base, meaning = typing.get_args(hint)[:2]
        else:
            base, meaning = hint, ""
        fields[name] = (base, meaning)
    return fields


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union or origin is types.UnionType:
        names = [_type_name(a) for a in args if a is not type(None)]
        return " \\| ".join(names) + (" \\| null" if type(None) in args else "")
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:  # an object of records names them; any other is an object
        return f"object of {_type_name(args[1])}" if typing.is_typeddict(args[1]) else "object"
    if hint is Any:
        return "any"
    return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
        getattr(hint, "__name__", str(hint)), getattr(hint, "__name__", str(hint))
    )


_DOCUMENTED: list[tuple[type, str]] = [
    (RunConfig, "`config.json`"),
    (Summary, "`summary.json`"),
    (DeviceInfo, "`device`"),
    (BatchInfo, "`batch`"),
    (EpochRecord, "each entry of `history`"),
    (StepStats, "`steps`"),
    (RankStats, "each entry of `steps.ranks`"),
    (GlobalStats, "`steps.global`"),
    (Straggler, "`steps.straggler`"),
    (CommWait, "`steps.comm_wait`"),
    (CommReference, "`steps.comm_reference`"),
    (SteadyState, "`steps.steady`"),
    (CompileStats, "`steps.compile`"),
    (PhaseStats, "`steps.warmup_phase`"),
    (DDPCrossCheck, "each entry of `steps.ddp_crosscheck`"),
    (Contention, "`contention`"),
    (NodeContention, "each entry of `contention.nodes`"),
    (TimerResult, "`profiler` (kind `timer`)"),
    (TimerProfile, "each entry of `profiler.ranks` (`timer`)"),
    (BasicResult, "`profiler` (kind `basic`)"),
    (BasicProfile, "each entry of `profiler.ranks` (`basic`)"),
    (BasicStats, "`processing_stats`, `dataflow_stats` and each event of `event_handlers_stats` (`basic`)"),
    (HandlersResult, "`profiler` (kind `handlers`)"),
    (HandlerRow, "each row of each entry of `profiler.ranks` (`handlers`)"),
    (TorchResult, "`profiler` (kind `torch`)"),
    (TorchProfile, "each entry of `profiler.ranks` (`torch`)"),
    (TraceCommCheck, "`profiler.ranks[].trace_comm` (`torch`)"),
    (Flops, "`flops`"),
    (FlopsRank, "each entry of `flops.ranks`"),
    (MachinePeak, "`flops.machine_peak`"),
    (Memory, "`memory`"),
    (RankMemory, "each entry of `memory.ranks`"),
    (HeldBytes, "`memory.ranks[].held_bytes`"),
    (CudaMemory, "`memory.ranks[].cuda`"),
    (MemoryMax, "`memory.max`"),
    (GradScalerRecord, "`grad_scaler`"),
    (WorkloadInfo, "`workload`"),
    (RunRecord, "each line of a sweep's `results.jsonl`"),
    (SlurmJobInfo, "`slurm` of a record"),
    (MemoryPrediction, "`prediction` of a record, and of each planned configuration"),
    (SweepMeta, "a sweep's `sweep.json`"),
    (MemoryPlan, "`plan` of `sweep.json`, and `plan/plan.json`"),
    (PlannedConfiguration, "each entry of `configurations`"),
    (SweepSession, "each entry of `sessions`"),
    (SweepStop, "`stopped` of a session"),
    (SweepAdaptive, "`adaptive` of a session"),
    (StepModel, "`step_model` of `sweep.json`"),
    (StepLink, "`link` of the step model"),
    (PredictedStep, "each entry of the step model's `configurations`"),
]

_BEGIN, _END = "<!-- schema: generated from ignite_ddl/core/schema.py -->", "<!-- end of generated schema -->"


def schema_markdown() -> str:
    """The schema as Markdown tables, one per type (the generated part of docs/results.md)."""
    parts = [
        _BEGIN,
        f"Schema version {SCHEMA_VERSION}. Types are JSON types; `null` marks a figure that was not "
        "measured or does not apply (NaN and infinities are written as `null`).",
    ]
    for kind, where in _DOCUMENTED:
        rows = ["| key | type | meaning |", "|---|---|---|"]
        for name, (hint, meaning) in _schema_fields(kind).items():
            rows.append(f"| `{name}` | {_type_name(hint)} | {meaning} |")
        parts.append(f"### {where} ({kind.__name__})\n\n" + "\n".join(rows))
    parts.append(_END)
    return "\n\n".join(parts) + "\n"


def write_schema_doc(path: str | Path) -> bool:
    """Replace the generated part of ``path`` (docs/results.md) with :func:`schema_markdown`; True if it changed."""
    path = Path(path)
    text = path.read_text()
    head, _, rest = text.partition(_BEGIN)
    _, _, tail = rest.partition(_END + "\n")
    new = head + schema_markdown() + tail
    path.write_text(new)
    return new != text
