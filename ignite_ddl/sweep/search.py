"""Search, not grid: the best configuration of a space too large to run in full, with the verdict's own guarantees.

A spec with ``search: {sampler: tpe | gp | random, budget_runs: N, budget_s: S, seed: K}`` searches its ``grid``
(whose axes may be ranges, :mod:`ignite_ddl.sweep.space`) with Optuna instead of running every configuration:

- **a trial is a configuration**, measured by the suite's own runner: ``min_repeats`` runs, each a fresh launch
  recorded in ``results.jsonl`` with its contention (contended runs re-run as ``rerun_contended`` says, a busy
  machine stops the search as it stops a sweep). The trial's value is the mean samples/s of its runs, as the report
  computes it. Optuna's GP sampler is told the objective is noisy (``deterministic_objective=False``: it fits the
  runs' noise with its kernel; Optuna takes no per-trial variance, so the spread of each trial is kept as its
  ``spread`` attribute and in the records, not given to TPE);
- **a configuration is measured once**: a proposal of one already measured is answered with its value and starts
  no run; a proposal the spec's ``exclude`` or the option checks refuse is answered as failed (the sampler avoids
  it) and starts no run; after :data:`MAX_IDLE` proposals in a row that bring nothing new, or once every
  configuration of a finite space was measured, the search has converged;
- **the same guarantees at the end**: when the budget left is the reserve for it (a quarter), the sampler's next
  proposal is measured too, then the contenders (the leader and every configuration the verdict cannot yet tell
  from it) get adaptive rounds (:func:`ignite_ddl.sweep.adaptive.decide`, over every configuration measured, so the
  correction for multiple comparisons counts all of them, not just the finalists) until the leader is separated,
  the contenders are equivalent, or the budget is spent; when such rounds are out of reach (even ``max_repeats``
  runs each would not settle them), the rest of the budget measures new configurations one at a time, the
  contenders weighed again after each;
- **the budget is never exceeded**: no run starts that would take the search past ``budget_runs`` runs (re-runs and
  failures count), and none whose typical wall time (the median run so far) would end it past ``budget_s``; the
  search's first run starts alone, since no run time is known before it;
- **resumable**: the study lives in the output folder (``search.journal``, Optuna's append-only
  ``JournalFileBackend``), next to ``results.jsonl``. ``--resume`` after a SIGKILL finishes the trial that was
  being measured (its recorded runs are kept, the missing ones run) before it asks for another: no measurement is
  lost, no proposal repeated. A journal line Optuna cannot read is set aside first (:mod:`ignite_ddl.sweep.journal`),
  and the configurations measured are read from ``results.jsonl`` as well as from the study.

- **guided by the plan** where the spec predicts (``predict: true``) and runs locally, unless ``guided: false``:
  nothing predicted not to fit runs, one-process configurations first, then whatever the step model predicts to
  match the leader, the fastest first (:mod:`ignite_ddl.sweep.guide`).

``search.json`` in the folder says what the report needs: the sampler, the space's size, how many configurations
were measured and how the search ended (:mod:`ignite_ddl.report.search`).
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ignite_ddl.core.errors import ConfigError
from ignite_ddl.core.jsonfiles import read_json, write_json
from ignite_ddl.core.results import rejected_path
from ignite_ddl.core.sweep_records import PredictedStep, RunRecord
from ignite_ddl.launcher.signals import interruptible
from ignite_ddl.report.analysis import analyze
from ignite_ddl.sweep.adaptive import AdaptiveRule, decide
from ignite_ddl.sweep.guide import Guide, config_key, proposal_refusal
from ignite_ddl.sweep.journal import repair_journal
from ignite_ddl.sweep.plan import Run, make_run
from ignite_ddl.sweep.session import Executor, Session, where_text
from ignite_ddl.sweep.space import Space
from ignite_ddl.sweep.spec import (
    MAX_CONFIGURATIONS,
    SearchOptions,
    Spec,
    configurations,
    search_axes,
    space_size,
)

__all__ = ["FINAL_SHARE", "MAX_IDLE", "STUDY_FILE", "check_search", "run_search", "search_checks"]

STUDY_FILE = "search.journal"
SEARCH_FILE = "search.json"
MAX_IDLE = 30  # proposals in a row that bring no new configuration: the sampler has converged
FINAL_SHARE = 0.25  # of the budget, kept for the sampler's next proposal and the contenders' adaptive rounds
# Axes that decide what a run would refuse before it starts (``plan.check_configurations``): every value of them
# is checked before a search's first run, whatever the sampler proposes later.
CHECKED_AXES = ("model", "dataset", "data_dir", "download", "tracker", "tracking_uri")


def check_search() -> None:
    """Refuse a search before anything starts where Optuna is not installed."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise ConfigError("a search (search: in the spec) needs Optuna: pip install 'ignite-ddl[search]'") from None


def search_checks(spec: Spec) -> list[dict[str, Any]]:
    """The configurations to check before a search starts: every combination of its values of the axes that decide
    what a run refuses (model, dataset, tracker), the other options at the base's values."""
    lists, _ = search_axes(spec)
    axes = {k: v for k, v in lists.items() if k in CHECKED_AXES}
    count = math.prod(len(values) for values in axes.values())
    if count > MAX_CONFIGURATIONS:  # each is checked before the first run: listed, so bounded as a grid is
        raise ConfigError(
            f"search: {' x '.join(axes)} make {count:.3g} combinations to check before the first run: at most "
            f"{MAX_CONFIGURATIONS}"
        )
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


def _sampler(options: SearchOptions, trials: int) -> Any:
    """Optuna's sampler, seeded; its random start scaled to the trials the budget allows (a fifth of them, 2 to
    10), so that a small budget still leaves most trials to the model."""
    import optuna

    startup = max(2, min(10, trials // 5))
    if options.sampler == "gp":
        return optuna.samplers.GPSampler(seed=options.seed, n_startup_trials=startup, deterministic_objective=False)
    if options.sampler == "random":
        return optuna.samplers.RandomSampler(seed=options.seed)
    return optuna.samplers.TPESampler(seed=options.seed, n_startup_trials=startup, multivariate=True)


def _open_study(
    out: Path, spec: Spec, options: SearchOptions, trials: int, resume: bool, progress: Callable[[str], None]
) -> Any:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = out / STUDY_FILE
    if path.exists() and not resume:
        raise ConfigError(f"{path} exists: pass --resume to continue that search, or choose another --output-dir")
    rejected = repair_journal(path, spec.name)  # what Optuna's reader would stop at, set aside
    if rejected:
        progress(
            f"warning: {len(rejected)} unreadable line(s) of {path} moved to {rejected_path(path)} (first: line "
            f"{rejected[0].line}, {rejected[0].reason}); the search goes on without them (every run is kept in "
            "results.jsonl)"
        )
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the search says what it does in its own lines
    storage = JournalStorage(JournalFileBackend(str(path)))
    return optuna.create_study(
        study_name=spec.name,
        storage=storage,
        sampler=_sampler(options, trials),
        direction="maximize",
        load_if_exists=True,
    )


def _valid_size(spec: Spec, out: Path) -> int | None:
    """How many configurations the space holds that the spec does not exclude and the option checks accept (each
    checked where the grid is lists small enough to enumerate; else the space's size, None for a continuous one)."""
    lists, ranges = search_axes(spec)
    size = space_size(spec)
    if ranges or size is None or size > MAX_CONFIGURATIONS:
        return size
    return sum(proposal_refusal(spec, grid, out)[1] is None for grid in configurations(spec))


@dataclass
class Config:
    """A configuration the search has measured (or is measuring): its index in the report, its grid values, what
    the plan predicted of its step before it ran (guided), and who proposed it."""

    index: int
    grid: dict[str, Any]
    predicted: PredictedStep | None = None
    proposed_by: str = "sampler"


class Search:
    """One session of a search on its folder (see the module docstring)."""

    def __init__(
        self,
        spec: Spec,
        out: Path,
        executor: Executor,
        resume: bool,
        progress: Callable[[str], None],
        guide: Guide | None = None,
    ):
        options = spec.search_options()
        assert options is not None  # only a spec with search: comes here
        self.spec, self.out, self.options, self.progress = spec, out, options, progress
        self.repeats = spec.min_repeats
        self.session = Session(spec, out, executor, resume, progress)
        budget = options.budget_runs
        trials = budget // self.repeats if budget else 30
        self.study = _open_study(out, spec, options, trials, resume, progress)
        self.space = Space(list(spec.grid), *search_axes(spec))
        self.size = _valid_size(spec, out)
        self.guide = guide
        if guide is None and options.guided is not False and spec.predict and spec.executor == "local":
            self.guide = Guide(spec, out, progress)
        self.configs: dict[str, Config] = {}
        earlier = read_json(out / SEARCH_FILE) if resume and (out / SEARCH_FILE).is_file() else {}
        self.trajectory: list[dict[str, Any]] = list(earlier.get("trajectory") or [])  # the earlier sessions' too
        self.refused = self.repeated = 0
        self.asked_final = False  # the sampler's next proposal was measured (by an earlier session too)
        self.extended = 0  # configurations measured after final rounds out of reach (see extend)
        for record in self.session.records():  # what was measured, whatever the study file lost (journal.py)
            key = record["key"].rsplit("-r", 1)[0]  # a run's key less its repeat: guide.config_key
            self.configs.setdefault(key, Config(record["index"], dict(record["grid"])))
        for trial in self.study.get_trials(deepcopy=False):
            attrs = trial.user_attrs
            if {"config_key", "index", "grid"} <= set(attrs):
                found = Config(int(attrs["index"]), dict(attrs["grid"]), attrs.get("predicted"))
                found.proposed_by = str(attrs.get("proposed_by", "sampler"))
                self.configs.setdefault(attrs["config_key"], found)
            self.refused += "refused" in attrs
            self.repeated += "repeat_of" in attrs
            self.asked_final |= attrs.get("phase") == "final"
            self.extended += attrs.get("phase") == "extended" and "config_key" in attrs
        self.state: dict[str, Any] = {}
        self._analysis: tuple[int, Any] | None = None
        self.in_flight = 0  # runs submitted and not yet recorded (a parallel search on SLURM)

    # -- what has been measured -----------------------------------------------------------------------------------

    def runs_used(self) -> int:
        """Runs of the search recorded so far (a run interrupted by a kill is run again, and counted once)."""
        return sum(1 for r in self.session.records() if r["status"] != "interrupted")

    def analysis(self) -> Any:
        """The report's reading of the records so far (read again only when a record was added)."""
        records = self.session.records()
        if self._analysis is None or self._analysis[0] != len(records):
            self._analysis = (len(records), analyze(records, dict(self.session.meta)))
        return self._analysis[1]

    def means(self) -> dict[int, list[float]]:
        """Each configuration's usable throughputs (samples/s per run), as the report reads them."""
        return {c.index: c.samples_per_s for c in self.analysis().configs}

    def run_s(self) -> float | None:
        times = sorted(r["elapsed_s"] for r in self.session.records() if r.get("elapsed_s"))
        return times[len(times) // 2] if times else None

    def fits(self, runs: int, keep: float = 0.0) -> bool:
        """Whether ``runs`` more runs stay within the budget, ``keep`` of it left over."""
        budget, seconds = self.options.budget_runs, self.options.budget_s
        runs += self.in_flight  # submitted, not yet recorded
        if budget is not None and self.runs_used() + runs > budget * (1 - keep):
            return False
        run_s = self.run_s()
        if seconds is not None and run_s is not None and self.session.elapsed_s() + runs * run_s > seconds * (1 - keep):
            return False
        return True

    def room(self, wanted: int) -> int:
        """How many of ``wanted`` runs the budget leaves room for."""
        return next((n for n in range(wanted, 0, -1) if self.fits(n)), 0)

    # -- one trial ------------------------------------------------------------------------------------------------

    def measure(self, config: Config, what: str) -> None:
        """Every repeat of ``config`` not yet recorded (min_repeats of them) that the budget has room for, then its
        contended runs again. Before any run of the search has ended no run time is known: one run starts alone,
        and its time judges whether the others would end within ``budget_s``."""
        runs = [make_run(self.spec, config.index, config.grid, r, self.out) for r in range(self.repeats)]
        repeats = f"{self.repeats}, then adaptive"
        done = self.session.done()
        todo = [run for run in runs if run.key not in done]
        if todo and self.run_s() is None and self.options.budget_s is not None and self.room(1):
            self.session.execute(todo[:1], what, repeats)
            todo = todo[1:]
        todo = todo[: self.room(len(todo))]
        if todo:
            self.session.execute(todo, what, repeats)
        self.session.rerun_contended(repeats, self.room)

    def tell(self, trial: Any, config: Config) -> None:
        """Tell the sampler ``config``'s mean throughput (a configuration with no usable run: failed)."""
        from optuna.trial import TrialState

        values = self.means().get(config.index) or []
        if values:
            trial.set_user_attr("spread", statistics.stdev(values) if len(values) > 1 else 0.0)
            self.study.tell(trial, statistics.fmean(values))
        else:
            self.study.tell(trial, state=TrialState.FAIL)
        self.note_best()

    def note_best(self) -> None:
        """The trajectory: after these runs, the best mean so far and its configuration."""
        means = {i: statistics.fmean(v) for i, v in self.means().items() if v}
        if means:
            best = max(means, key=means.__getitem__)
            self.trajectory.append({"runs": self.runs_used(), "best": means[best], "config": best})

    def ask(self, phase: str = "search") -> tuple[Any, Config] | None:
        """Ask the sampler for a configuration (guided: what the guide proposes first, :meth:`Guide.next`): (the
        trial, the configuration) when it is new, None when it brought nothing new (one refused, predicted not to
        fit, or one measured or being measured: answered at once, no run started)."""
        from optuna.trial import TrialState

        trial = self._trial()
        proposed_by = str(trial.user_attrs.get("proposed_by", "sampler"))
        scouting = self.guide is not None and proposed_by.startswith("guide: one process")
        grid = self.space.suggest(trial)
        run, reason = proposal_refusal(self.spec, grid, self.out)
        guess = self.guide.guess(grid, run) if self.guide is not None and run is not None and not reason else None
        if guess is not None and guess.unfit and not self.spec.run_unfit:
            reason = guess.unfit  # planned, never run: the report lists it with its figure and the limit
        if reason is not None or run is None:
            trial.set_user_attr("refused", reason)
            self.study.tell(trial, state=TrialState.FAIL)
            self.refused += 1
            if scouting and self.guide is not None:
                self.guide.scouted(False)
            return None
        key = config_key(run)
        if scouting and self.guide is not None:
            self.guide.scouted(key not in self.configs)
        if key in self.configs:  # measured: answered with what was measured, no run started
            seen = self.configs[key]
            trial.set_user_attr("repeat_of", seen.index)
            values = self.means().get(seen.index) or []
            if values:
                self.study.tell(trial, statistics.fmean(values))
            else:  # still being measured, or no usable run: failed, without running it again
                self.study.tell(trial, state=TrialState.FAIL)
            self.repeated += 1
            return None
        index = max((c.index for c in self.configs.values()), default=-1) + 1  # past every index recorded
        config = Config(index, grid, guess.step if guess is not None else None, proposed_by)
        # Written before the first run: a search killed from here on finishes this trial when resumed.
        trial.set_user_attr("grid", grid)
        trial.set_user_attr("index", config.index)
        trial.set_user_attr("config_key", key)
        trial.set_user_attr("phase", phase)  # search, final (the next proposal) or extended (see extend)
        if config.predicted is not None:
            trial.set_user_attr("predicted", config.predicted)
        self.configs[key] = config
        if guess is not None and guess.memory is not None:  # kept in its runs' records, beside what they measure
            self.session.predictions[config.index] = guess.memory
        count = f"{len(self.configs)}" + (f" of {self.size}" if self.size else "")
        by = f", {proposed_by}" if self.guide is not None else ""
        self.progress(f"search: trial {trial.number}: cfg{config.index:03d} {run.label} (configuration {count}{by})")
        return trial, config

    def _trial(self) -> Any:
        """The study's next trial: the guide's proposal enqueued first where it has one (a proposal enqueued by a
        session that was killed before asking for it is asked for first)."""
        from optuna.trial import TrialState

        if self.guide is not None and not self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            measured = set(self.configs)
            means = {i: statistics.fmean(v) for i, v in self.means().items() if v}
            leader = max(means.values()) if means else None
            found = self.guide.next(measured, leader)
            if found is not None:
                values, proposed_by = found
                self.study.enqueue_trial(self.space.params(values), user_attrs={"proposed_by": proposed_by})
        return self.study.ask()

    def propose(self, phase: str = "search") -> bool:
        """Ask for a configuration and measure it; False when the sampler brought nothing new."""
        asked = self.ask(phase)
        if asked is None:
            return False
        trial, config = asked
        self.measure(config, f" trial {trial.number}")
        self.tell(trial, config)
        self.refit()
        return True

    def refit(self) -> None:
        """Guided: the step model fitted again to the runs so far, the guide's order with it."""
        if self.guide is not None:
            measured = {c.index: (key, c.grid) for key, c in self.configs.items()}
            self.guide.refit(measured, self.session.records())

    def finish_interrupted(self) -> None:
        """Trials a killed search left running: measured to the end (their recorded runs kept) and told; a trial
        killed before its proposal was complete is told failed (it started no run), as is one whose configuration
        the study file lost (its runs, if any, are the configuration's in ``results.jsonl``)."""
        from optuna.trial import Trial, TrialState

        for frozen in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            config = self.configs.get(frozen.user_attrs.get("config_key", ""))
            if config is None:  # no run started, or what it proposed was lost with a damaged line (journal.py)
                self.study.tell(frozen.number, state=TrialState.FAIL)
                continue
            self.progress(f"search: resuming trial {frozen.number}: cfg{config.index:03d}")
            self.measure(config, f" trial {frozen.number}")
            self.tell(Trial(self.study, frozen._trial_id), config)

    # -- the search -----------------------------------------------------------------------------------------------

    def all_measured(self) -> bool:
        return self.size is not None and len(self.configs) >= self.size

    def explore(self) -> str:
        """Propose and measure until the budget reaches the final reserve; why it stopped."""
        idle = 0
        while True:
            if self.all_measured():
                return "every configuration measured"
            if idle >= MAX_IDLE:
                return f"converged: {MAX_IDLE} proposals in a row brought no new configuration"
            if not self.fits(self.repeats, keep=FINAL_SHARE):
                return "budget: the rest is kept for the final repeats"
            idle = 0 if self.propose() else idle + 1
            self.save()

    def explore_in_parallel(self, executor: Any) -> str:
        """As :meth:`explore`, with up to ``max_parallel`` configurations in flight (Optuna's ask and tell: the
        sampler proposes while others are measured; TPE treats the pending ones as a constant liar would)."""
        flying: dict[int, tuple[Any, Config, list[Run]]] = {}
        idle, stopped = 0, None
        while True:
            while stopped is None and len(flying) < self.options.max_parallel:
                if self.all_measured():
                    stopped = "every configuration measured"
                elif idle >= MAX_IDLE:
                    stopped = f"converged: {MAX_IDLE} proposals in a row brought no new configuration"
                elif not self.fits(self.repeats, keep=FINAL_SHARE):
                    stopped = "budget: the rest is kept for the final repeats"
                else:
                    asked = self.ask()
                    if asked is None:
                        idle += 1
                        continue
                    idle, (trial, config) = 0, asked
                    done = self.session.done()
                    runs = [make_run(self.spec, config.index, config.grid, r, self.out) for r in range(self.repeats)]
                    runs = [run for run in runs if run.key not in done]
                    executor.submit(runs, self.progress)
                    flying[trial.number] = (trial, config, runs)
                    self.in_flight += len(runs)
            if not flying:
                return stopped or "nothing left to propose"
            time.sleep(self.spec.slurm_options().poll_s)
            for number, (trial, config, runs) in list(flying.items()):
                for record, run in executor.ended(runs):
                    runs.remove(run)
                    self.in_flight -= 1
                    where = where_text(run, self.repeats - len(runs), self.repeats, f" trial {number}", "")
                    self.session.record(record, run, where)
                if not runs:
                    del flying[number]
                    self.measure(config, f" trial {number}")  # contended runs again, as a serial search would
                    self.tell(trial, config)
                    self.save()

    def measure_new(self, phase: str) -> bool:
        """One new configuration the sampler proposes, measured, if the budget has room for it; whether one was
        (after MAX_IDLE proposals that bring nothing new, none)."""
        for _ in range(MAX_IDLE):
            if not self.fits(self.repeats) or self.all_measured():
                return False
            if self.propose(phase):
                return True
        return False

    def next_best(self) -> None:
        """The sampler's next proposal of a new configuration, measured, if the budget has room (once: a resumed
        search that measured it goes on to the final rounds)."""
        if not self.asked_final:
            self.measure_new("final")

    def extend(self) -> bool:
        """One more new configuration measured, when the final rounds are out of reach and the budget has room
        for it; whether one was. The reserve was kept for rounds that cannot settle the contenders: a new
        configuration may yet stand out, and the contenders are weighed again over everything measured."""
        if not self.measure_new("extended"):
            return False
        self.extended += 1
        return True

    def confirm(self) -> dict[str, str]:
        """Adaptive rounds for the contenders until decided or out of budget; the outcome per workload."""
        rule = AdaptiveRule(self.spec.min_repeats, self.spec.max_repeats, self.spec.equivalence_margin)
        grids = {c.index: c.grid for c in self.configs.values()}
        while True:
            configs = [c for c in self.analysis().configs if any(r.status == "completed" for r in c.runs)]
            if not configs:
                return {}
            samples = {c.index: c.samples_per_s for c in configs}
            workloads = {c.index: c.workload for c in configs}
            counts = {c.index: len({r.repeat for r in c.runs}) for c in configs}
            leader = max(samples, key=lambda i: statistics.fmean(samples[i]) if samples[i] else -math.inf)
            decision = decide(samples, workloads, rule, counts[leader])
            self.session.session["adaptive"] = {"rounds": counts[leader], "outcome": dict(decision.outcome)}
            if decision.done:
                return dict(decision.outcome)
            done = self.session.done()

            # Where the budget has no room for the whole round, the leader gets it first, then the contenders with
            # the fewest runs (whose intervals one more run narrows most), the nearest first among equals: the
            # verdict reads whatever runs there are, so a part round is sound.
            mean = {i: statistics.fmean(v) if v else 0.0 for i, v in samples.items()}
            ranked = sorted((i != leader, counts[i], -mean[i], i) for i in decision.more)
            batch = [make_run(self.spec, i, grids[i], counts[i], self.out) for *_, i in ranked]
            batch = [run for run in batch if run.key not in done]
            batch = batch[: self.room(len(batch))]
            if counts[leader] % 2:  # the interleaving direction alternates from round to round
                batch.reverse()
            if len(batch) < 2:
                outcome = {name: ("budget" if s == "undecided" else s) for name, s in decision.outcome.items()}
                self.session.session["adaptive"] = {"rounds": counts[leader], "outcome": outcome}
                return outcome
            self.progress(f"search: final round {counts[leader] + 1} for {len(batch)} contender(s)")
            self.session.execute(batch, " final", f"{self.repeats}, then adaptive")
            self.session.rerun_contended(f"{self.repeats}, then adaptive", self.room)
            self.note_best()
            self.save()

    def save(self, **state: Any) -> None:
        self.state.update(state)
        write_json(
            self.out / SEARCH_FILE,
            {
                "sampler": self.options.sampler,
                "sampler_class": type(self.study.sampler).__name__,  # what Optuna actually runs
                "seed": self.options.seed,
                "budget_runs": self.options.budget_runs,
                "budget_s": self.options.budget_s,
                "space_size": self.size,
                "measured": len(self.configs),
                "runs": self.runs_used(),
                "refused": self.refused,
                "repeated": self.repeated,
                "trajectory": self.trajectory,
                "extended": self.extended,
                "guided": self.guide is not None,
                **({"guide": self.guide.state(self.configs, self.means())} if self.guide is not None else {}),
                **self.state,
            },
        )
        predicted = {str(c.index): c.predicted for c in self.configs.values() if c.predicted}
        if self.guide is not None and predicted:  # the report's step-time table: predicted before each ran
            self.session.meta["step_model"] = {"link": self.guide.link, "configurations": predicted}
        self.session.save()

    def _guided_line(self) -> str:
        assert self.guide is not None
        limit = self.spec.memory_limit_mb
        fit = f"nothing predicted above memory_limit_mb {limit:g} runs" if limit is not None else "no memory limit"
        first = self.guide.scout
        order = (
            f"one process first ({', '.join(f'{k}={v}' for k, v in first.items())}), then the predicted fastest"
            if first
            else "no one-process layout in the grid to predict the others from, so no step-time order"
        )
        return f"search: guided by the plan's predictions: {fit}; {order}; then the sampler"

    def run(self) -> list[RunRecord]:
        with interruptible():  # SIGTERM too stops the run in progress and records it, instead of orphaning it
            if self.guide is not None:
                self.progress(self._guided_line())
                for config in self.configs.values():  # resumed: each measured one's peak, for its next runs
                    guess = self.guide.guess(config.grid, make_run(self.spec, config.index, config.grid, 0, self.out))
                    if guess.memory is not None:
                        self.session.predictions[config.index] = guess.memory
            self.finish_interrupted()
            self.refit()
            self.save(phase="search")
            executor = self.session.executor
            parallel = self.options.max_parallel > 1 and hasattr(executor, "submit")
            stopped = self.explore_in_parallel(executor) if parallel else self.explore()
            measured = f"{len(self.configs)} configuration(s) measured in {self.runs_used()} runs"
            self.progress(f"search: {stopped}; {measured}")
            self.save(phase="final", search_ended=stopped)
            self.next_best()
            outcome = self.confirm()
            # Final rounds that cannot settle the contenders (out of reach: even max_repeats runs each would not)
            # leave the reserve unspent; it goes to new configurations, which may hold one that stands out, and
            # the contenders are weighed again over everything measured.
            while "out_of_reach" in outcome.values() and self.extend():
                outcome = self.confirm()
            said = ", ".join(f"{name}: {state}" for name, state in outcome.items())
            self.progress(f"search: done after {self.runs_used()} runs ({said or 'nothing measured'})")
            self.save(phase="done", outcome=outcome)
        return self.session.records()


def run_search(
    spec: Spec,
    out: Path,
    executor: Executor,
    resume: bool,
    progress: Callable[[str], None],
    guide: Guide | None = None,
) -> list[RunRecord]:
    """Search ``spec``'s grid in the sweep folder ``out`` (see the module docstring); every record of the search.
    ``guide``: the plan's predictions that steer it (default: the spec's, :mod:`ignite_ddl.sweep.guide`, where it
    is guided)."""
    return Search(spec, out, executor, resume, progress, guide).run()
