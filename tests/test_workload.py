"""Your own training, measured: workloads by import path (the example module of examples/own_workload through train
and sweep, 1 and 2 processes, DDP and FSDP), the built-in GPT workload (its loss falls, FSDP agrees with DDP,
activation checkpointing keeps the loss and lowers the peak memory, its FLOPs formula agrees with the counter, a sweep
of it is judged on quality by its validation loss), and every bad workload refused in one line with exit status 2
before any process starts."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as plugin_metadata

from ignite_ddl.cli import main
from ignite_ddl.core.steps_csv import read_steps
from ignite_ddl.measure.flops import count_step_flops
from ignite_ddl.report import load, write_report
from ignite_ddl.trainer.gpt import lm_loss, make, stream_entropy

EXAMPLE = Path(__file__).parents[1] / "examples" / "own_workload"
# Small enough for a busy 2-core machine: 32-token sequences of a 64-token vocabulary.
TINY_GPT = [
    "--workload-args=n_layer=2",
    "--workload-args=d_model=32",
    "--workload-args=seq_len=32",
    "--workload-args=vocab=64",
]
QUICK = ["--epochs=1", "--no-checkpoints", "--no-best-model", "--no-progress", "--overwrite"]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


BAD = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset
    from ignite_ddl.trainer.workload import Workload

    VALUE = 3

    def _data(n):
        return TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)))

    def boom():
        raise ValueError("the data folder is not mounted")

    def wrong_type():
        return {"model": nn.Linear(4, 2)}

    def bad_field():
        return Workload(model="linear", train=_data(64), val=_data(8))

    def no_params():
        return Workload(model=nn.ReLU(), train=_data(64), val=_data(8))

    def tiny():
        return Workload(model=nn.Linear(4, 2), train=_data(4), val=_data(8))

    def no_loss():
        return Workload(model=nn.Linear(4, 2), train=_data(64), val=_data(8), training_step=lambda m, b: None)

    def _own_step(model, optimizer, device):
        def process_function(engine, batch):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(batch[0]), batch[1])
            loss.backward()
            optimizer.step()
            return {"loss": loss.item()}
        return process_function

    def own_step():
        return Workload(model=nn.Linear(4, 2), train=_data(64), val=_data(8), make_process_function=_own_step)

    def own_no_loss():
        return Workload(
            model=nn.Linear(4, 2), train=_data(64), val=_data(8),
            make_process_function=lambda model, optimizer, device: lambda engine, batch: {"accuracy": 1.0},
        )
    """
)


CHECK_THEN_FORK = """
import os, torch
from ignite_ddl.core.config import TrainConfig
from ignite_ddl.trainer.workload import check_workload

check_workload(TrainConfig(workload="gpt", workload_args={"train_sequences": 16}, batch_size=8), 1)
x = torch.ones(3, requires_grad=True)
(2 * x).sum().backward()  # a run in this process
pid = os.fork()  # then ranks forked, as the launcher forks them
if pid == 0:
    try:
        (2 * torch.ones(3, requires_grad=True)).sum().backward()
        print("forked rank: backward ok", flush=True)
    except RuntimeError as e:
        print("forked rank:", e, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_a_check_on_fake_tensors_leaves_this_process_able_to_fork_ranks():
    """The pre-check runs a workload's step on fake tensors; a forward on fake tensors followed by any backward in
    the same process leaves torch refusing autograd in every child forked from it after. The check runs in a
    forked child of its own, so ranks forked after a check and a run here still train."""
    result = subprocess.run([sys.executable, "-c", CHECK_THEN_FORK], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "forked rank: backward ok" in result.stdout, result.stdout


def test_each_bad_workload_is_refused_in_one_line_with_status_2(tmp_path, capsys):
    """Checked in the launching process: nothing starts, nothing is written, one line says what is wrong."""
    (tmp_path / "badwork.py").write_text(BAD)
    cases = [
        ("nosuchmodule_x1:make", "no module named 'nosuchmodule_x1'"),
        ("badwork:nothing", "has no 'nothing'"),
        ("badwork:VALUE", "VALUE is a int, not a function"),
        ("badwork:boom", "workload badwork:boom raised ValueError: the data folder is not mounted"),
        ("badwork:wrong_type", "returned a dict, not an ignite_ddl.trainer.workload.Workload"),
        ("badwork:bad_field", "field 'model' must be a torch.nn.Module, got str"),
        ("badwork:no_params", "the model has no parameters"),
        ("badwork:tiny", "the training set holds 4 samples, fewer than one global batch of 8"),
        ("badwork:no_loss", "its step returned NoneType, not a scalar loss"),
        ("badwork", "is not module:function"),
        # A whole process_function of one's own: a loss it must return, the suite's own step's options refused.
        ("badwork:own_no_loss", "its process_function returned dict, not a loss"),
        ("badwork:own_step --accumulate=2", "--accumulate 2 splits the suite's own step into micro-batches"),
        ("badwork:own_step --amp=bf16", "--amp bf16 wraps the suite's own step in autocast"),
    ]
    for case, words in cases:
        path, *extra = case.split()
        out = tmp_path / "out" / case.replace(":", "_").replace(" ", "")
        argv = ["train", f"--workload={path}", f"--workload-dir={tmp_path}", "--batch-size=8", f"--output-dir={out}"]
        assert main([*argv, *extra]) == 2, case
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, (case, err)
        assert not out.exists(), f"{case}: something was written"


@pytest.mark.slow
@pytest.mark.distributed
def test_the_example_workload_through_train_and_sweep(tmp_path):
    """examples/own_workload: `train` from its folder with one process (found in the working folder), then a sweep
    of it with 2 processes, DDP and FSDP: every record complete, its figures and its workload argument in the
    report and in HParams, and the module and file that ran recorded."""
    out = tmp_path / "train"
    result = run_cli(
        "train", "--workload=bench:make", "--workload-args=width=32", "--max-iters=8", "--batch-size=32",
        f"--output-dir={out}", *QUICK, cwd=EXAMPLE, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    summary = _summary(out)
    assert summary["workload"]["file"] == str(EXAMPLE / "bench.py") and summary["workload"]["sample_unit"] == "rows"
    assert summary["workload"]["args"] == {"width": 32} and summary["val_accuracy"] is None
    assert summary["val_loss"] is not None and summary["flops"]["per_sample"]["total"] > 0
    assert "rows/s" in result.stdout
    # its batches are mappings: every step counted by the workload's samples_in (32 rows), not the mapping's keys
    assert {row["samples"] for row in read_steps(out / "steps_rank0.csv")} == {32}

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""
            name: own
            workload: bench:make
            base: {{nproc_per_node: 2, epochs: 1, max_iters: 6, batch_size: 32, warmup_iters: 2,
                    workload_dir: {EXAMPLE}}}
            grid: {{strategy: [ddp, fsdp], workload_args.width: [16]}}
            output_dir: {tmp_path / "sweep"}
            """
        )
    )
    result = run_cli("sweep", str(spec), "--on-busy=run", "--busy-stop-after=0", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "sweep" / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["completed", "completed"]
    assert [r["summary"]["strategy"] for r in records] == ["ddp", "fsdp"]
    assert all(r["config"]["workload_args"] == {"width": 16} for r in records)
    assert all(r["summary"]["samples_per_s"] > 0 and r["summary"]["memory"] is not None for r in records)
    report = (tmp_path / "sweep" / "report.md").read_text()
    assert "workload_args.width" in report and "samples/s" in report
    assert f"bench:make: bench.make from {EXAMPLE / 'bench.py'} (1 sample = 1 rows)" in report  # the code that ran
    root = EventAccumulator(str(tmp_path / "sweep" / "tb_hparams"))
    root.Reload()
    content = root.PluginTagToContent(plugin_metadata.PLUGIN_NAME)[plugin_metadata.EXPERIMENT_TAG]
    experiment = plugin_metadata.parse_experiment_plugin_data(content)
    assert "workload_args.width" in {h.name for h in experiment.hparam_infos}


@pytest.mark.slow
@pytest.mark.distributed
def test_the_example_sweep_runs_predicted_like_a_built_in(tmp_path):
    """examples/own_workload/sweep.yaml as shipped, with prediction on (the default outside the suite), cut short:
    the plan builds the workload with its model on the meta device, so every configuration's memory is predicted
    and the 2-process configurations' step time too, from the one-process run (the sweep used to die of the
    step-time model's trace after the first round's one-process runs, exit 1, then ran its workload unpredicted)."""
    out = tmp_path / "sweep"
    cut = ["--repeats=1", "--grid=workload_args.width=16", "--set=max_iters=6", "--set=batch_size=32"]
    result = run_cli(
        "sweep", str(EXAMPLE / "sweep.yaml"), "--predict", *cut, "--set=warmup_iters=2", f"--output-dir={out}",
        cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    layouts = sorted((r["config"]["nproc_per_node"], r["config"]["strategy"]) for r in records)
    assert layouts == [(1, "ddp"), (2, "ddp"), (2, "fsdp")]  # the example's grid less its exclusion, width 16
    assert all(r["status"] == "completed" and r["summary"]["samples_per_s"] > 0 for r in records), records
    for r in records:
        prediction = r["prediction"]
        assert prediction["problem"] is None and prediction["peak_bytes"] > prediction["parts"]["runtime"], r
        assert prediction["parts"]["params"] > 0 and prediction["parts"]["data"] > 0, prediction
    model = json.loads((out / "sweep.json").read_text())["step_model"]
    several = {str(r["index"]) for r in records if r["config"]["nproc_per_node"] == 2}
    assert set(model["configurations"]) == several
    for predicted in model["configurations"].values():
        assert predicted["step_s"] is not None and predicted["step_s"] > 0, predicted
    assert "not predicted: " not in result.stdout.replace("not predicted: the C allocator", ""), result.stdout
    report = (out / "report.md").read_text()
    step_time = report.split("### Step time, predicted", 1)[1].split("###", 1)[0]
    assert "Not predicted" not in step_time and "| cfg001" in step_time and "| cfg002" in step_time, step_time


@pytest.mark.slow
@pytest.mark.distributed
def test_a_workloads_own_process_function_is_timed_per_rank_under_ddp(tmp_path):
    """The example with its own Ignite process function (own_step=true) on 2 gloo processes under DDP: every step of
    every rank recorded whole (data wait and step, not split into phases) with the workload's count of samples, the
    gradients all-reduced by DDP inside the user's backward (the communication timer saw bytes every step), and
    validation by its training_step."""
    out = tmp_path / "own"
    result = run_cli(
        "train", "--workload=bench:make", "--workload-args=width=16", "--workload-args=own_step=true",
        "--nproc-per-node=2", "--strategy=ddp", "--max-iters=6", "--batch-size=32", "--warmup-iters=2",
        f"--output-dir={out}", *QUICK, cwd=EXAMPLE, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    summary = _summary(out)
    assert summary["workload"]["step"] == "process_function" and summary["workload"]["args"]["own_step"] is True
    assert summary["val_loss"] is not None and math.isfinite(summary["final_train_loss"])
    for rank in (0, 1):
        rows = read_steps(out / f"steps_rank{rank}.csv")
        assert [r["iteration"] for r in rows] == list(range(1, 7)), rank
        assert all(r["samples"] == 16 and r["step_s"] > 0 and r["data_s"] >= 0 for r in rows), rank
        assert all(r["forward_s"] is None and r["backward_s"] is None for r in rows), rank  # the user's step, whole
        assert all(r["comm_bytes"] > 0 for r in rows), rank
    assert summary["samples_per_s"] > 0


@pytest.mark.slow
@pytest.mark.distributed
def test_gpt_loss_falls_and_fsdp_agrees_with_ddp(tmp_path):
    """30 seeded Adam steps on the token stream take the validation loss from ln(64) = 4.16 (nothing learnt) to
    below 2.5 (the stream's entropy is 1.21); FSDP, with each block a unit, ends within 0.5 % of DDP's losses."""
    runs = {}
    for strategy in ("ddp", "fsdp"):
        out = tmp_path / strategy
        result = run_cli(
            "train", "--workload=gpt", *TINY_GPT, "--nproc-per-node=2", f"--strategy={strategy}", "--max-iters=30",
            "--batch-size=32", "--optimizer=adam", "--lr=0.01", "--no-measure-flops", f"--output-dir={out}", *QUICK,
            timeout=600,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        runs[strategy] = _summary(out)
    ddp, fsdp = runs["ddp"], runs["fsdp"]
    assert ddp["initial_train_loss"] == pytest.approx(math.log(64), abs=0.1)
    assert stream_entropy() < ddp["val_loss"] < 2.5
    assert ddp["workload"]["units_per_s"] == pytest.approx(32 * ddp["samples_per_s"])
    for key in ("initial_train_loss", "final_train_loss", "val_loss"):
        assert fsdp[key] == pytest.approx(ddp[key], rel=5e-3), key


@pytest.mark.slow
@pytest.mark.distributed
def test_a_gpt_sweep_is_judged_on_quality_by_its_validation_loss(tmp_path):
    """A sweep of the GPT, 2 epochs, 2 repeats, at a learning rate that learns and one 300 times smaller that
    barely moves the loss from ln(64): the report's quality table shows val loss and perplexity, and the small
    learning rate learns worse by loss, beyond quality_margin_loss, and is never recommended."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""
            name: gpt_quality
            workload: gpt
            base: {{epochs: 2, batch_size: 32, optimizer: adam, warmup_iters: 2, workload_args.n_layer: 1,
                    workload_args.d_model: 32, workload_args.seq_len: 16, workload_args.vocab: 64,
                    workload_args.train_sequences: 256, workload_args.val_sequences: 64}}
            grid: {{lr: [0.003, 0.00001]}}
            repeats: 2
            min_repeats: 2
            output_dir: {tmp_path / "sweep"}
            """
        )
    )
    result = run_cli("sweep", str(spec), "--on-busy=run", "--busy-stop-after=0", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = tmp_path / "sweep"
    # Contended runs counted: a loss does not depend on what else the machine ran (the speed verdict may).
    report = write_report(out, include_contended=True).read_text()
    analysis = load(out, include_contended=True)
    learns, slow = analysis.config("cfg000"), analysis.config("cfg001")
    assert [len(c.val_losses) for c in (learns, slow)] == [2, 2] and learns.val_accuracy is not None
    assert learns.quality_by == slow.quality_by == "loss" and learns.quality == "reference"
    assert slow.quality == "learns worse", slow.quality_note
    assert slow.loss_difference.low > 0.02 * learns.val_loss and slow.val_loss > math.log(64) - 0.3
    assert analysis.verdicts[0].recommended != "cfg001"
    trade = report.split("### Speed and quality")[1].split("\n### ")[0]
    header = next(line for line in trade.splitlines() if line.startswith("| config |"))
    assert "| val loss | val ppl | vs reference, loss |" in header and "val acc" not in header
    row = next(line for line in trade.splitlines() if line.startswith("| cfg001 |"))
    assert "vs cfg000 | learns worse: validation loss +" in row and "perplexity" in row
    assert f"| {slow.perplexity:.3g} |" in row and "is judged by its validation loss" in trade


@pytest.mark.slow
@pytest.mark.distributed
def test_activation_checkpointing_keeps_the_loss_and_lowers_the_peak_memory(tmp_path):
    """A paired comparison, one process each: many short-width tokens per step (activations large, compute small);
    recomputing each block's activations in backward gives the same losses and a lower peak resident memory."""
    runs = {}
    shape = ["--workload-args=n_layer=8", "--workload-args=d_model=32", "--workload-args=n_head=2"]
    shape += ["--workload-args=seq_len=256", "--workload-args=vocab=64", "--workload-args=train_sequences=128"]
    for checkpointing in (False, True):
        out = tmp_path / str(checkpointing)
        result = run_cli(
            "train", "--workload=gpt", *shape, "--max-iters=4", "--warmup-iters=1", "--batch-size=64",
            "--activation-checkpointing" if checkpointing else "--no-activation-checkpointing", "--no-measure-flops",
            f"--output-dir={out}", *QUICK, timeout=600,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        runs[checkpointing] = _summary(out)
    plain, recomputed = runs[False], runs[True]
    assert recomputed["val_loss"] == pytest.approx(plain["val_loss"], rel=1e-5)
    assert recomputed["final_train_loss"] == pytest.approx(plain["final_train_loss"], rel=1e-5)
    peaks = [r["memory"]["max"]["peak_rss_bytes"] / 2**20 for r in (plain, recomputed)]
    assert peaks[1] < peaks[0], f"peak resident MiB without and with checkpointing: {peaks}"


def test_gpt_flops_formula_agrees_with_the_flop_counter():
    """PaLM's 6 N + 12 L T d per token against torch.utils.flop_counter on one step: within 5 % (the counter also
    counts the flash-attention backward's recomputation of the scores, 2 L T d per token, which the formula leaves
    out as model FLOPs do; everything else is the same matmuls)."""
    workload = make(n_layer=2, d_model=64, n_head=4, seq_len=64, vocab=256, train_sequences=4, val_sequences=1)
    x, y = workload.train[:2]  # type: ignore[index]
    counted = count_step_flops(workload.model, lambda m: lm_loss(m(x), y), 2)
    formula = workload.flops
    assert formula is not None
    assert formula.total == pytest.approx(counted.total, rel=0.05)
    assert formula.forward == pytest.approx(counted.forward, rel=1e-6)  # the forward matmuls exactly
    recompute = 2 * 2 * 64 * 64 * 64  # 2 L T d per token, 64 tokens
    assert counted.backward - formula.backward == pytest.approx(recompute, rel=1e-6)
    assert torch.isfinite(torch.tensor(counted.total))


def test_a_workload_argument_axis_is_the_column_that_tells_workloads_apart():
    """Two widths of one workload are two workloads; the grid's workload_args.width column already says which a row
    is, so the decision table has no workload column, and the workload's name leaves out the unused model."""
    from test_report import record

    from ignite_ddl.report import analyze
    from ignite_ddl.report.tables import decision_table

    records = [
        record(
            i, r, v,
            config={"workload": "gpt", "workload_args": {"d_model": width, "n_layer": 2}},
            grid={"workload_args.d_model": width},
        )
        for i, width in enumerate([64, 128]) for r, v in enumerate([99, 100, 101])
    ]  # fmt: skip
    analysis = analyze(records)
    assert len(analysis.verdicts) == 2 and not any(v.workload.startswith("model=") for v in analysis.verdicts)
    header, rows = decision_table(analysis)
    assert "workload" not in header and "workload_args.d_model" in header and len(rows[0]) == len(header)


def test_the_flops_table_gives_a_workloads_throughput_in_its_own_unit():
    """A GPT's runs count sequences; the report's FLOPs table also gives tokens/s (samples/s x 64), with the
    interval scaled alike, beside the MFLOPs per sample."""
    from test_report import record

    from ignite_ddl.report import analyze
    from ignite_ddl.report.tables import _flops_table

    workload = {"sample_unit": "tokens", "units_per_sample": 64}
    flops = {"per_sample": {"forward": 1e6, "backward": 2e6, "total": 3e6}}
    records = [
        record(0, r, v, config={"workload": "gpt"}, summary={"workload": workload, "flops": flops})
        for r, v in enumerate([99.0, 100.0, 101.0])
    ]
    header, rows = _flops_table(analyze(records))
    cell = rows[0][header.index("units/s")]
    assert cell.startswith("6400 tokens/s, ") and header.index("units/s") < header.index("MFLOPs per sample"), cell
