"""Runs of the real trainer with something injected, each in its own interpreter (used by the tests).

Usage: python scenarios.py NAME OUTPUT_DIR

Every scenario runs ``ignite_ddl.train`` and injects its fault or delay with
a ``setup`` function; a failed run prints ``error: <message>`` and exits with status 1, like the CLI.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import time
from pathlib import Path

import ignite.distributed as idist
from ignite.engine import Engine, Events

from ignite_ddl import RunFailed, TrainConfig, train
from ignite_ddl.trainer.run import TrainingRun

DELAY_S = 0.03
BASE = {"train_size": 2048, "val_size": 64, "batch_size": 64, "epochs": 1, "progress": False}


def fail_at_iteration_3(run: TrainingRun) -> None:
    @run.trainer.on(Events.ITERATION_STARTED(once=3))
    def _fail(engine: Engine) -> None:
        if idist.get_rank() == idist.get_world_size() - 1:
            if os.environ["SCENARIO"] == "fail-exit":
                os._exit(3)
            raise RuntimeError("injected failure at iteration 3")


class SlowLoader:
    """Wraps a loader so that every batch takes DELAY_S longer to arrive."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            time.sleep(DELAY_S)
            yield batch


def slow_data_on_rank1(run: TrainingRun) -> None:
    if idist.get_rank() == 1:
        run.trainer.add_event_handler(Events.STARTED, lambda engine: engine.set_data(SlowLoader(run.loaders.train)))


def slow_forward_on_rank1(run: TrainingRun) -> None:
    if idist.get_rank() == 1:
        run.model.register_forward_pre_hook(lambda module, inputs: time.sleep(DELAY_S))


def hang_on_rank1(run: TrainingRun) -> None:
    """Rank 1 stops in the forward pass of iteration 6, as a rank stuck on a bad input or a dead device would."""
    if idist.get_rank() == 1:
        trainer = run.trainer
        run.model.register_forward_pre_hook(
            lambda module, inputs: time.sleep(600) if trainer.state.iteration == 6 else None
        )


def time_window_outside(run: TrainingRun) -> None:
    """Clock every iteration's end with handlers of our own, so that the test can time the window the recorder
    chose (its start is found from the step times: the fixed warm-up, then what is still settling)."""
    ends: list[float] = []
    run.trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda _: ends.append(time.perf_counter()))

    @run.trainer.on(Events.COMPLETED)
    def _write(engine: Engine) -> None:
        if idist.get_rank() == 0:
            Path(run.config.output_dir, "outside.json").write_text(
                json.dumps({"global_batch": run.loaders.global_batch, "ends": ends})
            )


def slow_evaluation(run: TrainingRun) -> None:
    run.evaluator.add_event_handler(Events.COMPLETED, lambda _: time.sleep(float(os.environ.get("EVAL_DELAY", "0"))))


def _socket_inodes(pids: list[int]) -> set[int]:
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
        except OSError:
            continue
    return inodes


def _listening(inodes: set[int]) -> list[str]:
    """``address:port`` of the TCP sockets among ``inodes`` that listen (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], int(fields[9])
                if state == "0A" and inode in inodes:  # 0A: LISTEN
                    address, port = local.split(":")
                    raw = bytes.fromhex(address)
                    # /proc prints each 32-bit word in host (little-endian) order
                    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                    text = ipaddress.ip_address(words)
                    if isinstance(text, ipaddress.IPv6Address) and text.ipv4_mapped:
                        text = text.ipv4_mapped
                    found.append(f"{text}:{int(port, 16)}")
    return found


def list_listeners(run: TrainingRun) -> None:
    """Rank 0, while training: every listening TCP socket of the run (the launcher and all its processes)."""

    @run.trainer.on(Events.ITERATION_COMPLETED(once=2))
    def _record(engine: Engine) -> None:
        if idist.get_rank() == 0:
            from ignite_ddl.measure.contention import process_tree_pids

            pids = process_tree_pids(os.getppid())
            Path(run.config.output_dir, "listeners.json").write_text(json.dumps(_listening(_socket_inodes(pids))))


SCENARIOS = {
    "fail-raise": ({"backend": "gloo", "nproc_per_node": 2, "epochs": 5}, fail_at_iteration_3),
    "fail-exit": ({"backend": "gloo", "nproc_per_node": 2, "epochs": 5}, fail_at_iteration_3),
    "handlers-raise": ({"profiler": "handlers"}, fail_at_iteration_3),
    "window": ({"backend": "gloo", "nproc_per_node": 2}, time_window_outside),
    "slow-data": ({"backend": "gloo", "nproc_per_node": 2, "train_size": 1024}, slow_data_on_rank1),
    "slow-forward": ({"backend": "gloo", "nproc_per_node": 2, "train_size": 1024}, slow_forward_on_rank1),
    "slow-eval": ({"profiler": "timer", "epochs": 3, "train_size": 512}, slow_evaluation),
    "hang": ({"backend": "gloo", "nproc_per_node": 2, "epochs": 5, "stall_timeout": 3.0}, hang_on_rank1),
    "listeners": ({"backend": "gloo", "nproc_per_node": 2, "train_size": 512}, list_listeners),
}

if __name__ == "__main__":
    name, output_dir = sys.argv[1], sys.argv[2]
    os.environ["SCENARIO"] = name
    options, setup = SCENARIOS[name]
    if "RANK" in os.environ:  # started by torchrun, which sets the process count
        options = {k: v for k, v in options.items() if k != "nproc_per_node"}
    config = TrainConfig(**{**BASE, **options, "output_dir": output_dir})
    try:
        train(config, setup=setup)
    except RunFailed as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
