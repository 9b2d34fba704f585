"""Hydra discovers launchers only inside the `hydra_plugins` namespace package (hydra.core.plugins),
so the plugin class lives here and the work is done by `ablate.launcher` (imported lazily: Hydra
imports every plugin module at start-up, and this one must stay cheap).

Configs: conf/hydra/launcher/sequential.yaml and parallel.yaml.
"""

from __future__ import annotations

from typing import Optional, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class ProcessLauncher(Launcher):
    """Each job in its own process on this machine, `workers` at a time, `threads_per_job` threads each."""

    def __init__(self, workers: Optional[int] = None, threads_per_job: Optional[int] = None, stop_timeout_s: float = 60.0):
        self.workers = workers
        self.threads_per_job = threads_per_job
        self.stop_timeout_s = stop_timeout_s
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None
        self.config: Optional[DictConfig] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from ablate.launcher import LaunchSettings, launch

        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        settings = LaunchSettings(self.workers, self.threads_per_job, self.stop_timeout_s)
        return launch(self.hydra_context, self.task_function, self.config, job_overrides, initial_job_idx, settings)
