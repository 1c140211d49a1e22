"""SIGINT and SIGTERM as an exception, so that whoever started processes stops them before it goes.

A launcher waiting for its ranks, or a sweep waiting for a run, wraps the wait in :func:`interruptible`: either
signal then calls ``stop`` (take the children down) and raises :class:`Interrupted` in the main thread, a
``KeyboardInterrupt`` that knows which signal came. Outside the main thread (where Python cannot install
handlers) it does nothing.

Example:
    >>> import os, signal
    >>> stopped = []
    >>> try:
    ...     with interruptible(stop=lambda: stopped.append(True)):
    ...         os.kill(os.getpid(), signal.SIGTERM)
    ... except Interrupted as e:
    ...     print(e.name, stopped)
    SIGTERM [True]
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ignite_ddl.core.errors import Interrupted

__all__ = ["end_with", "interruptible", "sigterm_with_parent"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def interruptible(stop: Callable[[], None] | None = None) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM run ``stop`` and raise :class:`Interrupted` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}

    def handler(signum: int, frame: object) -> None:
        for s in SIGNALS:  # a second signal while stopping must not interrupt the stopping
            signal.signal(s, signal.SIG_IGN)
        if stop is not None:
            stop()
        raise Interrupted(signum)

    for s in SIGNALS:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def end_with(pid: int) -> None:
    """SIGTERM this process when process ``pid`` ends, however it ends: a sweep killed with SIGKILL has no chance to
    stop its run, so the run watches the sweep (and then stops its ranks as on any SIGTERM). Waits on a pidfd
    where the kernel has them, else checks once a second."""

    def watch() -> None:
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            while _alive(pid):
                time.sleep(1.0)
        else:
            select.select([fd], [], [])  # readable once the process has ended
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name=f"end-with-{pid}", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sigterm_with_parent() -> None:
    """Ask the kernel to send this process SIGTERM when its parent ends (Linux ``prctl(PR_SET_PDEATHSIG)``; a
    no-op elsewhere). Meant as a ``preexec_fn``: it applies to the child about to ``exec``."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
