"""Launch stress: many launches of 2-4 spawned ranks on a loaded machine; missed joins and launch latency.

Each launch is ``launch(fn, LaunchSettings(backend="gloo", nproc_per_node=n))`` with ``fn`` an all-reduce and a
barrier: the whole path of a real run's start (processes, rendezvous store, gloo's full mesh) and its end, with
nothing else. The rank counts cycle 2, 3, 4. ``--burners K`` starts K CPU-burning processes beside it for the whole
benchmark (the load the launcher must survive). A **missed join** is a launch in which some rank did not join the
process group in time: the launcher says so on stderr ("did not join") and starts again, or gives up
(``LaunchFailed``). Latency is the wall time of one ``launch()`` call.

To compare with an earlier version of the launcher, run the same command with ``PYTHONPATH`` pointing at a checkout
of that version (the benchmark imports whichever ``ignite_ddl`` comes first).

Usage:
    python benchmarks/launch_stress.py --launches 500 --burners 2 --json launch_stress.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

import ignite.distributed as idist
import torch

import ignite_ddl

try:  # this release's layout
    from ignite_ddl.core.errors import LaunchFailed, RunFailed
    from ignite_ddl.launcher import LaunchSettings, launch
    from ignite_ddl.measure.contention import ForeignLoad
except ImportError:  # the flat layout of earlier releases, for the comparison
    from ignite_ddl.contention import ForeignLoad  # type: ignore[no-redef]
    from ignite_ddl.errors import LaunchFailed, RunFailed  # type: ignore[no-redef]

    from ignite_ddl.launcher import LaunchSettings, launch  # type: ignore[no-redef]


def _all_reduce(local_rank: int) -> float:
    value = idist.all_reduce(torch.ones(1) * (idist.get_rank() + 1))
    idist.barrier()
    return float(value.item())


class _Tee(io.TextIOBase):
    """stderr as it was, and a count of the launcher's "did not join" lines."""

    def __init__(self, stream: Any):
        self.stream, self.missed = stream, 0

    def write(self, text: str) -> int:
        self.missed += text.count("did not join")
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def _burn(count: int) -> list[subprocess.Popen]:
    code = "while True: pass\n"
    return [subprocess.Popen([sys.executable, "-c", code], start_new_session=True) for _ in range(count)]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def stress(launches: int, burners: int, timeout: float) -> dict[str, Any]:
    tee = _Tee(sys.stderr)
    sys.stderr = tee
    burning = _burn(burners)
    latencies: list[float] = []
    failed: list[str] = []
    load = ForeignLoad().start()
    try:
        for i in range(launches):
            n = 2 + i % 3
            began = time.perf_counter()
            try:
                total = launch(_all_reduce, LaunchSettings(backend="gloo", nproc_per_node=n, timeout=timeout))
                assert total == n * (n + 1) / 2, total
            except (LaunchFailed, RunFailed) as e:
                failed.append(f"launch {i} ({n} ranks): {e}")
            latencies.append(time.perf_counter() - began)
            if (i + 1) % 50 == 0:
                print(
                    f"{i + 1}/{launches}: p50 {statistics.median(latencies):.2f} s, missed joins {tee.missed}, "
                    f"failed {len(failed)}",
                    file=sys.__stdout__,
                    flush=True,
                )
    finally:
        foreign = load.stop()
        for burner in burning:
            os.killpg(burner.pid, signal.SIGKILL)
            burner.wait()
        sys.stderr = tee.stream
    return {
        "launcher": os.path.dirname(ignite_ddl.__file__),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "launches": launches,
        "burners": burners,
        "foreign_cpu_share": foreign,
        "missed_joins": tee.missed,
        "failed": failed,
        "latency_s": {
            "p50": statistics.median(latencies),
            "p90": _percentile(latencies, 0.90),
            "p99": _percentile(latencies, 0.99),
            "max": max(latencies),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=500)
    parser.add_argument("--burners", type=int, default=2, help="CPU-burning processes beside the launches")
    parser.add_argument("--timeout", type=float, default=120.0, help="each launch's collective timeout, seconds")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    result = stress(args.launches, args.burners, args.timeout)
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
