import copy
import dataclasses

import pytest
import torch

from ablate.config import UnsupportedError
from ablate.model.gpt import GPT
from ablate.model.optim import Fp32StateAdamW, build_optimizer, stochastic_round
from ablate.model.precision import apply_precision, import_torchao_float8
from ablate.run import train

CPU_PRECISIONS = [
    "fp32",
    "bf16",
    "bf16_pure",
    "bf16_pure_nearest",
    "fp16",
    "fp8_tensorwise_emulated",
    "fp8_rowwise_emulated",
]


@pytest.mark.parametrize("precision", CPU_PRECISIONS)
def test_every_cpu_precision_trains(run_config, tmp_path, precision):
    cfg = run_config(tmp_path, precision=precision, **{"train.steps": 30})
    result = train.run(cfg, tmp_path / "out")
    assert result.status == "finished", result.reason
    # log(27) = 3.30 is the loss of a uniform guess; 30 steps must already beat it clearly.
    assert result.final_val_loss < 3.1
    assert result.precision == precision


def test_fp8_is_refused_on_a_cpu_with_the_reason(run_config, tmp_path):
    cfg = run_config(tmp_path, precision="fp8_tensorwise")
    with pytest.raises(UnsupportedError, match="precision=fp8_tensorwise cannot run on cpu.*cuda"):
        train.prepare(cfg)


def test_bf16_pure_keeps_12_bytes_per_param(run_config, tmp_path):
    cfg = run_config(tmp_path, precision="bf16_pure")
    model_cfg = train.prepare(cfg).cfg.model
    model = GPT(model_cfg)
    apply_precision(model, cfg.precision, "cpu")
    opt = build_optimizer(model, cfg.optim)
    assert isinstance(opt, Fp32StateAdamW)
    x = torch.randint(0, 27, (2, 16))
    _, loss = model(x, x)
    loss.backward()
    opt.step()
    n = sum(p.numel() for p in model.parameters())
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    states = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
    assert (weights + grads + states) / n == 12


def test_bf16_pure_resumes_from_a_saved_optimizer_state_with_fp32_moments(run_config, tmp_path):
    """A checkpoint's optimizer state loaded back (resume, a cooldown branch's fork) keeps its fp32
    moments, so the next steps equal those of the run that never stopped."""
    cfg = run_config(tmp_path, precision="bf16_pure")
    model_cfg = train.prepare(cfg).cfg.model

    def build(seed=0):
        torch.manual_seed(seed)
        model = GPT(model_cfg)
        apply_precision(model, cfg.precision, "cpu")
        return model, build_optimizer(model, cfg.optim)

    def steps(model, opt, n, seed):
        g = torch.Generator().manual_seed(seed)
        for _ in range(n):
            x = torch.randint(0, 27, (2, 16), generator=g)
            _, loss = model(x, x)
            loss.backward()
            opt.step()
            opt.zero_grad()

    model, opt = build()
    steps(model, opt, 3, seed=1)
    saved_model = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = copy.deepcopy(opt.state_dict())
    torch.manual_seed(7)  # stochastic rounding draws: the same in both continuations
    steps(model, opt, 2, seed=2)

    resumed, resumed_opt = build(seed=3)
    resumed.load_state_dict(saved_model)
    resumed_opt.load_state_dict(saved_opt)
    assert all(t.dtype == torch.float32 for s in resumed_opt.state.values() for k, t in s.items() if k != "step")
    torch.manual_seed(7)
    steps(resumed, resumed_opt, 2, seed=2)
    for (name, a), b in zip(model.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b), name


@pytest.mark.parametrize(
    ("precision", "granularity", "power_of_2"),
    [("fp8_tensorwise_emulated", "TENSORWISE", False), ("fp8_rowwise_emulated", "AXISWISE", True)],
)
def test_emulated_fp8_is_torchaos_recipe_with_emulated_matmuls(
    run_config, tmp_path, precision, granularity, power_of_2
):
    """The emulated arm is the GPU's recipe (torchao's Float8Linear, its casts and scales as
    from_recipe_name gives them) with emulate=True; every block linear is converted, never the head,
    and the state dict keeps its names, so checkpoints move between the arm and its GPU recipe."""
    from torchao.float8.float8_linear import Float8Linear

    cfg = run_config(tmp_path, precision=precision)
    model = GPT(train.prepare(cfg).cfg.model)
    names_before = set(model.state_dict())
    apply_precision(model, cfg.precision, "cpu")
    converted = [m for m in model.modules() if isinstance(m, Float8Linear)]
    assert len(converted) == 4 * cfg.model.n_layer
    assert not isinstance(model.lm_head, Float8Linear)
    assert set(model.state_dict()) == names_before
    config = converted[0].config
    assert config.emulate is True
    assert config.cast_config_input.scaling_granularity.name == granularity
    assert config.round_scales_to_power_of_2 is power_of_2


def e4m3_tensorwise(t: torch.Tensor) -> torch.Tensor:
    """t rounded as tensorwise float8 training rounds it: scaled so its largest magnitude is e4m3's
    largest (448), cast to e4m3, scaled back (Micikevicius et al. 2022, FP8 Formats for Deep Learning)."""
    scale = torch.finfo(torch.float8_e4m3fn).max / t.abs().amax()
    return (t * scale).to(torch.float8_e4m3fn).float() / scale


def test_emulated_tensorwise_forward_is_an_fp32_matmul_of_e4m3_rounded_operands():
    """The numbers the emulated arm trains on: y = round(x) round(W)^T in fp32, with both operands
    rounded to e4m3 with one scale each, computed here without torchao."""
    float8_config, convert = import_torchao_float8()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False))
    x = torch.randn(8, 64)
    exact = model(x)
    config = dataclasses.replace(float8_config.from_recipe_name("tensorwise"), emulate=True)
    convert(model, config=config)
    got = model(x)
    expected = e4m3_tensorwise(x) @ e4m3_tensorwise(model[0].weight.detach()).t()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # e4m3 keeps 3 mantissa bits: a few percent of error against the exact product, not more
    assert 0 < ((got - exact).norm() / exact.norm()).item() < 0.1


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_emulated_fp8_gradients_are_close_to_fp32(recipe):
    float8_config, convert = import_torchao_float8()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False))
    x = torch.randn(8, 64, requires_grad=True)
    model(x).square().sum().backward()
    ref_w, ref_x = model[0].weight.grad.clone(), x.grad.clone()
    model[0].weight.grad, x.grad = None, None
    convert(model, config=dataclasses.replace(float8_config.from_recipe_name(recipe), emulate=True))
    model(x).square().sum().backward()
    # e4m3/e5m2 keep 3/2 mantissa bits: a few percent of relative error, not more
    for got, ref in ((model[0].weight.grad, ref_w), (x.grad, ref_x)):
        assert 0 < ((got - ref).norm() / ref.norm()).item() < 0.1


def test_emulate_names_its_own_policy(run_config, tmp_path):
    """fp8_tensorwise with emulate=true is not fp8_tensorwise: its numbers are recorded under the
    emulated arm's name, and emulate without a recipe is refused."""
    from ablate.config import ConfigError

    with pytest.raises(ConfigError, match="valid: precision=fp8_tensorwise_emulated"):
        run_config(tmp_path, **{"precision": "fp8_tensorwise", "precision.emulate": True})
    with pytest.raises(ConfigError, match="precision.emulate=true needs an fp8 recipe"):
        run_config(tmp_path, **{"precision.emulate": True})


def test_stochastic_rounding_is_unbiased():
    torch.manual_seed(0)
    x = torch.full((200_000,), 1.0 + 2**-10)  # between two bf16 neighbours (ulp at 1 is 2^-7)
    y = stochastic_round(x, torch.bfloat16).float()
    assert set(y.unique().tolist()) == {1.0, 1.0 + 2**-7}
    assert y.mean().item() == pytest.approx(1.0 + 2**-10, abs=2e-5)


def sub_ulp_updates(rounding: str, steps: int) -> torch.Tensor:
    """A bf16 weight of 1.0 under AdamW steps of lr 1e-3 down: each update (about lr, since Adam's
    step is m / sqrt(v) ~ 1 for a constant gradient) is under half the gap to the bf16 below, 2^-9."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.ones(4096, dtype=torch.bfloat16))
    opt = Fp32StateAdamW([w], lr=1e-3, rounding=rounding)
    for _ in range(steps):
        w.grad = torch.ones_like(w)
        opt.step()
    return w.detach().float()


def test_round_to_nearest_loses_updates_under_half_an_ulp_and_stochastic_rounding_keeps_them():
    """bf16_pure_nearest's optimizer loses every step of 1e-3 on a weight of 1 (half the gap below
    is 2^-9 ~ 2.0e-3); bf16_pure's stochastic rounding moves it by the steps' sum in expectation."""
    assert sub_ulp_updates("nearest", 50).eq(1.0).all()
    moved = 1.0 - sub_ulp_updates("stochastic", 50)
    assert moved.mean().item() == pytest.approx(50 * 1e-3, rel=0.05)


def test_rounding_names_its_own_policy(run_config, tmp_path):
    """bf16_pure with rounding=nearest is recorded as bf16_pure_nearest; round-to-nearest needs bf16
    weights to round."""
    from ablate.config import ConfigError

    with pytest.raises(ConfigError, match="valid: precision=bf16_pure_nearest"):
        run_config(tmp_path, **{"precision": "bf16_pure", "precision.rounding": "nearest"})
    with pytest.raises(ConfigError, match="precision.rounding=nearest needs precision.param_dtype=bf16"):
        run_config(tmp_path, **{"precision.rounding": "nearest"})


@pytest.mark.parametrize("recipe", ["fp8_tensorwise", "fp8_rowwise"])
def test_torchao_float8_converts_the_block_linears_and_trains(run_config, tmp_path, recipe):
    """torchao's recipes, run here on torch's CPU float8 matmul: every block linear whose sides are
    multiples of 16 becomes a Float8Linear (the output head never does), and a step lowers the loss
    about as an fp32 step does."""
    from torchao.float8.float8_linear import Float8Linear

    from ablate.model.precision import convert_to_torchao_float8

    cfg = run_config(tmp_path, precision=recipe, **{"model.mlp": "swiglu", "model.n_embd": 48, "model.n_head": 2})
    model_cfg = dataclasses.replace(cfg.model, vocab_size=27)
    torch.manual_seed(0)
    model = GPT(model_cfg)
    converted = convert_to_torchao_float8(model, recipe.removeprefix("fp8_"))
    # per block: qkv (48 -> 144), the attention projection, SwiGLU's fc (48 -> 256) and proj (128 -> 48)
    assert model_cfg.mlp_hidden == 128 and converted == 4 * model_cfg.n_layer
    assert not isinstance(model.lm_head, Float8Linear)
    torch.manual_seed(0)
    reference = GPT(model_cfg)
    x = torch.randint(0, 27, (4, 64))
    losses = []
    for m in (model, reference):
        opt = build_optimizer(m, cfg.optim)
        m(x, x)[1].backward()
        opt.step()
        losses.append(m(x, x)[1].item())
    assert losses[0] == pytest.approx(losses[1], rel=0.02)
