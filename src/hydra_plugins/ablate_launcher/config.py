"""hydra/launcher=sequential and hydra/launcher=parallel in Hydra's ConfigStore: the process
launchers' settings (ablate.config.launch.ProcessSettings, the schema each key is composed against)
with this plugin's launcher as the target, as Hydra's own plugins register theirs."""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from ablate.config import ProcessSettings


@dataclass
class ProcessLauncherConf(ProcessSettings):
    _target_: str = "hydra_plugins.ablate_launcher.process_launcher.ProcessLauncher"


store = ConfigStore.instance()
# One run at a time, each in its own process with every core's threads; Hydra's in-process launcher
# is hydra/launcher=basic.
store.store(group="hydra/launcher", name="sequential", node=ProcessLauncherConf(workers=1), provider="ablate")
# Several runs at once: hardware.workers of them (null: one per core), threads_per_job torch threads
# each (null: cores // workers, so workers x threads <= cores).
store.store(
    group="hydra/launcher",
    name="parallel",
    node=ProcessLauncherConf(workers="${hardware.workers}"),  # type: ignore[arg-type]  resolved by Hydra
    provider="ablate",
)
