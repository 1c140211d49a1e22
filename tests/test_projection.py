"""The scaling projection (alpha-beta model): hand-computed step times, the fit of alpha and beta, the command line,
a projection from a real 1-process run, the published-figures validation, the validation against this machine
(benchmarks/projection_validation.py), and the model module staying free of torch."""

from __future__ import annotations

import ast
import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest
from conftest import QUICK, check_ok, run, run_cli

from ignite_ddl.core.errors import ConfigError
from ignite_ddl.predict.projection import (
    LINKS,
    NVIDIA_RESNET50,
    Compute,
    Link,
    bucketed_exposed_s,
    compute_from_run,
    fit_alpha_beta,
    measure_allreduce,
    project,
    ps_comm_s,
    ring_allreduce_s,
    run_warning,
    validate_nvidia_resnet50,
)
from ignite_ddl.predict.projection.model import worker_counts

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Round numbers: 1 ms per message, 1 MB/s; a 1000-byte message moves in 1 ms.
SLOW = Link("slow", alpha_s=1e-3, beta_Bps=1e6, source="test")
# One worker: data 1 ms, forward 2, backward 6, optimizer 1: a 10 ms step for a batch of 10 (1000 samples/s).
COMPUTE = Compute(forward_s=2e-3, backward_s=6e-3, optimizer_s=1e-3, other_s=1e-3, batch_size=10, grad_bytes=3000)


def test_ring_allreduce_time_by_hand():
    assert ring_allreduce_s(1000, 1, SLOW) == 0.0  # nothing to reduce
    assert ring_allreduce_s(1000, 2, SLOW) == pytest.approx(2e-3 + 1e-3)  # 2 x 1 ms + 2(1)/2 x 1 ms
    assert ring_allreduce_s(1000, 4, SLOW) == pytest.approx(6e-3 + 1.5e-3)  # 6 x 1 ms + 6/4 x 1 ms


def test_bucketed_exposed_time_by_hand():
    # 2 buckets of 1000 B on 2 workers, 3 ms each; ready at 5 and 10 ms of a 10 ms backward: the first is done at
    # 8 ms, hidden; the second starts at 10 ms and ends at 13: 3 ms exposed.
    assert bucketed_exposed_s(10e-3, 2000, 1000, 2, SLOW) == pytest.approx(3e-3)
    # 3 buckets, backward 6 ms: ready at 2, 4, 6 ms; done 5, then 5 -> 8, then 8 -> 11 (they queue): 5 ms exposed.
    assert bucketed_exposed_s(6e-3, 3000, 1000, 2, SLOW) == pytest.approx(5e-3)
    # a 500 B remainder last: 2 ms + 0.5 ms; ready at 6 ms, but the link is busy until 8: done at 10.5, 4.5 exposed
    assert bucketed_exposed_s(6e-3, 2500, 1000, 2, SLOW) == pytest.approx(4.5e-3)
    assert bucketed_exposed_s(6e-3, 3000, 1000, 1, SLOW) == 0.0


def test_parameter_server_time_by_hand():
    pull, push = ps_comm_s(3000, 4, SLOW)  # each 4 x (1 ms + 3000 B / 1 MB/s) = 16 ms
    assert pull == pytest.approx(16e-3) and push == pytest.approx(16e-3)


def test_projected_rows_by_hand():
    p = project(COMPUTE, SLOW, max_workers=4, bucket_bytes=1000)
    assert [r["n"] for r in p.rows] == [1, 2, 4]
    one, two = p.rows[0], p.rows[1]
    assert one["ring_step_s"] == pytest.approx(10e-3) and one["ring_speedup"] == pytest.approx(1.0)
    # N = 2, ring: 10 ms + 5 ms exposed (the 3-bucket case above): 20 samples in 15 ms
    assert two["ring_comm_s"] == pytest.approx(5e-3) and two["ring_step_s"] == pytest.approx(15e-3)
    assert two["ring_samples_per_s"] == pytest.approx(20 / 15e-3)
    assert two["ring_speedup"] == pytest.approx(4 / 3) and two["ring_efficiency"] == pytest.approx(2 / 3)
    # N = 2, parameter server: pull + push = 2 x 2 x 4 ms = 16 ms on top of the 10 ms step
    assert two["ps_comm_s"] == pytest.approx(16e-3) and two["ps_step_s"] == pytest.approx(26e-3)
    assert two["ps_speedup"] == pytest.approx(20 / 26e-3 / 1000) and two["ps_efficiency"] == pytest.approx(10 / 26)
    # PS efficiency 10 / (10 + 8 N): 0.56 at N = 1, 0.38 at N = 2; its ceiling b / (2 (alpha + M / beta))
    assert p.ps_half_efficiency_n == 2
    assert p.ps_ceiling_samples_per_s == pytest.approx(10 / (2 * 4e-3))
    assert p.ring_ceiling_samples_per_s == pytest.approx(10 / (2 * 3 * 1e-3))  # b / (2 k alpha), k = 3 buckets


def test_saturation_is_the_first_n_below_half_efficiency():
    # One bucket, so exposed = the whole all-reduce: 2(N-1) ms + 2(N-1)/N ms. Efficiency < 0.5 once it exceeds the
    # 10 ms step: N = 5 gives 9.6 ms, N = 6 gives 11.67 ms. Not a power of 2: found between the listed N.
    compute = Compute(forward_s=3e-3, backward_s=6e-3, optimizer_s=1e-3, batch_size=10, grad_bytes=1000)
    p = project(compute, SLOW, max_workers=16)
    assert [r["n"] for r in p.rows] == [1, 2, 4, 8, 16]
    assert p.ring_half_efficiency_n == 6
    assert p.row(5)["ring_efficiency"] == pytest.approx(10 / 19.6) and p.row(6)["ring_efficiency"] < 0.5
    assert project(compute, SLOW, max_workers=5).ring_half_efficiency_n is None
    # alpha = 0: the PS ceiling is b beta / (2M), and the ring has none
    no_latency = Link("no latency", 0.0, 1e6, "test")
    p = project(compute, no_latency, max_workers=8)
    assert p.ps_ceiling_samples_per_s == pytest.approx(10 * 1e6 / (2 * 1000))
    assert math.isinf(p.ring_ceiling_samples_per_s)


def test_several_nodes_use_the_slower_link_beyond_one_node():
    compute = Compute(forward_s=3e-3, backward_s=6e-3, optimizer_s=1e-3, batch_size=10, grad_bytes=1000)
    inter = Link("slower", alpha_s=2e-3, beta_Bps=0.5e6, source="test")
    p = project(compute, SLOW, max_workers=4, gpus_per_node=2, inter_link=inter)
    two, four = p.rows[1], p.rows[2]
    assert two["ring_comm_s"] == pytest.approx(3e-3) and two["ps_comm_s"] == pytest.approx(2 * 2 * 2e-3)
    # N = 4 > 2 per node: every ring step at alpha 2 ms and 0.5 MB/s: 6 x 2 ms + 6/4 x 2 ms; the server's NIC is
    # the inter-node link: 2 x 4 x (2 ms + 2 ms)
    assert four["ring_comm_s"] == pytest.approx(12e-3 + 3e-3)
    assert four["ps_comm_s"] == pytest.approx(32e-3)
    assert p.ps_ceiling_samples_per_s == pytest.approx(10 / (2 * 4e-3))
    with pytest.raises(ConfigError, match="both"):
        project(compute, SLOW, gpus_per_node=2)


def test_refused_inputs():
    with pytest.raises(ConfigError):
        Compute(forward_s=-1e-3, backward_s=1e-3, optimizer_s=0, batch_size=1, grad_bytes=1)
    with pytest.raises(ConfigError):
        Compute(forward_s=0, backward_s=0, optimizer_s=0, batch_size=1, grad_bytes=1)
    with pytest.raises(ConfigError):
        Link("bad", 1e-6, 0.0, "test")
    with pytest.raises(ConfigError):
        worker_counts(0)
    assert worker_counts(12) == [1, 2, 4, 8, 12]


FIT_SIZES = [64 * 1024 * 4**i for i in range(5)]  # 64 KiB .. 16 MiB


def _ring_times(alpha: float, beta: float, n: int) -> list[float]:
    return [2 * (n - 1) * alpha + 2 * (n - 1) / n * m / beta for m in FIT_SIZES]


@pytest.mark.parametrize("nproc", [2, 4])
def test_fit_recovers_alpha_and_beta_exactly(nproc):
    link = fit_alpha_beta(FIT_SIZES, _ring_times(50e-6, 2e9, nproc), nproc)
    assert link.alpha_s == pytest.approx(50e-6, rel=1e-9) and link.beta_Bps == pytest.approx(2e9, rel=1e-9)
    assert link.residual == pytest.approx(0.0, abs=1e-9) and link.name == "fitted (this machine)"


def test_fit_with_noise_stays_close():
    noise = [1.02, 0.98, 1.01, 0.99, 1.015]  # +-2 % on each time
    times = [t * e for t, e in zip(_ring_times(50e-6, 2e9, 2), noise)]
    link = fit_alpha_beta(FIT_SIZES, times, 2)
    assert link.alpha_s == pytest.approx(50e-6, rel=0.15) and link.beta_Bps == pytest.approx(2e9, rel=0.05)
    assert 0 < link.residual < 0.03


def test_fit_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError):
        fit_alpha_beta(FIT_SIZES, _ring_times(50e-6, 2e9, 2), 1)
    with pytest.raises(ValueError):
        fit_alpha_beta([1024, 1024], [1e-4, 1e-4], 2)  # one distinct size
    with pytest.raises(ValueError):
        fit_alpha_beta(FIT_SIZES, list(reversed(_ring_times(50e-6, 2e9, 2))), 2)  # shrinking with size


def test_fit_on_real_gloo_processes(tmp_path):
    # sizes 16x apart: the larger transfer takes longer even on a busy machine
    wanted = [64 * 1024, 1024 * 1024, 16 * 1024 * 1024]
    sizes, times = measure_allreduce(2, sizes=wanted, iters=5, warmup=1, log_dir=str(tmp_path / "logs"))
    assert sizes == wanted and all(t > 0 for t in times)
    link = fit_alpha_beta(sizes, times, 2)
    assert link.alpha_s >= 0 and 0 < link.beta_Bps < math.inf


def test_cli_writes_json_csv_and_png(tmp_path):
    result = run_cli(
        "project",
        "--compute-ms",
        "10",
        "--grad-mb",
        "4",
        "--batch-size",
        "32",
        "--link",
        "nvlink3",
        "--output-dir",
        "tmp",
        cwd=tmp_path,
    )
    check_ok(result)
    out = tmp_path / "tmp"
    data = json.loads((out / "projection.json").read_text())
    assert [r["n"] for r in data["rows"]] == [2**i for i in range(11)]
    compute = data["inputs"]["compute"]
    assert compute["batch_size"] == 32 and compute["grad_bytes"] == 4 * 2**20
    assert compute["forward_s"] + compute["backward_s"] == pytest.approx(10e-3)
    assert data["inputs"]["link"]["beta_Bps"] == LINKS["nvlink3"].beta_Bps == 300e9
    assert data["rows"][0]["ring_step_s"] == pytest.approx(10e-3)
    with open(out / "projection.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 11 and float(rows[-1]["n"]) == 1024
    png = out / "projection.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    height, width = matplotlib.image.imread(png).shape[:2]
    assert height > 200 and width > 400
    assert "parameter server" in result.stdout and "1024" in result.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["--compute-ms", "-10", "--grad-mb", "4", "--batch-size", "32", "--link", "nvlink3"],
        ["--compute-ms", "10", "--grad-mb", "4", "--batch-size", "32", "--link", "token-ring"],
        ["--run", "somewhere", "--compute-ms", "10", "--link", "nvlink3"],
        ["--compute-ms", "10", "--grad-mb", "4", "--batch-size", "32"],  # no link
        ["--compute-ms", "10", "--grad-mb", "4", "--batch-size", "32", "--link", "10gbe", "--alpha-us", "5"],
        ["--compute-ms", "10", "--grad-mb", "4", "--batch-size", "0", "--link", "10gbe"],
        ["--compute-ms", "10", "--grad-mb", "4", "--batch-size", "32", "--link", "10gbe", "--gpus-per-node", "8"],
        ["--run", "no-such-run", "--link", "10gbe"],
    ],
)
def test_cli_refuses_bad_input_in_one_line(tmp_path, argv):
    result = run_cli("project", *argv, "--output-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ignite-ddl: error: "), result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.distributed
def test_projection_from_a_real_one_process_run(tmp_path):
    run = tmp_path / "run"
    check_ok(run_cli("train", *QUICK, "--output-dir", str(run)))
    summary = json.loads((run / "summary.json").read_text())
    compute = compute_from_run(run)
    # the small CNN on 3 x 32 x 32 inputs: conv 3->32 (3x3), conv 32->64 (3x3), linear 64*16 -> 10, float32
    params = (3 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (64 * 16 * 10 + 10)
    assert compute.grad_bytes == 4 * params
    assert compute.batch_size == summary["batch"]["per_rank"] == 64
    rank = summary["steps"]["ranks"][0]
    assert compute.forward_s == rank["forward_s_mean"] and compute.backward_s == rank["backward_s_mean"]
    # the measured step (batch / samples per second) is what one projected worker takes
    assert compute.step_s == pytest.approx(64 / summary["samples_per_s"])

    result = run_cli(
        "project",
        "--run",
        str(run),
        "--link",
        "10gbe",
        "--max-workers",
        "8",
        "--output-dir",
        str(tmp_path / "projection"),
    )
    check_ok(result)
    data = json.loads((tmp_path / "projection" / "projection.json").read_text())
    assert data["rows"][0]["ring_samples_per_s"] == pytest.approx(summary["samples_per_s"])
    assert [r["n"] for r in data["rows"]] == [1, 2, 4, 8]

    # a run of several processes is refused: its step already holds communication
    other = tmp_path / "two"
    other.mkdir()
    (other / "summary.json").write_text(json.dumps({**summary, "world_size": 2}))
    (other / "config.json").write_text((run / "config.json").read_text())
    with pytest.raises(ConfigError, match="1-process run"):
        compute_from_run(other)


def _measured_run(folder: Path, threads: int, foreign_share: float) -> Path:
    """A finished 1-process run's folder, written by hand: what compute_from_run and run_warning read."""
    from ignite_ddl.core.config import TrainConfig

    folder.mkdir()
    config = TrainConfig(model="cnn", dataset="synthetic", batch_size=64).to_dict()
    (folder / "config.json").write_text(json.dumps({"config": config}))
    phases = {"forward_s_mean": 0.01, "backward_s_mean": 0.02, "optimizer_s_mean": 0.001}
    summary = {
        "world_size": 1,
        "model": "cnn",
        "samples_per_s": 64 / 0.035,
        "batch": {"per_rank": 64, "global": 64},
        "threads_per_process": threads,
        "contention": {"foreign_cpu_share": foreign_share},
        "steps": {"ranks": [{"rank": 0, **phases}]},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


@pytest.mark.parametrize(
    "threads, share, said",
    [
        (1, 0.01, None),
        (2, 0.01, "measured with 2 threads in its one process (a worker of an N-process run on these cores gets "),
        (1, 0.57, "measured under contention (other processes used 57% of the CPUs, above 10%: its step includes"),
    ],
)
def test_run_warning_says_why_a_projection_is_optimistic(tmp_path, threads, share, said):
    run_dir = _measured_run(tmp_path / "run", threads, share)
    warning = run_warning(run_dir)
    assert warning is None if said is None else said in warning and warning.endswith("the projection is optimistic")
    assert run_warning(run_dir, threshold=0.6) is None or threads > 1  # the threshold is the caller's to set


def test_projecting_a_contended_multithreaded_run_warns_in_one_line(tmp_path):
    clean = _measured_run(tmp_path / "clean", threads=1, foreign_share=0.01)
    result = run_cli("project", "--run", str(clean), "--link", "10gbe", "--max-workers", "4", cwd=tmp_path)
    check_ok(result)
    assert "warning" not in result.stderr

    busy = _measured_run(tmp_path / "busy", threads=2, foreign_share=0.57)
    result = run_cli("project", "--run", str(busy), "--link", "10gbe", "--max-workers", "4", cwd=tmp_path)
    check_ok(result)
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"ignite-ddl: warning: the run {busy} was measured under ")
    assert "57% of the CPUs" in warnings[0] and "and with 2 threads in its one process" in warnings[0]
    assert "ring all-reduce" in result.stdout  # it still projects: a warning, not a refusal


def test_nvidia_resnet50_validation_recomputes():
    result = validate_nvidia_resnet50()
    assert set(result["cases"]) == {"TF32", "AMP"}
    assert (
        NVIDIA_RESNET50["cases"]["TF32"]["speedup_8"] == 7.72 and NVIDIA_RESNET50["cases"]["AMP"]["speedup_8"] == 6.72
    )
    for name, case in result["cases"].items():
        assert 1 < case["predicted_speedup"] <= 8
        assert math.isfinite(case["speedup_error"]) and math.isfinite(case["throughput_error"])
        assert case["speedup_error"] == pytest.approx(case["predicted_speedup"] / case["published_speedup"] - 1)
        assert 0 < case["utilisation"] < 1
        # calibrated: one GPU's compute per step is the published one, 256 images at the 1-GPU throughput
        published = NVIDIA_RESNET50["cases"][name]["samples_per_s_1"]
        assert case["compute_s"] == pytest.approx(256 / published)
    assert result["grad_bytes"] == pytest.approx(25.6e6 * 4)


VALIDATION_SCRIPT = Path(__file__).parents[1] / "benchmarks" / "projection_validation.py"
# One round of the validation, as small as still gives every run steps past the 5 warm-up iterations.
TINY_VALIDATION = ["--repeats", "1", "--rerun-contended", "0", "--train-size", "512", "--epochs", "1"]


@pytest.mark.slow
@pytest.mark.distributed
def test_validation_against_this_machine_runs(tmp_path):
    out = tmp_path / "validation"
    result = run(
        [sys.executable, str(VALIDATION_SCRIPT), *TINY_VALIDATION, "--batch-per-worker", "32", "--output-dir", str(out)]
    )
    check_ok(result)
    data = json.loads((out / "validation.json").read_text())
    assert data["workload"]["batch_per_worker"] == 32 and data["workload"]["repeats"] == 1
    (record,) = data["rounds"]
    assert record["link"]["alpha_s"] >= 0 and record["link"]["beta_Bps"] > 0
    measured = record["measured_2"]
    assert measured["step_s"] == pytest.approx(2 * 32 / measured["samples_per_s"])
    threads = {"one_process_matched_threads": data["threads_per_process_at_2"], "one_process_all_cores": None}
    for kind, wanted_threads in threads.items():
        compared = record[kind]
        if wanted_threads is not None:
            assert compared["threads"] == wanted_threads
        # the projected N = 2 is the model's, from the 1-process run's compute and the round's fitted link
        compute = Compute(**compared["compute"])
        row = project(compute, Link(**record["link"]), max_workers=2).row(2)
        assert compared["projected_2_samples_per_s"] == pytest.approx(row["ring_samples_per_s"])
        assert compared["throughput_error"] == pytest.approx(
            compared["projected_2_samples_per_s"] / measured["samples_per_s"] - 1
        )
        assert compared["step_error"] == pytest.approx(compared["projected_2_step_s"] / measured["step_s"] - 1)
        assert (out / f"{kind}-r0" / "summary.json").exists()
    assert data["median"]["rounds"] == 1
    assert (
        data["median"]["one_process_all_cores"]["throughput_error"]
        == record["one_process_all_cores"]["throughput_error"]
    )
    assert "projected from" in result.stdout and "median throughput error over all rounds (1)" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--model", "no-such-model"], ["--batch-per-worker", "0"]])
def test_validation_refuses_bad_input_in_one_line(tmp_path, argv):
    out = tmp_path / "validation"
    result = run([sys.executable, str(VALIDATION_SCRIPT), *argv, "--output-dir", str(out)])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("projection_validation.py: error: "), result.stderr
    assert not out.exists()


def test_the_model_and_the_package_import_no_torch():
    # the command line reads the link presets at start-up: neither torch nor matplotlib may come with them
    for module in ("ignite_ddl.predict.projection.model", "ignite_ddl.predict.projection"):
        code = f"import sys, {module}; print('torch' in sys.modules, 'matplotlib' in sys.modules)"
        found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert found.split() == ["False", "False"], (module, found)


def test_the_projection_package_does_not_train():
    # the projection sits below sweeps and labs: it reads the trainer's model and dataset definitions, never
    # trains (the validation that trains is benchmarks/projection_validation.py)
    package = Path(__file__).parents[1] / "ignite_ddl" / "projection"
    forbidden = ("ignite_ddl.trainer.run", "ignite_ddl.sweep", "ignite_ddl.labs", "ignite_ddl.cli", "ignite_ddl.colab")
    for path in package.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
        assert not [m for m in imported if m.startswith(forbidden)], (path.name, sorted(imported))
