#!/usr/bin/env bash
# torchtitan 0.3.0 for the test of `ablate plan ... export=torchtitan` (tests/plan/test_export.py),
# in a folder of its own (.venv/torchtitan-site, put on PYTHONPATH by that test's subprocess only),
# never in the environment ablate runs in: torchtitan imports triton, whose compiled module prints
# hundreds of "nanobind: leaked ..." lines at the exit of any process that imported it (torchao
# imports triton wherever it is installed), and typeguard registers itself as a pytest plugin.
# Every package with --no-deps, so that nothing pulls a CUDA torch in: the venv's CPU torch is used.
# These are what importing torchtitan's config manager and its Llama 3 model needs (triton: imported
# by its MoE token dispatcher; on a CPU it is only imported). Idempotent: does nothing once it imports.
set -euo pipefail
PY=${PYTHON:-.venv/bin/python}
SITE=${TORCHTITAN_SITE:-.venv/torchtitan-site}
PYTHONPATH="$SITE" "$PY" -c "import torchtitan.config, torchtitan.models.llama3" 2>/dev/null && exit 0
"$PY" -m pip install -q --disable-pip-version-check --no-deps --upgrade --target "$SITE" \
    torchtitan==0.3.0 tyro==1.0.17 docstring-parser==0.18.0 spmd_types==0.2.3 torch_checkpointing==0.1.1 \
    einops==0.8.2 safetensors==0.8.0 torchdata==0.11.0 datasets==4.7.0 httpx==0.29.0 multiprocess==0.70.19 dill==0.4.1 \
    xxhash==4.1.0 tensorboard==2.21.0 absl-py==2.5.1 typeguard==4.6.1 triton==3.9.0
PYTHONPATH="$SITE" "$PY" -c "import torch, torchtitan.config, torchtitan.models.llama3; assert '+cpu' in torch.__version__ or not torch.version.cuda, torch.__version__"
