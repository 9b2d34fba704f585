"""hydra/launcher=slurm and hydra/launcher=submitit_local in Hydra's ConfigStore: the submitit
launcher's settings (ablate.config.launch.SubmititSettings, the schema each key is composed against)
with this plugin's launcher as the target, as Hydra's own submitit plugin registers its queues."""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from ablate.config import SubmititSettings


@dataclass
class SubmititLauncherConf(SubmititSettings):
    _target_: str = "hydra_plugins.ablate_slurm.submitit_launcher.SubmititLauncher"


store = ConfigStore.instance()
# Each job of a multirun as one task of a SLURM job array: python -m ablate +sweep=precision
# hydra/launcher=slurm hydra.launcher.partition=gpu hydra.launcher.timeout_min=240
store.store(group="hydra/launcher", name="slurm", node=SubmititLauncherConf(cluster="slurm"), provider="ablate")
# The same code path without a cluster: each job a local process of submitit's local executor, all at
# once, for debugging what a job does (its logs and jobs.json land where slurm's do).
store.store(
    group="hydra/launcher",
    name="submitit_local",
    node=SubmititLauncherConf(cluster="local", signal_delay_s=30, poll_s=1.0),
    provider="ablate",
)
