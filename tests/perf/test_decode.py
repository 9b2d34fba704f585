"""decode.py: the memory-bandwidth bound on decode tokens/s, and the measured greedy loop with a KV cache."""

import pytest
import torch

from ablate.config import ModelConfig, PrecisionConfig, build, parse_plan
from ablate.model.gpt import GPT
from ablate.perf import decode, roofline
from support import CONF, preset

SMALL = ModelConfig(name="small-test", n_layer=2, n_head=2, n_embd=48, block_size=64, vocab_size=27)


def test_bound_is_bandwidth_over_bytes_per_token_hand_computed():
    L, d, V = 2, 48, 27
    weights = (12 * L * d * d + V * d + (2 * L + 1) * d) * 4  # fp32 blocks, tied head, LayerNorm gains
    kv = 2 * L * 32 * d * 4  # K and V at 32 positions, per sequence
    b = decode.decode_bound(SMALL, bandwidth=1e10, context=32, batch=1)
    assert (b.weight_bytes, b.kv_bytes) == (weights, kv)
    assert b.tokens_per_s == pytest.approx(1e10 / (weights + kv))
    b8 = decode.decode_bound(SMALL, bandwidth=1e10, context=32, batch=8)
    assert b8.bytes_per_token == pytest.approx(weights / 8 + kv)  # the batch shares one read of the weights
    assert b8.tokens_per_s_per_sequence * 8 == pytest.approx(b8.tokens_per_s)


def test_gpt2_on_an_h200_in_bf16():
    cfg = ModelConfig(**preset("model", "gpt2_124m"))
    b = decode.decode_bound(cfg, bandwidth=4.8e12, context=1024, batch=1, weight_dtype="bf16")
    weights = (12 * 12 * 768**2 + 50257 * 768 + 25 * 768) * 2  # 247 MB
    kv = 2 * 12 * 1024 * 768 * 2  # 37.7 MB
    assert b.tokens_per_s == pytest.approx(4.8e12 / (weights + kv))
    assert 16_000 < b.tokens_per_s < 17_500


def test_the_loop_bound_lies_between_the_bounds_at_its_first_and_last_context():
    bw, prompt, new = 1e10, 8, 40
    loop = decode.loop_bound(SMALL, bw, prompt, new)
    first = decode.decode_bound(SMALL, bw, prompt + 1).tokens_per_s
    last = decode.decode_bound(SMALL, bw, prompt + new - 1).tokens_per_s
    assert last < loop < first


def test_serving_dtype_follows_the_precision():
    def policy(name):
        return build(PrecisionConfig, preset("precision", name), "precision")

    assert decode.serving_dtype(policy("fp32")) == "fp32"
    assert decode.serving_dtype(policy("bf16")) == "bf16"
    assert decode.serving_dtype(policy("bf16_pure")) == "bf16"
    assert decode.serving_dtype(policy("fp8_tensorwise")) == "fp8"
    bounds = decode.plan_bounds(SMALL, policy("fp8_tensorwise"), 3350.0, context=64, batch=4)
    assert [b.batch for b in bounds] == [1, 4]
    assert bounds[0].weight_dtype == "fp8" and bounds[0].kv_dtype == "bf16"
    label, text = decode.plan_row(bounds)
    assert label == "decode bound" and text.startswith(f"<= {bounds[0].tokens_per_s:,.0f} tokens/s for 1 sequence")
    assert decode.plan_entry(bounds)["bounds"][1]["batch"] == 4
    assert decode.plan_bounds(SMALL, policy("fp32"), None, 64, 4) == []


def test_the_planner_reports_the_bound_beside_the_training_estimates(tmp_path):
    from omegaconf import OmegaConf

    from ablate.plan import hardware as plan_hardware
    from ablate.plan import make as plan_make
    from ablate.plan import mfu as plan_mfu
    from ablate.plan import render

    def group(name, option):  # as Hydra composes it (YAML 1.2 numbers: 6.7e13 is a float)
        return OmegaConf.to_container(OmegaConf.load(CONF / name / f"{option}.yaml"))

    tree = {
        "model": group("model", "gpt2_124m"),
        "precision": group("precision", "bf16"),
        "hardware": group("hardware", "h200"),
        "budget": {"tokens": 1e10},
        "batch_size": 4,
        "out": str(tmp_path),
    }
    inputs = parse_plan(tree)
    hw = plan_hardware.planning_hardware(inputs.hardware, inputs.precision)
    plan = plan_make.make_plan(inputs, hw, plan_mfu.choose_mfu(inputs.plan, hw.name, hw.device, "bf16"))
    one, four = render.plan_dict(plan)["decode"]["bounds"]
    expected = decode.decode_bound(inputs.model, 4.8e12, 1024, 1, "bf16")
    assert (one["batch"], four["batch"]) == (1, 4)
    assert one["tokens_per_s"] == pytest.approx(expected.tokens_per_s)
    rows = dict(render.summary_rows(plan))
    assert rows["decode bound"].startswith(f"<= {expected.tokens_per_s:,.0f} tokens/s for 1 sequence")
    assert rows["decode bound"].endswith("at 4,800 GB/s)")


def _greedy_without_cache(model, prompt, new_tokens):
    ids = prompt
    with torch.no_grad():
        for _ in range(new_tokens):
            logits, _ = model(ids)
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


# The built-in architecture arms, alone and together, and one user's attention class (no KV cache).
ARMS = {
    "baseline": {},
    "manual": {"attention": "manual"},
    "mup": {"mup": True, "mup_base_width": 16},
    "rope": {"position": "rope"},
    "nope": {"position": "none"},
    "gqa": {"n_kv_head": 1, "n_head": 4},
    "modern": {"position": "rope", "norm": "rmsnorm", "mlp": "swiglu", "qk_norm": True, "tie_embeddings": False},
    "user_attention": {"attention": "ablate.model.attention:CausalSelfAttention"},
}


@pytest.mark.parametrize("name", ARMS)
def test_the_cached_loop_generates_what_the_model_generates(name):
    torch.manual_seed(0)
    cfg = ModelConfig(**{**SMALL.__dict__, **ARMS[name]})
    model = GPT(cfg).eval()
    prompt = torch.randint(0, cfg.vocab_size, (3, 5))
    run = decode.generate(model, prompt, 20)
    assert torch.equal(run.tokens, _greedy_without_cache(model, prompt, 20))
    assert run.tokens_per_s > 0 and run.prefill_s > 0
    assert run.kv_cache == (name != "user_attention")


def test_grouped_query_heads_shrink_the_kv_cache_the_bound_counts():
    gqa = ModelConfig(**{**SMALL.__dict__, "n_head": 4, "n_kv_head": 1})
    assert decode.kv_bytes(gqa, 32, "fp32") == decode.kv_bytes(SMALL, 32, "fp32") / 4
    without = decode.loop_bound(SMALL, 1e10, 8, 40, kv_cache=False)
    assert without == pytest.approx(1e10 / decode.weight_bytes(SMALL, "fp32"))  # the weights alone
    assert without > decode.loop_bound(SMALL, 1e10, 8, 40)


def test_sampling_draws_from_the_top_k_at_a_temperature():
    logits = torch.tensor([[0.0, 3.0, 2.0, 1.0]]).repeat(2000, 1)
    greedy = decode.NextToken(temperature=0.0)
    assert torch.equal(greedy(logits), torch.ones(2000, dtype=torch.long))
    assert decode.NextToken(temperature=5.0, top_k=1).greedy
    top2 = decode.NextToken(temperature=1.0, top_k=2, generator=torch.Generator().manual_seed(0))(logits)
    assert set(top2.tolist()) == {1, 2}  # never outside the two most likely
    share = (top2 == 1).float().mean().item()
    assert share == pytest.approx(1 / (1 + torch.e**-1), abs=0.03)  # softmax of (3, 2): 0.731
    again = decode.NextToken(temperature=1.0, top_k=2, generator=torch.Generator().manual_seed(0))(logits)
    assert torch.equal(top2, again)


def test_the_loop_needs_room_in_the_context():
    model = GPT(SMALL)
    with pytest.raises(ValueError, match="must fit block_size 64"):
        decode.generate(model, torch.zeros(1, 60, dtype=torch.long), 6)


def _below_bound(cfg: ModelConfig, batch: int, prompt: int, new_tokens: int) -> tuple[float, float]:
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    # The ceiling is the best copy rate seen around the loop: a busy machine only lowers it.
    before = roofline.measure_copy_bandwidth(reps=3)
    run = decode.measure(model, batch, prompt, new_tokens)
    bandwidth = max(before, roofline.measure_copy_bandwidth(reps=3))
    bound = decode.loop_bound(cfg, bandwidth, prompt, new_tokens, batch, decode.model_dtype(model))
    return run.tokens_per_s, bound


@pytest.mark.alone  # a test beside it would slow the copy benchmark that sets the bound
def test_measured_decode_on_the_cpu_stays_below_the_bandwidth_bound():
    # 4 layers of width 256: 12.6 MB of fp32 weights, more than this CPU's caches, so each step streams them.
    big = ModelConfig(name="decode-test", n_layer=4, n_head=4, n_embd=256, block_size=128, vocab_size=27)
    measured, bound = _below_bound(big, batch=1, prompt=16, new_tokens=24)
    assert 0 < measured < bound
    measured, bound = _below_bound(SMALL, batch=4, prompt=8, new_tokens=24)  # cache-resident: overhead binds
    assert 0 < measured < bound


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_measured_decode_on_the_gpu_stays_below_the_catalogue_bound():
    entry = roofline.catalogue_match(torch.cuda.get_device_name())
    if entry is None:
        pytest.skip(f"{torch.cuda.get_device_name()} is not in the catalogue")
    cfg = ModelConfig(name="decode-gpu", n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257)
    torch.manual_seed(0)
    model = GPT(cfg).to("cuda", dtype=torch.bfloat16).eval()
    run = decode.measure(model, batch=1, prompt=128, new_tokens=64)
    bound = decode.loop_bound(cfg, entry.memory_bandwidth_gbs * 1e9, 128, 64, 1, "bf16")
    assert 0 < run.tokens_per_s < bound
