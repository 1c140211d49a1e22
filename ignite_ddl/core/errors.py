"""How a launched run ends badly: the exceptions the launcher raises (kept apart so the CLI can name them without
importing torch).

Example:
    >>> str(RunFailed(1, "RuntimeError: boom"))
    'rank 1 failed: RuntimeError: boom'
"""

from __future__ import annotations

__all__ = ["LaunchFailed", "RunFailed"]


class RunFailed(RuntimeError):
    """A launched run ended with an error on one rank."""

    def __init__(self, rank: int, message: str, log_file: str | None = None):
        self.rank, self.message, self.log_file = rank, message, log_file
        detail = f" (traceback in {log_file})" if log_file else ""
        super().__init__(f"rank {rank} failed: {message}{detail}")


class LaunchFailed(RuntimeError):
    """The ranks could not all be brought together: a node that never joined, a rendezvous that cannot be reached."""
