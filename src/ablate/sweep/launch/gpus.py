"""Which GPUs each slot of the process launcher owns.

A job sees only its slot's GPUs: CUDA_VISIBLE_DEVICES is set in the job's process before its first
CUDA call (worker.py sets it right after the fork, and the warm worker it is forked from never
initializes CUDA: its `ready` event says so, and a worker that finds CUDA initialized refuses to
fork). Under that variable the job's GPU is `cuda:0`, and a run's DDP world
(hardware.gpus_per_node, capped by the GPUs it sees) is the slot's size: one GPU unless the sweep
asks for more with hydra.launcher.gpus_per_job.

The GPUs to share out: hydra.launcher.gpus when given, else those this process may see. They are
read without CUDA (the launcher never imports torch): CUDA_VISIBLE_DEVICES when set, else NVML's
device count (nvidia-ml-py), else `nvidia-smi -L`. Indices found through NVML are in PCI bus order,
so the jobs get CUDA_DEVICE_ORDER=PCI_BUS_ID, under which CUDA numbers devices the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

from ablate.config import ConfigError

VISIBLE = "CUDA_VISIBLE_DEVICES"
ORDER = "CUDA_DEVICE_ORDER"


def visible_gpus(environ: dict | None = None) -> tuple[list[str], bool]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries, and whether they were counted
    by NVML (indices in PCI bus order) rather than read from the variable."""
    environ = os.environ if environ is None else environ
    if VISIBLE in environ:
        return [g.strip() for g in environ[VISIBLE].split(",") if g.strip()], False
    count = _nvml_count()
    if count is None:
        count = _nvidia_smi_count()
    return [str(i) for i in range(count)], True


def _nvml_count() -> int | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no device: pynvml raises its own NVMLError kinds
        return None


def _nvidia_smi_count() -> int:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if listed.returncode:
        return 0
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())


@dataclass
class GpuSlots:
    """The launcher's GPUs in slots of `per_job`; a running job holds one slot until it ends."""

    gpus: list[str]
    per_job: int = 1
    pci_order: bool = False
    free: list[tuple[str, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.gpus) // self.per_job
        self.free = [tuple(self.gpus[i * self.per_job : (i + 1) * self.per_job]) for i in range(n)]

    @property
    def slots(self) -> int:
        return len(self.gpus) // self.per_job

    def take(self) -> tuple[str, ...]:
        return self.free.pop(0)

    def give_back(self, slot: tuple[str, ...]) -> None:
        self.free.append(slot)
        self.free.sort(key=lambda held: self.gpus.index(held[0]))

    def environment(self, slot: tuple[str, ...]) -> dict[str, str]:
        """The variables a job holding `slot` runs with."""
        env = {VISIBLE: ",".join(slot)}
        if self.pci_order:
            env[ORDER] = "PCI_BUS_ID"
        return env


def gpu_slots(gpus: list | None, per_job: int, device: str, environ: dict | None = None) -> GpuSlots | None:
    """The launcher's slots, or None where its jobs use no GPU (hardware.device cpu or mps, or no GPU
    visible): then their environment is left as it is."""
    if device in ("cpu", "mps"):
        return None
    if gpus is None:
        found, pci_order = visible_gpus(environ)
    else:
        found, pci_order = [str(g).strip() for g in gpus], False
    if not found:
        return None
    if len(set(found)) != len(found):
        raise ConfigError(f"hydra.launcher.gpus={found} names a GPU twice (valid: distinct GPU indices or UUIDs)")
    if per_job > len(found):
        raise ConfigError(
            f"hydra.launcher.gpus_per_job={per_job} is more than the {len(found)} GPU(s) the launcher has "
            f"({','.join(found)}) (valid: 1 to {len(found)}, or hydra.launcher.gpus naming more)"
        )
    return GpuSlots(found, per_job, pci_order)
