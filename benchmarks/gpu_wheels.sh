#!/usr/bin/env bash
# The wheels benchmarks/gpu_check needs on a GPU machine that has a CUDA PyTorch but no network and no
# pytorch-ignite: pytorch-ignite, Holistic Trace Analysis with the two packages it needs that such an image usually
# lacks (plotly, pydot), and this project itself, each without its dependencies, into .gpu-wheels/ (git-ignored).
# Run it here, where pip reaches the package index; carry .gpu-wheels/ with the working tree to the GPU machine and
# run benchmarks/gpu_check there. All of them are pure-Python wheels: any platform and Python >= 3.10 takes them.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu-wheels
mkdir .gpu-wheels
python -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir .gpu-wheels .
python -m pip download --quiet --no-deps --only-binary=:all: --dest .gpu-wheels \
    "pytorch-ignite==0.5.5" "HolisticTraceAnalysis==0.5.0" "plotly==7.1.0" "pydot==4.0.1"
ls -1 .gpu-wheels
