"""A run stopped part-way and resumed from its checkpoint ends with the weights of an uninterrupted run."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import check_ok, run_cli

# warm-up + decay schedule and momentum: resuming must restore the scheduler and optimizer state too
RUN = [
    "--train-size",
    "512",
    "--val-size",
    "64",
    "--batch-size",
    "64",
    "--epochs",
    "2",
    "--warmup-epochs",
    "1",
    "--momentum",
    "0.9",
    "--threads",
    "1",
    "--no-progress",
]


def weights(path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


@pytest.mark.slow
def test_resume_mid_epoch_matches_uninterrupted_run(tmp_path):
    full, part, resumed = tmp_path / "full", tmp_path / "part", tmp_path / "resumed"
    check_ok(run_cli("train", *RUN, "--output-dir", str(full)))
    # 8 iterations per epoch: stop at 11, in the middle of the second epoch
    check_ok(run_cli("train", *RUN, "--max-iters", "11", "--checkpoint-every", "11", "--output-dir", str(part)))
    checkpoint = part / "checkpoints" / "checkpoint_11.pt"
    assert json.loads((part / "summary.json").read_text())["iterations"] == 11
    check_ok(run_cli("train", *RUN, "--resume", str(checkpoint), "--output-dir", str(resumed)))

    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["iterations"] == 16 and summary["resumed_from"] == str(checkpoint)
    expected = weights(full / "checkpoints" / "checkpoint_16.pt")
    got = weights(resumed / "checkpoints" / "checkpoint_16.pt")
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=0, msg=name)
    # the interrupted run really was behind: its weights differ from the final ones
    stopped = weights(checkpoint)
    assert max((stopped[n] - expected[n]).abs().max().item() for n in expected) > 1e-4


@pytest.mark.slow
def test_resuming_with_another_schedule_is_refused(tmp_path):
    # Ignite restores the saved warm-up schedule: more epochs would silently train at learning rate 0.
    part = tmp_path / "part"
    check_ok(run_cli("train", *RUN, "--max-iters", "5", "--checkpoint-every", "5", "--output-dir", str(part)))
    more = [*RUN, "--epochs", "3"]  # the later --epochs wins
    result = run_cli(
        "train",
        *more,
        "--resume",
        str(part / "checkpoints" / "checkpoint_5.pt"),
        "--output-dir",
        str(tmp_path / "resumed"),
    )
    assert result.returncode == 1
    assert (
        "its learning-rate schedule ends at iteration 16, this run's at 24; resume with the --epochs, "
        "--warmup-epochs, --lr-schedule, --min-lr-ratio and --lr of the run that wrote it"
        in result.stderr.strip().splitlines()[-1]
    )


TAMPERED = {
    "iteration as text": (lambda s: s["trainer"].update(iteration="7"), "has iteration '7', not a whole number"),
    "negative iteration": (lambda s: s["trainer"].update(iteration=-5), "has iteration -5, not a whole number >= 0"),
    "empty epochs": (lambda s: s["trainer"].update(epoch_length=0), "has epoch_length 0, not a whole number >= 1"),
    "empty optimizer": (lambda s: s.update(optimizer={}), "its optimizer state has no 'state' dictionary"),
}


@pytest.mark.slow
def test_a_tampered_trainer_state_is_refused_in_one_line(tmp_path):
    run = [*RUN[:-3], "--no-progress"]  # every thread: one run, then only refusals
    check_ok(run_cli("train", *run, "--max-iters", "5", "--checkpoint-every", "5", "--output-dir", str(tmp_path / "p")))
    saved = torch.load(tmp_path / "p" / "checkpoints" / "checkpoint_5.pt", weights_only=True)

    def resume(case: str):
        state = {**saved, "trainer": dict(saved["trainer"])}
        TAMPERED[case][0](state)
        path = tmp_path / f"{case.replace(' ', '_')}.pt"
        torch.save(state, path)
        return run_cli("train", *run, "--resume", str(path), "--output-dir", str(tmp_path / case.replace(" ", "_")))

    with ThreadPoolExecutor(len(TAMPERED)) as pool:
        results = dict(zip(TAMPERED, pool.map(resume, TAMPERED)))
    for case, result in results.items():
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, (case, result.stderr)
        assert TAMPERED[case][1] in lines[0], (case, lines[0])
