"""What ``torch.utils.flop_counter`` cannot see, found while it counts: recurrent layers are counted by formula, and
any other layer that holds a weight matrix yet counted nothing is named, never left to read as a low MFU.

``FlopCounterMode`` counts the aten matmul, convolution and attention ops it has formulas for. A layer that runs as
one fused kernel it has none for counts nothing: ``nn.LSTM`` on a CPU runs as oneDNN's ``mkldnn_rnn``, every
recurrent layer on a GPU as cuDNN's ``_cudnn_rnn``, and a layer of one's own may call an extension's kernel or do
its products elementwise. Left alone, an LSTM language model counts its output layer only (an eighth of its
work), and its MFU reads eight times too low with nothing to say why.

:func:`watching` hooks every module that is a recurrent layer or holds a weight matrix (a parameter of two or more
dimensions; embeddings, which only look rows up, are left out) for the duration of a counted forward, and reads the
counter's running total before and after each call:

- a recurrent layer (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) is counted by :func:`recurrent_flops`, as the counter
  counts a matmul: 2 FLOPs per multiply-add, biases and the gates' elementwise arithmetic left out. Where the
  counter saw part of it (on a path that runs the gates as plain matmuls it sees all of it, and the formula adds
  nothing), only what it missed is added;
- any other such module whose call counted nothing at all is named in ``not_counted``: its FLOPs are unknown, so
  the run's utilisation is withheld and the module named instead.

Example:
    >>> import torch
    >>> from torch import nn
    >>> lstm = nn.LSTM(8, 16)
    >>> forward, backward = recurrent_flops(lstm, (torch.randn(5, 2, 8),))  # 5 steps x batch 2
    >>> forward == 2 * 5 * 2 * 4 * 16 * (8 + 16), backward == 2 * forward - 2 * 5 * 2 * 4 * 16 * 8
    (True, True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import nn
from torch.nn.utils.rnn import PackedSequence
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["Watch", "recurrent_flops", "watching"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}  # weight matrices per layer, stacked, by mode
_LOOKUPS = (nn.Embedding, nn.EmbeddingBag)  # a weight matrix whose rows are read, not multiplied


def recurrent_flops(module: nn.RNNBase, inputs: tuple[Any, ...]) -> tuple[float, float]:
    """Forward and backward FLOPs of one call of ``module`` on ``inputs`` (its forward's positional arguments).

    Per token, layer and direction the forward multiplies the input and the previous hidden state by each gate's
    weights: ``2 * gates * hidden * (input + hidden)`` (an LSTM with ``proj_size`` p projects each hidden state too:
    its hidden state fed back is p wide, plus ``2 * hidden * p``). The backward does each product twice (the
    weights' gradient and the input's), less the first layer's input gradient where its input needs none (data)."""
    x = inputs[0]
    data = x.data if isinstance(x, PackedSequence) else x
    tokens = data.shape[0] if isinstance(x, PackedSequence) or data.dim() == 2 else data.shape[0] * data.shape[1]
    gates, hidden, projected = _GATES[module.mode], module.hidden_size, getattr(module, "proj_size", 0) or 0
    fed_back = projected or hidden
    directions = 2 if module.bidirectional else 1
    macs = 0
    for layer in range(module.num_layers):
        width = module.input_size if layer == 0 else directions * fed_back
        macs += gates * hidden * (width + fed_back) + hidden * projected
    forward = 2.0 * tokens * directions * macs
    skipped = 0.0 if data.requires_grad else 2.0 * tokens * directions * gates * hidden * module.input_size
    return forward, 2 * forward - skipped


def _type_name(module: nn.Module) -> str:
    """``nn.LSTM`` for torch's modules, ``package.module.Class`` for one's own."""
    kind = type(module)
    return f"nn.{kind.__name__}" if kind.__module__.startswith("torch.nn") else f"{kind.__module__}.{kind.__qualname__}"


def _watched(module: nn.Module) -> bool:
    if isinstance(module, nn.RNNBase):
        return True
    return not isinstance(module, _LOOKUPS) and any(p.dim() >= 2 for p in module.parameters(recurse=False))


class Watch:
    """What a counted forward missed: FLOPs added by formula (``forward``, ``backward``), the module types counted
    so (``by_formula``) and those whose FLOPs nothing counted (``not_counted``)."""

    def __init__(self, counter: FlopCounterMode):
        self.counter = counter
        self.forward = self.backward = 0.0
        self.by_formula: set[str] = set()
        self.not_counted: set[str] = set()
        self._started: list[float] = []

    def _total(self) -> float:
        return float(self.counter.get_total_flops()) + self.forward  # what formulas added inside counts as seen

    def before(self, module: nn.Module, inputs: tuple[Any, ...]) -> None:
        self._started.append(self._total())

    def after(self, module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        counted = self._total() - self._started.pop()
        if isinstance(module, nn.RNNBase) and inputs:  # called with its input by keyword: not counted, said
            forward, backward = recurrent_flops(module, inputs)
            missed = 1.0 - min(1.0, counted / forward) if forward > 0 else 0.0
            if missed > 0.01:  # the counter saw (nearly) all of it: nothing to add
                self.forward += missed * forward
                self.backward += missed * backward
                self.by_formula.add(_type_name(module))
        elif counted == 0:
            self.not_counted.add(_type_name(module))


@contextlib.contextmanager
def watching(model: nn.Module, counter: FlopCounterMode) -> Iterator[Watch]:
    """Hooks on ``model``'s recurrent layers and modules holding a weight matrix while the block runs under
    ``counter``; the :class:`Watch` holds what they found. The hooks are removed on leaving."""
    watch = Watch(counter)
    handles = []
    for module in model.modules():
        if _watched(module):
            handles.append(module.register_forward_pre_hook(watch.before))
            handles.append(module.register_forward_hook(watch.after))
    try:
        yield watch
    finally:
        for handle in handles:
            handle.remove()
