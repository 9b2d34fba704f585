"""The trainer's clock on a device that does its work later, as a GPU does: the host issues a step
and goes on; only reading the loss waits for the device. A CPU does each step's work before the
call returns, so the fake below makes the difference visible on a CPU: issuing a step queues
`step_s` seconds of device work on a virtual timeline, and synchronizing advances that timeline
to the end of the queue (no real sleep).

Timed as the trainer was before (host seconds around each step, the loss read outside the clock),
the run below reports its host's pace, hundreds of times the device's; timed between
synchronizations it reports the device's."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

import pytest

from ablate.perf import DeviceClock, IntervalTimer, Timing
from ablate.run.prepare import prepare
from ablate.run.trainer import Trainer
from ablate.tracking import Tracker


class DeferredDevice(DeviceClock):
    """Each step's work runs on the device after the host has issued it, `step_s` seconds of it."""

    def __init__(self, step_s: float):
        super().__init__("cpu")
        self.step_s = step_s
        self.offset = 0.0  # virtual seconds the host has spent waiting for the device
        self.busy_until = 0.0  # when the device ends the work queued so far
        self.host_step_s: list[float] = []  # what timing each step on the host would see

    def now(self) -> float:
        return time.perf_counter() + self.offset

    def synchronize(self) -> None:
        self.offset += max(0.0, self.busy_until - self.now())

    @contextmanager
    def step(self):
        issued = self.now()
        yield
        self.host_step_s.append(self.now() - issued)
        self.busy_until = max(self.busy_until, self.now()) + self.step_s


def train_on(device: DeviceClock, run_config, tmp_path, **overrides):
    cfg = run_config(tmp_path, **overrides)
    trainer = Trainer(prepare(cfg), Tracker(), tmp_path / "state", tmp_path / "out", clock=device)
    result = trainer.train(None)
    return trainer, result, json.loads((tmp_path / "out" / "result.json").read_text())


def test_a_device_that_works_behind_the_host_is_timed_at_its_own_pace(run_config, tmp_path):
    step_s = 10.0  # the device's seconds per step; the host issues a nano step in milliseconds
    device = DeferredDevice(step_s)
    trainer, result, written = train_on(
        device, run_config, tmp_path, **{"train.steps": 20, "train.log_interval": 5, "train.eval_interval": 20}
    )
    truth = trainer.tokens_per_step / step_s
    host_clock = trainer.tokens / sum(device.host_step_s)  # the clock this replaced
    assert host_clock > 50 * truth  # the fake device does separate the two clocks
    assert written["tokens_per_s"] == pytest.approx(truth, rel=0.05)
    assert result.train_s == pytest.approx(20 * step_s, rel=0.05)
    # the launch's first step is its warm-up, reported apart; nothing compiled
    assert written["warmup_steps"] == 1 and written["compile_s"] is None
    assert trainer.timing.steady_steps == 19
    assert 0 < written["mfu"] <= 1
    assert trainer.tokens_per_s == pytest.approx(truth, rel=0.05)  # the last interval's, as logged


def test_evaluation_between_intervals_is_not_training_time(run_config, tmp_path):
    device = DeferredDevice(10.0)
    trainer, result, _ = train_on(
        device,
        run_config,
        tmp_path,
        **{"train.steps": 12, "train.log_interval": 3, "train.eval_interval": 3, "train.eval_batches": 4},
    )
    assert result.train_s == pytest.approx(120.0, rel=0.05)


def test_a_resumed_run_keeps_its_timing(run_config, tmp_path):
    trainer, _, _ = train_on(DeferredDevice(1.0), run_config, tmp_path, **{"train.steps": 10})
    state = trainer.state()
    assert Timing.from_state(state["timing"]) == trainer.timing
    assert state["train_time"] == pytest.approx(trainer.timing.train_s)


class Counting(DeviceClock):
    def __init__(self):
        super().__init__("cpu")
        self.t, self.syncs = 0.0, 0

    def now(self) -> float:
        return self.t

    def synchronize(self) -> None:
        self.syncs += 1


def test_warm_up_is_the_first_step_and_every_interval_that_compiled(monkeypatch):
    """Interval bookkeeping alone: the first step of a launch is closed by a synchronization of its
    own; an interval during which torch.compile made a graph stays warm-up; the first that made
    none ends it, and compile_s is the warm-up beyond the steady pace."""
    graphs = iter([0, 3, 4, 4, 4])  # dynamo's unique graphs: at begin, after step 1, at each close
    monkeypatch.setattr("ablate.perf.clock.compiled_graphs", lambda compiled: next(graphs))
    clock, timing = Counting(), Timing()
    timer = IntervalTimer(clock, timing, compiled=True)
    timer.begin()
    paces = [30.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]  # step 1 compiles; steps 2-3 recompile
    for i, pace in enumerate(paces):
        with timer.step():
            clock.t += pace
        if i in (2, 5, 8):
            timer.close()
    assert timing.warmup_steps == 3 and timing.warmup_s == 40.0
    assert timing.steady_steps == 6 and timing.steady_s == 6.0
    assert timing.compile_s() == pytest.approx(40.0 - 3 * 1.0)
    assert clock.syncs == 2  # at begin and after the first step; reading the loss is the caller's


@pytest.mark.slow
@pytest.mark.parametrize("per_block", [False, True], ids=["whole", "blocks"])
def test_a_compiled_run_reports_its_compilation_apart_from_its_steady_speed(run_config, tmp_path, per_block):
    """torch.compile on this CPU (whole model, or each block apart): the first step holds the
    compilation; the steady tokens/s leaves it out and compile_s is what it added."""
    overrides = {"train.steps": 8, "train.log_interval": 2, "train.eval_interval": 8, "train.compile": True}
    trainer, result, written = train_on(
        DeviceClock("cpu"), run_config, tmp_path, **overrides, **{"train.compile_blocks": per_block}
    )
    assert written["warmup_steps"] >= 1 and trainer.timing.steady_steps >= 1
    assert written["compile_s"] > 0
    steady_step_s = trainer.timing.steady_s / trainer.timing.steady_steps
    assert trainer.timing.warmup_s > steady_step_s * written["warmup_steps"]  # compiling took longer than a step
    assert written["tokens_per_s"] == pytest.approx(trainer.tokens_per_step / steady_step_s)
