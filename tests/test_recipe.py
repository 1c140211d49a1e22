"""A training script's recipe beside the model: AdamW's weight-decay groups (nanoGPT's rule), the learning-rate
schedules against torch's and closed formulas, gradient clipping once per optimizer step after every micro-batch
(under AMP, on one process, and on 2 gloo ranks where DDP, ZeRO-1 and FSDP2 clip alike), a workload's own optimizer
and clipping with accumulation, the plan's trace of the same optimizer, and bad values refused in one line."""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from pathlib import Path

import pytest
import torch
from ignite.engine import Engine, Events
from torch import nn

from ignite_ddl import TrainConfig, train
from ignite_ddl.cli import main
from ignite_ddl.predict.memory import predict
from ignite_ddl.trainer.recipe import attach_schedule, build_optimizer, decay_groups, schedule_end, schedule_shape

SMALL = {
    "train_size": 256,
    "val_size": 64,
    "batch_size": 32,
    "epochs": 1,
    "warmup_iters": 1,
    "progress": False,
    "measure_flops": False,
    "best_model": False,
}
# nanoGPT's recipe on the suite's options: AdamW with decay on matrices, warm-up, cosine to a floor, clipping.
NANOGPT = {"optimizer": "adamw", "lr": 0.003, "weight_decay": 0.1, "warmup_epochs": 0.25, "lr_schedule": "cosine"}


class Tied(nn.Module):
    """An embedding, a LayerNorm, a linear layer with bias, a convolution, and a head tied to the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.norm = nn.LayerNorm(4)
        self.fc = nn.Linear(4, 4)
        self.conv = nn.Conv1d(4, 4, 3)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight


def test_adamw_decays_matrices_and_embeddings_only_each_parameter_once():
    model = Tied()
    model.fc.bias.requires_grad_(False)  # frozen: in no group
    names = {id(p): n for n, p in model.named_parameters()}
    groups = decay_groups(model, 0.1)
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert sorted(names[id(p)] for p in groups[0]["params"]) == ["conv.weight", "embed.weight", "fc.weight"]
    assert sorted(names[id(p)] for p in groups[1]["params"]) == ["conv.bias", "norm.bias", "norm.weight"]
    optimizer = build_optimizer(model, TrainConfig(optimizer="adamw", lr=0.01, weight_decay=0.1))
    assert isinstance(optimizer, torch.optim.AdamW)
    assert [(g["weight_decay"], g["lr"]) for g in optimizer.param_groups] == [(0.1, 0.01), (0.0, 0.01)]
    # Decoupled decay on the first group only: one step with zero gradients shrinks matrices, leaves vectors.
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    assert torch.equal(model.norm.weight, before["norm.weight"]) and torch.equal(model.conv.bias, before["conv.bias"])
    torch.testing.assert_close(model.fc.weight, before["fc.weight"] * (1 - 0.01 * 0.1))
    # Other optimizers keep torch's plain behaviour: one group of every parameter.
    sgd = build_optimizer(model, TrainConfig(optimizer="sgd", weight_decay=0.1))
    assert len(sgd.param_groups) == 1 and len(sgd.param_groups[0]["params"]) == len(list(model.parameters()))


def test_a_workloads_optimizer_gives_an_optimizer_or_the_groups_the_options_build_over():
    model = Tied()
    config = TrainConfig(optimizer="adamw", lr=0.01, weight_decay=0.1)
    made = torch.optim.SGD(model.parameters(), lr=0.5)
    assert build_optimizer(model, config, lambda m: made) is made
    groups = build_optimizer(
        model, config, lambda m: [{"params": m.fc.parameters(), "lr": 0.2}, {"params": m.norm.parameters()}]
    )
    assert isinstance(groups, torch.optim.AdamW)
    assert [(g["lr"], g["weight_decay"], len(g["params"])) for g in groups.param_groups] == [
        (0.2, 0.1, 2),
        (0.01, 0.1, 2),
    ]
    with pytest.raises(TypeError, match="returned a dict, not an optimizer or parameter groups"):
        build_optimizer(model, config, lambda m: {"params": m.parameters()})


def _lrs(config: TrainConfig, epoch_length: int, group_lrs: tuple[float, ...] = (0.1,)) -> list[list[float]]:
    """The learning rate of each group at every iteration of ``config``'s schedule, as the trainer steps it."""
    optimizer = torch.optim.SGD([{"params": [nn.Parameter(torch.zeros(1))], "lr": lr} for lr in group_lrs])
    trainer = Engine(lambda engine, batch: None)
    scheduler = attach_schedule(trainer, optimizer, config, epoch_length)
    seen: list[list[float]] = []
    trainer.add_event_handler(
        Events.ITERATION_STARTED, lambda _: seen.append([g["lr"] for g in optimizer.param_groups])
    )
    trainer.run(range(epoch_length), max_epochs=config.epochs)
    assert (scheduler is None) == (config.lr_schedule in (None, "constant") and not config.warmup_epochs)
    return seen


def test_cosine_after_warm_up_follows_torchs_cosine_annealing_to_the_floor():
    lr, ratio, epoch_length = 0.1, 0.1, 10
    config = TrainConfig(lr=lr, epochs=3, warmup_epochs=0.5, lr_schedule="cosine", min_lr_ratio=ratio)
    seen = [group[0] for group in _lrs(config, epoch_length)]
    warmup, total = 5, 30
    assert seen[:warmup] == pytest.approx([lr * t / warmup for t in range(warmup)])  # linear from 0
    reference = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(reference, T_max=total - warmup, eta_min=lr * ratio)
    expected = []
    for _ in range(warmup, total):
        expected.append(reference.param_groups[0]["lr"])
        reference.step()
        cosine.step()
    assert seen[warmup:] == pytest.approx(expected, rel=1e-9)
    assert seen[warmup] == pytest.approx(lr) and seen[-1] > lr * ratio  # the floor is reached after the last


def test_linear_constant_and_default_schedules_and_groups_keep_their_own_peaks():
    lr, epoch_length = 0.1, 8
    # --warmup-epochs alone: warm-up, then linear decay to 0 (what it always meant)
    seen = [g[0] for g in _lrs(TrainConfig(lr=lr, epochs=2, warmup_epochs=0.5), epoch_length)]
    assert seen == pytest.approx([lr * t / 4 for t in range(4)] + [lr * (16 - t) / 12 for t in range(4, 16)])
    # linear without warm-up, to a floor of a quarter
    seen = [g[0] for g in _lrs(TrainConfig(lr=lr, lr_schedule="linear", min_lr_ratio=0.25), epoch_length)]
    total = 3 * epoch_length
    assert seen == pytest.approx([lr - (lr - lr / 4) * t / total for t in range(total)])
    # warm-up, then constant; no warm-up and constant: no scheduler at all
    seen = [g[0] for g in _lrs(TrainConfig(lr=lr, warmup_epochs=0.5, lr_schedule="constant"), epoch_length)]
    assert seen == pytest.approx([lr * t / 4 for t in range(4)] + [lr] * (total - 4))
    assert _lrs(TrainConfig(lr=lr), epoch_length) == [[lr]] * total
    # groups with their own peaks follow the same cosine, each from its own rate
    config = TrainConfig(epochs=1, lr_schedule="cosine")
    both = _lrs(config, epoch_length, group_lrs=(0.1, 0.02))
    half_way = (1 + math.cos(math.pi * 4 / epoch_length)) / 2
    assert both[4] == pytest.approx([0.1 * half_way, 0.02 * half_way])


def test_a_schedule_resumes_where_its_state_left_it_and_another_schedule_is_told_apart():
    """What ``--resume`` relies on: the checkpointed state continues the schedule; another one differs in shape."""
    config = TrainConfig(lr=0.1, epochs=2, warmup_epochs=0.5, lr_schedule="cosine", min_lr_ratio=0.1)
    full = _lrs(config, 10, group_lrs=(0.1, 0.05))
    optimizer = torch.optim.SGD([{"params": [nn.Parameter(torch.zeros(1))], "lr": lr} for lr in (0.1, 0.05)])
    first = attach_schedule(Engine(lambda e, b: None), optimizer, config, 10)
    assert first is not None
    for _ in range(7):
        first(None)
    state = first.state_dict()
    fresh = torch.optim.SGD([{"params": [nn.Parameter(torch.zeros(1))], "lr": lr} for lr in (0.1, 0.05)])
    resumed = attach_schedule(Engine(lambda e, b: None), fresh, config, 10)
    assert resumed is not None and schedule_shape(resumed.state_dict()) == schedule_shape(state)
    resumed.load_state_dict(state)
    following = []
    for _ in range(13):
        resumed(None)
        following.append([g["lr"] for g in fresh.param_groups])
    assert following == full[7:]  # the very values: the same schedule, continued
    longer = attach_schedule(Engine(lambda e, b: None), fresh, dataclasses.replace(config, epochs=3), 10)
    assert longer is not None and schedule_shape(longer.state_dict()) != schedule_shape(state)
    assert (schedule_end(state), schedule_end(longer.state_dict())) == (20, 30)


def _record_steps(run) -> None:
    """On every rank: each step's gradient norm before clipping (the step's output) and after (what the optimizer
    stepped with: the gradients stay until the next step's zero_grad), the learning rates, the optimizer's groups
    as this rank's optimizer holds them (ZeRO-1's local shard included); written to steps_<rank>.json."""
    import ignite.distributed as idist

    steps: list[dict] = []

    def keep(engine: Engine) -> None:
        # this rank's gradients (FSDP2: its shards, so "after" is the whole norm only where they are whole)
        grads = [
            getattr(p.grad, "to_local", lambda g=p.grad: g)() for p in run.model.parameters() if p.grad is not None
        ]
        after = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
        steps.append(
            {
                "before": engine.state.output.get("grad_norm"),
                "after": after.item(),
                "lr": [g["lr"] for g in run.optimizer.param_groups],
            }
        )

    def write(engine: Engine) -> None:
        local = getattr(run.optimizer, "optim", run.optimizer)  # ZeRO-1: the rank's own optimizer
        groups = [{"weight_decay": g["weight_decay"], "params": len(g["params"])} for g in local.param_groups]
        record = {"steps": steps, "optimizer": type(local).__name__, "groups": groups}
        (Path(run.config.output_dir) / f"steps_{idist.get_rank()}.json").write_text(json.dumps(record))

    run.trainer.add_event_handler(Events.ITERATION_COMPLETED, keep)
    run.trainer.add_event_handler(Events.COMPLETED, write)


def _recorded(folder: Path, rank: int = 0) -> dict:
    return json.loads((folder / f"steps_{rank}.json").read_text())


@pytest.mark.slow
def test_nanogpts_recipe_trains_with_accumulation_and_bf16_clipping_after_the_last_micro_batch(tmp_path):
    clip = 0.5
    config = TrainConfig(
        **{**SMALL, "model": "mlp", "epochs": 2},
        **NANOGPT,
        clip_grad_norm=clip,
        accumulate=2,
        amp="bf16",
        output_dir=str(tmp_path),
        threads=1,
    )
    summary = train(config, setup=_record_steps)
    record = _recorded(tmp_path)
    assert record["optimizer"] == "AdamW" and [g["weight_decay"] for g in record["groups"]] == [0.1, 0.0]
    steps = record["steps"]
    assert len(steps) == summary["iterations"] == 16
    # clipped where the norm was above the limit, after both micro-batches' backward: what stepped is at most it
    assert any(s["before"] > clip for s in steps), steps
    for s in steps:
        assert s["after"] == pytest.approx(min(s["before"], clip), rel=1e-4), s
    lrs = [s["lr"][0] for s in steps]
    assert lrs[0] == 0.0 and max(lrs) == pytest.approx(0.003) and lrs[-1] < lrs[3]  # warm-up, then cosine down
    assert summary["final_train_loss"] < summary["initial_train_loss"]


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_zero1_and_fsdp_clip_alike_on_every_rank_with_adamws_groups(tmp_path):
    config = {**SMALL, **NANOGPT, "model": "mlp", "epochs": 2, "clip_grad_norm": 0.2, "accumulate": 2}
    runs = {
        s: train(TrainConfig(**config, nproc_per_node=2, strategy=s, output_dir=str(tmp_path / s)), setup=_record_steps)
        for s in ("ddp", "zero1", "fsdp")
    }
    records = {s: [_recorded(tmp_path / s, rank) for rank in (0, 1)] for s in runs}
    before = {s: [[step["before"] for step in r["steps"]] for r in records[s]] for s in runs}
    for s in runs:
        assert before[s][0] == before[s][1], s  # every rank clipped by the same global norm
    assert any(n > 0.2 for n in before["ddp"][0])
    for s in runs:  # what stepped was clipped (FSDP2's "after" is a rank's shard of it: no more than the whole)
        for step in records[s][0]["steps"]:
            if s == "fsdp":
                assert step["after"] <= 0.2 * (1 + 1e-4), step
            else:
                assert step["after"] == pytest.approx(min(step["before"], 0.2), rel=1e-4), (s, step)
    for s in ("zero1", "fsdp"):
        assert before[s][0] == pytest.approx(before["ddp"][0], rel=1e-4), s
    # ZeRO-1 keeps AdamW's groups in each rank's share; the weights every strategy ends with agree
    assert [[g["weight_decay"] for g in r["groups"]] for r in records["zero1"]] == [[0.1, 0.0]] * 2
    weights = {s: torch.load(r["last_checkpoint"], weights_only=True)["model"] for s, r in runs.items()}
    for s in ("zero1", "fsdp"):
        assert max((weights[s][k] - weights["ddp"][k]).abs().max().item() for k in weights["ddp"]) < 2e-5, s


OWN = textwrap.dedent(
    """
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import TensorDataset
    from ignite_ddl.trainer.workload import Workload

    def _data(n):
        return TensorDataset(torch.randn(n, 8), torch.randn(n))

    def step(model, batch):
        return F.mse_loss(model(batch[0]).squeeze(-1), batch[1])

    def groups(model):  # called on the placed model: its own lr per group, the options' AdamW over them
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        return [{"params": decay, "weight_decay": 0.05, "lr": 0.01}, {"params": rest, "weight_decay": 0.0}]

    def own_step(model, optimizer, device):
        return lambda engine, batch: {"loss": 1.0}

    def make(clip=0.1, bad=None):
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        adam = lambda m: torch.optim.Adam(m.parameters())
        optimizer = {"raises": lambda m: 1 / 0, "empty": lambda m: [], "adam": adam}.get(bad, groups)
        return Workload(model=model, train=_data(128), val=_data(16), training_step=step, optimizer=optimizer,
                        clip_grad_norm=clip, make_process_function=own_step if bad == "own" else None)
    """
)


@pytest.mark.slow
def test_a_workloads_own_optimizer_and_clipping_run_with_accumulation(tmp_path):
    (tmp_path / "recipe_work.py").write_text(OWN)
    config = TrainConfig(
        **{**SMALL, "train_size": None, "val_size": None},
        workload="recipe_work:make",
        workload_dir=str(tmp_path),
        optimizer="adamw",
        lr=0.003,
        lr_schedule="cosine",
        accumulate=4,
        output_dir=str(tmp_path / "out"),
    )
    summary = train(config, setup=_record_steps)
    record = _recorded(tmp_path / "out")
    assert record["optimizer"] == "AdamW" and record["groups"] == [
        {"weight_decay": 0.05, "params": 2},
        {"weight_decay": 0.0, "params": 2},
    ]
    steps = record["steps"]
    assert steps[0]["lr"] == [0.01, 0.003]  # each group's own peak, down the cosine together
    assert steps[-1]["lr"][0] / steps[-1]["lr"][1] == pytest.approx(0.01 / 0.003)
    assert any(s["before"] > 0.1 for s in steps) and all(s["after"] <= 0.1 * (1 + 1e-4) for s in steps)
    assert summary["workload"]["step"] == "training_step"


def test_the_plan_traces_adamws_two_moments_and_clipping():
    base = {"model": "mlp", "batch_size": 8}
    adam = predict(TrainConfig(**base, optimizer="adam"), 0)
    adamw = predict(TrainConfig(**base, optimizer="adamw", weight_decay=0.1, clip_grad_norm=1), 0)
    assert adam.problem is None and adamw.problem is None
    assert adamw.parts["optimizer"] == adam.parts["optimizer"] > adam.parts["params"]
    sharded = predict(TrainConfig(**base, optimizer="adamw", clip_grad_norm=1, nproc_per_node=2, strategy="fsdp"), 0)
    assert sharded.problem is None and sharded.parts["params"] < adamw.parts["params"]  # clipped over the shards
    # ZeRO-1 saving gathers the whole optimizer state on rank 0: AdamW's two moments, as Adam's
    zero = {
        o: predict(TrainConfig(**base, optimizer=o, nproc_per_node=2, strategy="zero1"), 0) for o in ("adam", "adamw")
    }
    # all but the heap, a replay's measurement that moves by a fraction of a MiB between replays of one step
    adamw_parts, adam_parts = ({k: v for k, v in zero[o].parts.items() if k != "heap"} for o in ("adamw", "adam"))
    assert adamw_parts == adam_parts and adamw_parts["checkpoint"] > 0


def test_the_plan_traces_the_optimizer_a_workload_declares(tmp_path):
    """The plan builds a workload's own optimizer over the traced model: Adam's two moments where the options say SGD
    without momentum (no state at all)."""
    (tmp_path / "recipe_work.py").write_text(OWN)
    base = {"workload": "recipe_work:make", "workload_dir": str(tmp_path), "batch_size": 16, "optimizer": "sgd"}
    plain = predict(TrainConfig(**base, momentum=0), 0)
    own = predict(TrainConfig(**base, momentum=0, workload_args={"bad": "adam"}), 0)
    assert plain.problem is None and own.problem is None, (plain.problem, own.problem)
    moments = 2 * own.parts["params"]  # and a step count per parameter tensor
    assert plain.parts["optimizer"] == 0 and moments <= own.parts["optimizer"] < moments + 64, own.parts


def test_bad_recipe_values_are_refused_in_one_line_before_anything_starts(tmp_path, capsys):
    (tmp_path / "recipe_bad.py").write_text(OWN)
    workload = [f"--workload-dir={tmp_path}", "--batch-size=8"]
    cases = [
        (["--clip-grad-norm=-1"], "clip_grad_norm must be >= 0, got -1.0"),
        (["--lr-schedule=step"], "unknown lr_schedule 'step' (choose from: linear, cosine, constant)"),
        (["--min-lr-ratio=2"], "min_lr_ratio must be <= 1, got 2"),
        (["--optimizer=lamb"], "unknown optimizer 'lamb'"),
        (["--workload=recipe_bad:make", "--workload-args=clip=-2", *workload], "clip_grad_norm must be a number >= 0"),
        (["--workload=recipe_bad:make", "--workload-args=bad=raises", *workload], "optimizer(model) failed: division"),
        (["--workload=recipe_bad:make", "--workload-args=bad=empty", *workload], "optimizer got an empty parameter"),
        (["--workload=recipe_bad:make", "--workload-args=bad=own", *workload], "clipping to 0.1 is done in the suite"),
    ]
    for extra, words in cases:
        out = tmp_path / "out"
        assert main(["train", f"--output-dir={out}", *extra]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, (extra, err)
        assert not out.exists(), extra
