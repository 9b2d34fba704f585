"""The model and what is applied to it from outside (the model itself is a plain nn.Module).

gpt.py         GPT, the decoder-only transformer (nanoGPT's shape; muP when configured); weight_shapes
attention.py   causal self-attention: manual or sdpa, grouped key/value heads, QK-norm, rotary positions
rope.py        the rotary position embedding
mlp.py         the MLP arms: GELU, SwiGLU, squared ReLU
norm.py        the norm arms: LayerNorm, RMSNorm
parts.py       a part of the user's own (PACKAGE.MODULE:CLASS): built and checked against its contract
measure.py     a part's parameters, FLOPs (FlopCounterMode) and saved activations, measured
accounting.py  params, params_non_embedding, flops_per_token, flops_6nd, mfu: the numbers every record uses
precision.py   apply_precision: autocast, bf16 weights, loss scaling, fp8 (torchao's recipes or emulated)
checkpointing.py checkpoint_blocks: activation checkpointing, each block recomputed in backward
optim.py       build_optimizer (AdamW, Muon beside AdamW, muP per-layer rates, bf16 stochastic rounding) and
               lr_at (the schedule)
"""

from ablate.api import lazy_api

__all__, __getattr__, __dir__ = lazy_api(
    __name__,
    {
        "gpt": ("GPT", "weight_shapes"),
        "measure": ("measure_part",),
        "accounting": ("recorded_mfu",),
        "precision": ("apply_precision",),
        "checkpointing": ("checkpoint_blocks",),
        "optim": ("build_optimizer", "cooldown_start", "lr_at"),
    },
    modules=("accounting",),
)
