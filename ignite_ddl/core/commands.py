"""A command's ending: whatever error it ends with becomes one line on stderr and the exit status of
:func:`~ignite_ddl.core.errors.exit_status` (2 refused before starting, 1 failed, 3 too busy to compare, 128 + N
stopped by signal N), never a traceback. The command line and a sweep's runs (which do not go through the command
line) end alike.

Example:
    >>> from ignite_ddl.core.errors import ConfigError
    >>> def refuse():
    ...     raise ConfigError("unknown model 'foo'")
    >>> import sys; sys.stderr = sys.stdout  # show the error line here
    >>> run_command(refuse)
    ignite-ddl: error: unknown model 'foo'
    2
    >>> sys.stderr = sys.__stderr__
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any

from ignite_ddl.core.errors import (
    ConfigError,
    DatasetError,
    LaunchFailed,
    MachineBusy,
    OutputError,
    RunFailed,
    exit_status,
)
from ignite_ddl.core.outputs import as_output_error

__all__ = ["PROG", "VERSION", "run_command", "say"]

PROG = "ignite-ddl"
VERSION = "0.1.0"


def say(message: str) -> None:
    """One line on stderr, named after the command."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def run_command(fn: Callable[..., int], *args: Any, **kwargs: Any) -> int:
    """``fn(*args, **kwargs)``'s exit status, or the status of the error it raised after saying it in one line."""
    try:
        return fn(*args, **kwargs)
    except (ConfigError, RunFailed, LaunchFailed, OutputError, DatasetError, MachineBusy) as e:
        say(f"error: {e}")
        return exit_status(e)
    except OSError as e:  # a failed write outside a run (sweep records, report files) or another system error
        error = as_output_error(e, "the output")
        say(f"error: {error or (f'{e.filename}: {e.strerror}' if e.filename else e)}")
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C, or Interrupted (a stopping signal) after every child was stopped
        signum = getattr(e, "signum", signal.SIGINT)
        say(f"interrupted by {signal.Signals(signum).name}: stopped")
        return exit_status(e)
