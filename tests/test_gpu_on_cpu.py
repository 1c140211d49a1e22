"""The GPU-facing parts of the suite on the CPU, where CI can run them: channels_last reaches the model's weights and
every batch, a run asking for a cap on CUDA memory without a GPU is refused before it starts, and the GradScaler's
log counts the steps that changed the loss scale (a CPU GradScaler: the CUDA one needs a GPU)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import run_cli
from ignite.engine import Events

from ignite_ddl import TrainConfig, train
from ignite_ddl.trainer.engines import create_trainer, to_device
from ignite_ddl.trainer.measurement import GradScaleLog
from ignite_ddl.trainer.run import TrainingRun

TINY = {
    "backend": "none",
    "dataset": "synthetic",
    "model": "cnn",
    "train_size": 64,
    "val_size": 16,
    "batch_size": 16,
    "epochs": 1,
    "warmup_iters": 1,
    "progress": False,
    "checkpoints": False,
    "best_model": False,
    "measure_flops": False,
}


def test_to_device_puts_images_in_channels_last_and_leaves_the_rest():
    images, labels = torch.randn(4, 3, 8, 8), torch.arange(4)
    x, y = to_device((images, labels), torch.device("cpu"), channels_last=True)
    assert x.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous(
        memory_format=torch.channels_last
    )
    assert torch.equal(x, images) and torch.equal(y, labels)
    flat, _ = to_device((torch.randn(4, 5), labels), torch.device("cpu"), channels_last=True)
    assert flat.is_contiguous()
    plain, _ = to_device((images, labels), torch.device("cpu"))
    assert not plain.is_contiguous(memory_format=torch.channels_last)


def test_a_channels_last_run_trains_in_that_layout_and_records_its_throughput(tmp_path):
    seen: dict[str, bool] = {}

    def look(run: TrainingRun) -> None:
        def weights(engine) -> None:
            convs = [p for p in run.model.parameters() if p.dim() == 4]
            seen["weights"] = bool(convs) and all(p.is_contiguous(memory_format=torch.channels_last) for p in convs)

        run.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=2), weights)

    summary = train(TrainConfig(output_dir=str(tmp_path / "nhwc"), channels_last=True, **TINY), setup=look)
    assert seen == {"weights": True}
    config = json.loads((tmp_path / "nhwc" / "config.json").read_text())["config"]
    assert config["channels_last"] is True
    assert summary["samples_per_s"] > 0 and summary["steps"]["global"]["samples"] > 0
    assert summary["final_train_loss"] == summary["final_train_loss"]  # not NaN


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without a CUDA GPU")
def test_a_cuda_memory_cap_without_a_gpu_is_refused(tmp_path):
    result = run_cli(
        "train", "--backend", "none", "--cuda-memory-fraction", "0.5", "--output-dir", str(tmp_path / "run")
    )
    assert result.returncode == 2, result.stderr
    assert "cuda_memory_fraction caps a GPU's memory: this run has no CUDA GPU" in result.stderr
    assert "Traceback" not in result.stderr
    refused = run_cli("train", "--cuda-memory-fraction", "1.5", "--output-dir", str(tmp_path / "run2"))
    assert refused.returncode == 2 and "cuda_memory_fraction" in refused.stderr


def test_the_grad_scale_log_counts_backoffs_without_reading_the_scale_each_step():
    """Step 3's loss is infinite: its gradients are inf, the scaler skips that step and halves its scale."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    weights: list[torch.Tensor] = []

    class Blowup(torch.nn.Module):
        def forward(self, logits, targets):
            loss = torch.nn.functional.cross_entropy(logits, targets)
            return loss * float("inf") if len(weights) == 2 else loss

    trainer = create_trainer(model, optimizer, Blowup(), torch.device("cpu"), scaler=scaler)
    log = GradScaleLog(scaler).attach(trainer)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda: weights.append(model.weight.detach().clone()))
    trainer.run([(torch.randn(8, 4), torch.randint(0, 3, (8,)))] * 5, max_epochs=1)
    record = log.record()
    assert record == {"initial_scale": 1024.0, "final_scale": 512.0, "steps": 5, "backoffs": 1, "growths": 0}
    assert torch.equal(weights[2], weights[1])  # the inf step was skipped
    assert not torch.equal(weights[3], weights[2])
