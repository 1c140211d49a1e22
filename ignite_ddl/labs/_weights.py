"""Snapshots of a model's weights, and how far two snapshots are apart: the labs that claim two ways of training
reach the same weights (ddp-sgd, raw-vs-ignite) compare them so. And the gradients of a model's parameters.

Example:
    >>> import torch
    >>> from torch import nn
    >>> model = nn.Linear(2, 1)
    >>> before = weights(model)
    >>> with torch.no_grad():
    ...     _ = model.bias.add_(0.5)
    >>> round(max_abs_diff(before, weights(nn.DataParallel(model))), 6)  # named as in the unwrapped model
    0.5
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn

from ignite_ddl.trainer.strategies import unwrap

__all__ = ["gradients", "max_abs_diff", "weights"]


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the parameters, named as in the unwrapped model."""
    return {name: p.detach().cpu().clone() for name, p in unwrap(model).named_parameters()}


def max_abs_diff(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """Largest absolute difference between two sets of tensors with the same names and shapes."""
    if a.keys() != b.keys():
        raise ValueError(f"different tensors: {sorted(a)} vs {sorted(b)}")
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def gradients(params: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """Each parameter's gradient, in order: after a backward pass every parameter has one."""
    grads = [p.grad for p in params]
    present = [g for g in grads if g is not None]
    if len(present) != len(grads):
        raise ValueError(f"{len(grads) - len(present)} of {len(grads)} parameters have no gradient")
    return present
