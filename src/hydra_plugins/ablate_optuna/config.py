"""hydra/sweeper=optuna in Hydra's ConfigStore: the search's settings (ablate.config.search.SearchConfig,
the schema each key is composed against) with this plugin's sweeper as the target."""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from ablate.config import SearchConfig


@dataclass
class OptunaSweeperConf(SearchConfig):
    _target_: str = "hydra_plugins.ablate_optuna.optuna_sweeper.OptunaSweeper"


# Trials are asked in batches of n_jobs, launched through hydra/launcher (basic, sequential, parallel,
# slurm), and pruned from inside their jobs on the validation loss at each evaluation.
ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="ablate")
