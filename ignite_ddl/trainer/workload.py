"""Your own training, measured: a :class:`Workload` is what a function of yours returns — the model, the data, the
loss or the step (or a whole Ignite process function), how to count a sample and, if you know them, its FLOPs — and
``--workload package.module:function`` (``workload:`` in a spec's ``base``) names that function. Everything else of
a run works on it unchanged: every strategy (FSDP2 shards the blocks you mark), accumulation, compile, communication
hooks, AMP, activation checkpointing, the step recorder, memory and communication figures, checkpoints, sweeps and
their report (accumulation and AMP apply to the suite's own step, not to a process function of yours).

**Where the module is looked for.** As ``python -m`` finds a module: the folder ``workload_dir`` names (a sweep sets
it to its spec's folder), then the working folder, then the installed packages. Every rank imports it again (a
forked rank inherits the parent's ``sys.path``; a spawned rank, a sweep's run and a SLURM job are given the same
folders through the config). Importing a module runs it: the run's ``config.json`` and ``summary.json`` name the
module and the file that ran, and so does the report.

**Checked before any process starts.** :func:`check_workload` calls the function once in the launching process
(with the meta device as the default device, its step run on fake tensors in a forked child: the model is not
allocated; a function or step that reads tensors' values, or brings its own process function, is checked built for
real) and refuses, in one line (exit 2), a path that does not import, a name the module lacks or that is not callable, a
function that raises (its own message, with the workload's name), a return value that is not a :class:`Workload` or
holds a field of the wrong type, a model without parameters, a training set smaller than one global batch or a
validation set smaller than the world size, a ``training_step`` that returns no loss (it is run once, forward
only, on two samples), and a process function of one's own (``make_process_function``) that returns no loss (run
once, on copies, on two samples) or is given ``--accumulate`` or ``--amp``, which are the suite's own step's.

Example:
    >>> import torch
    >>> from torch import nn
    >>> from torch.utils.data import TensorDataset
    >>> data = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
    >>> workload = Workload(model=nn.Linear(4, 3), train=data, val=data)
    >>> workload.sample_unit, workload.samples_in((torch.zeros(8, 4), torch.zeros(8)))
    ('samples', 8)
    >>> resolve("gpt")
    ('ignite_ddl.trainer.gpt', 'make')
    >>> resolve("my_project.bench")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ignite_ddl.core.errors.ConfigError: workload 'my_project.bench' is not module:function (e.g. ...)
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import multiprocessing as mp
import os
import sys
from collections.abc import Callable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from ignite.engine import Engine
from torch import nn
from torch.utils.data import Dataset, default_collate

from ignite_ddl.core.apart import ChildFailed, call_apart
from ignite_ddl.core.config import BUILT_IN, TrainConfig, family_member, resolve
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.measure.flops import FlopCount, count_step_flops
from ignite_ddl.trainer.abstract import fake_batch, on_meta, to_fake
from ignite_ddl.trainer.engines import build_optimizer, output_loss

__all__ = [
    "BUILT_IN",
    "Loaded",
    "NotOnMeta",
    "Workload",
    "activation_checkpointing",
    "check_workload",
    "count_workload_flops",
    "load_workload",
    "resolve",
]


def _first_length(batch: Any) -> int:
    """Samples in a batch: the length of its first tensor (inputs of an (x, y) batch; any value of a mapping)."""
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    elif isinstance(batch, (list, tuple)):
        batch = batch[0]
    return len(batch)


@dataclass
class Workload:
    """One training job, as a workload function returns it. Only ``model`` and the data are required.

    Attributes:
        model: the model, on the CPU, not yet wrapped or placed (the run's strategy places it).
        train / val: the training and validation datasets (map-style: indexable, with a length); or leave them None
            and give ``datasets``.
        datasets: a function of no argument returning ``(train, val)``, called in every rank (data that should
            not be built in the launching process and copied, or that opens files).
        loss: ``loss(model(x), y)`` for batches ``(x, y)``; default cross-entropy (outputs ``(..., classes)``).
        training_step: ``training_step(model, batch) -> loss`` (a scalar tensor) for batches of any other shape; the
            suite runs backward, the optimizer, accumulation and AMP around it. Evaluation then reports the loss
            only (no accuracy).
        make_process_function: your own whole Ignite step instead: ``make_process_function(model, optimizer,
            device)`` is called in every rank with the model as the run's strategy placed it (DDP, FSDP2,
            compiled), the optimizer the suite built and the rank's device, and returns
            ``process_function(engine, batch) -> output`` that runs forward, backward and the optimizer step itself
            and returns the loss (a number, a one-element tensor, or a mapping holding it under ``"loss"``). The
            suite still moves the batch to the device, times each step per rank (data wait and step, not split
            into phases), counts samples, and its strategy still averages the gradients; ``--accumulate`` and
            ``--amp`` are refused (they are the suite's own step's). Validation and the FLOP count still use
            ``training_step`` (or ``loss`` on ``(x, y)`` batches).
        sample_unit: what a throughput counts, e.g. "tokens", "images"; ``units_per_sample`` of them per dataset
            item (a sequence of 128 tokens: ``sample_unit="tokens", units_per_sample=128``).
        samples_in: the number of dataset items in a batch (default: the length of its first tensor).
        flops: model FLOPs of one training step per dataset item, forward and backward (default: counted with
            ``torch.utils.flop_counter`` on one batch); the utilisation (MFU) figures divide by it.
        blocks: the repeated blocks of the model (transformer layers): each is one FSDP unit, and
            ``--activation-checkpointing`` recomputes each one's activations in backward. Default: FSDP shards
            each direct child that holds parameters, and activation checkpointing is refused.
        accuracy: whether the evaluator also reports accuracy (the model's outputs are class scores for ``y``).
        optimizer: ``optimizer(model)``, called in every rank on the model as the strategy placed it: a torch
            optimizer, or parameter groups that ``--optimizer`` is built over (default: ``--optimizer``'s own;
            :mod:`ignite_ddl.trainer.recipe`); ``clip_grad_norm``: the gradient norm each step clips to (None: off;
            ``--clip-grad-norm`` overrides it). Both apply with ``--accumulate``, ``--amp`` and every strategy.
    """

    model: nn.Module
    train: Dataset | None = None
    val: Dataset | None = None
    datasets: Callable[[], tuple[Dataset, Dataset]] | None = None
    loss: Callable[..., torch.Tensor] = field(default_factory=nn.CrossEntropyLoss)
    training_step: Callable[[nn.Module, Any], torch.Tensor] | None = None
    make_process_function: Callable[[nn.Module, torch.optim.Optimizer, torch.device], Callable[..., Any]] | None = None
    sample_unit: str = "samples"
    units_per_sample: int = 1
    samples_in: Callable[[Any], int] = _first_length
    flops: FlopCount | None = None
    blocks: Sequence[nn.Module] = ()
    accuracy: bool = True
    optimizer: Callable[[nn.Module], Any] | None = None
    clip_grad_norm: float | None = None

    def step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """The loss of ``model`` on ``batch``: ``training_step``, or ``loss(model(x), y)``."""
        if self.training_step is not None:
            return self.training_step(model, batch)
        x, y = batch[0], batch[1]
        return self.loss(model(x), y)

    def step_kind(self) -> str:
        """Whose training step runs: ``process_function`` (the workload's whole step), ``training_step`` (its loss,
        in the suite's step) or ``loss`` (``loss(model(x), y)`` in the suite's step)."""
        if self.make_process_function is not None:
            return "process_function"
        return "training_step" if self.training_step is not None else "loss"

    def data(self) -> tuple[Dataset, Dataset]:
        """``(train, val)``: the datasets given, or built by ``datasets()``."""
        if self.datasets is not None:
            return self.datasets()
        return cast(Dataset, self.train), cast(Dataset, self.val)

    def block_names(self) -> list[str]:
        """The marked blocks as names of submodules of the model (what survives wrapping and compiling)."""
        return submodule_names(self.model, self.blocks)


@dataclass(frozen=True)
class Loaded:
    """A workload function's result, and where it came from (``summary.json``'s ``workload``)."""

    workload: Workload
    path: str  # as given: "gpt" or "package.module:function"
    module: str
    function: str
    file: str | None

    def facts(self, args: dict[str, Any]) -> dict[str, Any]:
        w = self.workload
        return {
            "path": self.path,
            "module": self.module,
            "function": self.function,
            "file": self.file,
            "args": args,
            "sample_unit": w.sample_unit,
            "units_per_sample": w.units_per_sample,
            "parameters": sum(p.numel() for p in w.model.parameters()),
            "blocks": len(w.blocks),
            "flops_source": "workload" if w.flops is not None else "counted",
            "step": w.step_kind(),
        }


def search_path(config: TrainConfig) -> list[str]:
    """The folders put in front of ``sys.path`` to import the workload: ``workload_dir``, then the working folder."""
    folders = [str(Path(config.workload_dir).resolve())] if config.workload_dir else []
    return [*folders, os.getcwd()]


@contextlib.contextmanager
def _on_path(folders: list[str]) -> Iterator[None]:
    added = [f for f in folders if f not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for folder in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


class NotOnMeta(Exception):
    """A workload whose function, or whose step, cannot run with its model on the meta device (it reads a value of
    a tensor it made without naming a device, :mod:`ignite_ddl.trainer.abstract`), and why."""


def load_workload(config: TrainConfig, meta: bool = False) -> Loaded:
    """Import ``config.workload``'s module, call its function with ``workload_args`` and return its
    :class:`Workload` with its origin; :class:`ConfigError` (one line) for everything a user can get wrong. With
    ``meta`` the function runs with the meta device as the default one (:func:`~ignite_ddl.trainer.abstract.on_meta`:
    its model and the data it makes without naming a device are not allocated), and :class:`NotOnMeta` says why it
    could not."""
    path = cast(str, config.workload)
    module_name, function = resolve(path)
    folders = search_path(config)
    with _on_path(folders):
        try:
            found = importlib.util.find_spec(module_name)
        except (ImportError, ValueError) as e:  # a parent package that does not import, or a malformed name
            raise ConfigError(f"workload {path}: cannot find module '{module_name}': {_one_line(e)}") from None
        if found is None:
            raise ConfigError(
                f"workload {path}: no module named '{module_name}' (looked in {', '.join(folders)} and the installed "
                "packages)"
            )
        try:
            module = importlib.import_module(module_name)
        except SystemExit as e:  # a script's unguarded main() calling sys.exit
            raise ConfigError(
                f"workload {path}: importing {module_name} called sys.exit({e.code!r}) (guard a script's own code "
                "with `if __name__ == '__main__':`)"
            ) from None
        except Exception as e:  # the module's own code failed: its error, in one line
            raise ConfigError(f"workload {path}: importing {module_name} failed: {_one_line(e)}") from None
    file = getattr(module, "__file__", None)
    if not hasattr(module, function):
        raise ConfigError(f"workload {path}: module {module_name} ({file}) has no '{function}'")
    make = getattr(module, function)
    if not callable(make):
        raise ConfigError(f"workload {path}: {function} is a {type(make).__name__}, not a function")
    try:
        with on_meta() if meta else contextlib.nullcontext():
            member = family_member(path)  # hf:gpt2: the family's function is given "gpt2" first
            workload = make(*(() if member is None else (member,)), **config.workload_args)
    except (Exception, SystemExit) as e:
        if meta:
            raise NotOnMeta(f"workload {path}: its function cannot build on the meta device: {_one_line(e)}") from None
        raise ConfigError(f"workload {path} raised {_one_line(e)}") from None
    _check_fields(path, workload)
    return Loaded(workload, path, module_name, function, file)


def _check_fields(path: str, workload: Any) -> None:
    if not isinstance(workload, Workload):
        raise ConfigError(
            f"workload {path} returned a {type(workload).__name__}, not an ignite_ddl.trainer.workload.Workload"
        )
    expected: list[tuple[str, Any, str]] = [
        ("model", nn.Module, "a torch.nn.Module"),
        ("train", (Dataset, type(None)), "a torch Dataset or None"),
        ("val", (Dataset, type(None)), "a torch Dataset or None"),
        ("sample_unit", str, "a str"),
        ("units_per_sample", int, "an int"),
        ("flops", (FlopCount, type(None)), "an ignite_ddl.measure.flops.FlopCount or None"),
        ("accuracy", bool, "a bool"),
        ("clip_grad_norm", (int, float, type(None)), "a number or None"),
    ]
    for name, kind, words in expected:
        value = getattr(workload, name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"workload {path}: field '{name}' must be {words}, got {type(value).__name__}")
    for name in ("datasets", "training_step", "make_process_function", "loss", "samples_in", "optimizer"):
        value = getattr(workload, name)
        if value is not None and not callable(value):
            raise ConfigError(f"workload {path}: field '{name}' must be callable, got {type(value).__name__}")
    if workload.datasets is None and (workload.train is None or workload.val is None):
        raise ConfigError(f"workload {path}: give both 'train' and 'val' datasets, or 'datasets' to build them")
    blocks: Any = workload.blocks  # a list, a tuple or an nn.ModuleList: held, counted and walked more than once
    if not isinstance(blocks, (Sequence, nn.ModuleList)) or isinstance(blocks, str):
        kind = type(blocks).__name__
        raise ConfigError(
            f"workload {path}: field 'blocks' must be a list of torch.nn.Modules of the model, got {kind}"
        )
    if not all(isinstance(b, nn.Module) for b in blocks):
        raise ConfigError(f"workload {path}: field 'blocks' must hold torch.nn.Modules of the model")
    inside = {id(m) for m in workload.model.modules() if m is not workload.model}
    if not all(id(b) in inside for b in workload.blocks):
        raise ConfigError(f"workload {path}: field 'blocks' holds a module that is not a submodule of the model")
    if workload.units_per_sample < 1 or not workload.sample_unit.strip():
        raise ConfigError(f"workload {path}: units_per_sample must be >= 1 and sample_unit a word")


def _length(path: str, name: str, dataset: Dataset) -> int:
    if not hasattr(type(dataset), "__len__"):
        raise ConfigError(f"workload {path}: the {name} dataset has no length (a map-style Dataset)")
    try:  # len() itself refuses a negative or huge __len__, and the user's __len__ may raise anything
        return len(cast(Sized, dataset))
    except Exception as e:
        raise ConfigError(f"workload {path}: the {name} dataset's len() raised {_one_line(e)}") from None


def check_workload(config: TrainConfig, world_size: int) -> Loaded:
    """Load the workload and refuse, before any process starts, what would fail in every rank (module docstring).

    The function runs with its model on the meta device and the step on fake tensors
    (:mod:`ignite_ddl.trainer.abstract`), so no check allocates the model; a workload that cannot run so (it reads
    tensors' values while it builds, or its step does, or it brings its own process function) is checked built for
    real, as it will run."""
    try:
        loaded = load_workload(config, meta=True)
        return _check_loaded(config, world_size, loaded, meta=True)
    except NotOnMeta:
        return _check_loaded(config, world_size, load_workload(config), meta=False)


def _check_loaded(config: TrainConfig, world_size: int, loaded: Loaded, meta: bool) -> Loaded:
    workload, path = loaded.workload, loaded.path
    if not any(p.requires_grad for p in workload.model.parameters()):
        raise ConfigError(f"workload {path}: the model has no parameters to train")
    if meta and workload.make_process_function is not None:
        raise NotOnMeta(f"workload {path}: its own process function reads its loss's value")
    try:
        with on_meta() if meta else contextlib.nullcontext():
            train, val = workload.data()
    except Exception as e:
        if meta and workload.datasets is not None:
            raise NotOnMeta(f"workload {path}: its datasets() cannot build on the meta device") from None
        raise ConfigError(f"workload {path}: its datasets() raised {_one_line(e)}") from None
    for name, dataset in (("train", train), ("val", val)):
        if not isinstance(dataset, Dataset):
            raise ConfigError(f"workload {path}: the {name} dataset is a {type(dataset).__name__}, not a torch Dataset")
    n_train = min(_length(path, "train", train), config.train_size or sys.maxsize)
    n_val = min(_length(path, "val", val), config.val_size or sys.maxsize)
    if n_train < config.batch_size:
        raise ConfigError(
            f"workload {path}: the training set holds {n_train} samples, fewer than one global batch of "
            f"{config.batch_size}"
        )
    if n_val < world_size:
        raise ConfigError(
            f"workload {path}: the validation set holds {n_val} samples, fewer than the {world_size} processes "
            "(each evaluates at least one)"
        )
    if config.activation_checkpointing and not workload.blocks:
        raise ConfigError(f"workload {path}: --activation-checkpointing needs the workload's 'blocks' (none marked)")
    if config.early_stopping and not workload.accuracy:
        raise ConfigError(f"workload {path}: --early-stopping compares validation accuracy, which it does not report")
    _check_step(path, workload, train, meta)
    _check_process_function(config, path, workload, train)
    return loaded


def _two_samples(path: str, train: Dataset, meta: bool = False) -> Any:
    """The first two samples of the training set, collated as the loader will: a batch to run the step on."""
    count = min(2, _length(path, "train", train))
    try:
        return default_collate([train[i] for i in range(count)])
    except Exception as e:  # the dataset's own __getitem__, or samples the default collate cannot batch
        if meta:  # perhaps only the meta device's limits: read again built for real
            raise NotOnMeta(f"workload {path}: its train dataset cannot be read on the meta device") from None
        raise ConfigError(f"workload {path}: reading two samples of the train dataset raised {_one_line(e)}") from None


def _check_step(path: str, workload: Workload, train: Dataset, meta: bool) -> None:
    """Run the workload's step once, forward only, on two samples: it must return a scalar loss to differentiate.
    On a copy of the model, so that the run starts from the weights the function made; with ``meta``, on fake
    tensors (:mod:`ignite_ddl.trainer.abstract`), in a forked child where it can fork: a forward on fake tensors
    that builds a graph leaves this process, once it runs any backward after, unable to run backward in a child
    forked from it ("Unable to handle autograd's threading in combination with fork-based multiprocessing"): a
    notebook or a test suite that checked, trained here, then launched forked ranks saw them fail."""
    batch = _two_samples(path, train, meta)
    if not meta or sys.platform != "linux" or mp.current_process().daemon:
        _step_check(path, workload, batch, meta)
        return
    try:
        call_apart(_step_check, path, workload, batch, meta, start_method="fork")
    except ChildFailed as e:
        raise {"ConfigError": ConfigError}.get(e.name, NotOnMeta)(e.text) from None  # else: checked for real


def _step_check(path: str, workload: Workload, batch: Any, meta: bool) -> None:
    model = copy.deepcopy(workload.model).train()
    fake: Any = contextlib.nullcontext()
    if meta:
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake = FakeTensorMode(allow_non_fake_inputs=True)
        with fake:
            to_fake(model)
            batch = fake_batch(batch, 2)
    try:
        with fake, torch.random.fork_rng(devices=[]), torch.enable_grad():
            loss: Any = workload.step(model, batch)  # whatever the user's code returned
    except Exception as e:
        if meta:  # perhaps only fake tensors' limits: checked again built for real
            raise NotOnMeta(f"workload {path}: its step cannot run on fake tensors: {_one_line(e)}") from None
        what = "training_step" if workload.training_step is not None else "loss(model(x), y)"
        # With a process_function, this step is still what validation and the FLOP count run.
        why = " (validation runs it: give a training_step)" if workload.make_process_function is not None else ""
        raise ConfigError(f"workload {path}: its {what} raised {_one_line(e)} on a batch of two samples{why}") from None
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        kind = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ConfigError(f"workload {path}: its step returned {kind}, not a scalar loss")
    if not loss.requires_grad:
        raise ConfigError(f"workload {path}: its step returned a loss that does not depend on the model's parameters")
    try:
        samples: Any = workload.samples_in(batch)
    except Exception as e:
        raise ConfigError(f"workload {path}: samples_in raised {_one_line(e)}") from None
    if not isinstance(samples, int) or samples < 1:
        raise ConfigError(f"workload {path}: samples_in counted {samples!r} samples in a batch of two, not an int")


def _check_process_function(config: TrainConfig, path: str, workload: Workload, train: Dataset) -> None:
    """Refuse the options a workload's own process function cannot be given (they are the suite's step's), then
    build it on copies of the model and of an optimizer and run it once on two samples: it must return a loss."""
    make = workload.make_process_function
    if make is None:
        return
    if config.accumulate > 1:
        raise ConfigError(
            f"workload {path}: --accumulate {config.accumulate} splits the suite's own step into micro-batches; its "
            "process_function runs its own step (accumulate inside it, or give a training_step instead)"
        )
    if config.amp != "none":
        raise ConfigError(
            f"workload {path}: --amp {config.amp} wraps the suite's own step in autocast; its process_function runs "
            "its own step (autocast inside it, or give a training_step instead)"
        )
    batch = _two_samples(path, train)
    model = copy.deepcopy(workload.model).train()
    with torch.random.fork_rng(devices=[]):
        try:
            process: Any = make(model, build_optimizer(model, config, workload.optimizer), torch.device("cpu"))
        except Exception as e:
            raise ConfigError(f"workload {path}: its make_process_function raised {_one_line(e)}") from None
        if not callable(process):
            raise ConfigError(
                f"workload {path}: its make_process_function returned a {type(process).__name__}, not a function "
                "(engine, batch) -> output"
            )
        engine = Engine(process)
        engine.state.iteration = engine.state.epoch = 1
        engine.state.batch = batch
        try:
            output: Any = process(engine, batch)  # called directly: Engine.run would log the failure as well
        except Exception as e:
            raise ConfigError(
                f"workload {path}: its process_function raised {_one_line(e)} on a batch of two samples"
            ) from None
    if output_loss(output) is None:
        kind = f"a tensor of shape {tuple(output.shape)}" if isinstance(output, torch.Tensor) else type(output).__name__
        raise ConfigError(
            f"workload {path}: its process_function returned {kind}, not a loss (a number, a one-element tensor, "
            "or a mapping with 'loss')"
        )


def count_workload_flops(workload: Workload, batch: Any) -> FlopCount:
    """Model FLOPs per dataset item of one training step: the workload's own figure, else counted on ``batch``."""
    if workload.flops is not None:
        return workload.flops
    return count_step_flops(workload.model, lambda m: workload.step(m, batch), workload.samples_in(batch))


def submodule_names(model: nn.Module, modules: Sequence[nn.Module]) -> list[str]:
    """Each of ``modules`` by its name as a submodule of ``model`` (KeyError for one that is not)."""
    names = {id(m): n for n, m in model.named_modules() if n}
    return [names[id(m)] for m in modules]


def activation_checkpointing(model: nn.Module, names: Sequence[str]) -> None:
    """Wrap each block named in ``names`` in torch's ``checkpoint_wrapper`` (non-reentrant ``torch.utils.checkpoint``,
    as torchtitan applies it), in place: its activations are recomputed in backward instead of kept. The wrapper
    drops its own prefix from state-dict names, so checkpoints are the same with and without it."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for name in names:
        parent, _, child = name.rpartition(".")
        holder = model.get_submodule(parent) if parent else model
        holder.register_module(child, checkpoint_wrapper(holder.get_submodule(child)))
