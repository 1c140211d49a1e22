"""What a sweep's results say: per configuration, throughput with its confidence interval over repeats, speed-up
and efficiency with theirs; per workload, a verdict that names a best configuration only when the data separates
it; and every reason to doubt a number. Plain data (dataclasses), for the report and for notebooks alike.

A **workload** is what fixes the work done per sample (by default: model, dataset, amp, optimizer, sync_bn;
a spec's ``workload`` key may name others). Configurations are ranked only against others of their workload, and
speed-up is always against the same configuration run with one process.

Its data types are in :mod:`~ignite_ddl.report.model`; reading the records into configurations is in
:mod:`~ignite_ddl.report.reading`.

Example:
    >>> def run(index, repeat, procs, rate):
    ...     config = {"model": "cnn", "nproc_per_node": procs, "batch_size": 64}
    ...     summary = {"world_size": procs, "samples_per_s": rate, "threads_per_process": 2 // procs}
    ...     return {"key": f"k{index}-r{repeat}", "index": index, "repeat": repeat, "status": "completed",
    ...             "grid": {"nproc_per_node": procs}, "config": config, "summary": summary}
    >>> records = [run(0, r, 1, v) for r, v in enumerate([100, 102, 98])]
    >>> records += [run(1, r, 2, v) for r, v in enumerate([150, 153, 147])]
    >>> analysis = analyze(records)
    >>> verdict = analysis.verdicts[0]
    >>> verdict.best, round(analysis.configs[1].speedup.value, 2)
    ('cfg001', 1.5)
"""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from ignite_ddl.core.config import LAYOUT_OPTIONS, WORKLOAD_OPTIONS, TrainConfig, declared_default
from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.core.options import Role, names_with_role
from ignite_ddl.core.results import RejectedLine, iter_results
from ignite_ddl.core.text import all_reduce_wait
from ignite_ddl.measure.contention import CONTENTION_THRESHOLD
from ignite_ddl.report.model import (
    COMM_WAIT_HIGH,
    CV_HIGH,
    DATA_WAIT_HIGH,
    EFFICIENCY_LOW,
    EXPOSED_COMM_HIGH,
    FEW_ITERATIONS,
    MAX_UNREADABLE,
    MEMORY_MATERIAL,
    MIB,
    MIN_REPEATS,
    QUALITY_MARGIN,
    QUALITY_MIN_EPOCHS,
    STRAGGLER_HIGH,
    SUPERLINEAR,
    TIED_LISTED,
    Analysis,
    ConfigResult,
    Flag,
    RunResult,
    Verdict,
)

# Imported from this module before model.py held them, by code that may still do so.
from ignite_ddl.report.model import FLAG_MEANINGS as FLAG_MEANINGS
from ignite_ddl.report.model import FLAGS_LISTED as FLAGS_LISTED
from ignite_ddl.report.model import STEP_PARTS as STEP_PARTS
from ignite_ddl.report.model import TABLE_ROWS as TABLE_ROWS
from ignite_ddl.report.reading import Reader, is_number, workload_of
from ignite_ddl.report.stats import (
    CONFIDENCE,
    EQUIVALENCE_MARGIN,
    Estimate,
    difference_interval,
    equivalent,
    leads,
    positive_range,
    rank_correlation,
    ratio_interval,
    repeats_to_separate,
    welch_greater_p,
)

__all__ = [
    "Analysis",
    "ConfigResult",
    "Flag",
    "RunResult",
    "Verdict",
    "analyze",
    "load",
    "notes",
    "step_model_accuracy",
    "superlinear",
    "versus_text",
    "workload_of",
]

RULE = (
    "Each configuration's throughput is the mean over its repeats (a run is one sample: steps within a run are not "
    "independent) with a {pct} % Student-t confidence interval. Speed-up = mean throughput / the mean of the same "
    "configuration with one process; its interval comes from the delta method on the log of the ratio with "
    "Welch-Satterthwaite degrees of freedom; efficiency = speed-up / processes. Verdict: within a workload, a "
    "configuration is named best only when its interval lies entirely above every other configuration's "
    "(non-overlapping intervals; conservative: between identical configurations it names a false winner in about "
    "0.5 % of sweeps, where a t-test at the same level would in 3 to 5 %). Otherwise the configurations whose "
    "intervals overlap the fastest one's are reported as statistically tied. The one-sided Welch's t-test p-value "
    "(fastest vs runner-up) is shown beside the corrected threshold it is judged by. Only configurations judged "
    "take part: one with fewer usable runs than min_repeats, most of whose runs never settled, or with a counted run "
    "that was contended is listed as not judged, with why, and is never best nor recommended. Quality: each "
    "configuration's "
    "validation accuracy after its last epoch is compared with its workload's reference configuration (the first "
    "without gradient compression, comm_hook=none): the difference of the means over repeats with a Welch "
    "interval; a configuration whose whole interval lies below -quality_margin learns worse and is never "
    "recommended; runs of fewer than 2 epochs are not judged on quality. "
)
MULTIPLE_COMPARISONS = (
    "Multiple comparisons: with k configurations in a workload, the best must also be shown faster than each of the "
    "other k - 1 by a one-sided Welch t-test at {alpha:g} % / (k - 1) (Bonferroni over the comparisons with the "
    "leader: simultaneous one-sided bounds), so the chance of naming a wrong best stays at most {alpha:g} % however "
    "many configurations are compared (non-overlapping intervals alone let it grow with k); a configuration not "
    "shown slower that way stays tied with the fastest. Equivalence needs every tied configuration shown within the "
    "margin (an intersection-union test, which needs no correction). Adaptive repeats stop on this same rule."
)
COMPARABLE = (
    "Runs are compared only when they share torch, Ignite and CUDA versions, CPU or GPU model, CPU cores and "
    "intra-op threads; a sweep whose runs differ is judged per environment, never averaged across."
)


def rule_text(confidence: float = CONFIDENCE) -> str:
    """The report's method paragraph: how figures are computed and how a verdict is reached."""
    pct = round(100 * confidence)
    return RULE.format(pct=pct) + MULTIPLE_COMPARISONS.format(alpha=100 - pct) + " " + COMPARABLE


def _locate_run(record: dict[str, Any], out: Path) -> dict[str, Any]:
    """A record whose ``run_dir`` (written relative to where the sweep was started) is found from here: a report made
    from another folder looks for the run in the sweep's own ``runs/``."""
    run_dir = record.get("run_dir")
    if isinstance(run_dir, str) and run_dir and not Path(run_dir).is_dir():
        beside = out / "runs" / Path(run_dir).name
        if beside.is_dir():
            return {**record, "run_dir": str(beside)}
    return record


def load(results_dir: str | Path, include_contended: bool = False) -> Analysis:
    """Analyse a sweep's directory (``results.jsonl`` and ``sweep.json``); lines of the results that are not run
    records are skipped and flagged, never the records around them.

    The records are read as a stream, each validated against the results schema, and each run's summary is added
    to its configuration's figures as it is read: per run only what the verdict and the flags need is kept (a few
    hundred bytes), so memory grows with the number of runs and configurations, not with the size of the results. A
    summary is read a second time only where a run already counted is superseded by a later attempt of its
    repeat."""
    out = Path(results_dir)
    problems: list[str] = []
    meta: Any = {}
    if (out / "sweep.json").exists():
        try:
            meta = read_json(out / "sweep.json")
        except (OSError, ValueError) as e:
            problems.append(f"sweep.json: cannot be read ({e}); the spec, host and timings it holds are missing")
        if not isinstance(meta, dict) or not all(isinstance(meta.get(k, {}), dict) for k in ("spec", "host")):
            problems.append("sweep.json: not a sweep's metadata; ignored")
            meta = {}
    spec = meta.get("spec", {})
    reader = Reader(list(spec.get("workload") or WORKLOAD_OPTIONS), include_contended)
    path = out / "results.jsonl"
    rejected: list[str] = []
    skipped = 0
    configs: list[ConfigResult] = []
    if path.exists():
        with open(path, "rb") as f, _collection_paused():
            for number, offset, line, found in iter_results(f):
                if isinstance(found, RejectedLine):
                    skipped += 1
                    if len(rejected) < MAX_UNREADABLE:
                        rejected.append(f"results.jsonl line {number}: {found.reason}")
                    continue
                reader.add(_locate_run(found, out), (offset, len(line)))

            def fetch(where: tuple[int, int]) -> dict[str, Any]:
                f.seek(where[0])  # the same open file: a sweep appending meanwhile, or repairing, changes nothing
                return cast(dict[str, Any], json.loads(f.read(where[1])))

            if reader.records:
                configs = reader.configs(fetch)
    if not reader.records:
        lines = f" ({skipped} line(s) that are not run records)" if skipped else ""
        raise FileNotFoundError(f"no results in {path}{lines}")
    if skipped > len(rejected):
        rejected.append(f"results.jsonl: {skipped - len(rejected)} more line(s) that are not run records")
    analysis = _analysis(configs, reader.flags, meta, include_contended, CONFIDENCE)
    analysis.flags += [Flag("unreadable", None, problem) for problem in problems + rejected]
    return analysis


def analyze(
    records: Sequence[dict[str, Any]],
    meta: dict[str, Any] | None = None,
    include_contended: bool = False,
    confidence: float = CONFIDENCE,
) -> Analysis:
    """The analysis of a sweep's records (see the module docstring)."""
    meta = meta or {}
    reader = Reader(list(meta.get("spec", {}).get("workload") or WORKLOAD_OPTIONS), include_contended)
    for number, record in enumerate(records):
        reader.add(record, number)
    configs = reader.configs(lambda number: records[number])
    return _analysis(configs, reader.flags, meta, include_contended, confidence)


def _analysis(
    configs: list[ConfigResult], flags: list[Flag], meta: dict[str, Any], include_contended: bool, confidence: float
) -> Analysis:
    spec = meta.get("spec", {})
    axes = list(spec.get("workload") or WORKLOAD_OPTIONS)
    threshold = spec.get("contention_threshold", CONTENTION_THRESHOLD)
    limit_mb = spec.get("memory_limit_mb")
    limit = float(limit_mb) * MIB if is_number(limit_mb) and limit_mb > 0 else None
    for config in configs:
        config.out_of_memory = sum(r.status == "out_of_memory" for r in config.runs)
        too_big = limit is not None and config.peak_memory.value is not None and config.peak_memory.value > limit
        # Predicted above the limit and run anyway (run_unfit): never recommended, whatever this machine measured.
        predicted_big = limit is not None and config.predicted_memory is not None and config.predicted_memory > limit
        config.fits = not too_big and not predicted_big and not config.out_of_memory
    _speedups(configs, confidence)
    _versus(configs, confidence)
    _one_matmul_reference(configs)
    flags = flags + _flags(configs, meta)
    flags += _memory_flags(configs, limit)
    margin = spec.get("equivalence_margin")
    margin = float(margin) if is_number(margin) and 0 < margin < 1 else EQUIVALENCE_MARGIN
    least = spec.get("min_repeats")
    least = int(least) if is_number(least) and least >= 1 else MIN_REPEATS
    quality_margin = spec.get("quality_margin")
    quality_margin = float(quality_margin) if is_number(quality_margin) and quality_margin >= 0 else QUALITY_MARGIN
    _judge(configs, least)
    groups = _by_workload(configs)
    for rows in groups.values():
        _quality(rows, quality_margin, confidence)
    flags += [Flag("learns-worse", c.name, c.quality_note) for c in configs if c.learns_worse]
    verdicts = [_verdict(name, rows, confidence, margin) for name, rows in groups.items()]
    for verdict in verdicts:
        _recommend(verdict, groups[verdict.workload], limit, confidence)
    flags += [Flag("provisional", None, f"workload {v.workload}") for v in verdicts if v.provisional]
    measured = sum(r.measured_s or 0.0 for c in configs for r in c.runs if r.status == "completed")
    elapsed = sum(r.elapsed_s or 0.0 for c in configs for r in c.runs)
    sessions = meta.get("sessions") or []
    wall = sum(s.get("wall_s", 0.0) for s in sessions) or None
    return Analysis(
        configs,
        verdicts,
        flags,
        axes,
        confidence,
        rule_text(confidence),
        include_contended,
        threshold,
        measured,
        elapsed,
        wall,
        meta,
    )


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """The cyclic garbage collector off while records are read: they make no cycles, and each of its passes over the
    millions of objects a large sweep's runs hold would cost more than the reading itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _one_matmul_reference(configs: list[ConfigResult]) -> None:
    """Utilisation against one reference per device, the same for every row: the highest matmul rate any run of the
    sweep measured on that device (each run measures its own, under whatever else ran then: against its own, rows
    would each have a different yardstick)."""
    best: dict[tuple[str | None, str | None], float] = {}
    for config in configs:
        key = (config.environment, config.device_type)
        if config.matmul_rate is not None:
            best[key] = max(best.get(key, 0.0), config.matmul_rate)
    for config in configs:
        reference = best.get((config.environment, config.device_type))
        if reference is not None and config.achieved_flops_per_s is not None:
            config.matmul_reference = reference
            config.utilisation_attainable = config.achieved_flops_per_s / reference


def _kind(config: ConfigResult) -> tuple:
    """What a configuration's speed-up baseline must share with it: every option but the layout, and where it ran."""
    options = sorted((k, repr(v)) for k, v in config.config.items() if k not in LAYOUT_OPTIONS)
    return (config.environment, *options)


def _speedups(configs: list[ConfigResult], confidence: float) -> None:
    by_kind: dict[tuple, list[ConfigResult]] = defaultdict(list)
    for config in configs:
        by_kind[_kind(config)].append(config)
    for group in by_kind.values():
        base = next((c for c in group if c.world_size == 1 and c.samples_per_s), None)
        if base is None:
            continue
        for config in group:
            if not config.samples_per_s:
                continue
            if config is base:
                config.speedup = Estimate(1.0, 1.0, 1.0, len(base.samples_per_s), 0.0)
            else:
                config.speedup = ratio_interval(config.samples_per_s, base.samples_per_s, confidence)
            config.efficiency = config.speedup.scaled(1.0 / config.world_size)
            config.baseline = base.name


# What makes a step faster, each against the configuration equal to it but for that option's plain value: the
# options it is compared on, and the options that only tune it (ignored when looking for the plain twin).
# The plain value is each option's declared default.
VERSUS = {
    option: (declared_default(option), tuning)
    for option, tuning in (
        ("compile", ("compile_mode",)),
        ("comm_hook", ("powersgd_rank", "powersgd_start_iter")),
        ("static_graph", ()),
        ("gradient_as_bucket_view", ()),
    )
}


def _versus(configs: list[ConfigResult], confidence: float) -> None:
    """Each configuration that compiles or changes DDP's communication, against its plain twin: the speed-up with its
    interval, and for a compiled one the iterations after which its compilation has paid for itself."""
    by_options = {}
    for config in configs:
        by_options[(config.environment, _plain_key(config.config))] = config
    for config in configs:
        for option, (plain, tuning) in VERSUS.items():
            value = config.config.get(option, plain)
            if value == plain or not config.samples_per_s:
                continue
            twin_options = {k: v for k, v in config.config.items() if k not in tuning}
            twin_options[option] = plain
            twin = by_options.get((config.environment, _plain_key(twin_options)))
            if twin is None or not twin.samples_per_s:
                continue
            found: dict[str, Any] = {"option": option, "value": value, "plain": twin.name}
            found["speedup"] = ratio_interval(config.samples_per_s, twin.samples_per_s, confidence)
            if option == "compile" and config.compile_s is not None and config.global_batch:
                fast, slow = config.throughput.value, twin.throughput.value
                saved = config.global_batch / slow - config.global_batch / fast if fast and slow else 0.0
                cost = config.compile_s.value or 0.0
                found["compile_s"] = cost
                # A payback only from a separated difference: the speed-up's whole interval above 1.
                low = found["speedup"].low
                found["separated"] = low is not None and low > 1
                found["payback_iterations"] = cost / saved if saved > 0 and found["separated"] else None
            if option == "comm_hook":
                found["bytes"] = (twin.comm_bytes_per_step, config.comm_bytes_per_step)
                exposed = [1e3 * c.phases["exposed_comm"] if c.comm_timed else None for c in (twin, config)]
                found["exposed_ms"] = tuple(exposed)
                found["val_accuracy"] = (twin.val_accuracy, config.val_accuracy)
            config.versus.append(found)


_RUNS_OWN = set(names_with_role(TrainConfig, Role.OUTPUT, Role.MEASUREMENT))


def _plain_key(options: dict[str, Any]) -> tuple:
    """A configuration's options as a key, leaving out where its files went and what it measured (a run's own), and
    the options that only tune another (compile_mode, ...)."""
    left_out = {t for _, ts in VERSUS.values() for t in ts} | _RUNS_OWN
    plain = {k: value for k, (value, _) in VERSUS.items()}  # a plain value is the same as none given (older records)
    return tuple(
        sorted((k, repr(v)) for k, v in options.items() if k not in left_out and not (k in plain and v == plain[k]))
    )


def _by_workload(configs: list[ConfigResult]) -> dict[str, list[ConfigResult]]:
    groups: dict[str, list[ConfigResult]] = defaultdict(list)
    for config in configs:
        groups[config.workload].append(config)
    return dict(groups)


def _judge(configs: list[ConfigResult], least: int) -> None:
    """Mark each configuration the verdict must pass over, and why: fewer usable runs than ``least``
    (min_repeats), most of its runs never settled (one such run among several is flagged, and its spread is already
    in the interval), a run counted that was measured under contention."""
    for config in configs:
        runs = len(config.samples_per_s)
        if not runs:
            continue  # no usable run: listed apart, as unmeasured
        reasons = []
        if runs < least:
            reasons.append(f"{runs} usable run{'s' if runs != 1 else ''} of the {least} needed (min_repeats)")
        if 2 * config.unsettled_runs > runs:
            reasons.append(f"unsettled ({config.unsettled_runs} of its {runs} runs never settled)")
        contended = sum(r.used and r.contended for r in config.runs)
        if contended:
            reasons.append(f"contended ({contended} of its runs counted were measured under contention)")
        config.not_judged = "; ".join(reasons) or None


def _quality(configs: list[ConfigResult], margin: float, confidence: float) -> None:
    """What each configuration of one workload learnt against the workload's reference configuration (the first
    without gradient compression, comm_hook=none): the validation accuracy's difference over repeats, with its
    interval. "learns worse" when the whole interval lies below ``-margin``, "diverged" when a run diverged; not
    judged when the runs trained fewer than QUALITY_MIN_EPOCHS epochs or have too few accuracies to compare."""
    plain = [
        c for c in configs if c.option("comm_hook") == declared_default("comm_hook") and len(c.val_accuracies) >= 2
    ]
    reference = min(plain, key=lambda c: (c.index, c.suffix), default=None)
    points = f"{100 * margin:g} point{'' if 100 * margin == 1 else 's'}"
    for config in configs:
        if not config.used_runs:
            continue
        config.quality_reference = reference.name if reference is not None else None
        diverged = [r for r in config.used_runs if r.diverged]
        epochs = [r.epochs for r in config.used_runs if r.epochs is not None]
        if diverged:
            config.quality = "diverged"
            config.quality_note = f"diverged in {len(diverged)} run(s): {diverged[0].diverged}"
            continue
        if epochs and min(epochs) < QUALITY_MIN_EPOCHS:
            config.quality = "not judged"
            config.quality_note = f"quality not judged: {min(epochs)} epoch{'s' if min(epochs) != 1 else ''}"
            continue
        if config is reference:
            config.quality = "reference"
            config.quality_note = "the reference of its workload's quality (the first without gradient compression)"
            continue
        accuracies = config.val_accuracies
        if reference is None or len(accuracies) < 2:
            config.quality = "not judged"
            config.quality_note = (
                "quality not judged: no reference configuration with 2 or more runs (comm_hook=none)"
                if reference is None
                else f"quality not judged: {len(accuracies)} run(s) with a validation accuracy (2 needed)"
            )
            continue
        d = difference_interval(accuracies, reference.val_accuracies, confidence)
        config.accuracy_difference = d
        assert d.value is not None and d.low is not None and d.high is not None  # 2 or more runs of each
        pct = round(100 * confidence)
        shown = (
            f"validation accuracy {100 * d.value:+.1f} points against {reference.name} "
            f"({pct} % interval {100 * d.low:+.1f} to {100 * d.high:+.1f})"
        )
        if d.high < -margin:
            config.quality = "learns worse"
            config.quality_note = f"learns worse: {shown}, beyond the margin of {points}"
        else:
            config.quality = "no worse"
            config.quality_note = f"not shown worse by more than {points}: {shown}"


# The three verdicts on configurations that no rule separates, each with its one phrasing: tied (the intervals
# overlap), equivalent (the equivalence test passed), not separable at any practical number of repeats.
TIED_TEXT = "statistically tied"
TIED_MEANS = "these runs cannot tell them apart"
EQUIVALENT_TEXT = "equivalent within ±{margin:g} %"
EQUIVALENT_MEANS = (
    "the equivalence test passed (two one-sided tests at 5 %): none is slower than the fastest by more than the margin"
)
INSEPARABLE_TEXT = "not separable at any practical number of repeats"


def relative(
    name: str, value: float, base_name: str, base: float, faster: str = "faster", slower: str = "slower"
) -> str:
    """A relative difference that names its base: "cfg002 is 1.8 % slower than cfg003"."""
    change = value / base - 1
    return f"{name} is {100 * abs(change):.1f} % {faster if change >= 0 else slower} than {base_name}"


def _verdict(
    workload: str, configs: list[ConfigResult], confidence: float, margin: float = EQUIVALENCE_MARGIN
) -> Verdict:
    ranked = sorted(
        (c for c in configs if c.throughput.value is not None),
        key=lambda c: cast(float, c.throughput.value),  # not None: the filter keeps the configurations with a value
        reverse=True,
    )
    names = [c.name for c in ranked]
    measured = [c for c in ranked if c.not_judged is None]  # only these can be best, tied or recommended
    not_judged = {c.name: c.not_judged for c in ranked if c.not_judged is not None}
    unmeasured = [c.name for c in configs if c.throughput.value is None]
    # A configuration without a usable run (failed, or every run contended), or passed over, might have been the
    # fastest.
    provisional = bool(unmeasured) or bool(not_judged)
    if not measured:
        reason = (
            "no configuration of this workload can be judged (see Not judged)"
            if ranked
            else "no configuration of this workload has a usable run"
        )
        return Verdict(workload, names, None, [], True, reason=reason, unmeasured=unmeasured, not_judged=not_judged)
    top = measured[0]
    if len(measured) == 1:
        if not_judged:  # others measured but passed over: nothing it was compared with, so no "best"
            reason = f"{top.name} is the only configuration judged: there is nothing it was compared with"
            return Verdict(workload, names, None, [], True, reason=reason, unmeasured=unmeasured, not_judged=not_judged)
        reason = "the only configuration of its workload" if len(configs) == 1 else "the only one with a usable run"
        return Verdict(
            workload, names, top.name, [], provisional, reason=reason, unmeasured=unmeasured, not_judged=not_judged
        )
    runner = measured[1]
    assert top.throughput.value is not None and runner.throughput.value is not None
    difference = top.throughput.value / runner.throughput.value - 1
    others = len(measured) - 1  # the leader is compared with each: the family the correction is over
    verdict = Verdict(
        workload,
        names,
        None,
        [],
        provisional,
        runner.name,
        difference,
        welch_greater_p(top.samples_per_s, runner.samples_per_s),
        unmeasured=unmeasured,
        welch_threshold=(1 - confidence) / others,
        not_judged=not_judged,
    )
    if not top.throughput.has_interval:
        verdict.tied = [c.name for c in measured]
        verdict.reason = "the fastest configuration has a single usable run, so no interval: nothing can be told apart"
        return verdict
    overlapping = [c for c in measured[1:] if not leads(top.throughput, c.throughput, others, confidence)]
    pct, alpha = round(100 * confidence), 100 - round(100 * confidence)
    test = f"a one-sided Welch t-test at {alpha:g} %" + (f" / {others} (Bonferroni)" if others > 1 else "")
    if not overlapping:
        verdict.best = top.name
        each = "the other configuration judged" if others == 1 else f"each of the {others} others judged"
        verdict.reason = (
            f"its {pct} % interval lies above every other configuration's and it is shown faster than {each} by "
            f"{test}; {relative(top.name, top.throughput.value, runner.name, runner.throughput.value)}"
        )
        return verdict
    verdict.tied = [top.name] + [c.name for c in overlapping]
    verdict.repeats_needed = {
        c.name: repeats_to_separate(top.throughput, c.throughput, confidence, comparisons=others) for c in overlapping
    }
    verdict.margin = margin
    verdict.equivalent = all(equivalent(top.samples_per_s, c.samples_per_s, margin) for c in overlapping)
    apart = [c.name for c in overlapping if _intervals_apart(top, c)]
    if not apart:
        verdict.reason = "their intervals overlap the fastest configuration's"
    else:
        near = len(overlapping) - len(apart)
        listed = ", ".join(apart[:TIED_LISTED]) + (
            f" and {len(apart) - TIED_LISTED} more" if len(apart) > TIED_LISTED else ""
        )
        verdict.reason = (
            (f"{near} of their intervals overlap the fastest configuration's; " if near else "")
            + f"the fastest's interval lies above that of {listed}, but with {others + 1} configurations compared "
            f"{test} does not show it faster"
        )
    return verdict


def _intervals_apart(top: ConfigResult, other: ConfigResult) -> bool:
    low, high = top.throughput.low, other.throughput.high
    return low is not None and high is not None and low > high


def _memory_flags(configs: list[ConfigResult], limit: float | None) -> list[Flag]:
    flags = []
    for config in configs:
        if config.out_of_memory:
            flags.append(Flag("out-of-memory", config.name, f"{config.out_of_memory} run(s) ran out of memory"))
        elif not config.fits and limit is not None and config.peak_memory.value is not None:
            if config.peak_memory.value <= limit:  # fits as measured: it was predicted not to
                said = f"predicted peak {cast(float, config.predicted_memory) / MIB:.0f} MiB per rank > the limit"
                flags.append(Flag("does-not-fit", config.name, f"{said} of {limit / MIB:.0f} MiB (run anyway)"))
                continue
            flags.append(
                Flag(
                    "does-not-fit",
                    config.name,
                    f"peak {config.memory_kind} memory {config.peak_memory.value / MIB:.0f} MiB per rank > the "
                    f"limit of {limit / MIB:.0f} MiB",
                )
            )
    return flags


def _less_memory(a: ConfigResult, b: ConfigResult) -> bool:
    """Whether ``a`` needs less peak memory per rank than ``b`` beyond the noise: their intervals apart where both
    have one, else at least MEMORY_MATERIAL less (a difference inside the runs' spread is no reason to choose)."""
    mine, theirs = a.peak_memory, b.peak_memory
    if mine.value is None or not theirs.value:
        return False
    if mine.has_interval and theirs.has_interval:
        return cast(float, mine.high) < cast(float, theirs.low)
    return mine.value <= (1 - MEMORY_MATERIAL) * theirs.value


def _cheaper(cheap: ConfigResult, than: ConfigResult) -> str:
    """What makes ``cheap`` cheaper than ``than``, in words: memory per rank and in all (every rank's peak)."""
    reasons = []
    if cheap.world_size < than.world_size:
        reasons.append(
            f"uses {cheap.world_size} process{'es' if cheap.world_size > 1 else ''} instead of {than.world_size}"
        )
    mine, theirs = cheap.peak_memory.value, than.peak_memory.value
    if mine is not None and theirs:
        all_mine, all_theirs = mine * cheap.world_size, theirs * than.world_size
        per_rank = 1 - mine / theirs
        if _less_memory(cheap, than) or all_mine < (1 - MEMORY_MATERIAL) * all_theirs:
            ranks = f"{than.world_size} x {theirs / MIB:.0f} = " if than.world_size > 1 else ""
            mine_all = f"{cheap.world_size} x {mine / MIB:.0f} = " if cheap.world_size > 1 else ""
            more_or_less = "less" if per_rank >= 0 else "more"
            rank_text = (
                f"needs {100 * abs(per_rank):.0f} % {more_or_less} memory per rank ({mine / MIB:.0f} against "
                f"{theirs / MIB:.0f} MiB)"
            )
            reasons.append(
                f"{rank_text}, {100 * (1 - all_mine / all_theirs):.0f} % less in all ({mine_all}{all_mine / MIB:.0f} "
                f"against {ranks}{all_theirs / MIB:.0f} MiB)"
            )
    return " and ".join(reasons) or "is no more expensive"


def _evidence(config: ConfigResult, confidence: float) -> str:
    """A configuration's throughput as evidence: mean, interval, runs."""
    t, runs = config.throughput, len(config.samples_per_s)
    interval = f", {round(100 * confidence)} % interval {positive_range(t)}" if t.has_interval else ""
    return f"{config.name}: {t.value:.0f} samples/s{interval}, {runs} run{'s' if runs != 1 else ''}"


RECOMMEND_RULE = (
    "the fastest configuration that is judged (at least min_repeats usable runs, most of them settled, none "
    "contended), fits, and does not learn worse than its workload's reference; among configurations tied on speed "
    "with it, the cheapest (fewest processes, then the lowest peak memory per rank)"
)


def _recommend(
    verdict: Verdict, configs: list[ConfigResult], limit: float | None, confidence: float = CONFIDENCE
) -> None:
    """The configuration to use (:data:`RECOMMEND_RULE`); every faster configuration passed over says why."""
    measured = sorted(
        (c for c in configs if c.throughput.value is not None), key=lambda c: -cast(float, c.throughput.value)
    )
    verdict.does_not_fit = [c.name for c in configs if not c.fits]
    verdict.rule = RECOMMEND_RULE

    def why_not(c: ConfigResult) -> str | None:
        if c.not_judged is not None:
            return f"not judged: {c.not_judged}"
        if not c.fits:
            return "does not fit" + (" (ran out of memory)" if c.out_of_memory else " (above memory_limit_mb)")
        if c.learns_worse:
            return c.quality_note
        return None

    candidates = [c for c in measured if why_not(c) is None]
    if not candidates:
        if measured:
            verdict.recommendation = "none: every configuration measured is not judged, does not fit or learns worse"
            verdict.passed_over = {c.name: cast(str, why_not(c)) for c in measured}
        return
    lead = candidates[0]
    ahead = measured[: measured.index(lead)]  # faster than the lead, each passed over
    verdict.passed_over = {c.name: cast(str, why_not(c)) for c in ahead}
    passed = "; ".join(f"{name} faster but {why}" for name, why in verdict.passed_over.items())
    passed = f" ({passed})" if passed else ""
    quality = f"; {lead.quality_note}" if lead.quality == "not judged" else ""
    judged = [c for c in measured if c.not_judged is None]
    if verdict.best is not None and verdict.best == lead.name:
        verdict.recommended = lead.name
        verdict.evidence = _evidence(lead, confidence)
        verdict.recommendation = (
            f"{lead.name}: the fastest, separated from every other configuration judged{passed}{quality}"
        )
        return
    peers = [lead]
    if lead.throughput.has_interval:  # tied with the lead by the verdict's own rule
        rivals = len(judged) - 1
        peers += [c for c in candidates[1:] if not leads(lead.throughput, c.throughput, rivals, confidence)]
    infinite = float("inf")
    cheapest = min(
        peers, key=lambda c: (c.world_size, c.peak_memory.value or infinite, -cast(float, c.throughput.value))
    )
    if cheapest.world_size == lead.world_size and not _less_memory(cheapest, lead):
        cheapest = lead  # cheaper only inside the noise: the fastest is as cheap
    verdict.recommended = cheapest.name
    verdict.evidence = _evidence(cheapest, confidence)
    if cheapest.quality == "not judged":
        quality = f"; {cheapest.quality_note}"
    if len(judged) == 1:
        verdict.recommendation = f"{lead.name}: the only configuration judged{passed}{quality}"
    elif len(peers) == 1:
        verdict.recommendation = f"{lead.name}: the fastest configuration that can be recommended{passed}{quality}"
    elif cheapest is lead:
        others = ", ".join(c.name for c in peers if c is not lead)
        verdict.recommendation = (
            f"{lead.name}: tied on speed with {others}, and none of them is cheaper{passed}{quality}"
        )
    else:
        verdict.recommendation = (
            f"{cheapest.name}: tied on speed with {lead.name}; {cheapest.name} {_cheaper(cheapest, lead)}"
            f"{passed}{quality}"
        )


def superlinear(efficiency: Estimate | None) -> bool:
    """Whether an efficiency, as printed (two decimals), is above 1: more than N times one process on N."""
    return efficiency is not None and efficiency.value is not None and round(efficiency.value, 2) > SUPERLINEAR


def _flags(configs: list[ConfigResult], meta: dict[str, Any]) -> list[Flag]:
    flags = []
    cores = (meta.get("host") or {}).get("cpu_cores")
    for config in configs:
        for run in config.runs:
            where = f"repeat {run.repeat + 1}" + (f", re-run {run.attempt}" if run.attempt else "")
            if run.contended:
                share = (
                    "" if run.foreign_cpu_share is None else f": others used {run.foreign_cpu_share:.0%} of the CPUs"
                )
                flags.append(Flag("contended", config.name, f"{where}{share}"))
            if run.diverged:
                flags.append(Flag("diverged", config.name, f"{where}: {run.diverged}"))
        if config.efficiency is not None and superlinear(config.efficiency):
            interval = config.efficiency
            detail = f"efficiency {interval.value:.2f}"
            if interval.has_interval:
                detail += f" ({interval.low:.2f} to {interval.high:.2f})"
            flags.append(Flag("superlinear", config.name, f"{detail} on {config.world_size} processes"))
        cv = config.throughput.cv
        if cv is not None and cv > CV_HIGH:
            flags.append(Flag("high-variation", config.name, f"repeats vary by {cv:.0%} (sd / mean)"))
        node_cores = config.cpu_cores or cores
        per_node = config.config.get("nproc_per_node") or 1
        threads = config.threads_per_process
        if config.device_type == "cpu" and node_cores and threads and per_node * threads > node_cores:
            flags.append(
                Flag("oversubscribed", config.name, f"{per_node} processes x {threads} threads on {node_cores} cores")
            )
        if config.measured_iterations is not None and config.measured_iterations < FEW_ITERATIONS:
            flags.append(Flag("few-iterations", config.name, f"{config.measured_iterations} measured iterations"))
        if config.recompilations:
            flags.append(Flag("recompiled", config.name, _recompile_text(config)))
        if config.unsettled_runs:
            flags.append(Flag("unsettled", config.name, f"{config.unsettled_runs} run(s) never settled"))
        if config.utilisation_attainable is not None and config.utilisation_attainable > 1.0:
            flags.append(
                Flag(
                    "above-measured-peak",
                    config.name,
                    f"{100 * config.utilisation_attainable:.0f} % of the matmul rate measured on its device",
                )
            )
    return flags


def _recompile_text(config: ConfigResult) -> str:
    """ "recompiled 3 time(s): shapes changed (...)" for a configuration whose runs recompiled."""
    from ignite_ddl.measure.compilation import recompile_hint  # torch-free module-level code, imported lazily

    hint = recompile_hint(config.recompile_reasons)
    reason = config.recompile_reasons[0] if config.recompile_reasons else "reason not recorded"
    return f"recompiled {config.recompilations} time(s): {hint or reason}" + (f" ({reason})" if hint else "")


def versus_text(config: ConfigResult, found: dict[str, Any]) -> str:
    """One comparison of :attr:`ConfigResult.versus` in words."""
    speedup: Estimate = found["speedup"]
    change = f"{100 * (speedup.value - 1):+.0f} % samples/s" if speedup.value is not None else "samples/s unknown"
    if speedup.low is not None and speedup.high is not None:
        change += f" (95 % interval {100 * (speedup.low - 1):+.0f} to {100 * (speedup.high - 1):+.0f} %)"
    head = f"{config.name} ({found['option']}={found['value']}) vs {found['plain']}: {change}"
    if found["option"] == "compile" and "compile_s" in found:
        payback = found["payback_iterations"]
        if payback is None and speedup.value is not None and speedup.value > 1 and not found.get("separated"):
            return (
                f"{head}; its {found['compile_s']:.0f} s of compilation: no payback figure, the compiled speed is not "
                f"separated from {found['plain']}'s (the speed-up's interval reaches 1 or below, or is missing)"
            )
        if payback is None:
            return f"{head}; its {found['compile_s']:.0f} s of compilation never pay back (not faster per step)"
        return f"{head}; pays its {found['compile_s']:.0f} s of compilation back after {payback:.0f} iterations"
    if found["option"] == "comm_hook":
        parts = []
        before, after = found["bytes"]
        if before and after:
            phase = ""
            if found["value"] == "powersgd":
                start = config.option("powersgd_start_iter")
                phase = (
                    f" (its steady phase, measured after iteration {start} (powersgd_start_iter): its first {start} "
                    f"iterations send the uncompressed {before / 1e6:.3g} MB)"
                )
            parts.append(f"bytes per step {before / 1e6:.3g} -> {after / 1e6:.3g} MB{phase}")
        before, after = found["exposed_ms"]
        if before is not None and after is not None:
            parts.append(f"exposed communication {before:.1f} -> {after:.1f} ms")
        before, after = found["val_accuracy"]
        if before is not None and after is not None:
            parts.append(f"val accuracy {before:.3f} -> {after:.3f}")
        return head + ("; " + ", ".join(parts) if parts else "")
    return head


def notes(analysis: Analysis) -> list[str]:
    """Where time is lost, per configuration, and what to try."""
    found = []
    for config in analysis.configs:
        if config.data_share is not None and config.data_share > DATA_WAIT_HIGH:
            found.append(
                f"{config.name}: data wait {100 * config.data_share:.0f}% of each iteration -> raise "
                f"num_workers (now {config.option('num_workers')}) or make loading cheaper"
            )
        if config.exposed_share is not None and config.exposed_share > EXPOSED_COMM_HIGH:
            overlap = f", {100 * config.overlap:.0f} % of it overlapped" if config.overlap is not None else ""
            found.append(
                f"{config.name}: exposed communication is {100 * config.exposed_share:.0f} % of the step{overlap} "
                f"-> larger buckets (--bucket-cap-mb, now {config.option('bucket_cap_mb'):g}), "
                "gradient accumulation, or a larger batch per rank so that compute hides the all-reduce"
            )
        wait = config.comm_wait
        if wait and wait["share"] > COMM_WAIT_HIGH:
            found.append(
                f"{config.name}: {all_reduce_wait(wait['waiting'], wait['wait_s'], wait['rank'])} "
                f"({100 * wait['share']:.0f} % of the step) -> look at what rank {wait['rank']} does "
                "differently before backward (its data, its device, other work on its cores)"
            )
        straggler = config.straggler
        if straggler and straggler["ratio"] > STRAGGLER_HIGH:
            found.append(
                f"{config.name}: rank {straggler['rank']} is a straggler (own time {straggler['ratio']:.2f}x "
                "the median rank's) -> look at its data loading, its device, or other work on its cores"
            )
        efficiency = config.efficiency
        if efficiency is None or efficiency.value is None or config.world_size < 2:
            continue
        if efficiency.value >= EFFICIENCY_LOW:
            continue
        cores = config.cpu_cores or (analysis.meta.get("host") or {}).get("cpu_cores")
        per_node = config.config.get("nproc_per_node") or 1
        threads = config.threads_per_process or 1
        base = analysis.config(config.baseline) if config.baseline else None
        base_threads = base.threads_per_process if base else None
        on_cpu = config.device_type == "cpu"
        if on_cpu and cores and per_node * threads > cores:
            found.append(
                f"{config.name}: {per_node} processes x {threads} threads on {cores} cores is "
                f"oversubscribed (efficiency {efficiency.value:.2f}) -> at most {cores} processes here"
            )
        elif on_cpu and cores and base_threads and base_threads >= cores:
            found.append(
                f"{config.name}: efficiency {efficiency.value:.2f}: the 1-process run already kept all "
                f"{cores} cores busy with {base_threads} intra-op threads, so more processes add "
                "communication, not compute"
            )
        else:
            found.append(
                f"{config.name}: scaling efficiency {efficiency.value:.2f} -> communication and "
                "per-process overhead dominate; try a larger batch per rank"
            )
    return found


def step_model_accuracy(analysis: Analysis) -> dict[str, Any]:
    """The step-time model's median absolute relative error and rank correlation (Spearman) with the measured step
    times, over the configurations it predicted."""
    predicted = _mapping(_mapping(analysis.meta.get("step_model")).get("configurations"))
    pairs = []
    for c in analysis.configs:
        step = _mapping(predicted.get(str(c.index))).get("step_s")
        if step and c.global_batch and c.throughput.value:
            pairs.append((float(step), c.global_batch / c.throughput.value))
    errors = [abs(p - m) / m for p, m in pairs]
    return {
        "configurations": len(pairs),
        "median_abs_error": statistics.median(errors) if errors else None,
        "rank_correlation": rank_correlation([p for p, _ in pairs], [m for _, m in pairs]),
    }


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
