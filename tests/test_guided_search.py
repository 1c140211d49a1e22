"""A search guided by the plan's predictions (ignite_ddl/sweep/guide.py): the order follows the predictions, nothing
predicted not to fit runs, ``guided: false`` is the sampler alone, a space of 10^6 is planned lazily, and what the
plan cannot predict is left unguided. The runs are drawn (tests/simulated.py); the memory predictions are the
plan's own traces; the step-time model is given where a test needs predictions it knows."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from simulated import Simulated
from test_search import GRID, landscape

from ignite_ddl.core.jsonfiles import read_json
from ignite_ddl.core.results import read_results
from ignite_ddl.report.search import guide_tables, search_paragraphs
from ignite_ddl.sweep.forecast import MIB, Planner
from ignite_ddl.sweep.guide import Guide
from ignite_ddl.sweep.search import run_search
from ignite_ddl.sweep.spec import parse_spec


def guided_spec(grid: dict[str, Any], **more: Any) -> Any:
    search = {"sampler": "tpe", "seed": 0, "guided": True, **more.pop("search", {})}
    return parse_spec(
        {"name": "sim", "grid": grid, "predict": True, "search": search, "min_repeats": 2, "max_repeats": 4, **more}
    )


def predicting(rates: Callable[[dict[str, Any]], float]) -> Callable[..., dict[str, Any]]:
    """A step-time model that predicts each configuration it is asked about at ``rates(grid)`` samples/s."""

    def model(grids: Mapping[int, dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, Any]:
        steps = {
            str(i): {"step_s": g["batch_size"] / rates(g), "low_s": None, "basis": "given"} for i, g in grids.items()
        }
        return {"link": None, "configurations": steps}

    return model


def measured_order(out: Path) -> list[dict[str, Any]]:
    """Each configuration measured, in the order it was first run."""
    seen: dict[int, dict[str, Any]] = {}
    for record in read_results(out / "results.jsonl"):
        seen.setdefault(record["index"], record["grid"])
    return [seen[i] for i in sorted(seen)]


def test_the_guided_order_follows_the_predictions(tmp_path):
    """The first configuration is one process (the step model's twin), the sampler choosing its other options; the
    next two are its own options on 2 processes, proposed whole in the order predicted. The predictions here rank
    two intra-op threads first, which the runs (2 processes 25 % faster, a second thread 7 % slower) contradict: the
    order is the predictions', not the sampler's nor the truth's."""
    spec = guided_spec(GRID, search={"budget_runs": 10}, rerun_contended=0)
    guide = Guide(
        spec, tmp_path, lambda line: None, measure=False, step_model=predicting(lambda g: 900.0 + g["threads"])
    )
    run_search(spec, tmp_path, Simulated(landscape, 0.02, 0), False, lambda line: None, guide)
    first, second, third = measured_order(tmp_path)[:3]
    assert first["nproc_per_node"] == 1
    same = {k: v for k, v in first.items() if k not in ("nproc_per_node", "threads")}
    assert second == {**same, "nproc_per_node": 2, "threads": 2} and third == {
        **same,
        "nproc_per_node": 2,
        "threads": 1,
    }
    state = read_json(tmp_path / "search.json")
    by = [c["proposed_by"] for c in state["guide"]["measured"]]
    assert by[0].startswith("guide: one process") and by[1] == "guide: predicted 902 samples/s"
    assert state["guide"]["measured"][1]["predicted_samples_per_s"] == 902.0
    # The report's table: predicted before it ran, beside what it measured.
    (title, header, rows), *_ = guide_tables(state)
    assert header[3:5] == ["predicted samples/s", "measured samples/s"] and rows[1][3] == "902"


def test_a_configuration_predicted_not_to_fit_is_never_run(tmp_path):
    """The limit lies between the traced peaks of batch 32 and batch 2048 (the CNN's, without the runtime): every
    configuration of the large batch is refused before a run, and listed with its figure and the limit.

    Midway between the largest small one and the smallest large one, each accumulation planned: the large batch in
    two micro-batches traces about half the one-step peak, and the replayed heap (tens of MiB, moving by ten between
    replays) must not decide which side of the limit a configuration falls."""
    grid = {"batch_size": [32, 2048], "accumulate": [1, 2]}
    planner = Planner(guided_spec(grid, search={"budget_runs": 40}), tmp_path / "probe", measure=False)
    traced = {
        (b, a): sum(planner.plan(0, {"batch_size": b, "accumulate": a}).prediction.parts.values())
        for b in (32, 2048)
        for a in (1, 2)
    }
    small, large = max(traced[32, a] for a in (1, 2)), min(traced[2048, a] for a in (1, 2))
    assert large > 4 * small  # room on both sides of the limit for the heap's variation
    limit = (small + large) / 2 / MIB
    spec = guided_spec(grid, search={"budget_runs": 40, "sampler": "random"}, memory_limit_mb=limit, rerun_contended=0)
    executor = Simulated(lambda g: 100.0 + g["batch_size"] / 10, 0.02)
    run_search(spec, tmp_path, executor, False, lambda line: None, Guide(spec, tmp_path, lambda line: None, False))
    records = read_results(tmp_path / "results.jsonl")
    assert {r["grid"]["batch_size"] for r in records} == {32}  # every fitting configuration ran, nothing else
    assert all(r["prediction"]["parts"]["activations"] > 0 for r in records)  # the plan's figures kept beside
    state = read_json(tmp_path / "search.json")
    unfit = state["guide"]["not_run"]["configurations"]
    assert [r["grid"]["batch_size"] for r in unfit] == [2048, 2048]
    assert all(
        r["why"].startswith("predicted not to fit: at least ") and " without the runtime > " in r["why"] for r in unfit
    )
    said = " ".join(search_paragraphs(state))
    assert "2 predicted not to fit and never run" in said
    assert [title for title, *_ in guide_tables(state)] == [
        "Predicted before it ran, and measured",
        "Predicted, not run",
    ]


def test_unguided_is_the_sampler_alone(tmp_path):
    """``guided: false`` with predictions on searches exactly as a spec without predictions: the same
    configurations in the same order, nothing planned."""
    found = []
    for name, predict, guided in (("plain", False, None), ("unguided", True, False)):
        search = {"sampler": "tpe", "budget_runs": 14, "seed": 3, **({} if guided is None else {"guided": guided})}
        spec = parse_spec({"name": "sim", "grid": GRID, "predict": predict, "search": search, "min_repeats": 2})
        run_search(spec, tmp_path / name, Simulated(landscape, 0.02, 3), False, lambda line: None)
        found.append([(r["grid"], r["repeat"]) for r in read_results(tmp_path / name / "results.jsonl")])
        assert read_json(tmp_path / name / "search.json")["guided"] is False
        assert not (tmp_path / name / "plan").exists()
    assert found[0] == found[1] and len(found[0]) > 6


def test_a_space_of_a_million_is_searched_lazily(tmp_path):
    """100 x 100 x 100 values and a layout axis: the guide plans what is proposed and the layouts of what is
    measured, never the space (listing it is refused outright: it would take minutes)."""
    values = list(range(1, 101))
    grid = {"seed": values, "train_size": [v * 64 for v in values], "max_iters": values, "nproc_per_node": [1, 2]}
    spec = guided_spec(grid, search={"budget_runs": 6}, base={"batch_size": 16}, rerun_contended=0)
    guide = Guide(spec, tmp_path, lambda line: None, measure=False, step_model=predicting(lambda g: 1.0))
    run_search(spec, tmp_path, Simulated(lambda g: 100.0, 0.02), False, lambda line: None, guide)
    state = read_json(tmp_path / "search.json")
    assert state["space_size"] == 2 * 10**6 and state["phase"] == "done" and state["runs"] <= 6
    assert len(guide.guesses) < 10


def test_what_the_plan_cannot_predict_is_left_unguided(tmp_path):
    """A model the plan cannot trace (inception_v3 reads a tensor's value while it initialises) has no peak to
    judge, so a limit of 1 MiB refuses nothing; a step-time model that fails, then predicts nothing, proposes
    nothing: the sampler searches and the search ends as any other, saying why nothing was predicted."""
    calls: list[int] = []

    def failing(grids: Mapping[int, dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, Any]:
        calls.append(len(grids))
        if len(calls) == 1:
            raise RuntimeError("the all-reduce could not be measured")
        return {"link": None, "configurations": {str(i): {"step_s": None, "basis": "no twin"} for i in grids}}

    grid = {"nproc_per_node": [1, 2], "batch_size": [16, 32]}
    spec = guided_spec(
        grid, base={"model": "inception_v3"}, memory_limit_mb=1, search={"budget_runs": 8}, rerun_contended=0
    )
    said: list[str] = []
    run_search(
        spec,
        tmp_path,
        Simulated(lambda g: 100.0, 0.02),
        False,
        said.append,
        Guide(spec, tmp_path, said.append, False, failing),
    )
    state = read_json(tmp_path / "search.json")
    assert state["phase"] == "done" and state["measured"] >= 2 and len(calls) >= 2
    assert any("guide: step time not predicted: RuntimeError: the all-reduce could not be measured" in s for s in said)
    assert all(not c["proposed_by"].startswith("guide: predicted") for c in state["guide"]["measured"])
    assert all(r["why"] == "step time not predicted: no twin" for r in state["guide"]["not_run"]["configurations"])
    assert read_results(tmp_path / "results.jsonl")[0]["prediction"]["problem"].startswith("cannot predict")
