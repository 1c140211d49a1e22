"""Models and data without storage: what lets the plan and the checks before a run see a workload whole — every
parameter's shape, every dataset's size, one step's tensors — without allocating any of it.

**How.** A workload's function is called with the meta device as the default device (:func:`on_meta`): every
parameter and every tensor it makes without naming a device has a shape and a dtype but no storage, so a
50-billion-parameter model is built in milliseconds and a few kilobytes. Tensors it makes on a device it names
(``torch.arange(n, device="cpu")``) and those it reads from files are real: that is how a workload whose data must be
computed (a token stream drawn value by value) builds its data for real and its model on meta. A function that reads
a value of a tensor it did not put on a device (``.item()``, ``.tolist()``) cannot run so; the caller then says why.

:func:`to_fake` turns such a model into one of fake tensors (``FakeTensorMode``: storage-less tensors on a real
device, which run a forward and a backward), keeping the parameters it shares between modules shared (a language
model's tied embedding and head), which ``Module.to_empty`` alone would split in two. :func:`fake_batch` makes a
batch of ``n`` items shaped as one sample of the dataset, and :func:`held_bytes` counts the bytes a dataset holds in
tensors and arrays, on meta or real.

Example:
    >>> from torch import nn
    >>> with on_meta():
    ...     big = nn.Linear(100_000, 100_000)  # 40 GB in float32: not allocated
    >>> big.weight.device.type, big.weight.numel()
    ('meta', 10000000000)
    >>> held_bytes(torch.utils.data.TensorDataset(torch.zeros(10, 3), torch.zeros(10, dtype=torch.long)))
    200
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import default_collate

__all__ = ["fake_batch", "held_bytes", "on_meta", "one_sample", "to_fake"]


@contextlib.contextmanager
def on_meta() -> Iterator[None]:
    """The meta device as the default device for the tensors made inside (see the module docstring)."""
    with torch.device("meta"):
        yield


def to_fake(model: nn.Module, device: str | torch.device = "cpu") -> nn.Module:
    """``model`` (parameters on meta, or real) with every parameter and buffer a tensor of the active
    ``FakeTensorMode`` on ``device``, in place; parameters shared between modules stay shared. Call it inside the
    mode (created with ``allow_non_fake_inputs=True``: the meta tensors are its inputs)."""
    slots = [(m, name, p) for m in model.modules() for name, p in m._parameters.items() if p is not None]
    first: dict[int, tuple[nn.Module, str]] = {}
    for module, name, param in slots:
        first.setdefault(id(param), (module, name))
    model.to_empty(device=device)
    for module, name, param in slots:
        owner, owner_name = first[id(param)]
        if owner is not module or owner_name != name:  # a second use of a shared parameter: share it again
            setattr(module, name, getattr(owner, owner_name))
    return model


def one_sample(dataset: Any) -> Any:
    """The dataset's first item collated into a batch of one (tensors stacked, numbers made tensors)."""
    return default_collate([dataset[0]])


def fake_batch(sample: Any, n: int) -> Any:
    """A batch of ``n`` items shaped as ``sample`` (a batch of one: :func:`one_sample`), made in the active mode
    (fake tensors under ``FakeTensorMode``): every tensor ``(1, ...)`` becomes an empty ``(n, ...)`` of its dtype."""
    if isinstance(sample, torch.Tensor):
        return torch.empty((n, *sample.shape[1:]), dtype=sample.dtype)
    if isinstance(sample, dict):
        return {k: fake_batch(v, n) for k, v in sample.items()}
    if isinstance(sample, (list, tuple)):
        return type(sample)(fake_batch(v, n) for v in sample)
    return sample


def held_bytes(obj: Any, _seen: set[int] | None = None, _depth: int = 0) -> int:
    """Bytes of the tensors and arrays ``obj`` holds (a dataset: its attributes, their lists, tuples and mappings,
    a ``Subset``'s dataset), on meta or real, each storage counted once. Data a dataset reads from files on demand
    is not held, and not counted."""
    seen = set() if _seen is None else _seen
    if _depth > 6 or id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        key = storage.data_ptr() if obj.device.type != "meta" and storage.data_ptr() else id(obj)
        if key in seen and key != id(obj):
            return 0
        seen.add(key)
        return int(storage.nbytes()) if obj.device.type != "meta" else obj.numel() * obj.element_size()
    nbytes = getattr(obj, "nbytes", None)  # a numpy array (a memory map's bytes are on disk, not counted)
    if isinstance(nbytes, int) and type(obj).__module__.startswith("numpy"):
        return 0 if type(obj).__name__ == "memmap" else nbytes
    if isinstance(obj, dict):
        return sum(held_bytes(v, seen, _depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        if obj and not isinstance(obj[0], (torch.Tensor, list, tuple, dict)) and not hasattr(obj[0], "__dict__"):
            return 0  # a list of numbers or strings: small beside the tensors, and not worth walking
        return sum(held_bytes(v, seen, _depth + 1) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, (type, nn.Module)):
        return sum(held_bytes(v, seen, _depth + 1) for v in vars(obj).values())
    return 0
