"""Activation checkpointing applied to a model from outside (train.activation_checkpointing): each
transformer block's forward runs under torch.utils.checkpoint, so that backward recomputes the
block's activations from its input instead of keeping them (Chen et al. 2016, "Training deep nets
with sublinear memory cost"; torchtitan's full activation checkpointing). Between forward and
backward a block then keeps only its input, (B, T, C), where it kept every intermediate of
attention and the MLP; the price is one more forward of each block, about a third more compute
(perf/memory.py and `ablate plan` model the same trade)."""

from __future__ import annotations

import functools

import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from ablate.config import ConfigError


def checkpoint_blocks(model: nn.Module) -> int:
    """Every block of `model.blocks` recomputed in backward; returns how many. The blocks' own
    forward is wrapped on each instance, so parameters, state dict keys and checkpoints are the
    model's as they were, and anything applied after (FSDP, compile) sees the same modules."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or not len(blocks):
        raise ConfigError(
            f"train.activation_checkpointing=true needs a model whose transformer blocks are model.blocks, "
            f"an nn.ModuleList; {type(model).__name__} has none (valid: train.activation_checkpointing=false)"
        )
    for block in blocks:
        block.forward = functools.partial(_recomputed, block.forward)
    return len(blocks)


def _recomputed(forward, *args, **kwargs):
    # non-reentrant: works with inputs that need no grad and with keyword arguments, and keeps the
    # RNG state so that recomputed dropout matches the forward's (PyTorch's recommended variant)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)
