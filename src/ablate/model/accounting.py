"""Parameter and FLOP accounting as functions of a ModelConfig (no model instance needed).

Notation: L = n_layer, d = n_embd, T = block_size, V = vocab_size.
Per block: qkv (3d^2) + attention output (d^2) + MLP (4d^2 + 4d^2) = 12 d^2 weights, plus two
LayerNorm gains (2d). Embeddings: token V d (tied with the output head) and position T d.
"""

from __future__ import annotations

import math

from ablate.config import ModelConfig


def params(cfg: ModelConfig) -> int:
    """Total trainable parameters; the tied output head is counted once."""
    return params_non_embedding(cfg) + _vocab(cfg) * cfg.n_embd + cfg.block_size * cfg.n_embd


def params_non_embedding(cfg: ModelConfig) -> int:
    """Kaplan et al. 2020's N: everything but the token and position embeddings."""
    d = cfg.n_embd
    return cfg.n_layer * (12 * d * d + 2 * d) + d


def params_matmul(cfg: ModelConfig) -> int:
    """Weights that take part in a matmul per token: the blocks' 12 L d^2 and the output head V d.

    The position embedding is a lookup (no FLOPs); LayerNorm gains are elementwise.
    """
    return 12 * cfg.n_layer * cfg.n_embd**2 + _vocab(cfg) * cfg.n_embd


def flops_per_token(cfg: ModelConfig, attention: bool = True) -> int:
    """Training FLOPs per token: forward 2N + backward 4N = 6N (Kaplan et al. 2020, Table 1).

    With attention, add 12 L T d: per layer, q k^T and att v each cost 2 T d per token in the
    forward pass, times 3 for forward + backward (Chowdhery et al. 2022, PaLM, Appendix B).
    The causal mask does not halve it: the full T x T scores are computed.
    """
    n = 6 * params_matmul(cfg)
    if attention:
        n += 12 * cfg.n_layer * cfg.block_size * cfg.n_embd
    return n


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
