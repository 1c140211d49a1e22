"""The ``ignite-ddl`` command. Options of ``train`` are generated from :class:`~ignite_ddl.core.config.TrainConfig`,
those of each lab from its ``Options`` dataclass (:mod:`ignite_ddl.labs`).

Exit status: 0 success, 1 a rank failed (or the ranks could not be brought together), 2 a setup refused before
anything started, 128 + signal number when interrupted (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, cast

from ignite_ddl.core.commands import PROG, VERSION, run_command
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.core.errors import ConfigError, MachineBusy
from ignite_ddl.core.jsonfiles import write_json
from ignite_ddl.core.options import add_to_parser, option_flag, option_specs
from ignite_ddl.core.text import fit_line, output_width
from ignite_ddl.labs import Lab, claims_hold, lab_index, load_lab
from ignite_ddl.predict.projection.model import LINKS, ProjectOptions
from ignite_ddl.sweep.spec import SlurmOptions, Spec

__all__ = ["LINK_PRESETS", "build_parser", "main"]

LINK_PRESETS = tuple(LINKS)  # the projection's link presets (ignite_ddl.predict.projection.model imports no torch)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, no usage block: the user sees what is wrong and `--help` tells the rest.
        self.exit(2, f"{PROG}: error: {message}\n")

    def _parse_optional(self, arg_string: str) -> Any:
        # argparse takes only -1 and -1.5 for negative numbers: "--lr -inf" or "--lr -1e-3" would end in "expected
        # one argument". A number that is not one of this parser's flags is a value, so that the option's own check
        # (its range, finiteness) refuses it in one line.
        if arg_string.startswith("-") and arg_string not in self._option_string_actions and _is_number(arg_string):
            return None
        return super()._parse_optional(arg_string)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _add_project(commands: Any) -> None:
    """``ignite-ddl project``: its options only; the projection package is imported by the handler."""
    project = commands.add_parser(
        "project",
        help="project step time, throughput and efficiency to 1..N workers (ring all-reduce vs parameter server)",
        description="Project a data-parallel step to 1, 2, 4, ... workers with the alpha-beta model "
        "(ignite_ddl.predict.projection.model): a ring all-reduce with DDP's bucketed overlap, and one parameter "
        "server.",
    )
    add_to_parser(project, ProjectOptions)  # each flag, its type and range, declared once
    project.set_defaults(handler=_project)


def _flag_checked(options: type, args: argparse.Namespace) -> Any:
    """``options`` built from the parsed flags; a value refused by its declaration is refused in one line that
    names its flag (``--bucket-mb must be >= ...``), as the user typed it."""
    names = option_specs(options)
    try:
        return options(**{name: getattr(args, name) for name in names})
    except ConfigError as e:
        text = str(e)
        for name in sorted(names, key=len, reverse=True):
            for lead in ("", "option ", "unknown "):
                if text.startswith(f"{lead}{name} "):
                    raise ConfigError(f"{lead}{option_flag(name)}{text[len(lead) + len(name) :]}") from None
        raise


def _project(args: argparse.Namespace) -> int:
    from ignite_ddl.predict import projection as pj

    _flag_checked(ProjectOptions, args)  # each value within its declared range (a finite number, not 1e308)
    explicit = [args.compute_ms, args.grad_mb, args.batch_size]
    if (args.run is None) == all(v is None for v in explicit):
        raise ConfigError(
            "give either --run DIR (a measured 1-process run) or --compute-ms, --grad-mb and --batch-size"
        )
    if args.run is None and any(v is None for v in explicit):
        raise ConfigError("--compute-ms, --grad-mb and --batch-size go together: give all three")
    custom = args.alpha_us is not None or args.beta_gbps is not None
    if sum([args.link is not None, custom, args.fit]) != 1:
        raise ConfigError("give one link: --link PRESET, --alpha-us with --beta-gbps, or --fit")
    if custom and (args.alpha_us is None or args.beta_gbps is None):
        raise ConfigError("--alpha-us and --beta-gbps go together: give both")
    if (args.gpus_per_node is None) != (args.inter_link is None):
        raise ConfigError("--gpus-per-node and --inter-link go together: give both (or neither, for one node)")
    if args.run is not None:
        compute = pj.compute_from_run(args.run)
        caveat = pj.run_warning(args.run)
        if caveat:
            print(f"{PROG}: warning: {caveat}", file=sys.stderr)
    else:
        compute = pj.Compute.from_total(args.compute_ms / 1e3, args.grad_mb * pj.MIB, args.batch_size)
    if args.link is not None:
        link = pj.LINKS[args.link]
    elif args.fit:
        sizes, times = pj.measure_allreduce(2, log_dir=str(Path(args.output_dir) / "logs"))
        link = pj.fit_alpha_beta(sizes, times, 2)
    else:
        link = pj.Link("given", args.alpha_us * 1e-6, args.beta_gbps * 1e9, "--alpha-us and --beta-gbps")
    inter = pj.LINKS[args.inter_link] if args.inter_link is not None else None
    result = pj.project(compute, link, args.max_workers, args.bucket_mb * pj.MIB, args.gpus_per_node, inter)
    print(pj.format_projection(result))
    paths = pj.write_projection(result, args.output_dir)
    print(f"{PROG}: projection: {', '.join(str(p) for p in paths)}")
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``ignite-ddl`` parser. Nothing here imports torch: a lab's options (its module imports torch) are added
    only when ``command`` is that lab, so ``--help`` and ``train --help`` stay fast."""
    parser = _Parser(prog=PROG, description="Run, measure and compare data-parallel training with PyTorch-Ignite.")
    parser.add_argument("--version", action="version", version=f"{PROG} {VERSION}")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    train = commands.add_parser("train", help="train one configuration (serial, spawned, torchrun or SLURM)")
    add_to_parser(train, TrainConfig)
    train.add_argument(
        "--workload-args",
        action=_WorkloadArgs,
        default={},
        metavar="KEY=VALUE",
        help="keyword arguments of --workload's function, typed as YAML would, e.g. --workload-args "
        "n_layer=2,d_model=128 (repeatable)",
    )
    train.set_defaults(handler=_train)

    sweep = commands.add_parser("sweep", help="run a grid of configurations and write a profiling report")
    _add_spec_arguments(sweep)
    sweep.add_argument("--resume", action="store_true", help="continue a sweep, skipping runs already recorded")
    sweep.add_argument("--no-report", dest="report", action="store_false", help="do not write the report at the end")
    sweep.set_defaults(handler=_sweep)

    listing = commands.add_parser("experiments", help="list the shipped experiments, each with the question it answers")
    listing.set_defaults(handler=_experiments)

    plan = commands.add_parser(
        "plan",
        help="predict each configuration's peak memory per rank (and whether it fits memory_limit_mb) before running",
        description="Predict every configuration's peak memory per rank, part by part, from a trace of its training "
        "step on fake tensors and the runtime's own memory (measured once per machine by a run of a tiny model, "
        "cached in <output_dir>/plan/runtime.json), and whether it fits the spec's memory_limit_mb. Nothing of the "
        "configurations themselves is run.",
    )
    _add_spec_arguments(plan)
    plan.add_argument(
        "--no-measure",
        dest="measure",
        action="store_false",
        help="do not run the probes that measure the runtime's own memory (peaks not yet measured are not predicted)",
    )
    plan.set_defaults(handler=_plan)

    report = commands.add_parser("report", help="write report.md/.html, plots and HParams for a sweep's results")
    report.add_argument("results_dir", help="a sweep's output directory (holding results.jsonl)")
    report.add_argument(
        "--include-contended",
        action="store_true",
        help="let contended runs count in the verdict (they are flagged either way)",
    )
    report.set_defaults(handler=_report)

    _add_project(commands)

    for name, entry in lab_index().items():
        sub = commands.add_parser(name, help=entry.help, description=f"{entry.help}. Claim: {entry.claim}.")
        if name == command:
            lab = load_lab(name)
            add_to_parser(sub, lab.Options)
            sub.add_argument("--json", metavar="PATH", help="also write the result as JSON to PATH")
            sub.set_defaults(handler=_lab(lab))
    return parser


def _lab(lab: Lab) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        result = lab.run(**{name: getattr(args, name) for name in option_specs(lab.Options)})
        print(lab.format_result(result))
        if args.json:
            write_json(args.json, result)
        if not claims_hold(result):
            print(f"{PROG}: {lab.NAME}: a claim did not hold (see FAILED above)", file=sys.stderr)
            return 1
        return 0

    return handler


def _experiments(args: argparse.Namespace) -> int:
    from ignite_ddl.sweep.experiments import experiments, experiments_folder

    shipped = experiments()
    if not shipped:
        raise ConfigError(f"no shipped experiments found (looked in {experiments_folder()})")
    width = max(map(len, shipped))
    for name, experiment in shipped.items():
        print(f"{name:<{width}}  {experiment.question}")
    print(f"run one: {PROG} sweep NAME (specs and READMEs in {experiments_folder()})")
    return 0


def _train(args: argparse.Namespace) -> int:
    from ignite_ddl.trainer.run import train_command  # imported here so `--help` stays fast

    return train_command(TrainConfig(**{name: getattr(args, name) for name in option_specs(TrainConfig)}))


def _sweep(args: argparse.Namespace) -> int:
    from ignite_ddl.measure.contention import ForeignLoad

    load = ForeignLoad().start()  # whether the machine is busy, counted while the imports below run
    parsed = _spec_of(args)
    if parsed.executor == "local" and parsed.start == "preloaded":
        from ignite_ddl.sweep.local import start_preloading

        start_preloading()  # the fork server imports torch for the runs while this process imports it below
    from ignite_ddl.core.results import read_results
    from ignite_ddl.report import write_report
    from ignite_ddl.sweep.plan import sweep_dir
    from ignite_ddl.sweep.records import launched
    from ignite_ddl.sweep.runner import sweep

    # The sweep's folder stays locked until the report's last file is written: a run started on it meanwhile
    # (train --output-dir <sweep folder>) would mix its files with the report's.
    with contextlib.ExitStack() as held:
        try:
            records = sweep(parsed, resume=args.resume, load_since=load, hold=held, progress=_say)
            records = [r for r in records if r["status"] != "interrupted"]  # re-run since
        except MachineBusy:
            # The runs recorded before the stop are kept and reported: the report leads with why the sweep stopped.
            if args.report and read_results(sweep_dir(parsed) / "results.jsonl"):
                _say(f"{PROG}: report: {write_report(sweep_dir(parsed))}")
            raise
        # A configuration refused before the first run was said then, and is in the report: not a failed run.
        runs = [r for r in records if launched(r)]
        failed = [r for r in runs if r["status"] != "completed"]
        refused = len(records) - len(runs)
        also = f"; {refused} configuration(s) refused, not run (see the report)" if refused else ""
        _say(f"{PROG}: sweep done: {len(runs) - len(failed)} of {len(runs)} runs completed{also}")
        if args.report and not runs:  # every configuration was predicted not to fit: nothing ran to report
            _say(f"{PROG}: no report: no run was launched (the plan is in {sweep_dir(parsed) / 'plan'})")
        elif args.report:
            _say(f"{PROG}: report: {write_report(sweep_dir(parsed))}")
            _print_verdicts(sweep_dir(parsed))
    return 1 if failed else 0


def _add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """A spec (file or shipped experiment), grid axes and base options on the command line, and a flag for every
    spec key: the arguments of ``sweep`` and ``plan``."""
    parser.add_argument(
        "spec",
        nargs="?",
        help="a YAML spec file, or the name of a shipped experiment (ignite-ddl experiments lists them); "
        "or give the grid with --grid",
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="OPTION=V1,V2",
        help="a grid axis, e.g. --grid nproc_per_node=1,2 (repeatable)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="OPTION=VALUE",
        help="a train option for every configuration, e.g. --set epochs=1 (repeatable)",
    )
    # Every spec key (and the slurm executor's options) has its flag; given, it overrides the spec file's value.
    add_to_parser(parser, Spec, overrides=True)
    add_to_parser(parser, SlurmOptions, overrides=True)


def _spec_of(args: argparse.Namespace) -> Spec:
    """The spec ``sweep`` or ``plan`` was given: its file, then the command line's grid axes, options and keys."""
    from ignite_ddl.sweep.experiments import spec_path
    from ignite_ddl.sweep.spec import load_spec, parse_spec

    if not args.spec and not args.grid:
        raise ConfigError(
            f"{args.command} needs a spec file (ignite-ddl {args.command} SPEC.yaml) or a grid axis "
            "(--grid OPTION=V1,V2)"
        )
    spec: dict[str, Any] = load_spec(spec_path(args.spec)).to_dict() if args.spec else {"name": "sweep", "grid": {}}
    spec["base"] = {**spec.get("base", {}), **dict(_pair(item, many=False) for item in args.set)}
    spec["grid"] = {**spec["grid"], **dict(_pair(item, many=True) for item in args.grid)}
    for key, declared in option_specs(Spec).items():
        if declared.kind not in (dict, list) and getattr(args, key) is not None:  # base, grid, slurm, exclude
            spec[key] = getattr(args, key)
    if isinstance(args.repeats, int):  # a count on the command line replaces a spec's 'repeats: auto'
        spec["adaptive"] = False
    slurm = {key: getattr(args, key) for key in option_specs(SlurmOptions) if getattr(args, key) is not None}
    spec["slurm"] = {**(spec.get("slurm") or {}), **slurm}
    return parse_spec(spec)


def _plan(args: argparse.Namespace) -> int:
    from ignite_ddl.sweep.forecast import format_plan, plan_memory, write_plan
    from ignite_ddl.sweep.plan import refused_configurations, sweep_dir

    spec = _spec_of(args)
    out = sweep_dir(spec)
    # What a run would refuse, found here too: those configurations are said, the others planned.
    refused = refused_configurations(spec, files=spec.executor == "local", output_dir=out)
    skip = {r.index for r in refused}
    planned = plan_memory(spec, out, measure=args.measure, progress=lambda line: _say(f"{PROG}: {line}"), refused=skip)
    print(format_plan(planned, spec.memory_limit_mb, refused, width=output_width()))
    _say(f"{PROG}: plan: {write_plan(planned, out, spec.memory_limit_mb)}")
    return 0


class _WorkloadArgs(argparse.Action):
    """``--workload-args KEY=VALUE`` (repeatable; ``K1=V1,K2=V2`` gives several): more keyword arguments of the
    workload's function, in a new mapping (the default one is shared and never changed). A comma starts a new
    argument only where ``NAME=`` follows it, so a value may hold commas (``sizes=[1,2]``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        import re

        try:
            pairs = [_pair(item, many=False, keep_dashes=True) for item in re.split(r",(?=\w+=)", str(values))]
        except ConfigError as e:
            raise argparse.ArgumentError(self, str(e)) from None
        setattr(namespace, self.dest, {**getattr(namespace, self.dest), **dict(pairs)})


def _pair(item: str, many: bool, keep_dashes: bool = False) -> tuple[str, Any]:
    """``key=value`` (or ``key=v1,v2`` for a grid axis) from the command line, values typed as YAML would."""
    import yaml

    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"expected OPTION=VALUE, got '{item}'")

    def parse(text: str) -> Any:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"cannot read the value '{text}' of {key}: {problem}") from None

    key = key if keep_dashes else key.replace("-", "_")  # a workload's argument is named as its function names it
    return key, [parse(v) for v in value.split(",")] if many else parse(value)


def _report(args: argparse.Namespace) -> int:
    from ignite_ddl.report import write_report

    try:
        print(f"{PROG}: report: {write_report(args.results_dir, include_contended=args.include_contended)}")
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    _print_verdicts(args.results_dir)
    return 0


def _say(line: str) -> None:
    """A line of a sweep's or a plan's output, wrapped to the terminal it is read in (whole in a file or a pipe)."""
    print(fit_line(line, output_width()))


def _print_verdicts(results_dir: Any) -> None:
    """The report's verdict lines, as written beside it in verdict.txt."""
    from pathlib import Path

    path = Path(results_dir) / "verdict.txt"
    if path.is_file():
        for line in path.read_text().splitlines():
            _say(f"{PROG}: {line}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return run_command(_in_scratch_folder, argv)


def run() -> NoReturn:
    """The program (``ignite-ddl``, ``python -m ignite_ddl``): :func:`main`, then the exit handlers and the streams,
    and out without the interpreter's teardown. Freeing torch's modules one by one took 1 to 2.4 s at the end of
    every command here (0.04 s without), and nothing of ours needs it: files are closed where they are written,
    threads are waited for, and what libraries registered to run at exit (logging, multiprocessing, MLflow) runs."""
    try:
        code: int = main()
    except SystemExit as e:  # argparse's --help and usage errors exit with a status of their own
        if not isinstance(e.code, int):
            raise
        code = e.code
    for thread in threading.enumerate():  # what the interpreter waits for before it exits
        if not thread.daemon and thread is not threading.current_thread():
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone, or a stream closed
            stream.flush()
    os._exit(code)


def _in_scratch_folder(argv: list[str]) -> int:
    """The command, with every temporary file of it and of the processes it starts (ranks, workers, a sweep's runs,
    its fork server), Inductor's cache included, in one private folder removed when it ends: the folder exists
    before the parser imports a lab's module (some of torch's imports there create Inductor's cache folder, even
    for ``--help``). SIGTERM and SIGHUP end the command as SIGINT does, wherever they arrive (a sweep waiting for a
    quiet machine or writing its report, ``report``): one line, exit 128 + signal, the folder removed; launches
    inside install their own handlers, which also stop their processes."""
    from ignite_ddl.launcher.scratch import scratch_folder
    from ignite_ddl.launcher.signals import interruptible

    with interruptible(), scratch_folder():
        parser = build_parser(command=next((a for a in argv if not a.startswith("-")), None))
        args: Any = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 0
        return cast(int, args.handler(args))
