"""Scaling projection: how a data-parallel step would scale to N workers, for a ring all-reduce with DDP's bucketed
overlap and for a parameter server, from one worker's compute and a link's latency and bandwidth (the alpha-beta
model). ``ignite-ddl project`` is its command.

One job per module:

- :mod:`~ignite_ddl.predict.projection.model`: the model itself, pure arithmetic and cited figures, no torch (the
  command line reads its link presets at start-up): :class:`Link` and :data:`LINKS`, :class:`Compute`, the ring and
  parameter-server times, :func:`project` and its :class:`Projection`, NVIDIA's published ResNet-50 figures;
- :mod:`~ignite_ddl.predict.projection.inputs`: what it is fed from outside: one worker's step from a measured
  1-process run (:func:`compute_from_run`; :func:`run_warning` says when that run makes the projection
  optimistic), all-reduce times measured here (:func:`measure_allreduce`) and the link fitted to them
  (:func:`fit_alpha_beta`), and the comparison with NVIDIA's published scaling (:func:`validate_nvidia_resnet50`);
- :mod:`~ignite_ddl.predict.projection.present`: the console table (:func:`format_projection`), projection.json,
  .csv and .png (:func:`write_projection`, the plot alone :func:`figure`).

The comparison with 2 processes measured on this machine trains, so it is an experiment, not part of the library:
``python benchmarks/projection_validation.py``.

Example (NVIDIA's 1-A100 ResNet-50 step in TF32, 25.6 M float32 gradients, projected over 25 GbE):
    >>> from ignite_ddl.predict import projection
    >>> resnet50 = projection.NVIDIA_RESNET50
    >>> compute = projection.Compute.from_total(
    ...     compute_s=resnet50["batch_per_gpu"] / resnet50["cases"]["TF32"]["samples_per_s_1"],
    ...     grad_bytes=4 * resnet50["params"],
    ...     batch_size=resnet50["batch_per_gpu"],
    ... )
    >>> p = projection.project(compute, projection.LINKS["25gbe"])
    >>> p.ps_half_efficiency_n, p.ring_half_efficiency_n  # the server saturates at 5 workers; the ring holds to 1024
    (5, None)
    >>> round(p.ps_ceiling_samples_per_s)  # the server's ceiling, b beta / (2M), however many workers
    3904
"""

from ignite_ddl.predict.projection.inputs import (
    FIT_SIZES,
    compute_from_run,
    fit_alpha_beta,
    measure_allreduce,
    measure_busy_factor,
    measure_fsdp_factor,
    run_warning,
    validate_nvidia_resnet50,
)
from ignite_ddl.predict.projection.model import (
    DDP_BUCKET_BYTES,
    LINKS,
    MIB,
    NVIDIA_RESNET50,
    Compute,
    Link,
    Projection,
    bucketed_exposed_s,
    project,
    ps_comm_s,
    ring_allreduce_s,
)
from ignite_ddl.predict.projection.present import figure, format_projection, write_projection

__all__ = [
    "DDP_BUCKET_BYTES",
    "FIT_SIZES",
    "LINKS",
    "MIB",
    "NVIDIA_RESNET50",
    "Compute",
    "Link",
    "Projection",
    "bucketed_exposed_s",
    "compute_from_run",
    "figure",
    "fit_alpha_beta",
    "format_projection",
    "measure_allreduce",
    "measure_busy_factor",
    "measure_fsdp_factor",
    "project",
    "ps_comm_s",
    "ring_allreduce_s",
    "run_warning",
    "validate_nvidia_resnet50",
    "write_projection",
]
