"""Causal self-attention with its arms: the kernel (manual | sdpa), key/value heads (multi-head,
grouped-query, multi-query), QK-norm and rotary positions.

Shapes: B batch, T time, C = n_embd, H = n_head query heads, G = n_kv_head key/value heads,
hd = C / H. The qkv matrix is (C + 2 G hd, C): q takes C outputs, k and v G hd each.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ablate.config import ModelConfig
from ablate.model.parts import build_part
from ablate.model.rope import Rotary


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.n_head, cfg.kv_heads, cfg.head_dim
        self.kernel = cfg.attention
        self.dropout = cfg.dropout
        self.qk_norm = cfg.qk_norm
        self.qkv = nn.Linear(cfg.n_embd, cfg.n_embd + 2 * self.n_kv_head * self.head_dim, bias=False)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        # None: PyTorch's default 1/sqrt(hd).
        self.scale = attention_scale(cfg) if cfg.mup else None
        self.rotary = Rotary(self.head_dim, cfg.block_size, cfg.rope_base) if cfg.position == "rope" else None
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))
        self.register_buffer("causal_mask", mask.view(1, 1, cfg.block_size, cfg.block_size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        kv = self.n_kv_head * self.head_dim
        q, k, v = self.qkv(x).split((C, kv, kv), dim=2)
        # (B, T, heads * hd) -> (B, heads, T, hd)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k, v = (t.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2) for t in (k, v))
        if self.qk_norm:
            q, k = F.rms_norm(q, (self.head_dim,)), F.rms_norm(k, (self.head_dim,))
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        y = self._sdpa(q, k, v) if self.kernel == "sdpa" else self._manual(q, k, v)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def _sdpa(self, q, k, v):
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            is_causal=True,
            dropout_p=self.dropout if self.training else 0.0,
            scale=self.scale,
            enable_gqa=self.n_kv_head != self.n_head,
        )

    def _manual(self, q, k, v):
        """softmax(q k^T / sqrt(hd)) v, written out: (B, H, T, T) scores; each key/value head serves
        H / G query heads."""
        T = q.size(-2)
        if self.n_kv_head != self.n_head:
            k, v = (t.repeat_interleave(self.n_head // self.n_kv_head, dim=1) for t in (k, v))
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(self.head_dim)
        att = (q @ k.transpose(-2, -1)) * scale
        att = att.masked_fill(~self.causal_mask[:, :, :T, :T], float("-inf"))
        att = F.dropout(F.softmax(att, dim=-1), self.dropout, self.training)
        return att @ v


def attention_scale(cfg: ModelConfig) -> float:
    """muP attention: sqrt(hd0) / hd with hd0 = mup_base_width / n_head (equals 1/sqrt(hd) at m = 1).

    Under muP q and k become correlated during training, so q.k grows like hd, not sqrt(hd)
    (Yang et al. 2022, Sec. 4 / Appendix B "attention logit scaling").
    """
    hd = cfg.n_embd // cfg.n_head
    base_hd = (cfg.mup_base_width or cfg.n_embd) / cfg.n_head
    return math.sqrt(base_hd) / hd


def build_attention(cfg: ModelConfig) -> nn.Module:
    return build_part("attention", cfg, {"manual": CausalSelfAttention, "sdpa": CausalSelfAttention})
