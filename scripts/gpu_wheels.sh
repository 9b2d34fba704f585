#!/usr/bin/env bash
# The wheels scripts/gpu_check.sh installs on a GPU machine that reaches no package registry, made
# here (where pip reaches one) into .gpu-wheels/ (ignored by git; it travels with the working tree).
# For the GPU machine's Python 3.12 on x86-64 with torch 2.11 (CUDA 13): pure-Python wheels of
# hydra-core, omegaconf and torchao 0.18.0 (the release that worked with torch 2.11 there), and
# antlr4-python3-runtime 4.9.3, which PyPI has only as an sdist, built into a wheel here. MLflow is
# not carried: the check runs with tracking=none.
# Usage: bash scripts/gpu_wheels.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:-python3}"
dest=.gpu-wheels
mkdir -p "$dest"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$dest" hydra-core==1.3.8 omegaconf==2.3.1 torchao==0.18.0
"$py" -m pip wheel -q --no-deps --no-binary=:all: -w "$dest" antlr4-python3-runtime==4.9.3
ls -l "$dest"
