"""One call made in a child process, its value or its error brought back: for work whose side effects must not stay
in the caller (a trace that would leave autograd refusing forked ranks, a measurement whose result depends on what
the caller's allocator holds).

The child runs ``fn(*args)`` and sends back its value, or its exception's name and message, through a pipe; the
parent raises :class:`ChildFailed` with them, so each caller words the failure its own way. ``fork`` shares the
caller's state as it is (fast, functions defined anywhere); ``spawn`` starts a fresh interpreter (``fn`` must be
importable, its arguments and value picklable).

Example:
    >>> call_apart(pow, 2, 10, start_method="fork")
    1024
    >>> try:
    ...     call_apart(int, "ten", start_method="fork")
    ... except ChildFailed as e:
    ...     print(e.name)
    ValueError
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from typing import Any

__all__ = ["ChildFailed", "call_apart"]


class ChildFailed(Exception):
    """The child's ``fn`` raised (``name``: its exception's class name, ``text``: its message), or the child ended or
    stayed silent without an answer (``name`` "ChildExited" or "ChildTimedOut")."""

    def __init__(self, name: str, text: str):
        super().__init__(f"{name}: {text}")
        self.name, self.text = name, text


def call_apart(fn: Callable[..., Any], *args: Any, start_method: str, timeout_s: float | None = None) -> Any:
    """``fn(*args)`` in a child process started with ``start_method``; its value. Raises :class:`ChildFailed`."""
    context: Any = mp.get_context(start_method)  # a fork or spawn context: both start a Process
    mine, theirs = context.Pipe(duplex=False)
    child = context.Process(target=_answer, args=(fn, args, theirs), daemon=True)
    child.start()
    theirs.close()
    try:
        if timeout_s is not None and not mine.poll(timeout_s):
            raise ChildFailed("ChildTimedOut", f"no answer within {timeout_s:.0f} s")
        kind, value = mine.recv()
    except EOFError:
        child.join()
        raise ChildFailed("ChildExited", f"the child process ended with exit code {child.exitcode}") from None
    finally:
        mine.close()
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
    if kind == "error":
        raise ChildFailed(*value)
    return value


def _answer(fn: Callable[..., Any], args: tuple[Any, ...], answer: Any) -> None:
    try:
        found: tuple[str, Any] = ("value", fn(*args))
    except Exception as e:  # the parent raises it again as ChildFailed, by name
        found = ("error", (type(e).__name__, str(e)))
    answer.send(found)
    answer.close()
