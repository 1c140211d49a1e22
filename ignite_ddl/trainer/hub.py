"""Hugging Face causal language models by model type (``--workload hf:gpt2``): built from the config class that
``transformers`` ships for that type, its fields overridden by ``--workload-args`` (``n_layer=2``, ``n_embd=128``),
with random weights. Nothing is downloaded: a config is made from the class's defaults, never fetched, and a Hub
repository's name (``hf:openai-community/gpt2``) is refused in one line. Needs the optional extra ``transformers``.

**The data and the counting** are the built-in GPT's (:mod:`ignite_ddl.trainer.gpt`): sequences of its Markov token
stream, ``seq_len`` tokens each over the model's ``vocab_size``, the next-token loss, throughput in tokens. The model
is wrapped so that it maps tokens to logits alone (:class:`CausalLM`: no output object, no key-value cache), and its
FLOPs are counted on one step by ``torch.utils.flop_counter``, which the MFU figures divide by.

**The blocks** (FSDP units, ``--activation-checkpointing``) are the modules the model's class declares must not be
split across devices (``_no_split_modules``: ``GPT2Block``, ``LlamaDecoderLayer``), as Accelerate's FSDP wrapping
reads them.

The workload's own arguments are ``seq_len``, ``train_sequences``, ``val_sequences`` and ``seed``; every other one
is a field of the model's config, and a name the config lacks is refused.

Example:
    >>> workload = make("gpt2", n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, seq_len=16)
    >>> x, y = workload.train[0]
    >>> workload.model(x[None]).shape, workload.sample_unit, workload.units_per_sample, len(workload.blocks)
    (torch.Size([1, 16, 64]), 'tokens', 16, 1)
"""

from __future__ import annotations

import difflib
from typing import Any

import torch
from torch import nn

from ignite_ddl.trainer.gpt import lm_loss, token_sequences
from ignite_ddl.trainer.workload import Workload

__all__ = ["CausalLM", "causal_lm_config", "make"]

_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


class CausalLM(nn.Module):
    """A causal LM of ``transformers`` as a function of tokens ``(batch, length)`` to logits ``(batch, length,
    vocab)``: the suite's loss and accuracy then apply to it as to the built-in GPT, and no key-value cache is kept
    in training."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.lm(input_ids=tokens, use_cache=False).logits
        return logits


def causal_lm_config(model_type: str, overrides: dict[str, Any]) -> Any:
    """The config of ``model_type`` (a causal LM's type in ``transformers``: gpt2, llama, qwen2, ...) with
    ``overrides``, made from the class's defaults without any download; ValueError for a Hub repository's name, an
    unknown type or a field its config lacks, ImportError without ``transformers``."""
    try:
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:
        raise ImportError("hf: models need transformers: pip install 'ignite-ddl[transformers]'") from None
    if "/" in model_type:
        raise ValueError(
            f"'{model_type}' is a Hub repository, which would be downloaded: hf: takes a model type and builds it "
            "from its config with random weights (e.g. hf:gpt2, hf:llama; sizes with --workload-args)"
        )
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        close = difflib.get_close_matches(model_type, list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), n=3)
        hint = f"close: {', '.join(close)}" if close else "e.g. gpt2, llama, qwen2, mistral"
        raise ValueError(f"'{model_type}' is not a causal LM type of transformers ({hint})")
    defaults = AutoConfig.for_model(model_type)
    unknown = sorted(key for key in overrides if not hasattr(defaults, key))
    if unknown:
        raise ValueError(f"{type(defaults).__name__} has no field {', '.join(unknown)} (its fields: to_dict())")
    vocab = overrides.get("vocab_size", getattr(defaults, "vocab_size", None))
    fields: dict[str, Any] = {"use_cache": False}
    for key in _TOKEN_IDS:  # special tokens beyond a smaller vocabulary: none (nothing here generates text)
        token = getattr(defaults, key, None)
        if isinstance(token, int) and isinstance(vocab, int) and token >= vocab:
            fields[key] = None
    return AutoConfig.for_model(model_type, **{**fields, **overrides})


def make(
    model_type: str,
    seq_len: int = 64,
    train_sequences: int = 2048,
    val_sequences: int = 128,
    seed: int = 0,
    **overrides: Any,
) -> Workload:
    """The causal LM of ``model_type`` with its config's fields ``overrides`` on the token stream of ``seed`` (see
    the module docstring)."""
    from transformers import AutoModelForCausalLM

    config = causal_lm_config(model_type, overrides)
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and seq_len > positions:
        raise ValueError(f"seq_len {seq_len} is longer than the model's {positions} positions")
    vocab = config.vocab_size
    if min(seq_len, train_sequences, val_sequences) < 1 or vocab < 5:
        raise ValueError("seq_len and the sequence counts must be >= 1 and vocab_size > 4")
    lm = AutoModelForCausalLM.from_config(config)
    unit_names = set(getattr(lm, "_no_split_modules", None) or ())
    return Workload(
        model=CausalLM(lm),
        train=token_sequences(train_sequences, seq_len, vocab, seed, split=0),
        val=token_sequences(val_sequences, seq_len, vocab, seed, split=1),
        loss=lm_loss,
        sample_unit="tokens",
        units_per_sample=seq_len,
        blocks=[m for m in lm.modules() if type(m).__name__ in unit_names],
    )
