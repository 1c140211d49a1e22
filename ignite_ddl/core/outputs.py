"""Writing outputs: a write that fails (full disk, file-size limit, read-only folder) ends in one line naming the path.

Left alone, a full disk shows up in many shapes: an ``OSError`` from ``write()`` or ``close()`` that does not name
the file, ``torch.save``'s "[enforce fail at inline_container.cc] unexpected pos", a traceback printed by
TensorBoard's writer thread or by ``logging`` (which then goes on without its log). Here every write of a run or a
sweep goes through :func:`writing` (or the helpers built on it) and fails with :class:`OutputError`:
``cannot write <path>: No space left on device``.

**Links.** An output's name is predictable, so a symbolic link planted in the output folder (``config.json`` ->
``~/.bashrc``) would make a run write through it. No output is ever written through one: :func:`write_bytes`
writes a temporary file with an unpredictable name, created exclusively in the same folder, and refuses a link
where the file goes; :func:`open_output` (log files, appended records) opens with ``O_NOFOLLOW`` and refuses a
file another user owns or a hard link (another name of a file that may lie anywhere). A link is refused with one
line: ``cannot write <path>: it is a symbolic link (...)``.

Example:
    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> write_bytes(os.path.join(folder, "a.bin"), b"data")
    >>> try:
    ...     write_bytes(os.path.join(folder, "missing", "a.bin"), b"data")
    ... except OutputError as e:
    ...     print(str(e).split(": ")[-1])
    No such file or directory
"""

from __future__ import annotations

import contextlib
import csv
import errno
import functools
import io
import logging
import os
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ignite_ddl.core.errors import OutputError

__all__ = [
    "OutputFileHandler",
    "as_output_error",
    "open_output",
    "output_errors",
    "quiet_writer_threads",
    "save_torch",
    "write_bytes",
    "write_csv",
    "writing",
]

# Errors that only a write can raise: where one of these surfaces without a file name, the output is to blame.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})
_LINK_REFUSED = "it is a symbolic link (an output is never written through a link: remove it, or choose another folder)"


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Turn any ``OSError`` inside into :class:`OutputError` naming ``path`` (or the file the error names)."""
    try:
        yield
    except OSError as e:
        raise OutputError(e.filename or path, e) from e


def as_output_error(error: BaseException, folder: str | Path) -> OutputError | None:
    """``error`` as an :class:`OutputError` if it is a failed write (named after ``folder`` when the error names no
    file), else None."""
    if isinstance(error, OutputError):
        return error
    if isinstance(error, OSError) and error.errno in _WRITE_ERRNOS:
        return OutputError(error.filename or folder, error)
    return None


@contextlib.contextmanager
def output_errors(folder: str | Path) -> Iterator[None]:
    """Turn a failed write inside (see :func:`as_output_error`) into :class:`OutputError`; other errors pass."""
    _quiet_engine_write_errors()
    try:
        yield
    except OSError as e:
        error = as_output_error(e, folder)
        if error is None:
            raise
        raise error from e


def write_bytes(path: str | Path, data: bytes, sync: bool = True) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file with an unpredictable name, created exclusively in the
    same folder (nothing planted there can be written through), moved into place; removed if the write fails. A
    symbolic link at ``path`` is refused (:class:`OutputError`). ``sync=False`` skips the flush to disk, for a file
    rewritten often whose loss in a crash costs nothing (a reading)."""
    path = Path(path)
    try:
        if path.is_symlink():
            raise OSError(errno.ELOOP, _LINK_REFUSED, str(path))
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        moved = False
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp's 0600 would hide the outputs from the group
                f.write(data)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)  # a link put at ``path`` meanwhile is replaced, never written through
            moved = True
        finally:
            if not moved:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
    except OSError as e:  # named after the output, not its temporary file
        raise OutputError(path, e) from e


def write_csv(path: str | Path, header: Sequence[str], rows: Iterable[Iterable[Any]]) -> None:
    """A CSV file written whole with :func:`write_bytes` (never through a link planted at ``path``)."""
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(header)
    writer.writerows(rows)
    write_bytes(path, text.getvalue().encode())


def open_output(path: str | Path, flags: int = os.O_WRONLY | os.O_APPEND | os.O_CREAT) -> int:
    """A file descriptor of ``path`` opened with ``flags`` (appending by default), never through a symbolic link,
    never on anything but a regular file (a FIFO planted there would block a run), never on a file another user owns
    or one with a second name (a hard link): :class:`OutputError` names it."""
    with writing(path):
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise OSError(errno.ELOOP, _LINK_REFUSED, str(path)) from None
            raise
        info = os.fstat(fd)
        refused: tuple[int, str] | None = None
        if not stat.S_ISREG(info.st_mode):
            refused = errno.EINVAL, "it is not a regular file (refused as an output)"
        elif info.st_uid != os.geteuid():  # planted by another user: appending would write into their file
            refused = errno.EPERM, f"it belongs to another user (uid {info.st_uid}; refused as an output)"
        elif info.st_nlink > 1:  # another name of the same file, perhaps outside the output folder
            refused = errno.EINVAL, "it is a hard link to another file (refused as an output)"
        if refused is not None:
            os.close(fd)
            raise OSError(*refused, str(path))
        os.set_blocking(fd, True)
        return fd


@functools.cache
def _umask() -> int:
    """This process's umask, read without changing it (os.umask would, for every thread, for a moment)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def save_torch(obj: Any, path: str | Path, save: Callable[..., None] | None = None, **kwargs: Any) -> None:
    """``torch.save`` (or ``save``) of ``obj`` to ``path`` through :func:`write_bytes`: serialised in memory first, so
    that a full disk is an ``OSError`` with its cause, not torch's "unexpected pos"."""
    import torch

    buffer = io.BytesIO()
    (save or torch.save)(obj, buffer, **kwargs)
    write_bytes(path, buffer.getvalue())


class OutputFileHandler(logging.FileHandler):
    """A log file whose failed writes raise :class:`OutputError` (``logging`` would print a traceback and go on
    without the log), opened never through a symbolic link (:func:`open_output`)."""

    def _open(self) -> Any:
        return open(open_output(self.baseFilename), self.mode, encoding=self.encoding, errors=self.errors)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            raise OutputError(self.baseFilename, error) from error
        super().handleError(record)


_quieted = False


def quiet_writer_threads() -> None:
    """Keep TensorBoard's writer thread from printing a traceback when a write fails: the thread keeps the error and
    the writer raises it in the training thread at its next call, where it becomes an :class:`OutputError`."""
    global _quieted
    if _quieted:
        return
    previous = threading.excepthook

    def hook(args: Any) -> None:
        writer_thread = type(args.thread).__name__ == "_AsyncWriterThread"
        if writer_thread and isinstance(args.exc_value, OSError):
            return
        previous(args)

    threading.excepthook = hook
    _quieted = True


class _EngineWriteErrors(logging.Filter):
    """Drops Ignite's "Engine run is terminating due to exception: ..." when the exception is a failed write: the
    error goes on up and ends the command in one line naming the file; Ignite's line before it is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = sys.exc_info()[1]  # Ignite logs inside its ``except`` block: the exception being handled
        if error is None or "terminating due to exception" not in record.getMessage():
            return True
        return as_output_error(error, ".") is None


_ENGINE_LOGGER = "ignite.engine.engine.Engine"  # logging.getLogger(__name__ + "." + class name) in Ignite's Engine


def _quiet_engine_write_errors() -> None:
    logger = logging.getLogger(_ENGINE_LOGGER)
    if not any(isinstance(f, _EngineWriteErrors) for f in logger.filters):
        logger.addFilter(_EngineWriteErrors())
