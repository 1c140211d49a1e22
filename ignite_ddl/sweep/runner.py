"""The sweep loop: plan the runs of a spec, hand the ones not yet recorded to an executor (here, or SLURM), append
each record to the crash-safe ``results.jsonl`` as it ends, and re-run contended runs.

Each run is ``ignite-ddl train`` in its own process group with its own output directory under ``runs/``; when it
ends, one JSON line (the configuration plus its summary, or the reason it failed) is appended to ``results.jsonl``
and synced to disk. A failed, refused or timed-out run is recorded and the sweep goes on; so is a configuration
refused before the first run (:func:`~ignite_ddl.sweep.plan.refused_configurations`: one record, status ``refused``,
never launched), and a spec of nothing but refused configurations is refused whole. ``--resume`` skips runs
already recorded; a line that cannot be read (cut short by a killed sweep, or damaged) is moved to
``results.jsonl.rejected`` with a warning, and every valid record is kept.

**Contention.** Each run records how much of the machine other processes used while it measured
(:mod:`ignite_ddl.measure.contention`); a run above ``contention_threshold`` is recorded as contended, and with
``rerun_contended: N`` re-run up to N times at the end of the sweep. A machine busy before the first run is said
at once, and waited on (``on_busy``, ``wait_quiet``); a local sweep whose last ``busy_stop_after`` runs were all
contended stops with :class:`~ignite_ddl.core.errors.MachineBusy`, the reason kept in ``sweep.json``
(:mod:`ignite_ddl.sweep.busy`).

An executor is anything with ``check()`` (refuse before anything starts) and ``execute(runs, recorded, progress,
where)`` (run them, calling ``recorded(record, run, number)`` as each ends): :class:`~ignite_ddl.sweep.local.
LocalExecutor` and :class:`~ignite_ddl.sweep.slurm.SlurmExecutor`.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Collection
from pathlib import Path

from ignite_ddl.core.folders import claim_sweep_folder, lock
from ignite_ddl.core.results import read_results
from ignite_ddl.core.sweep_records import MemoryPlan, RunRecord, StepModel, SweepMeta, SweepSession
from ignite_ddl.launcher.signals import interruptible
from ignite_ddl.measure.contention import ForeignLoad
from ignite_ddl.predict.steptime import StepPrediction, step_model
from ignite_ddl.report.analysis import analyze
from ignite_ddl.sweep.adaptive import AdaptiveRule, decide
from ignite_ddl.sweep.busy import first_probe_from, machine_share, wait_until_quiet
from ignite_ddl.sweep.forecast import fit_step_model
from ignite_ddl.sweep.local import LocalExecutor, start_preloading
from ignite_ddl.sweep.plan import (
    Refused,
    Run,
    check_configurations,
    expand,
    make_run,
    refused_configurations,
    sweep_dir,
)
from ignite_ddl.sweep.probes import forget_failures
from ignite_ddl.sweep.search import check_search, run_search, search_checks
from ignite_ddl.sweep.session import Executor, Session
from ignite_ddl.sweep.slurm import SlurmExecutor
from ignite_ddl.sweep.spec import Spec, configurations

__all__ = ["Executor", "executor_for", "sweep"]


def executor_for(spec: Spec, out: Path) -> Executor:
    """The executor the spec names."""
    if spec.executor == "slurm":
        return SlurmExecutor(out, spec.name, spec.slurm_options(), spec.timeout_s, spec.contention_threshold)
    return LocalExecutor(spec.timeout_s, spec.start, spec.contention_threshold)


def sweep(
    spec: Spec,
    output_dir: str | Path | None = None,
    resume: bool = False,
    progress: Callable[[str], None] = print,
    load_since: ForeignLoad | None = None,
    hold: contextlib.ExitStack | None = None,
) -> list[RunRecord]:
    """Run every configuration of ``spec`` not yet recorded; return all records of the sweep.

    Refuses (:class:`ConfigError`) to write into an existing sweep without ``resume``, into a folder that holds
    files but no sweep, and into a folder another sweep or run is using. Raises :class:`MachineBusy` when other
    processes keep the machine too busy to compare (its records so far are kept, and the reason is written to
    ``sweep.json``). ``load_since``: the machine's load counted since the command started, the first probe of
    whether it is busy. ``hold``: the folder stays locked until this stack closes, not when the runs end (the
    command writes its report under the same lock: no run may land in the folder before the last file is written).
    """
    out = sweep_dir(spec, output_dir)
    executor = executor_for(spec, out)
    files = spec.executor == "local"
    refused: list[Refused] = []
    if spec.search:  # its runs are proposed as it goes: each model, dataset and tracker it may use checked first
        check_search()
        executor.check()
        check_configurations(spec, files=files, grids=search_checks(spec))
        runs = []
    else:
        executor.check()
        # What each run would refuse, found before the first: those configurations are recorded as refused and the
        # others run (all of them refused: the spec is refused here, before anything starts).
        refused = refused_configurations(spec, files=files, output_dir=out)
        runs = list(expand(spec, out, refused={r.index for r in refused}))
    claim_sweep_folder(out)  # before the lock: no .lock is left in a folder that is not a sweep's
    forget_failures()  # a probe that failed in an earlier sweep of this process is tried again
    with contextlib.ExitStack() as own:
        (hold if hold is not None else own).enter_context(lock(out, "sweep"))
        if spec.executor == "local":  # a SLURM job runs on its own allocation, not on this machine
            if spec.start == "preloaded":
                start_preloading()  # its imports run beside the check below and the plan, not before the first run
            probe = first_probe_from(load_since) if load_since is not None else machine_share
            wait_until_quiet(
                spec.contention_threshold, spec.on_busy, spec.wait_quiet, progress, probe=probe,
                stop_after=spec.busy_stop_after,
            )  # fmt: skip
        if spec.search:
            return run_search(spec, out, executor, resume, progress)
        for found in refused:
            progress(found.said)
        plan = _memory_plan(spec, out, progress, refused)
        return _sweep(spec, out, runs, executor, resume, progress, plan, refused)


def _memory_plan(spec: Spec, out: Path, progress: Callable[[str], None], refused: list[Refused]) -> MemoryPlan | None:
    """Each configuration's predicted peak per rank (:mod:`ignite_ddl.sweep.forecast`), when the spec asks for
    predictions (``predict``) and the runs are local (a SLURM node's runtime is not this machine's); none of the
    ``refused``."""
    if not spec.predict or spec.executor != "local":
        return None
    from ignite_ddl.sweep.forecast import plan_memory, plan_record, write_plan

    try:
        planned = plan_memory(spec, out, progress=progress, refused={r.index for r in refused})
    except Exception as e:  # a prediction never stops a sweep: its runs go on, without a plan
        progress(f"plan: peak memory not predicted: {type(e).__name__}: {e}".splitlines()[0])
        return None
    write_plan(planned, out, spec.memory_limit_mb)
    by_reason: dict[str, list[str]] = {}
    for p in planned:
        if p.prediction.problem:
            why = p.prediction.problem.removeprefix("cannot predict: ")
            by_reason.setdefault(why, []).append(f"cfg{p.index:03d}")
    for why, names in by_reason.items():
        progress(f"plan: {', '.join(names)}: peak memory not predicted: {why}")
    return plan_record(planned, spec.memory_limit_mb)


def _skip_unfit(spec: Spec, plan: MemoryPlan, runs: list[Run], progress: Callable[[str], None]) -> list[Run]:
    """``runs`` without those of configurations predicted not to fit ``memory_limit_mb`` (all of them with
    ``run_unfit``), each such configuration said once."""
    unfit = {c["index"]: c for c in plan["configurations"] if c["unfit"]}
    for index, planned in sorted(unfit.items()):
        label = " ".join(f"{k}={v}" for k, v in planned["grid"].items())
        action = "launched anyway (run_unfit)" if spec.run_unfit else "not launched (run_unfit: true runs it)"
        progress(f"cfg{index:03d} {label}: {planned['unfit']}: {action}")
    return runs if spec.run_unfit else [run for run in runs if run.index not in unfit]


def _sweep(
    spec: Spec,
    out: Path,
    runs: list[Run],
    executor: Executor,
    resume: bool,
    progress: Callable[[str], None],
    plan: MemoryPlan | None = None,
    refused: list[Refused] | None = None,
) -> list[RunRecord]:
    session = Session(spec, out, executor, resume, progress)
    done = session.done()  # the runs earlier sessions recorded
    session.refuse(refused or [])
    if plan is not None:
        session.meta["plan"] = plan
        session.predictions = {c["index"]: c["prediction"] for c in plan["configurations"]}
        session.save()
        runs = _skip_unfit(spec, plan, runs, progress)
    todo = [run for run in runs if run.key not in done]
    if done:
        progress(f"resuming: {len(runs) - len(todo)} of {len(runs)} runs already recorded")
    repeats = f"at most {spec.max_repeats}, adaptive" if spec.adaptive else str(spec.repeats)
    with interruptible():  # SIGTERM too stops the run in progress and records it, instead of orphaning it
        if plan is not None and todo:
            # The first round's one-process runs first: the step-time model fitted to them predicts the others,
            # which then run likeliest winners first (a sweep cut short has measured the contenders).
            first = [run for run in todo if run.repeat == 0 and _world(run) == 1]
            if first:
                session.execute(first, " one-process runs first", repeats)
            skip = {r.index for r in refused or []}
            session.meta["step_model"] = _step_model(spec, out, session.records(), progress, todo, skip)
            session.save()
            todo = _likeliest_first([run for run in todo if run not in first], session.meta["step_model"])
        session.execute(todo, "", repeats)
        session.rerun_contended(repeats)
        if spec.adaptive:
            while True:
                batch = _next_round(spec, out, session.meta, session.session, session.elapsed_s(), progress)
                session.save()
                if not batch:
                    break
                session.execute(batch, f" round {batch[0].repeat + 1}", repeats)
                session.rerun_contended(repeats)
    return session.records()


def _step_model(
    spec: Spec,
    out: Path,
    records: list[RunRecord],
    progress: Callable[[str], None],
    runs: list[Run],
    refused: Collection[int] = (),
) -> StepModel:
    """The step-time model fitted to the first round (:func:`~ignite_ddl.sweep.forecast.fit_step_model`; none of the
    ``refused`` configurations); where it fails, every configuration of several processes in ``runs`` not predicted,
    with why: the runs go on."""
    try:
        return fit_step_model(spec, out, records, progress, refused)
    except Exception as e:  # a prediction never stops a sweep
        why = f"{type(e).__name__}: {e}".splitlines()[0]
        progress(f"plan: step time not predicted: {why}")
        several = sorted({run.index for run in runs if _world(run) > 1})
        return step_model({i: StepPrediction.unpredicted(i, why) for i in several}, None)


def _world(run: Run) -> int:
    return (run.config.nproc_per_node or 1) * run.config.nnodes


def _likeliest_first(runs: list[Run], model: StepModel) -> list[Run]:
    """``runs`` with the first round's in the order of their predicted throughput, fastest first (those without a
    prediction after them, in their planned order); later rounds as planned."""
    predicted = model["configurations"]

    def rate(run: Run) -> float:
        found = predicted.get(str(run.index))
        step = found["step_s"] if found is not None else None
        return run.config.batch_size / step if step else 0.0

    first = sorted((run for run in runs if run.repeat == 0), key=lambda run: -rate(run))
    return first + [run for run in runs if run.repeat != 0]


def _next_round(
    spec: Spec,
    out: Path,
    meta: SweepMeta,
    session: SweepSession,
    elapsed_s: float,
    progress: Callable[[str], None],
) -> list[Run]:
    """Adaptive repeats: the runs of the next round (empty: the sweep is decided, or cut short), decided by the
    report's own reading of the records so far (:func:`ignite_ddl.sweep.adaptive.decide`)."""
    records = read_results(out / "results.jsonl")
    # A configuration whose runs all failed cannot be the best: it gets no more rounds (its failures are reported).
    configs = [c for c in analyze(records, dict(meta)).configs if any(r.status == "completed" for r in c.runs)]
    samples = {c.index: c.samples_per_s for c in configs}
    workloads = {c.index: c.workload for c in configs}
    repeats = {c.index: len({r.repeat for r in c.runs}) for c in configs}
    rounds = max(repeats.values(), default=0)
    times = sorted(r.elapsed_s for c in configs for r in c.runs if r.elapsed_s)
    rule = AdaptiveRule(spec.min_repeats, spec.max_repeats, spec.equivalence_margin, spec.budget_s)
    run_s = times[len(times) // 2] if times else None
    decision = decide(samples, workloads, rule, rounds, elapsed_s, run_s)
    session["adaptive"] = {"rounds": rounds, "outcome": dict(decision.outcome)}
    if decision.done:
        said = ", ".join(f"{name}: {state}" for name, state in decision.outcome.items())
        progress(f"adaptive repeats: stopped after {rounds} round(s) ({said})")
        return []
    grids = configurations(spec)
    order = decision.more[::-1] if rounds % 2 else decision.more  # the interleaving direction alternates
    if spec.predict:  # likeliest winners first, as the first round's were: the best measured so far leads
        order = sorted(decision.more, key=lambda i: -statistics.fmean(samples[i]) if samples.get(i) else 0.0)
    done = {r["key"] for r in records if r["status"] != "interrupted"}
    batch = [make_run(spec, i, grids[i], repeats.get(i, 0), out) for i in order]
    batch = [run for run in batch if run.key not in done]
    progress(
        f"adaptive repeats: round {rounds + 1} for {len(batch)} of {len(grids)} configuration(s) that can still be "
        "the best"
    )
    return batch
