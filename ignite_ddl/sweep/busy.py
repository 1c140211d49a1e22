"""A busy machine is said at once, not after every run was spent on it.

Before the first run a sweep measures how much of the machine other processes use. Above the contention threshold
it says so in one line with the figure, then does what ``on_busy`` says: ``wait`` (the default) for the machine to
quieten, up to ``wait_quiet`` seconds, and stop if it does not; ``run`` anyway (every contended run is flagged);
or ``stop`` at once. During the sweep, when the last ``busy_stop_after`` runs were all contended, the contention is
not passing and re-running cannot help: the sweep stops and its verdict says "cannot compare on this machine", with
the range of what other processes used. Re-runs (``rerun_contended``) are spent only on passing contention.

Example:
    >>> shares = iter([0.6, 0.55, 0.02])  # what other processes used in three probes: busy, busy, quiet
    >>> share = wait_until_quiet(0.1, "wait", 60.0, print, probe=lambda: next(shares), pause=lambda s: None)
    the machine is busy: other processes use 60% of its CPUs (a run counts as contended above 10%); waiting up to 60 s for it to quieten (--wait-quiet)
    quiet now (other processes use 2%): starting
    >>> streak = BusyStreak(after=2)
    >>> streak.add(True, 0.52), streak.add(True, 0.79)
    (None, 'cannot compare on this machine: other processes used 52-79% of the CPUs in every one of the last 2 runs')
"""  # noqa: E501

from __future__ import annotations

import os
import time
from collections.abc import Callable

from ignite_ddl.core.errors import MachineBusy
from ignite_ddl.measure.contention import ForeignLoad

__all__ = [
    "BUSY_POLICIES",
    "FINISH_ANYWAY",
    "PROBE_S",
    "BusyStreak",
    "first_probe_from",
    "machine_share",
    "wait_until_quiet",
]

BUSY_POLICIES = ("wait", "run", "stop")
# What finishes a sweep on a machine that stays busy: every run measured and flagged, none stopping the sweep. Each
# busy-machine message names it (--on-busy run alone still stops after busy_stop_after contended runs in a row).
FINISH_ANYWAY = "--on-busy run --busy-stop-after 0"
PROBE_S = 2.0  # one probe of the machine: long enough to average a scheduler's time slices, short enough to wait on


def machine_share(seconds: float = PROBE_S, since: ForeignLoad | None = None) -> float | None:
    """The share of the machine's CPUs that processes other than this one (and its children) used over the next
    ``seconds``; None where the system does not say (no ``/proc/stat``). With ``since`` (a load opened earlier), the
    window runs from its start and lasts at least ``seconds``: a command that opens one as it starts has its first
    answer as soon as its imports are done, since the CPU this process spent on them is its own."""
    load = since if since is not None else ForeignLoad().start()
    time.sleep(max(0.0, seconds - load.elapsed_s()))
    return load.stop()


def first_probe_from(load: ForeignLoad) -> Callable[[], float | None]:
    """A probe for :func:`wait_until_quiet` whose first answer covers the time since ``load`` opened, and each
    later one a new window of :data:`PROBE_S`."""
    pending = [load]

    def probe() -> float | None:
        return machine_share(since=pending.pop() if pending else None)

    return probe


def _range(shares: list[float]) -> str:
    low, high = min(shares), max(shares)
    return f"{high:.0%}" if round(low * 100) == round(high * 100) else f"{low * 100:.0f}-{high:.0%}"


def wait_until_quiet(
    threshold: float,
    policy: str,
    wait_s: float,
    progress: Callable[[str], None],
    probe: Callable[[], float | None] = machine_share,
    pause: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    stop_after: int = 0,
) -> float | None:
    """Probe the machine before a sweep; return the share other processes use once it may start (``stop_after``:
    the contended runs in a row that will stop it, which running anyway says).

    Raises :class:`MachineBusy` when ``policy`` is ``stop`` and the machine is busy, or ``wait`` and it stayed
    busy for ``wait_s`` seconds.
    """
    share = probe()
    if share is None or share <= threshold:
        return share
    busy = (
        f"the machine is busy: other processes use {share:.0%} of its CPUs "
        f"(a run counts as contended above {threshold:.0%})"
    )
    if policy == "run":
        stops = (
            f", and {stop_after} contended runs in a row stop the sweep (never with --busy-stop-after 0)"
            if stop_after
            else ""
        )
        progress(f"{busy}; running anyway (--on-busy run): its runs will be flagged contended{stops}")
        return share
    if policy == "stop":
        raise MachineBusy(f"{busy}; not starting ({_named('stop')}); to measure anyway: {FINISH_ANYWAY}")
    progress(f"{busy}; waiting up to {wait_s:.0f} s for it to quieten (--wait-quiet)")
    seen, deadline = [share], clock() + wait_s
    while clock() < deadline:
        pause(min(1.0, max(0.0, deadline - clock())))
        share = probe()
        if share is None or share <= threshold:
            progress(f"quiet now (other processes use {share or 0:.0%}): starting")
            return share
        seen.append(share)
    raise MachineBusy(
        f"cannot compare on this machine now: other processes used {_range(seen)} of its CPUs for {wait_s:.0f} s "
        f"({_named('wait')}); try later, wait longer (--wait-quiet), or measure anyway ({FINISH_ANYWAY}: every run "
        "is flagged contended, and none stops the sweep)"
    )


def _named(policy: str) -> str:
    """Where a busy-machine policy came from, for a message: the option, or the environment variable whose value is
    the option's default (a CI runner's or a shell profile's setting the user may not remember)."""
    if os.environ.get("IGNITE_DDL_ON_BUSY", "").strip() == policy:
        return f"--on-busy {policy}, as $IGNITE_DDL_ON_BUSY sets it"
    return f"--on-busy {policy}"


class BusyStreak:
    """Counts contended runs in a row; :meth:`add` returns the reason to stop once ``after`` of them were (never
    when ``after`` is 0)."""

    def __init__(self, after: int):
        self.after = after
        self.shares: list[float] = []

    def add(self, contended: bool, share: float | None) -> str | None:
        self.shares = [*self.shares, share or 0.0] if contended else []
        if not self.after or len(self.shares) < self.after:
            return None
        return (
            f"cannot compare on this machine: other processes used {_range(self.shares)} of the CPUs in every one "
            f"of the last {len(self.shares)} runs"
        )
