"""One call made in a child process, its value or its error brought back: for work whose side effects must not stay
in the caller (a trace that would leave autograd refusing forked ranks, a measurement whose result depends on what
the caller's allocator holds).

The child runs ``fn(*args)`` and sends back its value, or its exception's name and message, through a pipe; the
parent raises :class:`ChildFailed` with them, so each caller words the failure its own way. ``fork`` shares the
caller's state as it is (fast, functions defined anywhere); ``spawn`` starts a fresh interpreter, ``forkserver``
forks the fork server's (``fn`` must be importable, its arguments and value picklable).

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

import contextlib
import multiprocessing as mp
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ChildFailed", "call_apart"]


class ChildFailed(Exception):
    """The child's ``fn`` raised (``name``: its exception's class name, ``text``: its message), or the child ended or
    stayed silent without an answer (``name`` "ChildExited" or "ChildTimedOut")."""

    def __init__(self, name: str, text: str):
        super().__init__(f"{name}: {text}")
        self.name, self.text = name, text


def call_apart(
    fn: Callable[..., Any], *args: Any, start_method: str, timeout_s: float | None = None, run_main: bool = True
) -> Any:
    """``fn(*args)`` in a child process started with ``start_method``; its value. Raises :class:`ChildFailed`.
    ``run_main=False``: a spawned child (or a fork server's) does not run the caller's main script first, for an
    ``fn`` that needs nothing of it (a script without a ``__main__`` guard would otherwise run whole in the child)."""
    context: Any = mp.get_context(start_method)  # a fork or spawn context: both start a Process
    mine, theirs = context.Pipe(duplex=False)
    child = context.Process(target=_answer, args=(fn, args, theirs), daemon=True)
    with _main_file_hidden_if_unreadable(start_method, hide=not run_main):
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


@contextlib.contextmanager
def _main_file_hidden_if_unreadable(start_method: str, hide: bool = False) -> Iterator[None]:
    """A spawned child (or a fork server's) runs the caller's main script again from its ``__file__`` before it can
    call ``fn``; a main read from standard input (``python - <<EOF``) names "<stdin>", which the child cannot open,
    and it exits before answering. ``fn`` is importable without the main script, so where that file cannot be read
    (or ``hide``), multiprocessing is not told of it while the child starts."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    by_name = getattr(main, "__spec__", None) is not None
    if start_method not in ("spawn", "forkserver") or main is None or path is None or by_name:
        yield  # a main run as a module is imported by name; one without a file (a notebook) is not run again
        return
    if os.path.isfile(path) and not hide:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path
