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

import dataclasses
import os
import signal
import sys
import tempfile
from contextlib import contextmanager
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
HELPER_JOIN_S = 5.0  # how long a finished run waits for its helpers to end on their own


def current() -> Rank:
    return _CURRENT


def is_main() -> bool:
    return _CURRENT.rank == 0


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


# -- process group -----------------------------------------------------------------------
@contextmanager
def ranks(cfg: RunConfig, device: str, state_dir: Path, resume: bool):
    """Rank 0 (this process) plus W-1 helper processes for the duration of a run.

    `resume`: whether rank 0 starts from the checkpoint in `state_dir`; helpers do the same.
    """
    global _CURRENT
    world = world_size(cfg, device)
    if world == 1:
        yield Rank()
        return
    state_dir.mkdir(parents=True, exist_ok=True)
    store = Path(tempfile.mkdtemp(prefix=".ddp-", dir=state_dir)) / "store"
    threads = max(1, torch.get_num_threads() // world)
    torch.set_num_threads(threads)
    ctx = torch.multiprocessing.get_context("spawn")
    helpers = [
        ctx.Process(target=_helper, args=(r, world, str(store), cfg, device, str(state_dir), resume, threads),
                    name=f"ablate-rank{r}")
        for r in range(1, world)
    ]
    for h in helpers:
        h.start()
    try:
        _init(0, world, store, device)
        _CURRENT = Rank(0, world)
        yield _CURRENT
        for h in helpers:  # a finished run: helpers end by themselves after their last step
            h.join(HELPER_JOIN_S)
    finally:
        _CURRENT = Rank()
        for h in helpers:
            if h.is_alive():
                h.kill()
            h.join()
        if dist.is_initialized():
            dist.destroy_process_group()
        for f in store.parent.iterdir():
            f.unlink(missing_ok=True)
        store.parent.rmdir()


def _init(rank: int, world: int, store: Path, device: str) -> None:
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)


def _helper(rank: int, world: int, store: str, cfg: RunConfig, device: str, state_dir: str, resume: bool,
            threads: int) -> None:
    """Rank > 0: the same run, in lockstep with rank 0, recording nothing."""
    global _CURRENT
    # Signals are rank 0's business: it checkpoints at a step boundary, which needs this rank
    # to finish the step with it, and then ends this process.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_IGN)
    torch.set_num_threads(threads)
    if device == "cuda":
        torch.cuda.set_device(rank)
    from ablate import checkpoint, train

    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, progress=False))
    prepared = train.prepare(cfg)
    state = checkpoint.load(Path(state_dir)) if resume else None
    _init(rank, world, Path(store), device)
    _CURRENT = Rank(rank, world)
    try:
        _helper_trainer(prepared, Path(state_dir)).train(state)
    finally:
        dist.destroy_process_group()


def _helper_trainer(prepared, state_dir: Path):
    from ablate.train import Trainer
    from ablate.tracking import Tracker

    class HelperTrainer(Trainer):
        """Trains in lockstep; leaves evaluation, checkpoints, tracking and results to rank 0."""

        def _record(self, is_eval: bool, interval_time: float) -> None:
            pass

        def _checkpoint(self) -> None:
            pass

        def _finish(self, status: str, reason: str):
            return None

    return HelperTrainer(prepared, Tracker(), state_dir, Path(os.devnull))
