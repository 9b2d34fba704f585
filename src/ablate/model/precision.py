"""Precision policies applied to a model from outside: storage dtype, autocast, loss scaling, fp8.

Policies (conf/precision/):
  fp32          fp32 everything (16 bytes/param with Adam: weights, grads, m, v).
  bf16          bf16 autocast over fp32 master weights (16 bytes/param; activations in bf16).
  bf16_pure     bf16 weights and grads, fp32 Adam moments (2 + 2 + 4 + 4 = 12 bytes/param).
  fp16          fp16 autocast with dynamic loss scaling (Micikevicius et al. 2018).
  fp8           real float8 matmuls via torch._scaled_mm (NVIDIA compute capability >= 8.9).
  fp8_emulated  fp8 numerics on any device: matmul inputs quantize-dequantized to e4m3
                (forward) and e5m2 (gradients) with per-tensor scaling (Micikevicius et al. 2022,
                "FP8 Formats for Deep Learning"), computed in the surrounding dtype.
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
    if policy.fp8:
        swap_linears_for_fp8(model, emulated=policy.fp8 == "emulated")
    if policy.autocast:
        dtype = DTYPES[policy.autocast]

        def autocast():
            return torch.autocast(device_type=device, dtype=dtype)

    else:
        autocast = contextlib.nullcontext
    scaler = torch.amp.GradScaler(device) if policy.loss_scaling else None
    return PrecisionRuntime(autocast=autocast, scaler=scaler, param_dtype=param_dtype)


def swap_linears_for_fp8(model: nn.Module, emulated: bool) -> int:
    """Replace every nn.Linear except the (tied) output head; returns how many were swapped.

    The output head stays in higher precision, as in common fp8 recipes: its logits feed the
    softmax directly and it shares its weight with the embedding.
    """
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and child is not getattr(model, "lm_head", None):
                setattr(parent, name, Fp8Linear(child, emulated))
                swapped += 1
    return swapped


class Fp8Linear(nn.Module):
    """y = x W^T with fp8 inputs; keeps the original Parameter so state dicts are unchanged."""

    def __init__(self, linear: nn.Linear, emulated: bool):
        super().__init__()
        if linear.bias is not None:
            raise ValueError("Fp8Linear supports bias-free linears only")
        self.weight = linear.weight
        self.emulated = emulated

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fn = _Fp8EmulatedMatmul if self.emulated else _Fp8ScaledMatmul
        return fn.apply(x, self.weight)


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


def _scaled_mm(a: torch.Tensor, a_dtype, b: torch.Tensor, b_dtype) -> torch.Tensor:
    """(M, K) @ (K, N) on fp8 tensor cores; torch._scaled_mm wants b column-major."""
    aq, a_inv = quantize(a, a_dtype)
    bq, b_inv = quantize(b, b_dtype)
    bq = bq.t().contiguous().t()
    return torch._scaled_mm(aq, bq, scale_a=a_inv, scale_b=b_inv, out_dtype=torch.bfloat16)


class _Fp8ScaledMatmul(torch.autograd.Function):
    """Real fp8 (NVIDIA sm_89+): e4m3 x e4m3 forward, e5m2 x e4m3 for both gradients."""

    @staticmethod
    def forward(ctx, x, w):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])  # (M, K)
        ctx.save_for_backward(x2, w)
        ctx.shape = shape
        y = _scaled_mm(x2, E4M3, w.t(), E4M3)  # (M, N)
        return y.reshape(*shape[:-1], w.shape[0]).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x2, w = ctx.saved_tensors
        g2 = grad.reshape(-1, grad.shape[-1])  # (M, N)
        grad_x = _scaled_mm(g2, E5M2, w, E4M3)  # (M, N) @ (N, K)
        grad_w = _scaled_mm(g2.t().contiguous(), E5M2, x2, E4M3)  # (N, M) @ (M, K)
        return grad_x.reshape(ctx.shape).to(grad.dtype), grad_w.to(w.dtype)
