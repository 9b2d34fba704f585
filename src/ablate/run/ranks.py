"""Rank 0 is the run; ranks 1..W-1 are helper processes that this module starts for the run's
duration (distributed.py has the why). They train in lockstep and record nothing, and rank 0 ends
them when the run ends for any reason (finished, failed, preempted)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

from ablate.child import spawn
from ablate.config import RunConfig, as_dict, parse_run
from ablate.run import checkpoint, distributed
from ablate.run.prepare import prepare
from ablate.run.trainer import Trainer
from ablate.tracking import Tracker

HELPER_JOIN_S = 5.0  # how long a finished run waits for its helpers to end on their own


@contextmanager
def helpers(cfg: RunConfig, device: str, state_dir: Path, resume: bool):
    """Rank 0 (this process) plus W-1 helper processes for the duration of a run.

    `resume`: whether rank 0 starts from the checkpoint in `state_dir`; helpers do the same.
    """
    world = distributed.world_size(cfg, device)
    if world == 1:
        yield distributed.Rank()
        return
    state_dir.mkdir(parents=True, exist_ok=True)
    store = Path(tempfile.mkdtemp(prefix=".ddp-", dir=state_dir)) / "store"
    threads = max(1, torch.get_num_threads() // world)
    torch.set_num_threads(threads)
    shared = {
        "world": world,
        "store": str(store),
        "config": as_dict(cfg),
        "device": device,
        "state_dir": str(state_dir),
        "resume": resume,
        "threads": threads,
    }
    procs = [
        spawn("ablate.run.ranks:run_helper", {"rank": r, **shared}, stdin=subprocess.DEVNULL) for r in range(1, world)
    ]
    try:
        distributed.init(0, world, store, device)
        distributed.set_current(distributed.Rank(0, world))
        yield distributed.current()
        for h in procs:  # a finished run: helpers end by themselves after their last step
            _wait(h, HELPER_JOIN_S)
    finally:
        distributed.set_current(distributed.Rank())
        for h in procs:
            if h.poll() is None:
                h.kill()
            h.wait()
        if dist.is_initialized():
            dist.destroy_process_group()
        for f in store.parent.iterdir():
            f.unlink(missing_ok=True)
        store.parent.rmdir()


def _wait(proc: subprocess.Popen, timeout_s: float) -> None:
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:  # still running: the caller ends it
        pass


def run_helper(
    rank: int, world: int, store: str, config: dict, device: str, state_dir: str, resume: bool, threads: int
) -> None:
    """Rank > 0, in a process of its own (`config`: the run's, as_dict): the same run, in lockstep
    with rank 0, recording nothing."""
    # Signals are rank 0's business: it checkpoints at a step boundary, which needs this rank
    # to finish the step with it, and then ends this process.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_IGN)
    torch.set_num_threads(threads)
    if device == "cuda":
        torch.cuda.set_device(rank)
    cfg = parse_run(config)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, progress=False))
    prepared = prepare(cfg)
    state = checkpoint.load(Path(state_dir)) if resume else None
    distributed.init(rank, world, Path(store), device)
    distributed.set_current(distributed.Rank(rank, world))
    try:
        _helper_trainer(prepared, Path(state_dir)).train(state)
    finally:
        dist.destroy_process_group()


class HelperTrainer(Trainer):
    """Trains in lockstep; leaves evaluation, checkpoints, tracking and results to rank 0."""

    def _record(self, is_eval: bool, interval_time: float) -> None:
        pass

    def _checkpoint(self) -> None:
        pass

    def _finish(self, status: str, reason: str):
        return None


def _helper_trainer(prepared, state_dir: Path) -> HelperTrainer:
    return HelperTrainer(prepared, Tracker(), state_dir, Path(os.devnull))
