"""What glibc's heap keeps beyond a CPU rank's tensors, measured beside the plan's prediction of it: the built-in GPT
trained in this process step after step, glibc's own figures read after each step, against the plan's ``heap``
part (the traced step's allocations replayed through this machine's allocator: ignite_ddl/predict/heap.py).

First the plan predicts the configuration (its trace and replay run in a child process, as a sweep's plan does).
Then this process builds the same GPT and its optimizer, resets its resident peak (``VmHWM``) and trains it with the
trainer's own step, without any memory tracker (a ``MemTracker`` left running in the training process pins holes of
its own: with one, the same GPT's heap grew without bound, to 1.6 GiB after 60 steps, where it settles without).
After each step: ``mallinfo2().arena`` (the heap's extent, what it keeps resident) and ``uordblks`` (what is in use),
each as growth over the start, and the resident set's growth. At the end, the resident peak's growth beside the
prediction's: its parts but the parameters (built before the start) and the datasets (not made here), with and
without the heap. Measured on the 2-core AMD EPYC VM (torch 2.15.0, 2026-11-29): docs/plan-validation.md.

Usage:
    python benchmarks/heap_growth.py [--steps 30] [--checkpointing]
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import sys

import bench_scratch  # noqa: F401  (first: the scratch folder, before anything imports torch)
from bench_common import print_machine

MIB = 2**20
# benchmarks/memory_prediction.py's GPT: 4 blocks of 128, 256 tokens, batch 32
GPT = {"n_layer": 4, "d_model": 128, "n_head": 4, "seq_len": 256, "vocab": 256}


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30)")
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing of the GPT's blocks")
    args = parser.parse_args()
    if platform.libc_ver()[0] != "glibc":
        sys.exit("heap_growth: this reads glibc's own figures (mallinfo2), and this C library is not glibc")
    if args.steps < 1:
        sys.exit("heap_growth: --steps must be 1 or more")

    import torch

    from ignite_ddl.core.config import TrainConfig
    from ignite_ddl.measure.memory import anonymous_rss_bytes, peak_rss_bytes, reset_peak
    from ignite_ddl.predict.memory import predict
    from ignite_ddl.trainer import gpt
    from ignite_ddl.trainer.engines import criterion_step, optimizer_step
    from ignite_ddl.trainer.workload import activation_checkpointing

    print_machine()
    config = TrainConfig(
        workload="gpt",
        workload_args={**GPT, "train_sequences": 96},
        batch_size=32,
        optimizer="adam",
        lr=1e-3,
        activation_checkpointing=args.checkpointing,
    )
    parts = predict(config, runtime_bytes=0).parts
    if "heap" not in parts:
        sys.exit("heap_growth: the plan made no replay of this step here (see ignite_ddl/predict/heap.py)")
    tensors = sum(v for k, v in parts.items() if k not in ("params", "data", "heap"))

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = gpt.GPT(GPT["n_layer"], GPT["d_model"], GPT["n_head"], GPT["seq_len"], GPT["vocab"])
    if args.checkpointing:
        activation_checkpointing(model, tuple(f"blocks.{i}" for i in range(GPT["n_layer"])))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randint(0, GPT["vocab"], (32, GPT["seq_len"]))
    y = torch.randint(0, GPT["vocab"], (32, GPT["seq_len"]))
    if not reset_peak():
        sys.exit("heap_growth: this process's resident peak cannot be reset (/proc/self/clear_refs)")
    start, peak0, anonymous0 = libc.mallinfo2(), peak_rss_bytes(), anonymous_rss_bytes()

    print(f"{'step':>4} {'glibc heap MiB':>14} {'in use MiB':>10} {'resident MiB':>12}")
    for step in range(args.steps):
        optimizer_step(model, optimizer, criterion_step(gpt.lm_loss), (x, y), "none", None, 1)
        now = libc.mallinfo2()
        heap, used = (now.arena - start.arena) / MIB, (now.uordblks - start.uordblks) / MIB
        resident = (anonymous_rss_bytes() - anonymous0) / MIB
        print(f"{step + 1:>4} {heap:>+14.0f} {used:>+10.0f} {resident:>+12.0f}")
    grown = (peak_rss_bytes() - peak0) / MIB
    print(
        f"resident peak: {grown:+.0f} MiB over the start; predicted {(tensors + parts['heap']) / MIB:+.0f} MiB "
        f"({tensors / MIB:.0f} of tensors at the traced peak, beyond the parameters, and {parts['heap'] / MIB:.0f} "
        f"of glibc's heap replayed), {tensors / MIB:+.0f} MiB without the heap"
    )


if __name__ == "__main__":
    main()
