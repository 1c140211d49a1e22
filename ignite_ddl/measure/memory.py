"""Memory a rank holds: the bytes of its parameters, gradients and optimizer state between steps (the local shard
of a sharded tensor, the whole tensor otherwise), counted the same way for every strategy.

Example:
    >>> import torch
    >>> from torch import nn
    >>> net = nn.Linear(4, 2)  # 8 weights + 2 biases, float32
    >>> opt = torch.optim.Adam(net.parameters())
    >>> net(torch.ones(1, 4)).sum().backward(); opt.step()
    >>> held_bytes(net, opt)  # Adam keeps two moments per parameter (and a step counter per tensor)
    {'params': 40, 'grads': 40, 'optimizer': 88}
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.distributed.tensor import DTensor

__all__ = ["HELD_PARTS", "held_bytes", "local_bytes"]

HELD_PARTS = ("params", "grads", "optimizer")


def local_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes this rank holds for ``tensors``: the local shard of a DTensor, the whole tensor otherwise."""
    return sum(
        (t.to_local() if isinstance(t, DTensor) else t).numel() * t.element_size() for t in tensors if t is not None
    )


def held_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """What this rank holds for ``model`` and ``optimizer`` now: parameters, gradients, optimizer state."""
    return {
        "params": local_bytes(model.parameters()),
        "grads": local_bytes(p.grad for p in model.parameters()),
        "optimizer": local_bytes(
            t for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)
        ),
    }
