"""Parameter and FLOP accounting as functions of a ModelConfig (no model instance needed).

Notation: L = n_layer, d = n_embd, T = block_size, V = vocab_size, H = n_head, G = n_kv_head,
hd = d / H, h = the MLP's hidden width (4d; round(8d/3) for SwiGLU).
Per block: qkv d (d + 2 G hd) + attention output d^2, the MLP 2 d h (SwiGLU: 3 d h), and two norm
gains 2d (LayerNorm and RMSNorm alike; QK-norm has no gain). At G = H and h = 4d that is the GPT-2
block's 12 d^2 + 2d. Embeddings: token V d, the output head V d more when untied, positions T d
when learned (rotary and none have no parameters).

A part that is a user's class (model.attention, model.mlp or model.norm = PACKAGE.MODULE:CLASS) is
counted by building it (sum of p.numel()) and its FLOPs measured with FlopCounterMode, once per
config (model/measure.py): `flops_source` says which.
"""

from __future__ import annotations

import math

from ablate.config import ModelConfig


def attention_matrices(cfg: ModelConfig) -> int:
    """qkv (d + 2 G hd) x d and the output projection d x d."""
    d = cfg.n_embd
    return d * (d + 2 * cfg.kv_heads * cfg.head_dim) + d * d


def mlp_matrices(cfg: ModelConfig) -> int:
    """fc h x d and proj d x h; SwiGLU's fc is gate and up, 2h x d."""
    matrices = 3 if cfg.mlp == "swiglu" else 2
    return matrices * cfg.n_embd * cfg.mlp_hidden


def norm_params(cfg: ModelConfig) -> int:
    return cfg.n_embd


def block_params(cfg: ModelConfig) -> int:
    return part_params(cfg, "attention") + part_params(cfg, "mlp") + 2 * part_params(cfg, "norm")


def part_params(cfg: ModelConfig, key: str) -> int:
    """One attention, MLP or norm: a built-in part's parameters by formula, a user's by building it."""
    if key in cfg.custom_parts():
        return _measured(cfg, key).params
    return {"attention": attention_matrices, "mlp": mlp_matrices, "norm": norm_params}[key](cfg)


def params(cfg: ModelConfig) -> int:
    """Total trainable parameters; a tied output head is counted once."""
    return params_non_embedding(cfg) + embedding_params(cfg)


def embedding_params(cfg: ModelConfig) -> int:
    """The token table V d, an untied head's V d, and the learned positions T d."""
    heads = 1 if cfg.tie_embeddings else 2
    positions = cfg.block_size * cfg.n_embd if cfg.position == "learned" else 0
    return heads * _vocab(cfg) * cfg.n_embd + positions


def params_non_embedding(cfg: ModelConfig) -> int:
    """Kaplan et al. 2020's N: everything but the vocabulary and position matrices (an untied
    output head is a vocabulary matrix, as the tied one is)."""
    return cfg.n_layer * block_params(cfg) + part_params(cfg, "norm")


def params_matmul(cfg: ModelConfig) -> int:
    """Weights that take part in a matmul per token: the blocks' attention and MLP matrices and the
    output head V d. The position table is a lookup (no FLOPs), norm gains are elementwise, and a
    user's part is measured instead (flops_per_token)."""
    blocks = sum(count(cfg) for key, count in MATRICES.items() if key not in cfg.custom_parts())
    return cfg.n_layer * blocks + _vocab(cfg) * cfg.n_embd


def flops_per_token(cfg: ModelConfig, attention: bool = True) -> int:
    """Training FLOPs per token: forward 2N + backward 4N = 6N (Kaplan et al. 2020, Table 1).

    With attention, add 12 L T d: per layer, q k^T and att v each cost 2 T d per token in the
    forward pass (H query heads of hd; grouped key/value heads change nothing here), times 3 for
    forward + backward (Chowdhery et al. 2022, PaLM, Appendix B). The causal mask does not halve
    it: the full T x T scores are computed. A user's part adds 3 x its measured forward FLOPs per
    token and layer (measure.py), and a user's attention replaces the 12 L T d term.
    """
    n = 6 * params_matmul(cfg)
    custom = cfg.custom_parts()
    if attention and "attention" not in custom:
        n += 12 * cfg.n_layer * cfg.block_size * cfg.n_embd
    for key in custom:
        n += round(3 * cfg.n_layer * _measured(cfg, key).forward_flops_per_token)
    return n


def flops_source(cfg: ModelConfig) -> str:
    """How flops_per_token was found: by formula, or with a user's part measured."""
    custom = cfg.custom_parts()
    if not custom:
        return "formula"
    return "measured: " + ", ".join(f"model.{k}" for k in custom) + " (FlopCounterMode forward x 3)"


def training_flops(cfg: ModelConfig, tokens: int, attention: bool = True) -> float:
    return float(flops_per_token(cfg, attention)) * tokens


def flops_6nd(n_params: float, tokens: float) -> float:
    """The planning rule of thumb C = 6 N D (Hoffmann et al. 2022, with N total parameters)."""
    return 6.0 * n_params * tokens


def mfu(tokens_per_s: float, cfg: ModelConfig, peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation (Chowdhery et al. 2022): achieved model FLOP/s over peak. A rate above
    the peak is a peak that was measured too low, a bug of the caller (run/trainer.py raises the
    peak first): it raises rather than return an impossible number."""
    if not peak_flops:
        return None
    value = tokens_per_s * flops_per_token(cfg) / peak_flops
    if value > 1.0:
        raise ValueError(
            f"MFU {value:.2%} is impossible: {tokens_per_s * flops_per_token(cfg):.4g} FLOP/s attained "
            f"against a peak of {peak_flops:.4g}"
        )
    return value


def recorded_mfu(value: float | None) -> float | None:
    """An MFU read back from a record (result.json, an MLflow metric) when it is possible, else None.
    Records written before peaks were re-measured (perf/peak.py) can hold MFUs above 1, from a peak
    measured on a busy machine; they are never shown or used as a measurement."""
    if value is None or not math.isfinite(value) or not 0 < value <= 1.0:
        return None
    return float(value)


def _vocab(cfg: ModelConfig) -> int:
    if cfg.vocab_size is None:
        raise ValueError("vocab_size is unknown: set model.vocab_size or resolve it from the data first")
    return cfg.vocab_size


MATRICES = {"attention": attention_matrices, "mlp": mlp_matrices}


def _measured(cfg: ModelConfig, key: str):
    from ablate.model.measure import measure_part  # torch, only for a user's part

    return measure_part(cfg, key)
