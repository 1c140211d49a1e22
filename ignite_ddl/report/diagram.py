"""What DDP does, drawn from one real run: the replicas, their gradient buckets and the all-reduce that averages
them, over the timeline of one measured step on every rank as ``steps_rank<r>.csv`` recorded it (a notebook's
picture, not a sweep's plot: :mod:`.plots` draws those)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ignite_ddl.core.figures import pyplot
from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.core.runfiles import SUMMARY_FILE, read_summary
from ignite_ddl.core.steps_csv import read_steps
from ignite_ddl.report.model import PHASE_COLOURS
from ignite_ddl.report.plots.layout import FONT, TITLE_FONT

__all__ = ["ddp_diagram", "ddp_step"]

BUCKET_LANES = 8  # rows of the buckets' all-reduce bars under each rank's step; more buckets share them in turn
BUCKET_BAND = 0.4  # the height the bucket rows share above each rank's step, in units of one rank's row

DDP_PARTS = (  # a step's parts in the order they happen, as steps_rank<r>.csv records them
    ("data_s", "waiting for data", PHASE_COLOURS["data"]),
    ("forward_s", "forward", PHASE_COLOURS["forward"]),
    ("backward_compute_s", "backward: gradient compute", PHASE_COLOURS["backward_compute"]),
    ("exposed_comm_s", "backward: waiting for the last all-reduce (exposed)", PHASE_COLOURS["exposed_comm"]),
    ("optimizer_s", "optimizer step", PHASE_COLOURS["optimizer"]),
)


def ddp_step(run_dir: str | Path, iteration: int | None = None) -> dict[str, Any]:
    """One measured step of a DDP run, on every rank, as its ``steps_rank<r>.csv`` recorded it: ``iteration`` (by
    default the measured iteration whose step time on rank 0 is the median) and, per rank, the seconds of data wait,
    forward, backward (and of it gradient compute and exposed communication), optimizer, the time some bucket's
    all-reduce was in flight (``comm_s``), the buckets and their bytes, and each bucket's all-reduce as (ready, done)
    seconds after the step's start, in ready order (``bucket_spans``, from the ``bucket_spans_ms`` column; [] where
    the CSV has none, as one written before that column existed)."""
    run = Path(run_dir)
    paths = sorted(run.glob("steps_rank*.csv"), key=lambda p: int(p.stem.removeprefix("steps_rank")))
    if len(paths) < 2:
        raise ValueError(f"{run} has {len(paths)} steps_rank<r>.csv file(s): a DDP step needs a run of 2+ processes")
    ranks = [read_steps(p) for p in paths]
    timed = [r for r in ranks[0] if not r["warmup"] and r["comm_s"] is not None]
    if not timed:
        raise ValueError(
            f"{run} recorded no communication times for its measured steps (run it with --comm-timing, and more "
            "iterations than --warmup-iters)"
        )
    if iteration is None:
        ordered = sorted(timed, key=lambda r: r["step_s"])
        iteration = int(ordered[(len(ordered) - 1) // 2]["iteration"])
    per_rank = []
    for rank, rows in enumerate(ranks):
        row = next((r for r in rows if r["iteration"] == iteration), None)
        if row is None or row["comm_s"] is None:
            raise ValueError(f"{run}: rank {rank} has no timed iteration {iteration}")
        figures = {k: row[k] or 0.0 for k in ("data_s", "step_s", "forward_s", "backward_s", "optimizer_s")}
        comm, exposed = row["comm_s"] or 0.0, row["exposed_comm_s"] or 0.0
        figures |= {"comm_s": comm, "exposed_comm_s": exposed, "backward_compute_s": figures["backward_s"] - exposed}
        figures |= {"buckets": row["buckets"] or 0, "comm_bytes": float(row["comm_bytes"] or 0)}
        per_rank.append({**figures, "bucket_spans": row["bucket_spans_ms"]})
    return {"iteration": iteration, "ranks": per_rank}


def ddp_diagram(run_dir: str | Path, iteration: int | None = None) -> Any:
    """A picture of what DDP did in one real step of the run in ``run_dir`` (a run of 2 or more processes with
    communication timing, ``ignite-ddl train``'s output folder): above, the replicas, each with its share of the
    batch, its gradients in buckets and the all-reduce that averages them; below, the step's timeline on every rank
    from its ``steps_rank<r>.csv`` (:func:`ddp_step`): data wait, forward, backward compute, the exposed end of the
    all-reduce, optimizer, and above them each bucket's all-reduce as recorded, one bar per bucket from its
    gradients being ready to its reduction being done (b1, the first ready, on top; more than 8 buckets share 8 rows
    in turn). The step's start is placed where the data wait ends, as the parts above are. A CSV without the
    buckets' spans (written before ``bucket_spans_ms`` existed) gets one hatched span of the total time some
    bucket's all-reduce was in flight, placed to end where backward ends. An open matplotlib figure."""
    from matplotlib.patches import FancyArrowPatch, Rectangle

    plt = pyplot()
    run = Path(run_dir)
    step = ddp_step(run, iteration)
    ranks = step["ranks"]
    world = len(ranks)
    config = read_json(run / "config.json").get("config", {}) if (run / "config.json").is_file() else {}
    summary: dict[str, Any] = dict(read_summary(run)) if (run / SUMMARY_FILE).is_file() else {}
    per_rank_batch = (summary.get("batch") or {}).get("per_rank")
    buckets, nbytes = ranks[0]["buckets"], ranks[0]["comm_bytes"]

    fig = plt.figure(figsize=(11.0, 3.4 + 1.9 * world), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0 + 0.75 * world, 0.9 + 0.75 * world])

    # What DDP does: replicas, buckets, the all-reduce.
    ax = top.subplots()
    ax.set_xlim(0, 100)
    ax.set_ylim(-0.8, world + 0.2)
    ax.axis("off")

    def box(x: float, y: float, w: float, h: float, text: str, color: str) -> None:
        ax.add_patch(Rectangle((x, y), w, h, fc=color, ec="black", lw=0.8))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=FONT)

    def arrow(x0: float, y0: float, x1: float, y1: float) -> None:
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=10, color="black"))

    shown_buckets = min(buckets, 8)
    for rank in range(world):
        y = world - 1 - rank
        share = f"{per_rank_batch} samples" if per_rank_batch else "its share"
        box(0, y + 0.1, 16, 0.65, f"rank {rank}: data,\n{share} of the batch", "#eeeeee")
        arrow(16, y + 0.42, 19, y + 0.42)
        box(19, y + 0.1, 17, 0.65, f"replica {rank} of the model\n(the same weights)", "#dbe9f6")
        arrow(36, y + 0.42, 39, y + 0.42)
        width = 26 / max(shown_buckets, 1)
        for b in range(shown_buckets):  # launch order: the output layer's gradients first
            label = f"b{b + 1}" if shown_buckets == buckets or b < shown_buckets - 1 else "..."
            box(39 + b * width, y + 0.1, width * 0.85, 0.65, label, "#fde0c5")
        arrow(65, y + 0.42, 68, y + 0.42)
    box(68, 0.1, 12, world - 0.45, "all-reduce of\neach bucket:\nsum over the\nranks / N", "#f8d0d0")
    for rank in range(world):
        y = world - 1 - rank
        arrow(80, y + 0.42, 83, y + 0.42)
        box(83, y + 0.1, 17, 0.65, "the averaged gradient:\nthe same optimizer step", "#d5efd5")
    size = f"{nbytes / 1e3:.0f} kB" if nbytes < 1e6 else f"{nbytes / 1e6:.1f} MB"
    cap = f" (bucket_cap_mb={config['bucket_cap_mb']:g})" if config.get("bucket_cap_mb") else ""
    ax.text(
        50,
        -0.45,
        f"gradients: {size} per step in {buckets} bucket(s){cap}, b1 the output layer's (ready first);\neach "
        "bucket's all-reduce starts as soon as all its gradients exist, while backward computes the rest",
        ha="center",
        va="center",
        fontsize=FONT,
    )
    top.suptitle(f"What DDP does: {world} processes, one replica each ({run.name})", fontsize=TITLE_FONT)

    # The timeline of one real step.
    tl = bottom.subplots()
    for rank, figures in enumerate(ranks):
        y = rank
        start = 0.0
        for key, label, color in DDP_PARTS:
            width_ms = 1e3 * max(figures[key], 0.0)
            tl.barh(y, width_ms, left=start, height=0.45, color=color, label=label if rank == 0 else None)
            start += width_ms
        end_backward = 1e3 * (figures["data_s"] + figures["forward_s"] + figures["backward_s"])
        comm_ms = 1e3 * figures["comm_s"]
        spans = figures["bucket_spans"]
        if spans:  # each bucket's all-reduce, as recorded: ready -> done, ms after the step's start
            lanes = min(len(spans), BUCKET_LANES)
            lane, top = BUCKET_BAND / lanes, y - 0.28 - BUCKET_BAND  # just above the step's bar
            for b, (ready, done) in enumerate(spans):
                tl.barh(
                    top + (b % lanes + 0.5) * lane,
                    1e3 * (done - ready),
                    left=1e3 * (figures["data_s"] + ready),
                    height=lane * 0.8,
                    color="tab:purple",
                    alpha=0.75,
                    label=(
                        "each bucket's all-reduce, from its gradients ready to reduced (b1, ready first, on top)"
                        if rank == 0 and b == 0
                        else None
                    ),
                )
                if lanes == len(spans):
                    tl.annotate(
                        f"b{b + 1}",
                        (1e3 * (figures["data_s"] + ready), top + (b + 0.5) * lane),
                        xytext=(-2, 0),
                        textcoords="offset points",
                        ha="right",
                        va="center",
                        fontsize=FONT - 1,
                    )
        else:  # no spans recorded (a CSV older than bucket_spans_ms): the total, placed to end with backward
            tl.barh(
                y - 0.42,
                comm_ms,
                left=end_backward - comm_ms,
                height=0.22,
                color="tab:purple",
                hatch="//",
                alpha=0.6,
                label="some bucket's all-reduce in flight (total, placed to end with backward)" if rank == 0 else None,
            )
        overlap = 1 - figures["exposed_comm_s"] / figures["comm_s"] if figures["comm_s"] > 0 else 0.0
        tl.text(
            end_backward + 0.5,
            y - 0.42,
            f"comm {comm_ms:.1f} ms, exposed {1e3 * figures['exposed_comm_s']:.1f} ms: overlap {100 * overlap:.0f} %",
            va="center",
            fontsize=FONT,
        )
    tl.set_yticks(range(world), [f"rank {r}" for r in range(world)], fontsize=FONT + 1)
    tl.set_ylim(world - 0.4, -0.8)
    longest = max(1e3 * (f["data_s"] + f["forward_s"] + f["backward_s"] + f["optimizer_s"]) for f in ranks)
    tl.set_xlim(0, (longest or 1.0) * 1.45)  # a step recorded as 0 ms still gets a range
    tl.tick_params(axis="x", labelsize=FONT)
    tl.set_xlabel(
        f"ms within iteration {step['iteration']} (the median measured step of rank 0), from steps_rank<r>.csv; "
        "these lengths are this machine's: another CPU or GPU, or a busy machine, draws others",
        fontsize=FONT,
    )
    bottom.legend(loc="outside lower center", fontsize=FONT, ncols=3)
    bottom.suptitle(
        "One real step: the all-reduce overlaps backward; its exposed end is what overlap does not hide",
        fontsize=TITLE_FONT,
    )
    return fig
