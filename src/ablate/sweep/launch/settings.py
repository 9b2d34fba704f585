"""Every launcher's settings (hydra.launcher), checked before anything is created.

Hydra calls the sweep callback's on_multirun_start, which creates the MLflow store and the sweep's
parent run, before it instantiates the sweeper and the launcher, so a bad `hydra.launcher.*` found
by the launcher itself would leave a store and a KILLED parent run behind. The command line checks
them first (cli/common.precheck) with `check_launcher`, using the parsers the launchers use.

    process launchers (sequential.yaml, parallel.yaml)   parse_process_settings (below)
    SLURM and submitit's local executor                  slurm.parse_settings
    Hydra's basic launcher                               nothing to check
"""

from __future__ import annotations

from dataclasses import dataclass

from ablate.config import ConfigError, build
from ablate.sweep.launch.slurm import parse_settings

PROCESS_LAUNCHER = "hydra_plugins.ablate_launcher.process_launcher.ProcessLauncher"
SUBMITIT_LAUNCHER = "hydra_plugins.ablate_slurm.submitit_launcher.SubmititLauncher"
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


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
    settings = build(ProcessSettings, {k: v for k, v in (tree or {}).items() if k != "_target_"}, "hydra.launcher")
    settings.validate()
    return settings


def check_launcher(tree: dict) -> None:
    """Parse hydra.launcher (a plain, resolved dict) with its launcher's own parser; ConfigError
    naming the key, the value and what is valid. Launchers this project does not know are left to
    Hydra."""
    target = str((tree or {}).get("_target_", ""))
    if target == PROCESS_LAUNCHER:
        parse_process_settings(tree)
    elif target == SUBMITIT_LAUNCHER:
        parse_settings(tree)
