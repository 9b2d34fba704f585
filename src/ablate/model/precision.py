"""Precision policies applied to a model from outside: storage dtype, autocast, loss scaling, fp8.

Policies (conf/precision/):
  fp32          fp32 everything (16 bytes/param with Adam: weights, grads, m, v).
  bf16          bf16 autocast over fp32 master weights (16 bytes/param; activations in bf16).
  bf16_pure     bf16 weights and grads, fp32 Adam moments (2 + 2 + 4 + 4 = 12 bytes/param).
  fp16          fp16 autocast with dynamic loss scaling (Micikevicius et al. 2018).
  fp8_tensorwise  torchao's float8 training (torchao.float8, as torchtitan uses it): the block
                  linears' matmuls in float8 with one dynamic scale per tensor (e4m3 forward, e5m2
                  gradients; cuBLAS, NVIDIA compute capability >= 8.9), under bf16 autocast.
  fp8_rowwise     the same with one scale per row, rounded to a power of two (CUTLASS, >= 9.0).
  fp8_emulated    fp8 numerics on any device: matmul inputs quantize-dequantized to e4m3
                  (forward) and e5m2 (gradients) with per-tensor scaling (Micikevicius et al. 2022,
                  "FP8 Formats for Deep Learning"), computed in the surrounding dtype.
The output head stays in higher precision in every fp8 policy, as in common fp8 recipes: its logits
feed the softmax directly and it shares its weight with the embedding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

from ablate.config import PrecisionConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


@dataclass
class PrecisionRuntime:
    """What the train loop needs from a policy: a forward context and a gradient scaler."""

    autocast: Callable[[], contextlib.AbstractContextManager]
    scaler: torch.amp.GradScaler | None
    param_dtype: torch.dtype


def apply_precision(model: nn.Module, policy: PrecisionConfig, device: str) -> PrecisionRuntime:
    """Cast the model's storage and swap its block matmuls for fp8 ones where the policy asks."""
    param_dtype = DTYPES[policy.param_dtype]
    model.to(dtype=param_dtype)
    if policy.fp8 == "emulated":
        swap_linears_for_fp8(model)
    elif policy.fp8:
        convert_to_torchao_float8(model, policy.fp8)
    if policy.autocast:
        dtype = DTYPES[policy.autocast]

        def autocast():
            return torch.autocast(device_type=device, dtype=dtype)

    else:
        autocast = contextlib.nullcontext
    scaler = torch.amp.GradScaler(device) if policy.loss_scaling else None
    return PrecisionRuntime(autocast=autocast, scaler=scaler, param_dtype=param_dtype)


def swap_linears_for_fp8(model: nn.Module) -> int:
    """Replace every nn.Linear but the output head with Fp8Linear; returns how many were swapped."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and child is not getattr(model, "lm_head", None):
                setattr(parent, name, Fp8Linear(child))
                swapped += 1
    return swapped


def convert_to_torchao_float8(model: nn.Module, recipe: str) -> int:
    """torchao's Float8Linear for every nn.Linear but the output head whose sides are multiples of
    16 (what float8 matmuls take; a SwiGLU hidden width of round(8C/3) may not be, and stays in
    bf16); returns how many were converted."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # only for real fp8

    head = getattr(model, "lm_head", None)

    def eligible(module: nn.Module, fqn: str) -> bool:
        return module is not head and module.in_features % 16 == 0 and module.out_features % 16 == 0

    before = sum(isinstance(m, nn.Linear) for m in model.modules())
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe), module_filter_fn=eligible)
    return before - sum(type(m) is nn.Linear for m in model.modules())


class Fp8Linear(nn.Module):
    """y = x W^T with fp8-rounded inputs; keeps the original Parameter so state dicts are unchanged."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        if linear.bias is not None:
            raise ValueError("Fp8Linear supports bias-free linears only")
        self.weight = linear.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Fp8EmulatedMatmul.apply(x, self.weight)


def quantize(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor scaling to the fp8 range: returns (x * s cast to fp8, 1/s)."""
    amax = x.detach().abs().amax().float().clamp(min=1e-12)
    scale = torch.finfo(dtype).max / amax
    return (x.float() * scale).to(dtype), scale.reciprocal()


def quantize_dequantize(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    q, inv_scale = quantize(x, dtype)
    return (q.float() * inv_scale).to(x.dtype)


class _Fp8EmulatedMatmul(torch.autograd.Function):
    """x: (..., K), w: (N, K) -> (..., N); the gradients use the same quantized operands."""

    @staticmethod
    def forward(ctx, x, w):
        xq = quantize_dequantize(x, E4M3)
        wq = quantize_dequantize(w, E4M3).to(xq.dtype)
        ctx.save_for_backward(xq, wq)
        return xq @ wq.t()

    @staticmethod
    def backward(ctx, grad):
        xq, wq = ctx.saved_tensors
        gq = quantize_dequantize(grad, E5M2)
        grad_x = gq @ wq
        grad_w = gq.reshape(-1, gq.shape[-1]).t() @ xq.reshape(-1, xq.shape[-1])
        return grad_x, grad_w.to(wq.dtype)
