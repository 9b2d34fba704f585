"""hydra/launcher=ablate_slurm (short name `slurm`, conf/hydra/launcher/slurm.yaml) and
ablate_submitit_local in Hydra's ConfigStore: the submitit
launcher's settings (ablate.config.launch.SubmititSettings, the schema each key is composed against)
with this plugin's launcher as the target, as Hydra's own submitit plugin registers its queues."""

from dataclasses import dataclass

from ablate.config import SubmititSettings
from ablate.sweep import register_plugin


@dataclass
class SubmititLauncherConf(SubmititSettings):
    _target_: str = "hydra_plugins.ablate_slurm.submitit_launcher.SubmititLauncher"


# Each job of a multirun as one task of a SLURM job array: python -m ablate +sweep=precision
# hydra/launcher=slurm hydra.launcher.partition=gpu hydra.launcher.timeout_min=240
register_plugin("hydra/launcher", "ablate_slurm", SubmititLauncherConf(cluster="slurm"))
# The same code path without a cluster: each job a local process of submitit's local executor, all at
# once, for debugging what a job does (its logs and jobs.json land where slurm's do). Not
# `submitit_local`: that is hydra-submitit-launcher's name.
register_plugin(
    "hydra/launcher", "ablate_submitit_local", SubmititLauncherConf(cluster="local", signal_delay_s=30, poll_s=1.0)
)
