"""Hydra discovers launchers only inside the `hydra_plugins` namespace package (hydra.core.plugins),
so the plugin class lives here and the work is done by `ablate.sweep.launch.process` (imported lazily: Hydra
imports every plugin module at start-up, and this one must stay cheap).

Configs: conf/hydra/launcher/sequential.yaml and parallel.yaml.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class ProcessLauncher(Launcher):
    """Each job in its own process on this machine, `workers` at a time, `threads_per_job` threads each."""

    def __init__(self, workers: int | None = None, threads_per_job: int | None = None, stop_timeout_s: float = 60.0):
        self.workers = workers
        self.threads_per_job = threads_per_job
        self.stop_timeout_s = stop_timeout_s
        self.pool = None  # the warm worker, kept across launches (an Optuna study's batches)
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.config: DictConfig | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import weakref

        from ablate.cli.common import fail
        from ablate.config import ConfigError
        from ablate.sweep.launch.pool import take
        from ablate.sweep.launch.process import WORK_DIR, launch, tracking_uri
        from ablate.sweep.launch.settings import parse_process_settings

        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        try:
            settings = parse_process_settings(
                {
                    "workers": self.workers,
                    "threads_per_job": self.threads_per_job,
                    "stop_timeout_s": self.stop_timeout_s,
                }
            )
        except ConfigError as exc:
            fail(str(exc))
        if self.pool is None:
            self.pool = take(tracking_uri(self.config), Path(str(self.config.hydra.sweep.dir)) / WORK_DIR)
            if not self.pool.prestarted:  # the sweep callback closes the one it started
                weakref.finalize(self, self.pool.close)  # at exit at the latest: the worker ends with its launcher
        try:
            return launch(
                self.hydra_context, self.task_function, self.config, job_overrides, initial_job_idx, settings, self.pool
            )
        except ConfigError as exc:
            fail(str(exc))
