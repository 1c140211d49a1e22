"""What /proc says of processes: who is whose child, the resident memory of one, the memory this process may use
(each answers "nothing known" where there is no /proc). Used by those who start processes and those who measure
them.

Example:
    >>> import os
    >>> os.getpid() in process_tree_pids(os.getpid())
    True
"""

from __future__ import annotations

import contextlib
import os
import resource
from pathlib import Path

__all__ = [
    "available_bytes",
    "children_map",
    "current_rss_bytes",
    "memory_limit_bytes",
    "process_tree_pids",
    "reading_file",
]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


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


def current_rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of a process now (0 if it is gone or there is no /proc). This process's own is read from a
    file kept open: a rank reads it at every step's end, and opening /proc/self/statm cost 80 us there (a busy
    process's open walks its memory map's locks) against 1 us for reading an open one again."""
    try:
        if pid == "self":
            return int(os.pread(_own_statm(), 128, 0).split()[1]) * _PAGE
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_OWN_STATM: tuple[int, int] | None = None  # (pid, descriptor) of this process's statm, opened on first use


def _own_statm() -> int:
    """A descriptor of this process's ``/proc/<pid>/statm``, opened again in a forked child (the parent's would
    read the parent)."""
    global _OWN_STATM
    pid = os.getpid()
    if _OWN_STATM is None or _OWN_STATM[0] != pid:
        if _OWN_STATM is not None:
            with contextlib.suppress(OSError):
                os.close(_OWN_STATM[1])  # the parent's, inherited
        _OWN_STATM = (pid, os.open(f"/proc/{pid}/statm", os.O_RDONLY | os.O_CLOEXEC))
    return _OWN_STATM[1]


def memory_limit_bytes() -> int | None:
    """The memory this process may use: the smallest of the machine's RAM, its cgroup's ``memory.max`` and its
    RLIMIT_AS / RLIMIT_DATA (None if none is known)."""
    limits = []
    try:
        with open("/proc/meminfo") as f:
            limits += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:")]
    except (OSError, ValueError, IndexError):
        pass
    with contextlib.suppress(OSError, ValueError):
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if text != "max":
            limits.append(int(text))
    for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    return min(limits) if limits else None


def available_bytes() -> int | None:
    """The memory a new allocation may take without pushing others out: the machine's ``MemAvailable``, at most
    :func:`memory_limit_bytes` (None if neither is known)."""
    known = [limit] if (limit := memory_limit_bytes()) is not None else []
    try:
        with open("/proc/meminfo") as f:
            known += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    return min(known) if known else None


def reading_file(log_dir: str | Path, rank: int) -> Path:
    return Path(log_dir) / f"memory_rank{rank}.txt"
