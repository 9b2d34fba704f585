"""AdamW (Loshchilov & Hutter 2019), Muon with AdamW beside it (Jordan et al. 2024), and the
learning-rate schedule."""

from __future__ import annotations

import inspect
import math

import torch
import torch.nn as nn

from ablate.config import OptimConfig


def build_optimizer(model: nn.Module, cfg: OptimConfig, compiled: bool = False, rounding: str = "stochastic"):
    """Decay matrices only (GPT-2 practice); LayerNorm gains are not decayed.

    compiled: the model runs under torch.compile. Otherwise the optimizer is one that never
    imports torch._dynamo (EagerOnly below): same arithmetic, a second or two less start-up.

    Weights stored in bf16 get an AdamW whose moments are fp32 (bf16_pure: 12 bytes/param),
    because torch.optim.AdamW keeps its moments in the parameter's dtype; rounding (precision.rounding)
    is how it writes each update back to them.

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
    if cfg.name == "muon":
        return _muon_with_adamw(model, groups, cfg, compiled)
    mup = getattr(getattr(model, "cfg", None), "mup", False)
    if mup:
        groups = _mup_groups(model, groups, cfg)
    if any(p.dtype != torch.float32 for p in params):
        return (Fp32StateAdamW if compiled else EagerFp32StateAdamW)(groups, **kwargs, rounding=rounding)
    # On CUDA, torch's fused AdamW: the whole update in one kernel launch per dtype and device
    # instead of foreach's several per step (the same arithmetic).
    fused = {"fused": True} if params and all(p.is_cuda for p in params) else {}
    if mup:
        return (ScaledLRAdamW if compiled else EagerScaledLRAdamW)(groups, **kwargs, **fused)
    return (torch.optim.AdamW if compiled else EagerAdamW)(groups, **kwargs, **fused)


def _unwrapped(fn):
    """The function under torch's wrappers of an Optimizer method (they use functools.wraps)."""
    return inspect.unwrap(fn)


class EagerOnly(torch.optim.Optimizer):
    """For an optimizer that is never compiled: torch.optim wraps add_param_group, zero_grad,
    state_dict and load_state_dict in torch._disable_dynamo, whose first call imports
    torch._dynamo (with sympy: about as long as importing torch itself), and Adam's step in
    _use_grad_for_differentiable, which imports it on every call to place graph breaks. Outside
    torch.compile both wrappers only add that import; these methods call the wrapped functions
    directly, and step sets grad mode as _use_grad_for_differentiable does. Where torch's
    methods are not wrapped (another torch version), unwrap returns them unchanged.
    Checked: tests/model/test_optim.py (same trajectory as torch.optim.AdamW, no torch._dynamo)."""

    def add_param_group(self, param_group: dict) -> None:
        _unwrapped(torch.optim.Optimizer.add_param_group)(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _unwrapped(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def state_dict(self) -> dict:
        return _unwrapped(torch.optim.Optimizer.state_dict)(self)

    def load_state_dict(self, state_dict: dict) -> None:
        _unwrapped(torch.optim.Optimizer.load_state_dict)(self, state_dict)


class EagerAdamW(EagerOnly, torch.optim.AdamW):
    def step(self, closure=None):
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return _unwrapped(torch.optim.Adam.step)(self, closure)


def _mup_groups(model: nn.Module, groups: list[dict], cfg: OptimConfig) -> list[dict]:
    m = model.width_mult
    hidden = {id(p) for p in model.hidden_matrices()}
    decay, no_decay = groups
    return [
        {
            "params": [p for p in decay["params"] if id(p) in hidden],
            "weight_decay": cfg.weight_decay * m,
            "lr_scale": 1.0 / m,
        },
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
            for group, lr in zip(self.param_groups, base, strict=False):
                group["lr"] = lr


class EagerScaledLRAdamW(ScaledLRAdamW, EagerAdamW):
    """ScaledLRAdamW's step, then EagerAdamW's (method resolution order)."""


def _muon_with_adamw(model: nn.Module, groups: list[dict], cfg: OptimConfig, compiled: bool) -> MuonWithAdamW:
    """Muon for the blocks' 2-D matrices (model.hidden_matrices), AdamW for the rest: embeddings, the
    head and the gains, which Muon's orthogonalised update does not suit (as nanochat splits them)."""
    hidden = {id(p) for p in model.hidden_matrices()}
    matrices = [p for p in model.parameters() if id(p) in hidden and p.requires_grad]
    muon = (torch.optim.Muon if compiled else EagerMuon)(
        [{"params": matrices, "lr_scale": cfg.muon_lr / cfg.lr}],
        lr=cfg.muon_lr,
        weight_decay=cfg.muon_weight_decay,
        momentum=cfg.muon_momentum,
        nesterov=True,
        ns_steps=cfg.muon_ns_steps,
        adjust_lr_fn="original",
    )
    rest = [{**g, "params": [p for p in g["params"] if id(p) not in hidden]} for g in groups]
    adamw = (torch.optim.AdamW if compiled else EagerAdamW)(
        [g for g in rest if g["params"]], lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps
    )
    return MuonWithAdamW(muon, adamw)


class EagerMuon(EagerOnly, torch.optim.Muon):
    """torch.optim.Muon with EagerOnly's methods (its step has no torch._dynamo wrapper)."""


class MuonWithAdamW:
    """Two optimizers stepped as one. The schedule writes one base lr into every group (train.py);
    Muon's group carries lr_scale = muon_lr / lr, applied for the duration of its step only, so
    both follow the same schedule shape from their own peak rates."""

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.Optimizer):
        self.muon, self.adamw = muon, adamw

    @property
    def param_groups(self) -> list[dict]:
        return self.muon.param_groups + self.adamw.param_groups

    @torch.no_grad()
    def step(self, closure=None):
        base = [group["lr"] for group in self.muon.param_groups]
        for group in self.muon.param_groups:
            group["lr"] = group["lr"] * group["lr_scale"]
        try:
            self.muon.step()
        finally:
            for group, lr in zip(self.muon.param_groups, base, strict=True):
                group["lr"] = lr
        self.adamw.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none)
        self.adamw.zero_grad(set_to_none)

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])


def lr_at(step: int, total_steps: int, cfg: OptimConfig) -> float:
    """The learning rate of step `step` (0-based) of a run of `total_steps` steps.

    Linear warmup to cfg.lr over warmup_steps, then by cfg.schedule:
    - cosine: decay to lr * min_lr_ratio at step total_steps (Loshchilov & Hutter 2017);
    - wsd: constant until cooldown_start, then decay to lr * min_lr_ratio at step total_steps,
      shaped by cooldown_shape (Hägele et al. 2024, Sec. 3: 1-sqrt is 1 - sqrt(p));
    - constant: cfg.lr.
    Before cooldown_start a wsd run's rates are those of a constant run of any length, which is
    what lets one constant-rate trunk serve every budget (run/branches.py).
    """
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant" or total_steps <= cfg.warmup_steps:
        return cfg.lr
    floor = cfg.lr * cfg.min_lr_ratio
    if cfg.schedule == "wsd":
        start = cooldown_start(total_steps, cfg)
        if step < start:
            return cfg.lr
        return floor + (cfg.lr - floor) * COOLDOWN_SHAPES[cfg.cooldown_shape]((step - start) / (total_steps - start))
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
    return floor + 0.5 * (cfg.lr - floor) * (1.0 + math.cos(math.pi * progress))


# Cooldown shapes: the fraction of (lr - floor) left at progress p in [0, 1) of the cooldown.
COOLDOWN_SHAPES = {
    "1-sqrt": lambda p: 1.0 - math.sqrt(p),
    "linear": lambda p: 1.0 - p,
    "cosine": lambda p: 0.5 * (1.0 + math.cos(math.pi * p)),
}


def cooldown_start(total_steps: int, cfg: OptimConfig) -> int:
    """The first step of a wsd run's cooldown: round(cooldown_fraction x total_steps) steps before
    the end, at least one step, and never inside the warmup. The steps before it train at the
    constant rate, so this is where a cooldown branch forks from its trunk."""
    length = max(1, round(cfg.cooldown_fraction * total_steps))
    return max(min(cfg.warmup_steps, total_steps - 1), total_steps - length)


class Fp32StateAdamW(torch.optim.Optimizer):
    """AdamW for low-precision weights: fp32 moments, the update computed in fp32, and the
    result written back with stochastic rounding so that updates smaller than a bf16 ulp
    still move the weight in expectation (Zamirai et al. 2020, "Revisiting BFloat16 Training").
    rounding="nearest" writes it back rounded to the nearest bf16 instead, as a plain cast does:
    an update under half an ulp of its weight is lost (what stochastic rounding is for).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, rounding="stochastic"):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        # not a param-group default: a checkpoint's groups (saved before the key existed) replace those
        self.round = stochastic_round if rounding == "stochastic" else _nearest

    def load_state_dict(self, state_dict: dict) -> None:
        """torch casts a loaded state's floating tensors to their parameter's dtype, which would make
        the fp32 moments bf16 on resume (and the next step fail): they are put back as saved."""
        moments = {
            i: {k: v for k, v in s.items() if torch.is_tensor(v) and v.dtype == torch.float32}
            for i, s in state_dict["state"].items()
        }
        super().load_state_dict(state_dict)
        params = [p for group in self.param_groups for p in group["params"]]
        for i, saved in moments.items():
            for key, value in saved.items():
                self.state[params[int(i)]][key] = value.to(params[int(i)].device, copy=True)

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
                p.copy_(self.round(w, p.dtype))
        return None


def _nearest(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype)  # round-to-nearest-even


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


class EagerFp32StateAdamW(Fp32StateAdamW, EagerOnly):
    """Fp32StateAdamW's load_state_dict, then EagerOnly's (method resolution order)."""
