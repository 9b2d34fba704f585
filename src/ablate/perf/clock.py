"""Training time as the user waits for it, on a device that runs its work asynchronously.

A CUDA step returns to the host as soon as its kernels are queued: host time around a step measures
how fast Python queues work, not how fast the GPU does it. The only honest marks are points where
the host has waited for the device. The trainer already waits at every log, where reading the loss
(`.item()`) forces the device to finish; DeviceClock.read synchronizes there and the log interval is
timed from such a point to the next, as nanoGPT and torchtitan's metrics do. Nothing else is
synchronized, so the device is never starved by the clock.

The warm-up is reported apart: the first step of every launch (CUDA context, cuBLAS handles, the
allocator's first blocks, torch.compile's compilation) is closed with a synchronization of its own,
and so is every following interval during which torch.compile compiled a graph (dynamo's count of
unique graphs moved). Steady tokens/s and MFU are over the intervals after it; `compile_s` is the
warm-up's time beyond what its steps take at the steady pace.

CPU time per step (process_time) is kept for the shared-machine accounting (core_share): on a CPU
it is the step's own cost, and the clock's `step()` context is where it is taken.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass


class DeviceClock:
    """Wall time and the device's synchronization point; `step()` wraps the host's issuing of one step."""

    def __init__(self, device: str):
        self.device = device

    def now(self) -> float:
        return time.perf_counter()

    def synchronize(self) -> None:
        """Wait until the device has done all the work queued so far."""
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        elif self.device == "mps":
            torch.mps.synchronize()

    def read(self, value) -> float:
        """A scalar tensor's value; the device has finished its queued work when this returns."""
        out = float(value.item())
        self.synchronize()  # .item() waits for the loss's stream; the other streams' work too
        return out

    @contextmanager
    def step(self) -> Iterator[None]:
        yield


def compiled_graphs(compiled: bool) -> int:
    """How many graphs torch.compile has compiled in this process (0 when the run does not compile:
    torch._dynamo is then never imported)."""
    if not compiled:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@dataclass
class Timing:
    """A run's training time, split into warm-up and steady intervals, over all of its launches
    (kept in its checkpoints, so a resumed run's figures are the whole run's)."""

    warmup_steps: int = 0
    warmup_s: float = 0.0
    steady_steps: int = 0
    steady_s: float = 0.0
    cpu_s: float = 0.0  # process CPU seconds inside training steps
    checkpoint_s: float = 0.0  # seconds the step path spent on checkpoints (in the intervals above)

    @property
    def train_s(self) -> float:
        return self.warmup_s + self.steady_s

    @property
    def steps(self) -> int:
        return self.warmup_steps + self.steady_steps

    def steady_step_s(self) -> float | None:
        """Seconds per step at the steady pace; over every step when no interval was steady (a run of
        one interval, or one that compiled until its end)."""
        if self.steady_steps and self.steady_s > 0:
            return self.steady_s / self.steady_steps
        if self.steps and self.train_s > 0:
            return self.train_s / self.steps
        return None

    def compile_s(self) -> float:
        """The warm-up's seconds beyond its steps at the steady pace (compilation, first-use set-up)."""
        if not self.steady_steps:
            return 0.0
        pace = self.steady_s / self.steady_steps
        return max(0.0, self.warmup_s - self.warmup_steps * pace)

    def to_state(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict | None) -> Timing:
        known = {k: v for k, v in (state or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)


class IntervalTimer:
    """One launch's intervals: `begin()` once, `stepped()` after every step's work is issued,
    `close(steps)` right after the log's loss read (a synchronization point), `pause()`/`resume()`
    around work that is not training (evaluation). Adds each interval to `timing`."""

    def __init__(self, clock: DeviceClock, timing: Timing, compiled: bool):
        self.clock, self.timing, self.compiled = clock, timing, compiled
        self.mark = 0.0
        self.graphs = 0
        self.steps = 0  # steps issued in the open interval
        self.launch_steps = 0
        self.warming = True  # until an interval compiles nothing
        self.paused_at: float | None = None
        self.last_step_s: float | None = None

    def begin(self) -> None:
        self.clock.synchronize()
        self.mark = self.clock.now()
        self.graphs = compiled_graphs(self.compiled)

    @contextmanager
    def step(self) -> Iterator[None]:
        """One step's work being issued: its process CPU time is counted here."""
        c0 = time.process_time()
        with self.clock.step():
            yield
        self.timing.cpu_s += time.process_time() - c0
        self.steps += 1
        self.launch_steps += 1
        if self.launch_steps == 1:  # the launch's first step is warm-up whatever it ran: closed alone
            self.clock.synchronize()
            self._add(self.clock.now(), warmup=True)
            self.graphs = compiled_graphs(self.compiled)

    def close(self) -> float | None:
        """End the open interval at a synchronization point (the caller has just read the loss);
        returns its seconds per step (an interval whose only step was the launch's first, closed
        on its own: that step's)."""
        if not self.steps:
            return self.last_step_s
        now = self.clock.now()
        graphs = compiled_graphs(self.compiled)
        warmup = self.warming and graphs != self.graphs
        self.warming = warmup
        steps, seconds = self.steps, now - self.mark
        self._add(now, warmup)
        self.graphs = graphs
        return seconds / steps

    def pause(self) -> None:
        """Before work that is not training (evaluation): the device has finished the steps."""
        self.clock.synchronize()
        self.paused_at = self.clock.now()

    def resume(self) -> None:
        if self.paused_at is not None:
            self.mark += self.clock.now() - self.paused_at
            self.paused_at = None

    def _add(self, now: float, warmup: bool) -> None:
        seconds = now - self.mark
        self.last_step_s = seconds / self.steps
        if warmup:
            self.timing.warmup_steps += self.steps
            self.timing.warmup_s += seconds
        else:
            self.timing.steady_steps += self.steps
            self.timing.steady_s += seconds
        self.mark, self.steps = now, 0
