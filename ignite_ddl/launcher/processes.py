"""The processes a launch started, and their descendants, stopped together; why a rank died of memory."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import cast

from ignite_ddl.core.procfs import process_tree_pids, reading_file

__all__ = [
    "STOP_GRACE_S",
    "die_with_parent",
    "out_of_memory",
    "stop_children",
    "wait_children",
]

STOP_GRACE_S = 3.0  # after SIGTERM, what is left of a stopped rank gets SIGKILL


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Have the kernel send ``signum`` to this process when its parent ends (Linux's ``PR_SET_PDEATHSIG``; a no-op
    elsewhere): a launcher killed outright leaves no rank or worker behind. If the parent is already gone, the
    signal comes at once."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signum), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent ended between the fork and the prctl
        os.kill(os.getpid(), signum)


def stop_children(*, wait_s: float | None = None) -> None:
    """SIGTERM every process this launcher started, and their descendants (DataLoader workers); SIGKILL what is
    left after a grace period: from a timer thread by default (this may run inside a signal handler), or here,
    after waiting up to ``wait_s`` for them to end, for a caller that forks again next (the launcher's restart: a
    fork must find no thread of ours alive)."""
    # A live child has been started, so it has a pid (typed int | None for a process not started yet).
    pids = [pid for child in mp.active_children() for pid in process_tree_pids(cast(int, child.pid))]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

    def finish() -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    if pids and wait_s is not None:
        wait_children(wait_s)
        finish()
    elif pids:
        timer = threading.Timer(STOP_GRACE_S, finish)
        timer.daemon = True
        timer.start()


def wait_children(seconds: float) -> None:
    """Wait up to ``seconds`` in all for the processes this launcher started to end."""
    deadline = time.monotonic() + seconds
    for child in mp.active_children():
        child.join(max(0.0, deadline - time.monotonic()))


# -- memory: what a rank leaves behind for the launcher to name an out-of-memory death

# Words of the errors an allocation past the memory there is ends with (CPU allocator, CUDA caching allocator,
# Python's own MemoryError).
_OOM_WORDS = ("can't allocate memory", "out of memory", "memoryerror", "outofmemoryerror", "cannot allocate memory")
NEAR_LIMIT = 0.9  # a rank killed by SIGKILL whose last reading was above this share of its limit ran out of memory


def _out_of_memory_error(message: str) -> bool:
    """Whether an error message says an allocation failed for lack of memory."""
    text = message.lower()
    return any(word in text for word in _OOM_WORDS)


def _last_reading(log_dir: str | Path | None, rank: int) -> tuple[int, int | None] | None:
    """``(resident bytes, limit bytes or None)`` a rank last left in ``log_dir`` (None if it left none)."""
    if log_dir is None:
        return None
    try:
        parts = reading_file(log_dir, rank).read_text().split()
        return int(parts[0]), (int(parts[1]) if len(parts) > 1 and parts[1] != "-" else None)
    except (OSError, ValueError, IndexError):
        return None


def out_of_memory(message: str, log_dir: str | Path | None, rank: int, killed: bool = False) -> str | None:
    """Why a failed rank ran out of memory, in words with its figures, or None if it did not: an allocation error
    in ``message``, or (``killed`` by SIGKILL, which says nothing) a last reading near its limit."""
    reading = _last_reading(log_dir, rank)
    held = ""
    if reading is not None:
        used, limit = reading
        held = f"{used / 1e9:.2f} GB resident" + (f" of a {limit / 1e9:.2f} GB limit" if limit else "")
    if killed:
        if reading is None or reading[1] is None or reading[0] < NEAR_LIMIT * reading[1]:
            return None
        return f"out of memory: killed by SIGKILL with {held} at its last reading"
    if not _out_of_memory_error(message):
        return None
    return f"out of memory ({held} at its last reading): {message}" if held else f"out of memory: {message}"
