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

The loop. `generate` runs the GPT of model/gpt.py with a preallocated KV cache, calling the
model's own modules (its forward has no cache; the cache lives here, outside the nn.Module), for
every built-in arm (learned, rotary or no positions; grouped-query heads; QK-norm). Each new token
is picked by a `NextToken` rule: greedy, or sampled at a temperature from the top k. A model whose
attention is a user's class (model.attention=PACKAGE.MODULE:CLASS) has no cache here: each step runs
its forward over the whole sequence so far, and its bound counts the weights alone (`kv_cache`).
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
    """Weights a decode step reads: the blocks' matrices and the output head V d (read in full to
    score every token of the vocabulary), as accounting.params_matmul counts them for every arm, and
    the 2L + 1 norm gains."""
    return float(accounting.params_matmul(cfg) + (2 * cfg.n_layer + 1) * cfg.n_embd) * DTYPE_BYTES[dtype]


def kv_bytes(cfg: ModelConfig, context: int, dtype: str) -> float:
    """One sequence's KV cache over `context` positions: 2 (K, V) x L x context x G hd elements
    (G hd = d with a key/value head per query head; fewer under grouped-query attention)."""
    return 2.0 * cfg.n_layer * context * cfg.kv_heads * cfg.head_dim * DTYPE_BYTES[dtype]


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
    kv_cache: bool = True,
) -> float:
    """The bound on `generate`'s decode tokens/s: its decode step i (1 .. new_tokens - 1) reads
    the weights and prompt + i positions of KV per sequence, so the time is at least
    sum_i (W + B KV(prompt + i)) / bandwidth for B (new_tokens - 1) tokens. Without a KV cache a
    step computes the keys and values again instead of reading them: W alone is its least traffic."""
    steps = range(1, new_tokens)
    if not steps:
        raise ValueError(f"new_tokens={new_tokens} leaves no decode step (valid: >= 2)")
    kv_dtype = kv_dtype or weight_dtype
    read = batch if kv_cache else 0  # sequences whose cached keys and values a step reads
    total = sum(weight_bytes(cfg, weight_dtype) + read * kv_bytes(cfg, prompt + i, kv_dtype) for i in steps)
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
    kv_cache: bool = True  # False: each step ran the model over the whole sequence so far

    @property
    def tokens_per_s(self) -> float:
        """Decode tokens/s of the whole batch (the prefill's first token excluded)."""
        return self.batch * (self.new_tokens - 1) / self.decode_s

    @property
    def wall_s(self) -> float:
        """The whole generation, as the user waits for it: the prefill and every decode step."""
        return self.prefill_s + self.decode_s

    def to_dict(self) -> dict:
        return {
            "batch": self.batch,
            "prompt": self.prompt,
            "new_tokens": self.new_tokens,
            "kv_cache": self.kv_cache,
            "prefill_s": self.prefill_s,
            "decode_s": self.decode_s,
            "wall_s": self.wall_s,
            "tokens_per_s": self.tokens_per_s,
            "generated_tokens_per_s": self.batch * self.new_tokens / self.wall_s,
        }


@dataclass(frozen=True)
class NextToken:
    """How the next token is picked from the last position's logits (B, V): the most likely one at
    temperature 0 or top_k 1, else a draw from softmax(logits / temperature) over the top_k most
    likely (None: the whole vocabulary), from `generator` (the draws of one seed are the same)."""

    temperature: float = 0.0
    top_k: int | None = None
    generator: torch.Generator | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        import torch

        if self.greedy:
            return logits.argmax(-1)
        scaled = logits.float() / self.temperature
        if self.top_k is not None and self.top_k < scaled.size(-1):
            kth = torch.topk(scaled, self.top_k, dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        probs = torch.softmax(scaled, dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)


GREEDY = NextToken()


def has_kv_cache(cfg: ModelConfig) -> bool:
    """Whether `generate` caches keys and values for this model: for the built-in attention, not for a user's."""
    return "attention" not in cfg.custom_parts()


def generate(model, prompt: torch.Tensor, new_tokens: int, pick: NextToken = GREEDY) -> DecodeRun:
    """`new_tokens` tokens after `prompt` (B, P), each picked by `pick`, with a KV cache where the
    model has one (has_kv_cache).

    The prefill runs the prompt in one pass and yields the first new token; each later step feeds
    the newest token alone. Needs P + new_tokens - 1 <= block_size (the positions the model knows)."""
    import torch

    with torch.inference_mode():
        return _generate(model, prompt, new_tokens, pick)


def check_room(cfg: ModelConfig, prompt: int, new_tokens: int) -> None:
    if new_tokens < 2 or prompt < 1 or prompt + new_tokens - 1 > cfg.block_size:
        raise ValueError(
            f"prompt length {prompt} + new_tokens {new_tokens} - 1 must fit block_size {cfg.block_size} "
            "(valid: P >= 1, new_tokens >= 2)"
        )


def _generate(model, prompt: torch.Tensor, new_tokens: int, pick: NextToken) -> DecodeRun:
    import torch

    cfg = model.cfg
    B, P = prompt.shape
    check_room(cfg, P, new_tokens)
    model.eval()
    param = next(model.parameters())
    cached = has_kv_cache(cfg)
    # (L, 2, B, G, max_len, hd): keys and values of every position so far, per layer.
    shape = (cfg.n_layer, 2, B, cfg.kv_heads, P + new_tokens - 1, cfg.head_dim)
    cache = torch.zeros(shape, dtype=param.dtype, device=param.device) if cached else None
    out = torch.empty(B, P + new_tokens, dtype=torch.long, device=prompt.device)
    out[:, :P] = prompt
    _sync(param.device)
    t0 = time.perf_counter()
    out[:, P] = pick(_logits(model, out[:, :P], cache, 0))
    _sync(param.device)
    t1 = time.perf_counter()
    for i in range(1, new_tokens):
        pos = P + i - 1
        idx = out[:, pos : pos + 1] if cached else out[:, : pos + 1]
        out[:, pos + 1] = pick(_logits(model, idx, cache, pos))
    _sync(param.device)
    t2 = time.perf_counter()
    return DecodeRun(B, P, new_tokens, t1 - t0, t2 - t1, out, cached)


def _logits(model, idx: torch.Tensor, cache: torch.Tensor | None, pos: int) -> torch.Tensor:
    """The last position's logits (B, V): a cached step, or the model's own forward without a cache."""
    if cache is None:
        return model(idx)[0][:, -1]
    return _step(model, idx, cache, pos)


def _step(model, idx: torch.Tensor, cache: torch.Tensor, pos: int) -> torch.Tensor:
    """idx (B, T) at positions pos .. pos+T-1 (T > 1 only for the prefill at pos 0); fills the
    cache there and returns the last position's logits (B, V). GPT.forward and Block.forward,
    with the attention's keys and values kept."""
    import torch

    x = model.wte(idx)
    if model.wpe is not None:
        x = x + model.wpe(torch.arange(pos, pos + idx.size(1), device=idx.device))
    for layer, block in enumerate(model.blocks):
        x = x + _cached_attention(block.attn, block.ln_1(x), cache[layer], pos)
        x = x + block.mlp(block.ln_2(x))
    h = model.ln_f(x[:, -1])
    if model.cfg.mup:
        h = h / model.width_mult  # muP readout multiplier, as in GPT.forward
    return model.lm_head(h)


def _cached_attention(attn, x: torch.Tensor, cache: torch.Tensor, pos: int) -> torch.Tensor:
    """CausalSelfAttention.forward for positions pos .. pos+T-1, reading and filling one layer's
    cache (2, B, G, max_len, hd)."""
    import torch.nn.functional as F

    B, T, C = x.shape
    H, G, hd = attn.n_head, attn.n_kv_head, attn.head_dim
    q, k, v = attn.qkv(x).split((C, G * hd, G * hd), dim=2)
    q = q.view(B, T, H, hd).transpose(1, 2)
    k, v = (t.view(B, T, G, hd).transpose(1, 2) for t in (k, v))
    if attn.qk_norm:
        q, k = F.rms_norm(q, (hd,)), F.rms_norm(k, (hd,))
    if attn.rotary is not None:
        q, k = attn.rotary(q, start=pos), attn.rotary(k, start=pos)
    cache[0, :, :, pos : pos + T] = k
    cache[1, :, :, pos : pos + T] = v
    keys, values = cache[0, :, :, : pos + T], cache[1, :, :, : pos + T]
    # One query row sees every cached position; the prefill's square block is causal.
    y = F.scaled_dot_product_attention(q, keys, values, is_causal=T > 1, scale=attn.scale, enable_gqa=G != H)
    return attn.proj(y.transpose(1, 2).reshape(B, T, C))


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


BANDWIDTH_GIVEN = "given"  # the source of a bandwidth the user gave

# Below this many weights (every CPU-trainable preset, nano to large) a CPU decode step is a chain
# of matrix-vector products of microseconds each, and torch's threads spend more waiting on one
# another at every op than they share: one thread decoded each of them 3.1 to 23 times faster than
# two on 2 cores with other work on them (benchmarks/bench_decode.py, results/decode.json).
ONE_THREAD_BELOW = 20_000_000


def cpu_threads(cfg: ModelConfig, default: int) -> int:
    """The torch threads for decoding `cfg` on a CPU: one for a model under ONE_THREAD_BELOW
    weights, else `default` (torch's own, one per core)."""
    return 1 if accounting.params(cfg) < ONE_THREAD_BELOW else default


def device_bandwidth(device: str, given_gbs: float | None = None) -> tuple[float, str]:
    """(bytes/s, where it comes from) of the memory a decode step on `device` streams from: the
    figure given, else a CUDA device's catalogue entry (conf/hardware), else this CPU's copy
    benchmark (perf/roofline.py, measured once and cached); ValueError when nothing gives it."""
    from ablate.perf import roofline

    if given_gbs:
        return given_gbs * 1e9, BANDWIDTH_GIVEN
    if device == "cpu":
        return roofline.measured_cpu_bandwidth(), "this CPU's copy benchmark"
    if device == "cuda":
        import torch

        name = torch.cuda.get_device_name()
        entry = roofline.catalogue_match(name)
        if entry is not None and entry.memory_bandwidth_gbs:
            return entry.memory_bandwidth_gbs * 1e9, f"catalogue {entry.name}, matched to {name!r}"
        raise ValueError(f"{name!r} has no memory bandwidth in the catalogue (conf/hardware)")
    raise ValueError(f"no memory bandwidth known for a {device} device")
