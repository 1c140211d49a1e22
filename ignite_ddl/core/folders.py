"""Output folders used by one run or one sweep at a time, and never mixed with an earlier run's files.

:func:`lock` takes an exclusive lock on a folder (``fcntl.flock`` on ``<folder>/.lock``, released when the process
ends, however it ends) or refuses with one line naming the process that holds it. :func:`claim_run_folder` refuses
a folder that holds a previous run unless asked to continue it (``--resume``) or replace it (``--overwrite``, which
removes exactly the files a run writes and nothing else).

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with lock(folder, "sweep"):
    ...     try:
    ...         with lock(folder, "sweep"):
    ...             pass
    ...     except ConfigError as e:
    ...         print(str(e).split(" (")[0].endswith("is in use by another sweep"))
    True
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from ignite_ddl.core.errors import ConfigError

__all__ = ["claim_run_folder", "lock", "previous_run"]

# What a training run writes into its output folder (docs/results.md): a folder holding any of these holds a run.
_RUN_OUTPUTS = (
    "config.json",
    "summary.json",
    "steps_rank*.csv",
    "logs",
    "tb",
    "checkpoints",
    "best",
    "profile",
    "mlflow.db",
)


@contextlib.contextmanager
def lock(folder: str | Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` while inside; :class:`ConfigError` if another process holds it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ".lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise ConfigError(
                f"{folder} is in use by another {what} (process {holder}); wait for it or choose another --output-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def previous_run(folder: str | Path) -> list[str]:
    """The files and folders of an earlier run in ``folder`` (see :data:`_RUN_OUTPUTS`)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(str(p.relative_to(folder)) for pattern in _RUN_OUTPUTS for p in folder.glob(pattern))


def claim_run_folder(folder: str | Path, resume: bool, overwrite: bool) -> None:
    """Refuse a folder holding a previous run unless continuing it or replacing it; with ``overwrite``, remove the
    previous run's files (only those: anything else in the folder stays)."""
    found = previous_run(folder)
    if not found or resume:
        return
    if not overwrite:
        shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
        raise ConfigError(
            f"output directory '{folder}' holds a previous run ({shown}): pass --overwrite to replace it, "
            "--resume CHECKPOINT to continue it, or choose another --output-dir"
        )
    for name in found:
        path = Path(folder) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
