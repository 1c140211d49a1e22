"""A run's scratch folder: every temporary file of a run or a sweep, and of every process they start, in one
private folder removed when they end.

Left alone, the processes of a run write temporary files where ``$TMPDIR`` points and some never remove them:
multiprocessing's ``pymp-*`` folders (with the sockets of DataLoader workers) of processes that end without running
their exit handlers, and Inductor's compilation cache (``torchinductor_<user>``, which ``torch.compile`` and some
of torch's imports create). :func:`scratch_folder` points ``$TMPDIR`` (and Python's ``tempfile``) and
``$TORCHINDUCTOR_CACHE_DIR`` at a new private folder for the processes started inside it, and removes the folder
at the end, whatever happened. A consequence worth knowing: each run compiles with a cold Inductor cache, so the
compilation time it reports is what a first run on a machine pays (a second run of the same model on the same
machine, with a warm cache, compiles faster). That holds for the runs of a sweep too: they share the sweep's scratch
folder, but each gets an Inductor cache of its own in it (with one shared cache the GPT workload's first compiled
run took 112 s to compile and its repeat 38 s, and their mean was neither figure).

This process's own multiprocessing folder is created first, in the usual place: it lives until this process
exits, and its exit handler removes it there.

A process killed outright (SIGKILL) removes neither. A command that can be resumed records what
:func:`left_if_killed` names (a sweep, in its ``sweep.json``), and its next session removes what is still there
with :func:`remove_left_behind`, once the process that made them is gone.

A process started elsewhere by one inside a scratch folder (a SLURM job, which inherits the environment of the sweep
that submitted it) calls :func:`drop_inherited` first, so that it makes a folder of its own where it runs.

Example:
    >>> import os, tempfile
    >>> with scratch_folder() as folder:
    ...     os.environ["TMPDIR"] == folder == tempfile.gettempdir()
    True
    >>> os.path.exists(folder)
    False

    A run inside it shares the folder, with an Inductor cache of its own:

    >>> with scratch_folder() as outer, scratch_folder() as inner:
    ...     inner == outer, os.path.dirname(os.environ["TORCHINDUCTOR_CACHE_DIR"]) == outer
    (True, True)
"""

from __future__ import annotations

import contextlib
import multiprocessing.util as mp_util
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["drop_inherited", "left_if_killed", "remove_left_behind", "scratch_folder"]

_MARK = "IGNITE_DDL_SCRATCH"  # the scratch folder $TMPDIR points to, while one does
_OUTSIDE = "IGNITE_DDL_TMPDIR_OUTSIDE"  # the temporary folder the outermost scratch folder was made in
_VARIABLES = ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", _MARK, _OUTSIDE)
_PREFIX = "ignite-ddl-"


def _multiprocessing_folder_in(folder: str) -> None:
    """This process's multiprocessing folder (``pymp-*``, which holds the sockets of DataLoader workers), made in
    ``folder`` unless it exists: in a scratch folder its sockets' paths could pass the 107 characters an AF_UNIX
    path may have (a sweep's run is a process started inside the sweep's scratch folder)."""
    previous = tempfile.tempdir
    tempfile.tempdir = folder
    try:
        mp_util.get_temp_dir()
    finally:
        tempfile.tempdir = previous


@contextlib.contextmanager
def _own_inductor_cache(folder: str) -> Iterator[None]:
    """A cold Inductor cache for what runs inside, in ``folder``: every run's compilation time is a first run's."""
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    cache = os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-", dir=folder)
    try:
        yield
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if saved is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved


@contextlib.contextmanager
def scratch_folder(prefix: str = _PREFIX) -> Iterator[str]:
    """A private temporary folder for everything started inside the ``with`` block; see the module docstring.
    Inside another one (a command's, around its runs') it is that one: a folder nested in a folder would make the
    sockets of DataLoader workers (pymp-*/listener-*) pass the 107 characters an AF_UNIX path may have."""
    if os.environ.get(_MARK) and os.environ.get(_MARK) == os.environ.get("TMPDIR"):
        _multiprocessing_folder_in(os.environ.get(_OUTSIDE) or tempfile.gettempdir())
        with _own_inductor_cache(os.environ[_MARK]):
            yield os.environ[_MARK]
        return
    outside = tempfile.gettempdir()
    _multiprocessing_folder_in(outside)  # this process's own, in the usual place (see the module docstring)
    folder = tempfile.mkdtemp(prefix=prefix)
    saved = {name: os.environ.get(name) for name in _VARIABLES}
    previous = tempfile.tempdir
    os.environ["TMPDIR"] = os.environ[_MARK] = folder
    os.environ[_OUTSIDE] = os.environ.get(_OUTSIDE) or outside
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


def drop_inherited() -> None:
    """Forget a scratch folder this process inherited from one that started it elsewhere: $TMPDIR back to where that
    folder was made, and that folder's Inductor cache forgotten, so that :func:`scratch_folder` makes one of its own.

    A SLURM job inherits the environment of the sweep that submitted it (sbatch exports it all), the sweep's scratch
    folder included: on another node that folder does not exist, and on the sweep's own node it goes while the job
    still writes there (when the sweep ends, or when a sweep resumed after a kill removes what the kill left)."""
    inherited = os.environ.pop(_MARK, None)
    outside = os.environ.pop(_OUTSIDE, None)
    if not inherited:
        return
    if os.environ.get("TMPDIR") == inherited:
        if outside:
            os.environ["TMPDIR"] = outside
        else:
            os.environ.pop("TMPDIR")
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    if cache == inherited or cache.startswith(inherited + os.sep):
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR")
    tempfile.tempdir = None  # found again from $TMPDIR at the next use


def left_if_killed() -> list[str]:
    """The temporary folders a kill of this process would leave behind: the scratch folder it works in and its own
    multiprocessing folder beside it; none outside a scratch folder (a notebook's folders are its own to keep)."""
    folder = os.environ.get(_MARK)
    if not folder or folder != os.environ.get("TMPDIR") or not os.path.basename(folder).startswith(_PREFIX):
        return []
    return [folder, mp_util.get_temp_dir()]


def remove_left_behind(folders: Iterable[object], pid: object) -> list[str]:
    """Remove what :func:`left_if_killed` named in process ``pid`` and is still there, once that process is gone;
    the folders removed. The names come from a file a user can edit: only a folder of this user, no link, named as
    this module names them, in the temporary folder this process's own scratch folder was made in is removed."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid() or _alive(pid):
        return []
    outside = Path(os.environ.get(_OUTSIDE) or tempfile.gettempdir()).resolve()
    removed = []
    for folder in folders:
        if not isinstance(folder, str) or not os.path.isabs(folder) or ".." in Path(folder).parts:
            continue
        path = Path(folder)
        if path.parent.resolve() != outside or not path.name.startswith((_PREFIX, "pymp-")):
            continue
        try:
            found = path.lstat()
        except OSError:  # gone: the process ended well, or a session before this one removed it
            continue
        if stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: not the process that made these folders
        return True
    return True  # still running, or its number given to another process since: either way, left alone
