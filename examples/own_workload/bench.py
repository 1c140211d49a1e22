"""Your own training, measured by ignite-ddl: an example workload module.

``make`` returns an :class:`ignite_ddl.trainer.workload.Workload`: a small residual MLP that regresses a smooth
function of tabular rows, with its own data (a Dataset of mappings), its own training step (mean squared error) and
its own unit ("rows"). Its blocks are marked, so FSDP shards each of them and ``--activation-checkpointing``
applies. With ``own_step=true`` it brings its whole Ignite process function instead (forward, backward and
optimizer step written here), which the suite times whole. Run it from this folder::

    ignite-ddl train --workload bench:make --workload-args width=64 --nproc-per-node 2 --strategy fsdp
    ignite-ddl train --workload bench:make --workload-args own_step=true --nproc-per-node 2
    ignite-ddl sweep sweep.yaml
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from ignite.engine import Engine
from torch import nn
from torch.utils.data import Dataset

from ignite_ddl.trainer.workload import Workload


class Rows(Dataset):
    """``size`` rows of ``features`` numbers and a target, ``sin`` of a fixed projection of them plus noise."""

    def __init__(self, size: int, features: int, split: int):
        generator = torch.Generator().manual_seed(split)
        direction = torch.randn(features, generator=torch.Generator().manual_seed(1234))  # one task for every split
        self.x = torch.randn(size, features, generator=generator)
        self.y = torch.sin(self.x @ direction / features**0.5 * 2) + 0.1 * torch.randn(size, generator=generator)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"features": self.x[i], "target": self.y[i]}


class Residual(nn.Module):
    """x + MLP(LayerNorm(x))."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class Regressor(nn.Module):
    def __init__(self, features: int, width: int, depth: int):
        super().__init__()
        self.embed = nn.Linear(features, width)
        self.blocks = nn.ModuleList(Residual(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)  # (N, 1): the root module returning a view (squeeze) makes FSDP2 warn


def training_step(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The loss of one batch; ignite-ddl runs backward, the optimizer, accumulation and AMP around it."""
    return F.mse_loss(model(batch["features"]).squeeze(-1), batch["target"])


def make_process_function(
    model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
) -> Callable[[Engine, dict[str, torch.Tensor]], dict[str, float]]:
    """A whole Ignite step of one's own, given the model as the run placed it (wrapped by DDP or FSDP: its
    gradients are averaged over the ranks in backward), the run's optimizer and device. The batch arrives on the
    device; the step returns its loss, and what else it likes."""

    def process_function(engine: Engine, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        optimizer.zero_grad(set_to_none=True)
        prediction = model(batch["features"]).squeeze(-1)
        loss = F.mse_loss(prediction, batch["target"])
        loss.backward()
        optimizer.step()
        return {"loss": loss.item(), "prediction_std": prediction.detach().std().item()}

    return process_function


def make(width: int = 64, depth: int = 2, features: int = 16, rows: int = 2048, own_step: bool = False) -> Workload:
    model = Regressor(features, width, depth)
    return Workload(
        model=model,
        train=Rows(rows, features, split=0),
        val=Rows(256, features, split=1),
        training_step=training_step,  # with own_step, still the validation loss and the FLOP count
        make_process_function=make_process_function if own_step else None,
        sample_unit="rows",
        samples_in=lambda batch: len(batch["target"]),
        blocks=list(model.blocks),
    )
