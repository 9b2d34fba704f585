"""Hydra discovers sweepers only inside the `hydra_plugins` namespace package (hydra.core.plugins),
so the plugin class lives here; the work is done by `ablate.search.driver` (imported lazily:
Hydra imports every plugin module at start-up, and this one must stay cheap).

Config: `hydra/sweeper=ablate_optuna` (or `+sweep=lr`; `optuna` is hydra-optuna-sweeper's name),
registered in Hydra's ConfigStore by config.py.
"""
