"""Prediction, before anything runs: what a configuration will hold per rank and how long its step will take, and
how data parallelism would scale on other machines. The sweep and the command line only call it.

- :mod:`~ignite_ddl.predict.memory`: a rank's peak memory, its training step traced on fake tensors;
- :mod:`~ignite_ddl.predict.heap`: what the C allocator's heap keeps beyond a CPU rank's tensors, the traced
  allocations replayed through this machine's allocator;
- :mod:`~ignite_ddl.predict.hook_cost`: DDP's own work on every gradient bucket (and a communication hook's),
  measured on this machine's CPU;
- :mod:`~ignite_ddl.predict.steptime`: the step time of every configuration of several processes, from its
  one-process twin and the link's all-reduce;
- :mod:`~ignite_ddl.predict.projection`: the scaling projection (``ignite-ddl project``): an alpha-beta model of a
  step on other machines and links.

Each strategy's part in them (what it shards, what it communicates) is read from its description
(:mod:`ignite_ddl.core.strategies`), never from its name.
"""

from __future__ import annotations

from ignite_ddl.core.exports import lazy_exports

__all__ = [
    "Prediction",
    "StepPrediction",
    "predict",
    "predict_steps",
    "project",
    "trace_step",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Prediction": "memory",
        "predict": "memory",
        "trace_step": "memory",
        "StepPrediction": "steptime",
        "predict_steps": "steptime",
        "project": "projection",
    },
)
