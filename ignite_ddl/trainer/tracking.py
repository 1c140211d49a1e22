"""Experiment tracking beside TensorBoard: ``--tracker mlflow`` logs a run to MLflow through Ignite's MLflowLogger.

Rank 0 logs the run's options and launch facts as params, the training loss every ``--log-every`` iterations (Ignite's
output handler), and per epoch the figures of the epoch record: train loss, global samples/s, validation accuracy and
loss. At the end it logs the headline figures of ``summary.json`` (steady-state samples/s from the step recorder, wall
time, best accuracy) and ends the MLflow run as FINISHED, or FAILED when training raised.

The store is ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else an SQLite file in the run's output folder
(``sqlite:///<output_dir>/mlflow.db``): nothing is written outside it unless asked. MLflow is optional
(``pip install 'ignite-ddl[mlflow]'``); without it ``--tracker mlflow`` is refused before anything starts.

Read a run back with MLflow's own client::

    from mlflow.tracking import MlflowClient
    client = MlflowClient("sqlite:///runs/train/mlflow.db")
    run = client.search_runs(client.search_experiments()[0].experiment_id)[0]
    run.data.params["model"], run.data.metrics["val_accuracy"]
"""

from __future__ import annotations

import importlib.util
import logging
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ignite.engine import Engine, Events

from ignite_ddl.core.config import TRACKERS, TrainConfig
from ignite_ddl.core.errors import ConfigError

__all__ = ["TRACKERS", "TRACKER_PROBE_S", "MlflowTracker", "check_tracker", "tracking_uri"]

EPOCH_METRICS = ("train_loss", "samples_per_s", "val_accuracy", "val_loss")
FINAL_METRICS = ("samples_per_s", "wall_time_s", "train_time_s", "best_val_accuracy", "stopped_early_at_epoch")


# How long the tracking server has to answer before training, seconds: MLflow's own client retries a dead server
# for minutes (about 260 s) before failing, and only once the run has trained.
TRACKER_PROBE_S = 3.0


def check_tracker(config: TrainConfig) -> None:
    """Refuse a tracker that is not installed, or a tracking server (an http(s) ``--tracking-uri``) that does not
    answer within :data:`TRACKER_PROBE_S` seconds (:class:`ConfigError`, before any process starts)."""
    if config.tracker != "mlflow":
        return
    if importlib.util.find_spec("mlflow") is None:
        raise ConfigError("--tracker mlflow needs MLflow: pip install 'ignite-ddl[mlflow]'")
    uri = tracking_uri(config)
    if urllib.parse.urlsplit(uri).scheme in ("http", "https"):
        problem = _unreachable(uri, TRACKER_PROBE_S)
        if problem:
            raise ConfigError(
                f"the MLflow tracking server {uri} does not answer ({problem}, within {TRACKER_PROBE_S:g} s): start "
                "it, or choose another --tracking-uri"
            )


def _unreachable(uri: str, timeout: float) -> str | None:
    """Why nothing answers HTTP at ``uri`` (None: something does; any HTTP status is an answer). Proxies from the
    environment apply, as they do to MLflow's client."""
    import urllib.error
    import urllib.request

    url = uri.rstrip("/") + "/health"  # MLflow's server answers OK there; any other answer still says it is up
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as e:
        reason = e.reason
        return getattr(reason, "strerror", None) or str(reason)
    except (TimeoutError, OSError, ValueError) as e:  # a timeout while reading, a malformed address
        return getattr(e, "strerror", None) or str(e) or type(e).__name__


def tracking_uri(config: TrainConfig) -> str:
    """Where the run is logged: ``--tracking-uri``, ``$MLFLOW_TRACKING_URI``, or SQLite in the output folder."""
    return (
        config.tracking_uri
        or os.environ.get("MLFLOW_TRACKING_URI")
        or f"sqlite:///{Path(config.output_dir).resolve() / 'mlflow.db'}"
    )


class MlflowTracker:
    """One MLflow run for one training run (create it on rank 0 only)."""

    def __init__(self, config: TrainConfig, trainer: Engine, facts: dict[str, Any]):
        import mlflow
        from ignite.handlers.mlflow_logger import MLflowLogger

        for name in ("mlflow", "alembic"):  # database set-up chatter at INFO on every new store
            logging.getLogger(name).setLevel(logging.WARNING)
        mlflow.set_tracking_uri(tracking_uri(config))
        mlflow.start_run(run_name=Path(config.output_dir).name)
        self.logger = MLflowLogger()  # takes the run started above
        params = {**config.to_dict(), **facts}
        self.logger.log_params({name: str(value) for name, value in params.items()})
        self.logger.attach_output_handler(
            trainer,
            Events.ITERATION_COMPLETED(every=config.log_every),
            tag="train",
            output_transform=lambda output: {"loss": output["loss"]},
        )

    def log_epoch(self, record: Mapping[str, Any]) -> None:
        """Per-epoch figures of an :class:`~ignite_ddl.trainer.run.EpochLog` record, at step = epoch."""
        metrics = {f"epoch/{name}": record[name] for name in EPOCH_METRICS if record.get(name) is not None}
        self.logger.log_metrics(metrics, step=record["epoch"])

    def finish(self, summary: Mapping[str, Any] | None) -> None:
        """Log the summary's headline figures and end the run (FAILED without a summary)."""
        import mlflow

        if summary is None:
            mlflow.end_run(status="FAILED")
            return
        metrics = {name: float(summary[name]) for name in FINAL_METRICS if summary.get(name) is not None}
        if summary.get("val_accuracy") is not None:
            metrics["val_accuracy"] = float(summary["val_accuracy"])
        self.logger.log_metrics(metrics)
        mlflow.end_run(status="FINISHED")
