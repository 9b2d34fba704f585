"""The process launchers' settings (hydra.launcher of sequential.yaml and parallel.yaml), parsed
by the launcher when Hydra builds it: after the sweep callback's on_multirun_start, which creates
nothing, and before the sweeper plans the first job, so that a bad `hydra.launcher.*` is one line
and leaves nothing behind. (The SLURM launcher's are slurm.parse_settings.)"""

from __future__ import annotations

from dataclasses import dataclass

from ablate.config import ConfigError, build


@dataclass
class ProcessSettings:
    """hydra.launcher of the process launchers (conf/hydra/launcher/sequential.yaml, parallel.yaml)."""

    workers: int | None = None  # runs at once; None: one per core
    threads_per_job: int | None = None  # torch threads per run; None: cores // workers
    stop_timeout_s: float = 60.0  # after SIGTERM, how long a job may take to stop before SIGKILL

    def validate(self) -> None:
        for key in ("workers", "threads_per_job"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(
                    f"hydra.launcher.{key}={value} is invalid (valid: a whole number >= 1, or null for automatic)"
                )
        if self.stop_timeout_s < 0:
            raise ConfigError(f"hydra.launcher.stop_timeout_s={self.stop_timeout_s} is negative (valid: >= 0 seconds)")


def parse_process_settings(tree: dict) -> ProcessSettings:
    settings = build(ProcessSettings, tree or {}, "hydra.launcher")
    settings.validate()
    return settings
