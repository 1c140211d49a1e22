"""The scaling projection shown: a table for the console (:func:`format_projection`), and projection.json,
projection.csv and projection.png in an output folder (:func:`write_projection`; the plot alone is :func:`figure`).

matplotlib comes through the report's :func:`~ignite_ddl.report.plots.pyplot` (headless unless a notebook chose its
backend), imported only when a figure is drawn: the package is imported by the command line at start-up.

Example:
    >>> from ignite_ddl.predict.projection.model import LINKS, Compute, project
    >>> compute = Compute.from_total(0.03, grad_bytes=4 * 2**20, batch_size=32)
    >>> table = format_projection(project(compute, LINKS["10gbe"], max_workers=4)).splitlines()[2:6]
    >>> print("\\n".join(table))  # under the two lines of inputs: a row per N
    N  ring step ms  exposed ms  samples/s  speed-up  eff.  PS step ms  PS comm ms  samples/s  speed-up  eff.
    1         30.00        0.00       1067      1.00  1.00       36.75        6.75        871      0.82  0.82
    2         33.40        3.40       1916      1.80  0.90       43.50       13.50       1471      1.38  0.69
    4         35.15        5.15       3641      3.41  0.85       57.00       27.00       2245      2.11  0.53
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ignite_ddl.core.jsonfiles import write_json
from ignite_ddl.core.outputs import write_csv
from ignite_ddl.core.text import format_table, milliseconds
from ignite_ddl.predict.projection.model import MIB, SATURATION_EFFICIENCY, Projection, bucket_sizes

__all__ = ["figure", "format_projection", "write_projection"]


def format_projection(p: Projection) -> str:
    """The projection as a table (a row per N) and a line per scheme saying where it saturates."""
    c = p.compute
    header = [
        "N",
        "ring step ms",
        "exposed ms",
        "samples/s",
        "speed-up",
        "eff.",
        "PS step ms",
        "PS comm ms",
        "samples/s",
        "speed-up",
        "eff.",
    ]
    rows = [
        [
            int(r["n"]),
            milliseconds(r["ring_step_s"]),
            milliseconds(r["ring_comm_s"]),
            f"{r['ring_samples_per_s']:.0f}",
            f"{r['ring_speedup']:.2f}",
            f"{r['ring_efficiency']:.2f}",
            milliseconds(r["ps_step_s"]),
            milliseconds(r["ps_comm_s"]),
            f"{r['ps_samples_per_s']:.0f}",
            f"{r['ps_speedup']:.2f}",
            f"{r['ps_efficiency']:.2f}",
        ]
        for r in p.rows
    ]
    nodes = (
        f"; {p.gpus_per_node} workers per node, {p.inter_link.name} between nodes" if p.inter_link is not None else ""
    )
    buckets = len(bucket_sizes(c.grad_bytes, p.bucket_bytes))
    lines = [
        f"projection ({c.source}): batch {c.batch_size} per worker, one worker's step {milliseconds(c.step_s)} ms "
        f"(forward {milliseconds(c.forward_s)}, backward {milliseconds(c.backward_s)}, optimizer "
        f"{milliseconds(c.optimizer_s)}, data and handlers {milliseconds(c.other_s)}), gradients "
        f"{c.grad_bytes / MIB:.2f} MiB in {buckets} bucket(s) of {p.bucket_bytes / MIB:g} MiB",
        f"link: {p.link.name}, alpha {p.link.alpha_s * 1e6:.2f} us, beta {p.link.beta_Bps / 1e9:.3f} GB/s per "
        f"direction{nodes}",
        format_table(header, rows),
    ]
    lines += [
        _saturation_line(
            "ring all-reduce",
            p.ring_half_efficiency_n,
            p.max_workers,
            p.ring_ceiling_samples_per_s,
            "latency-bound: b / (2 k alpha)",
        ),
        _saturation_line(
            "parameter server",
            p.ps_half_efficiency_n,
            p.max_workers,
            p.ps_ceiling_samples_per_s,
            "b / (2 (alpha + M / beta)) ~ b beta / (2M)",
        ),
    ]
    return "\n".join(lines)


def _saturation_line(scheme: str, half_n: int | None, max_workers: int, ceiling: float, formula: str) -> str:
    where = (
        f"efficiency first below 0.5 at N = {half_n}"
        if half_n is not None
        else f"efficiency stays >= 0.5 up to N = {max_workers}"
    )
    limit = "no ceiling (alpha = 0)" if math.isinf(ceiling) else f"{ceiling:.0f} samples/s"
    return f"{scheme}: {where}; throughput ceiling as N grows: {limit} ({formula})"


_CSV_COLUMNS = (  # projection.csv: a row per N
    "n",
    "ring_step_s",
    "ring_comm_s",
    "ring_samples_per_s",
    "ring_speedup",
    "ring_efficiency",
    "ps_step_s",
    "ps_comm_s",
    "ps_samples_per_s",
    "ps_speedup",
    "ps_efficiency",
)


def figure(p: Projection) -> Any:
    """Throughput and efficiency vs N (log2 axis), ring vs parameter server, saturation marked: an open matplotlib
    figure (close it when done)."""
    from ignite_ddl.core.figures import pyplot

    plt = pyplot()
    ns = [r["n"] for r in p.rows]
    fig, (ax_tp, ax_eff) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    single = p.compute.batch_size / p.compute.step_s
    ax_tp.plot(ns, [n * single for n in ns], color="grey", linestyle=":", label="ideal (N x one worker)")
    styles = {"ring": ("ring all-reduce (DDP buckets)", "tab:blue", "o"), "ps": ("parameter server", "tab:red", "s")}
    for scheme, (label, color, marker) in styles.items():
        ax_tp.plot(ns, [r[f"{scheme}_samples_per_s"] for r in p.rows], marker=marker, color=color, label=label)
        ax_eff.plot(ns, [r[f"{scheme}_efficiency"] for r in p.rows], marker=marker, color=color, label=label)
    if math.isfinite(p.ps_ceiling_samples_per_s):
        ax_tp.axhline(
            p.ps_ceiling_samples_per_s,
            color="tab:red",
            linestyle="--",
            linewidth=1,
            label=f"PS ceiling {p.ps_ceiling_samples_per_s:.0f} samples/s",
        )
    ax_eff.axhline(SATURATION_EFFICIENCY, color="grey", linestyle=":", linewidth=1)
    for scheme, half_n in (("ring", p.ring_half_efficiency_n), ("ps", p.ps_half_efficiency_n)):
        if half_n is not None:
            label, color, _ = styles[scheme]
            ax_tp.axvline(half_n, color=color, linestyle="--", linewidth=1)
            ax_eff.axvline(
                half_n,
                color=color,
                linestyle="--",
                linewidth=1,
                label=f"{label.split(' (')[0]}: efficiency < 0.5 from N = {half_n}",
            )
    ax_tp.set(
        xscale="log", yscale="log", xlabel="workers N", ylabel="samples/s (all workers)", title="Projected throughput"
    )
    ax_eff.set(
        xscale="log",
        xlabel="workers N",
        ylabel="efficiency (speed-up / N)",
        ylim=(0, 1.05),
        title="Projected efficiency",
    )
    for ax in (ax_tp, ax_eff):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns], fontsize=7)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    nodes = f", {p.gpus_per_node}/node + {p.inter_link.name}" if p.inter_link is not None else ""
    fig.suptitle(
        f"{p.link.name}{nodes}: batch {p.compute.batch_size}/worker, step {p.compute.step_s * 1e3:.1f} ms, "
        f"gradients {p.compute.grad_bytes / MIB:.1f} MiB",
        fontsize=10,
    )
    return fig


def write_projection(p: Projection, output_dir: str | Path) -> list[Path]:
    """projection.json (inputs and a record per N), projection.csv and projection.png in ``output_dir``."""
    from ignite_ddl.core.figures import save_figure

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "projection.json", out / "projection.csv", out / "projection.png"]
    write_json(paths[0], p.to_dict())
    write_csv(paths[1], _CSV_COLUMNS, ([row.get(c, "") for c in _CSV_COLUMNS] for row in p.rows))
    save_figure(figure(p), paths[2])
    return paths
