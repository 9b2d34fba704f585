#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py): bf16 and float8 steps of gpt2_124m with MFU, measured peak
# memory against the memory model, compile off and on, DDP where two GPUs are visible; one JSON.
# Usage: bash scripts/gpu_check.sh [OUT.json]   (HARDWARE=h200 names the catalogue entry for MFU)
set -euo pipefail
cd "$(dirname "$0")/.."
make -s install
exec .venv/bin/python benchmarks/gpu_check.py --hardware "${HARDWARE:-auto}" --out "${1:-benchmarks/results/gpu_check.json}"
