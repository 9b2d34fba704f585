"""Hydra discovers sweepers only inside the `hydra_plugins` namespace package (hydra.core.plugins),
so the plugin class lives here; the work is done by `ablate.sweep.plan` and the sweep callback
(imported lazily: Hydra imports every plugin module at start-up, and this one must stay cheap).

Config: PlanningSweeperConf, registered in Hydra's ConfigStore as hydra/sweeper=ablate_grid, which
ablate's primary config picks (conf/config.yaml); Hydra's `basic` stays Hydra's.
"""
