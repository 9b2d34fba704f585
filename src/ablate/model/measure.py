"""Parameters, FLOPs and saved activations of a part measured on the real module, for the parts
no formula describes (a user's class) and to check the formulas of the built-in ones.

FLOPs are FlopCounterMode's (torch.utils.flop_counter): matmuls, convolutions and attention
kernels, no elementwise work, the same things accounting.py counts. On the CPU torch's fused
attention runs as aten._scaled_dot_product_flash_attention_for_cpu, which FlopCounterMode has no
formula for; CPU_ATTENTION gives it the one of the CUDA kernels: 4 B H T S hd per forward (q k^T
and att v, H query heads, S keys). A training step is taken as 3 x the forward: the backward of a
matmul is two matmuls of the same size (Kaplan et al. 2020, Sec. 2.1).
"""

from __future__ import annotations

import dataclasses
import functools
import json

import torch
import torch.nn as nn
from torch.autograd.graph import saved_tensors_hooks
from torch.utils.flop_counter import FlopCounterMode

from ablate.config import ModelConfig
from ablate.model.attention import build_attention
from ablate.model.mlp import build_mlp
from ablate.model.norm import build_norm
from ablate.model.parts import check_contract

BUILDERS = {"attention": build_attention, "mlp": build_mlp, "norm": build_norm}


def _cpu_attention_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    b, h, t, hd = query
    return 4 * b * h * t * key[-2] * hd


CPU_ATTENTION = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops}


@dataclasses.dataclass(frozen=True)
class PartCost:
    params: int
    forward_flops_per_token: float
    saved_bytes_per_token: float  # fp32, what autograd keeps for backward, parameters excluded


def forward_flops(module: nn.Module, *inputs: torch.Tensor) -> int:
    """FlopCounterMode's count of one forward pass of `module` on `inputs`."""
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        module(*inputs)
    return counter.get_total_flops()


def measure_part(cfg: ModelConfig, key: str) -> PartCost:
    """model.KEY built as the model builds it and run on one (1, T, C) sequence; measured once per
    config (a pure function of it, so the answer is cached)."""
    return _measure(key, json.dumps(dataclasses.asdict(cfg), sort_keys=True))


@functools.cache
def _measure(key: str, cfg_json: str) -> PartCost:
    cfg = ModelConfig(**json.loads(cfg_json))
    with torch.random.fork_rng(devices=[]):  # measuring leaves the run's random stream as it was
        module = BUILDERS[key](cfg)
        check_contract(key, cfg, module)
        x = torch.randn(1, cfg.block_size, cfg.n_embd, requires_grad=True)
        flops = forward_flops(module, x)
        saved = _saved_bytes(module, x)
    params = sum(p.numel() for p in module.parameters())
    return PartCost(params, flops / cfg.block_size, saved / cfg.block_size)


def _saved_bytes(module: nn.Module, x: torch.Tensor) -> int:
    """Bytes autograd keeps from one forward pass, each storage once, parameters and buffers excluded."""
    own = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in own:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        module(x)
    return sum(seen.values())
