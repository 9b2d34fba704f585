"""Hydra discovers launchers only inside the `hydra_plugins` namespace package (hydra.core.plugins),
so the plugin class lives here and the work is done by `ablate.sweep`'s SLURM launcher (imported lazily:
Hydra imports every plugin module at start-up, and this one must stay cheap).

Configs: hydra/launcher=ablate_slurm (short name slurm) and ablate_submitit_local, registered in
Hydra's ConfigStore by config.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

import hydra_plugins.ablate_slurm.config  # noqa: F401  registers hydra/launcher=ablate_slurm, ablate_submitit_local


class SubmititLauncher(Launcher):
    """A multirun as one job array through submitit: on SLURM, or as local processes."""

    def __init__(self, **params: Any) -> None:
        from ablate.config import parse_submitit_settings

        self.settings = parse_submitit_settings(params)  # a ConfigError: one line, said by ablate.hydra_app
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.config: DictConfig | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from ablate.sweep import slurm

        sweep = self._open_sweep()
        plan = sweep.job_plan if sweep is not None else None  # each job as the sweep's plan made it
        return slurm.launch(*self._context(), job_overrides, initial_job_idx, self.settings, plan=plan)

    def launch_as_slots_free(self, feed, slots: int, initial_job_idx: int) -> list[JobReturn]:
        """ablate.sweep.launch.feed.SlotLauncher: each job submitted on its own as one of `slots` ends."""
        from ablate.sweep import slurm

        self._open_sweep()
        return slurm.launch_as_slots_free(*self._context(), feed, slots, initial_job_idx, self.settings)

    def _open_sweep(self):
        """The sweep's callback, the sweep opened (a sweeper that does not plan has not opened it)."""
        from ablate.sweep import sweep_callback

        assert self.hydra_context is not None
        sweep = sweep_callback(self.hydra_context)
        if sweep is not None:
            sweep.ensure_open()
        return sweep

    def _context(self) -> tuple:
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        return self.hydra_context, self.task_function, self.config
