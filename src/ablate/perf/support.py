"""Whether a device can run a precision policy: one rule for a run on this machine (perf/hardware.py,
which asks the live GPU) and for a plan on catalogue hardware (plan/hardware.py, which must not
import torch)."""

from __future__ import annotations

from ablate.config import PrecisionConfig


def unsupported_reason(
    precision: PrecisionConfig,
    device: str,
    name: str,
    cuda_capability: float | None = None,
    bf16: bool = True,
    peak_flops: dict | None = None,
) -> str | None:
    """None when `device` (called `name`) can run `precision`, else one line saying why not.

    bf16: whether the device has bf16 arithmetic (a live CUDA device says; catalogue entries do).
    peak_flops: the hardware's figures, when known; real fp8 needs an fp8 entry (fp8 tensor cores).
    """
    if device not in precision.devices:
        return (
            f"precision={precision.name} cannot run on {device} (hardware={name}; "
            f"valid: a device it runs on: {', '.join(precision.devices)})"
        )
    need = precision.min_cuda_capability
    if device == "cuda" and need is not None and (cuda_capability or 0) < need:
        return (
            f"precision={precision.name} needs CUDA compute capability >= {need}; hardware={name} has "
            f"{cuda_capability} (valid: newer hardware or another precision)"
        )
    if device == "cuda" and precision.uses_bf16 and not bf16:
        return f"precision={precision.name} needs bf16, which hardware={name} does not support"
    if precision.fp8_kernels and peak_flops is not None and "fp8" not in peak_flops:
        return f"precision={precision.name} needs fp8 tensor cores; hardware={name} lists none in peak_flops"
    return None
