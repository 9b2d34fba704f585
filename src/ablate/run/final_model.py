"""tracking.log_model=final: a finished run's weights as an MLflow artifact of its run (model.pt),
with the model's config, so that the run's model can be rebuilt wherever the run can be found
(`load_final_model`), as `mlflow.pytorch.log_model` or a Lightning checkpoint gives its users. The
weights are the state dict of the plain model (no optimizer, no compile wrapper), on the CPU, in
the dtype the run trained them in."""

from __future__ import annotations

import io
from pathlib import Path

import torch
import torch.nn as nn

from ablate.config import ModelConfig, as_dict, build
from ablate.files import write_bytes

MODEL_FILE = "model.pt"


def save_final_model(model: nn.Module, model_cfg: ModelConfig, out_dir: Path) -> Path:
    """out_dir/MODEL_FILE, written atomically: {"model": the state dict, "model_config": the config}."""
    plain = getattr(model, "_orig_mod", model)  # a torch.compile wrapper's own module
    state = {k: v.detach().to("cpu") for k, v in plain.state_dict().items()}
    buffer = io.BytesIO()
    torch.save({"model": state, "model_config": as_dict(model_cfg)}, buffer)
    return write_bytes(Path(out_dir) / MODEL_FILE, buffer.getvalue())


def load_final_model(path: Path) -> nn.Module:
    """The GPT a MODEL_FILE holds, its weights loaded (strictly: every key, no other)."""
    from ablate.model import GPT

    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = GPT(build(ModelConfig, saved["model_config"], "model"))
    model.load_state_dict(saved["model"])
    return model
