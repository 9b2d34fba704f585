"""Maximal update parametrization (model.mup): same network as SP at the base width, per-layer Adam
learning rates, and the coordinate check of Yang et al. 2022 (logit updates independent of width)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from ablate.config import ConfigError, ModelConfig, OptimConfig
from ablate.model.attention import attention_scale
from ablate.model.gpt import GPT
from ablate.model.optim import ScaledLRAdamW, build_optimizer
from ablate.run import train


def model_cfg(width: int, mup: bool, base: int | None = 32, attention: str = "sdpa") -> ModelConfig:
    return ModelConfig(
        n_layer=2,
        n_head=4,
        n_embd=width,
        block_size=16,
        vocab_size=27,
        attention=attention,
        mup=mup,
        mup_base_width=base,
    )


def batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 27, (8, 16), generator=g), torch.randint(0, 27, (8, 16), generator=g)


def train_steps(cfg: ModelConfig, steps: int, lr: float = 1e-2):
    """(model at init, model after `steps` AdamW steps on one fixed batch)."""
    torch.manual_seed(0)
    model = GPT(cfg)
    start = GPT(cfg)
    start.load_state_dict(model.state_dict())
    opt = build_optimizer(model, OptimConfig(lr=lr, weight_decay=0.0))
    x, y = batch()
    for _ in range(steps):
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return start, model


def test_mup_at_its_base_width_is_the_standard_parametrization():
    for attention in ("sdpa", "manual"):
        sp, mup = (
            train_steps(model_cfg(64, False, attention=attention), 3)[1],
            train_steps(model_cfg(64, True, base=64, attention=attention), 3)[1],
        )
        for (name, a), b in zip(sp.state_dict().items(), mup.state_dict().values(), strict=False):
            assert torch.allclose(a, b, atol=1e-6), name
    assert attention_scale(model_cfg(64, True, base=64)) == pytest.approx(1 / math.sqrt(16))


def test_mup_attention_scales_by_one_over_head_dim():
    cfg = model_cfg(128, True, base=32)  # hd = 32, base hd = 8
    assert attention_scale(cfg) == pytest.approx(math.sqrt(8) / 32)
    x, _ = batch()
    torch.manual_seed(0)
    sdpa = GPT(cfg)
    manual = GPT(dataclasses.replace(cfg, attention="manual"))
    manual.load_state_dict(sdpa.state_dict())
    assert torch.allclose(sdpa(x)[0], manual(x)[0], atol=1e-5)  # both attention paths use the muP scale


def test_mup_init_and_optimizer_groups_scale_hidden_matrices_only():
    torch.manual_seed(0)
    model = GPT(model_cfg(128, True, base=32))  # m = 4
    assert model.blocks[0].mlp.fc.weight.std().item() == pytest.approx(0.02 / 2, rel=0.05)
    assert model.wte.weight.std().item() == pytest.approx(0.02, rel=0.05)  # embeddings (and the tied head) do not scale
    opt = build_optimizer(model, OptimConfig(lr=1e-2, weight_decay=0.1))
    assert isinstance(opt, ScaledLRAdamW)
    hidden = {id(p) for p in model.hidden_matrices()}
    by_scale = {g.get("lr_scale", 1.0): g for g in opt.param_groups}
    assert {id(p) for p in by_scale[0.25]["params"]} == hidden and len(hidden) == 2 * 4
    assert by_scale[0.25]["weight_decay"] == pytest.approx(0.4)  # lr x weight_decay per step unchanged
    x, y = batch()
    model(x, y)[1].backward()
    opt.step()
    assert all(g["lr"] == 1e-2 for g in opt.param_groups)  # the schedule's lr is left as it was set


def test_the_standard_parametrization_keeps_plain_adamw():
    torch.manual_seed(0)
    model = GPT(model_cfg(64, False))
    opt = build_optimizer(model, OptimConfig())
    assert isinstance(opt, torch.optim.AdamW) and not isinstance(opt, ScaledLRAdamW)
    assert all("lr_scale" not in g for g in opt.param_groups)
    compiled = build_optimizer(model, OptimConfig(), compiled=True)
    assert type(compiled) is torch.optim.AdamW  # under torch.compile: torch's own, dynamo wrappers and all


def test_coordinate_check_logit_updates_do_not_grow_with_width_under_mup():
    """Yang et al. 2022, Sec. 7 / App. D.1: after a few steps at a fixed lr, the change of the
    logits grows with width under SP and stays put under muP."""
    widths = (32, 128, 512)

    def logit_change(width: int, mup: bool) -> float:
        start, end = train_steps(model_cfg(width, mup), 4)
        x, _ = batch()
        with torch.no_grad():
            return (end(x)[0] - start(x)[0]).abs().mean().item()

    sp = [logit_change(w, False) for w in widths]
    mup = [logit_change(w, True) for w in widths]
    assert sp[-1] / sp[0] > 3.0
    assert 0.7 < mup[-1] / mup[0] < 1.3


def test_bad_base_width_fails_in_one_line(run_config, tmp_path):
    with pytest.raises(ConfigError) as err:
        run_config(tmp_path, **{"model.mup": True, "model.mup_base_width": 0})
    assert str(err.value) == "model.mup_base_width=0 must be positive (valid: > 0)"


def test_a_mup_run_trains_through_the_trainer(run_config, tmp_path):
    cfg = run_config(
        tmp_path, **{"model.mup": True, "model.mup_base_width": 24, "train.steps": 10, "train.eval_interval": 10}
    )
    result = train.run(cfg, tmp_path / "out")
    assert result.status == "finished" and result.final_val_loss < math.log(27)


def test_hidden_matrices_keep_their_mup_learning_rate_under_emulated_fp8(run_config, tmp_path):
    from ablate.model.precision import apply_precision

    torch.manual_seed(0)
    model = GPT(model_cfg(128, True, base=32))
    apply_precision(
        model, run_config(tmp_path, precision="fp8_tensorwise_emulated").precision, "cpu"
    )  # swaps the Linears
    opt = build_optimizer(model, OptimConfig())
    scaled = [g for g in opt.param_groups if g.get("lr_scale") == 0.25]
    assert len(scaled) == 1 and len(scaled[0]["params"]) == 2 * 4
