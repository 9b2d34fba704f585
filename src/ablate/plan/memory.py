"""Memory on the GPUs of a plan: on the GPUs the user has, the fewest that fit (states sharded
FSDP/ZeRO-3 style beyond one), and settings that fit when the configured ones never do.
The bytes of each part come from perf/memory.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ablate.config import ModelConfig, PlanConfig, PrecisionConfig
from ablate.perf import memory
from ablate.plan.hardware import PlanHardware


@dataclass(frozen=True)
class Fallback:
    """Settings that fit when the configured ones fit on no number of GPUs."""

    batch_size: int
    activation_checkpointing: bool
    gpus_needed: int


@dataclass(frozen=True)
class MemoryPlan:
    usable: float  # bytes per GPU the plan may use
    capacity: float
    at_gpus: memory.GpuMemory  # on the GPUs the user has
    needed: memory.GpuMemory | None  # on the fewest GPUs that fit (None when nothing fits)
    gpus_needed_as_configured: int | None  # None: no count fits at the configured batch/checkpointing
    fallback: Fallback | None
    bytes_per_param: float

    @property
    def fits(self) -> bool:
        return self.at_gpus.total <= self.usable

    @property
    def gpus_needed(self) -> int | None:
        """The fewest GPUs that fit, with the fallback's settings when the configured ones never fit."""
        if self.gpus_needed_as_configured is not None:
            return self.gpus_needed_as_configured
        return self.fallback.gpus_needed if self.fallback else None


def memory_on(
    model: ModelConfig,
    precision: PrecisionConfig,
    batch: int,
    gpus: int,
    device: str,
    checkpointing: bool,
    usable: float,
) -> memory.GpuMemory:
    """Replicated (DDP) when the whole run fits on one GPU, else sharded over `gpus`."""
    single = memory.gpu_memory(model, precision, batch, gpus, False, device, checkpointing)
    if single.total <= usable or gpus == 1:
        return single
    return memory.gpu_memory(model, precision, batch, gpus, True, device, checkpointing)


def smallest_gpu_count(
    model: ModelConfig, precision: PrecisionConfig, batch: int, device: str, checkpointing: bool, usable: float
) -> int | None:
    """Fewest GPUs on which the run fits: 1 unsharded, else states sharded FSDP/ZeRO-3 style.

    Sharding divides the states and the optimizer step's temporaries; activations and FSDP's
    gather buffers stay per GPU, so when they alone exceed the GPU no count fits (None).
    """
    if memory.gpu_memory(model, precision, batch, 1, False, device, checkpointing).total <= usable:
        return 1
    probe = memory.gpu_memory(model, precision, batch, 1, True, device, checkpointing)
    room = usable - probe.activations - probe.fsdp_buffers - probe.buffers
    if room <= 0:
        return None
    g = max(2, math.ceil(probe.states / room))
    while memory.gpu_memory(model, precision, batch, g, True, device, checkpointing).total > usable:
        g += 1
    return g


def plan_memory(model: ModelConfig, precision: PrecisionConfig, plan: PlanConfig, hw: PlanHardware) -> MemoryPlan:
    usable = hw.memory_bytes * (1 - plan.memory_reserve)
    batch, ckpt, device = plan.batch_size, plan.activation_checkpointing, hw.device
    at_gpus = memory_on(model, precision, batch, plan.gpus, device, ckpt, usable)
    needed_n = smallest_gpu_count(model, precision, batch, device, ckpt, usable)
    fallback = None
    if needed_n is None:
        fallback = _fallback(model, precision, batch, ckpt, device, usable)
    needed = None
    if needed_n is not None:
        needed = memory_on(model, precision, batch, needed_n, device, ckpt, usable)
    elif fallback is not None:
        needed = memory_on(model, precision, fallback.batch_size, fallback.gpus_needed, device, True, usable)
    states = memory.state_bytes(model, precision, device)
    return MemoryPlan(usable, hw.memory_bytes, at_gpus, needed, needed_n, fallback, states.bytes_per_param)


def _fallback(model, precision, batch, ckpt, device, usable) -> Fallback | None:
    """Activation checkpointing first, then halving the micro-batch down to one sequence."""
    candidates = [] if ckpt else [(batch, True)]
    b = batch
    while b > 1:
        b //= 2
        candidates.append((b, True))
    for b, c in candidates:
        n = smallest_gpu_count(model, precision, b, device, c, usable)
        if n is not None:
            return Fallback(b, c, n)
    return None
