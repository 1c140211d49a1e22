"""Model FLOPs counted exactly (an LSTM's by formula, a layer the counter cannot see named), datasheet peaks found by
device name, a real matmul benchmark on the CPU, and each rank judged against its share of the machine's peak."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from conftest import run_cli
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ignite_ddl.core.environment import cpu_cores
from ignite_ddl.measure.flops import (
    PEAKS,
    FlopCount,
    achieved_flops,
    count_flops,
    count_step_flops,
    datasheet_peak,
    format_flops,
    format_mfu,
    mfu,
    rank_share,
    utilisation,
    utilisation_record,
)
from ignite_ddl.measure.peak import MatmulRate, attainable_matmul_rate, matmul_precision, measured_peak
from ignite_ddl.report import load


def _batch(n: int, shape: tuple[int, ...], classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(n, *shape, generator=generator), torch.randint(0, classes, (n,), generator=generator)


def test_mlp_flops_are_exact():
    sizes = [(7, 5), (5, 3)]
    model = nn.Sequential(nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 3))
    inputs, targets = _batch(4, (7,), 3)
    flops = count_flops(model, inputs, targets, nn.CrossEntropyLoss())
    forward = sum(2 * i * o for i, o in sizes)
    weight_grads = sum(2 * i * o for i, o in sizes)
    input_grads = sum(2 * i * o for i, o in sizes[1:])  # the first layer's input is the data: no gradient
    assert flops == FlopCount(forward=forward, backward=weight_grads + input_grads)
    assert flops.total == forward + weight_grads + input_grads == 50 * 2 + 50 * 2 + 30
    assert flops.to_dict() == {"forward": 100.0, "backward": 130.0, "total": 230.0}


def test_flops_are_per_sample():
    model = nn.Sequential(nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 3))
    one = count_flops(model, *_batch(1, (7,), 3), nn.CrossEntropyLoss())
    many = count_flops(model, *_batch(32, (7,), 3), nn.CrossEntropyLoss())
    assert one == many


def test_conv_flops_are_exact():
    # 8x8 -> conv 3x3 -> 6x6 -> conv 3x3 -> 4x4; Conv2d forward = 2 * out_c * out_h * out_w * in_c * kh * kw
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 3), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    inputs, targets = _batch(2, (3, 8, 8), 3)
    conv1 = 2 * 4 * 6 * 6 * 3 * 3 * 3
    conv2 = 2 * 2 * 4 * 4 * 4 * 3 * 3
    linear = 2 * 32 * 3
    flops = count_flops(model, inputs, targets, nn.CrossEntropyLoss())
    assert flops.forward == conv1 + conv2 + linear == 10272
    assert flops.backward == conv1 + 2 * conv2 + 2 * linear == 12768  # conv1: weight gradient only


def test_normalisation_activations_and_loss_count_nothing():
    plain = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    extra = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.GELU(), nn.Dropout(0.5), nn.Linear(8, 2))
    batch = _batch(8, (6,), 2)
    assert count_flops(extra, *batch, nn.CrossEntropyLoss()) == count_flops(plain, *batch, nn.NLLLoss())


def test_count_flops_leaves_the_model_and_the_random_stream_untouched():
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 2)).eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    count_flops(model, *_batch(8, (6,), 2), nn.CrossEntropyLoss())
    after = model.state_dict()
    assert all(torch.equal(state[k], after[k]) for k in state)  # weights, running mean/var, num_batches_tracked
    assert all(p.grad is None for p in model.parameters())
    assert not model.training  # the count ran in train mode on a copy
    assert torch.equal(torch.get_rng_state(), rng)  # dropout drew from a forked generator


def test_count_flops_unwraps_data_parallel_wrappers(tmp_path):
    model = nn.Sequential(nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 3))
    batch = _batch(4, (7,), 3)
    expected = count_flops(model, *batch, nn.CrossEntropyLoss())
    # a copy: with a GPU present DataParallel moves its module there
    assert count_flops(nn.DataParallel(copy.deepcopy(model)), *batch, nn.CrossEntropyLoss()) == expected
    if dist.is_initialized() or not dist.is_gloo_available():
        pytest.skip("needs a fresh gloo process group")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        ddp = nn.parallel.DistributedDataParallel(model)
        assert count_flops(ddp, *batch, nn.CrossEntropyLoss()) == expected
        assert all(p.grad is None for p in ddp.parameters())
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "name, precision, family, tflops",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", "H100 SXM", 989.4),
        ("NVIDIA H100 80GB HBM3", "fp32", "H100 SXM", 67.0),
        ("NVIDIA H100 PCIe", "tf32", "H100 PCIe", 378.0),
        ("NVIDIA H100 PCIe", "fp16", "H100 PCIe", 756.5),
        ("NVIDIA H100 NVL", "bf16", "H100 NVL", 835.5),
        ("NVIDIA H200", "tf32", "H200 SXM", 494.7),
        ("NVIDIA H200 NVL", "fp32", "H200 NVL", 60.0),
        ("NVIDIA A100-SXM4-80GB", "bf16", "A100", 312.0),
        ("NVIDIA A100-PCIE-40GB", "tf32", "A100", 156.0),
        ("NVIDIA A100 80GB PCIe", "fp32", "A100", 19.5),
        ("NVIDIA L4", "fp16", "L4", 121.0),
        ("Tesla T4", "fp16", "T4", 65.0),
        ("Tesla T4", "fp32", "T4", 8.1),
    ],
)
def test_datasheet_peak_by_device_name(name, precision, family, tflops):
    peak = datasheet_peak(name, precision)
    assert (peak.family, peak.precision) == (family, precision)
    assert peak.flops_per_s == pytest.approx(tflops * 1e12)
    assert peak.source.startswith("https://www.nvidia.com/") and peak.source == PEAKS[family]["source"]


@pytest.mark.parametrize(
    "name, precision",
    [
        ("Intel(R) Xeon(R) CPU", "fp32"),
        ("Tesla T4", "bf16"),
        ("Tesla T4", "tf32"),
        ("NVIDIA L40S", "bf16"),  # not an L4
        ("NVIDIA GH200 480GB", "bf16"),  # not an H200
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "bf16"),  # a slice of the GPU
    ],
)
def test_datasheet_peak_is_none_where_unknown(name, precision):
    assert datasheet_peak(name, precision) is None


def test_datasheet_peaks_are_dense_and_consistent():
    with pytest.raises(ValueError, match="precision"):
        datasheet_peak("NVIDIA L4", "fp8")
    for family, entry in PEAKS.items():
        tflops = entry["tflops"]
        assert set(tflops) <= {"fp32", "tf32", "bf16", "fp16"}, family
        if "tf32" in tflops:  # tensor cores: tf32 at half the 16-bit rate, all above plain fp32
            assert tflops["bf16"] == tflops["fp16"] == pytest.approx(2 * tflops["tf32"], rel=0.01), family
            assert tflops["tf32"] > tflops["fp32"], family


def test_matmul_precision():
    cpu = torch.device("cpu")
    assert matmul_precision(cpu, "none") == "fp32"
    assert matmul_precision(cpu, "bf16") == "bf16"
    assert matmul_precision(torch.device("cuda", 0), "fp16") == "fp16"
    expected = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"
    assert matmul_precision(torch.device("cuda"), "none") == expected
    with pytest.raises(ValueError, match="amp"):
        matmul_precision(cpu, "fp8")


# The TF32 switch is process-wide state with two APIs that torch >= 2.9 refuses to read once they disagree, so each
# starting state is set up in a child forked from an interpreter that has not touched them; no GPU is needed.
_TF32_SCRIPT = """
import os, sys, traceback
import torch
from ignite_ddl.measure.peak import _cuda_tf32, matmul_precision

matmul = torch.backends.cuda.matmul

def state():
    readers = {"allow_tf32": lambda: matmul.allow_tf32, "legacy": torch.get_float32_matmul_precision,
               "new": lambda: getattr(matmul, "fp32_precision", None)}
    out = {}
    for name, read in readers.items():
        try:
            out[name] = read()
        except RuntimeError:
            out[name] = "refused"
    return out

def check(setup):
    exec(setup)
    before = state()
    for enabled in (True, False):
        with _cuda_tf32(enabled):
            assert matmul_precision(torch.device("cuda"), "none") == ("tf32" if enabled else "fp32"), enabled
        assert state() == before, (enabled, before, state())

failed = 0
for setup in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            check(setup)
        except BaseException:
            print(setup, traceback.format_exc(), file=sys.stderr)
            os._exit(1)
        os._exit(0)
    failed += os.waitpid(pid, 0)[1] != 0
print("failed", failed)
"""

_TF32_SETUPS = [
    "pass",
    "torch.set_float32_matmul_precision('high')",
    "torch.set_float32_matmul_precision('medium')",
    "matmul.fp32_precision = 'tf32'",  # the newer API alone: the legacy flag can no longer be read
    "matmul.fp32_precision = 'ieee'",
    "torch.set_float32_matmul_precision('high'); matmul.fp32_precision = 'ieee'",
]


@pytest.mark.slow
@pytest.mark.distributed
def test_tf32_switch_is_restored():
    setups = _TF32_SETUPS
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch < 2.9 has the legacy API only
        setups = [s for s in setups if "fp32_precision" not in s]
    result = subprocess.run([sys.executable, "-c", _TF32_SCRIPT, *setups], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "failed 0", result.stderr[-3000:]


@pytest.mark.parametrize("precision, dtype", [("fp32", "float32"), ("bf16", "bfloat16")])
def test_attainable_matmul_rate_on_cpu(precision, dtype):
    rng = torch.get_rng_state()
    rate = attainable_matmul_rate(torch.device("cpu"), precision, size=128, seconds=0.05)
    assert (rate.precision, rate.size, rate.dtype) == (precision, 128, dtype)
    assert rate.repetitions >= 3
    assert math.isfinite(rate.flops_per_s) and rate.flops_per_s > 0
    assert torch.equal(torch.get_rng_state(), rng)


def test_attainable_matmul_rate_refusals():
    assert attainable_matmul_rate(torch.device("xla"), "bf16") is None
    with pytest.raises(ValueError, match="precision"):
        attainable_matmul_rate(torch.device("cpu"), "int8", size=8)
    with pytest.raises(ValueError, match="meta"):
        attainable_matmul_rate(torch.device("meta"), "fp32", size=8)


def test_achieved_flops_and_utilisation():
    assert achieved_flops(6e9, 50_000) == 3e14
    assert utilisation(6e9, 50_000, 1e15) == pytest.approx(0.3)
    assert utilisation(6e9, 50_000, None) is None
    peak = datasheet_peak("NVIDIA A100-SXM4-80GB", "bf16")
    assert utilisation(156e9, 1000, peak.flops_per_s) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        utilisation(1.0, 1.0, 0.0)


def test_measured_peak_is_measured_once_and_kept_per_device(tmp_path):
    """A real timed matmul on this CPU, kept in the cache file and read back (not measured again) for the same device,
    precision and size; another precision is measured and added beside it."""
    cache = tmp_path / "matmul_peak.json"
    first, cached = measured_peak(torch.device("cpu"), "fp32", cache, size=128, seconds=0.05)
    assert not cached and first is not None and math.isfinite(first.flops_per_s) and first.flops_per_s > 0
    assert first.repetitions >= 3 and first.size == 128
    # on all the cores, estimated until two successive estimates agree (or given up on, and said so)
    assert first.threads == cpu_cores() and first.tries >= 2 and first.stable in (True, False)
    assert first.stable or first.tries == 8
    again, cached = measured_peak(torch.device("cpu"), "fp32", cache, size=128, seconds=0.05)
    assert cached and again == first
    other, cached = measured_peak(torch.device("cpu"), "bf16", cache, size=64, seconds=0.05)
    assert not cached and other is not None and other.dtype == "bfloat16"
    entries = json.loads(cache.read_text())["entries"]
    assert len(entries) == 2 and all(e["device"] for e in entries.values())


@pytest.mark.parametrize("content", ["not json", '{"version": 1, "entries": {"x": 1}}', "[1, 2]"])
def test_measured_peak_measures_again_over_a_damaged_cache(tmp_path, content):
    cache = tmp_path / "matmul_peak.json"
    cache.write_text(content)
    rate, cached = measured_peak(torch.device("cpu"), "fp32", cache, size=64, seconds=0.02)
    assert not cached and rate is not None and rate.flops_per_s > 0
    # a sound entry with an impossible figure is not trusted either
    data = json.loads(cache.read_text())
    key = next(iter(data["entries"]))
    data["entries"][key]["flops_per_s"] = -1.0
    cache.write_text(json.dumps(data))
    assert not measured_peak(torch.device("cpu"), "fp32", cache, size=64, seconds=0.02)[1]


def test_mfu_names_both_peaks_and_flags_what_is_above_the_measured_one():
    rate, _ = measured_peak(torch.device("cpu"), "fp32", None, size=64, seconds=0.02)
    assert rate is not None
    peak = datasheet_peak("NVIDIA H100 80GB HBM3", "bf16")
    half = mfu(0.5 * rate.flops_per_s, "fp32", rate, None)
    assert half["of_measured"] == pytest.approx(0.5) and half["of_datasheet"] is None
    assert not half["above_measured_peak"]
    assert format_mfu(half) == "50 % of the fp32 matmul rate measured on this device"
    both = mfu(0.25 * rate.flops_per_s, "bf16", rate, peak)
    text = format_mfu(both)
    assert "of the bf16 matmul rate measured on this device" in text and "H100 SXM bf16 datasheet peak" in text
    over = mfu(1.5 * rate.flops_per_s, "fp32", rate, None)
    assert over["above_measured_peak"]
    text = format_mfu(over)
    assert text.startswith("FLAGGED: above") and "150 %" in text and "150 % of" not in text


def test_utilisation_record_flags_a_rank_above_its_measured_rate():
    rate, _ = measured_peak(torch.device("cpu"), "fp32", None, size=64, seconds=0.02)
    assert rate is not None
    count = FlopCount(forward=1e6, backward=2e6)
    fine = utilisation_record(count, "fp32", None, [rate], [0.1 * rate.flops_per_s / count.total])
    assert not fine["above_measured_peak"]
    assert "% of the fp32 matmul peak of this machine (each rank against its share; " in format_flops(fine)
    over = utilisation_record(count, "fp32", None, [rate, rate], [1.0, 2 * rate.flops_per_s / count.total])
    assert over["above_measured_peak"]
    assert "FLAGGED: above the fp32 matmul peak of this machine" in format_flops(over)


def test_ranks_are_judged_against_their_share_of_the_machine():
    """One process of 2 threads and two of 1 thread on 2 cores, at the same total throughput: the same MFU (each
    1-thread rank against half the machine's peak), and the run's MFU follows its global throughput."""
    peak = MatmulRate("fp32", 1024, 10, 100e9, "float32", threads=2, tries=2, stable=True)
    count = FlopCount(forward=1e6, backward=2e6)
    assert rank_share(torch.device("cpu"), 2, 2, 1) == 1.0 and rank_share(torch.device("cpu"), 1, 2, 2) == 0.5
    assert rank_share(torch.device("cpu"), 2, 2, 2) == 0.5  # oversubscribed: an even share of the cores each
    assert rank_share(torch.device("cuda", 0), 1, 2, 2) == 1.0  # a GPU rank has its device
    one = utilisation_record(count, "fp32", None, [peak], [4000.0], shares=[1.0], samples_per_s=4000.0)
    two = utilisation_record(
        count, "fp32", None, [peak, peak], [2000.0, 2000.0], shares=[0.5, 0.5], samples_per_s=4000.0
    )
    assert one["utilisation_attainable"] == pytest.approx(two["utilisation_attainable"])
    assert [r["utilisation_attainable"] for r in two["ranks"]] == pytest.approx([one["utilisation_attainable"]] * 2)
    assert two["ranks"][0]["attainable_flops_per_s"] == 50e9 and two["machine_peak"]["threads"] == 2
    faster = utilisation_record(count, "fp32", None, [peak, peak], [2100.0, 2000.0], [0.5, 0.5], 4050.0)
    assert faster["utilisation_attainable"] / two["utilisation_attainable"] == pytest.approx(4050 / 4000)


class _LSTMLM(nn.Module):
    def __init__(self, vocab: int = 50, width: int = 32, layers: int = 2):
        super().__init__()
        self.embed, self.head = nn.Embedding(vocab, width), nn.Linear(width, vocab)
        self.lstm = nn.LSTM(width, width, num_layers=layers)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(self.embed(tokens))[0])


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")  # switching oneDNN off says this
def test_an_lstm_is_counted_by_formula_as_the_counter_counts_its_gates():
    """On a CPU nn.LSTM runs as oneDNN's fused kernel, which FlopCounterMode cannot see: it counted the output layer
    only. The formula gives what the counter itself counts where the gates run as plain matmuls (oneDNN off)."""
    model, tokens = _LSTMLM(), torch.randint(0, 50, (12, 3))

    def step(m: nn.Module) -> torch.Tensor:
        return m(tokens).sum()

    counted = count_step_flops(model, step, 3)
    with torch.backends.mkldnn.flags(enabled=False):
        unfused = count_step_flops(model, step, 3)  # the counter sees the gates' matmuls: nothing to add
    assert unfused.by_formula == () and counted.not_counted == unfused.not_counted == ()
    assert counted.forward == pytest.approx(unfused.forward, rel=1e-6)
    assert counted.backward == pytest.approx(unfused.backward, rel=0.05)  # the first step's h0 has no gradient
    with FlopCounterMode(display=False) as raw:
        model(tokens)
    if raw.get_total_flops() < 0.5 * unfused.forward * 3:  # the fused path was taken: counted by formula
        assert counted.by_formula == ("nn.LSTM",)


class _Elementwise(nn.Module):
    """A product the counter cannot see: a matrix-vector product done elementwise."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x[:, None, :] * self.weight).sum(-1)


def test_a_layer_the_counter_cannot_see_is_named_and_given_no_mfu():
    model = nn.Sequential(nn.Embedding(10, 6), nn.Flatten(0, 1), _Elementwise(), nn.Linear(4, 2))
    tokens = torch.randint(0, 10, (5, 1))
    count = count_step_flops(model, lambda m: m(tokens).sum(), 5)
    assert count.not_counted == (f"{__name__}._Elementwise",) and count.by_formula == ()  # the embedding: a lookup
    rate = MatmulRate("fp32", 64, 3, 1e9, "float32")
    record = utilisation_record(count, "fp32", None, [rate], [100.0], samples_per_s=100.0)
    assert record["not_counted"] == [f"{__name__}._Elementwise"] and record["achieved_flops_per_s"] is not None
    assert record["utilisation_attainable"] is None and record["ranks"][0]["utilisation_attainable"] is None
    assert format_flops(record).endswith(f"FLOPs not counted: {__name__}._Elementwise, so no utilisation is given")


# An LSTM language model of one's own: its FLOPs are the LSTM's (counted by formula) and its output layer's.
_LSTM_WORKLOAD = """
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from ignite_ddl.trainer.workload import Workload


class LSTMLM(nn.Module):
    def __init__(self, vocab, width):
        super().__init__()
        self.embed, self.head = nn.Embedding(vocab, width), nn.Linear(width, vocab)
        self.lstm = nn.LSTM(width, width, batch_first=True)

    def forward(self, tokens):
        return self.head(self.lstm(self.embed(tokens))[0])


def step(model, batch):
    tokens = batch[0]
    return F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())


def make(vocab=32, width=64, seq=16):
    data = TensorDataset(torch.randint(0, vocab, (512, seq + 1), generator=torch.Generator().manual_seed(0)))
    return Workload(
        model=LSTMLM(vocab, width), train=data, val=data, training_step=step, sample_unit="tokens",
        units_per_sample=seq, accuracy=False,
    )
"""


@pytest.mark.slow
@pytest.mark.distributed
def test_mfu_and_throughput_rank_a_sweeps_configurations_alike(tmp_path):
    """An LSTM language model swept over one process of 2 threads, two processes of 1 thread and one process
    accumulating 2 micro-batches: its LSTM counted by formula in every run, one matmul peak for the whole sweep
    (measured by its first run, read back by the others), and each configuration's MFU in the same ratio to the
    others' as its throughput. Against a rate each run measured for itself, or each rank against the whole
    machine (the two-process row at half), the ratios differ."""
    (tmp_path / "lstm_lm.py").write_text(_LSTM_WORKLOAD)
    out = tmp_path / "sweep"
    (tmp_path / "spec.yaml").write_text(
        f"""
name: mfu
workload: lstm_lm:make
base: {{epochs: 1, max_iters: 12, warmup_iters: 2, batch_size: 32, workload_dir: {tmp_path}}}
grid: {{nproc_per_node: [1, 2], accumulate: [1, 2]}}
exclude: [{{nproc_per_node: 2, accumulate: 2}}]
repeats: 1
output_dir: {out}
"""
    )
    result = run_cli("sweep", str(tmp_path / "spec.yaml"), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    flops = [r["summary"]["flops"] for r in records]
    assert len(flops) == 3 and all(f["by_formula"] == ["nn.LSTM"] and not f["not_counted"] for f in flops)
    assert len({f["machine_peak"]["flops_per_s"] for f in flops}) == 1  # one reference for the sweep
    assert sorted(f["machine_peak"]["from_cache"] for f in flops) == [False, True, True]
    assert (out / "plan" / "matmul_peak.json").is_file()
    configs = load(out, include_contended=True).configs  # the MFU and the throughput of the same runs
    mfu = {c.name: c.utilisation_attainable for c in configs}
    speed = {c.name: c.throughput.value for c in configs}
    assert sorted(mfu, key=lambda name: mfu[name]) == sorted(speed, key=lambda name: speed[name]), (mfu, speed)
    first = configs[0].name
    for name in mfu:
        assert mfu[name] / mfu[first] == pytest.approx(speed[name] / speed[first], rel=1e-9), (mfu, speed)
    report = (out / "report.md").read_text()
    assert "| MFU % |" in report and "FLOPs of nn.LSTM (which the FLOP counter cannot see)" in report
