"""ablate.memory against measurement: the real GPT, precision policy and optimizer after one step.

States must match exactly; activations must be within 10% of what saved-tensor hooks count (they
match exactly on this torch); on a CUDA machine the modelled peak is checked against
torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from ablate.config import ModelConfig, OptimConfig, PrecisionConfig, build
from ablate.model.gpt import GPT
from ablate.model.optim import build_optimizer
from ablate.model.precision import apply_precision
from ablate.perf import memory
from support import ARCH_ARMS, preset

CPU_PRESETS = ["nano", "micro", "tiny", "small", "medium", "large"]
FAST = {"nano", "micro"}
VOCAB = 27  # the synthetic language


def model_config(name: str, attention: str = "sdpa", **changes) -> ModelConfig:
    cfg = build(ModelConfig, preset("model", name), "model")
    changes.setdefault("vocab_size", cfg.vocab_size or VOCAB)
    return dataclasses.replace(cfg, attention=attention, **changes)


def policy(name: str) -> PrecisionConfig:
    return build(PrecisionConfig, preset("precision", name), "precision")


def sizes(names):
    return [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in names]


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in backward (torch.utils.checkpoint, non-reentrant)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


def built(cfg: ModelConfig, prec: PrecisionConfig, device: str = "cpu", checkpointing: bool = False):
    torch.manual_seed(0)
    model = GPT(cfg)
    runtime = apply_precision(model, prec, device)
    model.to(device)
    if checkpointing:
        model.blocks = nn.ModuleList(Checkpointed(b) for b in model.blocks)
    return model, runtime


def batch(cfg: ModelConfig, B: int, device: str = "cpu"):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab_size, (B, cfg.block_size), generator=g)
    y = torch.randint(0, cfg.vocab_size, (B, cfg.block_size), generator=g)
    return x.to(device), y.to(device)


def saved_tensor_bytes(model: nn.Module, runtime, x, y) -> int:
    """Bytes of every storage autograd keeps for backward during one forward pass, each storage
    once (q, k, v are views of one), parameters and buffers excluded (they are states)."""
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in own:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with runtime.autocast():
            model(x, y)
    return sum(seen.values())


def state_bytes_after_one_step(model: nn.Module, runtime, x, y) -> dict[str, int]:
    optimizer = build_optimizer(model, OptimConfig())
    with runtime.autocast():
        _, loss = model(x, y)
    loss.backward()
    optimizer.step()
    params = list(model.parameters())  # the tied head appears once
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    return {
        "buffers": sum(b.numel() * b.element_size() for b in model.buffers()),
        "weights": sum(p.numel() * p.element_size() for p in params),
        "gradients": sum(p.grad.numel() * p.grad.element_size() for p in params),
        "optimizer_states": sum(t.numel() * t.element_size() for t in state),
    }


# ---------------------------------------------------------------------------------------------
# States: exact
# ---------------------------------------------------------------------------------------------


# fp32 weights with torch's AdamW, the same under autocast, bf16 weights with Fp32StateAdamW on every
# preset; fp16 and the emulated fp8 arms store like fp32, checked on the small ones.
STATE_CASES = [(n, p) for n in CPU_PRESETS for p in ("fp32", "bf16", "bf16_pure")] + [
    (n, p) for n in sorted(FAST) for p in ("fp16", "fp8_tensorwise_emulated", "fp8_tensorwise", "fp8_rowwise")
]


@pytest.mark.parametrize(
    "name, precision", [c if c[0] in FAST else pytest.param(*c, marks=pytest.mark.slow) for c in STATE_CASES]
)
def test_state_bytes_are_exact(name, precision):
    # States do not depend on the batch: one short sequence keeps the CPU step quick.
    cfg, prec = model_config(name, block_size=16), policy(precision)
    model, runtime = built(cfg, prec)
    measured = state_bytes_after_one_step(model, runtime, *batch(cfg, 1))
    predicted = memory.state_bytes(cfg, prec, device="cpu")
    assert measured == {
        "weights": predicted.weights,
        "gradients": predicted.gradients,
        "optimizer_states": predicted.optimizer_states,
        "buffers": memory.buffer_bytes(cfg),
    }
    assert predicted.master_weights == 0


def test_bytes_per_param_by_policy():
    cfg = model_config("gpt_1p5b")
    # bf16 weights and grads (2 + 2) + fp32 Adam m and v (4 + 4); Fp32StateAdamW keeps its step as an int.
    assert memory.state_bytes(cfg, policy("bf16_pure")).bytes_per_param == 12
    # fp32 weights (the master copy autocast casts from) + fp32 grads + m + v; on a GPU torch's
    # AdamW keeps its step counters on the host.
    assert memory.state_bytes(cfg, policy("bf16")).bytes_per_param == 16
    assert memory.state_bytes(cfg, policy("fp32")).bytes_per_param == 16
    # on the CPU the 4-byte step tensors (3 + 6 L of them) are in the same memory
    cpu = memory.state_bytes(cfg, policy("fp32"), device="cpu")
    assert cpu.total == 16 * cpu.params + 4 * (3 + 6 * 48)


# ---------------------------------------------------------------------------------------------
# Activations: saved-tensor hooks
# ---------------------------------------------------------------------------------------------


def test_fp32_manual_layer_by_hand():
    """One fp32 block with manual attention keeps, in elements: x, h1, q, k^T, v, y, x1, h2 (8 BTC),
    the fc output and the GELU output (8 BTC), the probabilities B H T^2, four (B, T) LayerNorm
    statistics, and a T x T boolean mask (1 byte each)."""
    cfg = model_config("micro", attention="manual")
    B, T, C, H = 2, cfg.block_size, cfg.n_embd, cfg.n_head
    expected = 4 * (16 * B * T * C + B * H * T * T + 4 * B * T) + T * T
    dt = memory.saved_dtypes(policy("fp32"), "cpu")
    assert sum(memory.layer_terms(cfg, dt, B).values()) == expected


def check_activations(name: str, attention: str, precision: str, checkpointing: bool = False) -> None:
    cfg, prec = model_config(name, attention), policy(precision)
    model, runtime = built(cfg, prec, checkpointing=checkpointing)
    measured = saved_tensor_bytes(model, runtime, *batch(cfg, 2))
    predicted = memory.activation_bytes(cfg, prec, 2, device="cpu", checkpointing=checkpointing).saved
    assert predicted == pytest.approx(measured, rel=0.10), f"model {predicted} vs hooks {measured}"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("attention", ["manual", "sdpa"])
@pytest.mark.parametrize("name", sizes(CPU_PRESETS))
def test_activation_bytes_match_saved_tensor_hooks(name, attention, precision):
    check_activations(name, attention, precision)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("attention", ["manual", "sdpa"])
@pytest.mark.parametrize("name", sizes(["nano", "micro", "small"]))
def test_activation_bytes_with_checkpointing_match_saved_tensor_hooks(name, attention, precision):
    check_activations(name, attention, precision, checkpointing=True)


# torchao's float8 recipes run on the CPU too (torch._scaled_mm's CPU kernel): what they save is measured here.
@pytest.mark.parametrize(
    "precision",
    ["bf16_pure", "fp16", "fp8_tensorwise_emulated", "fp8_rowwise_emulated", "fp8_tensorwise", "fp8_rowwise"],
)
@pytest.mark.parametrize("attention", ["manual", "sdpa"])
def test_activation_bytes_other_policies(precision, attention):
    cfg, prec = model_config("micro", attention), policy(precision)
    model, runtime = built(cfg, prec)
    measured = saved_tensor_bytes(model, runtime, *batch(cfg, 2))
    assert memory.activation_bytes(cfg, prec, 2, device="cpu").saved == pytest.approx(measured, rel=0.10)


def test_activations_grow_linearly_in_batch_and_layers():
    prec = policy("bf16_pure")
    one = memory.activation_bytes(model_config("small"), prec, 1)
    assert memory.activation_bytes(model_config("small"), prec, 4).layers == 4 * one.layers
    deeper = model_config("small", n_layer=12)
    assert memory.activation_bytes(deeper, prec, 1).layers == 2 * one.layers


def test_checkpointing_keeps_only_block_inputs_and_the_head():
    cfg, prec = model_config("gpt2_124m"), policy("bf16")
    full = memory.activation_bytes(cfg, prec, 4)
    ckpt = memory.activation_bytes(cfg, prec, 4, checkpointing=True)
    assert ckpt.layers == cfg.n_layer * 4 * cfg.block_size * cfg.n_embd * 4  # fp32 residual stream
    assert ckpt.outside_layers == full.outside_layers
    assert ckpt.layers < full.layers / 8


def test_sharding_divides_states_not_activations():
    cfg, prec = model_config("gpt_1p5b"), policy("bf16_pure")
    one = memory.gpu_memory(cfg, prec, 2)
    eight = memory.gpu_memory(cfg, prec, 2, gpus=8, sharded=True)
    assert eight.weights == -(-one.weights // 8) and eight.optimizer_states == -(-one.optimizer_states // 8)
    assert eight.activations == one.activations  # bf16_pure has no autocast weight copies to drop
    assert eight.fsdp_buffers == 3 * 12 * cfg.n_embd**2 * 2  # two gathered blocks + one block's grads, bf16


# ---------------------------------------------------------------------------------------------
# The peak of a whole step on the CPU, measured by torch's MemTracker
# ---------------------------------------------------------------------------------------------


def cpu_step_peak(cfg: ModelConfig, prec: PrecisionConfig, B: int, checkpointing: bool) -> int:
    """Peak bytes of live tensors over one training step (forward, backward, clipping, optimizer
    step), counted by torch.distributed._tools.mem_tracker.MemTracker, which sees every tensor
    allocation at the dispatcher. Gradients stay allocated between steps (zero_grad(set_to_none=
    False)), as with gradient accumulation in a big run, so all of them are live during backward."""
    from torch.distributed._tools.mem_tracker import MemTracker

    model, runtime = built(cfg, prec, checkpointing=checkpointing)
    optimizer = build_optimizer(model, OptimConfig())
    x, y = batch(cfg, B)

    def step():
        with runtime.autocast():
            _, loss = model(x, y)  # train.py holds the logits like this until the step ends
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)

    step()
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        step()
    return tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]


# Every combination runs in `make test`; three of them also in the quick subset.
PEAK_QUICK = {(5000, "fp32", "sdpa", False), (VOCAB, "bf16_pure", "manual", False), (5000, "bf16", "sdpa", True)}
PEAK_CASES = [
    c if c in PEAK_QUICK else pytest.param(*c, marks=pytest.mark.slow)
    for c in itertools.product([VOCAB, 5000], ["fp32", "bf16", "bf16_pure"], ["manual", "sdpa"], [False, True])
]


@pytest.mark.parametrize("vocab, precision, attention, checkpointing", PEAK_CASES)
def test_step_peak_matches_memtracker(vocab, precision, attention, checkpointing):
    """With the synthetic language's 27 tokens a block's backward sets the peak; with 5,000 the
    logits and cross-entropy's gradients do, as in real language models."""
    cfg, prec = model_config("micro", attention, vocab_size=vocab), policy(precision)
    measured = cpu_step_peak(cfg, prec, 2, checkpointing)
    predicted = memory.gpu_memory(cfg, prec, 2, device="cpu", checkpointing=checkpointing).total
    assert predicted == pytest.approx(measured, rel=0.10), f"model {predicted} vs MemTracker {measured}"


# ---------------------------------------------------------------------------------------------
# On a GPU: the modelled peak against torch.cuda.max_memory_allocated
# ---------------------------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def cuda_zero_point() -> int:
    """Bytes allocated before the model exists, after cuBLAS/cuBLASLt have taken their workspaces
    (they keep them for the process and the model does not account for them)."""
    for dtype, autocast in ((torch.float32, False), (torch.float32, True), (torch.bfloat16, False)):
        a = torch.randn(256, 256, device="cuda", dtype=dtype, requires_grad=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            (a @ a).sum().backward()
            torch.bmm(a[None], a[None]).sum().backward()
        del a
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated()


def cuda_step_peak(cfg: ModelConfig, prec: PrecisionConfig, B: int, checkpointing: bool = False) -> dict:
    """Peak bytes allocated over one training step after a warm-up step: forward and backward of two
    micro-batches (gradient accumulation, so every gradient is live during the second backward, as
    in a big run), gradient clipping and the optimizer step, like train.py."""
    zero = cuda_zero_point()
    model, runtime = built(cfg, prec, "cuda", checkpointing)
    optimizer = build_optimizer(model, OptimConfig())
    x, y = batch(cfg, B, "cuda")
    inputs = x.numel() * x.element_size() * 2

    def step():
        for _ in range(2):
            with runtime.autocast():
                _, loss = model(x, y)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    torch.cuda.synchronize()
    between = torch.cuda.memory_allocated() - zero - inputs
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - zero - inputs
    saved = None if checkpointing else saved_tensor_bytes(model, runtime, x, y)
    model = optimizer = runtime = None  # free the GPU memory before empty_cache
    torch.cuda.empty_cache()
    return {"peak": peak, "between_steps": between, "saved": saved}


@needs_cuda
@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16_pure"])
@pytest.mark.parametrize("attention", ["manual", "sdpa"])
def test_cuda_peak_matches_max_memory_allocated(attention, precision, checkpointing):
    cfg, prec = model_config("gpt2_124m", attention), policy(precision)
    got = cuda_step_peak(cfg, prec, 4, checkpointing)
    states = memory.state_bytes(cfg, prec, "cuda")
    # between steps: weights, Adam moments and the causal masks (gradients are set to None)
    assert got["between_steps"] == pytest.approx(
        states.weights + states.optimizer_states + memory.buffer_bytes(cfg), rel=0.02
    )
    if got["saved"] is not None:
        assert memory.activation_bytes(cfg, prec, 4, device="cuda").saved == pytest.approx(got["saved"], rel=0.10)
    predicted = memory.gpu_memory(cfg, prec, 4, device="cuda", checkpointing=checkpointing).total
    assert predicted == pytest.approx(got["peak"], rel=0.15), f"model {predicted} vs measured {got['peak']}"


# ---------------------------------------------------------------------------------------------
# Architecture arms and Muon
# ---------------------------------------------------------------------------------------------

ARMS = {k: v for k, v in ARCH_ARMS.items() if k not in ("gqa", "modern")}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("attention", ["manual", "sdpa"])
@pytest.mark.parametrize("arm", ARMS)
def test_activation_bytes_of_every_arm_match_saved_tensor_hooks(arm, attention, precision):
    """Exact on this torch for every arm, as for the GPT-2 block (a 1% margin for float rounding)."""
    cfg, prec = model_config("micro", attention, **ARMS[arm]), policy(precision)
    model, runtime = built(cfg, prec)
    measured = saved_tensor_bytes(model, runtime, *batch(cfg, 2))
    assert memory.activation_bytes(cfg, prec, 2, device="cpu").saved == pytest.approx(measured, rel=0.01)


@pytest.mark.parametrize("arm", ["rope", "nope", "untied", "swiglu", "mqa"])
def test_state_bytes_of_the_arms_are_exact(arm):
    cfg, prec = model_config("micro", block_size=16, **ARMS[arm]), policy("fp32")
    model, runtime = built(cfg, prec)
    measured = state_bytes_after_one_step(model, runtime, *batch(cfg, 1))
    predicted = memory.state_bytes(cfg, prec, device="cpu")
    assert (measured["optimizer_states"], measured["buffers"]) == (predicted.optimizer_states, memory.buffer_bytes(cfg))
    assert measured["weights"] == predicted.weights


def test_muon_keeps_one_momentum_per_block_matrix_and_adamw_two_for_the_rest():
    cfg, prec = model_config("micro", block_size=16), policy("fp32")
    model, runtime = built(cfg, prec)
    optimizer = build_optimizer(model, OptimConfig(name="muon"))
    x, y = batch(cfg, 1)
    model(x, y)[1].backward()
    optimizer.step()
    held = [t for opt in (optimizer.muon, optimizer.adamw) for s in opt.state.values() for t in s.values()]
    measured = sum(t.numel() * t.element_size() for t in held if torch.is_tensor(t))
    assert measured == memory.state_bytes(cfg, prec, device="cpu", optimizer="muon").optimizer_states
    assert memory.state_bytes(cfg, prec, optimizer="muon").total < memory.state_bytes(cfg, prec).total
