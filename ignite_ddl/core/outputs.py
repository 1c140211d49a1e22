"""Writing outputs: a write that fails (full disk, file-size limit, read-only folder) ends in one line naming the path.

Left alone, a full disk shows up in many shapes: an ``OSError`` from ``write()`` or ``close()`` that does not name
the file, ``torch.save``'s "[enforce fail at inline_container.cc] unexpected pos", a traceback printed by
TensorBoard's writer thread or by ``logging`` (which then goes on without its log). Here every write of a run or a
sweep goes through :func:`writing` (or the helpers built on it) and fails with :class:`OutputError`:
``cannot write <path>: No space left on device``.

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
import errno
import io
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ignite_ddl.core.errors import OutputError

__all__ = [
    "OutputFileHandler",
    "as_output_error",
    "output_errors",
    "quiet_writer_threads",
    "save_torch",
    "write_bytes",
    "writing",
]

# Errors that only a write can raise: where one of these surfaces without a file name, the output is to blame.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})


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
    try:
        yield
    except OSError as e:
        error = as_output_error(e, folder)
        if error is None:
            raise
        raise error from e


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file moved into place, removed if the write fails)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with writing(path):
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()


def save_torch(obj: Any, path: str | Path, save: Callable[..., None] | None = None, **kwargs: Any) -> None:
    """``torch.save`` (or ``save``) of ``obj`` to ``path`` through :func:`write_bytes`: serialised in memory first, so
    that a full disk is an ``OSError`` with its cause, not torch's "unexpected pos"."""
    import torch

    buffer = io.BytesIO()
    (save or torch.save)(obj, buffer, **kwargs)
    write_bytes(path, buffer.getvalue())


class OutputFileHandler(logging.FileHandler):
    """A log file whose failed writes raise :class:`OutputError` (``logging`` would print a traceback and go on
    without the log)."""

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
