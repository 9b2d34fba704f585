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

Past one machine the engine that launched the processes decides instead (`launched`): torchrun sets
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in each process, and a SLURM job of several tasks is
read through submitit's TorchDistributedEnvironment. Every process then runs the same command and
joins with env://; rank 0 is the run as before, the others follow it (ranks.py `launched_run`).
"""

from __future__ import annotations

import os
import sys
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


@dataclass(frozen=True)
class Launch:
    """This process's place in a world that an engine launched (torchrun, or SLURM tasks)."""

    engine: str  # torchrun | slurm
    rank: int
    world: int
    local_rank: int  # the GPU of this process on its node


TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def launched() -> Launch | None:
    """The world an engine launched this process into, or None (one process, or this project's own
    spawn). torchrun: its environment variables. SLURM: a job step of more than one task (srun -n,
    submitit's tasks_per_node / nodes), whose rank and world submitit's JobEnvironment reads."""
    env = os.environ
    if all(env.get(k) for k in TORCHRUN_VARS):
        world = int(env["WORLD_SIZE"])
        if world < 2:
            return None
        rank = int(env["RANK"])
        return Launch("torchrun", rank, world, int(env.get("LOCAL_RANK", rank)))
    slurm = int(env.get("SLURM_NTASKS", "1") or 1) > 1 and env.get("SLURM_PROCID") and env.get("SLURM_JOB_ID")
    local = int(env.get("SUBMITIT_LOCAL_NTASKS", "1") or 1) > 1  # hydra/launcher=submitit_local's tasks
    if slurm or local:
        from submitit import JobEnvironment

        job = JobEnvironment()
        return Launch("slurm" if slurm else "submitit_local", job.global_rank, job.num_tasks, job.local_rank)
    return None


def join(launch: Launch, device: str) -> None:
    """Join the launched world with env:// (rendezvous at MASTER_ADDR:MASTER_PORT). Under SLURM the
    variables are first set from the job's tasks (submitit's TorchDistributedEnvironment: the first
    node's host, a port drawn from the job id), never over ones already set."""
    if launch.engine != "torchrun":
        from submitit.helpers import TorchDistributedEnvironment

        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    if device == "cuda":
        torch.cuda.set_device(launch.local_rank % max(1, torch.cuda.device_count()))
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method="env://", rank=launch.rank, world_size=launch.world)


def joined() -> bool:
    """Whether this process is in a process group now."""
    return dist.is_available() and dist.is_initialized()


def lost_peer(exc: BaseException) -> bool:
    """Whether `exc` is a collective that failed because another rank of the run ended (killed,
    out of memory, its node lost): the run was stopped, not wrong, and resumes from its checkpoint."""
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        marker in text for marker in ("Connection closed by peer", "Connection reset by peer", "gloo", "NCCL")
    )


def world_size(cfg: RunConfig, device: str) -> int:
    """Training processes for this run: the launched world, or this machine's own spawn."""
    launch = launched()
    if launch is not None:
        return launch.world
    wanted = cfg.hardware.gpus_per_node
    if device == "cuda":
        return max(1, min(wanted, torch.cuda.device_count()))
    if device == "cpu":
        return wanted
    return 1  # mps: one device


def check(cfg: RunConfig, device: str) -> None:
    """The global batch must split evenly across ranks, and a sharded run must be one FSDP2 can
    train here (ConfigError, one line, otherwise)."""
    check_sharding(cfg)
    world = world_size(cfg, device)
    if world > 1 and cfg.train.batch_size % world:
        raise ConfigError(
            f"train.batch_size={cfg.train.batch_size} does not split across {world} DDP ranks "
            f"({_world_source(cfg)}) (valid: a multiple of {world})"
        )


def check_sharding(cfg: RunConfig) -> None:
    """What FSDP2 here cannot do (train.parallel=fsdp, run/fsdp.py), refused in one line before any work."""
    if cfg.train.parallel != "fsdp":
        return
    if cfg.optim.name != "adamw":
        raise ConfigError(
            f"train.parallel=fsdp with optim.name={cfg.optim.name}: Muon orthogonalises whole matrices, "
            "and a rank holds a shard of each (valid: optim.name=adamw, or train.parallel=ddp)"
        )
    if cfg.precision.fp8 is not None:
        raise ConfigError(
            f"train.parallel=fsdp with precision={cfg.precision.name}: float8 weights under FSDP need "
            "torchao's float8 all-gather, not wired here (valid: fp32, bf16, bf16_pure, fp16; or train.parallel=ddp)"
        )
    if isinstance(cfg.train.steps, list) or isinstance(cfg.train.tokens, list) or isinstance(cfg.train.flops, list):
        raise ConfigError(
            "train.parallel=fsdp with a list of budgets: cooldown forks are saved by rank 0 alone, and a "
            "sharded state needs every rank (valid: one budget, or train.parallel=ddp)"
        )


def _world_source(cfg: RunConfig) -> str:
    launch = launched()
    if launch is None:
        return f"hardware.gpus_per_node={cfg.hardware.gpus_per_node}"
    return f"{launch.world} processes launched by {launch.engine}"


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


def any_rank(flag: bool) -> bool:
    """Whether `flag` is true on any rank (every rank must call it at the same step)."""
    if _CURRENT.world == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def wrap(model: torch.nn.Module) -> torch.nn.Module:
    """DDP around the model when there are several ranks; the model itself otherwise.

    forward_sync_buffers=False: the GPT's buffers are constants (synced once, at construction),
    and without buffer broadcasts a forward pass has no collective, so rank 0 can evaluate alone
    while the others wait for the next step.
    """
    if _CURRENT.world == 1 or fully_sharded(model):  # FSDP2 reduces its own gradients (fsdp.py)
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [torch.cuda.current_device()] if next(model.parameters()).is_cuda else None
    return DistributedDataParallel(model, device_ids=device_ids, forward_sync_buffers=False)


def fully_sharded(model: torch.nn.Module) -> bool:
    """Whether fully_shard made this model an FSDPModule. A model can only be one once
    torch.distributed.fsdp was imported (by fsdp.shard), so an unsharded run never imports it: the
    package pulls in sympy and ~600 modules, which every warm-forked sweep job would pay for."""
    fsdp_module = sys.modules.get("torch.distributed.fsdp")
    return fsdp_module is not None and isinstance(model, fsdp_module.FSDPModule)


def init(rank: int, world: int, store: Path, device: str) -> None:
    """Join the run's process group (file:// rendezvous in the run's state dir)."""
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
