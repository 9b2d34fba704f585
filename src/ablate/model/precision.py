"""Precision policies applied to a model from outside: storage dtype, autocast, loss scaling, fp8.

Policies (conf/precision/):
  fp32          fp32 everything (16 bytes/param with Adam: weights, grads, m, v).
  bf16          bf16 autocast over fp32 master weights (16 bytes/param; activations in bf16).
  bf16_pure     bf16 weights and grads, fp32 Adam moments (2 + 2 + 4 + 4 = 12 bytes/param), each
                update written back with stochastic rounding (model/optim.py).
  bf16_pure_nearest
                the same, each update rounded to the nearest bf16: an update under half an ulp
                of its weight is lost (at a LayerNorm gain of 1, a step down under 2^-9 or up under
                2^-8: more than a late Adam step).
  fp16          fp16 autocast with dynamic loss scaling (Micikevicius et al. 2018).
  fp8_tensorwise  torchao's float8 training (torchao.float8, as torchtitan uses it): the block
                  linears' matmuls in float8 with one dynamic scale per tensor (e4m3 forward, e5m2
                  gradients; cuBLAS, NVIDIA compute capability >= 8.9), under bf16 autocast.
  fp8_rowwise     the same with one scale per row, rounded to a power of two, e4m3 throughout
                  (CUTLASS, >= 9.0).
  fp8_tensorwise_emulated, fp8_rowwise_emulated
                  the same recipes, with the same casts and scales, whose float8 matmuls torchao
                  computes as fp32 matmuls of the dequantized float8 operands
                  (Float8LinearConfig(emulate=True)): the numerics a GPU's recipe would have, on
                  any device, without its speed.
The output head stays in higher precision in every fp8 policy, as in torchtitan's recipes: its
logits feed the softmax directly and it shares its weight with the embedding.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

from ablate.config import PrecisionConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class PrecisionRuntime:
    """What the train loop needs from a policy: a forward context and a gradient scaler."""

    autocast: Callable[[], contextlib.AbstractContextManager]
    scaler: torch.amp.GradScaler | None
    param_dtype: torch.dtype


def apply_precision(model: nn.Module, policy: PrecisionConfig, device: str) -> PrecisionRuntime:
    """Cast the model's storage and swap its block linears for torchao's Float8Linear where the policy asks."""
    param_dtype = DTYPES[policy.param_dtype]
    model.to(dtype=param_dtype)
    if policy.fp8:
        convert_to_torchao_float8(model, policy.fp8, emulate=policy.emulate)
    if policy.autocast:
        dtype = DTYPES[policy.autocast]

        def autocast():
            return torch.autocast(device_type=device, dtype=dtype)

    else:
        autocast = contextlib.nullcontext
    scaler = torch.amp.GradScaler(device) if policy.loss_scaling else None
    return PrecisionRuntime(autocast=autocast, scaler=scaler, param_dtype=param_dtype)


def convert_to_torchao_float8(model: nn.Module, recipe: str, emulate: bool = False) -> int:
    """torchao's Float8Linear for every nn.Linear but the output head whose sides are multiples of
    16 (what float8 matmuls take; a SwiGLU hidden width of round(8C/3) may not be, and stays in
    bf16); returns how many were converted. emulate: the recipe's config as torchao names it, with
    its matmuls computed in fp32 (each float8 operand divided by its scale, then torch.mm)."""
    Float8LinearConfig, convert_to_float8_training = import_torchao_float8()
    head = getattr(model, "lm_head", None)

    def eligible(module: nn.Module, fqn: str) -> bool:
        return module is not head and module.in_features % 16 == 0 and module.out_features % 16 == 0

    before = sum(isinstance(m, nn.Linear) for m in model.modules())
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=emulate)
    convert_to_float8_training(model, config=config, module_filter_fn=eligible)
    return before - sum(type(m) is nn.Linear for m in model.modules())


def import_torchao_float8():
    """torchao.float8's config and converter, imported only by fp8 policies. torchao's import logs a
    warning for each CUDA extension a CPU build of torch cannot load, and torch one for an enum
    torchao registers: about torchao's kernels, none of which an fp8 policy's run uses off a GPU,
    and a GPU run that needed them would fail loudly at its first matmul."""
    quiet = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
    return Float8LinearConfig, convert_to_float8_training
