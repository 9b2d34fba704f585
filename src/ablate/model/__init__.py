"""The model and what is applied to it from outside (the model itself is a plain nn.Module).

gpt.py         GPT, the decoder-only transformer (nanoGPT's shape; muP when configured); weight_shapes
accounting.py  params, params_non_embedding, flops_per_token, flops_6nd, mfu: the numbers every record uses
precision.py   apply_precision: autocast, bf16 weights, loss scaling, fp8 (real or emulated)
optim.py       build_optimizer (AdamW, muP per-layer rates, bf16 stochastic rounding) and lr_at (the schedule)
"""
