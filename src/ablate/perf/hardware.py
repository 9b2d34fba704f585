"""Resolve a HardwareConfig to a real device, with its peak FLOP/s and what precisions it can run."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ablate.config import ConfigError, HardwareConfig, PrecisionConfig
from ablate.files import read_json_object, write_json
from ablate.perf import peak, support


@dataclass
class Hardware:
    name: str
    device: str  # "cpu", "cuda", "mps"
    peak_flops: dict = field(default_factory=dict)
    memory_gb: float | None = None
    memory_bandwidth_gbs: float | None = None
    price_per_hour: float | None = None
    cuda_capability: float | None = None
    workers: int = 1
    measured: tuple = ()  # keys of peak_flops measured on this machine (perf/peak.py), not given
    threads: int | None = None  # the CPU cores a measured peak is for

    def peak_key(self, precision: PrecisionConfig) -> str:
        return precision.matmul_dtype if precision.matmul_dtype in self.peak_flops else "fp32"

    def peak_for(self, precision: PrecisionConfig) -> float | None:
        """Peak dense FLOP/s for the dtype a precision's matmuls run in."""
        return self.peak_flops.get(self.peak_key(precision))

    def raise_peak(self, precision: PrecisionConfig, attained: float) -> float:
        """A run attained `attained` FLOP/s, above peak_for(precision), which cannot be: a measured
        peak is measured again (perf/peak.raise_to keeps the larger of that and the run's rate), a
        given one (hardware.peak_flops) is raised to the run's rate. Returns the new peak, so that
        no MFU above 100% is reported."""
        key, old = self.peak_key(precision), self.peak_for(precision)
        if key in self.measured:
            new = peak.raise_to(key, attained, self.threads)
        else:
            new = attained
        self.peak_flops[key] = max(new, attained)
        print(
            f"ablate: a run attained {attained / 1e9:.4g} GFLOP/s, above the {key} peak of {self.name} "
            f"({(old or 0) / 1e9:.4g}); peak now {self.peak_flops[key] / 1e9:.4g} GFLOP/s",
            file=sys.stderr,
        )
        return self.peak_flops[key]


def available_devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found.insert(0, "cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.insert(0 if "cuda" not in found else 1, "mps")
    return found


def resolve(cfg: HardwareConfig) -> Hardware:
    """Pick the device (auto: cuda > mps > cpu) and fill in what the catalogue or this machine knows."""
    present = available_devices()
    device = present[0] if cfg.device == "auto" else cfg.device
    if device not in present:
        raise ConfigError(
            f"hardware={cfg.name} needs a {device} device, which this machine does not have "
            f"(valid here: auto, {', '.join(present)})"
        )
    peaks = {k: float(v) for k, v in cfg.peak_flops.items() if v is not None}
    capability = cfg.cuda_capability
    memory_gb = cfg.memory_gb
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        capability = major + minor / 10
        memory_gb = memory_gb or torch.cuda.get_device_properties(0).total_memory / 1e9
    measured, threads = (), None
    if device == "cpu" and "fp32" not in peaks:
        threads = peak.cores_for(None)
        peaks["fp32"], measured = measured_cpu_peak_flops(threads=threads), ("fp32",)
    workers = cfg.workers or (os.cpu_count() or 1)
    return Hardware(
        name=cfg.name if cfg.name != "auto" else device,
        device=device,
        peak_flops=peaks,
        measured=measured,
        threads=threads,
        memory_gb=memory_gb,
        memory_bandwidth_gbs=cfg.memory_bandwidth_gbs,
        price_per_hour=cfg.price_per_hour,
        cuda_capability=capability,
        workers=workers,
    )


def available_memory(hw: Hardware) -> int | None:
    """Bytes free on the run's device now (CUDA: free on GPU 0; CPU: available RAM); None when unknown."""
    if hw.device == "cuda":
        return int(torch.cuda.mem_get_info()[0])
    if hw.device == "cpu":
        import psutil

        return int(psutil.virtual_memory().available)
    return None


def unsupported_reason(hw: Hardware, precision: PrecisionConfig) -> str | None:
    """None when this machine's device can run `precision`, else one line saying why not (perf/support.py);
    an fp8 policy also needs torchao, an optional dependency (the fp8 extra)."""
    if precision.fp8 and importlib.util.find_spec("torchao") is None:
        return (
            f"precision={precision.name} needs torchao, which is not installed (valid: pip install 'ablate[fp8]', "
            f"a torchao release paired with torch {torch.__version__}, or another precision)"
        )
    bf16 = torch.cuda.is_bf16_supported() if hw.device == "cuda" else True
    return support.unsupported_reason(precision, hw.device, hw.name, hw.cuda_capability, bf16)


def measured_cpu_peak_flops(dtype: str = "fp32", threads: int | None = None) -> float:
    """Matmul FLOP/s of this CPU in `dtype` (fp32, bf16, fp16) on `threads` cores (default: this
    process's torch threads): the per-core peak, measured once per machine so that a busy machine
    cannot fool it (perf/peak.py), times the cores."""
    return peak.peak_flops(dtype, threads)


def cached_measurement(cache: Path, name: str, measure) -> float:
    """Runs `measure()` once per machine and torch thread count, and keeps the figure in the JSON file
    `cache` as {machine key: {name: value}} (several figures, several thread counts, one file)."""
    key = f"{peak.machine_key()}|{torch.get_num_threads()}"
    saved = read_json_object(cache)
    entry = saved.get(key) if isinstance(saved.get(key), dict) else {}
    if isinstance(entry.get(name), (int, float)):
        return float(entry[name])
    value = float(measure())
    saved = read_json_object(cache)  # another process may have added figures while this one measured
    saved[key] = {**(saved.get(key) if isinstance(saved.get(key), dict) else {}), name: value}
    try:
        write_json(cache, saved)
    except OSError:  # a read-only home: the figure is still good for this process
        pass
    return value
