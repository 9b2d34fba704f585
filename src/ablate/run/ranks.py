"""Rank 0 is the run; ranks 1..W-1 train in lockstep and record nothing (distributed.py has the why).

Who starts the other ranks:
- this module (`helpers`), on one machine: helper processes for the run's duration, which rank 0
  ends when the run ends for any reason (finished, failed, preempted);
- the engine that launched the command (torchrun, SLURM tasks; `launched_run`): every process runs
  the same command and joins with env://. Rank 0 alone takes the lock, opens the MLflow run and
  decides to train, resume or skip; it sends the others that decision (`helpers`, when it trains)
  and how the run ended (a broadcast each), and they follow. A rank that dies ends the collective
  the others wait in; rank 0 then ends the run KILLED, resumable, and the engine ends the rest.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

from ablate.child import spawn
from ablate.config import RunConfig, as_dict, parse_run
from ablate.run import checkpoint, checkpoint_sharded, distributed, fsdp
from ablate.run.prepare import Prepared, prepare
from ablate.run.result import RunResult
from ablate.run.trainer import Trainer
from ablate.tracking import Tracker

HELPER_JOIN_S = 5.0  # how long a finished run waits for its helpers to end on their own


@contextmanager
def helpers(cfg: RunConfig, device: str, state_dir: Path, resume: bool):
    """Rank 0 (this process) plus W-1 helper processes for the duration of a run.

    `resume`: whether rank 0 starts from the checkpoint in `state_dir`; helpers do the same.
    """
    launch = distributed.launched()
    if launch is not None:  # rank 0 of a launched world: the others wait for this decision
        _send({"train": True, "resume": resume})
        distributed.set_current(distributed.Rank(0, launch.world))
        try:
            yield distributed.current()
        finally:
            distributed.set_current(distributed.Rank())
        return
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
    """Trains in lockstep; leaves evaluation, checkpoints, tracking and results to rank 0. A sharded
    model (train.parallel=fsdp) needs every rank in each forward and in each checkpoint: this rank
    then evaluates beside rank 0 and writes its own shards, and records nothing."""

    def _record(self, is_eval: bool, interval_time: float) -> None:
        if is_eval and fsdp.is_sharded(self.model):
            self.evaluate()

    def _checkpoint(self) -> None:
        if fsdp.is_sharded(self.model):
            checkpoint_sharded.weights(self.model, self.optimizer, self.state_dir, self.step)

    def _on_signal(self) -> None:  # rank 0's checkpoint for a signal: a sharded one needs this rank's shards
        self._checkpoint()

    def _finish(self, status: str, reason: str):
        return None


def _helper_trainer(prepared, state_dir: Path) -> HelperTrainer:
    return HelperTrainer(prepared, Tracker(), state_dir, Path(os.devnull))


# -- a world launched by torchrun or SLURM --------------------------------------------------
def launched_run(launch: distributed.Launch, device: str, lead: Callable[[], RunResult], prepared) -> RunResult:
    """One run in a launched world: rank 0 runs `lead` (train.run's own work) and then tells the
    others how it ended; every other rank follows (`prepared`: a callable giving this run's Prepared).
    A rank whose run raised sends nothing more: its process ends, which ends the others' collectives."""
    distributed.join(launch, device)
    try:
        if launch.rank == 0:
            result = lead()
            _send({"train": False, "result": result.to_dict()})
            return result
        return _follow(launch, prepared())
    finally:
        dist.destroy_process_group()


def _follow(launch: distributed.Launch, p: Prepared) -> RunResult:
    """Rank > 0: train in lockstep when rank 0 trains, from the checkpoint it resumes from; its
    result is rank 0's (the run's)."""
    # Signals are rank 0's business (see run_helper); the engine ends this process after rank 0.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_IGN)
    cfg = dataclasses.replace(p.cfg, train=dataclasses.replace(p.cfg.train, progress=False))
    p = dataclasses.replace(p, cfg=cfg)
    state_dir = Path(cfg.state_dir) / p.config_hash
    told = _receive()
    if not told["train"]:  # skipped or busy: nothing to train
        return RunResult(**told["result"])
    state = checkpoint.load(state_dir) if told["resume"] else None
    distributed.set_current(distributed.Rank(launch.rank, launch.world))
    try:
        _helper_trainer(p, state_dir).train(state)
    finally:
        distributed.set_current(distributed.Rank())
    return RunResult(**_receive()["result"])  # the run's result, as rank 0 recorded it


def _send(message: dict) -> None:
    """Rank 0's word to the other ranks of a launched world."""
    dist.broadcast_object_list([message], src=0)


def _receive() -> dict:
    box: list = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]
