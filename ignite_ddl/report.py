"""Profiling reports: turn a sweep's ``results.jsonl`` into ``report.md`` / ``report.html`` with PNG plots beside
them, and TensorBoard HParams records so the sweep can be browsed in TensorBoard.

The report says, per configuration, the global throughput (mean and spread over repeats), step-time percentiles,
data-wait share, the straggler, and speedup and scaling efficiency against the 1-process configuration of the same
kind (identical but for the process layout); then which configuration is best and why, and what to try where
time is lost.

Example:
    >>> rows = aggregate([
    ...     {"key": "a-r0", "index": 0, "grid": {"nproc_per_node": 1}, "status": "completed",
    ...      "config": {"nproc_per_node": 1, "batch_size": 64}, "summary": {"world_size": 1, "samples_per_s": 100.0}},
    ...     {"key": "b-r0", "index": 1, "grid": {"nproc_per_node": 2}, "status": "completed",
    ...      "config": {"nproc_per_node": 2, "batch_size": 64}, "summary": {"world_size": 2, "samples_per_s": 150.0}},
    ... ])
    >>> [(r.speedup, r.efficiency) for r in rows]
    [(1.0, 1.0), (1.5, 0.75)]
"""

from __future__ import annotations

import html
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ignite_ddl.profilers import format_profile
from ignite_ddl.results import read_json
from ignite_ddl.sweep import read_results

# Options that only say how the processes are laid out: configurations equal but for these are of one kind.
LAYOUT_OPTIONS = {"backend", "nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port", "output_dir",
                  "threads", "start_method", "resume"}  # fmt: skip
DATA_WAIT_HIGH = 0.25
STRAGGLER_HIGH = 1.2
EFFICIENCY_LOW = 0.7


@dataclass
class ConfigRow:
    """One configuration of a sweep, its repeats combined."""

    index: int
    grid: dict[str, Any]
    config: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    speedup: float | None = None
    efficiency: float | None = None

    @property
    def summaries(self) -> list[dict[str, Any]]:
        return [r["summary"] for r in self.records if r["status"] == "completed"]

    @property
    def errors(self) -> list[str]:
        return [f"{r['status']}: {r['error']}" for r in self.records if r["status"] != "completed"]

    @property
    def world_size(self) -> int:
        if self.summaries:
            return self.summaries[0]["world_size"]
        return (self.config.get("nproc_per_node") or 1) * (self.config.get("nnodes") or 1)

    @property
    def throughputs(self) -> list[float]:
        return [s["samples_per_s"] for s in self.summaries]

    @property
    def throughput(self) -> float | None:
        return statistics.mean(self.throughputs) if self.throughputs else None

    @property
    def spread(self) -> float | None:
        return statistics.stdev(self.throughputs) if len(self.throughputs) > 1 else None

    def steps_mean(self, *path: str) -> float | None:
        """Mean over completed repeats of a figure of ``summary["steps"]`` (None where not measured)."""
        values = []
        for s in self.summaries:
            value: Any = s.get("steps")
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if isinstance(value, (int, float)) and not math.isnan(value):
                values.append(float(value))
        return statistics.mean(values) if values else None

    def phase_means(self) -> dict[str, float]:
        """Mean per-step seconds of data wait and each step phase, over ranks and repeats."""
        phases = {}
        for name in ("data", "forward", "backward", "optimizer"):
            values = [r[f"{name}_s_mean"] for s in self.summaries if s.get("steps") for r in s["steps"]["ranks"]
                      if r.get(f"{name}_s_mean") is not None]  # fmt: skip
            phases[name] = statistics.mean(values) if values else 0.0
        return phases

    @property
    def straggler(self) -> dict[str, Any] | None:
        """The worst straggler over the repeats."""
        found = [s["steps"]["straggler"] for s in self.summaries if s.get("steps") and s["steps"].get("straggler")]
        return max(found, key=lambda s: s["ratio"] or 0.0) if found else None

    @property
    def kind(self) -> tuple:
        return tuple(sorted((k, repr(v)) for k, v in self.config.items() if k not in LAYOUT_OPTIONS))

    @property
    def name(self) -> str:
        return f"cfg{self.index:03d}"


def aggregate(records: list[dict[str, Any]]) -> list[ConfigRow]:
    """Group records by configuration (repeats together) and compute speedup and efficiency."""
    rows: dict[str, ConfigRow] = {}
    for record in records:
        content = record["key"].rsplit("-r", 1)[0]
        if content not in rows:
            rows[content] = ConfigRow(record["index"], record["grid"], record["config"])
        rows[content].records.append(record)
    ordered = sorted(rows.values(), key=lambda r: r.index)
    by_kind: dict[tuple, list[ConfigRow]] = defaultdict(list)
    for row in ordered:
        by_kind[row.kind].append(row)
    for rows_of_kind in by_kind.values():
        base = next((r for r in rows_of_kind if r.world_size == 1 and r.throughput), None)
        for row in rows_of_kind:
            if base is not None and row.throughput is not None:
                row.speedup = row.throughput / base.throughput
                row.efficiency = row.speedup / row.world_size
    return ordered


def recommendations(rows: list[ConfigRow], cores: int | None) -> tuple[ConfigRow | None, list[str], list[str]]:
    """The best configuration, the reasons it is best, and what to try elsewhere."""
    completed = [r for r in rows if r.throughput is not None]
    if not completed:
        return None, [], ["no configuration completed: see the failures below"]
    best = max(completed, key=lambda r: r.throughput)
    slowest = min(completed, key=lambda r: r.throughput)
    reasons = [f"highest global throughput: {best.throughput:.0f} samples/s"]
    if len(completed) > 1:
        reasons.append(f"{best.throughput / slowest.throughput:.2f}x the slowest configuration ({slowest.name})")
    if best.efficiency is not None and best.world_size > 1:
        reasons.append(f"{best.world_size} processes scale at efficiency {best.efficiency:.2f} over 1 process")
    share = best.steps_mean("global", "data_share")
    if share is not None:
        reasons.append(f"data wait is {100 * share:.0f}% of its iterations")
    notes = []
    for row in completed:
        share = row.steps_mean("global", "data_share")
        if share is not None and share > DATA_WAIT_HIGH:
            notes.append(
                f"{row.name}: data-wait {100 * share:.0f}% of each iteration -> raise num_workers "
                f"(now {row.config.get('num_workers', 0)}) or make loading cheaper"
            )
        straggler = row.straggler
        if straggler and straggler["ratio"] and straggler["ratio"] > STRAGGLER_HIGH:
            notes.append(
                f"{row.name}: rank {straggler['rank']} is a straggler (own time {straggler['ratio']:.2f}x the median "
                "rank's) -> look at its data loading, its device, or other work sharing its cores"
            )
        if row.efficiency is not None and row.world_size > 1 and row.efficiency < EFFICIENCY_LOW:
            threads = row.summaries[0].get("threads_per_process", 1)
            on_cpu = row.summaries[0].get("device", {}).get("type") == "cpu"
            base_threads = _baseline_threads(rows, row)
            if on_cpu and cores and row.world_size * threads > cores:
                notes.append(
                    f"{row.name}: {row.world_size} processes x {threads} threads on {cores} cores is oversubscribed "
                    f"(efficiency {row.efficiency:.2f}) -> at most {cores} processes here"
                )
            elif on_cpu and cores and base_threads and base_threads >= cores:
                notes.append(
                    f"{row.name}: efficiency {row.efficiency:.2f}: the 1-process run already kept all {cores} cores "
                    f"busy with {base_threads} intra-op threads, so more processes add communication, not compute"
                )
            else:
                notes.append(
                    f"{row.name}: scaling efficiency {row.efficiency:.2f} -> communication and per-process overhead "
                    "dominate; try a larger batch per rank"
                )
    return best, reasons, notes


def _baseline_threads(rows: list[ConfigRow], row: ConfigRow) -> int | None:
    base = next((r for r in rows if r.kind == row.kind and r.world_size == 1 and r.summaries), None)
    return base.summaries[0].get("threads_per_process") if base else None


# -- documents rendered twice: Markdown and HTML


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
                out.append("#" * value[0] + " " + value[1])
            elif kind == "paragraph":
                out.append(value)
            elif kind == "bullets":
                out.append("\n".join(f"- {item}" for item in value))
            elif kind == "table":
                header, rows = value
                lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                lines += ["| " + " | ".join(row) + " |" for row in rows]
                out.append("\n".join(lines))
            elif kind == "image":
                out.append(f"![{value[1]}]({value[0]})")
            else:
                out.append("```\n" + value + "\n```")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        e = html.escape
        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>", _STYLE]
        for kind, value in self.blocks:
            if kind == "heading":
                out.append(f"<h{value[0]}>{e(value[1])}</h{value[0]}>")
            elif kind == "paragraph":
                out.append(f"<p>{e(value)}</p>")
            elif kind == "bullets":
                out.append("<ul>" + "".join(f"<li>{e(item)}</li>" for item in value) + "</ul>")
            elif kind == "table":
                header, rows = value
                out.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
                out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
                out.append("</table>")
            elif kind == "image":
                out.append(f"<p><img src='{e(value[0])}' alt='{e(value[1])}'></p>")
            else:
                out.append(f"<pre>{e(value)}</pre>")
        return "\n".join(out) + "</body></html>\n"


_STYLE = (
    "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}img{max-width:100%}</style></head><body>"
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value).replace("|", "/")


# -- the report


def write_report(results_dir: str | Path) -> Path:
    """Write report.md, report.html, the plots and the HParams records into ``results_dir``; return report.md."""
    out = Path(results_dir)
    records = read_results(out / "results.jsonl")
    if not records:
        raise FileNotFoundError(f"no results in {out / 'results.jsonl'}")
    meta = read_json(out / "sweep.json") if (out / "sweep.json").exists() else {}
    rows = aggregate(records)
    cores = meta.get("host", {}).get("cpu_cores")
    best, reasons, notes = recommendations(rows, cores)
    title = f"Sweep report: {meta.get('spec', {}).get('name', out.name)}"

    doc = Document()
    doc.heading(title, 1)
    _environment(doc, meta, rows)
    doc.heading("Configurations")
    doc.paragraph(
        "Global throughput = all ranks' samples / wall time of the measured window (warm-up excluded), mean ± "
        "standard deviation over repeats. Speedup and efficiency are against the 1-process configuration of the same "
        "kind (same options but for the process layout). Own time = data wait + forward + optimizer step of a rank: "
        "the straggler is the rank whose own time is largest, shown as a ratio to the median rank."
    )
    doc.table(*_config_table(rows))
    if best is not None:
        doc.heading("Best configuration")
        doc.paragraph(f"{best.name}: " + ", ".join(f"{k}={v}" for k, v in best.grid.items()))
        doc.bullets(reasons)
    if notes:
        doc.heading("Where time is lost")
        doc.bullets(notes)
    failures = [(row.name, row.grid, error) for row in rows for error in row.errors]
    if failures:
        doc.heading("Failures")
        doc.table(["config", "options", "reason"], [[n, _options(g), e] for n, g, e in failures])
    plots = make_plots(rows, out)
    if plots:
        doc.heading("Plots")
        for path, alt in plots:
            doc.image(path, alt)
    _profiler_tables(doc, rows)
    write_hparams(rows, out / "tb_hparams")
    doc.paragraph("Browse every run in TensorBoard (HPARAMS tab): `tensorboard --logdir tb_hparams` in this directory.")

    (out / "report.md").write_text(doc.markdown())
    (out / "report.html").write_text(doc.html(title))
    return out / "report.md"


def _options(grid: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in grid.items())


def _environment(doc: Document, meta: dict, rows: list[ConfigRow]) -> None:
    doc.heading("Environment")
    host, versions = meta.get("host", {}), meta.get("versions", {})
    devices = sorted({f"{s['device']['type']}: {s['device']['name']}" for r in rows for s in r.summaries})
    threads = sorted({s.get("threads_per_process") for r in rows for s in r.summaries} - {None})
    doc.table(
        ["", ""],
        [
            ["host", f"{host.get('hostname', '?')} ({host.get('platform', '?')})"],
            ["CPU", f"{host.get('cpu', '?')}, {host.get('cpu_cores', '?')} cores available"],
            ["devices", ", ".join(devices) or "-"],
            ["threads per process", ", ".join(map(str, threads)) or "-"],
            ["versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v)],
        ],
    )


def _config_table(rows: list[ConfigRow]) -> tuple[list[str], list[list[Any]]]:
    grid_keys = list(dict.fromkeys(k for r in rows for k in r.grid))
    header = ["config", *grid_keys, "world", "samples/s", "±", "runs", "step p50 ms", "step p90 ms", "data wait %",
              "straggler", "speedup", "efficiency", "val acc"]  # fmt: skip
    table = []
    for r in rows:
        p50, p90 = r.steps_mean("global", "step_s_p50"), r.steps_mean("global", "step_s_p90")
        share = r.steps_mean("global", "data_share")
        straggler = r.straggler
        accuracy = [s["val_accuracy"] for s in r.summaries if s.get("val_accuracy") is not None]
        table.append([
            r.name, *[r.grid.get(k) for k in grid_keys], r.world_size, r.throughput, r.spread,
            f"{len(r.summaries)}/{len(r.records)}", None if p50 is None else 1e3 * p50,
            None if p90 is None else 1e3 * p90, None if share is None else 100 * share,
            f"rank {straggler['rank']} {straggler['ratio']:.2f}x" if straggler and straggler["ratio"] else None,
            r.speedup, r.efficiency, statistics.mean(accuracy) if accuracy else None,
        ])  # fmt: skip
    return header, table


def _profiler_tables(doc: Document, rows: list[ConfigRow]) -> None:
    profiled = [(r, s["profiler"]) for r in rows for s in r.summaries[:1] if s.get("profiler")]
    if not profiled:
        return
    doc.heading("Profilers")
    for row, profile in profiled:
        doc.paragraph(f"{row.name} ({_options(row.grid)}): Ignite {profile['kind']} profiler, every rank")
        doc.code(format_profile(profile["kind"], profile["ranks"]))


# -- plots


def make_plots(rows: list[ConfigRow], out: Path) -> list[tuple[str, str]]:
    """The report's PNG plots, written into ``out``; (file name, description) of each one made."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for name, alt, draw in (
        ("throughput_vs_processes.png", "global throughput vs processes, with ideal scaling", _plot_scaling),
        ("throughput_vs_batch.png", "global throughput vs global batch size", _plot_batch),
        ("step_breakdown.png", "where each step's time goes, per configuration", _plot_breakdown),
        ("rank_step_times.png", "step-time distribution per rank", _plot_ranks),
    ):
        fig = draw(rows, out, plt)
        if fig is not None:
            fig.tight_layout()
            fig.savefig(out / name, dpi=110)
            plt.close(fig)
            made.append((name, alt))
    return made


def _series_label(row: ConfigRow, exclude: set[str]) -> str:
    return _options({k: v for k, v in row.grid.items() if k not in exclude}) or "all"


def _plot_scaling(rows: list[ConfigRow], out: Path, plt: Any) -> Any:
    by_kind: dict[tuple, list[ConfigRow]] = defaultdict(list)
    for row in rows:
        if row.throughput is not None:
            by_kind[row.kind].append(row)
    series = {
        k: sorted(v, key=lambda r: r.world_size) for k, v in by_kind.items() if len({r.world_size for r in v}) > 1
    }
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind_rows in series.values():
        label = _series_label(kind_rows[0], LAYOUT_OPTIONS)
        x = [r.world_size for r in kind_rows]
        line = ax.errorbar(x, [r.throughput for r in kind_rows], yerr=[r.spread or 0 for r in kind_rows],
                           marker="o", capsize=3, label=label)  # fmt: skip
        base = next((r for r in kind_rows if r.world_size == 1), None)
        if base is not None:
            ax.plot(x, [base.throughput * n for n in x], linestyle="--", color=line[0].get_color(), alpha=0.6)
    ax.set_xlabel("processes (world size)")
    ax.set_ylabel("global samples/s")
    ax.set_title("Throughput vs processes (dashed: ideal linear scaling)")
    ax.set_xticks(sorted({r.world_size for v in series.values() for r in v}))
    ax.legend(fontsize=8)
    return fig


def _plot_batch(rows: list[ConfigRow], out: Path, plt: Any) -> Any:
    completed = [r for r in rows if r.throughput is not None]
    if len({r.summaries[0]["batch"]["global"] for r in completed if "batch" in r.summaries[0]}) < 2:
        return None
    groups: dict[str, list[ConfigRow]] = defaultdict(list)
    for row in completed:
        groups[f"{row.world_size} proc " + _series_label(row, LAYOUT_OPTIONS | {"batch_size"})].append(row)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, group in sorted(groups.items()):
        group.sort(key=lambda r: r.summaries[0]["batch"]["global"])
        ax.errorbar([r.summaries[0]["batch"]["global"] for r in group], [r.throughput for r in group],
                    yerr=[r.spread or 0 for r in group], marker="o", capsize=3, label=label)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("global batch size")
    ax.set_ylabel("global samples/s")
    ax.set_title("Throughput vs batch size")
    ax.legend(fontsize=8)
    return fig


def _plot_breakdown(rows: list[ConfigRow], out: Path, plt: Any) -> Any:
    measured = [r for r in rows if r.summaries and any(s.get("steps") for s in r.summaries)]
    if not measured:
        return None
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(measured) + 1.5))
    left = [0.0] * len(measured)
    labels = [f"{r.name} {_options(r.grid)}" for r in measured]
    for phase in ("data", "forward", "backward", "optimizer"):
        widths = [1e3 * r.phase_means()[phase] for r in measured]
        ax.barh(labels, widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths)]
    ax.invert_yaxis()
    ax.set_xlabel("ms per iteration, mean over ranks\n(backward includes the gradient all-reduce)")
    ax.set_title("Step-time breakdown")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _plot_ranks(rows: list[ConfigRow], out: Path, plt: Any) -> Any:
    import csv

    panels = []
    for row in rows:
        run = next((r for r in row.records if r["status"] == "completed"), None)
        if run is None or row.world_size < 2:
            continue
        per_rank = []
        for rank in range(row.world_size):
            path = Path(run["run_dir"]) / f"steps_rank{rank}.csv"
            if not path.is_file():
                break
            with open(path) as f:
                per_rank.append([1e3 * float(r["step_s"]) for r in csv.DictReader(f) if r["warmup"] == "0"])
        if len(per_rank) == row.world_size:
            panels.append((row, per_rank))
    if not panels:
        return None
    panels = panels[:8]
    fig, axes = plt.subplots(1, len(panels), figsize=(3 * len(panels) + 1, 3.5), squeeze=False)
    for ax, (row, per_rank) in zip(axes[0], panels):
        ax.boxplot(per_rank, showfliers=False)
        ax.set_xticks(range(1, len(per_rank) + 1), [f"rank {i}" for i in range(len(per_rank))])
        ax.set_title(f"{row.name}\n{_options(row.grid)}", fontsize=8)
        ax.set_ylabel("step ms")
    fig.suptitle("Per-rank step time (measured iterations of the first repeat)")
    return fig


# -- TensorBoard HParams


def write_hparams(rows: list[ConfigRow], logdir: Path) -> None:
    """One HParams session per completed run: its grid options and world size, and its headline figures."""
    from torch.utils.tensorboard import SummaryWriter

    for row in rows:
        for record in row.records:
            if record["status"] != "completed":
                continue
            summary = record["summary"]
            hparams = {k: _hparam(v) for k, v in row.grid.items()} | {"world_size": row.world_size}
            metrics = {"hparam/samples_per_s": summary["samples_per_s"],
                       "hparam/val_accuracy": summary.get("val_accuracy") or 0.0}  # fmt: skip
            p50 = (summary.get("steps") or {}).get("global", {}).get("step_s_p50")
            if p50 is not None:
                metrics["hparam/step_p50_ms"] = 1e3 * p50
            with SummaryWriter(log_dir=str(logdir / f"{row.name}-r{record['repeat']}")) as writer:
                writer.add_hparams(hparams, metrics, run_name=".")


def _hparam(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool)) else str(value)
