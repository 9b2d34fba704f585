"""train.activation_checkpointing (model/checkpointing.py): each block recomputed in backward. The
numbers are the same (loss and every gradient, bit for bit on the CPU), the state dict is the
model's, and the activations kept between forward and backward shrink to the blocks' inputs."""

import torch
from torch.autograd.graph import saved_tensors_hooks

from ablate.config import ModelConfig, PrecisionConfig
from ablate.model import GPT, checkpoint_blocks
from ablate.perf import gpu_memory

CFG = ModelConfig(n_layer=3, n_head=4, n_embd=64, block_size=32, vocab_size=97)


def step(model: GPT, batch: torch.Tensor) -> tuple[float, dict, int]:
    """One forward and backward: the loss, every gradient, the bytes autograd kept for backward."""
    kept = 0

    def pack(t: torch.Tensor):
        nonlocal kept
        kept += t.numel() * t.element_size()
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        _, loss = model(batch[:, :-1], batch[:, 1:])
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}, kept


def models() -> tuple[GPT, GPT]:
    torch.manual_seed(0)
    plain = GPT(CFG)
    torch.manual_seed(0)
    recomputed = GPT(CFG)
    assert checkpoint_blocks(recomputed) == CFG.n_layer
    return plain, recomputed


def test_the_same_loss_and_gradients_with_less_kept_for_backward():
    plain, recomputed = models()
    batch = torch.randint(0, CFG.vocab_size, (4, CFG.block_size + 1), generator=torch.Generator().manual_seed(1))
    loss, grads, kept = step(plain, batch)
    loss_ac, grads_ac, kept_ac = step(recomputed, batch)
    assert loss_ac == loss
    assert grads_ac.keys() == grads.keys() and all(torch.equal(grads_ac[n], grads[n]) for n in grads)
    block_input = 4 * CFG.block_size * CFG.n_embd * 4  # (B, T, C) fp32, what each block keeps now
    assert kept_ac < kept / 2 and kept_ac >= CFG.n_layer * block_input
    assert recomputed.state_dict().keys() == plain.state_dict().keys()  # checkpoints load either way


def test_the_memory_model_counts_the_same_trade():
    precision = PrecisionConfig()
    kept = gpu_memory(CFG, precision, 4, device="cpu").activations
    recomputed = gpu_memory(CFG, precision, 4, device="cpu", checkpointing=True).activations
    assert recomputed < kept
