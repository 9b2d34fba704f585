"""Resolve a HardwareConfig to a real device, with its peak FLOP/s and what precisions it can run."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ablate.config import ConfigError, HardwareConfig, PrecisionConfig


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

    def peak_for(self, precision: PrecisionConfig) -> float | None:
        """Peak dense FLOP/s for the dtype a precision's matmuls run in."""
        if precision.fp8 == "real":
            key = "fp8"
        elif precision.autocast:
            key = precision.autocast
        elif precision.param_dtype == "bf16":
            key = "bf16"
        else:
            key = "fp32"
        return self.peak_flops.get(key) or self.peak_flops.get("fp32")


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
    peak = {k: float(v) for k, v in cfg.peak_flops.items() if v is not None}
    capability = cfg.cuda_capability
    memory_gb = cfg.memory_gb
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        capability = major + minor / 10
        memory_gb = memory_gb or torch.cuda.get_device_properties(0).total_memory / 1e9
    if device == "cpu" and "fp32" not in peak:
        peak["fp32"] = measured_cpu_peak_flops()
    workers = cfg.workers or (os.cpu_count() or 1)
    return Hardware(
        name=cfg.name if cfg.name != "auto" else device,
        device=device,
        peak_flops=peak,
        memory_gb=memory_gb,
        memory_bandwidth_gbs=cfg.memory_bandwidth_gbs,
        price_per_hour=cfg.price_per_hour,
        cuda_capability=capability,
        workers=workers,
    )


def unsupported_reason(hw: Hardware, precision: PrecisionConfig) -> str | None:
    """None when `hw` can run `precision`, else one line saying why not."""
    if hw.device not in precision.devices:
        return (
            f"precision={precision.name} cannot run on {hw.device} "
            f"(it runs on: {', '.join(precision.devices)})"
        )
    need = precision.min_cuda_capability
    if hw.device == "cuda" and need is not None and (hw.cuda_capability or 0) < need:
        return (
            f"precision={precision.name} needs CUDA compute capability >= {need}, "
            f"this GPU has {hw.cuda_capability}"
        )
    uses_bf16 = precision.param_dtype == "bf16" or precision.autocast == "bf16"
    if hw.device == "cuda" and uses_bf16 and not torch.cuda.is_bf16_supported():
        return f"precision={precision.name} needs bf16, which this GPU does not support"
    return None


MATMUL_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def measured_cpu_peak_flops(cache: Path | None = None, dtype: str = "fp32") -> float:
    """Matmul FLOP/s of this CPU in `dtype` (fp32, bf16, fp16), measured once and cached per machine.

    A square n x n matmul is 2 n^3 FLOPs; the best of a few repetitions approximates the
    attainable peak with the current torch thread count. n = 1024 in fp32, 512 in bf16/fp16,
    which CPUs without native reduced-precision arithmetic run 20-40x slower.
    """
    cache = cache or cache_dir() / "cpu_peak.json"
    n = 1024 if dtype == "fp32" else 512
    return cached_measurement(cache, dtype, lambda: _matmul_flops(n, MATMUL_DTYPES[dtype]))


def cache_dir() -> Path:
    return Path(os.environ.get("ABLATE_CACHE", Path.home() / ".cache" / "ablate"))


def cached_measurement(cache: Path, name: str, measure) -> float:
    """Runs `measure()` once per machine and torch thread count, and keeps the figure in the JSON file
    `cache` as {machine key: {name: value}} (several figures, several thread counts, one file)."""
    key = f"{platform.node()}|{platform.processor()}|{os.cpu_count()}|{torch.get_num_threads()}"
    saved = _read_cache(cache)
    entry = saved.get(key) if isinstance(saved.get(key), dict) else {}
    if isinstance(entry.get(name), (int, float)):
        return float(entry[name])
    value = float(measure())
    saved = _read_cache(cache)  # another process may have added figures while this one measured
    saved[key] = {**(saved.get(key) if isinstance(saved.get(key), dict) else {}), name: value}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(saved))
        os.replace(tmp, cache)
    except OSError:
        pass
    return value


def _read_cache(cache: Path) -> dict:
    try:
        doc = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    if isinstance(doc.get("key"), str):  # the first layout: one machine, {"key": ..., "fp32": ...}
        return {doc["key"]: {k: v for k, v in doc.items() if k != "key"}}
    return doc


def _matmul_flops(n: int, dtype: torch.dtype) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(5 if dtype == torch.float32 else 3):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best
