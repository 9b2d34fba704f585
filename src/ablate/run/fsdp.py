"""train.parallel=fsdp: the model sharded over the run's ranks with FSDP2 (torch.distributed.fsdp.
fully_shard), one unit per transformer block and the rest (embeddings, final norm, head) in the root
unit, as torchtitan shards Llama (parallelize_llama).

Each rank keeps 1/W of every weight, gradient and AdamW moment (rows, dim 0, padded to a multiple
of W). Before a block's forward its weights are all-gathered, and freed after it
(reshard_after_forward); backward gathers them again and reduce-scatters the block's gradients, so
each rank holds only its shard of them. The precision policy goes through FSDP2's MixedPrecisionPolicy:
weights gathered in the autocast dtype (bf16/fp16) where the precision autocasts, gradients reduced
in fp32 while the weights are fp32 (torchtitan's defaults); a bf16_pure model is bf16 throughout.
"""

from __future__ import annotations

import torch

from ablate.config import RunConfig
from ablate.run import distributed

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def sharded(cfg: RunConfig) -> bool:
    """Whether this run shards its model (train.parallel=fsdp on more than one rank)."""
    return cfg.train.parallel == "fsdp" and distributed.current().world > 1


def policy(cfg: RunConfig):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    p = cfg.precision
    gathered = DTYPES.get(p.autocast) if p.autocast else None
    return MixedPrecisionPolicy(param_dtype=gathered, reduce_dtype=torch.float32 if p.param_dtype == "fp32" else None)


def shard(model: torch.nn.Module, cfg: RunConfig) -> None:
    """fully_shard each block, then the root, in place (before the optimizer is built over its
    parameters, which become DTensors); nothing when the run does not shard."""
    if not sharded(cfg):
        return
    from torch.distributed.fsdp import fully_shard

    mp = policy(cfg)
    blocks = list(model.blocks)
    for i, block in enumerate(blocks):
        # the last block's weights would be gathered again at once by backward: keep them (torchtitan)
        fully_shard(block, mp_policy=mp, reshard_after_forward=i < len(blocks) - 1)
    fully_shard(model, mp_policy=mp)


def is_sharded(model: torch.nn.Module) -> bool:
    return distributed.fully_sharded(model)


def local_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this rank holds of the weights, their gradients and the optimizer's states (its shards)."""
    from torch.distributed.tensor import DTensor

    def nbytes(t: torch.Tensor) -> int:
        local = t.to_local() if isinstance(t, DTensor) else t
        return local.numel() * local.element_size()

    params = list(model.parameters())
    states = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
    return {
        "weights": sum(nbytes(p) for p in params),
        "gradients": sum(nbytes(p.grad) for p in params if p.grad is not None),
        "optimizer_states": sum(nbytes(v) for v in states),
    }
