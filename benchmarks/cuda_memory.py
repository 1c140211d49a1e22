"""The plan's memory prediction against a CUDA device: what ``ignite-ddl plan`` predicts for a rank's tensors beside
what a real run of the same configuration allocates on the GPU.

For each workload (ResNet-18 and ResNet-50 at CIFAR size, the built-in GPT at GPT-2-small shape, the own-workload
example), one process, AMP bf16, Adam:

1. **predicted**, before anything touches the GPU: :func:`ignite_ddl.predict.memory.predict`, the training step
   traced on fake tensors (nothing allocated). The parts that live on the device are the ones compared: parameters,
   gradients, optimizer state, activations (and DDP's buckets where there are several ranks). The datasets and the
   runtime's host memory are not on the GPU and are left out.
2. **measured**: ``train(config)`` in this process, the suite's real run, its memory monitor's CUDA figures for the
   window after warm-up: ``torch.cuda.max_memory_allocated`` (the tensors) and ``max_memory_reserved`` (what the
   caching allocator took from the driver for them).
3. **said apart**, because the trace cannot see them: the CUDA context (device memory in use after the first CUDA
   call, before any tensor: the driver's and the kernels' images, cuBLAS / cuDNN handles) and the caching
   allocator's reserve (reserved - allocated at the peak). The device total a rank needs is about
   predicted + context + reserve; ``nvidia-smi`` shows that.

The error is (predicted - allocated) / allocated. The goal is +-10 % (PyTorch's own FSDPMemTracker tests hold
10 %). A workload the plan cannot trace (a user's function, which the plan does not call) is run and measured, its
prediction said as the plan's own reason.

``--device cpu`` rehearses the script where there is no GPU (tests/test_gpu_check.py, at toy size): the prediction
and the runs are real, the CUDA figures are absent.

Usage:
    python benchmarks/cuda_memory.py --json cuda_memory.json            # on a CUDA machine
    python benchmarks/cuda_memory.py --device cpu --toy                 # the rehearsal
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the own-workload example is imported as examples.own_workload.bench
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from ignite_ddl import TrainConfig, train  # noqa: E402
from ignite_ddl.core.apart import call_apart  # noqa: E402
from ignite_ddl.predict.memory import Prediction, predict  # noqa: E402

GOAL = 0.10
DEVICE_PARTS = ("params", "grads", "optimizer", "activations", "buckets")
RUN = {
    "backend": "none",
    "optimizer": "adam",
    "lr": 0.0005,
    "amp": "bf16",
    "epochs": 1,
    "warmup_iters": 3,
    "progress": False,
    "checkpoints": False,
    "best_model": False,
    "measure_flops": False,
}
GPT2_SMALL = {"n_layer": 12, "d_model": 768, "n_head": 12, "seq_len": 1024, "vocab": 50304}


def cases(toy: bool) -> dict[str, dict[str, Any]]:
    """Each workload's options (TrainConfig keywords beside :data:`RUN`): full size on a GPU, tiny with ``toy``."""
    if toy:
        gpt = {"n_layer": 2, "d_model": 32, "n_head": 4, "seq_len": 16, "vocab": 64}
        return {
            "resnet18": {"model": "resnet18", "batch_size": 8, "train_size": 8 * 6, "val_size": 8},
            "resnet50": {"model": "resnet50", "batch_size": 4, "train_size": 4 * 6, "val_size": 4},
            "gpt": {
                "workload": "gpt",
                "workload_args": gpt | {"train_sequences": 8 * 6, "val_sequences": 8},
                "batch_size": 8,
            },
            "own_workload": {
                "workload": "examples.own_workload.bench:make",
                "workload_args": {"width": 32, "depth": 2, "rows": 16 * 6},
                "batch_size": 16,
            },
        }
    return {
        "resnet18": {"model": "resnet18", "batch_size": 256, "train_size": 256 * 10, "val_size": 256},
        "resnet50": {"model": "resnet50", "batch_size": 256, "train_size": 256 * 10, "val_size": 256},
        "gpt": {
            "workload": "gpt",
            "workload_args": GPT2_SMALL | {"train_sequences": 8 * 10, "val_sequences": 8},
            "batch_size": 8,
        },
        "own_workload": {
            "workload": "examples.own_workload.bench:make",
            "workload_args": {"width": 2048, "depth": 8, "rows": 1024 * 10},
            "batch_size": 1024,
        },
    }


def predict_all(configs: dict[str, TrainConfig]) -> dict[str, Prediction]:
    """Every configuration's prediction, traced in this process (a child of :func:`run`'s, which stays untouched by
    autograd's threads and never touches CUDA before its runs)."""
    return {name: predict(config, runtime_bytes=0) for name, config in configs.items()}


def run(device: str, toy: bool, names: list[str] | None = None) -> dict[str, Any]:
    """Predict every case first (the trace forks a child: before this process initialises CUDA), then run each and
    read its CUDA figures."""
    chosen = {k: v for k, v in cases(toy).items() if names is None or k in names}
    configs = {name: TrainConfig(**RUN, **options) for name, options in chosen.items()}
    # One fresh child traces them all (each trace in its own child would start an interpreter per workload: more
    # than the step's budget on the GPU machine).
    predictions: dict[str, Prediction] = call_apart(predict_all, configs, start_method="spawn")
    cuda = device == "cuda"
    context = None
    if cuda:
        torch.cuda.init()
        free, total = torch.cuda.mem_get_info()
        context = total - free - torch.cuda.memory_reserved()  # the context and the driver's own, before any tensor
    rows = []
    with tempfile.TemporaryDirectory(prefix="ignite_ddl_cuda_memory_") as tmp:
        for name, config in configs.items():
            prediction = predictions[name]
            predicted = None if prediction.problem else sum(prediction.parts.get(p, 0) for p in DEVICE_PARTS)
            row: dict[str, Any] = {
                "workload": name,
                "batch_size": config.batch_size,
                "amp": config.amp,
                "predicted_bytes": predicted,
                "predicted_parts": {p: prediction.parts.get(p, 0) for p in DEVICE_PARTS} if predicted else None,
                "prediction_problem": prediction.problem,
                "unpredicted": list(prediction.unpredicted),
            }
            try:
                summary = train(dataclasses.replace(config, output_dir=str(Path(tmp) / name)))
            except Exception as e:  # one workload's failure is its row's, the others still run
                row["problem"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                rows.append(row)
                print(f"{name}: {row['problem']}", flush=True)
                continue
            top = (summary.get("memory") or {}).get("max") or {}
            allocated, reserved = top.get("cuda_max_allocated_bytes"), top.get("cuda_max_reserved_bytes")
            row |= {
                "allocated_bytes": allocated,
                "reserved_bytes": reserved,
                "reserve_bytes": reserved - allocated if allocated is not None and reserved is not None else None,
                "held_bytes": top.get("held_bytes"),
                "peak_rss_bytes": top.get("peak_rss_bytes"),
                "error": (predicted - allocated) / allocated if predicted and allocated else None,
            }
            if context is not None and predicted is not None and row["reserve_bytes"] is not None:
                row["device_total_bytes"] = predicted + context + row["reserve_bytes"]
            rows.append(row)
            print(line(row), flush=True)
            if cuda:
                torch.cuda.empty_cache()
    errors = [abs(r["error"]) for r in rows if r.get("error") is not None]
    return {
        "benchmark": "cuda_memory",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "context_bytes": context,
        "goal": GOAL,
        "rows": rows,
        "within_goal": sum(e <= GOAL for e in errors),
        "compared": len(errors),
    }


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f} MiB"


def line(row: dict[str, Any]) -> str:
    predicted = _mib(row["predicted_bytes"]) if row["predicted_bytes"] is not None else row["prediction_problem"]
    error = "" if row.get("error") is None else f" ({100 * row['error']:+.1f}%)"
    return (
        f"{row['workload']:>12} batch {row['batch_size']:>4}: predicted {predicted}; allocated peak "
        f"{_mib(row.get('allocated_bytes'))}{error}; reserved peak {_mib(row.get('reserved_bytes'))}"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--toy", action="store_true", help="tiny sizes (the CPU rehearsal)")
    parser.add_argument("--workloads", help=f"comma-separated subset of {', '.join(cases(False))}")
    parser.add_argument("--json", type=Path, help="also write the result as JSON")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.workloads.split(",")] if args.workloads else None
    unknown = sorted(set(names or []) - set(cases(False)))
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}: choose from {', '.join(cases(False))}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU is visible here (--device cpu --toy rehearses the script)")
    found = run(args.device, args.toy, names)
    print(
        f"{found['device']}, torch {found['torch']}; CUDA context {_mib(found['context_bytes'])}; "
        f"{found['within_goal']} of {found['compared']} within +-{GOAL:.0%} of the allocated peak"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(found, indent=2) + "\n")
    return found


if __name__ == "__main__":
    main()
