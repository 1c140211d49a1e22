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

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Interrupted", "interruptible"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` says which (exit status by convention: 128 + signum)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


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
