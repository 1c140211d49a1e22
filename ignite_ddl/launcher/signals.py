"""SIGINT, SIGTERM and SIGHUP as an exception, so that whoever started processes stops them before it goes.

A launcher waiting for its ranks, or a sweep waiting for a run, wraps the wait in :func:`interruptible`: a stopping
signal then calls ``stop`` (take the children down) and raises :class:`Interrupted` in the main thread, a
``KeyboardInterrupt`` that knows which signal came. Outside the main thread (where Python cannot install
handlers) it does nothing. A process forked while the handler is installed starts with the default handlers
(:func:`interruptible` registers that once, with ``os.register_at_fork``): a rank or a worker stopped with SIGTERM
ends by that signal, instead of raising the launcher's exception in a process that has no one to catch it (torch
2.14's ``spawn`` wrapper counted that exception as a clean exit).

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
from ignite_ddl.launcher.processes import die_with_parent

__all__ = ["end_with", "interruptible", "sigterm_with_parent"]

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_OURS = "_ignite_ddl_interrupts"  # marks the handlers interruptible installs


def _default_handlers_in_child() -> None:
    """After a fork: the handlers :func:`interruptible` installed in the parent are not the child's to run."""
    for s in SIGNALS:
        if getattr(signal.getsignal(s), _OURS, False):
            try:
                signal.signal(s, signal.SIG_DFL)
            except ValueError:  # not the main thread of the main interpreter: nothing to reset here
                return


os.register_at_fork(after_in_child=_default_handlers_in_child)


@contextmanager
def interruptible(stop: Callable[[], None] | None = None) -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP run ``stop`` and raise :class:`Interrupted` (main thread only)."""
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

    setattr(handler, _OURS, True)

    for s in SIGNALS:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def end_with(pid: int) -> None:
    """SIGTERM this process when process ``pid`` ends, however it ends: a sweep killed with SIGKILL has no chance to
    stop its run, so the run watches the sweep (and then stops its ranks as on any SIGTERM). The watching is done by
    a small forked process, not a thread: this process forks ranks later, and a fork should find no thread of ours.
    It waits on a pidfd where the kernel has them, else checks once a second, and ends with this process."""
    me = os.getpid()
    if os.fork() != 0:
        return
    try:  # the watcher: nothing here may return into the caller's code
        die_with_parent(signal.SIGKILL)
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            while _alive(pid) and _alive(me):
                time.sleep(1.0)
        else:
            while _alive(me) and not select.select([fd], [], [], 1.0)[0]:
                pass  # readable once the process has ended
        if _alive(me):
            os.kill(me, signal.SIGTERM)
    finally:
        os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sigterm_with_parent() -> None:
    """Have this process get SIGTERM when its parent ends: a ``preexec_fn`` for a child about to ``exec``."""
    die_with_parent(signal.SIGTERM)
