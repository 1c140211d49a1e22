"""TensorBoard event files hold the logged tags, read back with TensorBoard's own reader."""

from __future__ import annotations

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def test_tensorboard_tags(spawn_run):
    events = EventAccumulator(str(spawn_run / "tb"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    for tag in ("train/loss", "lr/group_0", "val/accuracy", "val/loss", "epoch/wall_samples_per_s"):
        assert tag in scalars, f"{tag} missing from {scalars}"
    summary = json.loads((spawn_run / "summary.json").read_text())
    accuracy = [e.value for e in events.Scalars("val/accuracy")]
    assert accuracy == pytest.approx([r["val_accuracy"] for r in summary["history"]], rel=1e-6)
    # train loss logged every 2 iterations over the whole run
    assert [e.step for e in events.Scalars("train/loss")] == list(range(2, summary["iterations"] + 1, 2))
    assert [e.value for e in events.Scalars("lr/group_0")][0] == pytest.approx(0.05)
    # Every rank's memory at the run's end, as summary.json has it.
    for rank in summary["memory"]["ranks"]:
        (peak,) = events.Scalars(f"rank{rank['rank']}/peak_memory_bytes")
        assert peak.value == pytest.approx(rank["peak_rss_bytes"], rel=1e-6)
        (held,) = events.Scalars(f"rank{rank['rank']}/held_bytes")
        assert held.value == pytest.approx(sum(rank["held_bytes"].values()), rel=1e-6)
