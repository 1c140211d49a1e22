"""The report's outputs, written together: ``report.md`` and ``report.html`` (one document, :mod:`.document`,
with the sections of :mod:`.sections` and the tables of :mod:`.tables`), ``verdict.txt``, the plots and the
TensorBoard HParams records."""

from __future__ import annotations

from pathlib import Path

from ignite_ddl.core.outputs import output_errors, write_bytes
from ignite_ddl.report.analysis import load
from ignite_ddl.report.document import Document
from ignite_ddl.report.glossary import add_glossary
from ignite_ddl.report.hparams import write_hparams
from ignite_ddl.report.notes import notes
from ignite_ddl.report.plots import make_plots
from ignite_ddl.report.search import search_section
from ignite_ddl.report.sections import (
    adaptive_text,
    environment_section,
    measured_section,
    profiler_section,
    speedup_beside_tie,
    trust_section,
    verdict_lines,
    verdict_section,
)
from ignite_ddl.report.tables import config_tables, options_text

__all__ = ["Document", "verdict_lines", "write_report"]


def write_report(results_dir: str | Path, include_contended: bool = False) -> Path:
    """Write report.md, report.html, verdict.txt, the plots and the HParams records into ``results_dir``; return
    the path of report.md."""
    out = Path(results_dir)
    analysis = load(out, include_contended)
    title = f"Sweep report: {analysis.meta.get('spec', {}).get('name', out.name)}"
    pct = round(100 * analysis.confidence)

    doc = Document()
    doc.heading(title, 1)
    verdict_section(doc, analysis)
    search_section(doc, out)  # a search: what it measured of its space, and what it cannot prove
    trust_section(doc, analysis)
    doc.heading("Configurations")
    doc.paragraph(
        f"Global throughput = all ranks' samples / wall time of the measured window (warm-up excluded); mean and "
        f"{pct} % interval over the runs used (runs = used / repeats; cv = standard deviation / mean). Speed-up "
        "and efficiency, with their intervals, are against the same configuration with one process. Own time = "
        "data wait + forward + optimizer step of a rank: the straggler is the rank whose own time is largest, "
        "as a ratio to the median rank's." + (f" {note}" if (note := speedup_beside_tie(analysis)) else "")
    )
    tables = analysis.for_tables()  # thousands of configurations: the ones that matter, and a line saying so
    if tables.shown_note:
        doc.paragraph(tables.shown_note)
    config_tables(doc, tables)
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
    measured_section(doc, analysis)
    doc.heading("Method")
    doc.paragraph(analysis.rule)
    doc.paragraph(
        f"A workload is defined by: {', '.join(analysis.workload_axes)} (the options that change the work "
        "per sample); each workload gets its own verdict and no ratio is taken across workloads."
    )
    if analysis.adaptive:
        doc.paragraph(adaptive_text(analysis, analysis.adaptive))
    if analysis.refused:
        doc.heading("Refused")
        doc.paragraph(
            "Configurations refused before any of their runs started, whatever the machine (options that cannot go "
            "together, a strategy that cannot run on that many processes, a batch that does not split) or on this "
            "one (files or a device it lacks): never run, so neither compared nor counted as one that might have "
            "been the fastest. The others ran."
        )
        doc.table(
            ["config", "options", "reason"],
            [[c.name, options_text(c.grid_shown), c.refusal] for c in analysis.refused],
        )
    failures = [
        (c.name, c.grid_shown, f"{r.status}: {r.error}")
        for c in analysis.configs
        for r in c.runs
        if r.status != "completed"
    ]
    if failures:
        doc.heading("Failures")
        doc.table(["config", "options", "reason"], [[n, options_text(g), e] for n, g, e in failures])
    drawn = analysis.for_plots()
    plots = make_plots(drawn, out)
    if plots:
        doc.heading("Plots")
        if drawn.shown_note:
            doc.paragraph(drawn.shown_note)
        for path, alt in plots:
            doc.image(path, alt)
    profiler_section(doc, analysis)
    environment_section(doc, analysis)
    left_out = None
    with output_errors(out / "tb_hparams"):
        left_out = write_hparams(analysis, out / "tb_hparams")
    doc.paragraph(
        "Browse every run and configuration in TensorBoard (HPARAMS tab): `tensorboard --logdir "
        "tb_hparams` in this directory" + (f" {left_out}." if left_out else ".")
    )

    add_glossary(doc)
    write_bytes(out / "report.md", doc.markdown().encode())
    write_bytes(out / "report.html", doc.html(title).encode())
    # One verdict a line: a grid value holding a line break (or any control character) must not split one.
    lines = ["".join(ch if ch.isprintable() else " " for ch in line) for line in verdict_lines(analysis)]
    write_bytes(out / "verdict.txt", ("\n".join(lines) + "\n").encode())
    return out / "report.md"
