"""What FSDP2 adds to a step on CPU ranks sharing the cores, model by model, outside the trainer: plain and FSDP2
steps alternating on 2 gloo processes of one thread each (the slowest rank's, median over the pairs), forward,
backward and optimizer apart, beside what the step model prices for the same collectives
(:func:`ignite_ddl.predict.steptime.fsdp_busy_s`, with this machine's link and busy factors measured first, as a
predicting sweep measures them).

Models (``--models``):

- ``hf``: GPT-2's architecture from transformers' config (3 blocks of 192, 64 tokens, vocabulary 1024; each
  ``GPT2Block`` a unit), the model of docs/plan.md's "Your model, measured";
- ``mlp``: the FSDP probe's MLP (4 units of one 1024-wide layer, 4 MiB each);
- ``units-N``: 8 units of one N-wide layer (the bytes of a unit alone moved), e.g. ``units-512``;
- ``tensors-K``: 4 units of K layers each at the probe MLP's 4 MiB a unit (the tensors of a unit alone moved).

Usage:
    python benchmarks/fsdp_unit_cost.py [--models hf,mlp,units-256,units-1024,tensors-1,tensors-32] [--batch 16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from typing import Any

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
from bench_common import print_machine


def known(name: str) -> bool:
    """Whether ``name`` is one of the models :func:`build` builds."""
    kind, _, number = name.partition("-")
    return name in ("hf", "mlp") or (kind in ("units", "tensors") and number.isdigit())


def build(name: str, batch: int) -> tuple[Any, list[Any], Any]:
    """(the model, its FSDP units but the root, a batch) for ``name``; built with seed 0, the same on every rank."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "hf":
        from ignite_ddl.trainer.hub import make

        shape = {"n_layer": 3, "n_embd": 192, "n_head": 4, "vocab_size": 1024, "n_positions": 64}
        workload = make("gpt2", seq_len=64, train_sequences=8, val_sequences=8, **shape)
        return workload.model, list(workload.blocks), torch.randint(0, 1024, (batch, 64))
    if name == "mlp":
        from ignite_ddl.predict.projection.inputs import BUSY_PROBE, probe_mlp

        model = probe_mlp(BUSY_PROBE["width"], BUSY_PROBE["depth"])
        return model, list(model.children())[:-1], torch.randn(batch, BUSY_PROBE["width"])
    kind, _, number = name.partition("-")
    if kind == "units" and number.isdigit():
        width = int(number)
        model = nn.Sequential(*(nn.Linear(width, width) for _ in range(8)), nn.Linear(width, 10))
        return model, list(model.children())[:-1], torch.randn(batch, width)
    if kind == "tensors" and number.isdigit():
        layers = int(number)
        width = round((1024 * 1024 / layers) ** 0.5)  # a unit of 4 MiB whatever its layers
        units = [nn.Sequential(*(nn.Linear(width, width) for _ in range(layers))) for _ in range(4)]
        model = nn.Sequential(*units, nn.Linear(width, 10))
        return model, units, torch.randn(batch, width)
    raise SystemExit(f"fsdp_unit_cost: unknown model {name!r} (hf, mlp, units-N, tensors-K)")


def _steps(local_rank: int, names: list[str], batch: int, pairs: int, warmup: int) -> Any:
    """Every rank's ``{model: [((forward, backward, optimizer) plain, (...) FSDP2) per pair]}``, in rank order."""
    from torch import nn

    from ignite_ddl.measure.gather import gather_objects
    from ignite_ddl.predict.projection.inputs import alternate_plain_and_fsdp

    found: dict[str, Any] = {}
    for name in names:
        plain, blocks, x = build(name, batch)

        # a token model's logits against its own tokens, any other's output squared: the loss is no figure
        def loss(out: Any, name: str = name, x: Any = x) -> Any:
            return nn.functional.cross_entropy(out.flatten(0, 1), x.flatten()) if name == "hf" else out.square().mean()

        found[name] = alternate_plain_and_fsdp(plain, blocks, x, loss, pairs, warmup)
    return gather_objects(found)


def priced_ms(name: str, batch: int, link: Any, busy: Any) -> float:
    """What the step model prices FSDP2's collectives and its sharded optimizer at for ``name`` (ms)."""
    import torch

    from ignite_ddl.predict.steptime import fsdp_busy_s
    from ignite_ddl.trainer.strategies import unit_bytes

    with torch.device("meta"):
        model, blocks, _ = build(name, batch)
    collectives = fsdp_busy_s(unit_bytes([*blocks, model]), 2, link, busy, True, 1)
    tensors = sum(1 for p in model.parameters() if p.requires_grad)
    return 1e3 * (collectives + tensors * (busy.fsdp_optimizer_per_tensor_s or 0.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="hf,mlp,units-256,units-1024,tensors-1,tensors-32")
    parser.add_argument("--batch", type=int, default=16, help="samples a rank")
    parser.add_argument("--pairs", type=int, default=30)
    args = parser.parse_args()
    names = args.models.split(",")
    unknown = [name for name in names if not known(name)]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}: hf, mlp, units-N, tensors-K")
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})  # nothing downloaded, ever
    print_machine()
    from ignite_ddl.launcher.settings import LaunchSettings
    from ignite_ddl.launcher.spawn import launch
    from ignite_ddl.sweep.forecast import measured_busy, measured_link

    # this machine's link and busy factors, as a sweep measures them; what a sweep keeps in its plan/ is kept in a
    # temporary folder for this run alone (nothing written where the script is run from)
    with tempfile.TemporaryDirectory() as kept:
        link = measured_link(kept)
        busy = measured_busy(kept, link, True) if link is not None else None
    if busy is None or busy.fsdp is None:
        raise SystemExit("fsdp_unit_cost: FSDP's busy factor could not be measured on this machine")
    per_rank = launch(_steps, LaunchSettings(backend="gloo", nproc_per_node=2), names, args.batch, args.pairs, 5)
    print(f"FSDP2 less plain, ms a step (2 gloo ranks x 1 thread, batch {args.batch} a rank, {args.pairs} pairs)")
    print(f"{'model':>12} {'plain':>7} {'forward':>8} {'backward':>9} {'optimizer':>10} {'step':>7} {'priced':>7}")
    for name in names:
        # per pair, (plain, FSDP2) each (forward, backward, optimizer): the slowest rank's of every figure
        slowest = [
            [[max(phase) for phase in zip(*sides)] for sides in zip(*pair)]
            for pair in zip(*(r[name] for r in per_rank))
        ]
        extra = [statistics.median(fsdp[p] - plain[p] for plain, fsdp in slowest) for p in range(3)]
        step = statistics.median(sum(fsdp) - sum(plain) for plain, fsdp in slowest)
        plain = statistics.median(sum(plain) for plain, _ in slowest)
        print(
            f"{name:>12} {1e3 * plain:>7.1f} {1e3 * extra[0]:>8.1f} {1e3 * extra[1]:>9.1f} {1e3 * extra[2]:>10.1f} "
            f"{1e3 * step:>7.1f} {priced_ms(name, args.batch, link, busy):>7.1f}"
        )


if __name__ == "__main__":
    main()
