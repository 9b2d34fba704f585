"""Rotary position embedding (Su et al. 2021, RoFormer), in the rotate-half layout of GPT-NeoX.

Each head's hd channels are hd/2 pairs (x_i, x_{i+hd/2}); position t turns pair i by the angle
t * base^(-2i/hd). q.k then depends on positions only through their difference, and nothing is
learned: the tables are buffers, outside the state dict.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Rotary(nn.Module):
    def __init__(self, head_dim: int, block_size: int, base: float):
        super().__init__()
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (hd/2,)
        angles = torch.outer(torch.arange(block_size, dtype=torch.float32), inv_freq)  # (T, hd/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x: (B, heads, T, hd) at positions start .. start+T-1 (a KV-cached decode step starts past
        0) -> the same shape, each position's pairs turned by its angles."""
        T, half = x.size(-2), x.size(-1) // 2
        cos, sin = self.cos[start : start + T].to(x.dtype), self.sin[start : start + T].to(x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
