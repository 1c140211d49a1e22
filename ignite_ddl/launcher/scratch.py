"""A run's scratch folder: every temporary file of a run or a sweep, and of every process they start, in one
private folder removed when they end.

Left alone, the processes of a run write temporary files where ``$TMPDIR`` points and some never remove them:
multiprocessing's ``pymp-*`` folders (with the sockets of DataLoader workers) of processes that end without running
their exit handlers, and Inductor's compilation cache (``torchinductor_<user>``, which ``torch.compile`` and some
of torch's imports create). :func:`scratch_folder` points ``$TMPDIR`` (and Python's ``tempfile``) and
``$TORCHINDUCTOR_CACHE_DIR`` at a new private folder for the processes started inside it, and removes the folder
at the end, whatever happened. A consequence worth knowing: each run compiles with a cold Inductor cache, so the
compilation time it reports is what a first run on a machine pays (a second run of the same model on the same
machine, with a warm cache, compiles faster).

This process's own multiprocessing folder is created first, in the usual place: it lives until this process
exits, and its exit handler removes it there.

Example:
    >>> import os, tempfile
    >>> with scratch_folder() as folder:
    ...     os.environ["TMPDIR"] == folder == tempfile.gettempdir()
    True
    >>> os.path.exists(folder)
    False
"""

from __future__ import annotations

import contextlib
import multiprocessing.util as mp_util
import os
import shutil
import tempfile
from collections.abc import Iterator

__all__ = ["scratch_folder"]

_VARIABLES = ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR")


@contextlib.contextmanager
def scratch_folder(prefix: str = "ignite-ddl-") -> Iterator[str]:
    """A private temporary folder for everything started inside the ``with`` block; see the module docstring."""
    mp_util.get_temp_dir()  # this process's own, in the usual place (see the module docstring)
    folder = tempfile.mkdtemp(prefix=prefix)
    saved = {name: os.environ.get(name) for name in _VARIABLES}
    previous = tempfile.tempdir
    os.environ["TMPDIR"] = folder
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(folder, "inductor")
    tempfile.tempdir = folder
    try:
        yield folder
    finally:
        tempfile.tempdir = previous
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(folder, ignore_errors=True)
