"""Dataset loading: tiny MNIST and CIFAR10 files written in torchvision's on-disk formats, the bundled digits set,
the synthetic default, and the sampler that shards them."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
import torch
from conftest import QUICK, check_ok, load_summary, run_cli

from ignite_ddl import ConfigError, TrainConfig
from ignite_ddl.core.errors import DatasetError
from ignite_ddl.trainer.data import ShardSampler, build_datasets, check_dataset, read_cifar_batch, synthetic_images


def write_mnist(root, n_train=40, n_test=20):
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())


def write_cifar10(root, per_batch=8, n_test=16):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = n_test if name == "test_batch" else per_batch
        batch = {"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8), "labels": [i % 10 for i in range(n)]}
        (folder / name).write_bytes(pickle.dumps(batch))
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))


def test_mnist_files(tmp_path):
    write_mnist(tmp_path)
    train, val, info = build_datasets(TrainConfig(dataset="mnist", data_dir=str(tmp_path)))
    assert (len(train), len(val), info.in_channels, info.image_size) == (40, 20, 1, 28)
    x, y = train[13]
    assert x.shape == (1, 28, 28) and y == 3


def test_cifar10_files(tmp_path):
    write_cifar10(tmp_path)
    train, val, info = build_datasets(TrainConfig(dataset="cifar10", data_dir=str(tmp_path), val_size=10))
    assert (len(train), len(val), info.in_channels) == (40, 10, 3)
    x, y = val[7]
    assert x.shape == (3, 32, 32) and y == 7
    # --download with the files present must not try to fetch anything
    check_dataset(TrainConfig(dataset="cifar10", data_dir=str(tmp_path), download=True))


def test_missing_files_are_refused(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(ConfigError, match="t10k-labels-idx1-ubyte"):
        check_dataset(TrainConfig(dataset="mnist", data_dir=str(tmp_path)))


@pytest.mark.slow
@pytest.mark.distributed
def test_train_on_mnist_files_with_two_processes(tmp_path):
    write_mnist(tmp_path / "data", n_train=256, n_test=64)
    out = tmp_path / "run"
    check_ok(
        run_cli(
            "train",
            "--dataset",
            "mnist",
            "--data-dir",
            str(tmp_path / "data"),
            "--model",
            "mlp",
            "--nproc-per-node",
            "2",
            "--batch-size",
            "32",
            "--epochs",
            "1",
            "--no-progress",
            "--output-dir",
            str(out),
        )
    )
    summary = load_summary(out, world_size=2)
    assert summary["dataset"] == "mnist" and summary["epoch_length"] == 8


def test_digits_is_real_and_bundled():
    train, val, info = build_datasets(TrainConfig(dataset="digits"))
    assert len(train) + len(val) == 1797 and info.image_size == 8
    assert set(int(y) for _, y in val) == set(range(10))


def test_synthetic_is_deterministic_and_splits_differ():
    a, b = synthetic_images(64, seed=1), synthetic_images(64, seed=1)
    assert torch.equal(a.tensors[0], b.tensors[0]) and torch.equal(a.tensors[1], b.tensors[1])
    assert not torch.equal(a.tensors[0], synthetic_images(64, seed=1, split=1).tensors[0])


def test_shard_sampler_covers_the_data_disjointly():
    data = list(range(10))
    shards = [list(ShardSampler(data, 3, r, shuffle=True, seed=0, pad=False)) for r in range(3)]
    assert sorted(sum(shards, [])) == data and [len(s) for s in shards] == [4, 3, 3]
    padded = [list(ShardSampler(data, 3, r, shuffle=True, seed=0)) for r in range(3)]
    assert [len(s) for s in padded] == [4, 4, 4] and set(sum(padded, [])) == set(data)


def test_shard_sampler_reshuffles_per_epoch_and_skips_once():
    sampler = ShardSampler(list(range(20)), 2, 1, shuffle=True, seed=0)
    sampler.set_epoch(0)
    epoch0 = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != epoch0
    sampler.set_epoch(0)
    sampler.skip_next_epoch(4)
    assert list(sampler) == epoch0[4:]
    assert list(sampler) == epoch0  # the skip applies to one epoch only


class _Payload:
    """A pickle that runs code when loaded: it creates the file named ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.distributed
def test_a_crafted_cifar10_batch_is_refused_without_running_its_code(tmp_path):
    """A batch file whose pickle names a callable is refused in one line naming the file, and nothing in it runs:
    neither in the checks before the run nor in the ranks."""
    write_cifar10(tmp_path / "data")
    marker = tmp_path / "pwned"
    batch = tmp_path / "data" / "cifar-10-batches-py" / "data_batch_1"
    batch.write_bytes(pickle.dumps({"data": _Payload(marker), "labels": [0]}))
    result = run_cli(
        "train", "--dataset", "cifar10", "--data-dir", str(tmp_path / "data"), "--model", "mlp",
        *QUICK[4:], "--output-dir", str(tmp_path / "run"),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert not marker.exists()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(batch) in lines[0] and "Traceback" not in result.stderr
    # the loader itself refuses it too (a file swapped after the checks)
    with pytest.raises(DatasetError, match="data_batch_1"):
        read_cifar_batch(batch)
    assert not marker.exists()
