#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py) on a bare GPU machine: no package registry, its own Python
# with torch (and numpy, scipy, tqdm, psutil, pyyaml, tokenizers, cloudpickle, nvidia-ml-py). The
# packages it lacks travel as wheels in .gpu-wheels/ (made here by scripts/gpu_wheels.sh, ignored by
# git) and are installed with pip --no-index --no-deps --target into /tmp; the project runs from its
# source tree (PYTHONPATH=src), with tracking=none: MLflow, Optuna and submitit are not needed.
# One JSON (benchmarks/results/gpu_check.json) and benchmarks/results/gpu.json, in <= 8 minutes.
#
# Usage: bash scripts/gpu_check.sh [--dry-run] [OUT.json]
#   HARDWARE=h200 (default: auto) names the catalogue entry for MFU and the HBM bound.
#   --dry-run: the same paths on a CPU, tiny, with the packages the GPU machine lacks made
#   unimportable (tests/test_gpu_check.py runs it in make test).
set -euo pipefail
cd "$(dirname "$0")/.."
dry=0
if [[ "${1:-}" == "--dry-run" ]]; then
    dry=1
    shift
fi
out="${1:-benchmarks/results/gpu_check.json}"
export PYTHONUNBUFFERED=1

if ((dry)); then
    py="${PYTHON:-.venv/bin/python}"
    # what the GPU machine does not have and the check must not need, made unimportable
    blocked="$(mktemp -d)"
    trap 'rm -rf "$blocked"' EXIT
    printf '%s\n' \
        'import sys' \
        'class Absent:' \
        '    """The GPU machine has none of these: importing one fails as it would there."""' \
        '    names = ("mlflow", "optuna", "submitit")' \
        '    def find_spec(self, name, path=None, target=None):' \
        '        if name.split(".")[0] in self.names:' \
        '            raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU machine)")' \
        '        return None' \
        'sys.meta_path.insert(0, Absent())' >"$blocked/sitecustomize.py"
    export PYTHONPATH="$blocked:src${PYTHONPATH:+:$PYTHONPATH}"
    timeout 1500 "$py" benchmarks/gpu_check.py --dry-run --out "$out" --bench-out "$(dirname "$out")/gpu.json"
    exit
fi

py="${PYTHON:-python3}"
site=/tmp/ablate-site
shopt -s nullglob
wheels=(.gpu-wheels/*.whl)
if ((${#wheels[@]})); then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${wheels[@]}"
    export PYTHONPATH="$site:src${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
fi
"$py" - <<'PY' || { echo "error: missing packages on this machine (valid: run scripts/gpu_wheels.sh where pip works, carry .gpu-wheels/)"; exit 2; }
import importlib.util, sys
missing = [m for m in ("torch", "hydra", "omegaconf", "antlr4", "torchao", "cloudpickle", "yaml", "numpy", "scipy", "tqdm", "psutil") if importlib.util.find_spec(m) is None]
if missing:
    print("missing:", ", ".join(missing), file=sys.stderr)
    sys.exit(1)
PY
# 8 minutes for the check itself: its own budget is 7.5, the timeout is the backstop
exec timeout 480 "$py" benchmarks/gpu_check.py --hardware "${HARDWARE:-auto}" --budget-s 440 --out "$out" \
    --bench-out "$(dirname "$out")/gpu.json"
