"""What a report says of a search (``search:`` in the spec, :mod:`ignite_ddl.sweep.search`): that it was one, how
many configurations of how many possible it measured, how it ended, what the part it did not run could still hide,
and the trajectory: the best mean throughput found so far against the runs spent (``search_trajectory.png``).

The search leaves ``search.json`` beside ``results.jsonl``; a grid sweep has none, and its report has no such part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ignite_ddl.core.figures import pyplot, save_figure
from ignite_ddl.core.jsonfiles import read_json

__all__ = [
    "CAVEAT",
    "TRAJECTORY",
    "guide_tables",
    "search_paragraphs",
    "search_section",
    "search_state",
    "trajectory_figure",
]

SEARCH_FILE = "search.json"
TRAJECTORY = "search_trajectory.png"
CAVEAT = "a search cannot prove the best of the configurations it did not run"
_SAMPLERS = {
    "tpe": "Optuna's TPE sampler (tree-structured Parzen estimator)",
    "gp": "Optuna's Gaussian-process sampler (noise fitted from the runs)",
    "random": "Optuna's random sampler",
}


def search_state(out: Path) -> dict[str, Any] | None:
    """What the search wrote of itself, or None (a grid sweep, or a file that cannot be read)."""
    path = out / SEARCH_FILE
    if not path.is_file():
        return None
    try:
        state = read_json(path)
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def search_paragraphs(state: dict[str, Any]) -> list[str]:
    """The report's words on a search: what was measured of what, how it ended, and the caveat."""
    size = state.get("space_size")
    measured, runs = int(state.get("measured") or 0), int(state.get("runs") or 0)
    possible = f"{size} possible" if size else "a continuous space (a range without steps)"
    budget = []
    if state.get("budget_runs"):
        budget.append(f"{state['budget_runs']} runs")
    if state.get("budget_s"):
        budget.append(f"{float(state['budget_s']):g} s")
    sampler = _SAMPLERS.get(str(state.get("sampler")), str(state.get("sampler")))
    skipped = []
    if state.get("refused"):
        skipped.append(f"{state['refused']} proposal(s) refused by the spec's exclude or the option checks")
    if state.get("repeated"):
        skipped.append(f"{state['repeated']} proposal(s) of a configuration already measured")
    first = (
        f"This was a search, not a grid: {sampler}, seed {state.get('seed')}, proposed the configurations; "
        f"{measured} configuration(s) of {possible} were measured, in {runs} runs (budget: "
        f"{' and '.join(budget) or 'none'})."
    )
    if skipped:
        first += f" Answered without a run: {'; '.join(skipped)}."
    ended = state.get("search_ended")
    second = (f"The search phase ended: {ended}. " if ended else "") + (
        "Then the sampler's next proposal was measured, and the leader and every configuration the verdict could "
        "not yet tell from it got adaptive repeats, with the verdict's correction for multiple comparisons over "
        "every configuration measured."
    )
    if state.get("extended"):
        second += (
            " Those rounds were out of reach (even the most repeats allowed would not have settled the "
            f"contenders), so the rest of the budget measured {state['extended']} more configuration(s), one at a "
            "time, the contenders weighed again after each."
        )
    unmeasured = f"{size - measured} configuration(s)" if size else "the configurations"
    third = (
        f"The verdict above is about the configurations measured; {CAVEAT}: {unmeasured} never measured could be "
        "faster than the best named here. The trajectory (the best mean so far against the runs spent) shows "
        "whether the search was still finding better ones when its budget ended."
    )
    if state.get("phase") != "done":
        third += f" The search did not finish (it stopped in its {state.get('phase', '?')} phase): --resume goes on."
    return [first, *_guided_paragraphs(state), second, third]


def _guided_paragraphs(state: dict[str, Any]) -> list[str]:
    """What the plan's predictions did to the search: who proposed what, what was never run, and why."""
    if not state.get("guided"):
        return []
    guide = _mapping(state.get("guide"))
    measured = [c for c in guide.get("measured") or [] if isinstance(c, dict)]
    by = [str(c.get("proposed_by", "")) for c in measured]
    fastest = sum(b.startswith("guide: predicted") for b in by)
    first = sum(b.startswith("guide: one process") for b in by)
    not_run = _mapping(guide.get("not_run"))
    rows = [r for r in not_run.get("configurations") or [] if isinstance(r, dict)]
    unfit = sum(str(r.get("why", "")).startswith("predicted not to fit") for r in rows)
    limit = guide.get("memory_limit_mb")
    text = (
        "The plan's predictions guided it: every configuration was planned before it ran (its peak memory per rank; "
        f"{'memory_limit_mb ' + format(limit, 'g') if limit is not None else 'no memory_limit_mb'}), "
        f"{unfit} predicted not to fit and never run. Of the {len(measured)} measured, {first} were the one-process "
        "layout the step-time model predicts the others from (the sampler choosing their other options), "
        f"{fastest} were proposed because they were predicted to match or beat the leader, the fastest first, and "
        f"{len(measured) - first - fastest} were the sampler's own. A configuration the plan could not predict was "
        "left to the sampler."
    )
    return [text]


def guide_tables(state: dict[str, Any]) -> list[tuple[str, list[str], list[list[Any]]]]:
    """The guided search's tables (title, header, rows): every configuration measured, what was predicted of it
    before it ran beside what it measured; then every configuration predicted and not run, with why."""
    guide = _mapping(state.get("guide"))
    if not state.get("guided") or not guide:
        return []

    def mib(value: Any) -> str | None:
        return None if not isinstance(value, (int, float)) else f"{value / 2**20:.0f}"

    def rate(value: Any) -> str | None:
        return None if not isinstance(value, (int, float)) else f"{value:.4g}"

    measured = []
    for c in guide.get("measured") or []:
        predicted, got = c.get("predicted_samples_per_s"), c.get("measured_samples_per_s")
        error = f"{100 * (predicted - got) / got:+.1f}" if predicted and got else None
        name = f"cfg{int(c.get('index', 0)):03d}"
        row = [name, _grid_text(c.get("grid")), c.get("proposed_by"), rate(predicted), rate(got), error]
        measured.append(row + [mib(c.get("predicted_peak_bytes"))])
    not_run = _mapping(guide.get("not_run"))
    skipped = [
        [
            _grid_text(r.get("grid")),
            rate(r.get("predicted_samples_per_s")),
            mib(r.get("predicted_peak_bytes")),
            r.get("why"),
        ]
        for r in not_run.get("configurations") or []
        if isinstance(r, dict)
    ]
    if not_run.get("more"):
        skipped.append([f"... and {not_run['more']} more", None, None, None])
    head = ["config", "grid", "proposed by", "predicted samples/s", "measured samples/s", "error %"]
    tables = [("Predicted before it ran, and measured", [*head, "predicted peak MiB"], measured)]
    if skipped:
        head = ["grid", "predicted samples/s", "predicted peak MiB", "why it was not run"]
        tables.append(("Predicted, not run", head, skipped))
    return tables


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _grid_text(grid: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in grid.items()) if isinstance(grid, dict) else str(grid)


def trajectory_figure(state: dict[str, Any]) -> Any:
    """The best mean throughput found so far against the runs spent, or None (nothing measured)."""
    points = [p for p in state.get("trajectory") or [] if isinstance(p, dict) and p.get("best") is not None]
    if not points:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    runs, best = [p["runs"] for p in points], [p["best"] for p in points]
    ax.step(runs, best, where="post", marker="o", markersize=3)
    changed = [p for i, p in enumerate(points) if i == 0 or p["config"] != points[i - 1]["config"]]
    for point in changed:
        ax.annotate(
            f"cfg{point['config']:03d}",
            (point["runs"], point["best"]),
            fontsize=7,
            xytext=(3, -10),
            textcoords="offset points",
        )
    if state.get("budget_runs"):
        ax.axvline(state["budget_runs"], color="grey", linestyle="--", linewidth=1, label="budget")
        ax.legend(fontsize=8)
    # From zero: on an axis starting at the lowest best, a 1.7 % gain filled the plot and read as a large one.
    ax.set_ylim(bottom=0, top=1.1 * max(best))
    ax.set_xlabel("runs spent")
    ax.set_ylabel("best mean samples/s so far")
    ax.set_title(f"Search trajectory ({state.get('measured')} configurations measured)", fontsize=10)
    fig.tight_layout()
    return fig


def write_trajectory(state: dict[str, Any], out: Path) -> str | None:
    """Write the trajectory plot into ``out``; its file name, or None."""
    fig = trajectory_figure(state)
    if fig is None:
        return None
    save_figure(fig, out / TRAJECTORY)
    return TRAJECTORY


class _Document(Protocol):
    """What the report's document offers a section (``report.render.Document``)."""

    def heading(self, text: str, level: int = 2) -> None: ...

    def paragraph(self, text: str) -> None: ...

    def image(self, path: str, alt: str) -> None: ...

    def table(self, header: list[str], rows: list[list[Any]]) -> None: ...


def search_section(doc: _Document, out: Path) -> None:
    """The report's section on a search, with its trajectory plot; nothing for a grid sweep."""
    state = search_state(out)
    if state is None:
        return
    doc.heading("Search")
    for text in search_paragraphs(state):
        doc.paragraph(text)
    for title, header, rows in guide_tables(state):
        doc.heading(title, 3)
        doc.table(header, rows)
    name = write_trajectory(state, out)
    if name:
        doc.image(name, "the best mean throughput found so far against the runs the search spent")
