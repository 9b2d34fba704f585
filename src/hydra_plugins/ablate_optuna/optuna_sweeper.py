"""`hydra/sweeper=ablate_optuna`: an Optuna study whose trials run through the configured launcher and
can be pruned from inside their jobs (ablate.search)."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

import hydra_plugins.ablate_optuna.config  # noqa: F401  registers hydra/sweeper=ablate_optuna


class OptunaSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        # Every key of hydra.sweeper, composed against ablate.config.search.SearchConfig.
        self.settings = settings
        self.config: DictConfig | None = None
        self.launcher = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        from ablate.config import parse_search
        from ablate.hydra_app import resolved_task
        from ablate.search import check_sweeper, run_study
        from ablate.sweep import sweep_callback

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        settings = {
            k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
            for k, v in self.settings.items()
        }
        # Checked before the sweep is opened (its store, its parent run): nothing exists yet. A
        # ConfigError is said in one line by the app that runs this sweeper (ablate.hydra_app).
        task_args = [a for a in arguments if not a.lstrip("+~").startswith("hydra")]
        check_sweeper(settings, task_args, resolved_task(self.config), str(self.config.hydra.runtime.cwd))
        cfg = parse_search(settings)
        sweep = sweep_callback(self.hydra_context)
        if sweep is not None:
            sweep.open(None)
        return run_study(cfg, self.config, self.launcher, list(arguments))
