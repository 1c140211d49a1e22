"""A guided search: the plan's predictions steer the sampler (``search: {guided: true}``, the default where the
spec predicts, ``predict: true``, and the runs are local; ``guided: false`` searches as the sampler alone would).

- **Never run what is predicted not to fit.** Every configuration the search is about to measure, and every one the
  guide is about to propose, is planned first (its predicted peak per rank, :class:`~ignite_ddl.sweep.forecast.
  Planner`, the runtime of its launch layout measured once per machine); one predicted above ``memory_limit_mb`` is
  answered without a run (``run_unfit: true`` runs it anyway) and listed in ``search.json`` and the report with
  its figure and the limit. Where the runtime is not measured, the traced parts alone already above the limit are
  enough to say so.
- **One process first, as the step model needs.** The plan's step model predicts a configuration of several
  processes from its *one-process twin* (the same options, one process: :mod:`ignite_ddl.predict.steptime`). Where
  the grid holds both, the guide proposes the one-process layout and leaves every other axis to the sampler
  (Optuna's ``enqueue_trial`` with those parameters fixed), until the sampler brings no new one-process
  configuration :data:`SCOUT_MISSES` times in a row: each one measured predicts every layout of its options.
- **The predicted fastest first.** After each configuration measured, the step model is fitted again to the
  one-process runs so far, and every layout of the measured options (each combination of the grid's layout axes,
  at most :data:`MAX_LAYOUTS`) is predicted. Whenever one not yet measured is predicted to match or beat the leader
  (the faster end of its interval within ``equivalence_margin`` of the leader's mean samples/s), the fastest
  predicted is proposed next, whole (``enqueue_trial``).
- **Then the sampler.** When nothing is predicted to match the leader and there is no one-process configuration
  left to scout, the sampler proposes on its own; the final rounds and the verdict are an unguided search's.
- **Unknown is not guided.** A configuration the plan cannot predict (a workload of one's own, a model that cannot
  be traced, a layout without a one-process twin, a prediction that failed) is neither proposed by the guide nor
  refused: the sampler may propose it, and it runs.

The guide never lists the space: it plans the configurations proposed and the layouts of those measured, so a
space of 10^6 configurations is searched as lazily as an unguided one.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ignite_ddl.core.config import LAYOUT_OPTIONS
from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.strategies import resolve_strategy
from ignite_ddl.core.sweep_records import MemoryPrediction, PredictedStep, RunRecord, StepLink, StepModel
from ignite_ddl.sweep.forecast import Planner, fit_step_model, unfit_reason
from ignite_ddl.sweep.grid import excluded, one_line
from ignite_ddl.sweep.plan import Run, make_run, options_key
from ignite_ddl.sweep.spec import Spec, search_axes

__all__ = ["MAX_LAYOUTS", "SCOUT_MISSES", "Guess", "Guide", "StepFit", "config_key", "proposal_refusal"]

MAX_LAYOUTS = 256  # layouts of one configuration's options the guide predicts: the product of the layout axes
SCOUT_MISSES = 3  # one-process proposals in a row that brought no new configuration: none is left to scout
_UNMEASURED = 1_000_000  # indices the step model is given for configurations not measured (measured keep theirs)
_NOT_RUN_ROWS = 200  # configurations not run that search.json lists (the rest counted)

# The step model as the guide calls it: configurations by index (the measured one-process ones and those asked
# about) and the records so far -> ``{"link": ..., "configurations": {str(index): {"step_s", "low_s", "basis"}}}``.
StepFit = Callable[[Mapping[int, dict[str, Any]], list[RunRecord]], StepModel]


def config_key(run: Run) -> str:
    """A configuration's identity across sessions: its runs' key without the repeat."""
    return options_key(run.config.to_dict())


def proposal_refusal(spec: Spec, grid: dict[str, Any], out: Path) -> tuple[Run | None, str | None]:
    """A proposal's first run and why it is refused whatever the machine (None: it may run): options that cannot
    go together, what ``ignite-ddl train`` refuses (a batch that does not divide, FSDP with one process), the
    spec's ``exclude``."""
    from ignite_ddl.trainer.run import check_arrangement

    try:
        run = make_run(spec, 0, grid, 0, out)
        check_arrangement(run.config, (run.config.nproc_per_node or 1) * run.config.nnodes)
    except ConfigError as e:
        return None, one_line(str(e))
    return run, "excluded by the spec" if excluded(spec, grid) else None


def _world(run: Run) -> int:
    return (run.config.nproc_per_node or 1) * run.config.nnodes


@dataclass
class Guess:
    """What the plan predicts of one configuration: its samples/s (with the faster end of its interval) from the
    step model, its peak per rank, and whether it fits."""

    grid: dict[str, Any]
    batch: int
    step: PredictedStep | None = None  # the step model's prediction (step_s, low_s, high_s, basis)
    memory: MemoryPrediction | None = None  # the memory prediction, as a run's record keeps it
    unfit: str | None = None  # "predicted not to fit: 9.4 GiB > 8 GiB"
    planned: bool = False

    @property
    def rate(self) -> float | None:
        """Predicted samples/s (None: not predicted)."""
        step = self.step["step_s"] if self.step else None
        return self.batch / step if step else None

    @property
    def high(self) -> float | None:
        """The faster end of the prediction's interval, samples/s."""
        low = self.step["low_s"] if self.step else None
        return self.batch / low if low else self.rate


class Guide:
    """The plan's predictions for one search (see the module docstring). ``measure``: measure the runtime of a
    launch layout not yet measured (else a peak is known only where its traced parts alone exceed the limit);
    ``step_model``: the step model to fit (default :func:`~ignite_ddl.sweep.forecast.fit_step_model`)."""

    def __init__(
        self,
        spec: Spec,
        out: Path,
        progress: Callable[[str], None],
        measure: bool = True,
        step_model: StepFit | None = None,
    ):
        self.spec, self.out, self.progress = spec, out, progress
        self.planner = Planner(spec, out, measure, progress)
        self.margin = spec.equivalence_margin
        lists, _ = search_axes(spec)
        self.layout_axes = {k: v for k, v in lists.items() if k in LAYOUT_OPTIONS}
        self.scout = self._one_process_layout()
        self.scout_misses = 0
        self.guesses: dict[str, Guess] = {}  # by configuration key
        self.proposed: set[str] = set()  # proposed whole by the guide (each once)
        self.hooks: dict[str, Any] = {}  # DDP's measured work, kept across fits
        self.step_model = step_model or self._fit
        self.link: StepLink | None = None
        self.fitted_on: tuple[tuple[int, int], ...] | None = None

    def _fit(self, grids: Mapping[int, dict[str, Any]], records: list[RunRecord]) -> StepModel:
        # No layout probes: a search asks about configurations it may never run, and a probe is a run of each
        # layout, out of the budget; the twin's rule ranks them.
        return fit_step_model(
            self.spec, self.out, records, self.progress, grids=grids, hooks_measured=self.hooks, probe_layouts=False
        )

    def _one_process_layout(self) -> dict[str, Any] | None:
        """The values of the grid's axes that decide the world size (processes, nodes, strategy) making one
        process, where the grid also has configurations of several (None: no twin to measure, or nothing to
        predict from one)."""
        axes = {k: v for k, v in self.layout_axes.items() if k in ("nproc_per_node", "nnodes", "strategy")}
        if not axes or math.prod(len(v) for v in axes.values()) > MAX_LAYOUTS:
            return None
        lists, ranges = search_axes(self.spec)
        anything = {k: v[0] for k, v in lists.items()} | {k: r.snap(r.low) for k, r in ranges.items()}
        one, several = None, False
        for values in itertools.product(*axes.values()):
            layout = dict(zip(axes, values))
            if excluded(self.spec, {**anything, **layout}):
                continue
            try:
                config = make_run(self.spec, 0, {**anything, **layout}, 0, self.out).config
                world = (config.nproc_per_node or 1) * config.nnodes
                resolve_strategy(config.strategy, world)
            except ConfigError:
                continue  # a layout no configuration can run: the sampler's proposals of it are refused
            if world == 1:
                one = one or layout
            else:
                several = True
        return one if several else None

    # -- what the plan predicts -----------------------------------------------------------------------------------

    def guess(self, grid: dict[str, Any], run: Run) -> Guess:
        """The configuration's guess, its peak planned the first time it is asked for."""
        key = config_key(run)
        guess = self.guesses.setdefault(key, Guess(dict(grid), run.config.batch_size))
        if not guess.planned:
            guess.planned = True
            try:
                planned = self.planner.plan(0, grid)
            except Exception as e:  # a prediction never stops a search: this configuration is unknown
                self.progress(f"guide: peak memory not predicted for {run.label}: {type(e).__name__}: {e}"[:300])
                return guess
            guess.memory = planned.prediction.to_dict()
            guess.unfit = unfit_reason(planned, self.spec.memory_limit_mb)
        return guess

    def refit(self, measured: Mapping[int, tuple[str, dict[str, Any]]], records: list[RunRecord]) -> None:
        """Fit the step model again where the one-process configurations measured (``measured``: index -> (key,
        grid), every configuration measured) have new runs, and predict every layout of their options."""
        ones = {}
        for index, (_, grid) in measured.items():
            run, reason = proposal_refusal(self.spec, grid, self.out)
            if run is not None and _world(run) == 1:
                ones[index] = grid
        runs = tuple(sorted((index, sum(r.get("index") == index for r in records)) for index in ones))
        if not ones or runs == self.fitted_on:
            return
        self.fitted_on = runs
        done = {key for key, _ in measured.values()}
        layouts: dict[str, tuple[dict[str, Any], Run]] = {}
        for grid in ones.values():
            for other, run in self._layouts(grid):
                layouts.setdefault(config_key(run), (other, run))
        asked = {key: found for key, found in layouts.items() if key not in done}
        if not asked:
            return
        grids: dict[int, dict[str, Any]] = {**ones}
        grids.update({_UNMEASURED + n: grid for n, (grid, _) in enumerate(asked.values())})
        try:
            model = self.step_model(grids, records)
        except Exception as e:  # not guided by step time this time: the search goes on
            self.progress(f"guide: step time not predicted: {type(e).__name__}: {e}".splitlines()[0][:300])
            return
        self.link = model.get("link")
        predicted = model.get("configurations") or {}
        for n, (key, (grid, run)) in enumerate(asked.items()):
            guess = self.guesses.setdefault(key, Guess(dict(grid), run.config.batch_size))
            found = predicted.get(str(_UNMEASURED + n))
            guess.step = found

    def _layouts(self, grid: dict[str, Any]) -> list[tuple[dict[str, Any], Run]]:
        """``grid``'s options in every other layout of several processes the grid holds (each combination of its
        list-valued layout axes; a range keeps ``grid``'s value), but those refused or excluded."""
        axes = self.layout_axes
        if math.prod(len(v) for v in axes.values()) > MAX_LAYOUTS:
            return []
        found = []
        for values in itertools.product(*axes.values()):
            other = {**grid, **dict(zip(axes, values))}
            run, reason = proposal_refusal(self.spec, other, self.out)
            if other != grid and run is not None and reason is None and _world(run) > 1:
                found.append((other, run))
        return found

    # -- what to propose ------------------------------------------------------------------------------------------

    def next(self, measured: set[str], leader: float | None) -> tuple[dict[str, Any], str] | None:
        """The grid values to propose next and who chose them: a configuration predicted to match or beat the
        ``leader`` (mean samples/s; None: nothing measured yet), the fastest predicted first, whole; else the
        one-process layout, the sampler choosing the rest; None: the sampler's turn."""
        floor = None if leader is None else leader * (1 - self.margin)
        ranked = sorted(self.guesses.items(), key=lambda item: -(item[1].rate or 0.0))
        for key, guess in ranked:
            if guess.rate is None or key in measured or key in self.proposed:
                continue
            if floor is not None and (guess.high or guess.rate) < floor:
                break  # the rest are predicted slower still
            run, reason = proposal_refusal(self.spec, guess.grid, self.out)
            if run is None or reason is not None or (self.guess(guess.grid, run).unfit and not self.spec.run_unfit):
                continue
            self.proposed.add(key)
            return guess.grid, f"guide: predicted {guess.rate:.4g} samples/s"
        if self.scout is not None and self.scout_misses < SCOUT_MISSES:
            return dict(self.scout), "guide: one process first (the sampler chose the other options)"
        return None

    def scouted(self, new: bool) -> None:
        """Whether a one-process proposal brought a new configuration (after SCOUT_MISSES that did not in a row,
        the guide stops proposing the one-process layout)."""
        self.scout_misses = 0 if new else self.scout_misses + 1

    # -- what it says ---------------------------------------------------------------------------------------------

    def state(self, configs: Mapping[str, Any], means: Mapping[int, list[float]]) -> dict[str, Any]:
        """What ``search.json`` keeps of the guide: every configuration measured (``configs``: the search's, by key)
        with what was predicted of it before it ran beside what it measured, and the configurations predicted and
        not run, each with why."""
        measured = {c.index: statistics.fmean(v) for c in configs.values() if (v := means.get(c.index))}
        leader = max(measured, key=measured.__getitem__) if measured else None
        touched = []
        for key, c in sorted(configs.items(), key=lambda item: item[1].index):
            guess = self.guesses.get(key)
            step = (c.predicted or {}).get("step_s")
            batch = guess.batch if guess is not None else None
            touched.append(
                {
                    "index": c.index,
                    "grid": c.grid,
                    "proposed_by": c.proposed_by,
                    "predicted_samples_per_s": batch / step if batch and step else None,
                    "basis": (c.predicted or {}).get("basis"),
                    "predicted_peak_bytes": guess.memory["peak_bytes"] if guess is not None and guess.memory else None,
                    "measured_samples_per_s": measured.get(c.index),
                }
            )
        name = None if leader is None else f"cfg{leader:03d}"
        rate = None if leader is None else measured[leader]
        return {
            "memory_limit_mb": self.spec.memory_limit_mb,
            "one_process_layout": self.scout,
            "measured": touched,
            "not_run": self.not_run(set(configs), rate, name),
        }

    def not_run(self, measured: set[str], leader: float | None, leader_name: str | None) -> dict[str, Any]:
        """The configurations predicted and not measured, each with its figures and why it was not run (at most
        _NOT_RUN_ROWS listed, the rest counted)."""
        rows: list[tuple[float, dict[str, Any]]] = []
        floor = None if leader is None else leader * (1 - self.margin)
        for key, guess in self.guesses.items():
            if key in measured:
                continue
            if guess.unfit:
                why = guess.unfit
            elif guess.rate is None:
                if not guess.step:
                    continue  # planned only as a proposal that was refused otherwise: nothing predicted to show
                why = f"step time not predicted: {guess.step.get('basis')}"
            elif floor is not None and (guess.high or guess.rate) < floor:
                why = f"predicted slower than the leader {leader_name} ({leader:.4g} samples/s) by more than the margin"
            else:
                fast = guess.high or guess.rate
                why = f"the faster end of its prediction, {fast:.4g} samples/s, reaches the leader's; not run in budget"
            peak = guess.memory["peak_bytes"] if guess.memory else None
            row = {"grid": guess.grid, "predicted_samples_per_s": guess.rate, "predicted_peak_bytes": peak, "why": why}
            rows.append((guess.rate or 0.0, row))
        rows.sort(key=lambda found: -found[0])
        return {"configurations": [row for _, row in rows[:_NOT_RUN_ROWS]], "more": max(0, len(rows) - _NOT_RUN_ROWS)}
