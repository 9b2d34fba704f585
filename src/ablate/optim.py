"""AdamW (Loshchilov & Hutter 2019) and its learning-rate schedule."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ablate.config import OptimConfig


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """Decay matrices only (GPT-2 practice); LayerNorm gains are not decayed.

    Weights stored in bf16 get an AdamW whose moments are fp32 (bf16_pure: 12 bytes/param),
    because torch.optim.AdamW keeps its moments in the parameter's dtype.

    A muP model (model.py) puts its hidden matrices in their own group with `lr_scale` 1/m
    (Yang et al. 2022, Table 3: Adam LR ~ 1/fan_in for hidden weights) and weight decay times m,
    so that the decoupled decay per step, lr * weight_decay, does not change with width (the
    convention of the `mup` package's MuAdamW).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    kwargs = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    mup = getattr(getattr(model, "cfg", None), "mup", False)
    if mup:
        groups = _mup_groups(model, groups, cfg)
    if any(p.dtype != torch.float32 for p in params):
        return Fp32StateAdamW(groups, **kwargs)
    return ScaledLRAdamW(groups, **kwargs) if mup else torch.optim.AdamW(groups, **kwargs)


def _mup_groups(model: nn.Module, groups: list[dict], cfg: OptimConfig) -> list[dict]:
    m = model.width_mult
    hidden = {id(p) for p in model.hidden_matrices()}
    decay, no_decay = groups
    return [
        {"params": [p for p in decay["params"] if id(p) in hidden], "weight_decay": cfg.weight_decay * m, "lr_scale": 1.0 / m},
        {"params": [p for p in decay["params"] if id(p) not in hidden], "weight_decay": cfg.weight_decay},
        no_decay,
    ]


class ScaledLRAdamW(torch.optim.AdamW):
    """AdamW whose param groups may carry an `lr_scale`: a step uses lr * lr_scale.

    The schedule (train.py) writes one base lr into every group before each step; the scale
    is applied here, for the duration of the step only, so the schedule stays per-run.
    """

    def step(self, closure=None):
        base = [group["lr"] for group in self.param_groups]
        for group in self.param_groups:
            group["lr"] = group["lr"] * group.get("lr_scale", 1.0)
        try:
            return super().step(closure)
        finally:
            for group, lr in zip(self.param_groups, base):
                group["lr"] = lr


def lr_at(step: int, total_steps: int, cfg: OptimConfig) -> float:
    """Linear warmup to cfg.lr, then cosine decay to cfg.lr * min_lr_ratio at total_steps."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant" or total_steps <= cfg.warmup_steps:
        return cfg.lr
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1.0 + math.cos(math.pi * progress))


class Fp32StateAdamW(torch.optim.Optimizer):
    """AdamW for low-precision weights: fp32 moments, the update computed in fp32, and the
    result written back with stochastic rounding so that updates smaller than a bf16 ulp
    still move the weight in expectation (Zamirai et al. 2020, "Revisiting BFloat16 Training").
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                t = state["step"]
                g = p.grad.float()
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.lerp_(g, 1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                m_hat = m / (1 - beta1**t)
                v_hat = v / (1 - beta2**t)
                w = p.float()
                lr = group["lr"] * group.get("lr_scale", 1.0)
                w.mul_(1 - lr * group["weight_decay"])
                w.addcdiv_(m_hat, v_hat.sqrt_().add_(group["eps"]), value=-lr)
                p.copy_(stochastic_round(w, p.dtype))
        return None


def stochastic_round(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round fp32 -> bf16 up or down with probability proportional to proximity.

    bf16 is the top 16 bits of fp32: adding uniform noise below bit 16 and truncating rounds
    up with probability equal to the discarded fraction.
    """
    if dtype != torch.bfloat16:
        return x.to(dtype)
    bits = x.view(torch.int32)
    noise = torch.randint_like(bits, 0, 1 << 16)
    return ((bits + noise) & -65536).view(torch.float32).to(torch.bfloat16)
