"""Fixtures of the search tests: launchers that run no process (each job "trains" for a duration
its parameters give, on a clock of its own, and writes the result.json a real job would), so that
what the driver asks, when, and what it tells Optuna is exact and quick to check."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.files import write_json


@pytest.fixture
def hydra_config(tmp_path: Path):
    """The two keys of Hydra's config the driver reads."""
    return OmegaConf.create({"hydra": {"runtime": {"cwd": str(tmp_path)}, "sweep": {"dir": str(tmp_path / "sweep")}}})


@pytest.fixture
def fake_launcher(tmp_path: Path):
    """fake_launcher(slots=True, **how_jobs_go): a FakeSlotLauncher, or with slots=False a
    FakeLauncher that has Hydra's batch API only."""

    def make(slots: bool = True, **kw):
        return (FakeSlotLauncher if slots else FakeLauncher)(tmp_path / "sweep", **kw)

    return make


@pytest.fixture
def trials_json(tmp_path: Path):
    """trials_json(): the study's trials.json as data."""
    return lambda study="t": json.loads((tmp_path / "studies" / study / "trials.json").read_text())


@pytest.fixture
def bowl():
    """The fake jobs' loss against their learning rate."""
    return loss_of


def lr_of(overrides: list[str]) -> float:
    return next(float(o.split("=", 1)[1]) for o in overrides if o.startswith("optim.lr="))


def loss_of(lr: float) -> float:
    """A bowl in log learning rate, lowest at 3e-3."""
    return 2.0 + (math.log10(lr) - math.log10(3e-3)) ** 2


@dataclass
class FakeJob:
    num: int
    overrides: list
    ends_at: float


@dataclass
class FakeLauncher:
    """A job lasts `duration(overrides)` seconds of the fake clock; one whose `pruned(overrides)`
    is true ends at a third of it, pruned. `events` records ("ask", num, running) and ("end", num)."""

    sweep_dir: Path
    duration: object = lambda overrides: 1.0
    pruned: object = lambda overrides: False
    memory_bytes: object = lambda overrides: 1e6
    clock: float = 0.0
    events: list = field(default_factory=list)

    def launch(self, job_overrides, initial_job_idx: int) -> list:
        jobs = [self._start(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
        for job in sorted(jobs, key=lambda j: j.ends_at):
            self._end(job)
        return [None] * len(jobs)

    def _start(self, num: int, overrides: list) -> FakeJob:
        short = self.pruned(overrides)
        return FakeJob(num, overrides, self.clock + self.duration(overrides) / (3 if short else 1))

    def _end(self, job: FakeJob) -> None:
        self.clock = max(self.clock, job.ends_at)
        lr = lr_of(job.overrides)
        finished = not self.pruned(job.overrides)
        result = {
            "status": "finished" if finished else "pruned",
            "reason": "" if finished else "optuna trial: pruned",
            "final_val_loss": loss_of(lr) if finished else None,
            "steps": 30 if finished else 10,
            "flops": 1e9 * self.duration(job.overrides),
            "wall_s": self.duration(job.overrides),
            "memory_bytes": self.memory_bytes(job.overrides),
            "ended_at": time.time(),
            "mlflow_run_id": None,
        }
        write_json(self.sweep_dir / str(job.num) / "result.json", result)
        self.events.append(("end", job.num))


@dataclass
class FakeSlotLauncher(FakeLauncher):
    """A SlotLauncher (sweep/launch/feed.py): a job starts whenever one of `slots` ends."""

    def launch_as_slots_free(self, feed, slots: int, initial_job_idx: int) -> list:
        running: list[FakeJob] = []
        num, ended = initial_job_idx, []
        while True:
            while len(running) < slots and (overrides := feed.next_job(num)) is not None:
                self.events.append(("ask", num, len(running)))
                running.append(self._start(num, overrides))
                num += 1
            if not running:
                return ended
            job = min(running, key=lambda j: j.ends_at)
            running.remove(job)
            self._end(job)
            feed.job_ended(job.num, None)
            ended.append(None)
