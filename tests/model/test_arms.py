"""The architecture arms: each builds, trains a step, and is accounted for exactly; the ones that
must be equal are; bad combinations stop in one line before any work."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ablate.config import ConfigError, ModelConfig, OptimConfig
from ablate.model import accounting
from ablate.model.gpt import GPT
from ablate.model.measure import forward_flops
from ablate.model.optim import MuonWithAdamW, build_optimizer
from ablate.model.rope import Rotary
from ablate.provenance import config_hash
from support import ARCH_ARMS, run_config

BASE = dict(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=50)
ARMS = {"baseline": {}, **ARCH_ARMS}


def arm(name: str, **changes) -> ModelConfig:
    return ModelConfig(**{**BASE, **ARMS[name], **changes})


@pytest.mark.parametrize("attention", ["sdpa", "manual"])
@pytest.mark.parametrize("name", ARMS)
def test_formula_flops_and_params_match_the_real_module(name, attention):
    """FlopCounterMode on the built model: forward FLOPs x 3 equal the formula (within 2%; they are
    equal here), and the parameter count is sum(p.numel())."""
    cfg = arm(name, attention=attention)
    model = GPT(cfg)
    assert accounting.params(cfg) == sum(p.numel() for p in model.parameters())
    x = torch.randint(0, cfg.vocab_size, (2, cfg.block_size))
    measured = 3 * forward_flops(model, x) / x.numel()
    assert measured == pytest.approx(accounting.flops_per_token(cfg), rel=0.02)
    assert accounting.flops_source(cfg) == "formula"


@pytest.mark.parametrize("name", ARMS)
def test_every_arm_trains_a_step(name):
    torch.manual_seed(0)
    model = GPT(arm(name))
    opt = build_optimizer(model, OptimConfig())
    x = torch.randint(0, 50, (4, 32))
    _, before = model(x, x)
    before.backward()
    opt.step()
    _, after = model(x, x)
    assert torch.isfinite(after) and after < before


def test_swiglu_keeps_the_parameters_of_the_4c_mlp_within_a_row():
    cfg = arm("swiglu")
    assert cfg.mlp_hidden == round(8 * 64 / 3) == 171
    assert abs(accounting.mlp_matrices(cfg) - 8 * 64 * 64) <= 3 * 64


def test_fewer_key_value_heads_shrink_qkv_and_the_manual_kernel_agrees_with_sdpa():
    cfg = arm("gqa")
    assert accounting.attention_matrices(cfg) == 64 * (64 + 2 * 2 * 16) + 64 * 64
    torch.manual_seed(0)
    sdpa = GPT(cfg)
    manual = GPT(dataclasses.replace(cfg, attention="manual"))
    manual.load_state_dict(sdpa.state_dict())
    x = torch.randint(0, 50, (2, 32))
    assert torch.allclose(sdpa(x, x)[1], manual(x, x)[1], atol=1e-5)


def test_rotary_scores_depend_on_the_offset_only():
    rot = Rotary(head_dim=8, block_size=16, base=10000.0)
    q, k = torch.randn(8), torch.randn(8)
    rq = rot(q.expand(1, 1, 16, 8).clone())[0, 0]  # q at every position
    rk = rot(k.expand(1, 1, 16, 8).clone())[0, 0]
    assert torch.allclose(rq[5] @ rk[2], rq[9] @ rk[6], atol=1e-5)  # offset 3 both times
    assert not torch.allclose(rq[5] @ rk[2], rq[5] @ rk[4], atol=1e-3)


def test_untied_head_is_its_own_matrix_and_counted_as_vocabulary():
    tied, untied = GPT(arm("baseline")), GPT(arm("untied"))
    assert tied.lm_head.weight is tied.wte.weight
    assert untied.lm_head.weight is not untied.wte.weight
    assert accounting.params(arm("untied")) - accounting.params(arm("baseline")) == 50 * 64
    assert accounting.params_non_embedding(arm("untied")) == accounting.params_non_embedding(arm("baseline"))


def test_positions_none_and_rope_have_no_table():
    assert GPT(arm("rope")).wpe is None and GPT(arm("nope")).wpe is None
    assert accounting.params(arm("baseline")) - accounting.params(arm("rope")) == 32 * 64


def test_baseline_values_keep_the_hash_of_runs_recorded_before_the_arms(tmp_path):
    """Keys added with the arms are left out of the hash at their old values (`before=` in their fields)."""
    plain = run_config(tmp_path)
    same = run_config(tmp_path, **{"model.position": "learned", "model.n_kv_head": None, "train.grad_accum": 1})
    assert config_hash(plain) == config_hash(same)
    for key, value in [
        ("model.position", "rope"),
        ("model.mlp", "swiglu"),
        ("model.qk_norm", True),
        ("model.tie_embeddings", False),
        ("train.z_loss", 1e-4),
    ]:
        assert config_hash(run_config(tmp_path, **{key: value})) != config_hash(plain), key
    muon = run_config(tmp_path, optim={**dataclasses.asdict(plain.optim), "name": "muon"})
    assert config_hash(muon) != config_hash(plain)
    tuned = run_config(tmp_path, **{"optim.muon_lr": 0.5})  # a Muon setting under AdamW changes nothing
    assert config_hash(tuned) == config_hash(plain)


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"model.mlp": "geglu"}, "model.mlp='geglu' is invalid (valid: gelu, swiglu, relu2, or PACKAGE.MODULE:CLASS)"),
        ({"model.norm": "nosuchpackage.mod:Norm"}, "module nosuchpackage.mod cannot be imported"),
        ({"model.attention": "collections:nothing"}, "collections has no class nothing"),
        ({"model.n_kv_head": 3}, "model.n_kv_head=3 does not divide model.n_head=2 (valid: 1, 2, or null"),
        ({"model.position": "rope", "model.n_embd": 6, "model.n_head": 2}, "needs an even head size"),
        ({"model.mup": True, "model.qk_norm": True}, "muP's scaling rules do not cover it"),
        ({"optim.name": "muon", "model.mup": True}, "muP's rates are derived for Adam"),
        ({"optim.name": "muon", "precision": "bf16_pure"}, "Muon would keep bf16 momentum"),
        ({"train.z_loss": -1.0}, "train.z_loss=-1.0 is negative"),
        ({"train.grad_accum": 0}, "train.grad_accum"),
    ],
)
def test_bad_combinations_fail_in_one_line(tmp_path, overrides, words):
    with pytest.raises(ConfigError) as err:
        run_config(tmp_path, **overrides)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_muon_trains_the_block_matrices_and_adamw_the_rest():
    torch.manual_seed(0)
    model = GPT(arm("baseline"))
    opt = build_optimizer(model, OptimConfig(name="muon", lr=3e-3, muon_lr=0.02))
    assert isinstance(opt, MuonWithAdamW)
    muon = {id(p) for g in opt.muon.param_groups for p in g["params"]}
    assert muon == {id(p) for p in model.hidden_matrices()}
    assert id(model.wte.weight) not in muon and all(p.dim() == 2 for p in model.hidden_matrices())
    for group in opt.param_groups:  # the schedule writes one rate into every group
        group["lr"] = 1e-3
    x = torch.randint(0, 50, (4, 32))
    model(x, x)[1].backward()
    opt.step()
    assert opt.muon.param_groups[0]["lr"] == 1e-3  # its scale applies during the step only
    restored = build_optimizer(GPT(arm("baseline")), OptimConfig(name="muon"))
    restored.load_state_dict(opt.state_dict())
    assert restored.muon.state_dict()["state"].keys() == opt.muon.state_dict()["state"].keys()
