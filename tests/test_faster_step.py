"""A faster step, measured honestly, with real gloo ranks and a real torch.compile (Inductor) on CPU: compiled runs
follow eager ones and keep compilation out of the throughput, a recompilation is counted and its reason said; DDP's
communication hooks send the bytes they promise and train alike; the communication timing agrees with DDP's own
statistics; what cannot run is refused before anything starts."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import run_cli
from ignite.engine import Engine, Events

from ignite_ddl import TrainConfig, train
from ignite_ddl.measure.recorder import format_steps
from ignite_ddl.predict.hook_cost import ddp_buckets, hook_cost
from ignite_ddl.trainer.run import TrainingRun
from ignite_ddl.trainer.strategies import unwrap

COMMON = {
    "model": "mlp",
    "train_size": 512,
    "val_size": 64,
    "batch_size": 32,
    "epochs": 1,
    "lr": 0.05,
    "progress": False,
    "measure_flops": False,
    "checkpoints": True,
    "best_model": False,
}
SHRUNK_ITERATION = 12  # the iteration whose batch the tests halve: a shape the model has not seen


def _shrink_and_keep_losses(run: TrainingRun) -> None:
    """On every rank: the batch of iteration SHRUNK_ITERATION loses half its samples (a new input shape), and each
    iteration's loss is kept (:func:`_keep_losses`)."""

    def shrink(engine: Engine) -> None:
        x, y = engine.state.batch
        engine.state.batch = (x[: len(x) // 2], y[: len(y) // 2])

    # GET_BATCH_COMPLETED fires before the iteration's count goes up: its count is the iteration before.
    run.trainer.add_event_handler(Events.GET_BATCH_COMPLETED(once=SHRUNK_ITERATION - 1), shrink)
    _keep_losses(run)


def _keep_losses(run: TrainingRun) -> None:
    """On every rank each iteration's loss is kept; rank 0 writes them to losses.json at the end."""
    losses: list[float] = []

    def keep(engine: Engine) -> None:
        losses.append(engine.state.output["loss"])

    def write(engine: Engine) -> None:
        import ignite.distributed as idist

        if idist.get_rank() == 0:
            (Path(run.config.output_dir) / "losses.json").write_text(json.dumps(losses))

    run.trainer.add_event_handler(Events.ITERATION_COMPLETED, keep)
    run.trainer.add_event_handler(Events.COMPLETED, write)


def _csv(out: Path, rank: int = 0) -> list[dict[str, str]]:
    with open(out / f"steps_rank{rank}.csv") as f:
        return list(csv.DictReader(f))


def _weights(summary: dict) -> dict[str, torch.Tensor]:
    return torch.load(summary["last_checkpoint"], weights_only=True)["model"]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


# Inductor fuses and reorders float32 arithmetic: the compiled losses differ from eager ones in the last digits,
# growing with the steps (measured: 1.05e-7 relative at worst over the 16 steps, 1 and 2 processes, torch 2.14.1).
LOSS_TOLERANCE = 1e-5


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("nproc", [1, 2])
def test_a_compiled_run_follows_eager_and_keeps_compilation_apart(tmp_path, nproc):
    config = {**COMMON, "nproc_per_node": nproc, "warmup_iters": 0}
    eager = train(TrainConfig(output_dir=str(tmp_path / "eager"), **config), setup=_shrink_and_keep_losses)
    compiled = train(
        TrainConfig(output_dir=str(tmp_path / "compiled"), compile=True, **config), setup=_shrink_and_keep_losses
    )
    losses = [json.loads((tmp_path / name / "losses.json").read_text()) for name in ("eager", "compiled")]
    assert len(losses[0]) == len(losses[1]) == compiled["iterations"]
    worst = max(abs(a - b) / abs(a) for a, b in zip(*losses))
    assert worst < LOSS_TOLERANCE, worst
    assert eager["steps"]["compile"] is None
    steps = compiled["steps"]
    cost = steps["compile"]
    # The first compilation: timed apart, never in the steady window (no fixed warm-up here: --warmup-iters 0).
    assert cost["compile_s"] > 0 and cost["iterations"][0] == 1
    first = len(cost["iterations"]) - cost["recompilations"]
    assert steps["steady"]["first_measured_iteration"] > first
    assert eager["steps"]["steady"]["first_measured_iteration"] >= 1
    # The first compilation's iterations are also measured apart, as the warm-up phase beside the steady one.
    phase = steps["warmup_phase"]
    assert (phase["cause"], phase["first_iteration"], phase["last_iteration"]) == ("compile", 1, first)
    assert phase["step_s_p50"] > steps["global"]["step_s_p50"] and eager["steps"]["warmup_phase"] is None
    # The shrunk batch compiled the model again: counted, its reason said, and its iteration left out.
    assert cost["recompilations"] == 1 and SHRUNK_ITERATION in cost["iterations"]
    assert any("size mismatch" in reason for reason in cost["reasons"]), cost["reasons"]
    assert "recompiled 1 time(s): shapes changed" in format_steps(steps)
    rows = _csv(tmp_path / "compiled")
    assert [int(r["iteration"]) for r in rows if r["compiled"] == "1"] == cost["iterations"]
    measured = [r for r in rows if r["warmup"] == "0" and r["compiled"] == "0"]
    assert sum(r["iterations"] for r in steps["ranks"]) == nproc * len(measured)
    # Evaluation and checkpoints use the model itself: the same names, eager.
    assert _weights(compiled).keys() == _weights(eager).keys()
    assert compiled["val_accuracy"] is not None


@pytest.mark.slow
@pytest.mark.distributed
def test_a_compiled_fsdp_run_follows_eager_fsdp(tmp_path):
    # FSDP compiles each unit before sharding it: the toy model's two Linears, of different shapes, are two units (the
    # MLP's three cost 10 s more of compilation, 50 s against 40 s on the busy 2-core VM). No shrunk batch: its
    # recompilation of every unit would only add compilation time (the DDP test above covers recompilations).
    config = {**COMMON, "model": "toy", "strategy": "fsdp", "nproc_per_node": 2, "warmup_iters": 0}
    eager = train(TrainConfig(output_dir=str(tmp_path / "eager"), **config), setup=_keep_losses)
    compiled = train(TrainConfig(output_dir=str(tmp_path / "compiled"), compile=True, **config), setup=_keep_losses)
    assert compiled["strategy"] == eager["strategy"] == "fsdp"
    losses = [json.loads((tmp_path / name / "losses.json").read_text()) for name in ("eager", "compiled")]
    assert len(losses[0]) == len(losses[1]) == compiled["iterations"] == eager["iterations"]
    worst = max(abs(a - b) / abs(a) for a, b in zip(*losses))
    assert worst < LOSS_TOLERANCE, worst  # measured: 1.1e-7 at worst
    assert compiled["final_train_loss"] < compiled["initial_train_loss"]
    cost = compiled["steps"]["compile"]
    # The units compile one after the other in the first iteration: one compilation, none counted as a recompilation.
    assert cost["compile_s"] > 0 and cost["iterations"] == [1] and cost["recompilations"] == 0, cost
    assert compiled["steps"]["steady"]["first_measured_iteration"] > 1
    measured = [r for r in _csv(tmp_path / "compiled") if r["warmup"] == "0"]
    assert measured and all(r["compiled"] == "0" for r in measured)
    # The checkpoint holds the model's own names (no _orig_mod.), gathered in full: the eager run's, trained alike
    # (measured: 6e-8, weights up to 0.35).
    assert _max_diff(_weights(compiled), _weights(eager)) < 1e-5
    assert compiled["val_accuracy"] is not None


HOOK_RUNS = {
    "none": {},
    "fp16": {"comm_hook": "fp16"},
    "bf16": {"comm_hook": "bf16"},
    # Several buckets: PowerSGD's all-reduces from completion callbacks must keep one order on every rank (gloo).
    # DDP fills a bucket until it reaches the cap, so one per weight matrix of the MLP needs a cap below its
    # smallest layer's bias and weight (1,290 parameters: ~5 KB): 0.001 MiB.
    "powersgd": {"comm_hook": "powersgd", "powersgd_rank": 1, "powersgd_start_iter": 2, "bucket_cap_mb": 0.001},
    # Rank 32: every matrix but the head (10x128, sent whole: PowerSGD's min_compression_rate) in 32-column factors.
    "powersgd_rank32": {
        "comm_hook": "powersgd",
        "powersgd_rank": 32,
        "powersgd_start_iter": 2,
        "bucket_cap_mb": 0.001,
    },
    "powersgd_late": {"comm_hook": "powersgd", "powersgd_start_iter": 1000},  # plain all-reduce all along
    "static_views": {"static_graph": True, "gradient_as_bucket_view": True},
    "static_graph": {"static_graph": True},
    "bucket_views": {"gradient_as_bucket_view": True},
}
# Max |weight difference| from the uncompressed run after 16 steps, by what the hook does to each gradient:
# a half-precision round trip (fp16: 11 significant bits, bf16: 8) scaled by the learning rate over the steps.
HOOK_TOLERANCE = {"fp16": 1e-3, "bf16": 1e-2, "powersgd_late": 0.0, "static_views": 1e-6}
# PowerSGD's accuracy cost: max |weight difference| from the uncompressed run / max |weight| of it, after 16 steps.
# Measured (2 ranks, torch 2.15, busy 2-core VM): rank 1 0.129 in each of 6 runs (the hook's random start is
# seeded; rank 2 0.123, 4 0.050, 8 0.044, 16 0.031), rank 32 0.011-0.0126 over 4 runs, powersgd_late 0, bf16 0.0066.
# Sending nothing at all (the initial weights) gives 0.51: a bound at 0.2 fails a compression that crude. Rank 32 is
# not exact although a step's gradient matrices have rank <= 32 (32 samples): warm start computes P from the last
# step's Q, and the new gradient's range comes out ill-conditioned.
POWERSGD_BOUND = 0.2
POWERSGD_RANK32_BOUND = 0.03


@pytest.fixture(scope="module")
def hook_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hooks")


def _keep_initial_weights(run: TrainingRun) -> None:
    """Rank 0 saves the weights as training starts (DDP broadcast rank 0's) to initial.pt."""
    import ignite.distributed as idist

    if idist.get_rank() == 0:
        torch.save(unwrap(run.model).state_dict(), Path(run.config.output_dir) / "initial.pt")


@pytest.fixture(scope="module")
def hook_runs(hook_root: Path) -> dict[str, dict]:
    return {
        name: train(
            TrainConfig(nproc_per_node=2, output_dir=str(hook_root / name), warmup_iters=2, **{**COMMON, **options}),
            setup=_keep_initial_weights if name == "none" else None,
        )
        for name, options in HOOK_RUNS.items()
    }


def _relative_diff(a: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    return _max_diff(a, reference) / max(t.abs().max().item() for t in reference.values())


def _bytes_per_step(summary: dict) -> float:
    (value,) = {r["comm_bytes_per_step"] for r in summary["steps"]["ranks"]}
    return value


@pytest.mark.slow
@pytest.mark.distributed
def test_each_comm_hook_sends_what_it_promises_and_trains_alike(hook_runs, hook_root):
    reference = _weights(hook_runs["none"])
    param_bytes = sum(t.numel() * t.element_size() for t in reference.values())
    assert _bytes_per_step(hook_runs["none"]) == param_bytes
    assert _bytes_per_step(hook_runs["fp16"]) == param_bytes / 2
    assert _bytes_per_step(hook_runs["bf16"]) == param_bytes / 2
    assert _bytes_per_step(hook_runs["powersgd_late"]) == param_bytes
    assert _bytes_per_step(hook_runs["static_views"]) == param_bytes
    # PowerSGD after its start: rank-1 factors of each matrix, the biases whole: far less than half.
    rows = _csv(hook_root / "powersgd")
    # DDP reduces the first iteration in one bucket, then rebuilds its buckets in the order backward made them.
    assert int(rows[0]["buckets"]) == 1 and min(int(r["buckets"]) for r in rows[1:]) == 3
    compressed = [int(r["comm_bytes"]) for r in rows if int(r["iteration"]) > 2]
    assert compressed and max(compressed) < param_bytes / 20
    assert all(int(r["comm_bytes"]) == param_bytes for r in rows if int(r["iteration"]) <= 2)
    for name, tolerance in HOOK_TOLERANCE.items():
        assert _max_diff(_weights(hook_runs[name]), reference) <= tolerance, name
    # PowerSGD changes the trajectory (low-rank gradients, with error feedback): it still learns.
    losses = [r["train_loss"] for r in hook_runs["powersgd"]["history"]]
    powersgd = hook_runs["powersgd"]
    assert math.isfinite(losses[-1]) and powersgd["final_train_loss"] < powersgd["initial_train_loss"]
    # ... at a cost in the weights, bounded (POWERSGD_BOUND), and far below dropping every update...
    rank1 = _relative_diff(_weights(powersgd), reference)
    assert rank1 <= POWERSGD_BOUND, rank1
    initial = torch.load(hook_root / "none" / "initial.pt", weights_only=True)
    assert _relative_diff(initial, reference) > 2 * POWERSGD_BOUND
    # ... and much smaller with a rank near the gradients' own, sending 15 % of the bytes.
    rank32 = _relative_diff(_weights(hook_runs["powersgd_rank32"]), reference)
    assert rank32 <= POWERSGD_RANK32_BOUND and rank32 < rank1 / 4, (rank32, rank1)
    assert _bytes_per_step(hook_runs["powersgd_rank32"]) < param_bytes / 5
    # The step-time model's hook cost lays the gradients out in DDP's buckets and counts its all-reduces' bytes as
    # the hook does: the same as these real runs recorded, every (compressed) step.
    for name in ("none", "fp16", "bf16"):  # none: DDP's own copies and division, and the whole bucket sent
        predicted = hook_cost(TrainConfig(nproc_per_node=2, **{**COMMON, **HOOK_RUNS[name]}), threads=1)
        assert sum(sum(b.allreduce_bytes) for b in predicted) == _bytes_per_step(hook_runs[name]), name
        assert all(b.compute_s > 0 for b in predicted), name
    for name in ("powersgd", "powersgd_rank32"):
        config = TrainConfig(nproc_per_node=2, **{**COMMON, **HOOK_RUNS[name]})
        predicted = hook_cost(config, threads=1)
        rows = _csv(hook_root / name)
        assert len(predicted) == len(ddp_buckets(config)) == min(int(r["buckets"]) for r in rows[1:]), name
        steady = {int(r["comm_bytes"]) for r in rows if int(r["iteration"]) > 2}
        assert steady == {sum(sum(b.allreduce_bytes) for b in predicted)}, (name, steady, predicted)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("name", ["static_graph", "bucket_views"])
def test_static_graph_and_bucket_views_each_alone_record_the_default_figures(hook_runs, name):
    default, run = hook_runs["none"]["steps"], hook_runs[name]["steps"]
    assert _bytes_per_step(hook_runs[name]) == _bytes_per_step(hook_runs["none"])
    assert [r["buckets_per_step"] for r in run["ranks"]] == [r["buckets_per_step"] for r in default["ranks"]]
    for rank in run["ranks"]:
        assert rank["comm_s_mean"] > 0 and 0 <= rank["exposed_comm_s_mean"] <= rank["comm_s_mean"], rank
    if default["ddp_crosscheck"] is not None:
        checks = run["ddp_crosscheck"]
        assert checks is not None and len(checks) == len(default["ddp_crosscheck"])
        assert all(c is not None and c.keys() == d.keys() for c, d in zip(checks, default["ddp_crosscheck"]))
    assert _max_diff(_weights(hook_runs[name]), _weights(hook_runs["none"])) <= HOOK_TOLERANCE["static_views"]


@pytest.mark.slow
@pytest.mark.distributed
def test_the_comm_timing_agrees_with_ddp_own_statistics(hook_runs):
    for name in ("none", "fp16", "powersgd"):
        checks = hook_runs[name]["steps"]["ddp_crosscheck"]
        assert checks is not None and len(checks) == 2, name
        for check in checks:
            # DDP's span runs from the first bucket's launch to the end of finalize_backward (the reduced buckets
            # copied into .grad): ours, the union of the buckets' intervals, is at most that and, with one
            # bucket and nothing between, most of it. Measured on the 2-core VM over the 68 runs of
            # experiments/faster_step: 0.81-0.97 (0.88-0.94 here with other processes busy).
            assert 0.6 <= check["ratio"]["comm"] <= 1.05, (name, check)
            # The whole backward: DDP's also holds the loss, which ours counts in the forward (measured 0.997-1.0;
            # 0.88 once in the whole suite on two workers, where the loss took longer beside the other tests).
            assert 0.85 <= check["ratio"]["backward"] <= 1.05, (name, check)
            assert check["iterations"] == hook_runs[name]["iterations"] - 1  # DDP never folds in the last one


@pytest.mark.parametrize(
    "args, message",
    [
        (["--compile", "--compile-mode", "fastest"], "unknown compile_mode 'fastest'"),
        (["--nproc-per-node", "2", "--comm-hook", "powersgd", "--powersgd-rank", "0"], "powersgd_rank must be >= 1"),
        (["--nproc-per-node", "2", "--comm-hook", "zip"], "unknown comm_hook 'zip'"),
        (
            ["--nproc-per-node", "2", "--strategy", "fsdp", "--comm-hook", "bf16"],
            "--comm-hook bf16: DDP option(s), for --strategy ddp",
        ),
        (["--nproc-per-node", "2", "--powersgd-start-iter", "1"], "powersgd_start_iter must be >= 2"),
    ],
)
def test_what_cannot_run_is_refused_in_one_line(tmp_path, args, message):
    result = run_cli("train", *args, "--output-dir", str(tmp_path / "run"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "run" / "logs").exists()


def test_compile_without_a_cpp_compiler_is_refused(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    result = run_cli("train", "--compile", "--output-dir", str(tmp_path / "run"), env={"PATH": str(empty), "CXX": ""})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "ignite-ddl: error: --compile on CPU needs a C++ compiler for Inductor's kernels (g++ or clang++; or set "
        "CXX): none found (Debian/Ubuntu: apt-get install g++)"
    )


# -- the report, on hand-made records


def _steps(compiled: dict | None = None, settled: bool = True, comm_bytes: float = 1e6) -> dict:
    rank = {"rank": 0, "iterations": 50, "comm_bytes_per_step": comm_bytes, "exposed_comm_s_mean": 0.004}
    return {
        "global": {"step_s_p50": 0.5},
        "ranks": [rank, {**rank, "rank": 1}],
        "steady": {"settled": settled},
        "compile": compiled,
        "ddp_crosscheck": [{"ratio": {"comm": 0.9, "backward": 0.97}}] * 2,
    }


def test_the_report_puts_compilation_and_hooks_beside_what_they_buy(tmp_path):
    from test_report import record

    from ignite_ddl.report import load, write_report

    compiled = {
        "compile_s": 40.0,
        "recompilations": 2,
        "reasons": ["tensor 'x' size mismatch at index 0. expected 64, actual 32"],
    }
    records = []
    for repeat, (eager, fast, hooked) in enumerate(
        [(100.0, 125.0, 104.0), (102.0, 127.0, 106.0), (98.0, 123.0, 102.0)]
    ):
        records.append(record(0, repeat, eager, procs=2, summary={"steps": _steps()}))
        records.append(
            record(
                1,
                repeat,
                fast,
                procs=2,
                grid={"compile": True},
                config={"compile": True},
                summary={"steps": _steps(compiled, settled=repeat != 1)},
            )
        )
        records.append(
            record(
                2,
                repeat,
                hooked,
                procs=2,
                grid={"comm_hook": "bf16"},
                config={"comm_hook": "bf16"},
                summary={"steps": _steps(comm_bytes=5e5), "val_accuracy": 0.48},
            )
        )
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    analysis = load(tmp_path)
    fast = analysis.config("cfg001")
    (versus,) = fast.versus
    assert versus["plain"] == "cfg000" and versus["speedup"].value == pytest.approx(1.25)
    # 64 samples a step: 0.640 s eager, 0.512 s compiled, 40 s of compilation paid back after 312.5 steps.
    assert versus["payback_iterations"] == pytest.approx(312.5)
    kinds = {(f.kind, f.config) for f in analysis.flags}
    assert ("recompiled", "cfg001") in kinds and ("unsettled", "cfg001") in kinds
    assert ("recompiled", "cfg000") not in kinds
    report = write_report(tmp_path).read_text()
    assert "cfg001 (compile=True) vs cfg000: +25 % samples/s" in report
    assert "pays its 40 s of compilation back after 312 iterations" in report
    assert "recompiled 2 time(s): shapes changed" in report
    assert "cfg002 (comm_hook=bf16) vs cfg000: +4 % samples/s" in report
    assert "bytes per step 1 -> 0.5 MB" in report and "val accuracy 0.500 -> 0.480" in report
    assert "| cfg000 | 0.9 | 0.97 |" in report  # ours against DDP's own statistics
