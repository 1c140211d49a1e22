"""Shards: which samples each rank sees in each epoch through ``idist.auto_dataloader``, gathered and verified.

What it teaches: ``auto_dataloader`` gives each rank a ``DistributedSampler`` shard and divides the global batch by
the world size. Within an epoch the shards are disjoint and cover the dataset, except that a size not divisible by
the world size is padded by repeating a few samples. Each epoch is reshuffled only if ``sampler.set_epoch(epoch)`` is
called: forget it and every epoch repeats the first one's order (the classic bug, reproduced on purpose). The dataset
returns its own index, so what each rank saw is plain to read; ``--image-grid`` draws each rank's first batch
(seed notebook A.1.x1).

Example:
    >>> result = run(backend="gloo", nproc_per_node=2, dataset_size=9)
    >>> result["per_rank_batch"], result["padding"], all(c["ok"] for c in result["checks"])
    (6, 1, True)
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, cast

import ignite.distributed as idist
import torch
from torch.utils.data import DataLoader, TensorDataset
from typing_extensions import NotRequired  # typing's from Python 3.11

from ignite_ddl.core.config import LaunchOptions, TrainConfig
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.options import Role, option, option_like
from ignite_ddl.labs import Check, LabLaunchOptions, LabResult, at_least, check, format_checks, lab_logs
from ignite_ddl.launcher.settings import LaunchSettings
from ignite_ddl.launcher.spawn import launch
from ignite_ddl.measure.gather import gather_objects
from ignite_ddl.trainer.data import synthetic_images

__all__ = [
    "CLAIM",
    "GRID_SIDE",
    "HELP",
    "NAME",
    "SCENARIOS",
    "DrawnBatch",
    "EpochFacts",
    "Options",
    "RankShards",
    "Result",
    "format_result",
    "run",
    "save_image_grid",
]

NAME = "shards"
HELP = "show and check which samples each rank gets from auto_dataloader, epoch by epoch"
CLAIM = (
    "auto_dataloader's shards cover the dataset every epoch, disjoint but for the sampler's padding, and are "
    "reshuffled only when sampler.set_epoch(epoch) is called"
)

GRID_SIDE = 8  # the seed notebook's grid: the first 8 x 8 images of each rank's first batch
Scenario = Literal["set_epoch", "forgotten"]
SCENARIOS: dict[Scenario, bool] = {"set_epoch": True, "forgotten": False}  # whether the loop calls set_epoch(epoch)


class RankShards(TypedDict):
    """What one rank saw: the indices it got in each epoch, in each scenario."""

    rank: int
    set_epoch: list[list[int]]  # per epoch, with sampler.set_epoch(epoch) called
    batch_sizes: list[int]  # the sizes of its first epoch's batches
    forgotten: list[list[int]]  # per epoch, without it
    per_rank_batch: int
    grid: NotRequired[list[int]]  # with image_grid: the indices of its first batch, drawn in the PNG


class GridImages(TypedDict):
    indices: list[int]
    images: Any  # a tensor of images, (N, C, H, W)
    labels: NotRequired[Any]  # their classes, where the tiles name them


class DrawnBatch(TypedDict):
    """A rank's first batch, as :func:`save_image_grid` draws it."""

    rank: int
    grid: GridImages


class _RankSeen(TypedDict):  # what a rank sends back: its shards, and the images of its first batch to draw
    shards: RankShards
    drawn: NotRequired[DrawnBatch]


class EpochFacts(TypedDict):
    """What one epoch's shards cover together."""

    seen: int  # samples handed out, repeats included
    missing: list[int]
    duplicated: list[int]
    extra: int  # samples handed out more than once


class _Dealt(TypedDict):
    world_size: int
    backend: str
    rows: list[_RankSeen]


class Result(LabResult):
    world_size: int
    backend: str
    rows: list[RankShards]
    lab: str
    dataset_size: int
    global_batch: int
    epochs: int
    per_rank_batch: int
    padding: int  # samples the sampler repeats so that every rank gets as many
    epoch_facts: list[EpochFacts]
    image_grid: NotRequired[str]  # the PNG of each rank's first batch


def _epochs_seen(loader: Any, epochs: int, set_epoch: bool) -> tuple[list[list[int]], list[int]]:
    """The indices this rank got in each epoch, and the size of each batch of the first epoch."""
    seen, batch_sizes = [], []
    for epoch in range(epochs):
        if set_epoch:
            loader.sampler.set_epoch(epoch)
        indices = []
        for batch in loader:
            indices += batch[0].cpu().tolist()
            if epoch == 0:
                batch_sizes.append(len(batch[0]))
        seen.append(indices)
    return seen, batch_sizes


def _shards_rank(local_rank: int, size: int, batch_size: int, epochs: int, images: bool) -> _Dealt:
    # A dataset whose samples are their own index (and, for the grid, an image each).
    tensors = [torch.arange(size)] + ([synthetic_images(size).tensors[0]] if images else [])
    dataset = TensorDataset(*tensors)
    seen: dict[Scenario, list[list[int]]] = {}
    batch_sizes: list[int] = []
    for scenario, set_epoch in SCENARIOS.items():
        # A fresh loader per scenario: the sampler remembers the last epoch it was given.
        # The cast: a DataLoader, or on XLA the loader of ignite_ddl.launcher.xla that answers DataLoader's attributes.
        loader = cast(DataLoader, idist.auto_dataloader(dataset, batch_size=batch_size, shuffle=True, num_workers=0))
        seen[scenario], batch_sizes = _epochs_seen(loader, epochs, set_epoch)  # same batches both times
    shards: RankShards = {
        "rank": idist.get_rank(),
        "set_epoch": seen["set_epoch"],
        "batch_sizes": batch_sizes,
        "forgotten": seen["forgotten"],
        "per_rank_batch": int(loader.batch_size or 0),
    }
    row: _RankSeen = {"shards": shards}
    if images:
        first = next(iter(loader))
        grid: GridImages = {
            "indices": first[0][: GRID_SIDE**2].cpu().tolist(),
            "images": first[1][: GRID_SIDE**2].cpu(),
        }
        row["drawn"] = {"rank": shards["rank"], "grid": grid}
    return {"world_size": idist.get_world_size(), "backend": idist.backend() or "none", "rows": gather_objects(row)}


def _epoch_facts(shards: list[list[int]], size: int) -> EpochFacts:
    """What one epoch's shards (one list of indices per rank) cover: samples seen, missed, seen more than once."""
    counts = Counter(i for shard in shards for i in shard)
    return {
        "seen": sum(counts.values()),
        "missing": sorted(set(range(size)) - set(counts)),
        "duplicated": sorted(i for i, n in counts.items() if n > 1),
        "extra": sum(n - 1 for n in counts.values()),
    }


def _checks(rows: list[RankShards], facts: list[EpochFacts], size: int, batch: int, padding: int) -> list[Check]:
    world, epochs = len(rows), len(facts)
    per_shard = math.ceil(size / world)
    # auto_dataloader divides a global batch of at least the world size and leaves a smaller one as it is.
    expected_batch = batch // world if batch >= world else batch
    how = f"divides the global batch: {batch} // {world}" if batch >= world else "keeps a batch below the world size"
    batch_claim = f"auto_dataloader {how}: {expected_batch} per rank"
    full = min(expected_batch, per_shard)  # a shard smaller than the batch makes one short batch
    batches_ok = all(row["per_rank_batch"] == expected_batch and max(row["batch_sizes"]) == full for row in rows)
    # An epoch's order: rank 0's indices, then rank 1's, ...
    order: dict[str, list[list[int]]] = {
        s: [sum((row[s][e] for row in rows), []) for e in range(epochs)] for s in SCENARIOS
    }
    reshuffled = [e for e in range(1, epochs) if order["set_epoch"][e] != order["set_epoch"][e - 1]]
    repeated = [e for e in range(1, epochs) if order["forgotten"][e] == order["forgotten"][0]]
    return [
        check(
            f"every rank gets {per_shard} samples per epoch (ceil({size} / {world}))",
            all(len(indices) == per_shard for row in rows for indices in row["set_epoch"]),
            ", ".join(f"rank {row['rank']}: {[len(ep) for ep in row['set_epoch']]}" for row in rows),
        ),
        check(
            "together the ranks cover the whole dataset in every epoch",
            all(not f["missing"] for f in facts),
            ", ".join(f"epoch {e}: missing {f['missing']}" for e, f in enumerate(facts) if f["missing"]),
        ),
        check(
            f"shards are disjoint except for the sampler's padding ({world} x {per_shard} - {size} = {padding} "
            "repeated sample(s) per epoch)",
            all(f["extra"] == len(f["duplicated"]) == padding for f in facts),
            "; ".join(f"epoch {e} repeats {f['duplicated']}" for e, f in enumerate(facts))
            if padding
            else "no padding: every sample seen exactly once",
        ),
        check(batch_claim, batches_ok, f"batch sizes of epoch 0 on rank 0: {rows[0]['batch_sizes']}"),
        check(
            "with sampler.set_epoch(epoch): each epoch has a new order",
            len(reshuffled) == epochs - 1,
            f"epochs differing from the previous one: {reshuffled}",
        ),
        check(
            "BUG REPRODUCED (expected): without sampler.set_epoch(epoch), every epoch repeats epoch 0's order",
            len(repeated) == epochs - 1,
            f"epochs identical to epoch 0: {repeated}",
        ),
    ]


TILE_IN = 0.72  # inches per image tile: a 32 x 32 image at twice its size, with room for its label at 100 dpi
MAX_FIGURE_WIDTH_IN = 15.0


def save_image_grid(rows: list[DrawnBatch], path: str) -> None:
    """Each rank's first batch (up to 8 x 8 images) as a grid of tiles, one panel per rank, each tile labelled with
    its sample index (and class, where ``row["grid"]["labels"]`` gives them); a PNG. Tiles are as large as a label
    needs, panels as large as their tiles (a short batch makes a short panel, not a strip in white space), and each
    image is scaled to its own range, so its pattern shows whatever the others hold."""
    from ignite_ddl.core.figures import pyplot, save_figure

    plt = pyplot()
    largest = max(len(row["grid"]["indices"]) for row in rows)
    columns = min(GRID_SIDE, largest)
    tile_rows = math.ceil(largest / columns)
    panel_w, panel_h = columns * TILE_IN, tile_rows * TILE_IN + 0.35
    # Short batches (a row or two of tiles) stack one rank under the other; full grids go side by side.
    per_line = 1 if tile_rows <= 2 else max(1, min(len(rows), int(MAX_FIGURE_WIDTH_IN // (panel_w + 0.2))))
    lines = math.ceil(len(rows) / per_line)
    fig, axes = plt.subplots(
        lines, per_line, figsize=(per_line * (panel_w + 0.2), lines * panel_h), squeeze=False, layout="constrained"
    )
    for ax in axes.flat[len(rows) :]:
        ax.set_visible(False)
    for ax, row in zip(axes.flat, rows):
        images, indices = row["grid"]["images"], row["grid"]["indices"]
        labels = row["grid"].get("labels")
        ax.set_xlim(0, columns)
        ax.set_ylim(tile_rows, 0)
        ax.set_aspect("equal")
        ax.axis("off")
        for k, image in enumerate(images):
            low, high = float(image.min()), float(image.max())
            shown = ((image - low) / (high - low or 1.0)).permute(1, 2, 0).numpy()
            x, y = k % columns, k // columns
            ax.imshow(
                shown.squeeze(), extent=(x + 0.03, x + 0.97, y + 0.97, y + 0.03), interpolation="nearest", cmap="gray"
            )
            text = f"{indices[k]}" + (f" · c{int(labels[k])}" if labels is not None else "")
            ax.text(
                x + 0.06,
                y + 0.08,
                text,
                color="white",
                fontsize=8,
                va="top",
                ha="left",
                bbox={"facecolor": "black", "alpha": 0.6, "pad": 1.0, "linewidth": 0},
            )
        ax.set_title(f"rank {row['rank']}: first batch, {len(indices)} samples", fontsize=10)
    classes = " (tile: sample index · class)" if any(row["grid"].get("labels") is not None for row in rows) else ""
    fig.suptitle(f"Each rank's first batch{classes}", fontsize=11)
    save_figure(fig, path, dpi=100)


@dataclass(frozen=True, kw_only=True)
class Options(LabLaunchOptions):
    nproc_per_node: int = option_like(LaunchOptions, "nproc_per_node", 3, "processes to start")
    dataset_size: int = option(100, "samples in the dataset", role=Role.WORKLOAD)
    batch_size: int = option_like(TrainConfig, "batch_size", 12, "GLOBAL batch size")
    epochs: int = option(2, "epochs to compare orders over, >= 2", role=Role.TRAINING)
    image_grid: str | None = option(
        None, "also save each rank's first batch as a PNG grid", metavar="PATH", role=Role.OUTPUT
    )

    def check(self) -> None:
        at_least(1, nproc_per_node=self.nproc_per_node, batch_size=self.batch_size)
        if self.epochs < 2:
            raise ConfigError("epochs must be >= 2: reshuffling shows by comparing epochs")
        if self.dataset_size < 2 or self.nproc_per_node > self.dataset_size:
            raise ConfigError("dataset_size must be >= 2 and at least the number of processes")


def run(**options: Any) -> Result:
    """Deal a dataset of ``dataset_size`` samples to ``nproc_per_node`` ranks for ``epochs`` epochs, with and
    without ``sampler.set_epoch``. ``options``: the fields of :class:`Options`."""
    opts = Options(**options)
    size, batch_size, epochs = opts.dataset_size, opts.batch_size, opts.epochs
    settings = LaunchSettings(
        backend=opts.backend, nproc_per_node=opts.nproc_per_node, log_dir=lab_logs(opts.output_dir)
    )
    dealt: _Dealt = launch(_shards_rank, settings, size, batch_size, epochs, opts.image_grid is not None)
    world, rows = dealt["world_size"], [seen["shards"] for seen in dealt["rows"]]
    padding = world * math.ceil(size / world) - size
    facts = [_epoch_facts([row["set_epoch"][e] for row in rows], size) for e in range(epochs)]
    result: Result = {
        "world_size": world,
        "backend": dealt["backend"],
        "rows": rows,
        "lab": NAME,
        "dataset_size": size,
        "global_batch": batch_size,
        "epochs": epochs,
        "per_rank_batch": rows[0]["per_rank_batch"],
        "padding": padding,
        "epoch_facts": facts,
        "checks": _checks(rows, facts, size, batch_size, padding),
    }
    if opts.image_grid:
        drawn = [seen["drawn"] for seen in dealt["rows"] if "drawn" in seen]
        save_image_grid(drawn, opts.image_grid)
        result["image_grid"] = opts.image_grid
        for row, batch in zip(rows, drawn):
            row["grid"] = batch["grid"]["indices"]  # the images stay in the PNG: the result is plain data
    return result


def _indices(indices: list[int], limit: int = 12) -> str:
    return " ".join(map(str, indices[:limit])) + (f" ... ({len(indices)})" if len(indices) > limit else "")


def format_result(result: Result) -> str:
    world, rows = result["world_size"], result["rows"]
    lines = [
        f"{result['dataset_size']} samples over {world} ranks ({result['backend']}): global batch "
        f"{result['global_batch']} -> {result['per_rank_batch']} per rank, "
        f"{math.ceil(result['dataset_size'] / world)} samples per rank per epoch, {result['padding']} padded"
    ]
    for scenario, set_epoch in SCENARIOS.items():
        lines.append(f"{'with' if set_epoch else 'WITHOUT'} sampler.set_epoch(epoch):")
        lines.append(f"  {'epoch':>5} {'rank':>4}  indices in the order seen")
        lines += [
            f"  {e:>5} {row['rank']:>4}  {_indices(row[scenario][e])}" for e in range(result["epochs"]) for row in rows
        ]
    if "image_grid" in result:
        lines.append(f"image grid of each rank's first batch: {result['image_grid']}")
    return "\n".join(lines) + "\n" + format_checks(result)
