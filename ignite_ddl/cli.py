"""The ``ignite-ddl`` command. Options of ``train`` are generated from :class:`~ignite_ddl.config.TrainConfig`.

Exit status: 0 success, 1 a rank failed, 2 a setup refused before anything started, 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, NoReturn

from ignite_ddl.config import ConfigError, TrainConfig
from ignite_ddl.labs import claims_hold, lab_modules
from ignite_ddl.launcher import RunFailed
from ignite_ddl.results import write_json

PROG = "ignite-ddl"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, no usage block: the user sees what is wrong and `--help` tells the rest.
        self.exit(2, f"{PROG}: error: {message}\n")


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    types = {"int": int, "float": float, "str": str}
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = f.type.replace("| None", "").strip()
        if kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=f.metadata["help"])
        else:
            parser.add_argument(
                flag, type=types[kind], default=f.default, metavar=kind.upper(), help=f.metadata["help"]
            )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Run, measure and compare data-parallel training with PyTorch-Ignite.")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    train = commands.add_parser("train", help="train one configuration (serial, spawned, torchrun or SLURM)")
    _add_config_options(train)
    train.set_defaults(handler=_train)
    for lab in lab_modules():
        sub = commands.add_parser(lab.NAME, help=lab.HELP, description=lab.HELP)
        lab.add_arguments(sub)
        sub.add_argument("--json", metavar="PATH", help="also write the result as JSON to PATH")
        sub.set_defaults(handler=_lab(lab))
    return parser


def _lab(lab: ModuleType) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        result = lab.run(args)
        print(lab.format_result(result))
        if args.json:
            write_json(args.json, result)
        if not claims_hold(result):
            print(f"{PROG}: {lab.NAME}: a claim did not hold (see FAILED above)", file=sys.stderr)
            return 1
        return 0

    return handler


def _train(args: argparse.Namespace) -> int:
    from ignite_ddl.trainer import train  # imported here so `--help` stays fast

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)}
    summary = train(TrainConfig(**values))
    if summary is not None:
        print(
            f"{PROG}: {summary['world_size']} process(es), {summary['backend']}: "
            f"{summary['samples_per_s']:.0f} samples/s, val accuracy {summary['val_accuracy']:.4f} "
            f"-> {values['output_dir']}/summary.json"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args: Any = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.handler(args)
    except ConfigError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except RunFailed as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
