"""The normalisation arm of every block and of the final layer: LayerNorm without bias (Ba et al.
2016) or RMSNorm (Zhang & Sennrich 2019, torch.nn.RMSNorm), each with a C-wide gain."""

from __future__ import annotations

import torch.nn as nn

from ablate.config import ModelConfig
from ablate.model.parts import build_part

NORMS = {
    "layernorm": lambda cfg: nn.LayerNorm(cfg.n_embd, bias=False),
    "rmsnorm": lambda cfg: nn.RMSNorm(cfg.n_embd),
}


def build_norm(cfg: ModelConfig) -> nn.Module:
    return build_part("norm", cfg, NORMS)
