import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ablate.config import ModelConfig
from ablate.model import accounting
from ablate.model.gpt import GPT
from support import preset


def test_params_match_hand_computation_for_micro():
    cfg = ModelConfig(n_layer=3, n_head=4, n_embd=64, block_size=64, vocab_size=27)
    # per block 12 d^2 + 2 d (two LayerNorm gains), plus the final LayerNorm gain d
    assert accounting.params_non_embedding(cfg) == 3 * (12 * 64 * 64 + 2 * 64) + 64 == 147_904
    # + token embedding V d (tied with the head) + position embedding T d
    assert accounting.params(cfg) == 147_904 + 27 * 64 + 64 * 64 == 153_728


def test_flops_per_token_hand_computed():
    cfg = ModelConfig(n_layer=3, n_head=4, n_embd=64, block_size=64, vocab_size=27)
    n = 12 * 3 * 64 * 64 + 27 * 64
    assert accounting.flops_per_token(cfg, attention=False) == 6 * n == 895_104
    assert accounting.flops_per_token(cfg) == 6 * n + 12 * 3 * 64 * 64 == 1_042_560
    assert accounting.training_flops(cfg, 1000) == 1_042_560_000


@pytest.mark.parametrize("name", ["nano", "micro", "tiny", "small", "medium", "large", "gpt2_124m", "gpt_1p5b"])
def test_params_equal_the_built_model(name):
    tree = preset("model", name)
    tree["vocab_size"] = tree.get("vocab_size") or 27  # a preset lists only what it changes
    cfg = ModelConfig(**tree)
    if cfg.n_layer * cfg.n_embd > 10_000:  # planning presets: count on the meta device, no memory
        with torch.device("meta"):
            model = GPT(cfg)
    else:
        model = GPT(cfg)
    assert accounting.params(cfg) == sum(p.numel() for p in model.parameters())


def test_cpu_ladder_spans_50k_to_10m():
    sizes = []
    for name in ["femto", "pico", "nano", "micro", "tiny", "small", "medium", "large"]:
        tree = preset("model", name)
        sizes.append(accounting.params(ModelConfig(**{**tree, "vocab_size": 27})))
    assert sizes == sorted(sizes)
    assert 7_000 <= sizes[0] <= 8_000 and 25_000 <= sizes[1] <= 30_000  # femto, pico: below the 60K nano
    assert 40_000 <= sizes[2] <= 70_000 and 8e6 <= sizes[-1] <= 10.5e6


def test_gpt2_124m_preset_has_124m_params():
    cfg = ModelConfig(**preset("model", "gpt2_124m"))
    assert 124e6 <= accounting.params(cfg) <= 124.5e6


def _counted_flops_per_token(cfg: ModelConfig) -> float:
    model = GPT(cfg)
    B, T = 4, cfg.block_size
    x = torch.randint(0, 27, (B, T))
    counter = FlopCounterMode(display=False)
    with counter:
        _, loss = model(x, x)
        loss.backward()
    return counter.get_total_flops() / (B * T)


def test_analytic_flops_match_torch_flop_counter():
    cfg = ModelConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=27, attention="manual")
    assert _counted_flops_per_token(cfg) == accounting.flops_per_token(cfg)


def test_flop_counter_sees_only_the_matmuls_of_cpu_sdpa():
    # torch's counter has no formula for the CPU fused attention kernel, so with sdpa on a CPU
    # it counts exactly the 6N part; the 12 L T d attention term is what the kernel adds.
    cfg = ModelConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=27, attention="sdpa")
    assert _counted_flops_per_token(cfg) == accounting.flops_per_token(cfg, attention=False)


def test_mfu_is_achieved_over_peak():
    cfg = ModelConfig(n_layer=3, n_head=4, n_embd=64, block_size=64, vocab_size=27)
    assert accounting.mfu(1000.0, cfg, 1_042_560_000.0) == pytest.approx(1.0)
    assert accounting.mfu(500.0, cfg, 1_042_560_000.0) == pytest.approx(0.5)
    assert accounting.mfu(1000.0, cfg, None) is None


@pytest.mark.parametrize("tokens_per_s, peak", [(1001.0, 1_042_560_000.0), (1276.3, 1_042_560_000.0), (1.0, 1e3)])
def test_an_mfu_above_one_is_an_error_not_a_number(tokens_per_s, peak):
    cfg = ModelConfig(n_layer=3, n_head=4, n_embd=64, block_size=64, vocab_size=27)
    with pytest.raises(ValueError, match="is impossible"):
        accounting.mfu(tokens_per_s, cfg, peak)


@pytest.mark.parametrize(
    "recorded, shown",
    [(0.42, 0.42), (1.0, 1.0), (1e-6, 1e-6), (1.2763, None), (3.24, None), (0.0, None), (-0.1, None),
     (float("nan"), None), (float("inf"), None), (None, None)],
)  # fmt: skip
def test_a_recorded_mfu_is_read_back_only_when_possible(recorded, shown):
    assert accounting.recorded_mfu(recorded) == shown


def test_6nd_planning_examples():
    assert accounting.flops_6nd(1.5e9, 1e11) == pytest.approx(9e20)
    assert accounting.flops_6nd(70e9, 1.4e12) == pytest.approx(5.88e23)
