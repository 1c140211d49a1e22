"""The built-in transformer workload (``--workload gpt``): a small GPT-style decoder on a synthetic token stream.

**The model.** Pre-norm decoder blocks (LayerNorm, causal self-attention through
``torch.nn.functional.scaled_dot_product_attention``, residual; LayerNorm, a 4x GELU MLP, residual), learned position
embeddings, a final LayerNorm and a language-model head that shares its weights with the token embedding (tied
embeddings, as GPT-2). Options: ``n_layer``, ``d_model``, ``n_head``, ``seq_len``, ``vocab``. The blocks are the
workload's ``blocks``: each is one FSDP unit, and ``--activation-checkpointing`` recomputes each one in backward.

**The data.** A deterministic token stream made here (no download): a Markov chain in which every token is followed
by one of 4 tokens of its own with probabilities 0.5, 0.25, 0.15 and 0.1. The best a model can do is the chain's
entropy, :func:`stream_entropy` (1.21 nats per token), far below the ln(vocab) of a model that has learnt nothing
(5.55 for 256 tokens), so the loss falls visibly within a few hundred steps on a CPU. Each dataset item is one
sequence: ``seq_len`` input tokens and the same shifted by one as targets. Training and validation come from
streams of different seeds over the same chain.

**Counting.** A sample is a sequence and the throughput's unit is tokens (``units_per_sample = seq_len``). Model
FLOPs per token follow PaLM's appendix B: ``6 N + 12 L T d`` — 6 FLOPs per matmul parameter per token (forward 2,
backward 4) and the attention's two matmuls (scores and weighted values: ``4 T d`` per layer and token forward, 3x
that with backward), where ``N`` counts the weights that multiply (the linear layers' and the tied head's, once; not
the position embedding, a lookup, nor the LayerNorms). :func:`gpt_flops` gives it per sequence; it is within a few
percent of ``torch.utils.flop_counter``'s count (which also counts the flash-attention backward's recomputation of
the scores), as tests/test_workload.py checks.

Example:
    >>> workload = make(n_layer=2, d_model=32, n_head=4, seq_len=16, vocab=64, train_sequences=64, val_sequences=8)
    >>> x, y = workload.train[0]
    >>> x.shape, bool((x[1:] == y[:-1]).all()), workload.sample_unit, workload.units_per_sample
    (torch.Size([16]), True, 'tokens', 16)
    >>> workload.model(x[None]).shape
    torch.Size([1, 16, 64])
    >>> round(stream_entropy(), 3)
    1.208
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from ignite_ddl.measure.flops import FlopCount
from ignite_ddl.trainer.workload import Workload

__all__ = [
    "GPT",
    "Block",
    "gpt_flops",
    "lm_loss",
    "make",
    "matmul_parameters",
    "stream_entropy",
    "token_sequences",
    "token_stream",
]

SUCCESSORS = 4
PROBABILITIES = (0.5, 0.25, 0.15, 0.1)  # of each token's successors, in order


class Block(nn.Module):
    """A pre-norm decoder block: x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x))."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        heads = (batch, length, self.n_head, width // self.n_head)
        q, k, v = (t.view(heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(batch, length, width))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Token and position embeddings, ``n_layer`` blocks, a final LayerNorm and a head tied to the token embedding."""

    def __init__(self, n_layer: int, d_model: int, n_head: int, seq_len: int, vocab: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied: one matrix embeds tokens and scores them
        for module in self.modules():  # GPT-2's initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy, mean over every token of the batch (logits ``(..., vocab)``, targets ``(...)``)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def stream_entropy() -> float:
    """The token stream's entropy per token, nats: the lowest loss any model can reach on it."""
    return -sum(p * math.log(p) for p in PROBABILITIES)


def token_stream(length: int, vocab: int, seed: int, split: int = 0) -> torch.Tensor:
    """``length`` tokens of the Markov chain of ``seed`` (its successor table), the ``split``-th stream of it.

    Made on the CPU by name: the stream is drawn value by value, so it is real data even where the plan builds the
    workload with the meta device as the default one (its model then has no storage,
    :mod:`ignite_ddl.trainer.abstract`)."""
    cpu = torch.device("cpu")
    successors = torch.stack(
        [torch.randperm(vocab, generator=torch.Generator().manual_seed(seed), device=cpu)] * SUCCESSORS
    )
    shift = torch.randint(1, vocab, (SUCCESSORS, vocab), generator=torch.Generator().manual_seed(seed + 1), device=cpu)
    table = ((successors + shift) % vocab).T.tolist()  # table[t]: t's successors, most likely first
    draws = torch.multinomial(
        torch.tensor(PROBABILITIES, device=cpu),
        length,
        replacement=True,
        generator=torch.Generator().manual_seed(seed * 7 + split),
    ).tolist()
    tokens, token = [], split % vocab
    for choice in draws:
        token = table[token][choice]
        tokens.append(token)
    return torch.tensor(tokens, dtype=torch.long, device=cpu)


def token_sequences(count: int, seq_len: int, vocab: int, seed: int, split: int) -> TensorDataset:
    """``count`` sequences of the stream (:func:`token_stream`): ``seq_len`` input tokens each and the same shifted
    by one as targets."""
    windows = token_stream(count * (seq_len + 1), vocab, seed, split).view(count, seq_len + 1)
    return TensorDataset(windows[:, :-1].contiguous(), windows[:, 1:].contiguous())


def matmul_parameters(model: GPT) -> int:
    """The weights that multiply: every linear layer's (the tied head's once), not the position embedding."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def gpt_flops(model: GPT, seq_len: int) -> FlopCount:
    """Model FLOPs of one training step per sequence, PaLM appendix B: per token ``2 N + 4 L T d`` forward and twice
    that backward (see the module docstring)."""
    n = matmul_parameters(model)
    layers, width = len(model.blocks), model.tok.weight.shape[1]
    forward = 2 * n + 4 * layers * seq_len * width
    return FlopCount(forward=float(forward * seq_len), backward=float(2 * forward * seq_len))


def make(
    n_layer: int = 2,
    d_model: int = 64,
    n_head: int = 4,
    seq_len: int = 64,
    vocab: int = 256,
    train_sequences: int = 2048,
    val_sequences: int = 128,
    seed: int = 0,
) -> Workload:
    """The GPT workload of this size (see the module docstring); ``seed`` picks the chain and the streams."""
    if d_model % n_head:
        raise ValueError(f"d_model ({d_model}) must be a multiple of n_head ({n_head})")
    if min(n_layer, d_model, n_head, seq_len, train_sequences, val_sequences) < 1 or vocab < SUCCESSORS + 1:
        raise ValueError("sizes must be >= 1 and vocab > 4")
    model = GPT(n_layer, d_model, n_head, seq_len, vocab)
    return Workload(
        model=model,
        train=token_sequences(train_sequences, seq_len, vocab, seed, split=0),
        val=token_sequences(val_sequences, seq_len, vocab, seed, split=1),
        loss=lm_loss,
        sample_unit="tokens",
        units_per_sample=seq_len,
        flops=gpt_flops(model, seq_len),
        blocks=list(model.blocks),
    )
