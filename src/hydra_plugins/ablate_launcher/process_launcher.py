"""Hydra discovers launchers only inside the `hydra_plugins` namespace package (hydra.core.plugins),
so the plugin class lives here and the work is done by `ablate.sweep`'s process launcher (imported lazily: Hydra
imports every plugin module at start-up, and this one must stay cheap).

Configs: hydra/launcher=ablate_sequential and ablate_parallel (short names sequential, parallel),
registered in Hydra's ConfigStore by config.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

import hydra_plugins.ablate_launcher.config  # noqa: F401  registers hydra/launcher=ablate_sequential, ablate_parallel


class ProcessLauncher(Launcher):
    """Each job in its own process on this machine, `workers` at a time, `threads_per_job` threads each,
    `gpus_per_job` of `gpus` each (sweep/launch/gpus.py)."""

    def __init__(
        self,
        workers: int | None = None,
        threads_per_job: int | None = None,
        stop_timeout_s: float = 60.0,
        gpus: list | None = None,
        gpus_per_job: int = 1,
    ):
        from ablate.config import parse_process_settings

        # Hydra builds the launcher before the sweep's first job is planned: nothing exists yet, and
        # a ConfigError is said in one line by the app (ablate.hydra_app) that asked Hydra to build it.
        self.settings = parse_process_settings(
            {
                "workers": workers,
                "threads_per_job": threads_per_job,
                "stop_timeout_s": stop_timeout_s,
                "gpus": gpus,
                "gpus_per_job": gpus_per_job,
            }
        )
        self.pool = None  # the warm worker, kept across launches (an Optuna study's batches)
        self.sweep = None  # the sweep callback: its warm worker, what its plan made of each job, its live line
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.config: DictConfig | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from ablate.sweep import process, sweep_callback

        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config
        self.sweep = sweep_callback(hydra_context)
        if self.sweep is not None:  # it boots while the sweeper composes and plans the jobs
            self.pool = self.sweep.start_worker(process.tracking_uri(config))

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from ablate.sweep import process

        sweep = self.sweep
        return self._run(
            process.launch,
            job_overrides,
            initial_job_idx,
            self.settings,
            self._ready_pool(),
            plan=sweep.job_plan if sweep is not None else None,
            on_stop=sweep.quiet if sweep is not None else None,
        )

    def launch_as_slots_free(self, feed, slots: int, initial_job_idx: int) -> list[JobReturn]:
        """ablate.sweep.launch.feed.SlotLauncher: a new job whenever one ends (an Optuna study's trials)."""
        from ablate.sweep import process

        sweep = self.sweep
        return self._run(
            process.launch_as_slots_free,
            feed,
            slots,
            initial_job_idx,
            self.settings,
            self._ready_pool(),
            on_stop=sweep.quiet if sweep is not None else None,
        )

    def _ready_pool(self):
        """The warm worker, kept across launches, told where this sweep's logs go."""
        import weakref

        from ablate.sweep import process

        assert self.config is not None
        started = self.pool is None
        self.pool = process.warm_pool(self.pool, self.config)
        if started:
            weakref.finalize(self, self.pool.close)  # at exit at the latest: the worker ends with its launcher
        return self.pool

    def _run(self, launch_fn, *args, **kwargs):
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        if self.sweep is not None:
            self.sweep.ensure_open()  # a sweeper that does not plan has not opened the sweep
        return launch_fn(self.hydra_context, self.task_function, self.config, *args, **kwargs)
