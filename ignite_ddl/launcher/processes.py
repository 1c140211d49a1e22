"""The processes a launch started, and their descendants: found through /proc, stopped together.

Example:
    >>> import os
    >>> os.getpid() in process_tree_pids(os.getpid())
    True
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from typing import cast

__all__ = ["STOP_GRACE_S", "children_map", "process_tree_pids", "stop_children", "wait_children"]

STOP_GRACE_S = 3.0  # after SIGTERM, what is left of a stopped rank gets SIGKILL


def children_map() -> dict[int, list[int]]:
    """Every live process's children, by parent pid (empty where there is no /proc)."""
    if not os.path.isdir("/proc"):
        return {}
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def process_tree_pids(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    children = children_map()
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def stop_children() -> None:
    """SIGTERM every process this launcher started, and their descendants (DataLoader workers); SIGKILL what is
    left after a grace period (from a timer thread: this may run inside a signal handler)."""
    # A live child has been started, so it has a pid (typed int | None for a process not started yet).
    pids = [pid for child in mp.active_children() for pid in process_tree_pids(cast(int, child.pid))]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

    def finish() -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    if pids:
        timer = threading.Timer(STOP_GRACE_S, finish)
        timer.daemon = True
        timer.start()


def wait_children(seconds: float) -> None:
    """Wait up to ``seconds`` in all for the processes this launcher started to end."""
    deadline = time.monotonic() + seconds
    for child in mp.active_children():
        child.join(max(0.0, deadline - time.monotonic()))
