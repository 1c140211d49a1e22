"""Launch stress: many launches of 2-4 spawned ranks on a loaded machine; missed joins and launch latency, for this
launcher and, side by side, another one.

Each launch is ``ignite_ddl.launch(fn, LaunchSettings(backend="gloo", nproc_per_node=n))`` with ``fn`` an
all-reduce and a barrier: the whole path of a real run's start (processes, rendezvous store, gloo's full mesh)
and its end, with nothing else. The rank counts cycle 2, 3, 4. ``--burners K`` starts K CPU-burning processes
beside it for the whole benchmark (the load a launcher must survive). A **missed join** is a launch in which some
rank did not join the process group in time: the launcher says so on stderr ("did not join") and starts again,
or gives up. Latency is the wall time of one ``launch()`` call; the first launch of each child process is left out
of it (it also pays for importing torch.distributed's pieces), not out of the joins counted.

``--compare PATH`` measures a second launcher too: the ``ignite_ddl`` package found under PATH (a checkout of an
earlier release, say). The launches run in chunks (``--chunk``) in child processes, alternating between the two
launchers, so that whatever else loads the machine meanwhile hits both alike; each child imports only the public
API (``ignite_ddl.launch``, ``ignite_ddl.LaunchSettings``), which every release has.

Usage:
    python benchmarks/launch_stress.py --launches 500 --burners 2 --compare /path/to/old --json launch_stress.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _all_reduce(local_rank: int) -> float:
    import ignite.distributed as idist
    import torch

    value = idist.all_reduce(torch.ones(1) * (idist.get_rank() + 1))
    idist.barrier()
    return float(value.item())


def chunk(start: int, count: int, timeout: float) -> dict[str, Any]:
    """``count`` launches (rank counts cycling from ``start``) with whichever ``ignite_ddl`` this process imports."""
    import io

    import torch

    import ignite_ddl

    class Tee(io.TextIOBase):  # stderr as it was, and a count of the launcher's "did not join" lines
        def __init__(self, stream: Any):
            self.stream, self.missed = stream, 0

        def write(self, text: str) -> int:
            self.missed += text.count("did not join")
            return self.stream.write(text)

    tee = Tee(sys.stderr)
    sys.stderr = tee
    latencies, failed = [], []
    for i in range(start, start + count):
        n = 2 + i % 3
        began = time.perf_counter()
        try:
            total = ignite_ddl.launch(
                _all_reduce, ignite_ddl.LaunchSettings(backend="gloo", nproc_per_node=n, timeout=timeout)
            )
            if total != n * (n + 1) / 2:
                failed.append(f"launch {i} ({n} ranks): wrong all-reduce {total}")
        except Exception as e:  # noqa: BLE001 - every way a launch can fail counts, named
            failed.append(f"launch {i} ({n} ranks): {type(e).__name__}: {e}")
        latencies.append(time.perf_counter() - began)
    sys.stderr = tee.stream
    return {
        "launcher": os.path.dirname(ignite_ddl.__file__),
        "torch": torch.__version__,
        "latencies": latencies[1:],  # the first launch also imports what launching needs (see the docstring)
        "missed_joins": tee.missed,
        "failed": failed,
    }


def _child(path: str | None, start: int, count: int, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, __file__, "--chunk-of", str(start), str(count), str(timeout), out.name]
        subprocess.run(cmd, env=env, check=True)
        return json.loads(Path(out.name).read_text())


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(parts: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [t for p in parts for t in p["latencies"]]
    return {
        "launcher": parts[0]["launcher"],
        "torch": parts[0]["torch"],
        "launches": len(latencies),
        "missed_joins": sum(p["missed_joins"] for p in parts),
        "failed": [f for p in parts for f in p["failed"]],
        "latency_s": {
            "p50": statistics.median(latencies),
            "p90": _percentile(latencies, 0.90),
            "p99": _percentile(latencies, 0.99),
            "max": max(latencies),
        },
    }


def stress(launches: int, burners: int, timeout: float, compare: str | None, size: int) -> dict[str, Any]:
    from ignite_ddl.measure.contention import ForeignLoad  # here: a child may import another ignite_ddl

    code = "while True: pass\n"
    burning = [subprocess.Popen([sys.executable, "-c", code], start_new_session=True) for _ in range(burners)]
    sides: dict[str, list[dict[str, Any]]] = {"this": [], "compared": []}
    load = ForeignLoad().start()  # other load than ours: the burners are this process's children
    try:
        for start in range(0, launches, size):
            count = min(size, launches - start)
            sides["this"].append(_child(None, start, count, timeout))
            if compare is not None:
                sides["compared"].append(_child(compare, start, count, timeout))
            done = sides["this"][-1]
            print(f"{start + count}/{launches} launches per launcher", file=sys.stderr, flush=True)
            if done["failed"]:
                print(f"  failed: {done['failed'][0]}", file=sys.stderr)
    finally:
        foreign = load.stop()
        for burner in burning:
            os.killpg(burner.pid, signal.SIGKILL)
            burner.wait()
    result: dict[str, Any] = {"cpus": os.cpu_count(), "burners": burners, "foreign_cpu_share": foreign}
    result["this"] = _summary(sides["this"])
    if compare is not None:
        result["compared"] = _summary(sides["compared"])
    return result


def main() -> None:
    if sys.argv[1:2] == ["--chunk-of"]:  # a child: one chunk of launches
        start, count, timeout, out = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
        Path(out).write_text(json.dumps(chunk(start, count, timeout)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=500, help="launches per launcher")
    parser.add_argument("--burners", type=int, default=2, help="CPU-burning processes beside the launches")
    parser.add_argument("--timeout", type=float, default=120.0, help="each launch's collective timeout, seconds")
    parser.add_argument("--compare", metavar="PATH", help="also measure the ignite_ddl package found under PATH")
    parser.add_argument("--chunk", type=int, default=50, help="launches per child process, alternating launchers")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    result = stress(args.launches, args.burners, args.timeout, args.compare, args.chunk)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
