"""The report as a document, written twice (Markdown and HTML), with the verdict first, then whether the numbers can
be trusted, then the detail behind them."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from ignite_ddl.core.outputs import output_errors, write_bytes
from ignite_ddl.report.analysis import (
    EQUIVALENT_MEANS,
    EQUIVALENT_TEXT,
    INSEPARABLE_TEXT,
    TIED_MEANS,
    TIED_TEXT,
    load,
    notes,
    relative,
    superlinear,
    versus_text,
)
from ignite_ddl.report.hparams import write_hparams
from ignite_ddl.report.model import FLAG_MEANINGS, FLAGS_LISTED, MIB, Analysis, ConfigResult, Verdict
from ignite_ddl.report.plots import make_plots
from ignite_ddl.report.stats import Estimate, positive_range

__all__ = ["Document", "verdict_lines", "write_report"]


class Document:
    """A report as a list of blocks, written as Markdown and as HTML."""

    def __init__(self) -> None:
        self.blocks: list[tuple[str, Any]] = []

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(("heading", (level, text)))

    def paragraph(self, text: str) -> None:
        self.blocks.append(("paragraph", text))

    def bullets(self, items: list[str]) -> None:
        if items:
            self.blocks.append(("bullets", items))

    def table(self, header: list[str], rows: list[list[Any]]) -> None:
        self.blocks.append(("table", (header, [[_cell(v) for v in row] for row in rows])))

    def image(self, path: str, alt: str) -> None:
        self.blocks.append(("image", (path, alt)))

    def code(self, text: str) -> None:
        self.blocks.append(("code", text))

    def markdown(self) -> str:
        out = []
        for kind, value in self.blocks:
            if kind == "heading":
                out.append("#" * value[0] + " " + _md_inline(value[1]))
            elif kind == "paragraph":
                out.append(_md_inline(value))
            elif kind == "bullets":
                out.append("\n".join(f"- {_md_inline(item)}" for item in value))
            elif kind == "table":
                header, rows = value
                lines = ["| " + " | ".join(map(_md_cell, header)) + " |", "|" + "---|" * len(header)]
                lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
                out.append("\n".join(lines))
            elif kind == "image":
                out.append(f"![{value[1]}]({value[0]})")
            else:
                out.append("```\n" + value + "\n```")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        def e(text: str) -> str:  # escaped, with the Markdown emphasis and code spans the report uses
            text = html.escape(text)
            text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
            return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)

        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>", _STYLE]
        for kind, value in self.blocks:
            if kind == "heading":
                out.append(f"<h{value[0]}>{e(value[1])}</h{value[0]}>")
            elif kind == "paragraph":
                out.append(f"<p>{e(value)}</p>")
            elif kind == "bullets":
                out.append("<ul>" + "".join(f"<li>{e(item)}</li>" for item in value) + "</ul>")
            elif kind == "table":
                header, rows = value
                # A table scrolls inside its own box, never the page; a header may break after _ or /.
                cells = "".join(f"<th>{_breakable(e(h))}</th>" for h in header)
                out.append(f"<div class='table'><table><thead><tr>{cells}</tr></thead><tbody>")
                out += [
                    "<tr>" + "".join(f"<td{_cell_class(c)}>{_ranges(e(c))}</td>" for c in row) + "</tr>" for row in rows
                ]
                out.append("</tbody></table></div>")
            elif kind == "image":
                out.append(f"<p><img src='{html.escape(value[0])}' alt='{html.escape(value[1])}'></p>")
            else:
                out.append(f"<pre>{html.escape(value)}</pre>")
        return "\n".join(out) + "</body></html>\n"


# The page: text at most 1100 px wide, centred. Tables are compact (a decision table of a dozen columns fits a
# 1366 px laptop screen, tests/test_report_browser.py) and each sits in a box that scrolls sideways on its own
# when it is wider than the page: a wide detail table never pushes the page, or the decision table, off-screen.
_STYLE = (
    "<style>body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 12px;line-height:1.35}"
    "div.table{max-width:100%;overflow-x:auto;margin:0.6em 0}"
    "table{border-collapse:collapse;font-size:14px}"
    "td,th{border:1px solid #ccc;padding:3px 5px;text-align:right}"
    "th{background:#f3f3f3;vertical-align:bottom}"
    "td:first-child,th:first-child{text-align:left}.n{white-space:nowrap}"
    "td.t{text-align:left;font-size:13px}td.t.long{min-width:14em}"
    "img{max-width:100%}pre{overflow-x:auto}</style></head><body>"
)


_RANGE = re.compile(r"\(?-?\d[\d.]* to -?\d[\d.]*\)?")


def _ranges(cell: str) -> str:
    """An escaped cell with each interval (``1.66 to 1.74``) kept on one line."""
    return _RANGE.sub(lambda m: f"<span class='n'>{m.group(0)}</span>", cell)


def _cell_class(text: str) -> str:
    """A figure (no space, or a range ``2817 to 2873``) stays on one line; a text is set left and smaller, and a
    long one (a workload's options) gets room for a few words a line."""
    if " " not in text or _RANGE.fullmatch(text):
        return " class='n'"
    return " class='t long'" if len(text) > 50 else " class='t'" if len(text) > 30 else ""


def _breakable(header: str) -> str:
    """An escaped column header with a break opportunity after each ``_`` and ``/`` (``nproc_per_node``)."""
    return re.sub(r"([_/])", r"\1<wbr>", header)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value).replace("|", "/")


# What turns text from a sweep (a grid value, a name, an error message) into Markdown structure: a line break (a new
# heading, list item or table row), the start of an HTML element or comment (<script>, </p>, <!--), a character
# reference (&lt;). The report's own markup (**bold**, `code`) is left alone.
_MD_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_MD_ENTITY = re.compile(r"&(?=#?\w+;)")


def _md_inline(text: str) -> str:
    """``text`` as one line of Markdown that shows what it says: line breaks become spaces, and what would start an
    HTML element or a character reference is backslash-escaped (``\\<script>`` shows ``<script>`` as text)."""
    text = " ".join(text.splitlines())
    return _MD_ENTITY.sub(r"\\&", _MD_TAG.sub(r"\\<", text))


def _md_cell(text: str) -> str:
    """A Markdown table cell: :func:`_md_inline`, and a ``|`` escaped so that it cannot end the cell."""
    return _md_inline(text).replace("|", "\\|")


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


_interval = positive_range


def _ratio(e: Estimate | None) -> str:
    if e is None or e.value is None:
        return "-"
    return f"{e.value:.2f}" + (f" ({_interval(e, '.2f')})" if e.has_interval and e.low != e.high else "")


def _options(grid: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in grid.items())


def _named(analysis: Analysis, name: str) -> str:
    config = analysis.config(name)
    return f"{name} ({_options(config.grid)})"


def _figure(config: ConfigResult, pct: int) -> str:
    t = config.throughput
    interval = f", {pct} % interval {_interval(t)}" if t.has_interval else ", no interval"
    runs = len(config.samples_per_s)
    return f"{_rate(t.value)} samples/s{interval}, {runs} run{'s' if runs != 1 else ''}"


def _welch_text(v: Verdict, pct: int) -> str:
    """The runner-up's comparison: the relative difference naming its base, and the p-value beside the corrected
    threshold it was judged by."""
    assert v.runner_up is not None and v.difference is not None and v.tied is not None
    top = v.best or v.tied[0]
    text = f"{relative(top, 1 + v.difference, v.runner_up, 1.0)} (the runner-up)"
    if v.welch_p is None:
        return text + "; Welch's t-test needs 2 runs of each"
    alpha = (100 - pct) / 100
    threshold = v.welch_threshold if v.welch_threshold is not None else alpha
    comparisons = round(alpha / threshold)
    corrected = f" ({100 - pct:g} % / {comparisons}, Bonferroni)" if comparisons > 1 else ""
    significant = "below it" if v.welch_p <= threshold else "not below it: not shown faster"
    return (
        f"{text}; one-sided Welch's t-test p = {v.welch_p:.3g} against the corrected threshold {threshold:.3g}"
        f"{corrected}: {significant}"
    )


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
            lines.append(f"{where}no verdict: {v.reason}")
        if v.recommendation and not (v.best is not None and v.recommended == v.best):
            lines.append(f"{where}recommended: {v.recommendation}")
        for name, why in v.not_judged.items():
            lines.append(f"{where}not judged: {name}: {why}" + (f" ({note})" if note else ""))
    return lines


def _verdict_section(doc: Document, analysis: Analysis) -> None:
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


def _adaptive_text(analysis: Analysis, state: dict[str, Any]) -> str:
    spec = analysis.meta.get("spec", {})
    ended = "; ".join(f"{name}: {ADAPTIVE_OUTCOMES.get(str(o), str(o))}" for name, o in state["outcome"].items())
    budget = f", within {spec['budget_s']} s" if spec.get("budget_s") else ""
    return (
        f"Repeats were adaptive (repeats: auto): every configuration ran {spec.get('min_repeats')} times, "
        "interleaved; after each round, another round was run only for the configurations whose interval still "
        "overlapped the fastest's and that were not shown equivalent to it (two one-sided tests at 5 %, margin "
        f"±{100 * float(spec.get('equivalence_margin') or 0):g} %), at most {spec.get('max_repeats')} rounds"
        f"{budget}, and none once the rounds left could not settle the comparison at the spread measured. The stop "
        "uses the verdict's own rule (non-overlapping intervals, corrected for multiple comparisons), so the verdict "
        "is no less strict for having stopped early: on 1000 simulated sweeps of 8 identical configurations (2 % "
        "run-to-run spread) it named no false best. "
        f"After {state['rounds']} round(s): {ended}."
    )


def _trust_section(doc: Document, analysis: Analysis) -> None:
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


def _measured_section(doc: Document, analysis: Analysis) -> None:
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


def _mb(nbytes: float | None) -> float | None:
    return None if nbytes is None else nbytes / MIB


def _config_flags(analysis: Analysis, config: ConfigResult) -> str:
    kinds = list(dict.fromkeys(f.kind for f in analysis.flags if f.config == config.name))
    return ", ".join(kinds)


def _decision_table(analysis: Analysis) -> Table:
    """What a decision needs, narrow enough for a laptop's screen: the configuration, its throughput with the
    interval, speed-up and efficiency, peak memory per rank, and its flags. The rest is in the detail tables."""
    grid_keys = list(dict.fromkeys(k for c in analysis.configs for k in c.grid))
    several = _workload_column(analysis, grid_keys)
    pct = round(100 * analysis.confidence)
    memory = any(c.peak_memory.value is not None for c in analysis.configs)
    header = [
        "config",
        *grid_keys,
        *(["workload"] if several else []),
        "samples/s",
        f"{pct}% interval",
        "speed-up",
        "efficiency",
        *(["peak memory/rank MiB"] if memory else []),
        "flags",
    ]
    rows = []
    for c in analysis.configs:
        rows.append(
            [
                c.name,
                *[c.grid.get(k) for k in grid_keys],
                *([c.workload] if several else []),
                _rate(c.throughput.value),
                _interval(c.throughput),
                _ratio(c.speedup),
                _efficiency_cell(c),
                *([_memory_cell(c)] if memory else []),
                _config_flags(analysis, c),
            ]
        )
    return header, rows


def _workload_column(analysis: Analysis, grid_keys: list[str]) -> bool:
    """Whether the decision table needs a workload column: several workloads, told apart by something the grid's
    columns do not show (a workload option that is not a grid axis, or runs from different environments)."""
    if len(analysis.verdicts) <= 1:
        return False
    axes = analysis.workload_axes
    varying = {a for a in axes if len({repr(c.config.get(a)) for c in analysis.configs}) > 1}
    by_options = {tuple(repr(c.config.get(a)) for a in axes) for c in analysis.configs}
    return not varying <= set(grid_keys) or len({c.workload for c in analysis.configs}) > len(by_options)


def _efficiency_cell(c: ConfigResult) -> str:
    """Efficiency, never above 1 without its flag beside it (more than N times one process on N is suspect)."""
    text = _ratio(c.efficiency)
    if superlinear(c.efficiency):
        text += " (superlinear: suspect)"
    if any(r.used and r.contended for r in c.runs):
        text += " (contended)"
    return text


def _memory_cell(c: ConfigResult) -> str:
    e = c.peak_memory
    if e.value is None:
        return "-"
    text = f"{e.value / MIB:.0f}"
    if e.has_interval:
        text += f" ({_interval(e.scaled(1 / MIB))})"
    return text


Table = tuple[list[str], list[list[Any]]]


def _drop_empty(header: list[str], rows: list[list[Any]], optional: tuple[str, ...]) -> Table:
    """The table without the optional columns no configuration has a figure for."""
    empty = {i for i, h in enumerate(header) if h in optional and all(row[i] is None for row in rows)}
    return [h for i, h in enumerate(header) if i not in empty], [
        [v for i, v in enumerate(r) if i not in empty] for r in rows
    ]


def _timing_table(analysis: Analysis) -> Table:
    header = ["config", "world", "runs", "cv %", "step p50 ms", "step p90 ms", "data wait %", "straggler", "val acc"]
    rows = []
    for c in analysis.configs:
        straggler = c.straggler
        used, total = len(c.samples_per_s), len({r.repeat for r in c.runs})
        cv = c.throughput.cv
        rows.append(
            [
                c.name,
                c.world_size,
                f"{used}/{total}",
                None if cv is None else 100 * cv,
                None if c.step_p50_s is None else 1e3 * c.step_p50_s,
                None if c.step_p90_s is None else 1e3 * c.step_p90_s,
                None if c.data_share is None else 100 * c.data_share,
                f"rank {straggler['rank']} {straggler['ratio']:.2f}x" if straggler else None,
                c.val_accuracy,
            ]
        )
    return header, rows


# Figures no configuration may have (one process: no communication; a CPU: no datasheet peak): a column only
# where some configuration has them.
_OPTIONAL_COLUMNS = (
    "overlap %",
    "exposed comm %",
    "busbw GB/s",
    "isolated GB/s",
    "GFLOP/s per rank",
    "% of matmul rate",
    "% of datasheet peak",
    "workers' own MiB",
    "held MiB",
)


def _communication_table(analysis: Analysis) -> Table:
    header = ["config", "strategy", "overlap %", "exposed comm %", "busbw GB/s", "isolated GB/s"]
    rows = []
    for c in analysis.configs:
        if c.world_size < 2:
            continue
        rows.append(
            [
                c.name,
                c.strategy or "-",
                None if c.overlap is None else 100 * c.overlap,
                None if c.exposed_share is None else 100 * c.exposed_share,
                None if c.busbw_Bps is None else c.busbw_Bps / 1e9,
                None if c.reference_busbw_Bps is None else c.reference_busbw_Bps / 1e9,
            ]
        )
    return _drop_empty(header, rows, _OPTIONAL_COLUMNS)


def _flops_table(analysis: Analysis) -> Table:
    header = ["config", "MFLOPs per sample", "GFLOP/s per rank", "% of matmul rate", "% of datasheet peak"]
    rows = [
        [
            c.name,
            c.flops_per_sample / 1e6,
            None if c.achieved_flops_per_s is None else c.achieved_flops_per_s / 1e9,
            _measured_share(c.utilisation_attainable),
            None if c.utilisation_peak is None else 100 * c.utilisation_peak,
        ]
        for c in analysis.configs
        if c.flops_per_sample is not None
    ]
    return _drop_empty(header, rows, _OPTIONAL_COLUMNS)


def _measured_share(fraction: float | None) -> float | str | None:
    """A utilisation of the measured matmul rate in percent; above 100 % (no step can do more arithmetic than the
    device's own largest matmul) flagged in words, never a plain figure."""
    if fraction is None:
        return None
    return 100 * fraction if fraction <= 1.0 else f"flagged: {100 * fraction:.0f}"


def _memory_table(analysis: Analysis) -> Table:
    header = [
        "config",
        "world",
        "strategy",
        "peak MiB/rank",
        "interval",
        "what",
        "held MiB",
        "workers' own MiB",
        "fits",
    ]
    rows = []
    for c in analysis.configs:
        e = c.peak_memory
        if e.value is None and not c.out_of_memory:
            continue
        rows.append(
            [
                c.name,
                c.world_size,
                c.strategy or "-",
                _mb(e.value),
                _interval(e.scaled(1 / MIB)) if e.has_interval else "-",
                c.memory_kind or "-",
                _mb(c.held_bytes),
                _mb(c.workers_memory) or None,
                "yes" if c.fits else ("out of memory" if c.out_of_memory else "no"),
            ]
        )
    return _drop_empty(header, rows, _OPTIONAL_COLUMNS)


def _faster_step_table(analysis: Analysis) -> Table:
    """Each configuration that compiles or changes DDP's communication, against its plain twin."""
    header = ["config", "option", "vs", "speed-up", "compile s", "pays back after", "bytes/step MB", "val acc"]
    rows: list[list[Any]] = []
    for c in analysis.configs:
        for found in c.versus:
            payback = found.get("payback_iterations")
            bytes_ = found.get("bytes") or (None, c.comm_bytes_per_step)
            accuracy = found.get("val_accuracy") or (None, c.val_accuracy)
            rows.append(
                [
                    c.name,
                    f"{found['option']}={found['value']}",
                    found["plain"],
                    _ratio(found["speedup"]),
                    found.get("compile_s"),
                    None
                    if "compile_s" not in found
                    else f"{payback:.0f} it."
                    if payback is not None
                    else "never"
                    if (found["speedup"].value or 0) <= 1
                    else "not separated",
                    None
                    if bytes_[1] is None
                    else f"{(bytes_[0] or 0) / 1e6:.3g} -> {bytes_[1] / 1e6:.3g}"
                    if bytes_[0] is not None
                    else f"{bytes_[1] / 1e6:.3g}",
                    None
                    if accuracy[1] is None
                    else f"{accuracy[0]:.3f} -> {accuracy[1]:.3f}"
                    if accuracy[0] is not None
                    else f"{accuracy[1]:.3f}",
                ]
            )
    return _drop_empty(header, rows, ("compile s", "pays back after", "bytes/step MB", "val acc"))


def _config_tables(doc: Document, analysis: Analysis) -> None:
    """The decision table, then one table per topic."""
    doc.table(*_decision_table(analysis))
    for title, (header, rows), text in (
        ("Timing", _timing_table(analysis), "Runs = used / repeats; cv = standard deviation / mean."),
        (
            "Communication",
            _communication_table(analysis),
            "Gradient communication per step (configurations of 2 or more processes): the share of it hidden "
            "behind backward compute, what is exposed as a share of the step, the bus bandwidth achieved and that of "
            "an isolated all-reduce of the same size. FSDP's all-gathers and reduce-scatters are not split: "
            "their figures are blank.",
        ),
        (
            "A faster step",
            _faster_step_table(analysis),
            "Each configuration that compiles the model or changes DDP's communication, against the same "
            "configuration without it: the speed-up in samples/s with its 95 % interval; for torch.compile the "
            "compilation time (beyond a steady iteration, a cold cache: what a first run pays) and the iterations "
            "after which the faster steps have paid for it; for a communication hook the bytes a rank puts on the "
            "wire per step and the validation accuracy after the run, which is what compression may cost.",
        ),
        ("FLOPs", _flops_table(analysis), "Model FLOPs (forward + backward) and what each rank achieved."),
        (
            "Memory",
            _memory_table(analysis),
            "Peak memory of the largest rank (after warm-up; CUDA's peak reserved where there is a GPU, else the "
            "resident set), mean and interval over the runs used; held = parameters + gradients + optimizer "
            "state between steps; workers' own = what the DataLoader workers hold beyond the pages they share "
            "with their rank.",
        ),
    ):
        if rows and len(header) > 1:
            doc.heading(title, 3)
            doc.paragraph(text)
            doc.table(header, rows)


def _environment(doc: Document, analysis: Analysis) -> None:
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
        ],
    )


def write_report(results_dir: str | Path, include_contended: bool = False) -> Path:
    """Write report.md, report.html, verdict.txt, the plots and the HParams records into ``results_dir``; return
    the path of report.md."""
    out = Path(results_dir)
    analysis = load(out, include_contended)
    title = f"Sweep report: {analysis.meta.get('spec', {}).get('name', out.name)}"
    pct = round(100 * analysis.confidence)

    doc = Document()
    doc.heading(title, 1)
    _verdict_section(doc, analysis)
    _trust_section(doc, analysis)
    doc.heading("Configurations")
    doc.paragraph(
        f"Global throughput = all ranks' samples / wall time of the measured window (warm-up excluded); mean and "
        f"{pct} % interval over the runs used (runs = used / repeats; cv = standard deviation / mean). Speed-up "
        "and efficiency, with their intervals, are against the same configuration with one process. Own time = "
        "data wait + forward + optimizer step of a rank: the straggler is the rank whose own time is largest, "
        "as a ratio to the median rank's."
    )
    tables = analysis.for_tables()  # thousands of configurations: the ones that matter, and a line saying so
    if tables.shown_note:
        doc.paragraph(tables.shown_note)
    _config_tables(doc, tables)
    faster = [versus_text(c, found) for c in tables.configs for found in c.versus]
    if faster:
        doc.heading("A faster step")
        doc.bullets(faster)
    found = notes(tables)
    if found:
        doc.heading("Where time is lost")
        doc.bullets(found)
    checked = [c for c in tables.configs if c.ddp_crosscheck]
    if checked:
        doc.heading("Our communication timing against DDP's own statistics", 3)
        doc.paragraph(
            "DistributedDataParallel times its own backward (its runtime statistics, every iteration of a timed "
            "run): the ratios of ours to its, over the same iterations, mean over ranks and runs. Its communication "
            "span also holds the copy of the reduced buckets into the gradients, and its backward also the loss, "
            "so ratios a little under 1 are what agreement looks like."
        )
        doc.table(
            ["config", "communication, ours / DDP's", "whole backward, ours / DDP's"],
            [[c.name, (c.ddp_crosscheck or {}).get("comm"), (c.ddp_crosscheck or {}).get("backward")] for c in checked],
        )
    _measured_section(doc, analysis)
    doc.heading("Method")
    doc.paragraph(analysis.rule)
    doc.paragraph(
        f"A workload is defined by: {', '.join(analysis.workload_axes)} (the options that change the work "
        "per sample); each workload gets its own verdict and no ratio is taken across workloads."
    )
    if analysis.adaptive:
        doc.paragraph(_adaptive_text(analysis, analysis.adaptive))
    failures = [
        (c.name, c.grid, f"{r.status}: {r.error}") for c in analysis.configs for r in c.runs if r.status != "completed"
    ]
    if failures:
        doc.heading("Failures")
        doc.table(["config", "options", "reason"], [[n, _options(g), e] for n, g, e in failures])
    drawn = analysis.for_plots()
    plots = make_plots(drawn, out)
    if plots:
        doc.heading("Plots")
        if drawn.shown_note:
            doc.paragraph(drawn.shown_note)
        for path, alt in plots:
            doc.image(path, alt)
    _profiler_tables(doc, analysis)
    _environment(doc, analysis)
    left_out = None
    with output_errors(out / "tb_hparams"):
        left_out = write_hparams(analysis, out / "tb_hparams")
    doc.paragraph(
        "Browse every run and configuration in TensorBoard (HPARAMS tab): `tensorboard --logdir "
        "tb_hparams` in this directory" + (f" {left_out}." if left_out else ".")
    )

    write_bytes(out / "report.md", doc.markdown().encode())
    write_bytes(out / "report.html", doc.html(title).encode())
    # One verdict a line: a grid value holding a line break (or any control character) must not split one.
    lines = ["".join(ch if ch.isprintable() else " " for ch in line) for line in verdict_lines(analysis)]
    write_bytes(out / "verdict.txt", ("\n".join(lines) + "\n").encode())
    return out / "report.md"


def _profiler_tables(doc: Document, analysis: Analysis) -> None:
    profiled = [c for c in analysis.configs if c.profiler]
    if not profiled:
        return
    from ignite_ddl.measure.profilers import format_profile  # imports torch: only for a sweep that profiled
    from ignite_ddl.measure.traces import TRACE_COMM_HEADER, trace_comm_rows

    doc.heading("Profilers")
    for config in profiled:
        profile = config.profiler
        assert profile is not None
        if profile["kind"] != "torch":
            doc.paragraph(f"{config.name} ({_options(config.grid)}): Ignite {profile['kind']} profiler, every rank")
        else:
            traces = [r["trace"] for r in profile["ranks"] if r.get("trace")]
            runs = config.used_runs or [r for r in config.runs if r.status == "completed"]  # where the table comes from
            where = f" in `{runs[0].run_dir}`" if runs and runs[0].run_dir else ""
            iterations = sorted({r["active_iterations"] for r in profile["ranks"]})
            doc.paragraph(
                f"{config.name} ({_options(config.grid)}): torch.profiler, every rank, over "
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
