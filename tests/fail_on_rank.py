"""Launch 2 gloo ranks of the real trainer and make rank 1 fail at iteration 3 (used by test_failures.py).

Usage: python fail_on_rank.py {raise|exit} OUTPUT_DIR
"""

from __future__ import annotations

import os
import sys

import ignite.distributed as idist
from ignite.engine import Engine, Events

from ignite_ddl import RunFailed, TrainConfig, launch, training


def fail_on_rank1(trainer: Engine, evaluator: Engine) -> None:
    how = os.environ["FAIL_HOW"]

    @trainer.on(Events.ITERATION_STARTED(once=3))
    def _fail(engine: Engine) -> None:
        if idist.get_rank() == 1:
            if how == "exit":
                os._exit(3)
            raise RuntimeError("injected failure at iteration 3")


if __name__ == "__main__":
    os.environ["FAIL_HOW"] = sys.argv[1]
    config = TrainConfig(
        backend="gloo", nproc_per_node=2, train_size=2048, val_size=64, epochs=5, progress=False, output_dir=sys.argv[2]
    )
    try:
        launch(training, config, setup=fail_on_rank1)
    except RunFailed as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
