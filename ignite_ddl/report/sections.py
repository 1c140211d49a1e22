"""What the report says, section by section: the verdict, whether the numbers can be trusted, the time spent
measuring, the profilers' tables and the environment (the configuration tables are :mod:`.tables`)."""

from __future__ import annotations

from typing import Any

from ignite_ddl.measure.profile_text import format_profile
from ignite_ddl.measure.traces import TRACE_COMM_HEADER, trace_comm_rows
from ignite_ddl.report.document import Document
from ignite_ddl.report.model import FLAG_MEANINGS, FLAGS_LISTED, Analysis, ConfigResult, Verdict
from ignite_ddl.report.tables import interval_text, options_text, rate_text
from ignite_ddl.report.verdicts import (
    EQUIVALENT_MEANS,
    EQUIVALENT_TEXT,
    INSEPARABLE_TEXT,
    TIED_MEANS,
    TIED_TEXT,
    relative,
)

__all__ = [
    "ADAPTIVE_OUTCOMES",
    "adaptive_text",
    "environment_section",
    "measured_section",
    "profiler_section",
    "speedup_beside_tie",
    "trust_section",
    "verdict_lines",
    "verdict_section",
]


def _named(analysis: Analysis, name: str) -> str:
    config = analysis.config(name)
    return f"{name} ({options_text(config.grid_shown)})"


def _refused_named(config: ConfigResult) -> str:
    return f"{config.name} ({options_text(config.grid_shown)})"


def _figure(config: ConfigResult, pct: int) -> str:
    t = config.throughput
    interval = f", {pct} % interval {interval_text(t)}" if t.has_interval else ", no interval"
    runs = len(config.samples_per_s)
    return f"{rate_text(t.value)} samples/s{interval}, {runs} run{'s' if runs != 1 else ''}"


def _welch_text(v: Verdict, pct: int) -> str:
    """The runner-up's comparison: the relative difference naming its base, and the p-value beside the corrected
    threshold it was judged by."""
    assert v.runner_up is not None and v.difference is not None and v.tied is not None
    top = v.best or v.tied[0]
    # The runner-up against the fastest, as every other line of the verdict puts a pair: one figure per pair.
    text = relative(f"{v.runner_up} (the runner-up)", 1.0, top, 1 + v.difference)
    if v.welch_p is None:
        return text + "; the t-test needs 2 runs of each"
    alpha = (100 - pct) / 100
    threshold = v.welch_threshold if v.welch_threshold is not None else alpha
    comparisons = round(alpha / threshold)
    significant = "below it" if v.welch_p <= threshold else "not below it: not shown faster"
    if comparisons > 1:
        against = f"the corrected threshold {threshold:.3g} ({100 - pct:g} % / {comparisons}, Bonferroni)"
    else:  # two configurations: one comparison, nothing to correct
        against = f"the threshold {threshold:.3g} (one comparison: no correction)"
    test = "t-test on the pooled spread" if v.pooled else "Welch's t-test"
    return f"{text}; one-sided {test} p = {v.welch_p:.3g} against {against}: {significant}"


def verdict_lines(analysis: Analysis) -> list[str]:
    """One line per workload: what the data supports."""
    pct = round(100 * analysis.confidence)
    several = len(analysis.verdicts) > 1
    lines = [analysis.stopped] if analysis.stopped else []
    note = analysis.contention_note
    for v in analysis.verdicts:
        where = f"[{v.workload}] " if several else ""
        tag = " (provisional: see the report)" if v.provisional else ""
        tag += f" ({note})" if note else ""
        if v.best is not None:
            lines.append(f"{where}best: {_named(analysis, v.best)}: {_figure(analysis.config(v.best), pct)}{tag}")
        elif v.tied and v.equivalent:
            lines.append(f"{where}{EQUIVALENT_TEXT.format(margin=100 * v.margin)}: {v.tied_shown}{tag}")
        elif v.tied:
            lines.append(f"{where}{TIED_TEXT}: {v.tied_shown} ({v.reason}: {TIED_MEANS}){tag}")
        else:
            lines.append(f"{where}no verdict: {v.reason}" + (f" ({note})" if note else ""))
        if v.recommendation and not (v.best is not None and v.recommended == v.best):
            lines.append(f"{where}recommended: {v.recommendation}" + (f" ({note})" if note else ""))
        for name, why in v.not_judged.items():
            lines.append(f"{where}not judged: {name}: {why}" + (f" ({note})" if note else ""))
    for config in analysis.refused:
        lines.append(f"refused, not run: {_refused_named(config)}: {config.refusal}")
    return lines


def speedup_beside_tie(analysis: Analysis) -> str:
    """Where a speed-up's interval lies clear of 1 while the verdict ties the configuration with its one-process
    twin, why both hold (one comparison at the plain level, against the verdict's stricter rule), so the table and
    the verdict do not read as contradicting each other; "" where none does."""
    found = []
    for v in analysis.verdicts:
        tied = set(v.tied or ())
        for name in v.tied or ():
            c = analysis.config(name)
            e = c.speedup
            if c.baseline in tied and e is not None and e.low is not None and e.high is not None:
                if e.low > 1 or e.high < 1:
                    found.append(f"{name}'s speed-up over {c.baseline} ({interval_text(e, '.2f')})")
    if not found:
        return ""
    return (
        f"{'; '.join(found)} lies clear of 1, yet the verdict ties them: a speed-up's interval is one comparison at "
        f"{round(100 * analysis.confidence)} %, while the verdict asks more before calling one faster (the two "
        "throughput intervals apart, and the lead shown by a Welch test corrected for every comparison of the "
        "workload). The evidence leans that way; more repeats would settle it."
    )


def verdict_section(doc: Document, analysis: Analysis) -> None:
    pct = round(100 * analysis.confidence)
    doc.heading("Verdict")
    if analysis.stopped:
        doc.paragraph(
            f"**{analysis.stopped[0].upper()}{analysis.stopped[1:]}.** The sweep stopped there: re-running cannot "
            "help while other processes keep the machine this busy. Run it again on a quieter machine "
            "(`--resume` continues it; `--on-busy wait` waits for a quiet start)."
        )
    if analysis.contention_note:
        doc.paragraph(
            f"**{analysis.contention_note}** (the report was asked to count them): every figure below includes "
            "time spent waiting for other processes, which need not slow every configuration alike, so a ranking "
            "may be wrong. Re-run on a quiet machine before relying on it."
        )
    for v in analysis.verdicts:
        items = []
        if len(analysis.verdicts) > 1:
            doc.paragraph(f"Workload {v.workload}:")
        if v.best is not None:
            best = analysis.config(v.best)
            items.append(f"**Best: {_named(analysis, v.best)}** — {_figure(best, pct)}: {v.reason}.")
        elif v.tied and v.equivalent:
            equivalent = EQUIVALENT_TEXT.format(margin=100 * v.margin)
            items.append(f"**{equivalent[0].upper()}{equivalent[1:]}: {v.tied_shown}** — {EQUIVALENT_MEANS}.")
        elif v.tied:
            items.append(f"**{TIED_TEXT[0].upper()}{TIED_TEXT[1:]}: {v.tied_shown}** — {v.reason}: {TIED_MEANS}.")
        else:
            items.append(f"No verdict: {v.reason}.")
        if v.tied and v.best is None:
            for name in v.tied_listed:
                items.append(f"{_named(analysis, name)}: {_figure(analysis.config(name), pct)}")
            for name, n in ((name, v.repeats_needed[name]) for name in v.tied_listed if name in v.repeats_needed):
                config, top = analysis.config(name), analysis.config(v.tied[0])
                gap = relative(name, config.throughput.value or 0.0, top.name, top.throughput.value or 1.0)
                if n is None:
                    items.append(f"{gap}: {INSEPARABLE_TEXT} at this spread (more than 100 of each)")
                elif not v.equivalent:
                    items.append(
                        f"{gap}: about {n} repeats of each would separate them if the means and spreads stay as "
                        "measured"
                    )
        if v.recommendation:
            items.append(f"**Recommended: {v.recommendation}.**")
            if v.evidence:
                items.append(f"Evidence: {v.evidence}. Rule: {v.rule}.")
        for name, why in v.not_judged.items():
            items.append(f"Not judged (never best nor recommended): {name}: {why}.")
        if v.does_not_fit:
            items.append(f"Does not fit (never recommended): {', '.join(v.does_not_fit)}.")
        if v.runner_up is not None and v.difference is not None:
            items.append(_welch_text(v, pct) + ".")
        if v.unmeasured:
            items.append(f"Not compared, no usable run (failed, or every run contended): {', '.join(v.unmeasured)}.")
        if v.provisional:
            items.append(
                "Provisional: some configuration is not judged or has no usable run; it might have been the "
                "fastest. Run more repeats (or on a quieter machine) before relying on it."
            )
        doc.bullets(items)
    if analysis.refused:
        names = ", ".join(_refused_named(c) for c in analysis.refused)
        doc.paragraph(f"Refused, never run (not compared; why: see Refused): {names}.")
    # The plot exists only where some configuration has a throughput figure (not when every run was left out).
    drawn = any(c.throughput.value is not None for c in analysis.configs)
    check = ", which you can check on the error bars of throughput.png," if drawn else ""
    doc.paragraph(
        "How to read this: each configuration's throughput is the mean over its repeated runs, with a "
        f"{pct} % confidence interval; a best configuration is named only when its interval does not overlap any "
        f"other's{check} and its lead over each survives the "
        "correction for comparing several configurations (Method). When intervals overlap the report names "
        "the tie instead of a winner: the difference is inside the run-to-run noise. Configurations are only "
        f"compared with others of the same workload ({', '.join(analysis.workload_axes)}). Read the next section "
        "before trusting any figure."
    )


ADAPTIVE_OUTCOMES = {
    "separated": "a best was separated from every other configuration",
    "equivalent": "the configurations still overlapping the fastest were shown equivalent to it",
    "out_of_reach": (
        "stopped early, undecided: at the spread measured, even twice max_repeats rounds would neither separate the "
        "contenders from the fastest nor show them equivalent; more repeats than that, or a quieter machine, would "
        "settle it"
    ),
    "max_repeats": "cut short at max_repeats, undecided: more repeats, or a quieter machine, would settle it",
    "budget": "cut short by budget_s, undecided: a larger budget would settle it",
    "undecided": "undecided (the sweep was stopped before its next round)",
}


def adaptive_text(analysis: Analysis, state: dict[str, Any]) -> str:
    spec = analysis.meta.get("spec", {})
    ended = "; ".join(f"{name}: {ADAPTIVE_OUTCOMES.get(str(o), str(o))}" for name, o in state["outcome"].items())
    budget = f", within {spec['budget_s']} s" if spec.get("budget_s") else ""
    return (
        f"Repeats were adaptive (repeats: auto): every configuration ran {spec.get('min_repeats')} times, "
        "interleaved; after each round, another round was run only for the configurations whose interval still "
        "overlapped the fastest's and that were not shown equivalent to it (two one-sided tests at 5 %, margin "
        f"±{100 * float(spec.get('equivalence_margin') or 0):g} %), at most {spec.get('max_repeats')} rounds"
        f"{budget}, and none for a configuration whose comparison with the fastest the rounds left could not settle "
        "at the spread measured (it stays tied). The stop uses the verdict's own rule (non-overlapping intervals, "
        "corrected for multiple comparisons), so the verdict is no less strict for having stopped early: on 1000 "
        "simulated sweeps of 8 identical configurations (2 % run-to-run spread) it named a false best once. "
        f"After {state['rounds']} round(s): {ended}."
    )


def trust_section(doc: Document, analysis: Analysis) -> None:
    doc.heading("Can I trust these numbers?")
    if not analysis.flags:
        doc.paragraph(
            "No flags: no run was contended, diverged or oversubscribed, no efficiency is above 1, repeats agree "
            "within 10 %, every configuration has enough measured iterations and repeats."
        )
    kinds = list(dict.fromkeys(f.kind for f in analysis.flags))
    for kind in kinds:
        found = [f for f in analysis.flags if f.kind == kind]
        doc.paragraph(f"**{kind}** ({len(found)}): {FLAG_MEANINGS[kind]}.")
        listed = [f"{f.config}: {f.detail}" if f.config else f.detail for f in found[:FLAGS_LISTED]]
        doc.bullets(listed + ([f"... and {len(found) - FLAGS_LISTED} more"] if len(found) > FLAGS_LISTED else []))
    contended = sum(r.contended for c in analysis.configs for r in c.runs)
    rerun = any(r.attempt for c in analysis.configs for r in c.runs)
    state = (
        f"counted in the figures and the verdict ({analysis.contended_used} of them used)"
        if analysis.include_contended
        else "left out of the figures and the verdict"
    )
    used = (
        " Where a repeat was re-run, its last completed attempt is used"
        + ("" if analysis.include_contended else " that was not contended")
        + "; the others are listed but not counted."
        if rerun
        else ""
    )
    doc.paragraph(
        f"Contention: a run counts as contended when other processes used more than "
        f"{analysis.contention_threshold:.0%} of the machine while it measured; {contended} run(s) were, and are "
        f"{state}.{used}"
    )


def measured_section(doc: Document, analysis: Analysis) -> None:
    doc.heading("Time spent measuring")
    parts = [
        f"{analysis.measured_s:.1f} s of the runs' time was inside measured windows (warm-up, start-up, "
        "evaluation and writing excluded)"
    ]
    if analysis.measured_share is not None:
        parts.append(f"{100 * analysis.measured_share:.0f} % of the sweep's wall time ({analysis.sweep_wall_s:.1f} s)")
    if analysis.measured_share_of_runs is not None:
        parts.append(
            f"{100 * analysis.measured_share_of_runs:.0f} % of the runs' own wall time "
            f"({analysis.runs_elapsed_s:.1f} s, start-up included)"
        )
    doc.paragraph("; ".join(parts) + ".")
    breakdown = analysis.time_breakdown()
    total = sum(breakdown.values())
    if total > 0:
        rows = [[name, seconds, 100 * seconds / total] for name, seconds in breakdown.items()]
        doc.table(["where the completed runs' wall time went", "s", "%"], rows)


def environment_section(doc: Document, analysis: Analysis) -> None:
    doc.heading("Environment")
    meta = analysis.meta
    host, versions = meta.get("host", {}), meta.get("versions", {})
    devices = sorted({c.device_type for c in analysis.configs if c.device_type})
    threads = sorted({c.threads_per_process for c in analysis.configs if c.threads_per_process})
    spec = meta.get("spec", {})
    repeats = spec.get("repeats", "?")
    if spec.get("adaptive"):
        repeats = f"adaptive, {spec.get('min_repeats', '?')} to {spec.get('max_repeats', '?')}"
    doc.table(
        ["", ""],
        [
            ["host", f"{host.get('hostname', '?')} ({host.get('platform', '?')})"],
            ["CPU", f"{host.get('cpu', '?')}, {host.get('cpu_cores', '?')} cores available"],
            ["devices", ", ".join(devices) or "-"],
            ["threads per process", ", ".join(map(str, threads)) or "-"],
            ["versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v)],
            [
                "run order",
                f"{spec.get('order', '?')} ({repeats} repeats), runs started {spec.get('start', '?')}",
            ],
            *_workload_rows(analysis),
        ],
    )


def _workload_rows(analysis: Analysis) -> list[list[str]]:
    """Which code a --workload ran (importing it ran it) and what one of its samples holds."""
    rows = {}
    for config in analysis.configs:
        info = config.workload_info or {}
        if info.get("module"):
            code = f"{info.get('path')}: {info['module']}.{info.get('function')} from {info.get('file')}"
            unit = f"1 sample = {info.get('units_per_sample')} {info.get('sample_unit')}"
            rows[code] = ["workload code", f"{code} ({unit})"]
    return list(rows.values())


def profiler_section(doc: Document, analysis: Analysis) -> None:
    profiled = [c for c in analysis.configs if c.profiler]
    if not profiled:
        return
    doc.heading("Profilers")
    for config in profiled:
        profile = config.profiler
        assert profile is not None
        if profile["kind"] != "torch":
            doc.paragraph(
                f"{config.name} ({options_text(config.grid_shown)}): Ignite {profile['kind']} profiler, every rank"
            )
        else:
            traces = [r["trace"] for r in profile["ranks"] if r.get("trace")]
            runs = config.used_runs or [r for r in config.runs if r.status == "completed"]  # where the table comes from
            where = f" in `{runs[0].run_dir}`" if runs and runs[0].run_dir else ""
            iterations = sorted({r["active_iterations"] for r in profile["ranks"]})
            doc.paragraph(
                f"{config.name} ({options_text(config.grid_shown)}): torch.profiler, every rank, over "
                f"{'/'.join(map(str, iterations))} recorded iterations: the operators with the most self time "
                f"(device time where the device was profiled). Chrome traces (Perfetto, chrome://tracing)"
                f"{where}: " + (", ".join(f"`{t}`" for t in traces) or "none written")
            )
        doc.code(format_profile(profile["kind"], profile["ranks"], with_comm=False))
        comm = trace_comm_rows(profile["ranks"]) if profile["kind"] == "torch" else []
        if comm:
            doc.paragraph(
                "Gradient all-reduce per iteration, measured twice on the traced iterations. The trace's: the "
                "union of the collective's own events in each profiler step (gloo's `gloo:all_reduce` on its worker "
                "threads, NCCL's kernels), exposed being the part outside backward compute. Ours: the union of each "
                "bucket's interval from being handed to DDP's communication hook to its all-reduce completing, "
                "exposed being last bucket ready to last done. Ratio: ours / the trace's."
            )
            doc.table(list(TRACE_COMM_HEADER), comm)
