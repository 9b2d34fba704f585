"""A plain single-device GPT (Radford et al. 2019 layout, pre-norm), with its architecture arms:
positions (learned, rotary in attention.py, none), the norm (norm.py), the MLP (mlp.py), the
attention's heads and QK-norm (attention.py), and tied or untied embeddings.

Precision, compilation and parallelism are applied from outside (see precision.py, train.py);
this module only describes the network. Shapes: B batch, T time, C = n_embd, H heads, hd = C/H.
A part that is a user's class (PACKAGE.MODULE:CLASS, parts.py) keeps its own initialisation.

With `mup` the network follows the maximal update parametrization for Adam (Yang et al. 2022,
Tensor Programs V, Table 3 with the output multiplier of its Appendix B), relative to a base
width C0 = mup_base_width and the width multiplier m = C / C0:
- hidden matrices (qkv, attention and MLP projections): init std / sqrt(m), Adam LR / m (optim.py);
- input and tied output embeddings, LayerNorm gains: init and LR independent of width;
- readout: logits = W_e h / m (the tied embedding as output layer, its input scaled by 1/m);
- attention logits q.k / hd instead of q.k / sqrt(hd), times sqrt(hd0) so that m = 1 is SP.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ablate.config import ModelConfig
from ablate.model.attention import build_attention
from ablate.model.mlp import build_mlp
from ablate.model.norm import build_norm


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = build_norm(cfg)
        self.attn = build_attention(cfg)
        self.ln_2 = build_norm(cfg)
        self.mlp = build_mlp(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.vocab_size is None:
            raise ValueError("ModelConfig.vocab_size must be set before building the model")
        self.cfg = cfg
        self.width_mult = width_mult(cfg)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.position == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = build_norm(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            # Weight tying (Press & Wolf 2017): the output head reuses the token embedding.
            self.lm_head.weight = self.wte.weight
        users = [m for key in cfg.custom_parts() for m in self._parts(key)]
        own = {id(m) for part in users for m in part.modules()}
        self.apply(lambda m: None if id(m) in own else self._init_weights(m))
        # GPT-2: residual projections scaled by 1/sqrt(2 * n_layer) so the residual stream's
        # variance does not grow with depth.
        for name, module in self.named_modules():
            if name.endswith("proj") and isinstance(module, nn.Linear) and id(module) not in own:
                nn.init.normal_(module.weight, mean=0.0, std=self._hidden_std() / math.sqrt(2 * cfg.n_layer))

    def _parts(self, key: str) -> list[nn.Module]:
        """Every module built for model.KEY (the norms include ln_f)."""
        name = {"attention": "attn", "mlp": "mlp"}.get(key)
        if name is not None:
            return [getattr(b, name) for b in self.blocks]
        return [self.ln_f, *(n for b in self.blocks for n in (b.ln_1, b.ln_2))]

    def _init_weights(self, module: nn.Module) -> None:
        # The output head, tied or not, is initialised as an embedding (muP: width-independent).
        if isinstance(module, nn.Embedding) or module is self.lm_head:
            nn.init.normal_(module.weight, mean=0.0, std=self.cfg.init_std)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=self._hidden_std())

    def _hidden_std(self) -> float:
        """muP: hidden weights keep variance ~ 1/fan_in, i.e. std / sqrt(m) (1 under SP)."""
        return self.cfg.init_std / math.sqrt(self.width_mult)

    def hidden_matrices(self) -> list[nn.Parameter]:
        """The matrices whose fan-in and fan-out both grow with width (muP's "hidden weights"):
        every 2-D parameter of the blocks, whatever module holds it (precision.py swaps in Fp8Linear)."""
        return [p for p in self.blocks.parameters() if p.dim() == 2]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx, targets: (B, T) token ids. Returns logits (B, T, V) and mean cross-entropy in nats."""
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        h = self.ln_f(x)
        if self.cfg.mup:
            h = h / self.width_mult  # muP readout multiplier 1/m: logits stay O(1) as width grows
        logits = self.lm_head(h)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def width_mult(cfg: ModelConfig) -> float:
    """muP's m = n_embd / mup_base_width; 1.0 under SP or when no base width is given."""
    if not cfg.mup or cfg.mup_base_width is None:
        return 1.0
    return cfg.n_embd / cfg.mup_base_width


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The state_dict shapes of GPT(cfg), cheaply: built on the CPU with every in-place fill (the
    initialisers) skipped, so its weights are allocated but never written. Not on the meta device:
    meta tensors run torch's Python reference ops, whose first call imports torch._dynamo (about as
    long as importing torch), which a resume in a warm worker would pay."""
    with _NoInPlaceFills():
        return {k: tuple(v.shape) for k, v in GPT(cfg).state_dict().items()}


# Tensor methods that write values, never shapes (in-place view ops such as unsqueeze_ are not here).
_FILLS = frozenset(
    {"normal_", "uniform_", "zero_", "fill_", "copy_", "bernoulli_", "exponential_", "random_", "log_normal_"}
)


class _NoInPlaceFills(torch.overrides.TorchFunctionMode):
    """Returns the target of every initialiser (torch.nn.init.*) and value fill (_FILLS) unchanged."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", "") == "torch.nn.init" or getattr(func, "__name__", "") in _FILLS:
            target = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            if isinstance(target, torch.Tensor):
                return target
        return func(*args, **kwargs)
