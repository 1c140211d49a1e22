"""Datasets and the loaders built on ``idist.auto_dataloader``.

``batch_size`` is the global batch: ``auto_dataloader`` divides it by the world size. Training uses a
:class:`ShardSampler` so that every epoch is reshuffled the same way on every rank and a run resumed in the middle
of an epoch sees exactly the batches the uninterrupted run would have seen; evaluation never shuffles and never pads.

Example:
    >>> from ignite_ddl import TrainConfig
    >>> from ignite_ddl.trainer.data import build_datasets
    >>> train, val, info = build_datasets(TrainConfig(train_size=256, val_size=64))
    >>> len(train), info.num_classes
    (256, 10)
"""

from __future__ import annotations

import math
import pickle
import sys
from collections.abc import Iterator, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ignite.distributed as idist
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.environment import torchvision  # checked there: one built for another torch is refused
from ignite_ddl.core.errors import ConfigError, DatasetError

__all__ = [
    "CIFAR10",
    "DATASETS",
    "DatasetInfo",
    "Loaders",
    "ShardSampler",
    "build_datasets",
    "build_loaders",
    "check_dataset",
    "dataset_info",
    "read_cifar_batch",
    "synthetic_images",
]

datasets, T = torchvision.datasets, torchvision.transforms

DATASETS = ("synthetic", "digits", "mnist", "cifar10")
# Files torchvision reads after extraction; their absence means the dataset must be downloaded first.
_REQUIRED_FILES = {
    "mnist": [f"MNIST/raw/{p}-{k}" for p in ("train", "t10k") for k in ("images-idx3-ubyte", "labels-idx1-ubyte")],
    "cifar10": [
        f"cifar-10-batches-py/{b}" for b in ("batches.meta", "test_batch", *[f"data_batch_{i}" for i in range(1, 6)])
    ],
}


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    in_channels: int
    image_size: int
    num_classes: int


class ShardSampler(DistributedSampler):
    """A ``DistributedSampler`` that can start an epoch part-way through and can leave shards unpadded.

    ``skip_next_epoch(n)`` drops this rank's first ``n`` indices of the next epoch only: that is how a run resumed
    at iteration k continues with batch k + 1 (Ignite's engine restarts the loader from the epoch's start).
    With ``pad=False`` the last ranks simply get one sample fewer instead of a repeated one, so evaluation metrics
    count every sample exactly once.
    """

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int, shuffle: bool, seed: int, pad: bool = True):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=False)
        self.pad = pad
        self._skip = 0

    def skip_next_epoch(self, n: int) -> None:
        self._skip = n

    def __iter__(self) -> Iterator[int]:
        if self.pad:
            indices = list(super().__iter__())
        else:  # DistributedSampler's order (same seed and epoch), without the padding
            size = _length(self.dataset)
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(size, generator=generator).tolist() if self.shuffle else list(range(size))
            indices = order[self.rank :: self.num_replicas]
        skip, self._skip = self._skip, 0
        return iter(indices[skip:])

    def __len__(self) -> int:
        if self.pad:
            return self.num_samples
        return len(range(self.rank, _length(self.dataset), self.num_replicas))


def _length(dataset: Dataset) -> int:
    """The size of a map-style dataset (every dataset here is one): torch's ``Dataset`` type declares no
    ``__len__``, its subclasses do."""
    return len(cast(Sized, dataset))


def synthetic_images(
    size: int, num_classes: int = 10, shape: tuple[int, int, int] = (3, 32, 32), seed: int = 0, split: int = 0
) -> TensorDataset:
    """A deterministic, learnable image-classification set: each class is a smooth random pattern plus noise.

    The class patterns depend on ``seed`` only; ``split`` changes the noise and labels, so train (split 0) and
    validation (split 1) share classes but not samples. The noise is strong enough that accuracy climbs over
    several epochs instead of saturating at once.
    """
    channels, height, width = shape
    pattern_gen = torch.Generator().manual_seed(seed)
    coarse = torch.randn(num_classes, channels, 4, 4, generator=pattern_gen)
    patterns = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)
    sample_gen = torch.Generator().manual_seed(seed * 1000 + 1 + split)
    labels = torch.randint(num_classes, (size,), generator=sample_gen)
    images = 0.08 * patterns[labels] + torch.randn(size, channels, height, width, generator=sample_gen)
    return TensorDataset(images, labels)


def _digits() -> tuple[Dataset, Dataset]:
    from sklearn.datasets import load_digits  # imported here: only this dataset needs scikit-learn

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    n_train = int(0.8 * len(labels))
    train, val = order[:n_train], order[n_train:]
    return TensorDataset((images[train] - 0.5) / 0.5, labels[train]), TensorDataset(
        (images[val] - 0.5) / 0.5, labels[val]
    )


def _torchvision(name: str, root: str, download: bool) -> tuple[Dataset, Dataset]:
    if name == "mnist":
        tf = T.Compose([T.ToTensor(), T.Normalize((0.1307,), (0.3081,))])
        return (
            datasets.MNIST(root, train=True, download=download, transform=tf),
            datasets.MNIST(root, train=False, download=download, transform=tf),
        )
    normalize = T.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
    train_tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(), normalize])
    val_tf = T.Compose([T.ToTensor(), normalize])
    return CIFAR10(root, train=True, download=download, transform=train_tf), CIFAR10(
        root, train=False, transform=val_tf
    )


class CIFAR10(torchvision.datasets.CIFAR10):
    """torchvision's CIFAR10, reading its batch files with :func:`read_cifar_batch` instead of ``pickle.load``.

    torchvision unpickles each batch file after checking its md5; a file that is not the published one would then
    run whatever its pickle asks for. Here no file is ever unpickled by ``pickle`` itself: every file goes through
    the restricted reader, which builds only dicts, lists, strings, numbers and numpy arrays, whatever its checksum.
    That keeps small files in the same on-disk format usable in tests (they cannot match the published md5) without
    trusting any file. The archive's md5 (``tgz_md5``) is still checked when downloading.
    """

    train_list = [[name, None] for name, _ in datasets.CIFAR10.train_list]
    test_list = [[name, None] for name, _ in datasets.CIFAR10.test_list]
    meta = {**datasets.CIFAR10.meta, "md5": None}

    def __init__(self, root: str, train: bool = True, transform: Any = None, download: bool = False) -> None:
        # torchvision's VisionDataset.__init__ only, not CIFAR10's (which unpickles with ``pickle.load``).
        datasets.VisionDataset.__init__(self, root, transform=transform)
        self.train = train
        if download:
            self.download()
        folder = Path(self.root) / self.base_folder
        entries = [read_cifar_batch(folder / name) for name, _ in (self.train_list if train else self.test_list)]
        self.data = np.vstack([e["data"] for e in entries]).reshape(-1, 3, 32, 32).transpose((0, 2, 3, 1))
        self.targets = [int(label) for e in entries for label in e["labels"]]
        self.classes = list(read_cifar_batch(folder / self.meta["filename"])[self.meta["key"]])
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}


# The only callables a CIFAR-10 batch file may name: numpy's array reconstruction (Python 2 pickles of the
# published set name numpy.core; newer numpy writes numpy._core) and the codec Python 3 uses for bytes in
# protocol 2. None of them runs code chosen by the file.
_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _PICKLE_ALLOWED:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which a CIFAR-10 batch never does")
        return super().find_class(module, name)


def read_cifar_batch(path: Path) -> dict[str, Any]:
    """One CIFAR-10 batch (or ``batches.meta``) file, parsed without running any code it names.

    Raises :class:`DatasetError` (one line naming the file) for anything else: a pickle naming any other callable
    (the way a crafted file runs code), an object array, a file that is not a dict.
    """
    try:
        with open(path, "rb") as f:
            entry = _BatchUnpickler(f, encoding="latin1").load()
    except Exception as e:  # any malformed pickle: truncated, bad opcode, a refused callable
        raise DatasetError(f"refusing CIFAR-10 file {path}: not a published batch file ({e})") from None
    arrays = [v for v in entry.values()] if isinstance(entry, dict) else []
    if not isinstance(entry, dict) or any(isinstance(v, np.ndarray) and v.dtype.hasobject for v in arrays):
        raise DatasetError(f"refusing CIFAR-10 file {path}: not a published batch file (unexpected content)")
    return entry


_INFO = {
    "synthetic": DatasetInfo("synthetic", 3, 32, 10),
    "digits": DatasetInfo("digits", 1, 8, 10),
    "mnist": DatasetInfo("mnist", 1, 28, 10),
    "cifar10": DatasetInfo("cifar10", 3, 32, 10),
}


def check_dataset(config: TrainConfig) -> None:
    """Refuse an unknown dataset, or one whose files are missing when downloading was not asked for."""
    if config.dataset not in DATASETS:
        raise ConfigError(f"unknown dataset '{config.dataset}' (choose from: {', '.join(DATASETS)})")
    if config.dataset == "digits":
        try:
            import sklearn  # noqa: F401
        except ImportError:
            raise ConfigError("dataset 'digits' needs scikit-learn: pip install scikit-learn") from None
    missing = [p for p in _REQUIRED_FILES.get(config.dataset, []) if not (Path(config.data_dir) / p).is_file()]
    if missing and not config.download:
        raise ConfigError(
            f"{config.dataset} not found in '{config.data_dir}' (missing {missing[0]}); pass --download to fetch it"
        )
    if not missing:
        for name in _REQUIRED_FILES.get(config.dataset, []):
            problem = _file_problem(config.dataset, Path(config.data_dir) / name)
            if problem:
                raise ConfigError(
                    f"{config.dataset} file {Path(config.data_dir) / name} is damaged: {problem} (delete the "
                    f"dataset's folder and pass --download to fetch it again)"
                )


# The IDX files of MNIST: magic number, then one big-endian size per dimension (images 3, labels 1).
_IDX = {"images-idx3-ubyte": (2051, 3, 28 * 28), "labels-idx1-ubyte": (2049, 1, 1)}


def _file_problem(dataset: str, path: Path) -> str | None:
    """What is wrong with one of a dataset's files, judged from its header and size (None if nothing is)."""
    with open(path, "rb") as f:
        head = f.read(16)
    size = path.stat().st_size
    if dataset == "mnist":
        magic, dims, item = next(v for k, v in _IDX.items() if path.name.endswith(k))
        if len(head) < 4 + 4 * dims or int.from_bytes(head[:4], "big") != magic:
            return f"not an IDX file (expected magic number {magic})"
        count = int.from_bytes(head[4:8], "big")
        if size != 4 + 4 * dims + count * item:
            return f"{size} bytes where its header announces {count} items ({4 + 4 * dims + count * item} bytes)"
    if dataset == "cifar10":
        try:
            entry = read_cifar_batch(path)
        except DatasetError as e:
            return str(e).split(": ", 1)[1]
        key = "label_names" if path.name == "batches.meta" else "data"
        if key not in entry:
            return f"a pickle without '{key}', not a CIFAR-10 batch"
    return None


def dataset_info(config: TrainConfig) -> DatasetInfo:
    """Channels, image size and classes of ``config``'s dataset, without loading it."""
    return _INFO[config.dataset]


def build_datasets(config: TrainConfig) -> tuple[Dataset, Dataset, DatasetInfo]:
    """The (train, validation) datasets named by ``config.dataset``, cut to ``train_size`` / ``val_size``."""
    info = _INFO[config.dataset]
    train_size, val_size = config.train_size, config.val_size
    train: Dataset
    val: Dataset
    if config.dataset == "synthetic":
        shape = (info.in_channels, info.image_size, info.image_size)
        train = synthetic_images(train_size or SYNTHETIC_TRAIN_SIZE, info.num_classes, shape, config.seed, split=0)
        val = synthetic_images(val_size or 1024, info.num_classes, shape, config.seed, split=1)
    elif config.dataset == "digits":
        train, val = _digits()
    else:
        # Rank 0 of each node downloads (if asked) while the others wait, then everyone reads the files.
        with idist.one_rank_first(local=True):
            try:
                train, val = _torchvision(config.dataset, config.data_dir, config.download)
            except Exception as e:  # torchvision's own errors are often bare asserts: say which files failed
                detail = str(e).strip().splitlines()[0] if str(e).strip() else "malformed data"
                raise DatasetError(
                    f"cannot read {config.dataset} in '{config.data_dir}': {type(e).__name__}: {detail} (delete the "
                    "dataset's folder and pass --download to fetch it again)"
                ) from e
    if train_size is not None and train_size < _length(train):
        train = Subset(train, range(train_size))
    if val_size is not None and val_size < _length(val):
        val = Subset(val, range(val_size))
    return train, val, info


@dataclass(frozen=True)
class Loaders:
    train: DataLoader
    val: DataLoader
    train_sampler: ShardSampler
    info: DatasetInfo
    per_rank_batch: int
    global_batch: int


SYNTHETIC_TRAIN_SIZE = 4096  # training samples of the synthetic dataset when train_size does not say


def planned_iterations(config: TrainConfig, world_size: int) -> int | None:
    """The iterations a run will train, known before it starts where the training set's size is (``train_size``,
    or the synthetic dataset's): each rank's padded shard in whole batches (the loader drops the last partial
    one), times the epochs, at most ``max_iters``; None where the size is only known once the data is read.

    >>> from ignite_ddl.core.config import TrainConfig
    >>> planned_iterations(TrainConfig(train_size=1000, batch_size=64, epochs=2), 2)  # 500 a rank, 32 a batch
    30
    """
    if config.workload is not None:  # a workload's training set is only known once its function has run
        return None
    size = config.train_size or (SYNTHETIC_TRAIN_SIZE if config.dataset == "synthetic" else None)
    per_rank = config.batch_size // max(world_size, 1)
    if size is None or per_rank < 1:
        return None
    iterations = config.epochs * (math.ceil(size / world_size) // per_rank)
    return min(iterations, config.max_iters) if config.max_iters else iterations


def build_loaders(config: TrainConfig, datasets: tuple[Dataset, Dataset] | None = None) -> Loaders:
    """Train and validation loaders for this rank (call inside a launched process): of ``config``'s dataset, or of
    ``datasets`` (a workload's train and validation sets, cut to ``train_size`` / ``val_size``)."""
    if datasets is None:
        train_ds, val_ds, info = build_datasets(config)
    else:
        train_ds, val_ds = datasets
        if config.train_size is not None and config.train_size < _length(train_ds):
            train_ds = Subset(train_ds, range(config.train_size))
        if config.val_size is not None and config.val_size < _length(val_ds):
            val_ds = Subset(val_ds, range(config.val_size))
        info = DatasetInfo(str(config.workload), 0, 0, 0)  # a workload's data: no image shape nor classes known
    world, rank = idist.get_world_size(), idist.get_rank()
    train_sampler = ShardSampler(train_ds, world, rank, shuffle=config.shuffle, seed=config.seed)
    val_sampler = ShardSampler(val_ds, world, rank, shuffle=False, seed=config.seed, pad=False)
    common = _worker_options(config.num_workers)
    if config.pin_memory is not None:  # else auto_dataloader's default: pinned on CUDA
        common["pin_memory"] = config.pin_memory
    # The casts: a DataLoader, or on XLA the loader of ignite_ddl.launcher.xla that answers DataLoader's attributes.
    train = cast(
        DataLoader,
        idist.auto_dataloader(train_ds, batch_size=config.batch_size, sampler=train_sampler, drop_last=True, **common),
    )
    val = cast(DataLoader, idist.auto_dataloader(val_ds, batch_size=config.batch_size, sampler=val_sampler, **common))
    per_rank = cast(int, train.batch_size)  # None only for a loader built with a batch_sampler
    if len(train) == 0:
        raise RuntimeError(
            f"rank {rank} has {len(train_sampler)} training samples, fewer than its batch of {per_rank}: "
            "use a larger dataset or a smaller batch"
        )
    return Loaders(train, val, train_sampler, info, per_rank, per_rank * world)


def _worker_options(num_workers: int) -> dict[str, Any]:
    if num_workers == 0:
        return {"num_workers": 0}
    # Workers are kept across epochs and forked where possible: in processes started with "spawn", a new worker
    # would otherwise re-import torch at every epoch (seconds per epoch on small machines).
    options: dict[str, Any] = {"num_workers": num_workers, "persistent_workers": True, "worker_init_fn": _quiet_worker}
    if sys.platform == "linux":
        options["multiprocessing_context"] = "fork"
    return options


def _quiet_worker(worker_id: int) -> None:
    """A DataLoader worker hands each batch's shared memory to its rank through a socket, from a thread of its own
    (multiprocessing's resource sharer). When the rank dies mid-hand-over (a launcher killed outright takes its ranks
    with it at once; their workers notice only seconds later) that thread reports the hang-up with a traceback
    through ``sys.excepthook``, in the user's terminal, long after the run has ended. A hang-up is all it could say:
    the rank's own end is reported where it happens. Every other error still reaches the hook."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, trace: Any) -> None:
        if not issubclass(kind, (ConnectionError, EOFError)):
            previous(kind, error, trace)

    sys.excepthook = hook
