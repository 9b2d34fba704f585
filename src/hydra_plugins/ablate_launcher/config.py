"""hydra/launcher=ablate_sequential and ablate_parallel in Hydra's ConfigStore (`sequential` and
`parallel` in ablate's own config folder, conf/hydra/launcher/, extend them): the process
launchers' settings (ablate.config.launch.ProcessSettings, the schema each key is composed against)
with this plugin's launcher as the target, as Hydra's own plugins register theirs."""

from dataclasses import dataclass

from ablate.config import ProcessSettings
from ablate.sweep import register_plugin


@dataclass
class ProcessLauncherConf(ProcessSettings):
    _target_: str = "hydra_plugins.ablate_launcher.process_launcher.ProcessLauncher"


# One run at a time, each in its own process with every core's threads; Hydra's in-process launcher
# is hydra/launcher=basic.
register_plugin("hydra/launcher", "ablate_sequential", ProcessLauncherConf(workers=1))
# Several runs at once: hardware.workers of them (null: one per core), threads_per_job torch threads
# each (null: cores // workers, so workers x threads <= cores).
register_plugin(
    "hydra/launcher",
    "ablate_parallel",
    ProcessLauncherConf(workers="${hardware.workers}"),  # type: ignore[arg-type]  resolved by Hydra
)
