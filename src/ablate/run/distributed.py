"""Several devices in one job: PyTorch DDP, one process per device, and rank 0 is the run.

Every rank draws the same global batch with `data.get_batch` (a pure function of seed and step)
and trains on its own slice of rows: rank r of W takes rows [r B/W, (r+1) B/W). DDP averages the
gradients across ranks during backward, and the mean of W per-rank mean losses over equal slices
is the mean over the whole batch, so each optimizer step is the single-process step on the same
global batch (up to floating-point summation order).

Rank 0 is the run: it tracks, evaluates, checkpoints and writes results, exactly as without DDP.
Ranks 1..W-1 are helper processes that this module starts; they train in lockstep and record
nothing. They are disposable: rank 0 ends them when the run ends for any reason (finished,
failed, preempted), and a resumed run starts them again from the same checkpoint.

How many ranks: with CUDA, min(hardware.gpus_per_node, GPUs visible to the job), NCCL; on a CPU,
hardware.gpus_per_node gloo processes (1 in the cpu preset; 2 tests DDP without a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from ablate.config import ConfigError, RunConfig


@dataclass(frozen=True)
class Rank:
    rank: int = 0
    world: int = 1


_CURRENT = Rank()


def current() -> Rank:
    return _CURRENT


def is_main() -> bool:
    return _CURRENT.rank == 0


def set_current(rank: Rank) -> None:
    """This process's place in the run (ranks.py sets it while the process group is up)."""
    global _CURRENT
    _CURRENT = rank


def world_size(cfg: RunConfig, device: str) -> int:
    """Training processes for this run on this machine."""
    wanted = cfg.hardware.gpus_per_node
    if device == "cuda":
        return max(1, min(wanted, torch.cuda.device_count()))
    if device == "cpu":
        return wanted
    return 1  # mps: one device


def check(cfg: RunConfig, device: str) -> None:
    """The global batch must split evenly across ranks (ConfigError, one line, otherwise)."""
    world = world_size(cfg, device)
    if world > 1 and cfg.train.batch_size % world:
        raise ConfigError(
            f"train.batch_size={cfg.train.batch_size} does not split across {world} DDP ranks "
            f"(hardware.gpus_per_node={cfg.hardware.gpus_per_node}) (valid: a multiple of {world})"
        )


# -- inside the training step ------------------------------------------------------------
def local_rows(batch: torch.Tensor) -> torch.Tensor:
    """This rank's slice of a global (B, T) batch: (B / W, T)."""
    if _CURRENT.world == 1:
        return batch
    n = batch.shape[0] // _CURRENT.world
    return batch[_CURRENT.rank * n : (_CURRENT.rank + 1) * n]


def mean(x: torch.Tensor) -> torch.Tensor:
    """Mean of a scalar over ranks (every rank must call it at the same step)."""
    if _CURRENT.world == 1:
        return x
    y = x.detach().clone().float()
    dist.all_reduce(y, op=dist.ReduceOp.SUM)
    return y / _CURRENT.world


def wrap(model: torch.nn.Module) -> torch.nn.Module:
    """DDP around the model when there are several ranks; the model itself otherwise.

    forward_sync_buffers=False: the GPT's buffers are constants (synced once, at construction),
    and without buffer broadcasts a forward pass has no collective, so rank 0 can evaluate alone
    while the others wait for the next step.
    """
    if _CURRENT.world == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [torch.cuda.current_device()] if next(model.parameters()).is_cuda else None
    return DistributedDataParallel(model, device_ids=device_ids, forward_sync_buffers=False)


def init(rank: int, world: int, store: Path, device: str) -> None:
    """Join the run's process group (file:// rendezvous in the run's state dir)."""
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
