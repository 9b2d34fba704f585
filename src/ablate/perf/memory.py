"""Memory of one training step of ablate's GPT (src/ablate/model.py), per part, from the config alone.

Shapes: B micro-batch (sequences), T context, C = n_embd, H heads, L layers, V vocabulary,
P parameters. The model is pre-LayerNorm, bias-free, MLP 4C with GELU, tied output head, and its
loss is cross-entropy on fp32 logits. Bytes per element below are for one precision policy.

States (exact, checked against the real optimizer after one step):
  weights          P x storage bytes (4 fp32, 2 bf16)
  gradients        P x storage bytes (same dtype as the weights)
  optimizer        P x 8: fp32 Adam m and v in every policy; torch's AdamW (fp32 weights) also
                   keeps a 4-byte `step` tensor per parameter tensor, on the host when training
                   on a GPU (not fused or capturable), so it counts only for device="cpu".
  master weights   a separate fp32 copy: none here. Autocast policies keep fp32 weights, which
                   are the master copy; bf16_pure keeps none (stochastic rounding instead).
  buffers          each attention layer's causal mask, (T, T) bool: L T^2 bytes.

Activations saved for backward (what torch.autograd.graph.saved_tensors_hooks sees, parameter
storages excluded, storages shared by several saved views counted once), per layer:
  ln_1 input x             (B, T, C)    resid           ln_1 mean, rstd  2 x (B, T)  ln_stats
  qkv input                (B, T, C)    lin_in          (the LayerNorm output, or its cast copy)
  sdpa:   q, k, v          (B, T, 3C)   attn            (views of the qkv output: one storage)
          output           (B, T, C)    attn            (also the attention projection's input)
          logsumexp        (B, H, T)    4
  manual: q, k^T, v        3 x (B, T, C) attn           (copies made by the batched matmuls)
          probabilities    (B, H, T, T) scores
          causal mask      (T, T)       1               (the inverted boolean mask, made per call)
          output y         (B, T, C)    attn            (the projection's input)
  fp8-emulated: the projection's input as its own quantized copy (B, T, C) resid
  ln_2 input               (B, T, C)    resid           ln_2 mean, rstd  2 x (B, T)  ln_stats
  fc input                 (B, T, C)    lin_in
  GELU input (fc output)   (B, T, 4C)   mlp
  proj input (GELU out)    (B, T, 4C)   mlp
  weight copies            12 C^2       weight_copy     (autocast's cast weights; fp8-emulated's
                                                          quantized ones)
so L x [B T C (2 resid + 2 lin_in + 4 attn + 8 mlp) + 4 B T ln_stats + attention extra]. Outside the
layers: token ids (B, T) and positions (T,) as int64 for the embedding backward, ln_f input and stats,
the head input (B, T, C), the head's weight copy V C under autocast, the fp32 log-probabilities
(B T, V) x 4 that cross-entropy saves, the targets (B T,) int64 and a 4-byte total weight.

With activation checkpointing of every block (torch.utils.checkpoint, non-reentrant) a block keeps
only its input (B, T, C) x resid; the outside-layers part is unchanged.

Transient memory on top (modelled, not counted by the hooks): at the start of backward the logits
(B, T, V) that the caller holds plus cross-entropy's two fp32 (B T, V) gradient buffers; during a
block's backward its gradient buffers; with checkpointing, the recomputed block's activations; under
autocast with checkpointing, autocast's cache of every block's cast weights until the forward pass
ends. The optimizer step runs after the activations are freed (the step function still holds the
logits): torch's foreach AdamW (fp32 weights, GPU) makes sqrt(v) for a whole parameter group
(4 bytes x P); the bf16_pure AdamW loops over tensors and holds seven fp32-sized temporaries of the
largest tensor.

The peak of a step, checked against torch's MemTracker on the CPU (tests/test_memory.py), is
states + buffers + max(activations saved + transient, optimizer temporaries + logits).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ablate.config import REAL_FP8, ModelConfig, PrecisionConfig
from ablate.model import accounting

INT64 = 8
FP32 = 4
STORAGE_BYTES = {"fp32": 4, "bf16": 2}
# Fp32StateAdamW.step holds g, m_hat, v_hat, w (fp32), the rounding noise and two int32 results of
# the stochastic rounding at once: 7 x 4 bytes per element of the tensor being updated; rounded to
# nearest (a cast), only the first four.
PER_TENSOR_ADAM_BYTES = {"stochastic": 7 * FP32, "nearest": 4 * FP32}
# torch's foreach AdamW: sqrt(v) for every tensor of a parameter group.
FOREACH_ADAM_BYTES = FP32


@dataclass(frozen=True)
class SavedDtypes:
    """Bytes per element of each kind of tensor saved for backward, under one policy on one device."""

    resid: int  # residual stream: embeddings, LayerNorm inputs, checkpointed block inputs
    ln_stats: int  # LayerNorm mean and rstd
    lin_in: int  # inputs saved by the qkv, fc and head matmuls
    attn: int  # q, k, v, attention output
    scores: int  # manual attention: per attention probability (softmax output and any cast copy)
    mlp: int  # GELU input and output
    proj_copy: bool  # the attention projection saves its own copy of its input (not sdpa's output)
    weight_copy: int  # per block matmul weight, a copy saved for backward (0: the weight itself)
    head_in: int  # the output head's saved input
    head_weight_copy: int  # like weight_copy, for the tied output head
    logits: int  # the (B, T, V) logits the caller holds
    autocast_cache: bool = False  # weight_copy comes from autocast, which caches casts until forward ends


def saved_dtypes(precision: PrecisionConfig, device: str) -> SavedDtypes:
    """Which dtype each saved tensor has, from what the policy does to the model (precision.py).

    Device matters twice: CPU LayerNorm keeps its statistics in the input dtype (CUDA: fp32), and
    CUDA autocast runs softmax in fp32 and casts the probabilities back (CPU autocast keeps them
    in the lower precision).
    """
    store = STORAGE_BYTES[precision.param_dtype]
    gpu = device != "cpu"
    if precision.fp8 in REAL_FP8:
        # torchao's Float8Linear (emulated or not: emulation changes only the matmul) saves its input
        # as it came (the fp32 LayerNorm output under autocast)
        # and casts to float8 inside its matmuls, so no weight copy is kept; its output is bf16 under
        # autocast, so q, k, v and the MLP's tensors are, as are the head's input and weight copy.
        return SavedDtypes(
            resid=store,
            ln_stats=FP32,
            lin_in=store,
            attn=2,
            scores=2 + FP32 if gpu else 2,
            mlp=2,
            proj_copy=False,
            weight_copy=0,
            head_in=2,
            head_weight_copy=2,
            logits=2,
        )
    if precision.autocast:
        low = 2
        return SavedDtypes(
            resid=store,
            ln_stats=FP32,
            lin_in=low,
            attn=low,
            scores=low + FP32 if gpu else low,
            mlp=low,
            proj_copy=False,
            weight_copy=low,
            head_in=low,
            head_weight_copy=low,
            logits=low,
            autocast_cache=True,
        )
    return SavedDtypes(
        resid=store,
        ln_stats=FP32 if gpu else store,
        lin_in=store,
        attn=store,
        scores=store,
        mlp=store,
        proj_copy=False,
        weight_copy=0,
        head_in=store,
        head_weight_copy=0,
        logits=store,
    )


# ---------------------------------------------------------------------------------------------
# States
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateBytes:
    """Weights, gradients, optimizer states and master weights, in bytes, for the whole model."""

    params: int
    weights: int
    gradients: int
    optimizer_states: int
    master_weights: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer_states + self.master_weights

    @property
    def bytes_per_param(self) -> float:
        return self.total / self.params


def param_tensors(model: ModelConfig) -> int:
    """wte (the head too when tied), ln_f, wpe when learned, an untied head, and per block ln_1,
    qkv, proj, ln_2, fc, proj."""
    return 2 + (model.position == "learned") + (not model.tie_embeddings) + 6 * model.n_layer


def buffer_bytes(model: ModelConfig) -> int:
    """The causal mask every attention module registers (even under sdpa): (T, T) bool per layer;
    with rotary positions, each layer's fp32 cos and sin tables, 2 x (T, hd / 2)."""
    rotary = model.block_size * model.head_dim * FP32 if model.position == "rope" else 0
    return model.n_layer * (model.block_size**2 + rotary)


def uses_torch_adamw(precision: PrecisionConfig) -> bool:
    """optim.build_optimizer: torch.optim.AdamW for fp32 weights, Fp32StateAdamW otherwise."""
    return precision.param_dtype == "fp32"


def state_bytes(
    model: ModelConfig, precision: PrecisionConfig, device: str = "cuda", optimizer: str = "adamw"
) -> StateBytes:
    """optimizer="muon": Muon keeps one fp32 momentum per block matrix (4 bytes), AdamW its two
    moments for the rest (optim.build_optimizer)."""
    n = accounting.params(model)
    store = STORAGE_BYTES[precision.param_dtype]
    muon = muon_params(model) if optimizer == "muon" else 0
    states = FP32 * muon + 2 * FP32 * (n - muon)
    if uses_torch_adamw(precision) and device == "cpu":
        # torch's AdamW keeps a step per tensor it trains: all of them, or all but the blocks' four matrices
        states += FP32 * (param_tensors(model) - (4 * model.n_layer if muon else 0))
    return StateBytes(n, store * n, store * n, states, 0)


def muon_params(model: ModelConfig) -> int:
    """The blocks' matrices, which Muon trains (GPT.hidden_matrices)."""
    return model.n_layer * (accounting.part_params(model, "attention") + accounting.part_params(model, "mlp"))


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------


def layer_terms(model: ModelConfig, dt: SavedDtypes, batch: int) -> dict[str, int]:
    """Bytes one block saves for backward, by tensor (see the module docstring for shapes)."""
    return {
        **norm_terms(model, dt, batch, "ln_1"),
        **attention_terms(model, dt, batch),
        **norm_terms(model, dt, batch, "ln_2"),
        **mlp_terms(model, dt, batch),
    }


def norm_terms(model: ModelConfig, dt: SavedDtypes, batch: int, name: str) -> dict[str, int]:
    """LayerNorm keeps its input and two (B, T) statistics; RMSNorm (decomposed on these devices)
    its input, one statistic and the normalised x * rstd it multiplies the gain by."""
    B, T, C = batch, model.block_size, model.n_embd
    if "norm" in model.custom_parts():
        return {f"{name} ({model.norm}, measured)": _measured_saved(model, "norm", dt, batch)}
    terms = {f"{name} input": B * T * C * dt.resid}
    if model.norm == "rmsnorm":
        terms[f"{name} rstd"] = B * T * dt.ln_stats
        terms[f"{name} normalised"] = B * T * C * dt.resid
    else:
        terms[f"{name} mean, rstd"] = 2 * B * T * dt.ln_stats
    return terms


def attention_terms(model: ModelConfig, dt: SavedDtypes, batch: int) -> dict[str, int]:
    """The attention's saved tensors. qkv's output is one (B, T, C + 2 G hd) storage; sdpa saves
    views of it as q, k, v unless QK-norm or rotary positions make new q, k (then sdpa saves those,
    and its output, laid out (B, H, T, hd), is copied for the projection)."""
    B, T, C, H = batch, model.block_size, model.n_embd, model.n_head
    if "attention" in model.custom_parts():
        return {f"attention ({model.attention}, measured)": _measured_saved(model, "attention", dt, batch)}
    btc, kv = B * T * C, B * T * model.kv_heads * model.head_dim
    qkv = btc + 2 * kv
    moved = model.qk_norm or model.position == "rope"
    terms = {"qkv input": btc * dt.lin_in}
    if model.attention == "sdpa":
        terms["q, k, v"] = qkv * dt.attn
        terms["attention output"] = btc * dt.attn
        if moved:
            terms["new q, k"] = (btc + kv) * dt.attn
            terms["attention proj input"] = btc * dt.attn
        terms["logsumexp"] = B * H * T * FP32
    else:
        # The batched matmuls copy q, k^T and v with every query head's keys (GQA repeats them).
        terms["q, k^T, v copies"] = 3 * btc * dt.attn
        terms["attention probabilities"] = B * H * T * T * dt.scores
        terms["causal mask"] = T * T
        if not dt.proj_copy:
            terms["attention output"] = btc * dt.attn
    if model.qk_norm:
        terms.update(_qk_norm_terms(model, dt, B, qkv, btc + kv))
    if model.position == "rope" and dt.attn != FP32:
        # Rotary's cos and sin tables cast to the activations' dtype, for q and for k: 2 x (T, hd).
        terms["rotary tables"] = 2 * T * model.head_dim * dt.attn
    if dt.proj_copy:
        # fp8-emulated: the projection saves a quantized copy of its input; under sdpa the
        # attention output is saved as well, by sdpa.
        terms["attention proj input copy"] = btc * dt.resid
    return terms


def _qk_norm_terms(model: ModelConfig, dt: SavedDtypes, B: int, qkv: int, qk: int) -> dict[str, int]:
    """QK-norm keeps each head's rstd, (B, H + G, T), and its input: under autocast an fp32 copy of
    q and k; otherwise the qkv storage itself (already saved by sdpa, new under manual)."""
    terms = {"qk-norm rstd": B * (model.n_head + model.kv_heads) * model.block_size * dt.ln_stats}
    if dt.autocast_cache:
        terms["qk-norm fp32 q, k"] = qk * FP32
    elif model.attention != "sdpa":
        terms["qk-norm input (qkv output)"] = qkv * dt.attn
    return terms


def mlp_terms(model: ModelConfig, dt: SavedDtypes, batch: int) -> dict[str, int]:
    """GELU and ReLU^2: the fc input, the activation's input or output (h) and the proj input (h).
    SwiGLU: the fc input, gate and up as one (B, T, 2h) storage, silu(gate) and the product (h each)."""
    B, T, C, h = batch, model.block_size, model.n_embd, model.mlp_hidden
    if "mlp" in model.custom_parts():
        return {f"mlp ({model.mlp}, measured)": _measured_saved(model, "mlp", dt, batch)}
    terms = {"fc input": B * T * C * dt.lin_in}
    if model.mlp == "swiglu":
        terms["gate, up"] = 2 * B * T * h * dt.mlp
        terms["silu(gate)"] = B * T * h * dt.mlp
    else:
        terms["activation input"] = B * T * h * dt.mlp
    terms["mlp proj input"] = B * T * h * dt.mlp
    return terms


def _measured_saved(model: ModelConfig, key: str, dt: SavedDtypes, batch: int) -> int:
    """A user's part: what it saved on one fp32 sequence (model/measure.py), scaled to the batch
    and to the policy's activation bytes."""
    from ablate.model import measure_part  # torch, only for a user's part

    per_token = measure_part(model, key).saved_bytes_per_token
    return round(per_token * batch * model.block_size * dt.resid / FP32)


def outside_terms(model: ModelConfig, dt: SavedDtypes, batch: int) -> dict[str, int]:
    """Bytes saved outside the blocks: embedding indices, ln_f, head input, loss."""
    B, T, C, V = batch, model.block_size, model.n_embd, _vocab(model)
    terms = {"token ids": B * T * INT64}
    if model.position == "learned":
        terms["positions"] = T * INT64
    return {
        **terms,
        **norm_terms(model, dt, batch, "ln_f"),
        "head input": B * T * C * dt.head_in,
        "log-probabilities": B * T * V * FP32,
        "targets": B * T * INT64,
        "loss total weight": FP32,
    }


def block_weight_copies(model: ModelConfig, dt: SavedDtypes) -> int:
    """Per block, its attention and MLP matrices (12 C^2 in the GPT-2 block)."""
    return (accounting.attention_matrices(model) + accounting.mlp_matrices(model)) * dt.weight_copy


@dataclass(frozen=True)
class ActivationBytes:
    """Activation memory of one micro-batch, in bytes."""

    per_layer: int  # one block's saved tensors (its weight copies excluded)
    layers: int  # all blocks (with checkpointing: their inputs)
    outside_layers: int
    weight_copies: int  # saved copies of weights (autocast casts, fp8-emulated quantized weights)
    backward_transient: int  # extra live memory at the worst moment of the step's forward/backward

    @property
    def saved(self) -> int:
        """What saved-tensor hooks count: everything kept from the forward pass for backward."""
        return self.layers + self.outside_layers + self.weight_copies

    @property
    def peak(self) -> int:
        return self.saved + self.backward_transient


def activation_bytes(
    model: ModelConfig,
    precision: PrecisionConfig,
    batch: int,
    device: str = "cuda",
    checkpointing: bool = False,
    gathered: bool = False,
) -> ActivationBytes:
    """`gathered`: weights arrive in the compute dtype from an FSDP all-gather (sharded plans), so
    autocast has nothing to cast and keeps no weight copies; its saved "copies" are views of the
    gather buffer, freed after each block and gathered again for backward (counted by gpu_memory).
    fp8-emulated's quantized copies are new tensors and stay."""
    dt = saved_dtypes(precision, device)
    if gathered and precision.autocast:
        dt = replace(dt, weight_copy=0, head_weight_copy=0, autocast_cache=False)
    L = model.n_layer
    per_layer = sum(layer_terms(model, dt, batch).values())
    outside = sum(outside_terms(model, dt, batch).values())
    block_copies = block_weight_copies(model, dt)
    head_copy = _vocab(model) * model.n_embd * dt.head_weight_copy
    if checkpointing:
        layers = L * batch * model.block_size * model.n_embd * dt.resid
        copies = head_copy
    else:
        layers = L * per_layer
        copies = L * block_copies + head_copy
    return ActivationBytes(
        per_layer, layers, outside, copies, backward_transient(model, dt, batch, checkpointing, per_layer, block_copies)
    )


def backward_transient(
    model: ModelConfig, dt: SavedDtypes, batch: int, checkpointing: bool, per_layer: int, block_copies: int
) -> int:
    """Live memory beyond the saved tensors at the worst moment of forward + backward.

    Head: the logits (B, T, V) the caller keeps, and cross-entropy's fp32 gradients of the
    log-probabilities and of the logits, (B T, V) each, live together. Later, in the last block's
    backward, the log-probabilities (B T, V) x 4 are freed, and the block's gradient buffers come
    and go while its saved tensors are released node by node: the residual-stream gradient (B, T, C)
    plus the larger of the MLP's (the gradients of its 4C-wide input and output, while the GELU
    output is already freed: net one (B, T, 4C)) and the attention's (sdpa: q, k, v and output
    gradients, 4 (B, T, C); manual: two (B, H, T, T)), less the MLP's saved (B, T, 4C) pair that
    is gone by then. With checkpointing that block first recomputes its activations (its input is
    already kept) and, under autocast, its weight copies.
    """
    B, T, C, H, V = batch, model.block_size, model.n_embd, model.n_head, _vocab(model)
    btc = B * T * C
    logits = B * T * V * dt.logits
    head = 2 * B * T * V * FP32
    h = B * T * model.mlp_hidden
    attention = 4 * btc * dt.attn if model.attention != "manual" else 2 * B * H * T * T * dt.scores
    block = max(h * dt.mlp, attention - 2 * h * dt.mlp) + btc * dt.resid
    if checkpointing:
        block += per_layer - btc * dt.resid + block_copies
    during_backward = logits + max(head, block - B * T * V * FP32)
    if checkpointing and dt.autocast_cache:
        # autocast caches every cast weight until the forward pass ends (fp8-emulated's copies are
        # made inside the checkpointed blocks and dropped with them).
        return max(during_backward, logits + model.n_layer * block_copies)
    return during_backward


def optimizer_step_transient(
    model: ModelConfig, precision: PrecisionConfig, device: str = "cuda", optimizer: str = "adamw"
) -> int:
    """Temporaries of optimizer.step(), which runs after backward has freed the activations."""
    if optimizer == "muon":
        return max(muon_step_transient(model), 2 * FP32 * largest_tensor(model))
    if uses_torch_adamw(precision):
        if device == "cpu":
            # single-tensor AdamW: sqrt(v) and its quotient for one tensor at a time.
            return 2 * FP32 * largest_tensor(model)
        return FOREACH_ADAM_BYTES * decayed_params(model)
    return PER_TENSOR_ADAM_BYTES[precision.rounding] * largest_tensor(model)


def largest_tensor(model: ModelConfig) -> int:
    """Elements of the largest parameter tensor: the embedding V C, an MLP matrix (SwiGLU's fc is
    2h x C), the qkv matrix or the position table."""
    fc = (2 if model.mlp == "swiglu" else 1) * model.mlp_hidden * model.n_embd
    qkv = accounting.attention_matrices(model) - model.n_embd**2
    return max(_vocab(model) * model.n_embd, fc, qkv, model.block_size * model.n_embd)


def muon_step_transient(model: ModelConfig) -> int:
    """torch.optim.Muon, one matrix (A, B) at a time: the Nesterov update in fp32 (4 AB), its bf16
    copy and each Newton-Schulz iterate (2 x 2 AB), and the iteration's two Gram matrices in bf16
    (2 x 2 min(A, B)^2)."""
    C, h = model.n_embd, model.mlp_hidden
    shapes = [(2 * h if model.mlp == "swiglu" else h, C), (C + 2 * model.kv_heads * model.head_dim, C)]
    return max(8 * a * b + 4 * min(a, b) ** 2 for a, b in shapes)


def decayed_params(model: ModelConfig) -> int:
    """The weight-decay group of build_optimizer: every matrix (LayerNorm gains excluded)."""
    return accounting.params(model) - (2 * model.n_layer + 1) * accounting.norm_params(model)


# ---------------------------------------------------------------------------------------------
# Per GPU, replicated or sharded
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuMemory:
    """Memory on each GPU, in bytes. total = states + buffers + max(activations + fsdp_buffers, optimizer_step)."""

    gpus: int
    sharded: bool
    weights: int
    gradients: int
    optimizer_states: int
    master_weights: int
    buffers: int  # causal masks, replicated on every GPU
    activations: int  # saved for backward + the backward transient
    activations_saved: int
    fsdp_buffers: int  # gathered weights of two blocks and one block's full gradients (sharded only)
    optimizer_step: int  # the optimizer's temporaries, and the logits the training step still holds

    @property
    def states(self) -> int:
        return self.weights + self.gradients + self.optimizer_states + self.master_weights

    @property
    def total(self) -> int:
        return self.states + self.buffers + max(self.activations + self.fsdp_buffers, self.optimizer_step)

    def parts(self) -> dict[str, int]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer_states": self.optimizer_states,
            "master_weights": self.master_weights,
            "buffers": self.buffers,
            "activations": self.activations,
            "fsdp_buffers": self.fsdp_buffers,
            "optimizer_step": self.optimizer_step,
            "total": self.total,
        }


def gpu_memory(
    model: ModelConfig,
    precision: PrecisionConfig,
    batch: int,
    gpus: int = 1,
    sharded: bool = False,
    device: str = "cuda",
    checkpointing: bool = False,
    optimizer: str = "adamw",
) -> GpuMemory:
    """Per-GPU memory with data parallelism: replicated states (DDP), or states sharded over `gpus`
    (FSDP full sharding / ZeRO-3, Rajbhandari et al. 2020) with one block per FSDP unit.

    Sharded, a block's weights are gathered in the compute dtype just for its forward and again for
    its backward (FSDP prefetches the next block, so two are live) and its gradient is reduce-scattered
    from one unsharded buffer: the gather buffers replace the whole-model weight copies that autocast
    keeps on one GPU (see activation_bytes(gathered=True)).
    """
    states = state_bytes(model, precision, device, optimizer)
    acts = activation_bytes(model, precision, batch, device, checkpointing)
    opt_step = optimizer_step_transient(model, precision, device, optimizer)
    # train.py's step still holds the logits (B, T, V) while the optimizer runs.
    logits = batch * model.block_size * _vocab(model) * saved_dtypes(precision, device).logits
    if not sharded:
        return GpuMemory(
            gpus,
            False,
            states.weights,
            states.gradients,
            states.optimizer_states,
            states.master_weights,
            buffer_bytes(model),
            acts.peak,
            acts.saved,
            0,
            opt_step + logits,
        )
    store = STORAGE_BYTES[precision.param_dtype]
    compute_bytes = 2 if precision.autocast else store
    block = accounting.attention_matrices(model) + accounting.mlp_matrices(model)
    gather = 2 * block * compute_bytes + block * store
    acts = activation_bytes(model, precision, batch, device, checkpointing, gathered=True)
    return GpuMemory(
        gpus,
        True,
        _shard(states.weights, gpus),
        _shard(states.gradients, gpus),
        _shard(states.optimizer_states, gpus),
        _shard(states.master_weights, gpus),
        buffer_bytes(model),
        acts.peak,
        acts.saved,
        gather,
        _shard(opt_step, gpus) + logits,
    )


def _shard(n: int, gpus: int) -> int:
    return -(-n // gpus)


def _vocab(model: ModelConfig) -> int:
    if model.vocab_size is None:
        raise ValueError("vocab_size is unknown: set model.vocab_size")
    return model.vocab_size
