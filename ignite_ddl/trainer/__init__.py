"""The training job every rank runs, in the spirit of Ignite's CIFAR10 example: dataflow (:mod:`.data`), the model
and how it is held across ranks (:mod:`.models`, :mod:`.strategies`), the engines (:mod:`.engines`) and the recipe
around their step (:mod:`.recipe`: the optimizer and its parameter groups, the schedule, clipping), what a run
records per epoch (:mod:`.epochs`), what it measures (:mod:`.measurement`), checkpoints and trackers
(:mod:`.checkpoint`, :mod:`.tracking`), and the run itself (:mod:`.run`: ``train`` launches ``training`` on every
rank), with what it refuses before any process starts (:mod:`.checks`) and the summary it writes (:mod:`.summary`).

Example:
    >>> from ignite_ddl.trainer import strategy_for
    >>> strategy_for("auto", world_size=2).name
    'ddp'
"""

from __future__ import annotations

from ignite_ddl.core.exports import lazy_exports

__all__ = [
    "Strategy",
    "TrainingRun",
    "build_loaders",
    "build_model",
    "create_evaluator",
    "create_trainer",
    "strategy_for",
    "synthetic_images",
    "train",
    "train_command",
    "training",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Strategy": "strategies",
        "strategy_for": "strategies",
        "TrainingRun": "run",
        "train": "run",
        "train_command": "run",
        "training": "run",
        "build_loaders": "data",
        "synthetic_images": "data",
        "build_model": "models",
        "create_evaluator": "engines",
        "create_trainer": "engines",
    },
)
