"""A nanoGPT-like model as an ignite-ddl workload: DDP or FSDP on it, measured (docs/ddp-or-fsdp.md).

The data is nanoGPT's: a folder holding ``train.bin`` and ``val.bin``, token ids as ``uint16`` (what its
``data/*/prepare.py`` scripts write). Each dataset item is one window of ``block_size`` tokens and the same shifted by
one as targets; the loss is next-token cross-entropy; throughput counts tokens. The model here is the built-in GPT
of the same shape: put your own in ``make``, and its transformer blocks in ``blocks=``. From this folder::

    ignite-ddl train --workload bench:make --workload-args data_dir=/data/shakespeare_char --nproc-per-node 2
    ignite-ddl plan sweep.yaml
    ignite-ddl sweep sweep.yaml
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from ignite_ddl.trainer.gpt import GPT
from ignite_ddl.trainer.workload import Workload


class TokenWindows(Dataset):
    """Non-overlapping windows of a file of token ids: item ``i`` is ``(x, y)``, ``block_size`` tokens each, ``y``
    the next token of each of ``x``'s. The file is memory-mapped: every rank and DataLoader worker reads it without a
    copy."""

    def __init__(self, path: Path, block_size: int):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: a file of uint16 token ids, as nanoGPT's prepare.py writes")
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")
        self.block_size = block_size

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = i * self.block_size
        window = torch.from_numpy(self.tokens[start : start + self.block_size + 1].astype(np.int64))
        return window[:-1], window[1:]


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every token: logits ``(..., vocab)``, targets ``(...)`` (training gives ``(batch, block,
    vocab)``; validation, every position's scores already in one row each)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make(
    data_dir: str = "data/shakespeare_char",
    n_layer: int = 6,
    n_head: int = 6,
    n_embd: int = 384,
    block_size: int = 256,
    vocab_size: int = 65,
) -> Workload:
    """nanoGPT's Shakespeare-character model by default (6 layers of 384, 256 tokens, 65 characters)."""
    model = GPT(n_layer, n_embd, n_head, block_size, vocab_size)
    folder = Path(data_dir)
    return Workload(
        model=model,
        # built in every rank, from the files
        datasets=lambda: (TokenWindows(folder / "train.bin", block_size), TokenWindows(folder / "val.bin", block_size)),
        loss=next_token_loss,
        sample_unit="tokens",
        units_per_sample=block_size,
        blocks=list(model.blocks),  # each one FSDP unit; what --activation-checkpointing recomputes
    )
