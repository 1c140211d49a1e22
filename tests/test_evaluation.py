"""Evaluation features: early stopping on every rank together, the confusion matrix summed over ranks, MLflow."""

from __future__ import annotations

import csv
import json
import sys

import pytest
from conftest import check_ok, run_cli

from ignite_ddl.cli import main

SMALL = ["--train-size", "256", "--batch-size", "64", "--no-progress", "--no-checkpoints", "--no-best-model"]


def ranks_args(procs: int) -> list[str]:
    return ["--nproc-per-node", str(procs), "--backend", "gloo" if procs > 1 else "none"]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("procs", [1, 2])
def test_early_stopping_ends_every_rank_at_once_and_the_confusion_matrix_adds_up(tmp_path, procs):
    out = tmp_path / "run"
    # lr 0: the accuracy never improves on the first evaluation, so PATIENCE more evaluations end the run.
    # 99 validation samples: 2 ranks hold 50 and 49, and evaluation never pads, so every sample counts once.
    check_ok(
        run_cli(
            "train",
            *SMALL,
            *ranks_args(procs),
            "--lr",
            "0",
            "--early-stopping",
            "2",
            "--epochs",
            "8",
            "--val-size",
            "99",
            "--output-dir",
            str(out),
        )
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_early_at_epoch"] == 3 and [r["epoch"] for r in summary["history"]] == [1, 2, 3]
    for rank in range(procs):  # every rank trained exactly 3 epochs
        with open(out / f"steps_rank{rank}.csv") as f:
            assert max(int(row["epoch"]) for row in csv.DictReader(f)) == 3
    matrix = summary["confusion_matrix"]
    assert len(matrix) == 10 and all(len(row) == 10 for row in matrix)
    assert sum(map(sum, matrix)) == 99
    assert sum(matrix[i][i] for i in range(10)) / 99 == pytest.approx(summary["val_accuracy"])


@pytest.mark.slow
def test_a_run_that_improves_is_not_stopped(tmp_path):
    out = tmp_path / "run"
    check_ok(
        run_cli("train", *SMALL, "--early-stopping", "5", "--epochs", "2", "--val-size", "64", "--output-dir", str(out))
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_early_at_epoch"] is None and len(summary["history"]) == 2


def test_early_stopping_needs_evaluations(capsys, tmp_path):
    assert main(["train", "--early-stopping", "2", "--eval-every", "0", "--output-dir", str(tmp_path)]) == 2
    assert "early_stopping needs evaluations to compare" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.distributed
def test_mlflow_run_is_read_back_with_mlflow_client(tmp_path):
    from mlflow.tracking import MlflowClient

    out = tmp_path / "run"
    check_ok(
        run_cli(
            "train",
            *SMALL,
            *ranks_args(2),
            "--epochs",
            "2",
            "--val-size",
            "64",
            "--log-every",
            "1",
            "--tracker",
            "mlflow",
            "--output-dir",
            str(out),
            cwd=tmp_path,
        )
    )
    summary = json.loads((out / "summary.json").read_text())
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    params = run.data.params
    assert params["model"] == "cnn" and params["world_size"] == "2" and params["backend"] == "gloo"
    assert run.data.metrics["val_accuracy"] == pytest.approx(summary["val_accuracy"])
    assert run.data.metrics["samples_per_s"] == pytest.approx(summary["samples_per_s"])
    epochs = client.get_metric_history(run.info.run_id, "epoch/samples_per_s")
    assert [m.step for m in sorted(epochs, key=lambda m: m.step)] == [1, 2]
    losses = client.get_metric_history(run.info.run_id, "train loss")
    assert len(losses) == summary["iterations"]  # --log-every 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing written outside the output folder


def test_mlflow_missing_is_refused_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what Python does for a package that is not installed
    assert main(["train", "--tracker", "mlflow", "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err == "ignite-ddl: error: --tracker mlflow needs MLflow: pip install 'ignite-ddl[mlflow]'\n"
