"""hydra/sweeper=ablate_optuna in Hydra's ConfigStore (`optuna` is hydra-optuna-sweeper's): the
search's settings (ablate.config.search.SearchConfig,
the schema each key is composed against) with this plugin's sweeper as the target."""

from dataclasses import dataclass

from ablate.config import SearchConfig
from ablate.sweep import register_plugin


@dataclass
class OptunaSweeperConf(SearchConfig):
    _target_: str = "hydra_plugins.ablate_optuna.optuna_sweeper.OptunaSweeper"


# Trials are asked in batches of n_jobs, launched through hydra/launcher (basic, sequential, parallel,
# slurm), and pruned from inside their jobs on the validation loss at each evaluation.
register_plugin("hydra/sweeper", "ablate_optuna", OptunaSweeperConf)
