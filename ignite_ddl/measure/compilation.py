"""What ``torch.compile`` does during a run, as the step recorder sees it: which iterations compiled, how often
the model was compiled again, and why.

TorchDynamo compiles a frame the first time it runs and again when a guard fails (a new input shape, dtype,
...); AOTAutograd and Inductor compile the forward graph then and the backward graph lazily, at the first backward
that needs it. :class:`CompileWatch` reads the counters they keep (``torch._dynamo.utils.counters``: frames
compiled, AOTAutograd graphs, Inductor FX graphs built or loaded) before and after each iteration; an iteration
during which any of them moved *compiled*. A frame compiled after the run's first compilation is a
**recompilation**; its reasons are the guard failures Dynamo records (``torch._dynamo.utils.guard_failures``), e.g.
"tensor 'x' size mismatch at index 0. expected 128, actual 32": a last batch of another size.

These counters are TorchDynamo's internals (stable across the releases this suite supports, read defensively: a
missing counter reads 0).

Nothing is compiled in the example: once TorchDynamo has compiled anything in a process, ranks can no longer be
forked from it (:func:`~ignite_ddl.launcher.settings.compiled_here`), and doctests run in the test suite's process.

Example:
    >>> watch = CompileWatch()
    >>> watch.compiled_frames(), watch.reasons_since(watch.failures())
    (0, [])
"""

from __future__ import annotations

from typing import Any

__all__ = ["CompileWatch", "distinct", "recompile_hint"]

_REASONS_KEPT = 5  # distinct recompilation reasons kept per run (a run that recompiles every step has one reason)


class CompileWatch:
    """Dynamo's and Inductor's counters of this process; see the module docstring."""

    def __init__(self) -> None:
        from torch._dynamo import utils

        self._utils: Any = utils
        self._frames_at_start = self.frames()

    def frames(self) -> int:
        """Frames Dynamo compiled in this process so far (recompilations included)."""
        return int(self._utils.counters["frames"].get("total", 0))

    def events(self) -> int:
        """A count that grows whenever anything is compiled: a frame, an AOTAutograd graph (forward and backward),
        an Inductor graph built, loaded from its cache or bypassed."""
        counters = self._utils.counters
        inductor = counters["inductor"]
        return (
            self.frames()
            + int(counters["aot_autograd"].get("total", 0))
            + sum(int(inductor.get(k, 0)) for k in ("fxgraph_cache_miss", "fxgraph_cache_hit", "fxgraph_cache_bypass"))
        )

    def compiled_frames(self) -> int:
        """Frames compiled since this watch was made."""
        return self.frames() - self._frames_at_start

    def failures(self) -> int:
        """Guard failures Dynamo recorded so far (a mark for :meth:`reasons_since`)."""
        return sum(len(v) for v in self._utils.guard_failures.values())

    def reasons_since(self, mark: int) -> list[str]:
        """The recompilation reasons (guard failures, first lines, Dynamo's compile id dropped) recorded after
        ``mark``, in order."""
        failures = [r for reasons in self._utils.guard_failures.values() for r in reasons]
        lines = []
        for reason in failures[mark:]:
            line = str(reason).splitlines()[0]
            lines.append(line.split(": ", 1)[1] if ": " in line else line)  # "0/1: tensor 'x' ..." -> "tensor ..."
        return lines


def distinct(reasons: list[str]) -> list[str]:
    """The first few distinct reasons, in order (a run that recompiles every step has one reason many times)."""
    seen: list[str] = []
    for reason in reasons:
        if reason not in seen:
            seen.append(reason)
    return seen[:_REASONS_KEPT]


def recompile_hint(reasons: list[str]) -> str:
    """What a recompilation's reasons suggest, in a few words ("" when nothing specific).

    >>> recompile_hint(["tensor 'x' size mismatch at index 0. expected 128, actual 32"])
    'shapes changed (a last batch of another size? use drop_last, or a dataset size the batch divides)'
    """
    if any("size mismatch" in r or "stride mismatch" in r for r in reasons):
        return "shapes changed (a last batch of another size? use drop_last, or a dataset size the batch divides)"
    if any("dtype mismatch" in r for r in reasons):
        return "dtypes changed"
    if any("___check_obj_id" in r or "id_match" in r for r in reasons):
        return "an object the model reads changed identity"
    return ""
