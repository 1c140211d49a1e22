"""Output folders used by one run or one sweep at a time, and never mixed with an earlier run's files.

:func:`lock` takes an exclusive lock on a folder (``fcntl.flock`` on ``<folder>/.lock``, released when the process
ends, however it ends) or refuses with one line naming what holds it, a run or a sweep, and its process. The lock
is the process's: taken again inside (a sweep's command holds it from its first run to its report's last file, and
the sweep it calls takes it too) it is the same lock. ``.lock`` is opened with ``O_NOFOLLOW``: a symbolic link
planted there is refused, never written through.

:func:`claim_run_folder` refuses a folder that holds a previous run unless asked to continue it (``--resume``) or
replace it (``--overwrite``, which removes exactly the files a run writes and nothing else: a user's
``logs/app.log`` stays). :func:`claim_sweep_folder` refuses a folder that holds files but no sweep.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with lock(folder, "sweep"):
    ...     with lock(folder, "sweep"):  # the same process: the same lock
    ...         pass
    >>> import subprocess, sys
    >>> with lock(folder, "sweep"):  # another process is told what holds it
    ...     code = f"from ignite_ddl.core.folders import lock; lock({folder!r}, 'run').__enter__()"
    ...     said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stderr
    >>> "is in use by a sweep (process" in said
    True
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ignite_ddl.core.errors import ConfigError

__all__ = ["claim_run_folder", "claim_sweep_folder", "lock"]

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


# Inside a run folder, what a run writes in the folders it owns (--overwrite removes these files and no others; a
# folder left empty goes too). ``.*.tmp``: a temporary file of core.outputs.write_bytes left by a killed run.
_RUN_FOLDER_FILES = {
    "logs": ("rank*.log", "memory_rank*.txt", "stalled.json", "stalled.json.*.tmp", "memory_rank*.txt.tmp"),
    "tb": ("events.out.tfevents.*",),
    "checkpoints": ("checkpoint_*.pt",),
    "best": ("best_*.pt",),
    "profile": ("rank*_*.csv", "rank*_*.json"),
}

# The locks this process holds: folder -> (process id, what holds it). A forked child sees its parent's entries,
# hence the process id: the lock is the parent's, not the child's.
_held: dict[Path, tuple[int, str]] = {}


@contextlib.contextmanager
def lock(folder: str | Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` while inside (``what`` holds it: "run" or "sweep"); :class:`ConfigError`
    if another process holds it, or if ``folder`` is not a folder. Taken again by the process holding it, it is the
    same lock (released when the outermost ``with`` ends)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"output directory '{folder}' is a file, not a folder: choose another --output-dir")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create output directory '{folder}': {e.strerror or e}") from None
    key = folder.resolve()
    if _held.get(key, (None,))[0] == os.getpid():
        yield
        return
    path = folder / ".lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ConfigError(
                f"{path} is a symbolic link: refused (a lock is never written through a link); remove it"
            ) from None
        raise ConfigError(f"cannot lock output directory '{folder}': {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path} is not a regular file: refused as a lock; remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, _, holder = os.pread(fd, 64, 0).decode(errors="replace").strip().partition(" ")
            raise ConfigError(
                f"{folder} is in use by {_article(holder or what)} (process {pid or '?'}); wait for it or choose "
                "another --output-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {what}\n".encode(), 0)
        _held[key] = (os.getpid(), what)
        try:
            yield
        finally:
            del _held[key]
    finally:
        os.close(fd)  # releases the lock


def _article(what: str) -> str:
    """'a sweep', 'a run' (what a lock file names, cut short: it is read from a file)."""
    what = "".join(c for c in what[:20] if c.isalnum() or c in " -_") or "run"
    return f"{'an' if what[0] in 'aeiou' else 'a'} {what}"


def _previous_run(folder: str | Path) -> list[str]:
    """The files and folders of an earlier run in ``folder`` (see :data:`_RUN_OUTPUTS`)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(str(p.relative_to(folder)) for pattern in _RUN_OUTPUTS for p in folder.glob(pattern))


def claim_run_folder(folder: str | Path, resume: bool, overwrite: bool) -> None:
    """Refuse a folder holding a previous run unless continuing it or replacing it; with ``overwrite``, remove the
    previous run's files (only those: anything else in the folder, or in a folder a run writes, stays)."""
    found = _previous_run(folder)
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
            _remove_run_files(path, _RUN_FOLDER_FILES.get(name, ()))
        else:
            path.unlink()


def _remove_run_files(folder: Path, patterns: tuple[str, ...]) -> None:
    """Remove the files of ``folder`` a run writes (``patterns``, and write_bytes' temporaries), then the folder if
    that left it empty. A link is removed as a link; nothing else is touched."""
    for pattern in (*patterns, ".*.tmp"):
        for path in folder.glob(pattern):
            if path.is_symlink() or path.is_file():
                path.unlink()
    with contextlib.suppress(OSError):  # not empty: the user's files stay, and the folder with them
        folder.rmdir()


# What a sweep writes first into its folder: a folder holding neither is not a sweep's.
_SWEEP_MARKS = ("sweep.json", "results.jsonl")


def claim_sweep_folder(folder: str | Path) -> None:
    """Refuse (:class:`ConfigError`) a sweep's output folder that is a file, or a folder holding files but no sweep
    (neither sweep.json nor results.jsonl): a sweep writes report.md, verdict.txt and plots there, and would
    overwrite a user's files of those names. An empty folder, or one holding only a lock and the plan that
    ``ignite-ddl plan`` wrote there (``plan/``), is fine."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"output directory '{folder}' is a file, not a folder: choose another --output-dir")
    if not folder.is_dir() or any((folder / mark).exists() for mark in _SWEEP_MARKS):
        return
    try:
        found = sorted(p.name for p in folder.iterdir() if p.name not in (".lock", "plan"))
    except OSError as e:
        raise ConfigError(f"cannot read output directory '{folder}': {e.strerror or e}") from None
    if found:
        shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
        raise ConfigError(
            f"output directory '{folder}' holds files that are not a sweep's ({shown}): a sweep writes its report "
            "there; choose another --output-dir"
        )
