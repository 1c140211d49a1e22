"""The report's plots stay readable from 1 to 6 grid axes and 2 to 64 configurations: every drawn text lies inside
its figure, no two texts overlap (titles, tick labels, legend entries, axis labels), legends keep off every axes'
data area, and no font is too small to read. The boxes come from matplotlib's own renderer, so a clipped title or
a legend drawn over the bars fails here as it would on screen."""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import random
import re
from pathlib import Path
from unittest import mock

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import FigureBase  # noqa: E402
from matplotlib.legend import Legend  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from ignite_ddl.report import analyze  # noqa: E402
from ignite_ddl.report.plots import PLOTS, figures, make_plots  # noqa: E402

TOLERANCE = 1.0  # pixels: boxes are rounded to whole pixels by the renderer
MIN_FONT_PT = 6.5

# Grid axes in the order they are added: a sweep of N axes uses the first N, two values each.
AXES = {
    "nproc_per_node": [1, 2],
    "batch_size": [32, 128],
    "amp": ["none", "bf16"],
    "model": ["cnn", "mlp"],
    "num_workers": [0, 2],
    "optimizer": ["sgd", "adamw"],
}
BASE_RATE = {"cnn": 900.0, "mlp": 3100.0}
PHASE_SHARES = {"data": 0.12, "forward": 0.3, "backward": 0.43, "optimizer": 0.15}


def _steps_csv(path: Path, step_s: float, rng: random.Random, warmup: int = 5, iterations: int = 40) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["iteration", "epoch", "warmup", "data_s", "step_s", "forward_s", "backward_s", "optimizer_s", "iter_s"]
            + ["samples"]
        )
        for i in range(warmup + iterations):
            cold = i < warmup
            step = step_s * (2.5 if cold else rng.lognormvariate(0.0, 0.08))
            phases = [step * PHASE_SHARES[p] for p in ("data", "forward", "backward", "optimizer")]
            row = [i + 1, 1, int(cold), phases[0], step, *phases[1:], step * 1.02, 32]
            writer.writerow([f"{v:.6f}" if isinstance(v, float) else v for v in row])


def sweep(tmp_path: Path, n_axes: int, repeats: int = 3, seed: int = 0) -> list[dict]:
    """Hand-made completed records of a full factorial sweep over the first ``n_axes`` grid axes."""
    rng = random.Random(seed)
    names = list(AXES)[:n_axes]
    records = []
    for index, values in enumerate(itertools.product(*(AXES[n] for n in names))):
        grid = dict(zip(names, values))
        config = {"model": "cnn", "dataset": "synthetic", "amp": "none", "optimizer": "sgd", "sync_bn": False}
        config |= {"batch_size": 64, "nproc_per_node": 1, "num_workers": 0, "epochs": 1, **grid}
        procs, batch = config["nproc_per_node"], config["batch_size"]
        rate = BASE_RATE[config["model"]] * (1.0 + 0.0035 * batch) / 1.2
        rate *= (1.1 if config["amp"] == "bf16" else 1.0) * (1.15 if config["num_workers"] else 1.0)
        rate *= (1.7 if procs == 2 else 1.0) * (0.93 if config["optimizer"] == "adamw" else 1.0)
        rate *= rng.uniform(0.9, 1.1)  # configurations of similar speed: some tie, some separate
        spread = rng.choice([0.01, 0.03, 0.08])
        digest = hashlib.sha1(json.dumps(grid, sort_keys=True).encode()).hexdigest()[:12]
        for repeat in range(repeats):
            run_dir = tmp_path / f"cfg{index:03d}-r{repeat}"
            run_dir.mkdir()
            samples_per_s = rate * rng.gauss(1.0, spread)
            step_s = batch / samples_per_s
            ranks = []
            for rank in range(procs):
                _steps_csv(run_dir / f"steps_rank{rank}.csv", step_s * (1.0 + 0.04 * rank), rng)
                means = {f"{p}_s_mean": step_s * share for p, share in PHASE_SHARES.items()}
                ranks.append(
                    {
                        "rank": rank,
                        "iterations": 40,
                        "samples": 40 * batch // procs,
                        "window_s": 40 * step_s,
                        "samples_per_s": samples_per_s / procs,
                        "step_s_mean": step_s,
                        "step_s_p50": step_s,
                        "step_s_p90": 1.1 * step_s,
                        "step_s_p99": 1.3 * step_s,
                        "data_share": PHASE_SHARES["data"],
                        "own_s_mean": 0.9 * step_s,
                        **means,
                    }
                )
            straggler = {"rank": 1, "own_s_mean": 0.94 * step_s, "median_own_s_mean": 0.9 * step_s, "ratio": 1.04}
            summary = {
                "world_size": procs,
                "samples_per_s": samples_per_s,
                "threads_per_process": 1,
                "cpu_cores": 2,
                "device": {"type": "cpu", "name": "cpu"},
                "batch": {"requested_global": batch, "per_rank": batch // procs, "global": batch},
                "val_accuracy": 0.5,
                "diverged": None,
                "confusion_matrix": [[rng.randrange(1, 20) for _ in range(10)] for _ in range(10)],
                "contention": {"foreign_cpu_share": 0.01, "foreign_gpu_share": None, "nodes": []},
                "memory": {
                    "source": "/proc (VmHWM)",
                    "window": "after warm-up",
                    "limit_bytes": None,
                    "ranks": [],
                    "max": {"peak_rss_bytes": int((300 + 2 * batch / procs) * 2**20 * rng.gauss(1.0, 0.02))},
                },
                "steps": {
                    "warmup_iterations": 5,
                    "ranks": ranks,
                    "global": {
                        "samples": 40 * batch,
                        "window_s": 40 * step_s,
                        "samples_per_s": samples_per_s,
                        "step_s_p50": step_s,
                        "step_s_p90": 1.1 * step_s,
                        "step_s_p99": 1.3 * step_s,
                        "data_share": PHASE_SHARES["data"],
                    },
                    "straggler": straggler if procs > 1 else None,
                },
            }
            records.append(
                {
                    "key": f"{digest}-r{repeat}",
                    "index": index,
                    "repeat": repeat,
                    "attempt": 0,
                    "position": index * repeats + repeat,
                    "status": "completed",
                    "error": None,
                    "contended": False,
                    "run_dir": str(run_dir),
                    "elapsed_s": 5.0,
                    "exit_code": 0,
                    "grid": grid,
                    "config": {**config, "output_dir": str(run_dir)},
                    "summary": summary,
                }
            )
    return records


def drawn(fig):
    """Draw ``fig``; return the renderer and the texts actually drawn (visible, not empty). Tick objects a figure
    keeps beyond its view limits, and the texts of hidden axes, are found by ``findobj`` but never drawn."""
    seen: dict[int, Text] = {}
    draw = Text.draw

    def spy(self, renderer):
        seen[id(self)] = self
        return draw(self, renderer)

    with mock.patch.object(Text, "draw", spy):
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.findobj(Text) if id(t) in seen and t.get_visible() and t.get_text().strip()]
    return renderer, texts


def overlap(a, b) -> bool:
    """Boxes overlap by more than the tolerance in both directions."""
    return min(a.x1, b.x1) - max(a.x0, b.x0) > TOLERANCE and min(a.y1, b.y1) - max(a.y0, b.y0) > TOLERANCE


def name(text: Text) -> str:
    return repr(text.get_text()[:60])


def panels(fig) -> list[Axes]:
    """Every visible axes, those of subfigures too (``fig.axes`` holds only the figure's own)."""
    return [ax for ax in fig.findobj(Axes) if ax.get_visible()]


def titles(fig) -> list[Text]:
    """The suptitles of the figure and its subfigures, and every axes' titles."""
    found = [f._suptitle for f in fig.findobj(FigureBase) if f._suptitle is not None and f._suptitle.get_text()]
    for ax in panels(fig):
        found += [t for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()]
    return found


def check(fig, plot: str) -> None:
    renderer, texts = drawn(fig)
    assert texts, f"{plot}: no text drawn"
    frame = fig.bbox
    boxes = {id(t): t.get_window_extent(renderer) for t in texts}
    for t in texts:
        box = boxes[id(t)]
        inside = (
            box.x0 >= frame.x0 - TOLERANCE
            and box.y0 >= frame.y0 - TOLERANCE
            and box.x1 <= frame.x1 + TOLERANCE
            and box.y1 <= frame.y1 + TOLERANCE
        )
        assert inside, f"{plot}: text {name(t)} at {box.bounds} is clipped by the figure {frame.bounds}"
        assert t.get_fontsize() >= MIN_FONT_PT, f"{plot}: text {name(t)} is {t.get_fontsize()} pt"

    shown = titles(fig)
    assert shown, f"{plot}: no title"
    for a, b in itertools.combinations(shown, 2):
        ea, eb = a.get_window_extent(renderer), b.get_window_extent(renderer)
        assert not overlap(ea, eb), f"{plot}: titles {name(a)} and {name(b)} overlap"

    drawn_ids = set(boxes)
    for ax in panels(fig):
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels() if id(t) in drawn_ids]
            for a, b in itertools.combinations(labels, 2):
                assert not overlap(boxes[id(a)], boxes[id(b)]), f"{plot}: tick labels {name(a)} and {name(b)} overlap"

    # Stronger still: no two drawn texts overlap at all (title on tick labels, axis label on a legend, ...).
    corners = np.array([boxes[id(t)].extents for t in texts])  # x0, y0, x1, y1
    wide = np.minimum.outer(corners[:, 2], corners[:, 2]) - np.maximum.outer(corners[:, 0], corners[:, 0])
    high = np.minimum.outer(corners[:, 3], corners[:, 3]) - np.maximum.outer(corners[:, 1], corners[:, 1])
    clash = np.triu((wide > TOLERANCE) & (high > TOLERANCE), k=1)
    for i, j in zip(*np.nonzero(clash)):
        raise AssertionError(f"{plot}: texts {name(texts[i])} and {name(texts[j])} overlap")

    data = [ax.get_window_extent(renderer) for ax in panels(fig)]
    for legend in fig.findobj(Legend):  # figure, subfigure and axes legends
        box = legend.get_window_extent(renderer)
        for area in data:
            assert not overlap(box, area), f"{plot}: a legend at {box.bounds} covers data at {area.bounds}"
        own = {id(t) for t in legend.findobj(Text)}
        for t in texts:
            if id(t) not in own:
                assert not overlap(box, boxes[id(t)]), f"{plot}: a legend covers the text {name(t)}"
        inside = frame.x0 - TOLERANCE <= box.x0 and box.x1 <= frame.x1 + TOLERANCE
        inside = inside and frame.y0 - TOLERANCE <= box.y0 and box.y1 <= frame.y1 + TOLERANCE
        assert inside, f"{plot}: a legend at {box.bounds} is clipped by the figure {frame.bounds}"


def check_throughput_is_honest(analysis, fig) -> None:
    """One panel per workload; bars coloured best (green) or tied (olive) as the verdicts say; error bars span the
    confidence intervals."""
    shown_panels = panels(fig)
    assert len(shown_panels) == len(analysis.verdicts)
    best = {v.best for v in analysis.verdicts if v.best}
    tied = {name for v in analysis.verdicts for name in v.tied}
    assert best or tied
    colors = {"tab:green": best, "tab:olive": tied}
    shown = []
    for ax in shown_panels:
        names = [label.get_text().split(":")[0] for label in ax.get_yticklabels()]
        shown += names
        configs = [analysis.config(n) for n in names]
        assert len({c.workload for c in configs}) == 1, "a panel mixes workloads"
        (bars,) = ax.containers[:1]
        (errors,) = ax.containers[1].lines[2]
        for config, bar, (low, high) in zip(configs, bars, errors.get_segments()):
            assert bar.get_width() == pytest.approx(config.throughput.value)
            for color, members in colors.items():
                same = bar.get_facecolor()[:3] == matplotlib.colors.to_rgba(color)[:3]
                assert same == (config.name in members), f"{config.name} coloured wrongly"
            assert (low[0], high[0]) == pytest.approx((config.throughput.low, config.throughput.high))
    assert sorted(shown) == sorted(c.name for c in analysis.configs)


def check_confusion_sums_the_runs(analysis, records, fig) -> None:
    """One heatmap per workload (its most accurate configuration), showing the runs' matrices summed, by row share."""
    shown = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert len(shown) == min(len(analysis.verdicts), 32)
    for ax in shown:
        name = re.search(r"cfg\d{3}", ax.get_title())[0]
        config = analysis.config(name)
        used = {r.run_dir for r in config.used_runs}
        matrices = [r["summary"]["confusion_matrix"] for r in records if r["run_dir"] in used]
        assert matrices
        counts = [[int(t.get_text()) for t in ax.texts][i * 10 : (i + 1) * 10] for i in range(10)]
        assert counts == [[sum(m[i][j] for m in matrices) for j in range(10)] for i in range(10)]
        shares = ax.images[0].get_array()
        assert float(shares[0][0]) == pytest.approx(counts[0][0] / sum(counts[0]))


def check_the_pareto_front_is_marked(analysis, fig) -> None:
    """The dashed line joins exactly the configurations no other beats on both speed and memory."""
    from ignite_ddl.report.plots import pareto_front

    for ax in panels(fig):
        dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
        assert len(dashed) == 1
        xs, ys = dashed[0].get_data()
        points = [(x, y) for x, y in zip(xs, ys)]
        assert points == sorted(points)  # in order of memory
        for (_, y0), (_, y1) in zip(points, points[1:]):
            assert y1 > y0  # more memory on the front only buys more speed
    everything = [(c.peak_memory.value / 2**20, c.throughput.value) for c in analysis.configs]
    assert pareto_front(everything)


def check_legends_leave_the_workload_to_panel_titles(analysis, fig) -> None:
    """Panels titled by workload ("workload: model=cnn"): no legend entry says the workload again."""
    named = [a for a in analysis.workload_axes if any(f"{a}=" in ax.get_title() for ax in panels(fig))]
    entries = [t.get_text() for legend in fig.findobj(Legend) for t in legend.get_texts()]
    assert entries
    for axis in named:
        assert not any(f"{axis}=" in e for e in entries), f"legend repeats {axis}: {entries}"


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize(("n_axes", "n_configs"), [(1, 2), (5, 32), (6, 64)])
def test_plots_are_readable(tmp_path, n_axes, n_configs):
    records = sweep(tmp_path, n_axes)
    analysis = analyze(records, {})
    assert len(analysis.configs) == n_configs
    made = figures(analysis)
    try:
        expected = set(PLOTS) if n_axes >= 2 else set(PLOTS) - {"throughput_vs_batch.png"}  # one batch size
        assert set(made) == expected
        for plot, fig in made.items():
            check(fig, plot)
        check_throughput_is_honest(analysis, made["throughput.png"])
        check_confusion_sums_the_runs(analysis, records, made["confusion.png"])
        check_the_pareto_front_is_marked(analysis, made["throughput_vs_memory.png"])
        for plot in ("throughput_vs_memory.png", "speed_vs_quality.png"):
            check_legends_leave_the_workload_to_panel_titles(analysis, made[plot])
    finally:
        for fig in made.values():
            plt.close(fig)


def test_make_plots_writes_pngs(tmp_path):
    analysis = analyze(sweep(tmp_path, 2), {})
    out = tmp_path / "report"
    out.mkdir()
    made = make_plots(analysis, out)
    assert {name for name, _ in made} == set(PLOTS)
    for name, description in made:
        assert description == PLOTS[name]
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.get_fignums(), "make_plots leaves figures open"


def test_a_report_made_from_another_folder_finds_the_runs(tmp_path):
    # A sweep records run_dir relative to the folder it was started in; the report may be made from anywhere.
    from ignite_ddl.core.results import append_record
    from ignite_ddl.report import load

    out = tmp_path / "sweep"
    (out / "runs").mkdir(parents=True)
    for record in sweep(out / "runs", 2):
        record["run_dir"] = f"started/elsewhere/runs/{Path(record['run_dir']).name}"
        append_record(out / "results.jsonl", record)
    made = figures(load(out))
    try:
        assert "rank_step_times.png" in made
    finally:
        for fig in made.values():
            plt.close(fig)


def test_rank_step_times_names_the_repeat_it_shows(tmp_path):
    # The first repeat of every configuration was contended: the plot shows the second one, and says so.
    records = sweep(tmp_path, 1)
    for record in records:
        record["contended"] = record["repeat"] == 0
    analysis = analyze(records, {})
    made = figures(analysis)
    try:
        fig = made["rank_step_times.png"]
        (two,) = [c for c in analysis.configs if c.world_size == 2]
        (ax,) = panels(fig)
        assert ax.get_title().endswith("repeat 2 of 3"), ax.get_title()
        assert "one repeat (named per panel)" in fig._suptitle.get_text().replace("\n", " ")
        # The boxes are that repeat's measured steps: each rank's median is drawn, the contended repeat's is not.
        levels = [ln.get_ydata()[0] for ln in ax.lines if len(set(ln.get_ydata())) == 1]
        for repeat, drawn_here in ((1, True), (0, False)):
            run_dir = Path(next(r.run_dir for r in two.runs if r.repeat == repeat))
            for rank in range(2):
                with open(run_dir / f"steps_rank{rank}.csv") as f:
                    steps = [1e3 * float(r["step_s"]) for r in csv.DictReader(f) if r["warmup"] == "0"]
                median = float(np.median(steps))
                assert any(abs(level - median) < 1e-9 for level in levels) is drawn_here, (repeat, rank)
    finally:
        for fig in made.values():
            plt.close(fig)


def _ddp_csv(
    path: Path,
    steps: list[tuple[float, float, float, float, float, float]],
    warmup: int = 1,
    spans: str | None = None,
) -> None:
    """A rank's steps_rank<r>.csv with the columns ddp_step reads: per row step, data, forward, backward, optimizer
    and communication seconds, exposed communication 1 ms, 3 buckets of 120 kB in all; with ``spans``, the
    ``bucket_spans_ms`` column holds it on every measured row (blank in warm-up), without, the column is absent
    (a CSV written before it existed)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["iteration", "warmup", "data_s", "step_s", "forward_s", "backward_s", "optimizer_s"]
            + ["comm_s", "exposed_comm_s", "comm_bytes", "buckets"]
            + (["bucket_spans_ms"] if spans is not None else [])
        )
        for i, (step, data, fwd, bwd, opt, comm) in enumerate(steps):
            row = [i + 1, int(i < warmup), data, step, fwd, bwd, opt, comm, 0.001, 120000, 3]
            writer.writerow(row + ([spans if i >= warmup else ""] if spans is not None else []))


def test_the_ddp_diagram_draws_the_recorded_step(tmp_path):
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Rectangle

    from ignite_ddl.report.diagram import ddp_diagram, ddp_step

    steps = [(0.09, 0.001, 0.03, 0.05, 0.001, 0.01)]  # warm-up
    steps += [(s, 0.001, 0.02, s - 0.022, 0.001, 0.004) for s in (0.030, 0.050, 0.040)]  # median: iteration 4
    # Iteration 4's buckets, ms after the step's start (backward: 20 -> 38 ms on rank 0, 22 -> 40 ms on rank 1): b1
    # and b2 overlap (31 -> 34 ms), b3 is the last (37 -> 38 ms): 4 ms in flight, 1 ms exposed.
    spans = {0: [(31.0, 33.0), (32.0, 34.0), (37.0, 38.0)], 1: [(33.0, 35.0), (34.0, 36.0), (39.0, 40.0)]}
    cells = {r: ";".join(f"{ready:.3f}-{done:.3f}" for ready, done in spans[r]) for r in spans}
    rank1_steps = [(s, d, f + 0.002, b, o, c) for s, d, f, b, o, c in steps]
    recorded, old = tmp_path / "recorded", tmp_path / "old"
    for run, with_spans in ((recorded, True), (old, False)):
        run.mkdir()
        _ddp_csv(run / "steps_rank0.csv", steps, spans=cells[0] if with_spans else None)
        _ddp_csv(run / "steps_rank1.csv", rank1_steps, spans=cells[1] if with_spans else None)
    step = ddp_step(recorded)
    assert step["iteration"] == 4 and len(step["ranks"]) == 2
    rank1 = step["ranks"][1]
    assert rank1["forward_s"] == pytest.approx(0.022) and rank1["backward_compute_s"] == pytest.approx(0.018 - 0.001)
    assert rank1["buckets"] == 3 and rank1["comm_s"] == pytest.approx(0.004)
    assert [t for span in rank1["bucket_spans"] for t in span] == pytest.approx([t / 1e3 for s in spans[1] for t in s])
    assert all(r["bucket_spans"] == [] for r in ddp_step(old)["ranks"])  # no column: no spans

    # Every part of both ranks' step, in ms: data 1, forward 20 / 22, backward compute 17, exposed 1, optimizer 1.
    parts = [1.0, 20.0, 17.0, 1.0, 1.0, 1.0, 22.0, 17.0, 1.0, 1.0]
    for run in (recorded, old):
        fig = ddp_diagram(run)
        try:
            renderer, texts = drawn(fig)
            timeline = next(ax for ax in fig.findobj(Axes) if ax.get_yticklabels() and ax.get_xlabel())
            bars = [p for p in timeline.patches if isinstance(p, Rectangle) and p.get_width() > 0]
            buckets = [p for p in bars if p.get_facecolor()[:3] == to_rgb("tab:purple")]
            assert sorted(round(p.get_width(), 6) for p in bars if p not in buckets) == sorted(parts)
            words = " ".join(t.get_text() for t in texts)
            assert "3 bucket(s)" in words and "iteration 4" in words and "this machine's" in words
            if run == recorded:
                # One bar per recorded bucket, on its rank's row, from ready to done after the rank's data wait
                # (1 ms): b1 on top, each next bucket a row lower.
                assert len(buckets) == 6 and "each bucket's all-reduce" in words and "b3" in words
                for rank in range(2):
                    mine = sorted((p for p in buckets if rank - 1 < p.get_y() < rank), key=lambda p: p.get_y())
                    drawn_spans = [t for p in mine for t in (p.get_x(), p.get_x() + p.get_width())]
                    assert drawn_spans == pytest.approx([1.0 + t for span in spans[rank] for t in span])
            else:  # the total in flight, 4 ms, ending with backward (1 + 20 + 18 = 39 ms; 41 on rank 1)
                assert [(round(p.get_width(), 6), round(p.get_x() + p.get_width(), 6)) for p in buckets] == [
                    (4.0, 39.0),
                    (4.0, 41.0),
                ]
                assert "total, placed to end with backward" in words
            box = fig.bbox
            for text in texts:  # nothing drawn outside the figure
                extent = text.get_window_extent(renderer)
                assert extent.x0 >= box.x0 - TOLERANCE and extent.x1 <= box.x1 + TOLERANCE, text.get_text()
        finally:
            plt.close(fig)
    one = tmp_path / "one"
    one.mkdir()
    _ddp_csv(one / "steps_rank0.csv", steps)
    with pytest.raises(ValueError, match="2\\+ processes"):
        ddp_step(one)


def test_a_breakdown_measured_at_zero_draws_without_a_warning(tmp_path, recwarn):
    # Steps whose every phase was recorded as 0 ms (seen in a sweep of tiny runs) once set an empty axis range, and
    # matplotlib warned "identical low and high xlims" in the middle of the sweep's and the report's output.
    analysis = analyze(sweep(tmp_path, 1), {})
    for config in analysis.configs:
        config.rank_phases = [dict.fromkeys(phases, 0.0) for phases in config.rank_phases]
    assert any(config.rank_phases for config in analysis.configs)
    made = figures(analysis)
    try:
        assert "step_breakdown.png" in made
    finally:
        for fig in made.values():
            plt.close(fig)
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)], [str(w.message) for w in recwarn]


def test_a_quality_axis_of_equal_figures_shows_them_plainly():
    """A sweep whose configurations all learnt the same loss (to 1e-7) drew its axis as "1e-7 + 1.986322" and the
    points apart; the axis now spans at least 2 % of the figure, without an offset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ignite_ddl.report.plots.tradeoffs import _readable_quality_axis

    fig, ax = plt.subplots()
    try:
        values = [1.9863221, 1.9863225]
        ax.plot(values, [100, 200], "o")
        _readable_quality_axis(ax, values)
        fig.canvas.draw()
        low, high = ax.get_xlim()
        assert high - low >= 0.02 * 1.9863 - 1e-9 and low < min(values) and max(values) < high
        assert ax.xaxis.get_offset_text().get_text() == ""
    finally:
        plt.close(fig)
