"""The swappable parts of a block (attention, MLP, norm): a built-in arm by name, or a user's class
named PACKAGE.MODULE:CLASS, imported from the user's environment and built as CLASS(model_cfg).

A user's class must map (B, T, C) to (B, T, C); check_contract runs it once on a small batch and
says in one line, naming the class, where it does not.
"""

from __future__ import annotations

import importlib

import torch
import torch.nn as nn

from ablate.config import ConfigError, ModelConfig, is_user_class


def user_class(spec: str) -> type:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def build_part(key: str, cfg: ModelConfig, builtin: dict[str, type]) -> nn.Module:
    """The module model.KEY names: builtin[name](cfg), or the user's CLASS(cfg)."""
    spec = getattr(cfg, key)
    if not is_user_class(spec):
        return builtin[spec](cfg)
    try:
        module = user_class(spec)(cfg)
    except Exception as e:
        raise ConfigError(f"model.{key}={spec}: {spec}(cfg) failed: {type(e).__name__}: {e}") from None
    if not isinstance(module, nn.Module):
        raise ConfigError(f"model.{key}={spec} built a {type(module).__name__}, not a torch.nn.Module")
    return module


def check_contract(key: str, cfg: ModelConfig, module: nn.Module) -> None:
    """A user's part maps (B, T, C) to (B, T, C) with a gradient to its input: checked on B = 2."""
    spec = getattr(cfg, key)
    x = torch.randn(2, cfg.block_size, cfg.n_embd, requires_grad=True)
    try:
        y = module(x)
    except Exception as e:
        raise ConfigError(
            f"model.{key}={spec} failed on a (2, {cfg.block_size}, {cfg.n_embd}) input: {type(e).__name__}: {e}"
        ) from None
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(x.shape):
        got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ConfigError(
            f"model.{key}={spec} maps (2, {cfg.block_size}, {cfg.n_embd}) to {got} "
            "(valid: a module whose forward maps (B, T, C) to (B, T, C))"
        )
    if not y.requires_grad:
        raise ConfigError(
            f"model.{key}={spec} returns a tensor without a gradient to its input (valid: a differentiable forward)"
        )
