"""train.profile=true inside a training run: the profiler's capture of a few steps (profiling.py)
placed on the hardware's roofline (roofline.py), with the files and MLflow metrics it leaves."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ablate.perf import roofline
from ablate.perf.profiling import Profile, StepCapture, write_profile

if TYPE_CHECKING:
    from ablate.config import PrecisionConfig, TrainConfig
    from ablate.perf.hardware import Hardware


class RunCapture(StepCapture):
    """The capture of a training run: places the ops on the hardware's roofline and writes the
    files (trace, profile.json, profile.md, roofline.png) to the run dir."""

    def __init__(self, train: TrainConfig, hardware: Hardware, precision: PrecisionConfig, out_dir: Path):
        super().__init__(train.profile_start, train.profile_steps, hardware.device)
        self.hardware, self.precision, self.out_dir = hardware, precision, out_dir
        self.files: list[Path] = []

    def finish(self, profile: Profile, prof) -> None:
        ceilings = roofline.attach(profile, roofline.ceilings_for(self.hardware, self.precision))
        self.files = [
            *write_profile(profile, prof, self.out_dir),
            roofline.plot(profile, ceilings, self.out_dir / roofline.PLOT_FILE),
        ]

    def metrics(self) -> dict:
        """MLflow metrics of the capture (empty when it did not happen in this process)."""
        p = self.profile
        if p is None:
            return {}
        verdict = p.extra.get("verdict") or {}
        out = {
            "profile/step_ms": p.step_ms,
            "profile/overhead_ms": p.overhead_ms,
            **{f"profile/{name}_ms": ms for name, ms in p.phases.items()},
        }
        if p.intensity is not None:
            out["profile/intensity"] = p.intensity
        for share in ("compute", "memory", "overhead"):
            if verdict.get(share) is not None:
                out[f"profile/{share}_bound_share"] = verdict[share]
        return out
