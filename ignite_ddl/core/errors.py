"""Every way a run can end badly, in one place, and the exit status each one gets.

===================  ==========================================================================  =============
exception            meaning                                                                     exit status
===================  ==========================================================================  =============
:class:`ConfigError` a setup refused before anything started (bad option, spec or machine)       2
:class:`RunFailed`   a launched run ended with an error on one rank                              1
:class:`LaunchFailed` the ranks could not be brought together                                     1
:class:`OutputError` writing a file failed (a full disk, a read-only folder)                      1
:class:`DatasetError` a dataset's files exist but cannot be read                                  1
:class:`MachineBusy` other processes kept the machine too busy for a fair comparison               3
:class:`Interrupted` SIGINT / SIGTERM / SIGHUP arrived and everything was stopped                 128 + signal
===================  ==========================================================================  =============

Kept apart from the code that raises them, so that the command line can name them without importing torch.

Example:
    >>> str(RunFailed(1, "RuntimeError: boom"))
    'rank 1 failed: RuntimeError: boom'
    >>> exit_status(ConfigError("no such model")), exit_status(RunFailed(0, "x")), exit_status(Interrupted(15))
    (2, 1, 143)
"""

from __future__ import annotations

import signal
from pathlib import Path

__all__ = [
    "ConfigError",
    "DatasetError",
    "Interrupted",
    "LaunchFailed",
    "MachineBusy",
    "OutputError",
    "RunFailed",
    "exit_status",
]


class ConfigError(ValueError):
    """A setup the suite refuses before starting any process; its message is one line meant for the user."""


class RunFailed(RuntimeError):
    """A launched run ended with an error on one rank."""

    def __init__(self, rank: int, message: str, log_file: str | None = None):
        self.rank, self.message, self.log_file = rank, message, log_file
        detail = f" (traceback in {log_file})" if log_file else ""
        super().__init__(f"rank {rank} failed: {message}{detail}")

    @property
    def out_of_memory(self) -> bool:
        """Whether the rank ran out of memory (the launcher says so at the start of the message)."""
        return self.message.startswith("out of memory")


class LaunchFailed(RuntimeError):
    """The ranks could not all be brought together: a node that never joined, a rendezvous that cannot be reached."""


class OutputError(RuntimeError):
    """Writing ``path`` failed; ``error`` is the operating system's error."""

    def __init__(self, path: str | Path, error: OSError):
        self.path, self.error = str(path), error
        super().__init__(f"cannot write {path}: {error.strerror or error}")


class DatasetError(RuntimeError):
    """A dataset's files exist but cannot be read (or downloaded); the message says which and what to do."""


class MachineBusy(RuntimeError):
    """Other processes kept the machine so busy that no run of a sweep could measure its own speed: waiting did not
    help, or the last runs were all contended (re-running them cannot help). The message says how busy, in one line.
    """


class Interrupted(KeyboardInterrupt):
    """A stopping signal arrived (SIGINT, SIGTERM, SIGHUP); ``signum`` says which (exit status: 128 + signum)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


def exit_status(error: BaseException) -> int:
    """The exit status of a command that ended with ``error``: 2 refused before starting, 1 failed, 128 + N
    stopped by signal N (Ctrl-C without a handler counts as SIGINT), 3 the machine was too busy to compare."""
    if isinstance(error, ConfigError):
        return 2
    if isinstance(error, MachineBusy):
        return 3
    if isinstance(error, KeyboardInterrupt):
        return 128 + getattr(error, "signum", signal.SIGINT)
    return 1
