"""The layout probe: what a configuration of several CPU processes computes a step, measured without its
communication, for the step-time model (:mod:`ignite_ddl.predict.steptime`).

Where the ranks share one machine's cores, a rank's forward, backward and optimizer step on its share of the batch
and of the cores is not the one-process twin's step, nor a fixed share of it: measured on MLPs here
(benchmarks/ddp_cpu_parts.py) it came to 0.64 to 1.8 times the twin's, by the layer widths and the batch, and a
convolutional model's step fell the other way. So it is measured: a short run of the configuration itself (its own
model, data, batch, accumulation, threads and processes) under DDP with ``gradient_sync`` off, so that no gradient
is ever all-reduced, each rank training its replica on its shard. Its step (the global batch over its throughput
past the warm-up) is the compute of every strategy at that layout; a strategy that shards the optimizer takes a 1/N
share of the probe's optimizer step. The probe is the same for DDP, ZeRO-1 and FSDP of one layout, and for every
DDP option (bucket size, hooks): its key leaves them out.

Right after it the one-process twin runs the same short probe, and the step model takes the layout's compute as the
*ratio* of the two, measured side by side, times the twin's median over its runs: a probe measured once is at the
machine's speed of that minute, and a shared VM's speed drifts. On the 2-core AMD EPYC VM one sweep's probe of the
shipped example measured 35 ms where seven others measured 20-24, while that sweep's twin ran 29, 22 and 22 ms: its
DDP and FSDP predictions came out 26 % and 13 % slow. A drift can also fall between the two: in one run of
benchmarks/own_model_prediction.py the HF model's twin probe read 235.7 ms where the twin's five runs read 189-201,
and its DDP and FSDP rows came out 18 and 22 % fast. So the pair is run :data:`LAYOUT_ROUNDS` times, alternating,
and the round whose ratio is the median of the rounds' is kept: one drifted run of either moves its round's ratio
only. Each run measures about :data:`PROBE_SECONDS` of the twin's steps (:func:`probe_iterations`), no fewer than
:data:`PROBE_MEASURED`: a model of short steps is timed over enough of them.

Example:
    >>> import dataclasses
    >>> from ignite_ddl.core.config import TrainConfig
    >>> config = TrainConfig(model="cnn", nproc_per_node=2, strategy="fsdp", max_iters=60, output_dir="out/cfg003-r0")
    >>> probe = layout_probe(config, "out/plan")
    >>> probe.strategy, probe.gradient_sync, probe.max_iters, probe.measure_flops, probe.nproc_per_node
    ('ddp', False, 13, False, 2)
    >>> other = dataclasses.replace(config, strategy="ddp", bucket_cap_mb=5.0, output_dir="out/cfg001-r0")
    >>> layout_probe(other, "out/plan").output_dir == probe.output_dir  # one probe for every strategy of a layout
    True
    >>> longer = layout_probe(config, "out/plan", probe_iterations(0.02))  # a twin of 20 ms a step: a second of them
    >>> longer.max_iters, longer.output_dir == probe.output_dir
    (53, True)
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from ignite_ddl.core.config import DDPOptions, FSDPOptions, TrainConfig, ZeroOptions, declared_default
from ignite_ddl.core.options import option_specs
from ignite_ddl.sweep.probes import run_probe
from ignite_ddl.sweep.spec import Spec

__all__ = [
    "LAYOUT_REVISION",
    "LAYOUT_ROUNDS",
    "PROBE_MEASURED",
    "PROBE_WARMUP",
    "layout_probe",
    "measure_layout",
    "probe_iterations",
]

PROBE_WARMUP = 3  # iterations left out: the first steps allocate and fill the caches
PROBE_MEASURED = 10  # iterations measured at least: about a second for a step of 100 ms
# A probe measures about PROBE_SECONDS of its twin's steps (at most PROBE_MEASURED_MAX iterations): 10 steps of the
# shipped example (20 ms) measured 0.2 s, and its six probes in two runs of benchmarks/own_model_prediction.py put
# the layout at 0.78-1.14 times its twin, where the runs of 60 steps measured it within 3 %.
PROBE_SECONDS = 1.0
PROBE_MEASURED_MAX = 100
LAYOUT_ROUNDS = 3  # probe and twin alternating: the median of three ratios outvotes one drifted run
# 3: a second of the twin's steps a probe; 2: the median round of LAYOUT_ROUNDS; 1 (no revision): one probe, one twin
LAYOUT_REVISION = 3


def probe_iterations(twin_step_s: float | None) -> int:
    """Iterations a layout probe measures for a twin whose step takes ``twin_step_s`` (None: not known): about
    :data:`PROBE_SECONDS` of them, at least :data:`PROBE_MEASURED`, at most :data:`PROBE_MEASURED_MAX`.

    >>> probe_iterations(0.02), probe_iterations(0.2), probe_iterations(None), probe_iterations(0.001)
    (50, 10, 10, 100)
    """
    if not twin_step_s or twin_step_s <= 0:
        return PROBE_MEASURED
    return max(PROBE_MEASURED, min(PROBE_MEASURED_MAX, math.ceil(PROBE_SECONDS / twin_step_s - 1e-9)))


def layout_probe(config: TrainConfig, folder: str | Path, measured: int = PROBE_MEASURED) -> TrainConfig:
    """The run that probes ``config``'s compute at its layout: the same run under DDP with ``gradient_sync`` off
    (every strategy's own options at their defaults), :data:`PROBE_WARMUP` + ``measured`` iterations (within its
    one epoch), no FLOP counting or communication timing, in ``<folder>/layout/<digest>`` (the digest of everything
    else but its length: a layout is probed once whatever its twin's step measured)."""
    strategy_options = [name for group in (DDPOptions, FSDPOptions, ZeroOptions) for name in option_specs(group)]
    options = {**config.to_dict(), **{name: declared_default(name) for name in strategy_options}}
    options.update(
        strategy="ddp",
        gradient_sync=False,
        epochs=1,
        warmup_iters=PROBE_WARMUP,
        measure_flops=False,
        comm_timing=False,
        profiler="none",
        progress=False,
        overwrite=True,
    )
    for name in ("output_dir", "matmul_peak_cache", "max_iters"):
        options.pop(name, None)
    digest = hashlib.sha1(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()[:12]
    where = str(Path(folder) / "layout" / digest)
    return TrainConfig.from_dict({**options, "max_iters": PROBE_WARMUP + measured, "output_dir": where})


def measure_layout(
    probe: TrainConfig, spec: Spec, twin: TrainConfig | None = None, rounds: int = LAYOUT_ROUNDS
) -> dict[str, Any]:
    """Run ``probe`` (:func:`layout_probe`) as the sweep starts its runs; its step (seconds an optimizer step of the
    global batch, past the warm-up) and its optimizer step (the slowest rank's mean), or ``{"error": ...}``. With
    ``twin`` (the one-process twin's probe, :func:`layout_probe` of the twin), the two alternate ``rounds`` times and
    the round whose ratio (probe over twin) is the median of the rounds' is kept, its twin's step as
    ``twin_step_s``, every round's pair in ``rounds``; a round that fails is left out (no round of the twin: the
    twin's runs alone are then the reference, ``twin_step_s`` absent)."""
    pairs: list[tuple[float, float | None, float | None]] = []  # (step, optimizer, twin's step) a round
    contended, first = False, None
    for _ in range(rounds if twin is not None else 1):
        summary, entry = run_probe(probe, spec)
        if summary is None:
            if pairs:
                continue  # a later round that fails: the rounds measured stand
            return entry
        contended, first = contended or bool(entry.get("contended")), first or entry.get("measured")
        step, optimizer = _step_of(summary, probe)
        if step is None:
            return {"error": "no throughput recorded"}
        beside = run_probe(twin, spec)[0] if twin is not None else None
        pairs.append((step, optimizer, _step_of(beside, twin)[0] if beside is not None and twin is not None else None))
    iterations = (probe.max_iters or PROBE_WARMUP) - PROBE_WARMUP
    measured = {"contended": contended, "measured": first, "iterations": iterations, "revision": LAYOUT_REVISION}
    paired = sorted((p for p in pairs if p[2]), key=lambda p: p[0] / (p[2] or 1.0))
    if not paired:
        step, optimizer, _ = pairs[0]
        return {"step_s": step, "optimizer_s": optimizer, **measured}
    step, optimizer, twin_step = paired[(len(paired) - 1) // 2]
    rows = [[p[0], p[2]] for p in pairs]
    return {"step_s": step, "optimizer_s": optimizer, "twin_step_s": twin_step, "rounds": rows, **measured}


def _step_of(summary: dict[str, Any], probe: TrainConfig) -> tuple[float | None, float | None]:
    """A probe's step (seconds an optimizer step of the global batch; None: no throughput recorded) and its optimizer
    step (the slowest rank's mean)."""
    rate = summary.get("samples_per_s")
    steps = (summary.get("steps") or {}).get("ranks") or []
    optimizer = [r["optimizer_s_mean"] for r in steps if isinstance(r.get("optimizer_s_mean"), float)]
    if not isinstance(rate, float) or rate <= 0:
        return None, None
    return probe.batch_size / rate, max(optimizer) if optimizer else None
