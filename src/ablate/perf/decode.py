"""Generation speed: the memory-bandwidth bound on decode tokens/s, and a measured greedy loop.

The bound. Each decode step feeds one new token per sequence through the whole network, so it
reads every weight once (shared by the batch) and, per sequence, the keys and values of every
earlier position in every layer (the KV cache). With little arithmetic per byte (a matrix-vector
product per weight matrix) the step cannot finish before those bytes have streamed from memory:

    tokens/s <= bandwidth / bytes per token,   bytes per token = (W + B x KV(context)) / B

with W the weight bytes, KV(t) = 2 L t d elements (keys and values, L layers, width d) and B the
batch (Pope et al. 2022, "Efficiently Scaling Transformer Inference", Sec. 2; the same argument as
the roofline's memory slope). W and KV are lower bounds on traffic (activations, the embedding
rows looked up and any re-reads are left out), so the bound on tokens/s is an upper bound.

The loop. `generate` runs the GPT of model.py greedily with a preallocated KV cache, calling the
model's own modules (its forward has no cache; the cache lives here, outside the nn.Module).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ablate.config import ModelConfig, PrecisionConfig
from ablate.model import accounting

if TYPE_CHECKING:  # the bound is plain arithmetic: the planner uses it without importing torch
    import torch

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


# ---------------------------------------------------------------------------------------------
# The bound
# ---------------------------------------------------------------------------------------------


def weight_bytes(cfg: ModelConfig, dtype: str) -> float:
    """Weights a decode step reads: the blocks' 12 L d^2 matrices, the 2L + 1 LayerNorm gains and
    the tied output head V d (read in full to score every token of the vocabulary)."""
    return float(accounting.params_matmul(cfg) + (2 * cfg.n_layer + 1) * cfg.n_embd) * DTYPE_BYTES[dtype]


def kv_bytes(cfg: ModelConfig, context: int, dtype: str) -> float:
    """One sequence's KV cache over `context` positions: 2 (K, V) x L x context x d elements."""
    return 2.0 * cfg.n_layer * context * cfg.n_embd * DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class DecodeBound:
    model: str
    context: int  # positions whose keys and values each step reads
    batch: int
    bandwidth: float  # bytes/s
    weight_dtype: str
    kv_dtype: str
    weight_bytes: float  # per step, shared by the batch
    kv_bytes: float  # per step and sequence

    @property
    def bytes_per_token(self) -> float:
        return (self.weight_bytes + self.batch * self.kv_bytes) / self.batch

    @property
    def tokens_per_s(self) -> float:
        """The bound on tokens/s of the whole batch."""
        return self.bandwidth / self.bytes_per_token

    @property
    def tokens_per_s_per_sequence(self) -> float:
        return self.tokens_per_s / self.batch

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "bytes_per_token": self.bytes_per_token,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_sequence": self.tokens_per_s_per_sequence,
        }


def decode_bound(
    cfg: ModelConfig,
    bandwidth: float,
    context: int,
    batch: int = 1,
    weight_dtype: str = "fp32",
    kv_dtype: str | None = None,
) -> DecodeBound:
    """The most tokens/s that `bandwidth` (bytes/s) allows at `context` positions and `batch` sequences."""
    if context < 1 or batch < 1 or bandwidth <= 0:
        raise ValueError(f"context={context}, batch={batch}, bandwidth={bandwidth} (valid: all positive)")
    kv_dtype = kv_dtype or weight_dtype
    return DecodeBound(
        cfg.name,
        context,
        batch,
        bandwidth,
        weight_dtype,
        kv_dtype,
        weight_bytes(cfg, weight_dtype),
        kv_bytes(cfg, context, kv_dtype),
    )


def loop_bound(
    cfg: ModelConfig,
    bandwidth: float,
    prompt: int,
    new_tokens: int,
    batch: int = 1,
    weight_dtype: str = "fp32",
    kv_dtype: str | None = None,
) -> float:
    """The bound on `generate`'s decode tokens/s: its decode step i (1 .. new_tokens - 1) reads
    the weights and prompt + i positions of KV per sequence, so the time is at least
    sum_i (W + B KV(prompt + i)) / bandwidth for B (new_tokens - 1) tokens."""
    steps = range(1, new_tokens)
    if not steps:
        raise ValueError(f"new_tokens={new_tokens} leaves no decode step (valid: >= 2)")
    kv_dtype = kv_dtype or weight_dtype
    total = sum(weight_bytes(cfg, weight_dtype) + batch * kv_bytes(cfg, prompt + i, kv_dtype) for i in steps)
    return batch * len(steps) * bandwidth / total


def serving_dtype(precision: PrecisionConfig) -> str:
    """The dtype weights are served in under a training precision policy: its matmul dtype
    (bf16 for the bf16 policies, fp8 for fp8, fp32 otherwise)."""
    return precision.matmul_dtype


def kv_dtype_for(weight_dtype: str) -> str:
    """KV caches stay in 16 bits under fp8 weights (the common serving default)."""
    return "bf16" if weight_dtype == "fp8" else weight_dtype


# ---------------------------------------------------------------------------------------------
# For the planner: the bound beside the training estimates
# ---------------------------------------------------------------------------------------------


def plan_bounds(
    model: ModelConfig, precision: PrecisionConfig, bandwidth_gbs: float | None, context: int, batch: int
) -> list[DecodeBound]:
    """One sequence, and `batch` sequences, at `context` positions; [] without a bandwidth."""
    if not bandwidth_gbs:
        return []
    dtype = serving_dtype(precision)
    return [
        decode_bound(model, bandwidth_gbs * 1e9, context, b, dtype, kv_dtype_for(dtype)) for b in sorted({1, batch})
    ]


def plan_entry(bounds: list[DecodeBound]) -> dict | None:
    """plan.json's "decode" entry."""
    if not bounds:
        return None
    return {
        "formula": "tokens/s <= bandwidth / ((weight bytes + batch x KV bytes(context)) / batch)",
        "bounds": [b.to_dict() for b in bounds],
    }


def plan_row(bounds: list[DecodeBound]) -> tuple[str, str]:
    """The planner table's row."""
    if not bounds:
        return ("decode bound", "n/a (no memory bandwidth: set hardware.memory_bandwidth_gbs=)")
    first = bounds[0]
    parts = [f"<= {b.tokens_per_s:,.0f} tokens/s for {b.batch} sequence{'s' if b.batch > 1 else ''}" for b in bounds]
    return (
        "decode bound",
        f"{'; '.join(parts)} at context {first.context} ({_gb(first.weight_bytes)} of "
        f"{first.weight_dtype} weights + {_gb(first.kv_bytes)} of KV cache per sequence "
        f"read per step, at {_gbs(first.bandwidth)})",
    )


def _gbs(bandwidth: float) -> str:
    x = bandwidth / 1e9
    return f"{x:,.0f} GB/s" if x >= 100 else f"{x:.3g} GB/s"


def _gb(x: float) -> str:
    return f"{x / 1e9:,.2f} GB" if x >= 1e8 else f"{x / 1e6:,.2f} MB"


# ---------------------------------------------------------------------------------------------
# The measured loop
# ---------------------------------------------------------------------------------------------


@dataclass
class DecodeRun:
    batch: int
    prompt: int
    new_tokens: int
    prefill_s: float
    decode_s: float  # the new_tokens - 1 decode steps after the prefill
    tokens: torch.Tensor  # (B, prompt + new_tokens)

    @property
    def tokens_per_s(self) -> float:
        """Decode tokens/s of the whole batch (the prefill's first token excluded)."""
        return self.batch * (self.new_tokens - 1) / self.decode_s

    def to_dict(self) -> dict:
        return {
            "batch": self.batch,
            "prompt": self.prompt,
            "new_tokens": self.new_tokens,
            "prefill_s": self.prefill_s,
            "decode_s": self.decode_s,
            "tokens_per_s": self.tokens_per_s,
        }


def generate(model, prompt: torch.Tensor, new_tokens: int) -> DecodeRun:
    """Greedy decoding of `new_tokens` tokens after `prompt` (B, P) with a KV cache.

    The prefill runs the prompt in one pass and yields the first new token; each later step feeds
    the newest token alone. Needs P + new_tokens - 1 <= block_size (learned positions)."""
    import torch

    with torch.inference_mode():
        return _generate(model, prompt, new_tokens)


def _generate(model, prompt: torch.Tensor, new_tokens: int) -> DecodeRun:
    import torch

    cfg = model.cfg
    B, P = prompt.shape
    if new_tokens < 2 or P < 1 or P + new_tokens - 1 > cfg.block_size:
        raise ValueError(
            f"prompt length {P} + new_tokens {new_tokens} - 1 must fit block_size {cfg.block_size} "
            "(valid: P >= 1, new_tokens >= 2)"
        )
    model.eval()
    param = next(model.parameters())
    hd = cfg.n_embd // cfg.n_head
    # (L, 2, B, H, max_len, hd): keys and values of every position so far, per layer.
    cache = torch.zeros(cfg.n_layer, 2, B, cfg.n_head, P + new_tokens - 1, hd, dtype=param.dtype, device=param.device)
    out = torch.empty(B, P + new_tokens, dtype=torch.long, device=prompt.device)
    out[:, :P] = prompt
    _sync(param.device)
    t0 = time.perf_counter()
    out[:, P] = _step(model, prompt, cache, 0).argmax(-1)
    _sync(param.device)
    t1 = time.perf_counter()
    for i in range(1, new_tokens):
        pos = P + i - 1
        out[:, pos + 1] = _step(model, out[:, pos : pos + 1], cache, pos).argmax(-1)
    _sync(param.device)
    t2 = time.perf_counter()
    return DecodeRun(B, P, new_tokens, t1 - t0, t2 - t1, out)


def _step(model, idx: torch.Tensor, cache: torch.Tensor, pos: int) -> torch.Tensor:
    """idx (B, T) at positions pos .. pos+T-1 (T > 1 only for the prefill at pos 0); fills the
    cache there and returns the last position's logits (B, V)."""
    import torch
    import torch.nn.functional as F

    cfg = model.cfg
    B, T = idx.shape
    C, H = cfg.n_embd, cfg.n_head
    x = model.wte(idx) + model.wpe(torch.arange(pos, pos + T, device=idx.device))
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        q, k, v = attn.qkv(block.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
        cache[layer, 0, :, :, pos : pos + T] = k
        cache[layer, 1, :, :, pos : pos + T] = v
        keys, values = cache[layer, 0, :, :, : pos + T], cache[layer, 1, :, :, : pos + T]
        # One query row sees every cached position; the prefill's square block is causal.
        y = F.scaled_dot_product_attention(q, keys, values, is_causal=T > 1, scale=attn.scale)
        x = x + attn.proj(y.transpose(1, 2).reshape(B, T, C))
        x = x + block.mlp(block.ln_2(x))
    h = model.ln_f(x[:, -1])
    if cfg.mup:
        h = h / model.width_mult  # muP readout multiplier, as in GPT.forward
    return model.lm_head(h)


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(model, batch: int, prompt: int, new_tokens: int, seed: int = 0) -> DecodeRun:
    """`generate` from a random prompt, after one untimed warm-up run of the same shapes."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.cfg.vocab_size, (batch, prompt), generator=g)
    ids = ids.to(next(model.parameters()).device)
    generate(model, ids, new_tokens)
    return generate(model, ids, new_tokens)


def model_dtype(model) -> str:
    """The DTYPE_BYTES key of a model's parameters ("fp32", "bf16", "fp16")."""
    import torch

    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[next(model.parameters()).dtype]
