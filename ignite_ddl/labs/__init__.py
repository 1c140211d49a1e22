"""The distributed-training lab: each module runs one experiment on real process groups, checks its own claim and
returns the result as plain data (for notebooks and reports) plus a readable printout.

A lab module defines:

- ``NAME`` (its ``ignite-ddl`` subcommand) and ``HELP`` (one line);
- ``add_arguments(parser)``: its command-line options;
- ``run(args) -> dict``: runs the lab (``args`` is an ``argparse.Namespace``, or any object with the same
  attributes) and returns the result, whose ``"checks"`` list holds one :func:`check` record per claim;
- ``format_result(result) -> str``: the printout.

The CLI prints the result, writes it as JSON with ``--json PATH``, and exits with status 1 when a claim failed.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


def check(claim: str, ok: bool, detail: str = "") -> dict[str, Any]:
    """One verified claim of a lab: what is claimed, whether it held, and the numbers behind the verdict."""
    return {"claim": claim, "ok": bool(ok), "detail": detail}


def claims_hold(result: dict[str, Any]) -> bool:
    return all(c["ok"] for c in result["checks"])


def format_checks(result: dict[str, Any]) -> str:
    return "\n".join(f"[{'ok' if c['ok'] else 'FAILED'}] {c['claim']}" + (f": {c['detail']}" if c["detail"] else "")
                     for c in result["checks"])  # fmt: skip


def add_launch_arguments(parser: argparse.ArgumentParser, nproc: int | None = 2) -> None:
    """Options every lab that starts processes shares: ``--backend``, ``--output-dir`` and, unless ``nproc`` is
    None (a lab whose process counts come from an option of its own), ``--nproc-per-node`` defaulting to ``nproc``."""
    backends = "gloo | nccl | xla-tpu | auto (default auto: xla-tpu on a TPU, nccl on GPUs, else gloo)"
    parser.add_argument("--backend", default="auto", help=backends)
    if nproc is not None:
        parser.add_argument("--nproc-per-node", type=int, default=nproc, help=f"processes to start (default {nproc})")
    parser.add_argument("--output-dir", default="runs/lab", help="where the ranks write their logs (default runs/lab)")


def int_list(text: str) -> list[int]:
    """``argparse`` type for comma-separated positive integers, such as a lab's list of process counts.

    Example:
        >>> int_list("1,2,4")
        [1, 2, 4]
    """
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def lab_logs(output_dir: str) -> str:
    """Where a lab's ranks append their tracebacks when they fail: ``<output_dir>/logs``."""
    return str(Path(output_dir) / "logs")


def launch_lab(fn: Callable[..., Any], args: argparse.Namespace, nproc: int, *fn_args: Any) -> Any:
    """``fn(local_rank, *fn_args)`` on ``nproc`` processes with the lab's ``--backend``; rank 0's return value.

    One process runs here, without a process group: plain single-process training, the reference of the labs.
    """
    # Imported here: the launcher imports torch, and listing the labs (lab_index) must not.
    from ignite_ddl.launcher import LaunchSettings, launch

    backend = "none" if nproc == 1 else args.backend
    settings = LaunchSettings(backend=backend, nproc_per_node=nproc, log_dir=lab_logs(args.output_dir))
    return launch(fn, settings, *fn_args)


def parse_lab_args(lab: ModuleType, *argv: str) -> argparse.Namespace:
    """A lab's options parsed from ``argv`` (defaults for the rest): ``lab.run(parse_lab_args(lab, ...))``.

    Example:
        >>> from ignite_ddl.labs import ddp_sgd
        >>> parse_lab_args(ddp_sgd, "--procs", "1,2", "--steps", "3").procs
        [1, 2]
    """
    parser = argparse.ArgumentParser(prog=lab.NAME)
    lab.add_arguments(parser)
    return parser.parse_args(list(argv))


def lab_modules() -> list[ModuleType]:
    """Every lab module of this package, in name order (modules named ``_*`` hold shared helpers, not labs)."""
    return [importlib.import_module(f"{__name__}.{module}") for module in _lab_module_names()]


def _lab_module_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


@functools.cache
def lab_index() -> dict[str, tuple[str, str]]:
    """``{command: (module name, one-line help)}`` of every lab, read from the modules' ``NAME`` and ``HELP``
    constants without importing them (they import torch): the CLI lists the labs at the cost of reading a few files.

    Example:
        >>> lab_index()["collectives"][0]
        'collectives'
    """
    index = {}
    for module in _lab_module_names():
        tree = ast.parse(Path(__path__[0], f"{module}.py").read_text())
        constants = {
            target.id: node.value.value
            for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets if isinstance(target, ast.Name)
        }  # fmt: skip
        index[constants["NAME"]] = (module, constants["HELP"])
    return index


def load_lab(command: str) -> ModuleType:
    """The lab module behind ``ignite-ddl <command>``."""
    return importlib.import_module(f"{__name__}.{lab_index()[command][0]}")
