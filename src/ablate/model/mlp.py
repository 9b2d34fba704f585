"""The MLP arms. Shapes: (B, T, C) -> (B, T, h) -> (B, T, C), h = cfg.mlp_hidden.

gelu   proj(gelu(fc x)), h = 4C (Radford et al. 2019).
relu2  proj(relu(fc x)^2), h = 4C (So et al. 2021, Primer).
swiglu proj(silu(gate x) * (up x)) (Shazeer 2020, "GLU Variants Improve Transformer"); gate and up
       are one (2h, C) matrix, and h = round(8C/3) keeps the parameters of the 4C MLP.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ablate.config import ModelConfig
from ablate.model.parts import build_part


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, cfg.mlp_hidden, bias=False)
        self.proj = nn.Linear(cfg.mlp_hidden, cfg.n_embd, bias=False)
        self.dropout = cfg.dropout

    def activation(self, h: torch.Tensor) -> torch.Tensor:
        return F.gelu(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.proj(self.activation(self.fc(x))), self.dropout, self.training)


class ReluSquaredMLP(MLP):
    def activation(self, h: torch.Tensor) -> torch.Tensor:
        return F.relu(h).square()


class SwiGLU(MLP):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.fc = nn.Linear(cfg.n_embd, 2 * cfg.mlp_hidden, bias=False)

    def activation(self, h: torch.Tensor) -> torch.Tensor:
        gate, up = h.chunk(2, dim=-1)  # (B, T, 2h) -> 2 x (B, T, h)
        return F.silu(gate) * up


MLPS = {"gelu": MLP, "relu2": ReluSquaredMLP, "swiglu": SwiGLU}


def build_mlp(cfg: ModelConfig) -> nn.Module:
    return build_part("mlp", cfg, MLPS)
