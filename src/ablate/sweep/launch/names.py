"""The names ablate's Hydra plugins go by, and the check that they are still ablate's.

Hydra's ConfigStore is one per interpreter, shared by every Hydra app that runs in it, and Hydra
imports every plugin it finds in the environment at start-up. So the plugins register under names
of ablate's own only (`ablate_grid`, `ablate_parallel`, ...), which no other app picks: Hydra's
`basic` and the upstream plugins' names (`submitit_local`, `submitit_slurm`, `optuna`) stay theirs,
and another app composes exactly as it would without ablate installed. ablate's primary config picks
`hydra/sweeper: ablate_grid`; the short names its users type (`hydra/launcher=parallel`, `slurm`,
`sequential`) are config files in ablate's own config folder (conf/hydra/launcher/), which only
ablate's commands search, each extending the registered node.

A name ablate registers is never taken from another provider: if one is there first, it stays, and
`check_plugin_providers` refuses the sweep in one line, as it does when another provider's registration came
after ablate's and replaced it.
"""

from __future__ import annotations

from ablate.config import ConfigError

PROVIDER = "ablate"
SWEEPERS = ("ablate_grid", "ablate_optuna")
LAUNCHERS = ("ablate_sequential", "ablate_parallel", "ablate_slurm", "ablate_submitit_local")
# The short names in conf/hydra/launcher/, each the registered node it extends.
ALIASES = {"sequential": "ablate_sequential", "parallel": "ablate_parallel", "slurm": "ablate_slurm"}


def register_plugin(group: str, name: str, node) -> None:
    """node in Hydra's ConfigStore as GROUP/NAME, provider ablate, unless another provider has it."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    if provider(group, name) not in (None, PROVIDER):
        return
    store.store(group=group, name=name, node=node, provider=PROVIDER)


def provider(group: str, name: str) -> str | None:
    """Who registered GROUP/NAME in Hydra's ConfigStore; None if nobody did."""
    from hydra.core.config_store import ConfigStore

    node = ConfigStore.instance().repo
    for part in group.split("/"):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    entry = node.get(f"{name}.yaml") if isinstance(node, dict) else None
    return getattr(entry, "provider", None) if entry is not None else None


def check_plugin_providers(choices: dict) -> None:
    """ConfigError, one line, when the sweeper or launcher a composed config picks (hydra.runtime.choices)
    is one of ablate's names, directly or by its short name, and another provider holds it."""
    from hydra.core.plugins import Plugins

    Plugins.instance()  # every plugin in the environment imported, so every registration made
    for group, names in (("hydra/sweeper", SWEEPERS), ("hydra/launcher", LAUNCHERS)):
        picked = choices.get(group)
        name = ALIASES.get(picked, picked) if group == "hydra/launcher" else picked
        if name not in names:
            continue
        holder = provider(group, name)
        if holder not in (None, PROVIDER):
            raise ConfigError(
                f"{group}={picked} is ablate's, but another Hydra plugin (provider {holder}) registered "
                f"{group}/{name} in this environment (valid: uninstall that plugin, or pick another {group})"
            )
