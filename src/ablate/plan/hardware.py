"""The hardware a plan prices: catalogue figures for a named accelerator, or this machine's measured
figures for hardware=cpu, with the peak of the dtype the precision policy's matmuls run in."""

from __future__ import annotations

from dataclasses import dataclass

from ablate.config import ConfigError, HardwareConfig, PrecisionConfig
from ablate.perf import support

GB = 1e9


@dataclass(frozen=True)
class PlanHardware:
    name: str
    device: str
    peak_flops: float  # dense FLOP/s for the precision's matmuls
    peak_key: str
    memory_bytes: float
    price_per_hour: float | None
    gpus_per_node: int
    memory_bandwidth_gbs: float | None = None  # for decode.py's bound on generation speed
    nvlink_gbs: float | None = None  # per GPU per direction, within a node (comm.py)
    network_gbs: float | None = None  # per GPU per direction, across nodes


def planning_hardware(cfg: HardwareConfig, precision: PrecisionConfig) -> PlanHardware:
    """Catalogue figures for a named accelerator, or this machine's measured figures for hardware=cpu."""
    if cfg.device not in ("cpu", "cuda", "mps") or (cfg.device != "cpu" and not cfg.peak_flops):
        raise ConfigError(
            f"hardware={cfg.name} has no catalogue figures to plan with (valid: a catalogue entry "
            "such as a100, h100, h200, rtx4090, m3_ultra, or cpu; or set hardware.peak_flops "
            "and hardware.memory_gb)"
        )
    peaks = {k: float(v) for k, v in cfg.peak_flops.items() if v is not None}
    if cfg.device == "cpu" and "fp32" not in peaks:
        from ablate.perf import measured_cpu_peak_flops

        peaks["fp32"] = measured_cpu_peak_flops()
    reason = support.unsupported_reason(precision, cfg.device, cfg.name, cfg.cuda_capability, peak_flops=peaks)
    if reason:
        raise ConfigError(reason)
    wanted = precision.matmul_dtype
    key = wanted if wanted in peaks else "fp32"
    if key not in peaks:
        raise ConfigError(
            f"hardware.peak_flops has no {wanted} or fp32 entry for hardware={cfg.name} "
            f"(valid: e.g. hardware.peak_flops.{wanted}=1e15)"
        )
    memory_gb = cfg.memory_gb
    if memory_gb is None and cfg.device == "cpu":
        import psutil

        memory_gb = psutil.virtual_memory().total / GB
    if memory_gb is None:
        raise ConfigError(f"hardware.memory_gb is null for hardware={cfg.name} (valid: the memory of one device in GB)")
    bandwidth = cfg.memory_bandwidth_gbs
    if bandwidth is None and cfg.device == "cpu":  # measured once per machine, like the peak
        from ablate.perf import measured_cpu_bandwidth

        bandwidth = measured_cpu_bandwidth() / 1e9
    return PlanHardware(
        cfg.name,
        cfg.device,
        peaks[key],
        key,
        memory_gb * GB,
        cfg.price_per_hour,
        cfg.gpus_per_node,
        bandwidth,
        cfg.nvlink_gbs,
        cfg.network_gbs,
    )
